#!/usr/bin/env bash
# Two "hosts" on one machine: two network namespaces joined by a veth pair,
# one rank in each, MPI over TCP on the veth addresses only. mpirun runs in
# the first namespace and starts the second rank through a launch agent
# that enters the other namespace (nsenter; no ssh), with a hostname of its
# own. The namespaces are held by a sleeping process each rather than named
# with `ip netns`, whose exec needs a mount namespace of its own (which a
# chroot cannot give). Checks llama-tp-compare across the pair (float sums and
# split-invariant sums, a llama, a glm4moe and a deepseek2), that the traffic
# went over the veth pair, and a model mismatch naming the other host.
# Needs root and network namespaces; where the kernel refuses them the test
# says so and fails under CI (CI=true), or is skipped (exit 77) elsewhere.
# usage: mpi_two_hosts.sh MAKE_MODEL COMPARE WORKDIR
set -uo pipefail
make_model=$1 compare=$2 work=$3
mkdir -p "$work"
command -v mpirun >/dev/null || { echo "FAILED: mpirun not found (install openmpi-bin)"; exit 1; }

tag=lltp$$
net=10.231.$(($$ % 250)).
addr_a=${net}1 addr_b=${net}2
holder_a="" holder_b=""

# Every process in either namespace, and the namespaces with their holders.
cleanup() {
    for h in $holder_a $holder_b; do
        for p in /proc/[0-9]*; do
            [[ $(readlink "$p/ns/net" 2>/dev/null) == "$(readlink "/proc/$h/ns/net" 2>/dev/null)" ]] &&
                kill -9 "${p#/proc/}" 2>/dev/null
        done
    done
}
trap cleanup EXIT

refused() {
    echo "network namespaces are not available here: $1"
    if [[ ${CI:-} == true ]]; then
        echo "FAILED: the two-host test cannot run (CI needs root and ip netns)"
        exit 1
    fi
    echo "SKIPPED: two-host test (not counted as passing)"
    exit 77
}

command -v ip >/dev/null || refused "no ip command (iproute2)"
for tool in unshare nsenter; do command -v $tool >/dev/null || refused "no $tool (util-linux)"; done
unshare --net sleep 3600 & holder_a=$!
unshare --net sleep 3600 & holder_b=$!
disown -a  # killed at the end without a job report
in_a=(nsenter --net=/proc/$holder_a/ns/net)
in_b=(nsenter --net=/proc/$holder_b/ns/net)
sleep 0.2
err=$( { kill -0 $holder_a && kill -0 $holder_b &&
         ip link add "${tag}va" type veth peer name "${tag}vb" &&
         ip link set "${tag}va" netns $holder_a && ip link set "${tag}vb" netns $holder_b &&
         "${in_a[@]}" ip addr add "$addr_a/24" dev "${tag}va" && "${in_b[@]}" ip addr add "$addr_b/24" dev "${tag}vb" &&
         "${in_a[@]}" ip link set "${tag}va" up && "${in_b[@]}" ip link set "${tag}vb" up &&
         "${in_a[@]}" ip link set lo up && "${in_b[@]}" ip link set lo up; } 2>&1) || refused "$err"

# The launch agent: Open MPI calls it as `agent HOST COMMAND...`.
agent="$work/netns-agent.sh"
cat >"$agent" <<AGENT
#!/bin/sh
host=\$1; shift
[ "\$host" = "$addr_b" ] || { echo "netns agent: unknown host \$host" >&2; exit 1; }
exec nsenter --net=/proc/$holder_b/ns/net unshare --uts sh -c 'hostname llama-tp-host-b; exec sh -c "\$0"' "\$*"
AGENT
chmod +x "$agent"
printf '%s slots=1\n%s slots=1\n' "$addr_a" "$addr_b" >"$work/hostfile"

mpi=("${in_a[@]}" unshare --uts sh -c 'hostname llama-tp-host-a; exec "$@"' sh
     mpirun --allow-run-as-root --bind-to none --hostfile "$work/hostfile" -n 2
     --mca plm_rsh_agent "$agent" --mca btl tcp,self
     --mca btl_tcp_if_include "${net}0/24" --mca oob_tcp_if_include "${net}0/24")

model="$work/llama-q8_0.gguf"
"$make_model" --arch llama --type q8_0 --seed 7 --n-embd 384 --n-head 12 --n-head-kv 6 --head-dim 32 --n-ff 1536 \
    --n-layer 2 -o "$model" >/dev/null 2>&1 || { echo "FAILED: generating the model"; exit 1; }

tx_bytes() { "${in_a[@]}" ip -s -j link show "${tag}va" | python3 -c 'import json,sys; print(json.load(sys.stdin)[0]["stats64"]["tx"]["bytes"])'; }

failures=0 cases=0
check() {  # description, compare arguments...
    local what=$1; shift
    cases=$((cases + 1))
    local before out rc
    before=$(tx_bytes)
    out=$(timeout 300 "${mpi[@]}" "$compare" -m "$model" --reference tp1 --json -t 1 --prompts 3 --n-tokens 8 "$@" \
        2>"$work/stderr.log")
    rc=$?
    local sent=$(($(tx_bytes) - before))
    echo "$what: $sent bytes over the veth pair: $out"
    # Split-invariant sums: identical probabilities, whatever the contract's clause.
    if [[ $* == *--split-invariant* && $out != *'"max_abs_prob_diff": 0.000e+00,'* ]]; then
        echo "FAILED: $what: split-invariant sums gave other probabilities than one rank" >&2
        rc=1
    fi
    if ((rc != 0)) || [[ $out != *'"pass": true'* ]] || ((sent < 100000)); then
        failures=$((failures + 1))
        echo "FAILED: $what (exit $rc)" >&2
        tail -5 "$work/stderr.log" >&2
    fi
    grep -q "rank 1 of 2 on llama-tp-host-b" "$work/stderr.log" || {
        failures=$((failures + 1)); echo "FAILED: $what: rank 1 did not run on the second host" >&2; }
}
check "two hosts, float sums" --no-split-invariant
check "two hosts, split-invariant sums" --split-invariant

# A different model file on the second host: refused on both, naming it.
cases=$((cases + 1))
other="$work/other.gguf"
"$make_model" --arch llama --type q8_0 --seed 8 --n-embd 384 --n-head 12 --n-head-kv 6 --head-dim 32 --n-ff 1536 \
    --n-layer 2 -o "$other" >/dev/null 2>&1
mismatch=$(timeout 120 "${mpi[@]}" sh -c \
    "[ \"\$OMPI_COMM_WORLD_RANK\" = 1 ] && m='$other' || m='$model'; exec '$compare' -m \"\$m\" --reference tp1 -t 1" \
    2>&1)
if [[ $? == 0 || $mismatch != *"process 1 on llama-tp-host-b (model file '$other') does not match process 0 on llama-tp-host-a (model file '$model')"* ]]; then
    failures=$((failures + 1))
    echo "FAILED: a mismatched model was not refused with the hosts named:" >&2
    tail -5 <<<"$mismatch" >&2
else
    echo "mismatched model refused: $(grep -m1 'refusing to start' <<<"$mismatch")"
fi

# Routed experts beside a shared expert (GLM-4.5's FFN) across the two hosts.
model="$work/glm4moe-q8_0.gguf"
"$make_model" --arch glm4moe --type q8_0 --seed 7 --n-embd 384 --n-head 12 --n-head-kv 6 --head-dim 32 --n-ff 1536 \
    --n-layer 3 --n-expert 4 --n-expert-used 2 --n-ff-exp 1024 -o "$model" >/dev/null 2>&1 ||
    { echo "FAILED: generating the glm4moe model"; exit 1; }
check "two hosts, glm4moe float sums" --no-split-invariant
check "two hosts, glm4moe split-invariant sums" --split-invariant
# Latent attention: each host caches the whole latent, its heads split (DeepSeek V3).
model="$work/deepseek2-q8_0.gguf"
"$make_model" --arch deepseek2 --type q8_0 --seed 7 --n-embd 384 --n-head 12 --n-layer 3 --n-expert 8 \
    --n-expert-used 2 --n-ff-exp 512 -o "$model" >/dev/null 2>&1 || { echo "FAILED: generating the deepseek2 model"; exit 1; }
check "two hosts, deepseek2 float sums" --no-split-invariant
check "two hosts, deepseek2 split-invariant sums" --split-invariant
rm -f "$work"/*.gguf
echo "two hosts: $((cases - failures)) passed, $failures failed"
((failures == 0))

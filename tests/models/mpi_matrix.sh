#!/usr/bin/env bash
# Ranks in several processes (mpirun on this machine) against one device:
# for one architecture, f32 and q8_0 with the float sums and q8_0 with
# split-invariant sums (identical probabilities), over shared memory and
# forced over TCP on loopback with 2 and 4 processes, and 2 processes of 2
# thread ranks each. Verdicts are llama-tp-compare's (the accuracy contract).
# usage: mpi_matrix.sh MAKE_MODEL COMPARE ARCH WORKDIR
set -uo pipefail
make_model=$1 compare=$2 arch=$3 work=$4
mkdir -p "$work"
command -v mpirun >/dev/null || { echo "FAILED: mpirun not found (install openmpi-bin)"; exit 1; }

shape=(--n-embd 384 --n-head 12 --head-dim 32 --n-ff 1536 --n-layer 2 --n-head-kv 6)
case $arch in
    qwen2|qwen3) shape+=(--tied-output) ;;
    qwen3moe) shape+=(--tied-output --n-expert 4 --n-expert-used 2 --n-ff-exp 1024) ;;
    # Linear attention's state split across processes by key heads.
    qwen35) shape+=(--full-attention-interval 2 --ssm-n-group 12 --ssm-dt-rank 24 --ssm-d-state 128) ;;
    # The same grouped by key head, beside routed and shared experts (Qwen3-Next).
    qwen3next) shape+=(--full-attention-interval 2 --ssm-n-group 12 --ssm-dt-rank 24 --ssm-d-state 128
                       --n-expert 4 --n-expert-used 2 --n-ff-exp 1024) ;;
    # A dense layer, then routed experts by sigmoid scores beside an ungated shared expert (GLM-4.5).
    glm4moe) shape+=(--n-layer 3 --n-expert 4 --n-expert-used 2 --n-ff-exp 1024) ;;
    # Latent attention (each process caching the whole latent) beside group-limited experts (DeepSeek V3).
    deepseek2) shape+=(--head-dim 48 --n-layer 3 --n-expert 8 --n-expert-used 2 --n-ff-exp 1024) ;;
    # Biases on the experts' down projection: only the rank holding the first cell adds them.
    gpt-oss) shape+=(--n-expert 4 --n-expert-used 2 --n-ff-exp 1024 --n-swa 8) ;;
    # Global layers with their own head size, per-layer embeddings, the last two layers sharing KV.
    gemma4) shape+=(--n-head-kv 12 --head-dim-global 48 --n-swa 8 --swa-pattern 2 --n-layer 4
                    --n-embd-per-layer 64 --n-kv-shared 2) ;;
esac
# Waiting ranks test their requests with backoff; Open MPI's own waits
# (start-up) yield as well, so that 4 processes share 2 cores.
mpi=(mpirun --allow-run-as-root --oversubscribe --bind-to none --mca mpi_yield_when_idle 1)
tcp=(--mca btl tcp,self --mca btl_tcp_if_include lo)

failures=0 cases=0
check() {  # description, mpirun arguments..., --, compare arguments...
    local what=$1; shift
    local launch=()
    while [[ $1 != -- ]]; do launch+=("$1"); shift; done
    shift
    cases=$((cases + 1))
    local out rc
    out=$(timeout 300 "${mpi[@]}" "${launch[@]}" "$compare" "$@" --json -t 1 --prompts 3 --n-tokens 8 \
        2>"$work/stderr.log")
    rc=$?
    echo "$what: $out"
    # Split-invariant sums: identical probabilities, whatever the contract's clause.
    if [[ $* == *--split-invariant* && $out != *'"max_abs_prob_diff": 0.000e+00,'* ]]; then
        echo "FAILED: $what: split-invariant sums gave other probabilities than one rank" >&2
        rc=1
    fi
    if ((rc != 0)) || [[ $out != *'"pass": true'* ]]; then
        failures=$((failures + 1))
        echo "FAILED: $what (exit $rc)" >&2
        tail -5 "$work/stderr.log" >&2
    fi
}

for type in f32 q8_0; do
    model="$work/$arch-$type.gguf"
    if ! "$make_model" --arch "$arch" --type "$type" --seed 7 "${shape[@]}" -o "$model" >/dev/null 2>"$work/make.log"; then
        echo "FAILED: generating $model" >&2
        cat "$work/make.log" >&2
        exit 1
    fi
    check "$arch $type 2 processes" -n 2 -- -m "$model" --reference tp1 --no-split-invariant
    check "$arch $type 2 processes over tcp" -n 2 "${tcp[@]}" -- -m "$model" --reference tp1 --no-split-invariant
    check "$arch $type 2 processes x 2 ranks" -n 2 -- -m "$model" --reference tp1 --tp 2 --no-split-invariant
done
# Four processes: both types over shared memory, and forced over TCP.
for type in f32 q8_0; do
    check "$arch $type 4 processes" -n 4 -- -m "$work/$arch-$type.gguf" --reference tp1 --no-split-invariant
done
model="$work/$arch-q8_0.gguf"
check "$arch q8_0 4 processes over tcp" -n 4 "${tcp[@]}" -- -m "$model" --reference tp1 --no-split-invariant
for launch in "-n 2" "-n 2 ${tcp[*]}" "-n 4" "-n 4 ${tcp[*]}"; do
    # shellcheck disable=SC2086
    check "$arch q8_0 split-invariant $launch" $launch -- -m "$model" --reference tp1 --split-invariant
done
check "$arch q8_0 split-invariant 2 processes x 2 ranks" -n 2 -- -m "$model" --reference tp1 --split-invariant --tp 2
if [[ $arch == llama ]]; then
    # A model in several files: each process reads its slices from whichever part holds them.
    "$make_model" --arch llama --type q8_0 --seed 7 "${shape[@]}" --split-max-size 2M -o "$work/parts.gguf" \
        >/dev/null 2>&1
    check "llama q8_0 in parts, 2 processes" -n 2 -- -m "$(echo "$work"/parts-00001-of-*.gguf)" --reference tp1
    # nccl asked for on CPU ranks: mpi, with one line saying why.
    check "llama q8_0 --allreduce nccl on CPU ranks, 2 processes" -n 2 -- -m "$model" --reference tp1 \
        --allreduce nccl
    want="allreduce engine nccl unavailable (the ranks' values are in host memory); using mpi"
    if [[ $(grep -c -F "$want" "$work/stderr.log") != 1 ]]; then
        failures=$((failures + 1))
        echo "FAILED: no single warning line '$want'" >&2
        cat "$work/stderr.log" >&2
    fi
fi
rm -f "$work"/*.gguf
echo "$arch: $((cases - failures)) passed, $failures failed"
((failures == 0))

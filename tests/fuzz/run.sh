#!/usr/bin/env bash
# Runs one fuzz target for a bounded time from its committed seeds and the
# inputs that once crashed it (tests/fuzz/corpus/NAME, regressions/NAME).
# New inputs go to a work folder of the build, never into the source tree.
# Usage: run.sh FUZZER NAME SECONDS WORK_DIR
set -euo pipefail
fuzzer=$1 name=$2 seconds=$3 work=$4
here=$(cd "$(dirname "$0")" && pwd)
rm -rf "$work"
mkdir -p "$work/corpus" "$work/artifacts"
seeds=("$here/corpus/$name")
[[ -d $here/regressions/$name ]] && seeds+=("$here/regressions/$name")
dict=()
[[ -f $here/$name.dict ]] && dict=(-dict="$here/$name.dict")
# clang 14's sanitizers cannot place their shadow memory under the 32 bits
# of address randomisation newer kernels use: run without it where allowed.
no_aslr=()
setarch "$(uname -m)" -R true 2>/dev/null && no_aslr=(setarch "$(uname -m)" -R)
# One job on a shared machine; a crash, a leak, an input over 10 s or 2 GiB fails the run.
"${no_aslr[@]}" "$fuzzer" -max_total_time="$seconds" -timeout=10 -rss_limit_mb=2048 -print_final_stats=1 \
    -artifact_prefix="$work/artifacts/" "${dict[@]}" "$work/corpus" "${seeds[@]}" 2>"$work/log" || {
    tail -60 "$work/log"
    echo "fuzz $name: FAILED; the input is in $work/artifacts/ (add it to tests/fuzz/regressions/$name once fixed)"
    exit 1
}
runs=$(grep -m1 -o 'stat::number_of_executed_units: *[0-9]*' "$work/log" | grep -o '[0-9]*$')
echo "fuzz $name: $runs inputs in $seconds s, no crash"

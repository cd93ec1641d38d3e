#!/usr/bin/env bash
# The checks of GPU ranks on a machine with an NVIDIA GPU, in one run that
# ends well inside 10 minutes; logs and summary.json go to RESULTS_DIR.
#
#   tools/gpu-check.sh RESULTS_DIR
#
# Binaries: LLAMA_TP_GPU_BIN names a bin/ folder built elsewhere with
# -DLLAMA_TP_CUDA=ON -DLLAMA_TP_NCCL=ON (compiled for sm_90 on a CPU machine
# and carried); otherwise the script builds into build-gpu/ from
# LLAMA_TP_LLAMA_CPP_DIR (a copy of the pinned llama.cpp: the GPU machine
# reaches no registry) with every core. One GPU is enough: GGML_CUDA_DEVICES=2
# makes two devices of it for the two-rank checks.
#
# Checks: the GPU engines' unit test; TP=1 on the GPU against upstream on the
# GPU; TP=2 against TP=1 with the internal, nccl and butterfly engines, F32
# and BF16 wire, and each engine's own wire; --split-invariant TP=2 against TP=1 (identical
# probabilities); decode and prefill against upstream on the 1b preset, and
# at TP=2 on two devices of the GPU, each segment waited for on the host,
# queued on the GPU's streams, and whole steps captured into CUDA graphs
# (LLAMA_TP_COLLECTIVE_GRAPH_CAPTURE=1); the internal and nccl
# engines' latency per size beside the cpu engine's (the internal engine
# with its own wire and copy engines, and F32 through its kernels only);
# one server start answering a chat completion.
set -uo pipefail
out=${1:?usage: tools/gpu-check.sh RESULTS_DIR}
mkdir -p "$out"
cd "$(dirname "$0")/.."
exec > >(tee "$out/gpu-check.log") 2>&1
start=$(date +%s)
results=()  # "name rc seconds"

# name, command...: runs it (at most LLAMA_TP_GPU_STEP_TIMEOUT seconds, default 180), its output to
# $out/NAME.log (JSON to $out/NAME.json where it prints one)
step() {
    local name=$1
    shift
    local t0 rc
    t0=$(date +%s)
    echo "== $name: $*"
    if declare -F "$1" >/dev/null; then
        "$@" >"$out/$name.log" 2>&1  # a function of this script: bounded by its own waits
    else
        timeout "${LLAMA_TP_GPU_STEP_TIMEOUT:-180}" "$@" >"$out/$name.log" 2>&1
    fi
    rc=$?
    grep -h '^{' "$out/$name.log" | tail -1 >"$out/$name.json" || true
    [[ -s $out/$name.json ]] || rm -f "$out/$name.json"
    results+=("$name $rc $(($(date +%s) - t0))")
    echo "   rc=$rc ($(($(date +%s) - t0)) s)"
    tail -3 "$out/$name.log"
}

nvidia-smi -L || echo "warning: nvidia-smi found no GPU"
lscpu | grep -E '^(Model name|CPU\(s\)):' || true
echo "CPU flags: $(grep -o -w -E 'avx512f|avx512fp16|avx512_vnni|avx512_bf16|amx_tile' /proc/cpuinfo | sort -u | tr '\n' ' ')"
nvcc --version | tail -1 || true

bin=${LLAMA_TP_GPU_BIN:-}
if [[ -z $bin ]]; then
    bin=build-gpu/bin
    args=(-DCMAKE_BUILD_TYPE=Release -DLLAMA_TP_CUDA=ON -DLLAMA_TP_NCCL=ON -DLLAMA_TP_MPI=OFF
          -DLLAMA_TP_BUILD_UPSTREAM_TOOLS=OFF)
    [[ -n ${LLAMA_TP_LLAMA_CPP_DIR:-} ]] && args+=(-DLLAMA_TP_LLAMA_CPP_DIR="$LLAMA_TP_LLAMA_CPP_DIR")
    step configure cmake -S . -B build-gpu -G Ninja "${args[@]}"
    step build cmake --build build-gpu -j "$(nproc)"
fi
models=$out/models
mkdir -p "$models"
"$bin/llama-tp-make-model" --preset small --type q8_0 -o "$models/small-q8_0.gguf" >/dev/null
"$bin/llama-tp-make-model" --preset small --type f16 -o "$models/small-f16.gguf" >/dev/null
"$bin/llama-tp-make-model" --preset 1b --type q8_0 -o "$models/1b-q8_0.gguf" >/dev/null

step unit-cuda-allreduce env GGML_CUDA_DEVICES=2 "$bin/test-cuda-allreduce"
step unit-allreduce-chain "$bin/test-allreduce" --gtest_filter='AllReduceChain*:AllReduceFactory*'
for m in small-q8_0 small-f16; do
    step "tp1-vs-upstream-$m" "$bin/llama-tp-compare" -m "$models/$m.gguf" --reference upstream --json
done
for engine in internal nccl butterfly; do
    step "tp2-$engine-f32" env GGML_CUDA_DEVICES=2 "$bin/llama-tp-compare" -m "$models/small-f16.gguf" \
        --reference tp1 --tp 2 --allreduce "$engine" --f32-wire --json
    step "tp2-$engine-bf16" env GGML_CUDA_DEVICES=2 "$bin/llama-tp-compare" -m "$models/small-f16.gguf" \
        --reference tp1 --tp 2 --allreduce "$engine" --bf16-wire --json
done
# The engine's own wire (internal: BF16; prompts' sums through the copy engines from 4K on).
step tp2-internal-default env GGML_CUDA_DEVICES=2 LLAMA_TP_INTERNAL_COPY_MIN_BYTES=4K "$bin/llama-tp-compare" \
    -m "$models/small-f16.gguf" --reference tp1 --tp 2 --allreduce internal --json
for m in small-q8_0 small-f16; do
    step "tp2-split-invariant-$m" env GGML_CUDA_DEVICES=2 "$bin/llama-tp-compare" -m "$models/$m.gguf" \
        --reference tp1 --tp 2 --allreduce internal --split-invariant --max-abs-dp 0 --json
done
step bench-1b "$bin/llama-tp-bench" -m "$models/1b-q8_0.gguf" -p 512 -n 256 -r 5 --vs-upstream --json
step bench-1b-depth-1000 "$bin/llama-tp-bench" -m "$models/1b-q8_0.gguf" -p 0 -n 128 -d 1000 -r 5 --vs-upstream --json
step bench-1b-split-invariant "$bin/llama-tp-bench" -m "$models/1b-q8_0.gguf" -p 512 -n 128 -r 3 --split-invariant \
    --json
# Each segment waited for on the host (the default), and queued on the
# streams (LLAMA_TP_STREAM_COLLECTIVES=1; on one GPU with every kernel
# loaded up front: runtime/plan/runtime_plan.h, stream_collectives_asked).
on_stream=(env GGML_CUDA_DEVICES=2 LLAMA_TP_STREAM_COLLECTIVES=1 CUDA_MODULE_LOADING=EAGER)
step tp2-internal-f32-on-stream "${on_stream[@]}" "$bin/llama-tp-compare" -m "$models/small-f16.gguf" \
    --reference tp1 --tp 2 --allreduce internal --json
step tp2-split-invariant-small-q8_0-on-stream "${on_stream[@]}" "$bin/llama-tp-compare" \
    -m "$models/small-q8_0.gguf" --reference tp1 --tp 2 --allreduce internal --split-invariant --max-abs-dp 0 --json
step bench-1b-tp2 env GGML_CUDA_DEVICES=2 "$bin/llama-tp-bench" -m "$models/1b-q8_0.gguf" -p 512 -n 128 -r 3 \
    --tp 2 --allreduce internal --json
step bench-1b-tp2-on-stream "${on_stream[@]}" "$bin/llama-tp-bench" -m "$models/1b-q8_0.gguf" -p 512 -n 128 \
    -r 3 --tp 2 --allreduce internal --json
# Whole steps, collectives included, captured into CUDA graphs and replayed.
captured=(env GGML_CUDA_DEVICES=2 LLAMA_TP_COLLECTIVE_GRAPH_CAPTURE=1 CUDA_MODULE_LOADING=EAGER)
step tp2-internal-f32-captured "${captured[@]}" "$bin/llama-tp-compare" -m "$models/small-f16.gguf" \
    --reference tp1 --tp 2 --allreduce internal --f32-wire --json
step tp2-split-invariant-small-q8_0-captured "${captured[@]}" "$bin/llama-tp-compare" \
    -m "$models/small-q8_0.gguf" --reference tp1 --tp 2 --allreduce internal --split-invariant --max-abs-dp 0 --json
step bench-1b-tp2-captured "${captured[@]}" "$bin/llama-tp-bench" -m "$models/1b-q8_0.gguf" -p 512 -n 128 \
    -r 3 --tp 2 --allreduce internal --json
for engine in internal nccl; do
    step "allreduce-$engine" "$bin/llama-tp-allreduce-bench" --engine "$engine" --cuda 0,0 --iters 200 --json
    step "allreduce-$engine-on-stream" "$bin/llama-tp-allreduce-bench" --engine "$engine" --cuda 0,0 --on-stream \
        --iters 200 --json
done
# The internal engine's own choice per size (BF16; the copy engines from 1 MiB
# of wire on), and F32 through its kernels alone, for the copy engines' gain.
step allreduce-internal-auto "$bin/llama-tp-allreduce-bench" --engine internal --cuda 0,0 --wire auto --iters 200 \
    --json
step allreduce-internal-auto-on-stream "$bin/llama-tp-allreduce-bench" --engine internal --cuda 0,0 --wire auto \
    --on-stream --iters 200 --json
step allreduce-internal-kernels env LLAMA_TP_INTERNAL_COPY_MIN_BYTES=0 "$bin/llama-tp-allreduce-bench" \
    --engine internal --cuda 0,0 --iters 200 --json
step allreduce-cpu "$bin/llama-tp-allreduce-bench" --engine cpu --iters 200 --json

# GET or POST (with a JSON body) to the local server: curl, else python3.
http() {
    local url=$1 body=${2:-}
    if command -v curl >/dev/null; then
        if [[ -n $body ]]; then
            curl -fs "$url" -H 'Content-Type: application/json' -d "$body"
        else
            curl -fs "$url"
        fi
    else
        python3 - "$url" "$body" <<'PY'
import sys, urllib.request
url, body = sys.argv[1], sys.argv[2]
req = urllib.request.Request(url, data=body.encode() if body else None, headers={"Content-Type": "application/json"})
print(urllib.request.urlopen(req, timeout=60).read().decode())
PY
    fi
}

serve() {  # extra server flags...
    local port=18080 rc=1
    "$bin/llama-tp-server" -m "$models/small-q8_0.gguf" --port "$port" -np 2 -c 2048 "$@" &
    local pid=$!
    for _ in $(seq 120); do
        http "http://127.0.0.1:$port/health" >/dev/null 2>&1 && break
        sleep 0.5
    done
    http "http://127.0.0.1:$port/v1/chat/completions" \
        '{"messages": [{"role": "user", "content": "Say hello."}], "max_tokens": 16, "temperature": 0}' && rc=0
    echo
    kill -TERM "$pid"
    wait "$pid"
    return $rc
}
step server-chat serve
serve_tp2() {
    local -x GGML_CUDA_DEVICES=2
    serve --tp 2
}
step server-chat-tp2 serve_tp2

{
    echo "{\"seconds\": $(($(date +%s) - start)), \"gpu\": \"$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)\", \"steps\": ["
    sep=""
    for r in "${results[@]}"; do
        read -r name rc secs <<<"$r"
        json="null"
        [[ -s $out/$name.json ]] && json=$(cat "$out/$name.json")
        echo "$sep{\"name\": \"$name\", \"rc\": $rc, \"seconds\": $secs, \"result\": $json}"
        sep=","
    done
    echo "]}"
} >"$out/summary.json"
echo "gpu-check: $(($(date +%s) - start)) s; summary in $out/summary.json"

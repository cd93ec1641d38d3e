#!/usr/bin/env bash
# TP accuracy report: serve one model with --tp 1 and with --tp N, send both the
# same prompts greedily, and report how far the answers and logits agree.
#
#   eval/tp-accuracy.sh -m MODEL [--tp N] [--dataset NAME] [--n-cases N]
#                       [--max-tokens N] [--seed N] [--threads N] [--out DIR]
#                       [--min-identical PCT] [--health-timeout S]
#                       [-- EXTRA SERVER ARGS...]
#
# Binaries default to build/bin/ of this repository; override with
# LLAMA_TP_SERVER_BIN and LLAMA_TP_COMPARE_BIN. Python: $PYTHON or python3.
set -euo pipefail

EVAL_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
REPO_ROOT="$(dirname "$EVAL_DIR")"
SERVER_BIN="${LLAMA_TP_SERVER_BIN:-$REPO_ROOT/build/bin/llama-tp-server}"
COMPARE_BIN="${LLAMA_TP_COMPARE_BIN:-$REPO_ROOT/build/bin/llama-tp-compare}"
PYTHON="${PYTHON:-python3}"

MODEL=""
TP=2
DATASET="gsm8k"
N_CASES=20
MAX_TOKENS=64
SEED=42
THREADS=1
OUT_DIR=""
MIN_IDENTICAL=""
HEALTH_TIMEOUT_S=300
SERVER_ARGS=()

usage() { sed -n '2,11p' "$0" | sed 's/^# \{0,1\}//'; }
die() { echo "tp-accuracy: error: $*" >&2; exit 2; }

while [ $# -gt 0 ]; do
    case "$1" in
        -m|--model)        MODEL="${2:?}"; shift 2 ;;
        --tp)              TP="${2:?}"; shift 2 ;;
        --dataset)         DATASET="${2:?}"; shift 2 ;;
        --n-cases)         N_CASES="${2:?}"; shift 2 ;;
        --max-tokens)      MAX_TOKENS="${2:?}"; shift 2 ;;
        --seed)            SEED="${2:?}"; shift 2 ;;
        --threads)         THREADS="${2:?}"; shift 2 ;;
        --out)             OUT_DIR="${2:?}"; shift 2 ;;
        --min-identical)   MIN_IDENTICAL="${2:?}"; shift 2 ;;
        --health-timeout)  HEALTH_TIMEOUT_S="${2:?}"; shift 2 ;;
        -h|--help)         usage; exit 0 ;;
        --)                shift; SERVER_ARGS=("$@"); break ;;
        *)                 die "unknown argument '$1' (see --help)" ;;
    esac
done

[ -n "$MODEL" ] || die "no model given: -m MODEL.gguf"
[ -f "$MODEL" ] || die "model file $MODEL does not exist"
[ -x "$SERVER_BIN" ] || die "server binary $SERVER_BIN not found (build the project or set LLAMA_TP_SERVER_BIN)"
[ -x "$COMPARE_BIN" ] || die "compare binary $COMPARE_BIN not found (build the project or set LLAMA_TP_COMPARE_BIN)"
[[ "$TP" =~ ^[0-9]+$ ]] && [ "$TP" -ge 2 ] || die "--tp must be an integer >= 2"
"$PYTHON" -c 'import requests, tqdm' 2>/dev/null \
    || die "$PYTHON cannot import requests and tqdm (llama-eval needs them): set PYTHON to one that can"

if [ -z "$OUT_DIR" ]; then
    OUT_DIR="$(mktemp -d "${TMPDIR:-/tmp}/tp-accuracy.XXXXXX")"
fi
mkdir -p "$OUT_DIR"

PIDS=()
cleanup() {
    local pid
    for pid in "${PIDS[@]}"; do
        kill "$pid" 2>/dev/null || true
    done
    for pid in "${PIDS[@]}"; do
        wait "$pid" 2>/dev/null || true
    done
}
trap cleanup EXIT
trap 'exit 130' INT TERM   # the EXIT trap then stops the servers

free_port() {
    "$PYTHON" -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}

# wait_healthy URL PID LOG: until GET URL/health answers 200, the server dies, or time runs out.
wait_healthy() {
    "$PYTHON" - "$1" "$2" "$3" "$HEALTH_TIMEOUT_S" <<'PY'
import os, sys, time, urllib.request
url, pid, log, limit = sys.argv[1], int(sys.argv[2]), sys.argv[3], float(sys.argv[4])
deadline = time.monotonic() + limit
while time.monotonic() < deadline:
    try:
        os.kill(pid, 0)
    except OSError:
        sys.exit(f"tp-accuracy: error: server exited before it was healthy; see {log}")
    try:
        with urllib.request.urlopen(url + "/health", timeout=2) as response:
            if response.status == 200:
                sys.exit(0)
    except OSError:
        pass
    time.sleep(0.2)
sys.exit(f"tp-accuracy: error: {url}/health not ready after {limit:g} s; see {log}")
PY
}

# start_server TP: starts a server and sets URL. One device gets the extra
# arguments without a tensor split (one share per rank of the other server).
start_server() {
    local tp="$1" port log args=()
    for ((i = 0; i < ${#SERVER_ARGS[@]}; i++)); do
        if [ "$tp" -eq 1 ] && [[ "${SERVER_ARGS[i]}" == -ts || "${SERVER_ARGS[i]}" == --tensor-split ]]; then
            i=$((i + 1))
        else
            args+=("${SERVER_ARGS[i]}")
        fi
    done
    port="$(free_port)"
    log="$OUT_DIR/server-tp$tp.log"
    "$SERVER_BIN" -m "$MODEL" --tp "$tp" --host 127.0.0.1 --port "$port" "${args[@]}" >"$log" 2>&1 &
    PIDS+=("$!")
    URL="http://127.0.0.1:$port"
    echo "started --tp $tp at $URL (log: $log)"
}

start_server 1
URL_1="$URL"
PID_1="${PIDS[-1]}"
start_server "$TP"
URL_N="$URL"
PID_N="${PIDS[-1]}"
wait_healthy "$URL_1" "$PID_1" "$OUT_DIR/server-tp1.log"
wait_healthy "$URL_N" "$PID_N" "$OUT_DIR/server-tp$TP.log"

# Greedy decoding with a fixed seed: any difference comes from the parallel split.
run_eval() {
    local name="$1" url="$2"
    "$PYTHON" "$EVAL_DIR/llama-eval.py" --server "$url" --server-name "$name" --threads "$THREADS" \
        --dataset "$DATASET" --n-cases "$N_CASES" --max-tokens "$MAX_TOKENS" --temperature 0 --seed "$SEED" \
        --no-progress --overwrite --output "$OUT_DIR/$name.json" --log "$OUT_DIR/$name.cases.jsonl" \
        >"$OUT_DIR/$name.summary.txt" || [ $? -eq 1 ]   # 1 = some tasks failed: still comparable
}
echo "running $N_CASES $DATASET prompts through both servers (greedy, max $MAX_TOKENS tokens)"
run_eval tp1 "$URL_1"
run_eval "tp$TP" "$URL_N"
cat "$OUT_DIR/tp1.summary.txt" "$OUT_DIR/tp$TP.summary.txt"

# The servers are not needed any more; free their memory before the logit comparison loads the model.
cleanup
PIDS=()

echo
echo "== response agreement (tp1 vs tp$TP) =="
"$PYTHON" "$EVAL_DIR/llama-eval.py" --compare "$OUT_DIR/tp1.json" "$OUT_DIR/tp$TP.json" \
    --compare-json "$OUT_DIR/compare.json"

echo
echo "== logit agreement (llama-tp-compare) =="
FAILED=0
compare_status=0
# The split flags among the server arguments, so the logits are judged for the split that was served.
COMPARE_ARGS=()
for ((i = 0; i < ${#SERVER_ARGS[@]}; i++)); do
    case "${SERVER_ARGS[i]}" in
        -ts|--tensor-split|--allreduce) COMPARE_ARGS+=("${SERVER_ARGS[i]}" "${SERVER_ARGS[i + 1]:-}"); i=$((i + 1)) ;;
        --split-invariant|--no-split-invariant|--bf16-wire|--f32-wire) COMPARE_ARGS+=("${SERVER_ARGS[i]}") ;;
    esac
done
"$COMPARE_BIN" -m "$MODEL" --tp "$TP" --reference tp1 "${COMPARE_ARGS[@]}" --json >"$OUT_DIR/kl.json" ||
    compare_status=$?
cat "$OUT_DIR/kl.json"
echo
if [ "$compare_status" -ne 0 ]; then
    echo "tp-accuracy: FAIL: llama-tp-compare exited with status $compare_status (accuracy contract not met)" >&2
    FAILED=1
fi

if [ -n "$MIN_IDENTICAL" ]; then
    "$PYTHON" - "$OUT_DIR/compare.json" "$MIN_IDENTICAL" <<'PY' || FAILED=1
import json, sys
result, minimum = json.load(open(sys.argv[1])), float(sys.argv[2])
share = 100.0 * result["identical_responses"] / max(1, result["matched"])
if result["matched"] == 0 or share < minimum:
    sys.exit(f"tp-accuracy: FAIL: {share:.1f}% identical responses, below --min-identical {minimum:g}%")
print(f"tp-accuracy: OK: {share:.1f}% identical responses (>= {minimum:g}%)")
PY
fi
echo "results in $OUT_DIR"
exit "$FAILED"

#!/usr/bin/env bash
# Runs the Node tests (official `openai` npm client) against a real
# llama-tp-server on a free port. Exits with node's status.
#
#   tests/node/run.sh     # LLAMA_TP_SERVER_BIN, LLAMA_TP_TEST_MODEL override the defaults
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
repo="$(cd "$here/../.." && pwd)"
server_bin="${LLAMA_TP_SERVER_BIN:-$repo/build/bin/llama-tp-server}"
model="${LLAMA_TP_TEST_MODEL:-$repo/models/stories260K.gguf}"
template="$repo/tests/server/templates/tool_calls.jinja"

[[ -x "$server_bin" ]] || { echo "run.sh: server binary not found: $server_bin" >&2; exit 1; }
[[ -f "$model" ]] || { echo "run.sh: model not found: $model" >&2; exit 1; }

if [[ ! -d "$here/node_modules/openai" ]]; then
    (cd "$here" && npm ci --no-audit --no-fund --loglevel=error)
fi

port="$(node -e 'const s = require("net").createServer(); s.listen(0, "127.0.0.1", () => { console.log(s.address().port); s.close(); });')"
log="$(mktemp -t llama-tp-node-server.XXXXXX.log)"
"$server_bin" -m "$model" --host 127.0.0.1 --port "$port" -np 2 -c 2048 -t 1 \
    --chat-template-file "$template" >"$log" 2>&1 &
server_pid=$!

stop_server() {
    if kill -0 "$server_pid" 2>/dev/null; then
        kill -TERM "$server_pid"
        wait "$server_pid" || true
    fi
}
trap stop_server EXIT

ready=0
for _ in $(seq 1 600); do
    if curl -fs "http://127.0.0.1:$port/health" >/dev/null 2>&1; then
        ready=1
        break
    fi
    if ! kill -0 "$server_pid" 2>/dev/null; then
        echo "run.sh: the server exited during startup:" >&2
        cat "$log" >&2
        exit 1
    fi
    sleep 0.1
done
if [[ $ready -ne 1 ]]; then
    echo "run.sh: the server did not become healthy within 60 s:" >&2
    cat "$log" >&2
    exit 1
fi

status=0
(cd "$here" && LLAMA_TP_BASE_URL="http://127.0.0.1:$port/v1" node --test) || status=$?
if [[ $status -ne 0 ]]; then
    echo "run.sh: server log: $log" >&2
else
    rm -f "$log"
fi
exit $status

#!/usr/bin/env bash
# Sets up and builds llama-tp, then runs every test: CTest (C++ and tool
# checks), pytest (server and eval) and node (the OpenAI client against the
# server). Fails if any test fails or none ran.
set -uo pipefail
cd "$(dirname "$0")/.."
tools/setup.sh --tests || { echo "test: setup/build failed"; exit 1; }

status=0
ctest --test-dir build --output-on-failure -j "$(nproc)" --no-tests=error || status=1

py_dirs=()
for d in tests/server eval/tests; do [[ -d $d ]] && py_dirs+=("$d"); done
if ((${#py_dirs[@]})); then
    /usr/bin/python3 -m pytest -q -p no:cacheprovider "${py_dirs[@]}"
    rc=$?
    # pytest exits 5 when it collected nothing: that is a failure here too.
    ((rc == 0)) || status=1
fi

# The official OpenAI Node client against the real server.
bash tests/node/run.sh || status=1

if ((status == 0)); then echo "test: all tests passed"; else echo "test: FAILED"; fi
exit $status

#!/usr/bin/env bash
# Sets up and builds llama-tp if needed, then starts llama-tp-server on
# 127.0.0.1:8080. Any arguments go to the server; without -m it serves the
# bundled tiny model.
set -euo pipefail
cd "$(dirname "$0")/.."
tools/setup.sh >&2

args=("$@")
has_model=0
# A model named by llama-server's variable counts as given.
[[ -n ${LLAMA_ARG_MODEL:-} ]] && has_model=1
for a in "${args[@]+"${args[@]}"}"; do [[ $a == -m || $a == --model ]] && has_model=1; done
((has_model)) || args=(-m models/stories260K.gguf "${args[@]+"${args[@]}"}")
exec build/bin/llama-tp-server "${args[@]}"

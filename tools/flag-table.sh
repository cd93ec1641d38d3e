#!/usr/bin/env bash
# Rewrites the table at the end of server/README.md ("Every llama-server
# flag") from `llama-tp-server --flag-support`, which a test compares with it.
set -euo pipefail
cd "$(dirname "$0")/.."
bin=${LLAMA_TP_SERVER_BIN:-build/bin/llama-tp-server}
table=$("$bin" --flag-support)
readme=server/README.md
marker='| flag | environment | here |'
head_part=$(awk -v m="$marker" 'index($0, m) == 1 { exit } { print }' "$readme")
printf '%s\n%s\n' "$head_part" "$table" > "$readme.tmp"
mv "$readme.tmp" "$readme"
echo "flag-table: $readme updated ($(wc -l <<< "$table") lines)"

#!/usr/bin/env bash
# The weight types users download, made the way they are made: a generated
# f16 llama quantized by the pin's llama-quantize into Q4_K_M, Q5_K_M, Q6_K,
# Q4_0 and IQ4_XS, each the quantizer's own mix (the output head and some of
# ffn_down and attn_v a type up). For each file, with llama-tp-compare:
#   - single device against upstream llama_decode, with ggml's float sums and
#     with split-invariant sums;
#   - split-invariant sums at --tp 2, 3, 4 and -ts 3,1 against one rank:
#     identical probabilities;
#   - float sums at --tp 2, 3 and 4 against one rank, within the contract.
# usage: quant_mixes.sh MAKE_MODEL QUANTIZE COMPARE WORKDIR
set -uo pipefail
make_model=$1 quantize=$2 compare=$3 work=$4
mkdir -p "$work"
source "$(dirname "$0")/compare_check.sh"

# Every row 256 long or a multiple (whole K-quant blocks, so the quantizer
# keeps the type it was asked for), 16 query heads over 8 KV heads so that
# 2, 3 and 4 ranks split them.
f16="$work/llama-f16.gguf"
if ! "$make_model" --arch llama --type f16 --seed 7 --n-embd 1024 --n-head 16 --n-head-kv 8 --head-dim 64 \
    --n-ff 2048 --n-layer 2 -o "$f16" >/dev/null 2>"$work/make.log"; then
    echo "FAILED: generating $f16" >&2
    cat "$work/make.log" >&2
    exit 1
fi
for type in Q4_K_M Q5_K_M Q6_K Q4_0 IQ4_XS; do
    model="$work/llama-$type.gguf"
    if ! "$quantize" "$f16" "$model" "$type" 2 >"$work/quantize.log" 2>&1; then
        echo "FAILED: llama-quantize $type" >&2
        tail -20 "$work/quantize.log" >&2
        exit 1
    fi
    # The mix the quantizer chose, for the log: how many tensors of each type.
    echo "$type: $(grep -o "converting to [a-z0-9_]*" "$work/quantize.log" | sort | uniq -c | tr -s ' \n' ' ')"
    check "$type float sums vs upstream" -m "$model" --reference upstream --no-split-invariant --prompts 4 \
        --n-tokens 12
    check "$type split-invariant vs upstream" -m "$model" --reference upstream --split-invariant --prompts 4 \
        --n-tokens 12
    for split in "--tp 2" "--tp 3" "--tp 4" "--tp 2 -ts 3,1"; do
        # shellcheck disable=SC2086
        check "$type $split split-invariant vs tp1" -m "$model" --reference tp1 $split --split-invariant \
            --prompts 3 --n-tokens 12
    done
    for tp in 2 3 4; do
        check "$type --tp $tp float sums vs tp1" -m "$model" --reference tp1 --tp "$tp" --no-split-invariant \
            --prompts 3 --n-tokens 12
    done
done
rm -f "$work"/*.gguf
echo "quantized mixes: $((cases - failures)) passed, $failures failed"
((failures == 0))

#!/usr/bin/env bash
# Tests llama-tp-make-model: byte-identical output for a seed, models that
# upstream libllama loads and runs with finite, peaked logits, and clear
# errors (exit 2 for bad arguments, 1 for file errors).
#
# usage: test_make_model.sh MAKE_MODEL_BINARY TEST_MAKE_MODEL_BINARY

set -uo pipefail

if [[ $# -ne 2 ]]; then
    echo "usage: $0 MAKE_MODEL_BINARY TEST_MAKE_MODEL_BINARY" >&2
    exit 2
fi
make_model=$1
check_model=$2
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
failures=0

fail() {
    echo "FAIL: $*" >&2
    failures=$((failures + 1))
}

# generate OUT ARGS...: writes a model, printing the tool's log on failure.
generate() {
    local out=$1
    shift
    if ! "$make_model" -o "$out" "$@" 2>"$work/generate.log"; then
        cat "$work/generate.log" >&2
        fail "generation failed: $*"
        return 1
    fi
}

# check_loads FILE ARCH: upstream loads and decodes it; logits finite and peaked.
check_loads() {
    if ! "$check_model" "$1" --arch "$2" --threads 1; then
        fail "upstream check failed for $1"
    fi
}

# check_determinism ARGS...: same seed is byte-identical (also across thread
# counts), another seed differs.
check_determinism() {
    generate "$work/a.gguf" --seed 7 --threads 2 "$@" || return
    generate "$work/b.gguf" --seed 7 --threads 1 "$@" || return
    generate "$work/c.gguf" --seed 8 --threads 2 "$@" || return
    cmp -s "$work/a.gguf" "$work/b.gguf" || fail "same seed gave different files: $*"
    cmp -s "$work/a.gguf" "$work/c.gguf" && fail "different seeds gave identical files: $*"
    rm -f "$work/a.gguf" "$work/b.gguf" "$work/c.gguf"
}

# expect_error STATUS PATTERN ARGS...: the tool exits with STATUS and says PATTERN.
expect_error() {
    local status=$1 pattern=$2
    shift 2
    "$make_model" "$@" >"$work/out.log" 2>"$work/err.log"
    local got=$?
    if [[ $got -ne $status ]]; then
        fail "expected exit $status, got $got for: $*"
    elif ! grep -q -- "$pattern" "$work/err.log"; then
        fail "expected '$pattern' in the message for: $* (got: $(head -1 "$work/err.log"))"
    fi
}

echo "== upstream loads every architecture and type"
for arch in llama qwen2 qwen3 qwen3moe phi3 gemma2 gemma3 gemma4 gpt-oss qwen35 qwen35moe qwen3next glm4moe deepseek2; do
    # gemma2's and gemma4's default logit cap of 30 flattens random logits
    # below the peakedness check; the accuracy matrix runs it.
    capped=()
    [[ $arch == gemma2 || $arch == gemma4 ]] && capped=(--logit-softcap 100)
    for type in f32 f16 q8_0 q4_0 q4_k; do
        # The qwen vocabulary has 151936 tokens: tying the output head halves
        # the file for the wide types and covers the tied path.
        tied=()
        if [[ ($arch == qwen* || $arch == glm4moe) && ($type == f32 || $type == f16) ]]; then
            tied=(--tied-output)
        fi
        generate "$work/model.gguf" --arch "$arch" --type "$type" "${tied[@]}" "${capped[@]}" &&
            check_loads "$work/model.gguf" "$arch"
        rm -f "$work/model.gguf"
    done
done
generate "$work/model.gguf" --arch llama --type q4_k --tied-output && check_loads "$work/model.gguf" llama
rm -f "$work/model.gguf"
# Qwen3-Next as its early files: q, k, v and the gate in one ssm_in.
generate "$work/model.gguf" --arch qwen3next --type q4_k --ssm-in && check_loads "$work/model.gguf" qwen3next
rm -f "$work/model.gguf"
# GLM-4.5 with its multi-token-prediction layer, and with no dense layer.
generate "$work/model.gguf" --arch glm4moe --type q4_k --nextn-layers 1 && check_loads "$work/model.gguf" glm4moe
rm -f "$work/model.gguf"
generate "$work/model.gguf" --arch glm4moe --type q8_0 --leading-dense-layers 0 && check_loads "$work/model.gguf" glm4moe
rm -f "$work/model.gguf"
# DeepSeek V2-Lite (plain attn_q) with V2's softmax routing, and V3 with its MTP layer.
generate "$work/model.gguf" --arch deepseek2 --type q4_k --q-lora-rank 0 --softmax-routing &&
    check_loads "$work/model.gguf" deepseek2
rm -f "$work/model.gguf"
generate "$work/model.gguf" --arch deepseek2 --type q8_0 --nextn-layers 1 && check_loads "$work/model.gguf" deepseek2
rm -f "$work/model.gguf"
# Older conversions: each head's keys and values expanded through attn_kv_b.
generate "$work/model.gguf" --arch deepseek2 --type f16 --expanded-latent && check_loads "$work/model.gguf" deepseek2
rm -f "$work/model.gguf"
# MXFP4, as gpt-oss ships its experts (and on a dense model).
for arch in gpt-oss llama; do
    generate "$work/model.gguf" --arch "$arch" --type mxfp4 && check_loads "$work/model.gguf" "$arch"
    rm -f "$work/model.gguf"
done
# llama with experts (Mixtral-style): upstream sizes them by feed_forward_length.
for type in f16 q8_0 q4_k; do
    generate "$work/model.gguf" --arch llama --type "$type" --n-expert 4 && check_loads "$work/model.gguf" llama
    rm -f "$work/model.gguf"
done

# gemma4 as its releases come: experts beside the dense FFN (26B-A4B), and
# per-layer embeddings with layers sharing an earlier layer's KV cache (E2B).
generate "$work/model.gguf" --arch gemma4 --type q8_0 --n-expert 4 --n-ff-exp 256 --logit-softcap 100 &&
    check_loads "$work/model.gguf" gemma4
rm -f "$work/model.gguf"
generate "$work/model.gguf" --arch gemma4 --type q4_k --n-layer 4 --swa-pattern 2 --n-embd-per-layer 64 \
    --n-kv-shared 2 --logit-softcap 100 && check_loads "$work/model.gguf" gemma4
rm -f "$work/model.gguf"

echo "== small preset"
generate "$work/model.gguf" --arch llama --preset small --type q4_k && check_loads "$work/model.gguf" llama
rm -f "$work/model.gguf"

echo "== q4_k falls back for rows that are not whole q4_K blocks"
generate "$work/model.gguf" --arch qwen3 --type q4_k --n-embd 384 --n-head 6 --n-head-kv 2 &&
    check_loads "$work/model.gguf" qwen3
grep -q "stored as q8_0" "$work/generate.log" || fail "no fallback note for n_embd 384 under q4_k"
rm -f "$work/model.gguf"

echo "== determinism"
# The 32000-token vocabulary keeps these quick; it also covers --vocab.
spm_vocab=$(dirname "$make_model")/../share/llama-tp/ggml-vocab-llama-spm.gguf
for arch in llama qwen2 qwen3 qwen3moe phi3 gemma2 gemma3 gemma4 gpt-oss qwen35 qwen3next glm4moe deepseek2; do
    check_determinism --arch "$arch" --type q8_0 --vocab "$spm_vocab"
done
for type in f32 f16 q4_0 q4_k; do
    check_determinism --arch llama --type "$type"
done
generate "$work/model.gguf" --arch llama --type q8_0 --seed 3
grep -aq "llama-tp random llama tiny q8_0 seed 3" "$work/model.gguf" || fail "general.name not descriptive"
planned=$("$make_model" --dry-run --arch llama --type q8_0 --seed 3 2>/dev/null | awk '{print $(NF - 1)}')
[[ $planned == "$(stat -c %s "$work/model.gguf")" ]] || fail "--dry-run size $planned differs from the file's"
rm -f "$work/model.gguf"

echo "== a model in parts"
# Parts named as gguf-split names them; upstream loads them from the first.
generate "$work/parts.gguf" --arch llama --type q8_0 --seed 3 --split-max-size 3M
parts=("$work"/parts-*-of-*.gguf)
[[ ${#parts[@]} -ge 3 && ${parts[0]} == "$work/parts-00001-of-0000${#parts[@]}.gguf" ]] ||
    fail "expected 3 or more parts named parts-0000N-of-0000K.gguf, got: ${parts[*]}"
check_loads "${parts[0]}" llama
planned=$("$make_model" --dry-run --arch llama --type q8_0 --seed 3 --split-max-size 3M 2>/dev/null)
[[ $planned == *" in ${#parts[@]} parts" ]] || fail "--dry-run says '$planned' for ${#parts[@]} parts"
total=$(cat "${parts[@]}" | wc -c)
[[ $planned == *" $total bytes "* ]] || fail "--dry-run says '$planned', the parts hold $total bytes"
rm -f "$work"/parts-*.gguf

echo "== bad arguments exit 2, file errors exit 1"
out=$work/bad.gguf
expect_error 2 "unknown architecture" --arch gpt2 -o "$out"
expect_error 2 "unknown type" --type q5_k -o "$out"
expect_error 2 "unknown preset" --preset huge -o "$out"
expect_error 2 "unknown option" --bogus -o "$out"
expect_error 2 "needs a value" -o "$out" --n-layer
expect_error 2 "output file is required" --arch llama
expect_error 2 "must divide --n-embd" --n-head 3 -o "$out"
expect_error 2 "must divide --n-head" --n-head-kv 3 -o "$out"
expect_error 2 "must not exceed --n-head" --n-head-kv 8 -o "$out"
expect_error 2 "must be positive" --n-layer 0 -o "$out"
expect_error 2 "must be positive" --n-embd -5 -o "$out"
expect_error 2 "needs an integer" --n-embd abc -o "$out"
expect_error 2 "needs an integer" --n-ff 12.5 -o "$out"
expect_error 2 "non-negative integer" --seed -1 -o "$out"
expect_error 2 "must be positive" --rope-theta 0 -o "$out"
expect_error 2 "needs a number" --rope-theta x -o "$out"
expect_error 2 "must be between" --n-layer 100000 -o "$out"
expect_error 2 "must be even" --head-dim 63 --n-head 4 -o "$out"
expect_error 2 "apply to llama, qwen3moe, qwen35moe, qwen3next, glm4moe, deepseek2, gemma4" --arch qwen3 --n-expert 4 \
    -o "$out"
expect_error 2 "applies to phi3" --n-ctx-orig 512 -o "$out"
expect_error 2 "apply to gemma2, gemma3, gemma4 and gpt-oss" --n-swa 64 -o "$out"
expect_error 2 "applies to gemma2, gemma3 and gemma4 only" --arch gpt-oss --logit-softcap 30 -o "$out"
expect_error 2 "apply to gemma4 only" --arch gemma3 --n-kv-shared 2 -o "$out"
expect_error 2 "applies to qwen3 only" --arch llama --reranker -o "$out"
expect_error 2 "apply to qwen35, qwen35moe and qwen3next only" --arch qwen3 --ssm-n-group 4 -o "$out"
expect_error 2 "applies to qwen3next only" --arch qwen35 --ssm-in -o "$out"
expect_error 2 "applies to glm4moe and deepseek2 only" --arch qwen3moe --leading-dense-layers 1 -o "$out"
expect_error 2 "must be between 0 and --n-layer" --arch glm4moe --leading-dense-layers 3 -o "$out"
expect_error 2 "glm4moe and deepseek2 only" --arch qwen3 --nextn-layers 1 -o "$out"
expect_error 2 "apply to deepseek2 only" --arch glm4moe --kv-lora-rank 64 -o "$out"
expect_error 2 "apply to deepseek2 only" --arch qwen3moe --expanded-latent -o "$out"
expect_error 2 "must be even and below --head-dim" --arch deepseek2 --rope-dim 48 -o "$out"
expect_error 2 "into groups of 2 or more" --arch deepseek2 --expert-groups 8 -o "$out"
expect_error 2 "must be a multiple of --ssm-n-group" --arch qwen35 --ssm-n-group 4 --ssm-dt-rank 6 -o "$out"
expect_error 2 "the last global and the one before it sliding" --arch gemma4 --n-layer 4 --swa-pattern 4 \
    --n-kv-shared 2 -o "$out"
expect_error 2 "must be between 1 and 4096" --arch phi3 --n-ctx-orig 8192 -o "$out"
expect_error 2 "phi3 needs" --arch phi3 --head-dim 128 -o "$out"
expect_error 2 "llama experts are --n-ff wide" --n-expert 4 --n-ff-exp 512 -o "$out"
expect_error 2 "needs --n-expert" --n-expert-used 2 -o "$out"
expect_error 2 "must not exceed --n-expert" --n-expert 2 --n-expert-used 3 -o "$out"
expect_error 2 "must not exceed --n-expert" --arch qwen3moe --n-expert-used 9 -o "$out"
expect_error 2 "qwen2 needs" --arch qwen2 --head-dim 128 -o "$out"
expect_error 2 "must be positive" --split-max-size 0 -o "$out"
expect_error 2 "needs an integer" --split-max-size 3X -o "$out"
expect_error 2 "needs an integer" --split-max-size M -o "$out"
expect_error 2 "usage:" --arch gpt2 -o "$out"
expect_error 1 "cannot create" -o "$work/no-such-dir/model.gguf"
expect_error 1 "is a directory" -o "$work"
expect_error 1 "does not exist" --vocab "$work/missing.gguf" -o "$out"
echo "not a gguf" >"$work/text.gguf"
expect_error 1 "not a valid GGUF" --vocab "$work/text.gguf" -o "$out"
[[ -e $out ]] && fail "a failed run left $out behind"
compgen -G "$work/*.tmp-*" >/dev/null && fail "a failed run left a temporary file behind"
"$make_model" --help >/dev/null || fail "--help did not exit 0"

if [[ $failures -ne 0 ]]; then
    echo "$failures check(s) failed" >&2
    exit 1
fi
echo "all make-model checks passed"

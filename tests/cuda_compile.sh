#!/usr/bin/env bash
# Compiles llama-tp's own CUDA code for sm_90 where a CUDA toolkit is
# installed, without building ggml's CUDA backend: the kernels with nvcc, the
# engines' host code with the C++ compiler against the toolkit's headers (and
# NCCL's, where the toolkit has them), with the build's GPU macros on.
# Warnings are errors. Exit 77 (skipped) where there is no nvcc.
# usage: cuda_compile.sh SOURCE_DIR WORK_DIR FILE...
set -euo pipefail
src=$1 work=$2
shift 2
nvcc=$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)
if [[ ! -x $nvcc ]]; then
    echo "SKIPPED: no nvcc on this machine (the CUDA toolkit is not installed); nothing compiled"
    exit 77
fi
# The toolkit's headers are where nvcc itself looks (its INCLUDES), which
# need not be beside the nvcc found on PATH (a wrapper, a distribution layout).
cuda_includes=()
while read -r dir; do
    [[ -d $dir && " ${cuda_includes[*]} " != *" -I$dir "* ]] && cuda_includes+=(-I"$dir")
done < <("$nvcc" --dryrun -x cu -c /dev/null -o /dev/null 2>&1 |
    sed -n 's/^#\$ INCLUDES=//p; s/^#\$ SYSTEM_INCLUDES=//p' | tr ' ' '\n' | tr -d '"' | sed -n 's/^-I//p; /^\//p')
cuda_home=$(dirname "$(dirname "$(readlink -f "$nvcc")")")
[[ -d $cuda_home/include && " ${cuda_includes[*]} " != *" -I$cuda_home/include "* ]] &&
    cuda_includes+=(-I"$cuda_home/include")
header_dir() {
    local flag
    for flag in "${cuda_includes[@]}" -I/usr/include; do
        [[ -f ${flag#-I}/$1 ]] && { echo "${flag#-I}"; return 0; }
    done
    return 1
}
if ! runtime_dir=$(header_dir cuda_runtime_api.h); then
    echo "error: nvcc at $nvcc names no include folder holding cuda_runtime_api.h" >&2
    exit 1
fi
launcher=()
command -v ccache >/dev/null && launcher=(ccache)
defines=(-DLLAMA_TP_HAVE_CUDA)
if nccl_dir=$(header_dir nccl.h); then
    defines+=(-DLLAMA_TP_HAVE_NCCL)
    [[ " ${cuda_includes[*]} " == *" -I$nccl_dir "* ]] || cuda_includes+=(-I"$nccl_dir")
else
    echo "note: no nccl.h beside the CUDA headers ($runtime_dir): the nccl engine is not compiled"
fi
mkdir -p "$work"
compiled=0
for f in "$@"; do
    out="$work/$(basename "$f").o"
    case $f in
        *.cu)
            "${launcher[@]}" "$nvcc" -arch=sm_90 -std=c++17 "${defines[@]}" -I"$src" -Werror all-warnings \
                -Xcompiler=-Wall,-Wextra,-Werror -c "$src/$f" -o "$out" ;;
        *nccl*)
            [[ " ${defines[*]} " == *" -DLLAMA_TP_HAVE_NCCL "* ]] || continue
            "${launcher[@]}" "${CXX:-c++}" -std=c++17 -Wall -Wextra -Werror "${defines[@]}" -I"$src" \
                "${cuda_includes[@]}" -c "$src/$f" -o "$out" ;;
        *)
            "${launcher[@]}" "${CXX:-c++}" -std=c++17 -Wall -Wextra -Werror "${defines[@]}" -I"$src" \
                "${cuda_includes[@]}" -c "$src/$f" -o "$out" ;;
    esac
    echo "compiled $f"
    compiled=$((compiled + 1))
done
echo "cuda-compile: $compiled files for sm_90 with $("$nvcc" --version | tail -1)"

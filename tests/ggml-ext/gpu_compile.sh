#!/usr/bin/env bash
# Compiles llama-tp's own GPU code where a GPU compiler is installed, without
# building ggml's GPU backend: for CUDA (sm_90) the kernels with nvcc and the
# engines' host code with the C++ compiler against the toolkit's headers (and
# NCCL's, where the toolkit has them); for HIP (gfx90a) the same files with
# hipcc and HIP's headers (and RCCL's, where installed), with the build's GPU
# macros on. Warnings are errors. Exit 77 (skipped) where there is no compiler.
# GGML_DIRS: ggml's include folders, colon-separated (its public headers, and
# the one internal header the stream bridge reads).
# usage: gpu_compile.sh cuda|hip SOURCE_DIR WORK_DIR GGML_DIRS FILE...
set -euo pipefail
mode=$1 src=$2 work=$3
IFS=: read -r -a ggml_dirs <<< "$4"
shift 4
ggml_includes=()
for d in "${ggml_dirs[@]}"; do ggml_includes+=(-I"$d"); done
launcher=()
command -v ccache >/dev/null && launcher=(ccache)
warnings=(-Wall -Wextra -Werror)
gpu_includes=()

# The first of dirs ("-Idir" each) holding header $1.
header_dir() {
    local header=$1 flag
    shift
    for flag in "$@"; do
        [[ -f ${flag#-I}/$header ]] && { echo "${flag#-I}"; return 0; }
    done
    return 1
}
# The compiler's own folders stay out: -I/usr/include breaks libstdc++'s #include_next.
add_include() {
    [[ $1 == /usr/include || $1 == /usr/local/include ]] && return 0
    [[ " ${gpu_includes[*]} " == *" -I$1 "* ]] || gpu_includes+=(-I"$1")
}

case $mode in
    cuda)
        compiler=$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)
        [[ -x $compiler ]] || { echo "SKIPPED: no nvcc (the CUDA toolkit is not installed); nothing compiled"; exit 77; }
        # The toolkit's headers are where nvcc itself looks (its INCLUDES),
        # which need not be beside the nvcc on PATH (a wrapper, a distribution layout).
        while read -r dir; do
            [[ -d $dir ]] && add_include "$dir"
        done < <("$compiler" --dryrun -x cu -c /dev/null -o /dev/null 2>&1 |
            sed -n 's/^#\$ INCLUDES=//p; s/^#\$ SYSTEM_INCLUDES=//p' | tr ' ' '\n' | tr -d '"' | sed -n 's/^-I//p; /^\//p')
        home=$(dirname "$(dirname "$(readlink -f "$compiler")")")
        [[ -d $home/include ]] && add_include "$home/include"
        defines=(-DLLAMA_TP_HAVE_CUDA)
        runtime_header=cuda_runtime_api.h collective_header=nccl.h collective=NCCL macro=LLAMA_TP_HAVE_NCCL
        kernel_flags=(-arch=sm_90 -std=c++17 -Werror all-warnings -Xcompiler=-Wall,-Wextra,-Werror)
        target=sm_90
        version=$("$compiler" --version | tail -1)
        ;;
    hip)
        compiler=$(command -v hipcc || echo /opt/rocm/bin/hipcc)
        [[ -x $compiler ]] || { echo "SKIPPED: no hipcc (HIP is not installed); nothing compiled"; exit 77; }
        # hipconfig names HIP's platform macros and include folders.
        hipconfig=$(dirname "$compiler")/hipconfig
        host_flags=()
        if [[ -x $hipconfig ]]; then
            read -r -a host_flags <<< "$("$hipconfig" --cpp_config)"
        fi
        for flag in "${host_flags[@]}"; do
            # clang's own headers are not for the C++ compiler
            [[ $flag == -I* && -d ${flag#-I} && $flag != */lib/clang/* ]] && add_include "${flag#-I}"
        done
        [[ -d /opt/rocm/include ]] && add_include /opt/rocm/include
        defines=(-DLLAMA_TP_HAVE_CUDA -DLLAMA_TP_HAVE_HIP -D__HIP_PLATFORM_AMD__)
        runtime_header=hip/hip_runtime_api.h collective_header=rccl/rccl.h collective=RCCL macro=LLAMA_TP_HAVE_NCCL
        kernel_flags=(-x hip --offload-arch=gfx90a -std=c++17 "${warnings[@]}")
        target=gfx90a
        # (hipcc --version fails without a GPU after printing it)
        version=$("$compiler" --version 2>/dev/null | grep -m1 -i "hip version" || true)
        ;;
    *)
        echo "usage: gpu_compile.sh cuda|hip SOURCE_DIR WORK_DIR GGML_DIRS FILE..." >&2
        exit 2
        ;;
esac

if ! runtime_dir=$(header_dir "$runtime_header" "${gpu_includes[@]}" -I/usr/include); then
    echo "error: $compiler names no include folder holding $runtime_header" >&2
    exit 1
fi
if collective_dir=$(header_dir "$collective_header" "${gpu_includes[@]}" -I/usr/include); then
    defines+=(-D"$macro")
    add_include "$collective_dir"
else
    echo "note: no $collective_header beside the $mode headers ($runtime_dir): the $collective engine is not compiled"
fi

# The MPI process group with the collective library, where Open MPI's wrapper names its flags.
mpi_flags=()
if [[ " ${defines[*]} " == *" -D$macro "* ]] && command -v mpicxx >/dev/null &&
    mpi_compile=$(mpicxx --showme:compile 2>/dev/null); then
    # (system headers: their C++ bindings do not pass our warnings)
    read -r -a mpi_flags <<< "${mpi_compile//-I/-isystem }"
    mpi_flags+=(-DLLAMA_TP_HAVE_MPI)
fi

mkdir -p "$work"
compiled=0
for f in "$@"; do
    out="$work/$(basename "$f").o"
    case $f in
        *.cu)
            "${launcher[@]}" "$compiler" "${kernel_flags[@]}" "${defines[@]}" -I"$src" -c "$src/$f" -o "$out" ;;
        *)
            [[ $f == *nccl* && " ${defines[*]} " != *" -D$macro "* ]] && continue
            extra=()
            if [[ $f == *mpi* ]]; then
                [[ ${#mpi_flags[@]} -gt 0 ]] || { echo "note: $f not compiled (no $collective, or no Open MPI mpicxx)"; continue; }
                extra=("${mpi_flags[@]}")
            fi
            "${launcher[@]}" "${CXX:-c++}" -std=c++17 "${warnings[@]}" "${defines[@]}" "${extra[@]}" -I"$src" \
                "${gpu_includes[@]}" "${ggml_includes[@]}" -c "$src/$f" -o "$out" ;;
    esac
    echo "compiled $f"
    compiled=$((compiled + 1))
done
echo "$mode-compile: $compiled files for $target with $version"

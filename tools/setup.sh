#!/usr/bin/env bash
# Installs what llama-tp needs on a Debian machine (only what is missing),
# fetches the pinned llama.cpp (cached outside the clone) and builds
# everything into build/. Extra CMake options: LLAMA_TP_CMAKE_ARGS.
# --tests: also what only the tests use: clang for the fuzz targets, the
# pinned llama-server for the differential tests, and HIP's compiler (to compile the GPU code for AMD GPUs) where Debian has it
# for this machine.
set -euo pipefail
cd "$(dirname "$0")/.."

packages=(build-essential cmake ninja-build ccache git ca-certificates nodejs npm
          python3 python3-pytest python3-requests python3-matplotlib python3-tqdm
          libgtest-dev procps curl openmpi-bin libopenmpi-dev iproute2 libssl-dev)
test_packages=(hipcc libamdhip64-dev)
# The fuzz targets: clang with libFuzzer's runtime.
fuzz_packages=(clang libclang-rt-dev)
extra_cmake=()
if [[ ${1:-} == --tests ]]; then
    packages+=("${fuzz_packages[@]}")
    extra_cmake+=(-DLLAMA_TP_FUZZ=ON -DLLAMA_TP_TEST_UPSTREAM_SERVER=ON)
    # One this machine's package lists know nothing of (another architecture)
    # is left out, without fetching the lists on every run for it.
    lists_fetched=0
    compgen -G "/var/lib/apt/lists/*_Packages*" >/dev/null && lists_fetched=1
    for p in "${test_packages[@]}"; do
        if ((lists_fetched)) && ! apt-cache show "$p" >/dev/null 2>&1; then
            echo "setup: $p is not in this machine's Debian archive; the tests that need it are skipped"
        else
            packages+=("$p")
        fi
    done
fi

missing=()
for p in "${packages[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
# npm may come from outside Debian's packages; any npm on PATH will do.
if command -v npm >/dev/null 2>&1; then
    filtered=()
    for p in "${missing[@]}"; do [[ $p == nodejs || $p == npm ]] || filtered+=("$p"); done
    missing=("${filtered[@]+"${filtered[@]}"}")
fi
if ((${#missing[@]})); then
    echo "setup: installing ${missing[*]}"
    sudo=""
    [[ $(id -u) -ne 0 ]] && sudo="sudo"
    $sudo apt-get update -qq
    # Fresh lists may still lack a test package for this architecture.
    available=()
    for p in "${missing[@]}"; do
        if [[ " ${test_packages[*]} " == *" $p "* ]] && ! apt-cache show "$p" >/dev/null 2>&1; then
            echo "setup: $p is not in this machine's Debian archive; the tests that need it are skipped"
        else
            available+=("$p")
        fi
    done
    missing=("${available[@]+"${available[@]}"}")
    DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi

build_dir=${LLAMA_TP_BUILD_DIR:-build}
# MPI ranks wherever Open MPI is found (LLAMA_TP_CMAKE_ARGS may say OFF).
# shellcheck disable=SC2086
cmake -S . -B "$build_dir" -G Ninja -DCMAKE_BUILD_TYPE=Release -DLLAMA_TP_MPI=AUTO "${extra_cmake[@]}" ${LLAMA_TP_CMAKE_ARGS:-}
cmake --build "$build_dir" -j "$(nproc)"

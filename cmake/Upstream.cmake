# Adds the pinned llama.cpp (ggml, libllama, libcommon) to the build with the
# options this project needs. Upstream's targets are excluded from "all": only
# what our targets link is built.

llama_tp_resolve_llama_cpp(LLAMA_TP_LLAMA_CPP_SRC)
message(STATUS "llama-tp: llama.cpp source: ${LLAMA_TP_LLAMA_CPP_SRC}")

set(BUILD_SHARED_LIBS OFF CACHE BOOL "" FORCE)
set(LLAMA_BUILD_COMMON ON CACHE BOOL "" FORCE)
set(LLAMA_BUILD_TESTS OFF CACHE BOOL "" FORCE)
set(LLAMA_BUILD_EXAMPLES OFF CACHE BOOL "" FORCE)
set(LLAMA_BUILD_APP OFF CACHE BOOL "" FORCE)
set(LLAMA_BUILD_TOOLS ${LLAMA_TP_BUILD_UPSTREAM_TOOLS} CACHE BOOL "" FORCE)
set(LLAMA_BUILD_SERVER ${LLAMA_TP_BUILD_UPSTREAM_TOOLS} CACHE BOOL "" FORCE)
set(LLAMA_BUILD_UI OFF CACHE BOOL "" FORCE)
set(LLAMA_USE_PREBUILT_UI OFF CACHE BOOL "" FORCE)
# HTTPS for llama-tp-server (--ssl-key-file / --ssl-cert-file) where OpenSSL
# is found (tools/setup.sh installs libssl-dev).
find_package(OpenSSL QUIET)
set(LLAMA_OPENSSL ${OpenSSL_FOUND} CACHE BOOL "" FORCE)
set(LLAMA_CURL OFF CACHE BOOL "" FORCE)
# ggml's own thread pool (not OpenMP): several ranks in one process each run
# their own pool, and OpenMP teams would spin against each other.
set(GGML_OPENMP OFF CACHE BOOL "" FORCE)
set(GGML_CUDA ${LLAMA_TP_CUDA} CACHE BOOL "" FORCE)
set(GGML_HIP ${LLAMA_TP_HIP} CACHE BOOL "" FORCE)
set(GGML_CCACHE ON CACHE BOOL "" FORCE)

# -march=native turns on AMX where the CPU advertises it, but many virtual
# machines do not enable the AMX tile state and its kernels then fault with an
# illegal instruction. Opt in with LLAMA_TP_AMX=ON on hardware known to work.
option(LLAMA_TP_AMX "Allow ggml's AMX kernels (x86)" OFF)
if(NOT LLAMA_TP_AMX AND CMAKE_SYSTEM_PROCESSOR MATCHES "x86_64|AMD64")
    include(CheckCCompilerFlag)
    check_c_compiler_flag("-mno-amx-tile" LLAMA_TP_HAS_MNO_AMX)
    if(LLAMA_TP_HAS_MNO_AMX)
        add_compile_options(-mno-amx-tile -mno-amx-int8 -mno-amx-bf16)
    endif()
endif()

add_subdirectory("${LLAMA_TP_LLAMA_CPP_SRC}" "${CMAKE_BINARY_DIR}/llama.cpp" EXCLUDE_FROM_ALL SYSTEM)

if(LLAMA_TP_BUILD_UPSTREAM_TOOLS)
    add_custom_target(upstream-tools ALL DEPENDS llama-bench llama-server)
endif()

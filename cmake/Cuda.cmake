# CUDA for GPU ranks (LLAMA_TP_CUDA) and NCCL (LLAMA_TP_NCCL): the CUDA
# compiler, one GPU architecture (never all of them: the GPU this machine has,
# else sm_90, the H200's), and NCCL from the CUDA toolkit.

if(NOT CMAKE_CUDA_COMPILER AND NOT DEFINED ENV{CUDACXX})
    find_program(LLAMA_TP_NVCC nvcc HINTS /usr/local/cuda/bin)
    if(LLAMA_TP_NVCC)
        set(CMAKE_CUDA_COMPILER "${LLAMA_TP_NVCC}")
    endif()
endif()

if(NOT DEFINED CMAKE_CUDA_ARCHITECTURES)
    set(_arch 90)
    find_program(LLAMA_TP_NVIDIA_SMI nvidia-smi)
    if(LLAMA_TP_NVIDIA_SMI)
        execute_process(COMMAND "${LLAMA_TP_NVIDIA_SMI}" --query-gpu=compute_cap --format=csv,noheader
                        OUTPUT_VARIABLE _caps RESULT_VARIABLE _rc ERROR_QUIET OUTPUT_STRIP_TRAILING_WHITESPACE)
        if(_rc EQUAL 0 AND _caps MATCHES "^([0-9]+)\\.([0-9]+)")
            set(_arch "${CMAKE_MATCH_1}${CMAKE_MATCH_2}")
        endif()
    endif()
    set(CMAKE_CUDA_ARCHITECTURES "${_arch}" CACHE STRING "CUDA architectures (default: this machine's GPU, else 90)")
endif()
message(STATUS "llama-tp: CUDA architectures ${CMAKE_CUDA_ARCHITECTURES}")

enable_language(CUDA)
find_package(CUDAToolkit REQUIRED)

set(LLAMA_TP_HAVE_NCCL OFF)
if(LLAMA_TP_NCCL)
    find_path(LLAMA_TP_NCCL_INCLUDE nccl.h HINTS ${CUDAToolkit_INCLUDE_DIRS} "${CUDAToolkit_LIBRARY_ROOT}/include")
    find_library(LLAMA_TP_NCCL_LIBRARY nccl HINTS "${CUDAToolkit_LIBRARY_ROOT}/lib" "${CUDAToolkit_LIBRARY_ROOT}/lib64"
                 ${CUDAToolkit_LIBRARY_DIR})
    if(NOT LLAMA_TP_NCCL_INCLUDE OR NOT LLAMA_TP_NCCL_LIBRARY)
        message(FATAL_ERROR "LLAMA_TP_NCCL=ON but NCCL (nccl.h, libnccl) was not found beside the CUDA toolkit "
                            "(${CUDAToolkit_LIBRARY_ROOT}); install it or configure without LLAMA_TP_NCCL")
    endif()
    add_library(llama-tp-nccl INTERFACE)
    target_include_directories(llama-tp-nccl INTERFACE "${LLAMA_TP_NCCL_INCLUDE}")
    target_link_libraries(llama-tp-nccl INTERFACE "${LLAMA_TP_NCCL_LIBRARY}")
    set(LLAMA_TP_HAVE_NCCL ON)
    message(STATUS "llama-tp: NCCL ${LLAMA_TP_NCCL_LIBRARY}")
endif()

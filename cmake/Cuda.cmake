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
    include(${CMAKE_CURRENT_LIST_DIR}/GpuCollective.cmake)
    llama_tp_gpu_collective(NAME NCCL HEADER nccl.h LIBRARY nccl
                            INCLUDE_HINTS ${CUDAToolkit_INCLUDE_DIRS} "${CUDAToolkit_LIBRARY_ROOT}/include"
                            LIBRARY_HINTS "${CUDAToolkit_LIBRARY_ROOT}/lib" "${CUDAToolkit_LIBRARY_ROOT}/lib64"
                                          ${CUDAToolkit_LIBRARY_DIR}
                            WHERE "beside the CUDA toolkit (${CUDAToolkit_LIBRARY_ROOT})")
endif()

# HIP for GPU ranks on AMD GPUs (LLAMA_TP_HIP) and RCCL (LLAMA_TP_NCCL): the
# same GPU code as the CUDA build (ggml-ext/gpu/gpu_runtime_api.h gives HIP's
# functions CUDA's names), ggml's HIP backend, and one GPU architecture
# (never all of them: the GPU this machine has, else gfx90a).

if(NOT DEFINED CMAKE_HIP_ARCHITECTURES)
    set(_arch gfx90a)
    find_program(LLAMA_TP_ROCM_AGENTS rocm_agent_enumerator HINTS /opt/rocm/bin)
    if(LLAMA_TP_ROCM_AGENTS)
        execute_process(COMMAND "${LLAMA_TP_ROCM_AGENTS}" OUTPUT_VARIABLE _agents RESULT_VARIABLE _rc ERROR_QUIET)
        if(_rc EQUAL 0)
            string(REGEX MATCHALL "gfx[0-9a-f]+" _gpus "${_agents}")
            list(REMOVE_ITEM _gpus gfx000)  # the CPU agent
            if(_gpus)
                list(GET _gpus 0 _arch)
            endif()
        endif()
    endif()
    set(CMAKE_HIP_ARCHITECTURES "${_arch}" CACHE STRING "HIP architectures (default: this machine's GPU, else gfx90a)")
endif()
message(STATUS "llama-tp: HIP architectures ${CMAKE_HIP_ARCHITECTURES}")

if(CMAKE_VERSION VERSION_LESS 3.21)
    message(FATAL_ERROR "LLAMA_TP_HIP=ON needs CMake 3.21 or later (HIP as a language); this is ${CMAKE_VERSION}")
endif()
enable_language(HIP)
find_package(hip REQUIRED HINTS "$ENV{ROCM_PATH}" /opt/rocm)

set(LLAMA_TP_HAVE_NCCL OFF)
if(LLAMA_TP_NCCL)
    include(${CMAKE_CURRENT_LIST_DIR}/GpuCollective.cmake)
    llama_tp_gpu_collective(NAME RCCL HEADER rccl/rccl.h LIBRARY rccl
                            INCLUDE_HINTS "$ENV{ROCM_PATH}/include" /opt/rocm/include
                            LIBRARY_HINTS "$ENV{ROCM_PATH}/lib" /opt/rocm/lib /opt/rocm/lib64
                            WHERE "in ROCm")
endif()

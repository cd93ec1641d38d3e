# The AllReduce engines; included by ggml-ext/CMakeLists.txt.
target_sources(llama-tp-ggml-ext PRIVATE
    ${CMAKE_CURRENT_LIST_DIR}/allreduce_backoff.cpp
    ${CMAKE_CURRENT_LIST_DIR}/allreduce_butterfly.cpp
    ${CMAKE_CURRENT_LIST_DIR}/allreduce_cpu.cpp
    ${CMAKE_CURRENT_LIST_DIR}/allreduce_engine.cpp
    ${CMAKE_CURRENT_LIST_DIR}/allreduce_failure.cpp
    ${CMAKE_CURRENT_LIST_DIR}/allreduce_none.cpp
    ${CMAKE_CURRENT_LIST_DIR}/allreduce_sizes.cpp
    ${CMAKE_CURRENT_LIST_DIR}/allreduce_wire.cpp
    ${CMAKE_CURRENT_LIST_DIR}/process_group.cpp
)
# The GPU engines and exact sums, relative to the source tree; tests/gpu_compile.sh
# compiles the same files for CUDA and HIP where the build has neither.
set(_cuda_sources ggml-ext/allreduce_copy_exchange.cpp ggml-ext/allreduce_cuda_kernels.cu
                  ggml-ext/allreduce_internal.cpp ggml-ext/cuda_runtime.cpp
                  ggml-ext/exact_sum_cuda.cu ggml-ext/cuda_stream_bridge.cpp)
set(_nccl_sources ggml-ext/allreduce_nccl.cpp ggml-ext/allreduce_nccl_processes.cpp)
# (The MPI process group joins NCCL across processes in builds with both.)
set_property(GLOBAL PROPERTY LLAMA_TP_CUDA_SOURCES ${_cuda_sources} ${_nccl_sources} ggml-ext/allreduce_engine.cpp
                                                   ggml-ext/mpi_process_group.cpp)
if(LLAMA_TP_CUDA OR LLAMA_TP_HIP)
    list(TRANSFORM _cuda_sources PREPEND "${PROJECT_SOURCE_DIR}/")
    list(TRANSFORM _nccl_sources PREPEND "${PROJECT_SOURCE_DIR}/")
    target_sources(llama-tp-ggml-ext PRIVATE ${_cuda_sources})
    # The stream bridge reads one field of ggml's backend internals (see the file).
    set_source_files_properties("${PROJECT_SOURCE_DIR}/ggml-ext/cuda_stream_bridge.cpp" PROPERTIES
                                INCLUDE_DIRECTORIES "${LLAMA_TP_LLAMA_CPP_SRC}/ggml/src")
    # One GPU code for both runtimes: LLAMA_TP_HAVE_CUDA marks it, LLAMA_TP_HAVE_HIP maps it to HIP.
    target_compile_definitions(llama-tp-ggml-ext PUBLIC LLAMA_TP_HAVE_CUDA)
    if(LLAMA_TP_HIP)
        set(_kernels ${_cuda_sources})
        list(FILTER _kernels INCLUDE REGEX "\\.cu$")
        set_source_files_properties(${_kernels} PROPERTIES LANGUAGE HIP)
        target_compile_definitions(llama-tp-ggml-ext PUBLIC LLAMA_TP_HAVE_HIP)
        target_link_libraries(llama-tp-ggml-ext PUBLIC hip::host)
    else()
        target_link_libraries(llama-tp-ggml-ext PUBLIC CUDA::cudart)
    endif()
    if(LLAMA_TP_HAVE_NCCL)
        target_sources(llama-tp-ggml-ext PRIVATE ${_nccl_sources})
        target_compile_definitions(llama-tp-ggml-ext PUBLIC LLAMA_TP_HAVE_NCCL)
        target_link_libraries(llama-tp-ggml-ext PUBLIC llama-tp-nccl)
    endif()
endif()
if(LLAMA_TP_HAVE_MPI)
    target_sources(llama-tp-ggml-ext PRIVATE
        ${CMAKE_CURRENT_LIST_DIR}/allreduce_mpi.cpp
        ${CMAKE_CURRENT_LIST_DIR}/mpi_process_group.cpp
        ${CMAKE_CURRENT_LIST_DIR}/mpi_wait.cpp
    )
    target_compile_definitions(llama-tp-ggml-ext PUBLIC LLAMA_TP_HAVE_MPI)
    target_link_libraries(llama-tp-ggml-ext PUBLIC MPI::MPI_CXX)
endif()

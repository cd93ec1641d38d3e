# The AllReduce engines; included by ggml-ext/CMakeLists.txt.
target_sources(llama-tp-ggml-ext PRIVATE
    ${CMAKE_CURRENT_LIST_DIR}/allreduce_backoff.cpp
    ${CMAKE_CURRENT_LIST_DIR}/allreduce_butterfly.cpp
    ${CMAKE_CURRENT_LIST_DIR}/allreduce_cpu.cpp
    ${CMAKE_CURRENT_LIST_DIR}/allreduce_engine.cpp
    ${CMAKE_CURRENT_LIST_DIR}/allreduce_failure.cpp
    ${CMAKE_CURRENT_LIST_DIR}/allreduce_none.cpp
    ${CMAKE_CURRENT_LIST_DIR}/allreduce_wire.cpp
    ${CMAKE_CURRENT_LIST_DIR}/process_group.cpp
)
if(LLAMA_TP_HAVE_MPI)
    target_sources(llama-tp-ggml-ext PRIVATE
        ${CMAKE_CURRENT_LIST_DIR}/allreduce_mpi.cpp
        ${CMAKE_CURRENT_LIST_DIR}/mpi_process_group.cpp
        ${CMAKE_CURRENT_LIST_DIR}/mpi_wait.cpp
    )
    target_compile_definitions(llama-tp-ggml-ext PUBLIC LLAMA_TP_HAVE_MPI)
    target_link_libraries(llama-tp-ggml-ext PUBLIC MPI::MPI_CXX)
endif()

# The AllReduce engines; included by ggml-ext/CMakeLists.txt.
target_sources(llama-tp-ggml-ext PRIVATE
    ${CMAKE_CURRENT_LIST_DIR}/allreduce_backoff.cpp
    ${CMAKE_CURRENT_LIST_DIR}/allreduce_butterfly.cpp
    ${CMAKE_CURRENT_LIST_DIR}/allreduce_cpu.cpp
    ${CMAKE_CURRENT_LIST_DIR}/allreduce_engine.cpp
    ${CMAKE_CURRENT_LIST_DIR}/allreduce_failure.cpp
    ${CMAKE_CURRENT_LIST_DIR}/allreduce_none.cpp
    ${CMAKE_CURRENT_LIST_DIR}/allreduce_wire.cpp
)

target_sources(llama-tp-ggml-ext PRIVATE ${CMAKE_CURRENT_LIST_DIR}/shard_range.cpp ${CMAKE_CURRENT_LIST_DIR}/split_tensor.cpp)

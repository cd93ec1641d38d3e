add_executable(test-split-tensor ${CMAKE_CURRENT_LIST_DIR}/test_split_tensor.cpp)
llama_tp_target_defaults(test-split-tensor)
target_link_libraries(test-split-tensor PRIVATE llama-tp-ggml-ext GTest::gtest_main)
add_test(NAME split-tensor COMMAND test-split-tensor)

# AllReduce engine tests; included by tests/CMakeLists.txt (GTest already found).
add_executable(test-allreduce ${CMAKE_CURRENT_LIST_DIR}/test_allreduce.cpp)
llama_tp_target_defaults(test-allreduce)
target_link_libraries(test-allreduce PRIVATE llama-tp-ggml-ext GTest::gtest_main)
add_test(NAME allreduce COMMAND test-allreduce)

# The library the nccl engine links (NCCL beside the CUDA toolkit, RCCL in
# ROCm), as the interface target llama-tp-nccl. Sets LLAMA_TP_HAVE_NCCL in the
# caller; stops with a message naming `WHERE` when it is not found.
function(llama_tp_gpu_collective)
    cmake_parse_arguments(C "" "NAME;HEADER;LIBRARY;WHERE" "INCLUDE_HINTS;LIBRARY_HINTS" ${ARGN})
    find_path(LLAMA_TP_${C_NAME}_INCLUDE ${C_HEADER} HINTS ${C_INCLUDE_HINTS})
    find_library(LLAMA_TP_${C_NAME}_LIBRARY ${C_LIBRARY} HINTS ${C_LIBRARY_HINTS})
    if(NOT LLAMA_TP_${C_NAME}_INCLUDE OR NOT LLAMA_TP_${C_NAME}_LIBRARY)
        message(FATAL_ERROR "LLAMA_TP_NCCL=ON but ${C_NAME} (${C_HEADER}, lib${C_LIBRARY}) was not found ${C_WHERE}; "
                            "install it or configure without LLAMA_TP_NCCL")
    endif()
    add_library(llama-tp-nccl INTERFACE)
    target_include_directories(llama-tp-nccl INTERFACE "${LLAMA_TP_${C_NAME}_INCLUDE}")
    target_link_libraries(llama-tp-nccl INTERFACE "${LLAMA_TP_${C_NAME}_LIBRARY}")
    set(LLAMA_TP_HAVE_NCCL ON PARENT_SCOPE)
    message(STATUS "llama-tp: ${C_NAME} ${LLAMA_TP_${C_NAME}_LIBRARY}")
endfunction()

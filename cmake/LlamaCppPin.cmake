# Brings the pinned llama.cpp source into a cache folder outside the build
# tree (keyed by commit) and adds it to the build. The source arrives inside
# the npm package node-llama-cpp, whose tarball and bundled git release are
# both checked against known digests before use.

set(LLAMA_TP_LLAMA_CPP_COMMIT "de3ff815ea7d559ee917f063901b8986f038abc6")
set(LLAMA_TP_NPM_PACKAGE "node-llama-cpp@3.22.1")
set(LLAMA_TP_NPM_TARBALL "node-llama-cpp-3.22.1.tgz")
set(LLAMA_TP_NPM_SHA256 "a0d9dd80eacd2ab1cfe71aee57ac8a806487fd70b3d2a38fbec637752d9e5c5f")
set(LLAMA_TP_BUNDLE_SHA256 "5f5d1105d5df040738d87b8290e5d17e7362131cdcfdb0831618e0ea528b4a51")

if(DEFINED ENV{LLAMA_TP_CACHE_DIR})
    set(_cache_default "$ENV{LLAMA_TP_CACHE_DIR}")
elseif(DEFINED ENV{XDG_CACHE_HOME})
    set(_cache_default "$ENV{XDG_CACHE_HOME}/llama-tp")
else()
    set(_cache_default "$ENV{HOME}/.cache/llama-tp")
endif()
set(LLAMA_TP_CACHE_DIR "${_cache_default}" CACHE PATH "Where the pinned dependency source is kept")
set(LLAMA_TP_LLAMA_CPP_DIR "" CACHE PATH "Use this llama.cpp checkout (at the pinned commit) instead of fetching one")

function(_llama_tp_run)
    cmake_parse_arguments(R "" "WHAT;WORKDIR" "COMMAND" ${ARGN})
    execute_process(COMMAND ${R_COMMAND} WORKING_DIRECTORY "${R_WORKDIR}"
                    RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
    if(NOT rc EQUAL 0)
        message(FATAL_ERROR "llama-tp: ${R_WHAT} failed (exit ${rc}).\n${out}\n${err}")
    endif()
endfunction()

function(_llama_tp_check_sha256 file expected what)
    file(SHA256 "${file}" actual)
    if(NOT actual STREQUAL expected)
        message(FATAL_ERROR "llama-tp: checksum mismatch for ${what}\n"
                            "  file:     ${file}\n  expected: ${expected}\n  actual:   ${actual}\n"
                            "Refusing to build from an unverified dependency.")
    endif()
endfunction()

# Fetches, verifies and clones the pinned source into ${dest}; atomic via rename.
function(_llama_tp_fetch_pinned dest)
    find_program(NPM npm)
    find_program(GIT git)
    if(NOT NPM OR NOT GIT)
        message(FATAL_ERROR "llama-tp: npm and git are needed to fetch the pinned llama.cpp "
                            "(or pass -DLLAMA_TP_LLAMA_CPP_DIR=<checkout at ${LLAMA_TP_LLAMA_CPP_COMMIT}>)")
    endif()
    string(RANDOM LENGTH 8 tag)
    set(work "${dest}.partial-${tag}")
    file(REMOVE_RECURSE "${work}")
    file(MAKE_DIRECTORY "${work}")
    message(STATUS "llama-tp: fetching ${LLAMA_TP_NPM_PACKAGE} from the npm registry")
    execute_process(COMMAND "${NPM}" pack "${LLAMA_TP_NPM_PACKAGE}" --silent
                    WORKING_DIRECTORY "${work}" RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
    if(NOT rc EQUAL 0 OR NOT EXISTS "${work}/${LLAMA_TP_NPM_TARBALL}")
        file(REMOVE_RECURSE "${work}")
        message(FATAL_ERROR "llama-tp: could not fetch ${LLAMA_TP_NPM_PACKAGE} with 'npm pack' "
                            "(is the npm registry reachable?).\n${err}\n"
                            "Alternatively pass -DLLAMA_TP_LLAMA_CPP_DIR=<checkout at ${LLAMA_TP_LLAMA_CPP_COMMIT}>.")
    endif()
    _llama_tp_check_sha256("${work}/${LLAMA_TP_NPM_TARBALL}" "${LLAMA_TP_NPM_SHA256}" "${LLAMA_TP_NPM_TARBALL}")
    _llama_tp_run(WHAT "extracting the git bundle" WORKDIR "${work}"
                  COMMAND tar xzf "${LLAMA_TP_NPM_TARBALL}" package/llama/gitRelease.bundle)
    set(bundle "${work}/package/llama/gitRelease.bundle")
    _llama_tp_check_sha256("${bundle}" "${LLAMA_TP_BUNDLE_SHA256}" "llama/gitRelease.bundle")
    _llama_tp_run(WHAT "cloning the git bundle" WORKDIR "${work}"
                  COMMAND "${GIT}" -c advice.detachedHead=false clone --quiet "${bundle}" src)
    execute_process(COMMAND "${GIT}" rev-parse HEAD WORKING_DIRECTORY "${work}/src"
                    OUTPUT_VARIABLE head OUTPUT_STRIP_TRAILING_WHITESPACE)
    if(NOT head STREQUAL LLAMA_TP_LLAMA_CPP_COMMIT)
        file(REMOVE_RECURSE "${work}")
        message(FATAL_ERROR "llama-tp: bundle is at ${head}, expected ${LLAMA_TP_LLAMA_CPP_COMMIT}")
    endif()
    file(RENAME "${work}/src" "${dest}")
    file(REMOVE_RECURSE "${work}")
endfunction()

function(llama_tp_resolve_llama_cpp out_dir)
    if(LLAMA_TP_LLAMA_CPP_DIR)
        if(NOT EXISTS "${LLAMA_TP_LLAMA_CPP_DIR}/ggml/include/ggml.h")
            message(FATAL_ERROR "llama-tp: LLAMA_TP_LLAMA_CPP_DIR=${LLAMA_TP_LLAMA_CPP_DIR} is not a llama.cpp checkout")
        endif()
        set(${out_dir} "${LLAMA_TP_LLAMA_CPP_DIR}" PARENT_SCOPE)
        return()
    endif()
    set(dest "${LLAMA_TP_CACHE_DIR}/llama.cpp-${LLAMA_TP_LLAMA_CPP_COMMIT}")
    file(MAKE_DIRECTORY "${LLAMA_TP_CACHE_DIR}")
    file(LOCK "${LLAMA_TP_CACHE_DIR}/fetch.lock" GUARD FUNCTION TIMEOUT 1800)
    if(NOT EXISTS "${dest}/ggml/include/ggml.h")
        _llama_tp_fetch_pinned("${dest}")
    endif()
    set(${out_dir} "${dest}" PARENT_SCOPE)
endfunction()

#include "server/build_info.h"

namespace llama_tp::server {

std::string build_fingerprint() {
    return "b" + std::to_string(LLAMA_TP_BUILD_NUMBER) + "-" + LLAMA_TP_COMMIT;
}

std::string version_text() {
    return std::string("llama-tp-server ") + LLAMA_TP_VERSION + " (" + build_fingerprint() + ")\nbuilt on llama.cpp " +
           LLAMA_TP_LLAMA_CPP_COMMIT + "\n";
}

}  // namespace llama_tp::server

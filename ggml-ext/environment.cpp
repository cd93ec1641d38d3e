#include "ggml-ext/environment.h"

#include <cstring>

extern char ** environ;

namespace llama_tp {

Environment Environment::of_process() {
    std::map<std::string, std::string> values;
    for (char ** entry = environ; entry && *entry; ++entry) {
        const char * equals = std::strchr(*entry, '=');
        if (equals) values[std::string(*entry, (size_t) (equals - *entry))] = equals + 1;
    }
    return Environment(std::move(values));
}

std::string Environment::get(const std::string & name) const {
    const auto it = values_.find(name);
    return it == values_.end() ? "" : it->second;
}

}  // namespace llama_tp

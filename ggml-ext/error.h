#pragma once
// The one exception type llama-tp throws: a message a user can act on
// (which file, which tensor, what was expected).

#include <stdexcept>
#include <string>

namespace llama_tp {

class Error : public std::runtime_error {
  public:
    explicit Error(const std::string & what) : std::runtime_error(what) {}
};

}  // namespace llama_tp

#pragma once
// The process environment as llama-tp reads it: captured once, where a
// program or the runtime's facade starts (Environment::of_process()), and
// handed down as a value, so that no decision below reads the process's
// variables itself and a test can hand in any values.

#include <map>
#include <string>

namespace llama_tp {

class Environment {
  public:
    Environment() = default;
    explicit Environment(std::map<std::string, std::string> values) : values_(std::move(values)) {}

    // Every variable of the process, as it is now.
    static Environment of_process();

    // The variable's value; "" where it is unset.
    std::string get(const std::string & name) const;
    // Whether it is set (perhaps to "").
    bool has(const std::string & name) const { return values_.count(name) != 0; }

  private:
    std::map<std::string, std::string> values_;
};

}  // namespace llama_tp

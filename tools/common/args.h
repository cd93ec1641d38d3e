#pragma once
// A small command-line reader shared by the tools: flags with values, with a
// clear message (and exit code 2) for anything it cannot take.

#include <cstdlib>
#include <cstdio>
#include <string>
#include <vector>

namespace llama_tp {

class ArgReader {
  public:
    ArgReader(int argc, char ** argv, std::string usage) : args_(argv + 1, argv + argc), usage_(std::move(usage)) {}

    bool done() const { return i_ >= args_.size(); }
    const std::string & next() { return args_[i_++]; }

    std::string value(const std::string & flag) {
        if (done()) fail("missing value after " + flag);
        return next();
    }
    long long integer(const std::string & flag, long long lo, long long hi) {
        return integer(flag, value(flag), lo, hi);
    }
    // A value already read (one that may also be a word).
    long long integer(const std::string & flag, const std::string & v, long long lo, long long hi) const {
        char * end = nullptr;
        const long long n = std::strtoll(v.c_str(), &end, 10);
        if (v.empty() || *end != '\0' || n < lo || n > hi) {
            fail("invalid value '" + v + "' for " + flag + " (expected an integer in [" + std::to_string(lo) + ", " +
                 std::to_string(hi) + "])");
        }
        return n;
    }
    double real(const std::string & flag) {
        const std::string v = value(flag);
        char * end = nullptr;
        const double d = std::strtod(v.c_str(), &end);
        if (v.empty() || *end != '\0') fail("invalid value '" + v + "' for " + flag + " (expected a number)");
        return d;
    }
    std::vector<float> reals(const std::string & flag) {
        std::vector<float> out;
        const std::string v = value(flag);
        size_t start = 0;
        while (start <= v.size()) {
            const size_t comma = std::min(v.find(',', start), v.size());
            const std::string part = v.substr(start, comma - start);
            char * end = nullptr;
            const double d = std::strtod(part.c_str(), &end);
            if (part.empty() || *end != '\0' || d < 0) fail("invalid list '" + v + "' for " + flag);
            out.push_back((float) d);
            start = comma + 1;
        }
        return out;
    }

    [[noreturn]] void fail(const std::string & message) const {
        std::fprintf(stderr, "error: %s\n\n%s", message.c_str(), usage_.c_str());
        std::exit(2);
    }
    [[noreturn]] void help() const {
        std::fputs(usage_.c_str(), stdout);
        std::exit(0);
    }

  private:
    std::vector<std::string> args_;
    size_t i_ = 0;
    std::string usage_;
};

}  // namespace llama_tp

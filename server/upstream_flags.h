#pragma once
// llama-server's command line, read with libcommon's own option table (the
// pinned commit's), so that every flag, alias and LLAMA_ARG_* variable
// llama-server accepts is accepted here with the same meaning. What
// llama-tp-server does with each option is stated in one table
// (upstream_flags.cpp): honoured, or accepted with no effect and why.

#include "arg.h"

#include <map>
#include <string>
#include <vector>

namespace llama_tp::server {

struct FlagSupport {
    bool honoured = false;
    std::string note;  // why an option has no effect, or how it maps here
};

class UpstreamFlags {
  public:
    UpstreamFlags();
    UpstreamFlags(const UpstreamFlags &) = delete;
    UpstreamFlags & operator=(const UpstreamFlags &) = delete;

    // The option a command-line word names (any alias, negative forms
    // included); nullptr for a word llama-server does not know.
    const common_arg * find(const std::string & word) const;
    bool is_negative(const common_arg & opt, const std::string & word) const;
    bool takes_value(const common_arg & opt) const;
    // Whether it takes a second value, the next word (--control-vector-layer-range START END).
    static bool takes_two_values(const common_arg & opt) { return opt.handler_str_str != nullptr; }

    // Runs the option's own handler where llama-tp-server honours it; one
    // without effect here is recorded, and its value checked by its handler
    // on a copy of the parameters. Throws std::exception on a bad value
    // (callers add the flag's name).
    void apply(const common_arg & opt, const std::string & word, const std::string & value,
               const std::string & value2 = "");
    // Applies every option whose LLAMA_ARG_* variable is set, except those in
    // `skip` (given on the command line, which wins).
    void apply_environment(const std::vector<const common_arg *> & skip);

    const common_params & params() const { return params_; }
    common_params & params() { return params_; }
    const std::vector<common_arg> & options() const { return ctx_.options; }
    // Options given on the command line or through the environment, each with
    // the word (or variable) that named it.
    struct Given {
        const common_arg * opt;
        std::string word;
    };
    const std::vector<Given> & given() const { return given_; }
    bool was_given(const std::string & first_name) const;

    static FlagSupport support(const common_arg & opt);
    // Flags older llama-server builds took and launch scripts still pass:
    // accepted with no effect.
    static const std::vector<std::string> & retired();
    static std::string primary_name(const common_arg & opt);

  private:
    void mark_given(const common_arg & opt, const std::string & word);
    void run_handler(const common_arg & opt, common_params & params, const std::string & word,
                     const std::string & value, const std::string & value2 = "") const;
    static bool checks_value_alone(const common_arg & opt);

    common_params params_;
    common_params_context ctx_;
    std::map<std::string, const common_arg *> by_word_;
    std::vector<Given> given_;
};

}  // namespace llama_tp::server

// test-make-model: loads a generated GGUF with upstream libllama, runs a few
// tokenized prompts through it and reports how peaked the next-token
// distributions are. Exits 1 when logits are not finite, not peaked enough,
// or mostly just repeat the input token.
//
// usage: test-make-model MODEL.gguf [--arch NAME] [--min-top1 P] [--threads N] [--verbose]

#include "llama.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

namespace {

struct ModelDeleter {
    void operator()(llama_model * model) const { llama_model_free(model); }
};
struct ContextDeleter {
    void operator()(llama_context * ctx) const { llama_free(ctx); }
};
using ModelPtr = std::unique_ptr<llama_model, ModelDeleter>;
using ContextPtr = std::unique_ptr<llama_context, ContextDeleter>;

// Owns a llama_batch sized for one prompt.
class Batch {
  public:
    explicit Batch(int32_t capacity) : batch_(llama_batch_init(capacity, 0, 1)) {}
    ~Batch() { llama_batch_free(batch_); }
    Batch(const Batch &) = delete;
    Batch & operator=(const Batch &) = delete;

    // Every position requests logits: all of them are measured.
    void fill(const std::vector<llama_token> & tokens) {
        batch_.n_tokens = static_cast<int32_t>(tokens.size());
        for (size_t i = 0; i < tokens.size(); ++i) {
            batch_.token[i] = tokens[i];
            batch_.pos[i] = static_cast<llama_pos>(i);
            batch_.n_seq_id[i] = 1;
            batch_.seq_id[i][0] = 0;
            batch_.logits[i] = 1;
        }
    }
    llama_batch get() const { return batch_; }

  private:
    llama_batch batch_;
};

struct Options {
    std::string model_path;
    std::string expected_arch;
    double min_top1 = 0.3;
    int n_threads = 2;
    bool verbose = false;  // show upstream's log
};

struct PositionStats {
    double top1_prob = 0.0;
    double margin = 0.0;  // top-1 minus top-2 logit
    llama_token top1 = 0;
    bool copies_input = false;  // predicts the token it was given: context plays no part
};

const char * const kPrompts[] = {
    "The quick brown fox jumps over the lazy dog.",
    "Once upon a time, in a land far away, there lived a",
    "int main(void) { return 0; }",
    "Tokyo is the capital of Japan. 東京は日本の首都です。",
};

void filtered_log(ggml_log_level level, const char * text, void * verbose) {
    if (level == GGML_LOG_LEVEL_ERROR || *static_cast<bool *>(verbose)) {
        std::fputs(text, stderr);
    }
}

Options parse_options(int argc, char ** argv) {
    Options options;
    for (int i = 1; i < argc; ++i) {
        const std::string arg = argv[i];
        const bool has_value = i + 1 < argc;
        if (arg == "--arch" && has_value) {
            options.expected_arch = argv[++i];
        } else if (arg == "--min-top1" && has_value) {
            options.min_top1 = std::atof(argv[++i]);
        } else if (arg == "--threads" && has_value) {
            options.n_threads = std::atoi(argv[++i]);
        } else if (arg == "--verbose") {
            options.verbose = true;
        } else if (options.model_path.empty() && arg.rfind("--", 0) != 0) {
            options.model_path = arg;
        } else {
            throw std::invalid_argument("unexpected argument '" + arg + "'");
        }
    }
    if (options.model_path.empty()) {
        throw std::invalid_argument(
            "usage: test-make-model MODEL.gguf [--arch NAME] [--min-top1 P] [--threads N] [--verbose]");
    }
    return options;
}

std::vector<llama_token> tokenize(const llama_vocab * vocab, const std::string & text) {
    std::vector<llama_token> tokens(text.size() + 8);
    const int32_t n =
        llama_tokenize(vocab, text.c_str(), static_cast<int32_t>(text.size()), tokens.data(),
                       static_cast<int32_t>(tokens.size()), /*add_special=*/true, /*parse_special=*/false);
    if (n <= 0) {
        throw std::runtime_error("tokenization failed for '" + text + "'");
    }
    tokens.resize(n);
    return tokens;
}

PositionStats measure(const float * logits, int32_t n_vocab) {
    float top1 = -INFINITY;
    float top2 = -INFINITY;
    llama_token top1_token = 0;
    for (int32_t i = 0; i < n_vocab; ++i) {
        if (!std::isfinite(logits[i])) {
            throw std::runtime_error("non-finite logit at token " + std::to_string(i));
        }
        if (logits[i] > top1) {
            top2 = top1;
            top1 = logits[i];
            top1_token = i;
        } else if (logits[i] > top2) {
            top2 = logits[i];
        }
    }
    double sum = 0.0;
    for (int32_t i = 0; i < n_vocab; ++i) {
        sum += std::exp(static_cast<double>(logits[i]) - top1);
    }
    PositionStats stats;
    stats.top1_prob = 1.0 / sum;
    stats.margin = static_cast<double>(top1) - top2;
    stats.top1 = top1_token;
    return stats;
}

std::string model_meta(const llama_model * model, const char * key) {
    char buffer[256] = {};
    return llama_model_meta_val_str(model, key, buffer, sizeof(buffer)) >= 0 ? buffer : "";
}

std::vector<PositionStats> run_prompts(llama_context * ctx, const llama_model * model) {
    const llama_vocab * vocab = llama_model_get_vocab(model);
    const int32_t n_vocab = llama_vocab_n_tokens(vocab);
    std::vector<PositionStats> stats;
    for (const char * prompt : kPrompts) {
        const std::vector<llama_token> tokens = tokenize(vocab, prompt);
        Batch batch(static_cast<int32_t>(tokens.size()));
        batch.fill(tokens);
        llama_memory_clear(llama_get_memory(ctx), true);
        if (llama_decode(ctx, batch.get()) != 0) {
            throw std::runtime_error(std::string("llama_decode failed for '") + prompt + "'");
        }
        for (size_t i = 0; i < tokens.size(); ++i) {
            PositionStats position = measure(llama_get_logits_ith(ctx, static_cast<int32_t>(i)), n_vocab);
            position.copies_input = position.top1 == tokens[i];
            stats.push_back(position);
        }
    }
    return stats;
}

struct Summary {
    double mean_top1 = 0.0;
    double copy_fraction = 0.0;
};

// Prints and returns the distribution summary.
Summary report(const std::string & path, const std::vector<PositionStats> & stats) {
    std::vector<double> margins;
    double top1_sum = 0.0;
    size_t near_ties = 0;
    size_t copies = 0;
    for (const PositionStats & s : stats) {
        top1_sum += s.top1_prob;
        margins.push_back(s.margin);
        near_ties += s.margin < 0.1 ? 1 : 0;
        copies += s.copies_input ? 1 : 0;
    }
    std::sort(margins.begin(), margins.end());
    const double mean_top1 = top1_sum / static_cast<double>(stats.size());
    std::printf(
        "%s: positions=%zu mean_top1_prob=%.3f margin_min=%.3f margin_median=%.3f near_ties(<0.1)=%zu "
        "copies_input=%zu\n",
        path.c_str(), stats.size(), mean_top1, margins.front(), margins[margins.size() / 2], near_ties, copies);
    return {mean_top1, static_cast<double>(copies) / static_cast<double>(stats.size())};
}

int run(const Options & options) {
    llama_model_params model_params = llama_model_default_params();
    model_params.n_gpu_layers = 0;
    // Weight repacking (AMX, CPU repack) only changes the in-memory layout, not
    // what is checked here; and some virtual machines advertise AMX but fault on it.
    model_params.use_extra_bufts = false;
    const ModelPtr model(llama_model_load_from_file(options.model_path.c_str(), model_params));
    if (!model) {
        throw std::runtime_error("upstream libllama could not load " + options.model_path);
    }
    const std::string arch = model_meta(model.get(), "general.architecture");
    if (!options.expected_arch.empty() && arch != options.expected_arch) {
        throw std::runtime_error("architecture is '" + arch + "', expected '" + options.expected_arch + "'");
    }

    llama_context_params ctx_params = llama_context_default_params();
    ctx_params.n_ctx = 256;
    ctx_params.n_batch = 256;
    ctx_params.n_ubatch = 256;
    ctx_params.n_threads = options.n_threads;
    ctx_params.n_threads_batch = options.n_threads;
    const ContextPtr ctx(llama_init_from_model(model.get(), ctx_params));
    if (!ctx) {
        throw std::runtime_error("upstream libllama could not create a context for " + options.model_path);
    }

    const Summary summary = report(options.model_path, run_prompts(ctx.get(), model.get()));
    if (summary.mean_top1 < options.min_top1) {
        std::fprintf(stderr, "FAIL: mean top-1 probability %.3f is below %.3f\n", summary.mean_top1, options.min_top1);
        return 1;
    }
    // A model that mostly predicts its own input token barely exercises attention.
    if (summary.copy_fraction > 0.5) {
        std::fprintf(stderr, "FAIL: the top token is the input token at %.0f%% of positions\n",
                     100.0 * summary.copy_fraction);
        return 1;
    }
    return 0;
}

}  // namespace

int main(int argc, char ** argv) {
    static bool verbose = false;
    llama_log_set(filtered_log, &verbose);
    llama_backend_init();
    int status = 1;
    try {
        const Options options = parse_options(argc, argv);
        verbose = options.verbose;
        status = run(options);
    } catch (const std::exception & e) {
        std::fprintf(stderr, "FAIL: %s\n", e.what());
    }
    llama_backend_free();
    return status;
}

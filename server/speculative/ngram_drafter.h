#pragma once
// llama-server's n-gram kinds of speculative decoding (ngram-simple,
// ngram-map-k, ngram-map-k4v, ngram-mod, ngram-cache): proposals looked up
// in the slot's own tokens (prompt and generated) by libcommon's
// common_speculative, the code llama-server runs, with llama-server's
// settings. Costs no model; pays where the text repeats itself (code edits,
// quoting the prompt).

#include "server/speculative/drafter.h"

#include <memory>

#include "common.h"

struct common_speculative;

namespace llama_tp::server {

class NgramDrafter : public Drafter {
  public:
    // The n-gram kinds of `params.types`, for slots 0 .. n_slots - 1. Throws
    // llama_tp::Error naming a lookup cache file (-lcs, -lcd) that cannot
    // be read, or when the types hold no n-gram kind.
    NgramDrafter(const common_params_speculative & params, int32_t n_slots);
    ~NgramDrafter() override;
    const char * name() const override { return names_.c_str(); }
    int32_t n_max() const override { return n_max_; }
    void begin(int32_t seq, const std::vector<int32_t> & prompt) override;
    void draft(std::vector<DraftRequest *> & requests) override;
    void accept(int32_t seq, int32_t n_accepted) override;
    // As llama-server: the maps are freed while the server sleeps and start
    // again empty.
    void sleep() override;
    void wake() override;

    // Whether libcommon drafts this kind without a model.
    static bool takes(common_speculative_type type);

  private:
    void start();
    void forget(int32_t seq);
    common_params_speculative params_;  // the n-gram kinds only
    std::unique_ptr<common_speculative, void (*)(common_speculative *)> spec_;
    std::string names_;
    int32_t n_max_ = 0;
    int32_t n_slots_ = 0;
    // Per slot, the tokens it held at its last begin or draft: libcommon's
    // maps stop the process if a slot's tokens shrink without a new begin
    // (a context shift drops some).
    std::vector<size_t> seen_;
};

}  // namespace llama_tp::server

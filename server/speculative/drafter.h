#pragma once
// Speculative decoding: a Drafter proposes tokens that may follow a slot's
// tokens; the scheduler puts them into the slot's next step after its last
// sampled token, and the target model's logits of that one step check them
// all (server/README.md, "Speculative decoding").

#include "runtime/batch.h"
#include "runtime/engine_options.h"

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

struct common_params_speculative;

namespace llama_tp {
class Engine;
}

namespace llama_tp::server {

// What one slot asks a drafter for in a step.
struct DraftRequest {
    int32_t seq = 0;                                // the slot (its sequence in the engines' caches)
    const std::vector<int32_t> * cached = nullptr;  // tokens in the slot's cache, positions 0..n-1
    int32_t last = 0;                               // then the token sampled last, at position n
    int32_t n_max = 0;                              // most tokens the step has room for
    std::vector<int32_t> tokens;                    // out: the proposal, to follow `last`
    int32_t by = -1;                                // the drafter that filled it (set by the caller)
};

class Drafter {
  public:
    virtual ~Drafter() = default;
    // llama-server's name of the kind (--spec-type).
    virtual const char * name() const = 0;
    // Most tokens it proposes in one step.
    virtual int32_t n_max() const = 0;
    // Fills `tokens` of the requests it has a proposal for (at most their
    // n_max); leaves the others empty. Never throws: a drafter that fails
    // proposes nothing, and generation goes on without it.
    virtual void draft(std::vector<DraftRequest *> & requests) = 0;
    // A slot starts generating: its prompt is in its cache (tokens 0..n-1).
    virtual void begin(int32_t /*seq*/, const std::vector<int32_t> & /*prompt*/) {}
    // After every step of the target: the batch it decoded (the target's
    // hidden states, where kept, are this batch's until its next step).
    virtual void observe(const Batch & /*batch*/) {}
    // n_accepted of the tokens it proposed for the slot were confirmed.
    virtual void accept(int32_t /*seq*/, int32_t /*n_accepted*/) {}
    // --sleep-idle-seconds: a drafter holding a model frees it, and loads it
    // again. Never throw: one whose model cannot be loaded again proposes
    // nothing from then on.
    virtual void sleep() {}
    virtual void wake() {}
};

// llama-server's speculative settings (--spec-type, -md, --spec-draft-*,
// --spec-ngram-*, -lcs, -lcd).
struct SpeculativeOptions {
    // The n-gram kinds asked for (ngram-simple, ngram-map-k, ngram-map-k4v,
    // ngram-mod, ngram-cache) in its types, with their settings as
    // llama-server read them; null when none is.
    std::shared_ptr<const common_params_speculative> ngram;
    // draft-mtp: the model's own multi-token-prediction layer (the target
    // then keeps its hidden states, EngineOptions::keep_hidden).
    bool mtp = false;
    // draft-simple: a smaller model with the target's vocabulary, greedy.
    std::string draft_model;
    std::string draft_hf_repo;  // -hfd: fetched into draft_model before the server starts
    std::string draft_hf_file;  // a file of that repository (llama-server's presets name one)
    int32_t draft_n_max = 3;
    int32_t draft_n_min = 0;      // a shorter proposal is dropped
    float draft_p_min = 0.0f;     // a proposal ends at a token less likely than this (among the top 10)
    KvTypes draft_kv;             // -ctkd / -ctvd
    int32_t draft_threads = 0;    // -td (0: as the target's)
    DeviceOptions draft_devices;  // -devd / -ngld
    bool has_draft_model() const { return !draft_model.empty() || !draft_hf_repo.empty(); }
    bool enabled() const { return ngram != nullptr || mtp || has_draft_model(); }
    // The kinds in use, as llama-server lists them ("none" when off).
    std::string type_names() const;
};

// The drafters the options ask for, in llama-server's order of preference
// (n-grams, then the prediction layer, then a draft model). The draft model
// and the prediction layer are loaded here, on this process alone, for
// n_slots slots of n_ctx_slot positions each (the layer split as the target
// is within the process); throws llama_tp::Error naming the file when one
// cannot be loaded, the model has no prediction layer, or the draft's
// vocabulary differs from the target's.
std::vector<std::unique_ptr<Drafter>> make_drafters(const SpeculativeOptions & options, const Engine & target,
                                                    int32_t n_slots, int32_t n_ctx_slot);

}  // namespace llama_tp::server

#pragma once
// llama-server's draft-simple: a smaller model with the target's vocabulary
// proposes its most likely next tokens. It runs unsplit on this process
// (rank 0's), one cache sequence per slot, and catches up with each slot's
// tokens lazily: whatever the slot's cache holds beyond the prefix the
// draft's cache shares with it (a new prompt, accepted tokens, a context
// shift) is decoded before drafting, so no other part of the server has to
// keep the two caches in step.

#include "server/speculative/draft_engine.h"
#include "server/speculative/drafter.h"

#include <memory>

namespace llama_tp {
class Tokenizer;
}

namespace llama_tp::server {

class ModelDrafter : public Drafter {
  public:
    // Takes the loaded draft engine (as many sequences as the server has
    // slots). Throws llama_tp::Error when its vocabulary is not the target's.
    ModelDrafter(std::unique_ptr<Engine> draft, const Engine & target, const SpeculativeOptions & options);
    ~ModelDrafter() override;
    const char * name() const override { return "draft-simple"; }
    int32_t n_max() const override { return n_max_; }
    void draft(std::vector<DraftRequest *> & requests) override;
    void sleep() override;
    void wake() override;

  private:
    void catch_up(std::vector<DraftRequest *> & requests, std::vector<int32_t> & next);
    void extend(std::vector<DraftRequest *> & requests, std::vector<int32_t> & next);
    int32_t proposal(int32_t row) const;
    void forget_all();

    DraftEngine engine_;
    const int32_t n_vocab_target_;
    const int32_t n_max_;
    const int32_t n_min_;
    const float p_min_;
    // Per sequence: the tokens the draft's cache holds, positions 0..n-1.
    std::vector<std::vector<int32_t>> cached_;
    // Per sequence: where a recurrent draft model's state was saved before
    // its last proposal (0: nowhere).
    std::vector<size_t> saved_at_;
};

// Why the two vocabularies cannot share token ids ("" when they can), by
// llama-server's test: the same kind, the same BOS/EOS handling, sizes
// within 128 of each other, and the same text for every shared id from 5 on.
std::string vocabulary_mismatch(const Tokenizer & target, const Tokenizer & draft);

}  // namespace llama_tp::server

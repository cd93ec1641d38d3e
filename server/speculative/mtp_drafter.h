#pragma once
// llama-server's draft-mtp: the model's own multi-token-prediction layer
// (Qwen 3.5's nextn layer) proposes the next tokens. It reads a token and
// the target's final-normed hidden state of the position before it, so it
// runs beside the target: after every target step it takes that step's
// tokens and hidden states in (observe), and its cache holds one pair per
// position the target computed. A proposal starts from the last sampled
// token and the target's hidden state before it; each further draft token
// reads the head's own hidden state of the position before it. The head is
// a second engine over the same file (EngineOptions::mtp_head), split as
// the target is within this process.

#include "server/speculative/draft_engine.h"
#include "server/speculative/drafter.h"

#include <memory>
#include <vector>

namespace llama_tp::server {

class MtpDrafter : public Drafter {
  public:
    // head: the file's prediction layer, loaded with keep_hidden for as many
    // sequences as the server has slots; target: loaded with keep_hidden.
    MtpDrafter(std::unique_ptr<Engine> head, const Engine & target, const SpeculativeOptions & options);
    ~MtpDrafter() override;
    const char * name() const override { return "draft-mtp"; }
    int32_t n_max() const override { return n_max_; }
    void observe(const Batch & batch) override;
    void draft(std::vector<DraftRequest *> & requests) override;
    void sleep() override;
    void wake() override;

  private:
    // A position's pair: its token and the target's hidden state of the
    // position before it.
    struct Pair {
        int32_t token = 0;
        int32_t pos = 0;
        std::vector<float> hidden;
    };
    // What the head knows of one slot's sequence.
    struct Sequence {
        int32_t n_true = 0;        // its cache holds the target's pairs of positions [0, n_true)
        int32_t n_written = 0;     // and cells up to here (a proposal's own beyond n_true)
        std::vector<Pair> queued;  // pairs from n_true on, not decoded yet
        // The last target step's hidden states of this sequence, from position first.
        int32_t first = -1;
        std::vector<float> rows;
        const float * target_hidden(int32_t pos, int32_t n_embd) const;
    };
    // Cuts a sequence's cache and queue back to positions [0, n).
    void cut(int32_t seq, int32_t n);
    // Decodes the queued pairs of these sequences, at most n_batch rows at a time.
    void flush(const std::vector<int32_t> & seqs);
    void step_failed(const std::exception & e);
    void forget_all();

    // A sequence whose queue grows beyond this (a prompt's chunks) is
    // decoded at once rather than with its next proposal.
    static constexpr size_t kMaxQueued = 32;
    DraftEngine head_;
    const Engine & target_;
    const int32_t n_embd_;
    const int32_t n_vocab_;
    const int32_t n_max_;
    const int32_t n_min_;
    const float p_min_;
    std::vector<Sequence> seqs_;
};

}  // namespace llama_tp::server

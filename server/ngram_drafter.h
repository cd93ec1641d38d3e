#pragma once
// llama-server's ngram-simple: the tokens that followed the last earlier
// occurrence of the slot's last n tokens, looked up in the slot's own tokens
// (prompt and generated). Costs no model; pays where the text repeats itself
// (code edits, quoting the prompt).

#include "server/drafter.h"

namespace llama_tp::server {

class NgramDrafter : public Drafter {
  public:
    // size_n: tokens matched; size_m: most tokens proposed.
    NgramDrafter(int32_t size_n, int32_t size_m);
    const char * name() const override { return "ngram-simple"; }
    int32_t n_max() const override { return size_m_; }
    void draft(std::vector<DraftRequest *> & requests) override;

    // The proposal for `tokens` (the slot's tokens, the last sampled one
    // last): empty when its last size_n tokens occur nowhere before.
    std::vector<int32_t> propose(const std::vector<int32_t> & tokens, int32_t n_max) const;

  private:
    const int32_t size_n_;
    const int32_t size_m_;
};

}  // namespace llama_tp::server

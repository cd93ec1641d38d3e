#pragma once
// A decode batch: tokens from any number of sequences, each with its position
// and whether its logits are wanted.

#include <cstdint>
#include <vector>

namespace llama_tp {

struct Batch {
    std::vector<int32_t> tokens;
    std::vector<int32_t> pos;
    std::vector<int32_t> seq;
    std::vector<uint8_t> want_logits;
    // LoRA: n_adapters scales a token, token by token (the adapters in
    // EngineOptions::loras order); empty: every adapter at its load scale.
    std::vector<float> lora;
    // A multi-token-prediction head's input (EngineOptions::mtp_head):
    // n_embd floats a token, the trunk's hidden state of the position
    // before it.
    std::vector<float> embd;

    void add(int32_t token, int32_t position, int32_t seq_id, bool logits) {
        tokens.push_back(token);
        pos.push_back(position);
        seq.push_back(seq_id);
        want_logits.push_back(logits ? 1 : 0);
    }
    void clear() {
        tokens.clear();
        pos.clear();
        seq.clear();
        want_logits.clear();
        lora.clear();
        embd.clear();
    }
    int size() const { return (int) tokens.size(); }
};

}  // namespace llama_tp

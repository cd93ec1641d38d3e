#include "server/speculative/model_drafter.h"

#include "runtime/engine.h"
#include "runtime/error.h"
#include "runtime/text/tokenizer.h"
#include "server/log.h"
#include "server/speculative/draft_pick.h"
#include "server/serving/cache/token_prefix.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "llama.h"

namespace llama_tp::server {

std::string vocabulary_mismatch(const Tokenizer & target, const Tokenizer & draft) {
    const llama_vocab * a = target.vocab();
    const llama_vocab * b = draft.vocab();
    if (llama_vocab_type(a) != llama_vocab_type(b)) return "its tokenizer is of another kind";
    if (target.add_bos() != draft.add_bos() || (target.add_bos() && target.bos() != draft.bos())) {
        return "it begins a text with another token";
    }
    if (target.add_eos() != draft.add_eos() || (target.add_eos() && target.eos() != draft.eos())) {
        return "it ends a text with another token";
    }
    const int32_t na = target.n_vocab(), nb = draft.n_vocab();
    if (std::abs(na - nb) > 128) {
        return "its vocabulary has " + std::to_string(nb) + " tokens, the model's " + std::to_string(na);
    }
    for (int32_t id = 5; id < std::min(na, nb); ++id) {
        if (std::strcmp(llama_vocab_get_text(a, id), llama_vocab_get_text(b, id)) != 0) {
            return "token " + std::to_string(id) + " is '" + llama_vocab_get_text(b, id) + "' there, '" +
                   llama_vocab_get_text(a, id) + "' in the model";
        }
    }
    return "";
}

ModelDrafter::ModelDrafter(std::unique_ptr<Engine> draft, const Engine & target, const SpeculativeOptions & options)
    : engine_(std::move(draft), "the draft model"),
      n_vocab_target_(target.info().n_vocab),
      n_max_(std::max<int32_t>(0, options.draft_n_max)),
      n_min_(std::max<int32_t>(0, options.draft_n_min)),
      p_min_(options.draft_p_min),
      cached_(engine_->options().n_seq_max),
      saved_at_(cached_.size(), 0) {
    const std::string why = vocabulary_mismatch(target.tokenizer(), engine_->tokenizer());
    if (!why.empty()) {
        throw Error("draft model " + options.draft_model + " cannot draft for this model: " + why);
    }
}

ModelDrafter::~ModelDrafter() = default;

void ModelDrafter::forget_all() {
    for (size_t s = 0; s < cached_.size(); ++s) {
        if (!cached_[s].empty()) engine_->seq_remove((int32_t) s, 0, -1);
        cached_[s].clear();
    }
}

void ModelDrafter::sleep() {
    engine_.sleep();
    for (auto & c : cached_) c.clear();
}

void ModelDrafter::wake() {
    engine_.wake();
}

void ModelDrafter::draft(std::vector<DraftRequest *> & requests) {
    std::vector<DraftRequest *> mine;
    for (DraftRequest * r : requests) {
        if (r->n_max > 0 && r->seq >= 0 && r->seq < (int32_t) cached_.size()) mine.push_back(r);
    }
    if (mine.empty() || n_max_ == 0 || !engine_.usable()) return;
    std::vector<int32_t> next(mine.size(), -1);  // each request's next token, once picked
    try {
        catch_up(mine, next);
        extend(mine, next);
        engine_.succeeded();
    } catch (const std::exception & e) {
        for (DraftRequest * r : mine) r->tokens.clear();
        try {
            forget_all();
        } catch (const std::exception &) {
        }
        engine_.failed(e);
        return;
    }
    for (DraftRequest * r : mine) {
        if ((int32_t) r->tokens.size() < n_min_) r->tokens.clear();
    }
}

// Decodes what each slot holds beyond the prefix the draft's cache shares
// with it, the last sampled token last, and picks the first proposal. One
// batch a step: a slot further behind (a new long prompt, a context shift)
// catches up over several steps, proposing nothing meanwhile, so that the
// other slots' steps do not wait for it. A slot holding a token the draft's
// vocabulary lacks gets no proposal.
void ModelDrafter::catch_up(std::vector<DraftRequest *> & requests, std::vector<int32_t> & next) {
    const int32_t n_batch = engine_->options().n_batch;
    const int32_t n_vocab = engine_->info().n_vocab;
    Batch batch;
    std::vector<std::pair<size_t, int32_t>> rows;  // request, batch row of its last token
    for (size_t i = 0; i < requests.size() && batch.size() < n_batch; ++i) {
        const DraftRequest & r = *requests[i];
        std::vector<int32_t> & have = cached_[r.seq];
        // The last sampled token is decoded in any case, for its logits.
        size_t done = common_prefix(have, *r.cached);
        const size_t n = r.cached->size() + 1;
        auto token_at = [&r, n](size_t k) { return k + 1 == n ? r.last : (*r.cached)[k]; };
        bool known = true;
        for (size_t k = done; k < n && known; ++k) known = token_at(k) >= 0 && token_at(k) < n_vocab;
        if (done < have.size()) {
            // Back to where the cache can go on: a recurrent model's state
            // saved before its last proposal, else the start.
            if (!engine_->seq_resumable(r.seq, (int32_t) done)) {
                const size_t saved = saved_at_[r.seq];
                done = saved <= done && engine_->seq_resumable(r.seq, (int32_t) saved) ? saved : 0;
            }
            engine_->seq_remove(r.seq, (int32_t) done, -1);
            have.resize(done);
        }
        if (!known) continue;
        for (; done < n && batch.size() < n_batch; ++done) {
            const bool last = done + 1 == n;
            if (last) rows.emplace_back(i, batch.size());
            batch.add(token_at(done), (int32_t) done, r.seq, last);
            have.push_back(token_at(done));
        }
    }
    if (batch.size() == 0) return;
    engine_->decode(batch);
    for (const auto & [i, row] : rows) next[i] = proposal(row);
}

// Greedy steps of every slot still drafting, together, until each has its
// n_max tokens or meets one below p_min.
void ModelDrafter::extend(std::vector<DraftRequest *> & requests, std::vector<int32_t> & next) {
    // A recurrent model's state after the last sampled token, to go back to
    // once the target has checked what is drafted from it (catch_up).
    if (!engine_->can_rewind()) {
        for (const DraftRequest * r : requests) {
            engine_->seq_save_state(r->seq);
            saved_at_[r->seq] = cached_[r->seq].size();
        }
    }
    Batch batch;
    for (;;) {
        batch.clear();
        std::vector<std::pair<size_t, int32_t>> rows;
        for (size_t i = 0; i < requests.size(); ++i) {
            DraftRequest & r = *requests[i];
            if (next[i] < 0) continue;
            r.tokens.push_back(next[i]);
            const int32_t limit = std::min(n_max_, r.n_max);
            if ((int32_t) r.tokens.size() >= limit) {
                next[i] = -1;
                continue;
            }
            const int32_t pos = (int32_t) r.cached->size() + (int32_t) r.tokens.size();
            rows.emplace_back(i, batch.size());
            batch.add(next[i], pos, r.seq, true);
            cached_[r.seq].push_back(next[i]);
            next[i] = -1;
        }
        if (batch.size() == 0) return;
        engine_->decode(batch);
        for (const auto & [i, row] : rows) next[i] = proposal(row);
    }
}

// The draft's most likely token after a batch row, or -1 where it is not
// likely enough or not a token of the target's.
int32_t ModelDrafter::proposal(int32_t row) const {
    const DraftPick p = pick_draft(engine_->logits(row), engine_->info().n_vocab);
    return p.p >= p_min_ && p.token < n_vocab_target_ ? p.token : -1;
}

}  // namespace llama_tp::server

#include "server/speculative/mtp_drafter.h"

#include "runtime/engine.h"
#include "runtime/error.h"
#include "server/log.h"
#include "server/speculative/draft_pick.h"

#include <algorithm>
#include <map>

namespace llama_tp::server {

const float * MtpDrafter::Sequence::target_hidden(int32_t pos, int32_t n_embd) const {
    if (first < 0 || pos < first || (size_t) (pos - first + 1) * n_embd > rows.size()) return nullptr;
    return rows.data() + (size_t) (pos - first) * n_embd;
}

MtpDrafter::MtpDrafter(std::unique_ptr<Engine> head, const Engine & target, const SpeculativeOptions & options)
    : head_(std::move(head), "the prediction layer"),
      target_(target),
      n_embd_(target.info().n_embd),
      n_vocab_(head_->info().n_vocab),
      n_max_(std::max<int32_t>(0, options.draft_n_max)),
      n_min_(std::max<int32_t>(0, options.draft_n_min)),
      p_min_(options.draft_p_min),
      seqs_(head_->options().n_seq_max) {
    if (!target.options().keep_hidden) throw Error("the model was not loaded to keep its hidden states for drafts");
}

MtpDrafter::~MtpDrafter() = default;

void MtpDrafter::cut(int32_t seq, int32_t n) {
    Sequence & q = seqs_[seq];
    if (q.n_written > n) head_->seq_remove(seq, n, -1);
    q.n_written = std::min(q.n_written, n);
    q.n_true = std::min(q.n_true, n);
    q.queued.erase(std::remove_if(q.queued.begin(), q.queued.end(), [n](const Pair & p) { return p.pos >= n; }),
                   q.queued.end());
}

void MtpDrafter::forget_all() {
    for (size_t s = 0; s < seqs_.size(); ++s) {
        if (!head_->asleep()) cut((int32_t) s, 0);
        seqs_[s] = Sequence{};
    }
}

void MtpDrafter::step_failed(const std::exception & e) {
    try {
        forget_all();
    } catch (const std::exception &) {
    }
    head_.failed(e);
}

void MtpDrafter::sleep() {
    head_.sleep();
    for (Sequence & q : seqs_) q = Sequence{};
}

void MtpDrafter::wake() {
    head_.wake();
}

// Queues each sequence's pairs of this target step. A step that goes on
// from the last one (or back into it: a rejected draft, a state taken
// back) keeps what the head holds before it; any other start (a new prompt
// resumed from a cache) begins the head's cache again, with a gap where
// the target computed nothing this drafter saw.
void MtpDrafter::observe(const Batch & batch) {
    if (!head_.usable()) return;
    try {
        std::map<int32_t, std::vector<int32_t>> rows_of;
        for (int i = 0; i < batch.size(); ++i) {
            if (batch.seq[i] >= 0 && batch.seq[i] < (int32_t) seqs_.size()) rows_of[batch.seq[i]].push_back(i);
        }
        std::vector<int32_t> full;
        for (const auto & [seq, rows] : rows_of) {
            Sequence & q = seqs_[seq];
            const int32_t p0 = batch.pos[rows[0]];
            bool in_order = true;
            for (size_t k = 0; k < rows.size(); ++k) in_order &= batch.pos[rows[k]] == p0 + (int32_t) k;
            const int32_t known = std::max(q.n_true, q.queued.empty() ? 0 : q.queued.back().pos + 1);
            const bool goes_on = in_order && q.first >= 0 && p0 >= q.first && p0 <= known;
            const float * before = goes_on ? q.target_hidden(p0 - 1, n_embd_) : nullptr;
            std::vector<float> h_before =
                before ? std::vector<float>(before, before + n_embd_) : std::vector<float>((size_t) n_embd_, 0.0f);
            cut(seq, goes_on ? p0 : 0);
            q.first = -1;
            q.rows.clear();
            if (!in_order) continue;
            q.first = p0;
            for (size_t k = 0; k < rows.size(); ++k) {
                Pair p;
                p.token = batch.tokens[rows[k]];
                p.pos = p0 + (int32_t) k;
                p.hidden = k == 0
                               ? std::move(h_before)
                               : std::vector<float>(target_.hidden(rows[k - 1]), target_.hidden(rows[k - 1]) + n_embd_);
                q.queued.push_back(std::move(p));
                const float * h = target_.hidden(rows[k]);
                q.rows.insert(q.rows.end(), h, h + n_embd_);
            }
            if (q.queued.size() > kMaxQueued) full.push_back(seq);
        }
        if (!full.empty()) flush(full);
    } catch (const std::exception & e) {
        step_failed(e);
    }
}

// The queued pairs of these sequences, n_batch rows at a time.
void MtpDrafter::flush(const std::vector<int32_t> & seqs) {
    const int32_t n_batch = head_->options().n_batch;
    Batch batch;
    auto run = [&] {
        if (batch.size() == 0) return;
        head_->decode(batch);
        batch.clear();
    };
    for (int32_t seq : seqs) {
        Sequence & q = seqs_[seq];
        for (Pair & p : q.queued) {
            if (batch.size() == n_batch) run();
            batch.add(p.token, p.pos, seq, false);
            batch.embd.insert(batch.embd.end(), p.hidden.begin(), p.hidden.end());
            q.n_true = p.pos + 1;
            q.n_written = std::max(q.n_written, p.pos + 1);
        }
        q.queued.clear();
    }
    run();
}

// From each slot's last sampled token and the target's hidden state before
// it, then greedy steps on the head's own hidden states, all slots
// together, until each has its n_max tokens or meets one below p_min.
void MtpDrafter::draft(std::vector<DraftRequest *> & requests) {
    if (n_max_ == 0 || !head_.usable()) return;
    struct Open {
        DraftRequest * r;
        int32_t row;
    };
    std::vector<Open> open;
    Batch batch;
    try {
        const int32_t n_batch = head_->options().n_batch;
        for (DraftRequest * r : requests) {
            if (r->n_max <= 0 || r->seq < 0 || r->seq >= (int32_t) seqs_.size()) continue;
            Sequence & q = seqs_[r->seq];
            const int32_t n = (int32_t) r->cached->size();
            const float * before = q.target_hidden(n - 1, n_embd_);
            if (!before || r->last < 0 || r->last >= n_vocab_) continue;
            // What the head queued of the last step must be the slot's tokens.
            bool same = true;
            for (const Pair & p : q.queued) same &= p.pos >= n || (*r->cached)[p.pos] == p.token;
            if (!same) {
                cut(r->seq, 0);
                q.first = -1;
                q.rows.clear();
                continue;
            }
            const std::vector<float> h(before, before + n_embd_);
            cut(r->seq, n);  // a rejected draft's pairs, a proposal's own cells
            if (batch.size() + (int32_t) q.queued.size() + 1 > n_batch) flush({r->seq});
            for (Pair & p : q.queued) {
                batch.add(p.token, p.pos, r->seq, false);
                batch.embd.insert(batch.embd.end(), p.hidden.begin(), p.hidden.end());
            }
            q.queued.clear();
            open.push_back({r, batch.size()});
            batch.add(r->last, n, r->seq, true);
            batch.embd.insert(batch.embd.end(), h.begin(), h.end());
            q.n_true = n + 1;
            q.n_written = std::max(q.n_written, n + 1);
        }
        while (!open.empty()) {
            head_->decode(batch);
            const Batch stepped = std::move(batch);
            batch.clear();
            std::vector<Open> next;
            for (const Open & o : open) {
                DraftRequest & r = *o.r;
                const DraftPick pick = pick_draft(head_->logits(o.row), n_vocab_);
                if (pick.p < p_min_ || pick.token < 0 || pick.token >= target_.info().n_vocab) continue;
                r.tokens.push_back(pick.token);
                if ((int32_t) r.tokens.size() >= std::min(n_max_, r.n_max)) continue;
                const int32_t pos = stepped.pos[o.row] + 1;
                next.push_back({o.r, batch.size()});
                batch.add(pick.token, pos, r.seq, true);
                const float * h = head_->hidden(o.row);
                batch.embd.insert(batch.embd.end(), h, h + n_embd_);
                Sequence & q = seqs_[r.seq];
                q.n_written = std::max(q.n_written, pos + 1);
            }
            open = std::move(next);
        }
        head_.succeeded();
    } catch (const std::exception & e) {
        for (DraftRequest * r : requests) r->tokens.clear();
        step_failed(e);
        return;
    }
    for (DraftRequest * r : requests) {
        if ((int32_t) r->tokens.size() < n_min_) r->tokens.clear();
    }
}

}  // namespace llama_tp::server

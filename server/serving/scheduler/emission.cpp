// Decoding a step and what follows it: pooled outputs, sampling, stop
// conditions, progress, and the events each task's channel receives.
#include "server/serving/scheduler/scheduler.h"

#include "runtime/error.h"
#include "runtime/text/tokenizer.h"
#include "server/log.h"
#include "server/serving/scheduler/task_events.h"
#include "server/serving/cache/token_prefix.h"

#include "reasoning-budget.h"

#include <algorithm>

namespace llama_tp::server {

void Scheduler::decode_and_sample() {
    try {
        engine_.decode(batch_);
    } catch (const std::exception & e) {
        SRV_ERR("decode of %d tokens failed: %s", batch_.size(), e.what());
        const std::string broken = engine_.failure();
        for (auto & slot : slots_) {
            if (!slot->inflight.empty()) {
                slot->clear_cache(engine_);
                if (slot->busy()) {
                    if (broken.empty()) fail(*slot, 500, std::string("decode failed: ") + e.what());
                }
            }
        }
        if (!broken.empty()) fail_group(broken);
        return;
    }
    for (const auto & d : drafters_) d->observe(batch_);
    for (auto & slot : slots_) {
        slot->commit();
        if (slot->prompt_in_step && slot->busy()) {
            if (slot->task->return_progress) report_progress(*slot);
            if (ctx_checkpoints_ > 0 && slot->state == Slot::State::Prompt && !slot->task->embedding) {
                checkpoint(*slot);
            }
        }
        slot->prompt_in_step = false;
    }
    for (auto & slot : slots_) {
        if (slot->busy() && slot->first_row >= 0) {
            try {
                pool(*slot);
            } catch (const std::exception & e) {
                fail(*slot, 500, std::string("embedding failed: ") + e.what());
            }
            continue;
        }
        if (slot->busy() && slot->logits_row >= 0) {
            try {
                sample(*slot);
            } catch (const std::exception & e) {
                fail(*slot, 500, std::string("sampling failed: ") + e.what());
            }
        }
    }
}

// An embedding task's hidden states of this step's prompt tokens, pooled
// into the slot; the task ends with the prompt.
void Scheduler::pool(Slot & slot) {
    Task & task = *slot.task;
    const int32_t n_embd = engine_.info().n_embd;
    const int32_t n_rows = batch_.size() - slot.first_row;
    int32_t n_mine = 0;
    while (n_mine < n_rows && batch_.seq[slot.first_row + n_mine] == slot.id) n_mine++;
    const int32_t p0 = batch_.pos[slot.first_row];
    for (int32_t i = 0; i < n_mine; ++i) {
        const float * h = engine_.embedding(slot.first_row + i);
        const int32_t pos = p0 + i;
        const bool last = pos + 1 == (int32_t) task.prompt.size();
        switch (task.pooling) {
            case Pooling::None:
                slot.hidden.insert(slot.hidden.end(), h, h + n_embd);
                break;
            case Pooling::Mean:
                if (slot.hidden.empty()) slot.hidden.assign(n_embd, 0.0f);
                for (int32_t c = 0; c < n_embd; ++c) slot.hidden[c] += h[c];
                break;
            case Pooling::Cls:
                if (pos == 0) slot.hidden.assign(h, h + n_embd);
                break;
            case Pooling::Last:
                if (last) slot.hidden.assign(h, h + n_embd);
                break;
            case Pooling::Rank:
                if (engine_.classifier()->last_token ? last : pos == 0) slot.hidden.assign(h, h + n_embd);
                break;
        }
    }
    if (slot.n_prompt_done < task.prompt.size()) return;
    if (task.pooling == Pooling::Mean) {
        for (float & v : slot.hidden) v /= (float) task.prompt.size();
    }
    if (task.pooling == Pooling::Rank) slot.hidden = engine_.classifier()->apply(slot.hidden.data());
    TaskEvent done;
    done.kind = TaskEvent::Kind::Done;
    done.finish_reason = "stop";
    done.id_slot = slot.id;
    done.n_prompt = (int32_t) task.prompt.size();
    done.embedding_rows = task.pooling == Pooling::None ? done.n_prompt : 1;
    done.embedding = std::move(slot.hidden);
    task.channel->push(std::move(done));
    slot.release();
    busy_--;
    tasks_done_++;
}

// t_max_predict_ms: the time since the first token is up, and a line is complete.
bool Scheduler::over_time(const Slot & slot, std::chrono::steady_clock::time_point now) const {
    const int32_t limit = slot.task->t_max_predict_ms;
    return limit > 0 && slot.has_new_line && ms_between(slot.t_first_token, now) > limit;
}

void Scheduler::report_progress(Slot & slot) {
    TaskEvent ev;
    ev.kind = TaskEvent::Kind::Progress;
    ev.id_slot = slot.id;
    ev.n_prompt = (int32_t) slot.task->prompt.size();
    ev.n_cached = slot.n_cached;
    ev.n_processed = (int32_t) slot.n_prompt_done;
    ev.timings.prompt_n = (int32_t) slot.n_prompt_done - slot.n_cached;
    ev.timings.prompt_ms = ms_between(slot.t_start, std::chrono::steady_clock::now());
    slot.task->channel->push(std::move(ev));
}

// Samples from the slot's first logits row and, while the sampled token is
// the one drafted to come next, from the next row too: every token is
// sampled from the target's own logits, so drafts change the speed, never
// the distribution. The cells of drafts that were not confirmed are dropped.
void Scheduler::sample(Slot & slot) {
    Task & task = *slot.task;
    const auto now = std::chrono::steady_clock::now();
    if (slot.state == Slot::State::Prompt) {
        slot.t_first_token = now;
        slot.state = Slot::State::Generating;
        for (const auto & d : drafters_) d->begin(slot.id, slot.kv_tokens);
    }
    if (slot.n_decoded >= task.n_predict) {
        finish(slot, StopKind::Limit);
        return;
    }
    const std::vector<int32_t> draft = std::move(slot.draft);
    slot.draft.clear();
    // The slot's cache holds the sampled token's input and every draft now.
    const int32_t n_before = (int32_t) slot.kv_tokens.size() - (int32_t) draft.size();
    size_t n_accepted = 0;
    std::optional<StopKind> stop;
    int32_t token = -1;
    for (size_t i = 0;; ++i) {
        token = sample_token(slot, slot.logits_row + (int32_t) i, now);
        const bool confirmed = i < draft.size() && token == draft[i];
        if (confirmed) n_accepted++;
        stop = stop_after(slot, token, n_before + (int32_t) i, now);
        if (stop || !confirmed) break;
    }
    if (!draft.empty()) {
        const int32_t keep = n_before + (int32_t) n_accepted;
        if (!engine_.can_rewind() && n_accepted < draft.size()) {
            // A recurrent state took the rejected tokens in: back to the one
            // saved before the step, and what it confirmed is decoded again.
            const int32_t saved = n_before - 1;
            engine_.seq_remove(slot.id, saved, -1);
            if (!stop) slot.replay.assign(slot.kv_tokens.begin() + saved, slot.kv_tokens.begin() + keep);
            slot.kv_tokens.resize(saved);
        } else {
            engine_.seq_remove(slot.id, keep, -1);
            slot.kv_tokens.resize(keep);
        }
        slot.n_drafted += (int32_t) draft.size();
        slot.n_draft_accepted += (int32_t) n_accepted;
        if (metrics_ != nullptr) metrics_->count_drafts((int32_t) draft.size(), (int32_t) n_accepted);
        if (slot.draft_by >= 0) drafters_[slot.draft_by]->accept(slot.id, (int32_t) n_accepted);
    }
    if (stop) {
        finish(slot, *stop);
    } else {
        slot.pending = token;
    }
}

// One token from one row of logits, sent to the client.
int32_t Scheduler::sample_token(Slot & slot, int32_t row, std::chrono::steady_clock::time_point now) {
    Task & task = *slot.task;
    const Tokenizer & tok = engine_.tokenizer();
    const float * logits = engine_.logits(row);
    const int32_t token = task.sampler->sample(logits);
    const bool as_text =
        task.special_as_text || std::binary_search(task.preserved_tokens.begin(), task.preserved_tokens.end(), token);
    slot.n_decoded++;
    step_sampled_++;

    TaskEvent ev;
    if (task.n_top_logprobs >= 0) {
        TokenLogprob lp;
        lp.token = token;
        lp.piece = tok.piece(token, as_text);
        if (task.post_sampling_probs) {
            lp.logprob = task.sampler->chain_prob(token);
            lp.top = task.sampler->chain_probs(task.n_top_logprobs);
        } else {
            lp.logprob = task.sampler->logprob(logits, token);
            if (task.n_top_logprobs > 0) lp.top = task.sampler->top_logprobs(logits, task.n_top_logprobs);
        }
        ev.logprobs.push_back(std::move(lp));
    }

    const bool eog = tok.is_eog(token) && !task.ignore_eos;
    // An end-of-generation token shown as text ends the text, as llama-server's --special.
    if (!eog || as_text) {
        ev.text = slot.stream.push(tok.piece(token, as_text));
    }
    ev.tokens.push_back(token);
    slot.has_new_line |= ev.text.find('\n') != std::string::npos;
    if (task.timings_per_token) {
        ev.has_timings = true;
        ev.timings.prompt_n = (int32_t) task.prompt.size() - slot.n_cached;
        ev.timings.prompt_ms = ms_between(slot.t_start, slot.t_first_token);
        ev.timings.predicted_n = slot.n_decoded;
        ev.timings.predicted_ms = ms_between(slot.t_first_token, now);
        ev.timings.draft_n = slot.n_drafted;
        ev.timings.draft_n_accepted = slot.n_draft_accepted;
    }
    ev.id_slot = slot.id;
    ev.n_prompt = (int32_t) task.prompt.size();
    ev.n_completion = slot.n_decoded;
    if (!ev.text.empty() || !ev.logprobs.empty() || !ev.tokens.empty()) {
        task.channel->push(std::move(ev));
    }
    return token;
}

// Whether generation ends with `token`, sampled from the logits of the last
// of the n_past positions the slot's cache holds.
std::optional<Scheduler::StopKind> Scheduler::stop_after(const Slot & slot, int32_t token, int32_t n_past,
                                                         std::chrono::steady_clock::time_point now) const {
    const Task & task = *slot.task;
    if (engine_.tokenizer().is_eog(token) && !task.ignore_eos) return StopKind::Eos;
    if (slot.stream.stopped()) return StopKind::Word;
    if (slot.n_decoded >= task.n_predict || (!task.context_shift && n_past >= n_ctx_slot_) || over_time(slot, now)) {
        return StopKind::Limit;
    }
    return std::nullopt;
}

void Scheduler::finish(Slot & slot, StopKind kind) {
    const char * reason = kind == StopKind::Limit ? "length" : "stop";
    Task & task = *slot.task;
    const std::string rest = slot.stream.flush();
    if (!rest.empty()) {
        TaskEvent text;
        text.text = rest;
        task.channel->push(std::move(text));
    }
    const auto now = std::chrono::steady_clock::now();
    TaskEvent done;
    done.kind = TaskEvent::Kind::Done;
    done.finish_reason = reason;
    done.stop_type = kind == StopKind::Eos ? "eos" : kind == StopKind::Word ? "word" : "limit";
    // llama-server's truncated: a context shift dropped tokens, or the
    // context (which capped n_predict) ended generation.
    done.truncated =
        slot.truncated || (kind == StopKind::Limit && task.context_ends_it && slot.n_decoded >= task.n_predict);
    if (kind == StopKind::Word) done.stopping_word = slot.stream.stop_word();
    done.id_slot = slot.id;
    done.n_prompt = (int32_t) task.prompt.size();
    done.n_cached = slot.n_cached;
    done.n_completion = slot.n_decoded;
    done.timings.prompt_n = (int32_t) task.prompt.size() - slot.n_cached;
    done.timings.prompt_ms = ms_between(slot.t_start, slot.t_first_token);
    done.timings.predicted_n = slot.n_decoded;
    done.timings.predicted_ms = ms_between(slot.t_first_token, now);
    done.timings.draft_n = slot.n_drafted;
    done.timings.draft_n_accepted = slot.n_draft_accepted;
    SRV_INF(
        "slot %d: task %llu done: prompt %d (%d cached), generated %d, %s, queued %.1f ms, prompt %.1f ms, "
        "gen %.1f ms",
        slot.id, (unsigned long long) task.id, done.n_prompt, done.n_cached, done.n_completion, reason,
        ms_between(task.t_submit, slot.t_start), done.timings.prompt_ms, done.timings.predicted_ms);
    if (metrics_ != nullptr) metrics_->count_finished(done.n_cached, done.n_prompt + done.n_completion);
    task.channel->push(std::move(done));
    slot.release();
    busy_--;
    tasks_done_++;
}

void Scheduler::fail(Slot & slot, int status, const std::string & message) {
    slot.task->channel->push(error_event(status, message));
    slot.release();
    busy_--;
    tasks_done_++;
}

}  // namespace llama_tp::server

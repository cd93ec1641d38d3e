#include "server/speculative/drafter.h"

#include "ggml-ext/comm/process_group.h"
#include "runtime/engine.h"
#include "server/log.h"
#include "server/speculative/model_drafter.h"
#include "server/speculative/mtp_drafter.h"
#include "server/speculative/ngram_drafter.h"
#include "speculative.h"

namespace llama_tp::server {

std::string SpeculativeOptions::type_names() const {
    std::string names;
    if (ngram) {
        std::vector<common_speculative_type> kinds;
        for (common_speculative_type t : ngram->types) {
            if (NgramDrafter::takes(t)) kinds.push_back(t);
        }
        names = common_speculative_type_name_str(kinds);
    }
    if (mtp) names += std::string(names.empty() ? "" : ",") + "draft-mtp";
    if (!draft_model.empty()) names += std::string(names.empty() ? "" : ",") + "draft-simple";
    return names.empty() ? "none" : names;
}

std::vector<std::unique_ptr<Drafter>> make_drafters(const SpeculativeOptions & options, const Engine & target,
                                                    int32_t n_slots, int32_t n_ctx_slot) {
    std::vector<std::unique_ptr<Drafter>> drafters;
    if (options.ngram) {
        drafters.push_back(std::make_unique<NgramDrafter>(*options.ngram, n_slots));
        SRV_INF("speculative decoding: %s, up to %d tokens a step", drafters.back()->name(), drafters.back()->n_max());
    }
    if (options.mtp) {
        const EngineOptions & t = target.options();
        EngineOptions e;
        e.model_path = t.model_path;
        e.metadata_overrides = t.metadata_overrides;
        e.mtp_head = true;
        e.keep_hidden = true;  // each further draft token reads the head's own
        e.n_seq_max = n_slots;
        e.n_ctx = n_slots * n_ctx_slot;
        e.kv_types = t.kv_types;
        e.n_batch = t.n_batch;
        e.rope = t.rope;
        e.n_threads = t.n_threads;
        e.progress = false;
        // Its sums and products decided as the target's are (the engine's
        // default): the one-pass kernel where it is faster.
        e.shares_cores = true;
        // Split as the target is within this process; the target's other
        // processes hold no part of it.
        e.tp = t.processes && t.processes->size() > 1 ? 1 : t.tp;
        e.devices = t.devices;
        if (e.tp == 1 && e.devices.names.size() > 1) e.devices.names.resize(1);
        drafters.push_back(std::make_unique<MtpDrafter>(Engine::load(e), target, options));
        SRV_INF("speculative decoding: draft-mtp, up to %d tokens a step from the model's prediction layer",
                drafters.back()->n_max());
    }
    if (!options.draft_model.empty()) {
        EngineOptions e;
        e.model_path = options.draft_model;
        e.n_seq_max = n_slots;
        e.n_ctx = n_slots * n_ctx_slot;
        e.kv_types = options.draft_kv;
        e.n_batch = target.options().n_batch;
        e.n_threads = options.draft_threads > 0 ? options.draft_threads : target.options().n_threads;
        e.devices = options.draft_devices;
        e.progress = target.options().progress;
        e.split_invariant = false;  // one device: its float sums are upstream's
        e.shares_cores = true;
        // A recurrent draft model goes back to its state from before its
        // own proposal, as the target does (ModelDrafter::extend).
        e.draft_states = true;
        drafters.push_back(std::make_unique<ModelDrafter>(Engine::load(e), target, options));
        SRV_INF("speculative decoding: draft-simple, up to %d tokens a step from %s", drafters.back()->n_max(),
                options.draft_model.c_str());
    }
    return drafters;
}

}  // namespace llama_tp::server

#include "server/speculative/ngram_drafter.h"

#include "ngram-cache.h"
#include "runtime/error.h"
#include "speculative.h"

#include <algorithm>
#include <exception>

namespace llama_tp::server {

namespace {

// libcommon stops the process on a lookup cache it cannot read: read each
// once here first, so that a wrong path is an error naming the file.
void check_lookup_cache(const std::string & path, const char * flag) {
    if (path.empty()) return;
    try {
        common_ngram_cache_load(path);
    } catch (const std::exception & e) {
        throw Error(std::string(flag) + " " + path + ": cannot read the lookup cache (" + e.what() + ")");
    }
}

}  // namespace

bool NgramDrafter::takes(common_speculative_type type) {
    switch (type) {
        case COMMON_SPECULATIVE_TYPE_NGRAM_SIMPLE:
        case COMMON_SPECULATIVE_TYPE_NGRAM_MAP_K:
        case COMMON_SPECULATIVE_TYPE_NGRAM_MAP_K4V:
        case COMMON_SPECULATIVE_TYPE_NGRAM_MOD:
        case COMMON_SPECULATIVE_TYPE_NGRAM_CACHE:
            return true;
        default:
            return false;
    }
}

NgramDrafter::NgramDrafter(const common_params_speculative & params, int32_t n_slots)
    : params_(params), spec_(nullptr, common_speculative_free), n_slots_(n_slots), seen_(std::max(0, n_slots), 0) {
    params_.types.clear();
    for (common_speculative_type t : params.types) {
        if (takes(t)) params_.types.push_back(t);
    }
    if (params_.types.empty()) throw Error("speculative decoding: no n-gram kind to draft with");
    params_.draft = {};  // these kinds read no model
    start();
    if (!spec_) throw Error("speculative decoding: libcommon made no n-gram drafter");
    names_ = common_speculative_type_name_str(params_.types);
    n_max_ = common_speculative_n_max(spec_.get());
}

NgramDrafter::~NgramDrafter() = default;

// Throws llama_tp::Error naming a lookup cache file it cannot read.
void NgramDrafter::start() {
    if (std::find(params_.types.begin(), params_.types.end(), COMMON_SPECULATIVE_TYPE_NGRAM_CACHE) !=
        params_.types.end()) {
        check_lookup_cache(params_.ngram_cache.lookup_cache_static, "--lookup-cache-static");
        check_lookup_cache(params_.ngram_cache.lookup_cache_dynamic, "--lookup-cache-dynamic");
    }
    spec_.reset(common_speculative_init(params_, (uint32_t) n_slots_));
    std::fill(seen_.begin(), seen_.end(), 0);
}

void NgramDrafter::sleep() {
    spec_.reset();
}

void NgramDrafter::wake() {
    if (spec_) return;
    try {
        start();
    } catch (const std::exception &) {
        spec_.reset();  // proposes nothing from then on
    }
}

void NgramDrafter::begin(int32_t seq, const std::vector<int32_t> & prompt) {
    if (!spec_ || seq < 0 || seq >= n_slots_) return;
    seen_[seq] = prompt.size();
    try {
        common_speculative_begin(spec_.get(), seq, prompt);
    } catch (const std::exception &) {
        // A drafter never stops generation: the slot drafts from what it has.
    }
}

// A slot whose tokens shrank (a context shift): its maps hold positions of
// the text before the shift, so they are emptied, then built from what it holds.
void NgramDrafter::forget(int32_t seq) {
    try {
        common_speculative_begin(spec_.get(), seq, {});
    } catch (const std::exception &) {
    }
}

// One common_speculative_draft for every request: libcommon's kinds take
// their turns as in llama-server, the first with a proposal for a slot
// giving it.
void NgramDrafter::draft(std::vector<DraftRequest *> & requests) {
    if (!spec_) return;
    std::vector<DraftRequest *> asked;
    for (DraftRequest * r : requests) {
        if (r->seq < 0 || r->seq >= n_slots_ || r->n_max <= 0) continue;
        if (r->cached->size() < seen_[r->seq]) {
            forget(r->seq);
            begin(r->seq, *r->cached);
        }
        seen_[r->seq] = r->cached->size();
        r->tokens.clear();
        common_speculative_get_draft_params(spec_.get(), r->seq) = {
            /* .drafting = */ true,
            /* .n_max    = */ r->n_max,
            /* .pos0     = */ (llama_pos) r->cached->size(),
            /* .id_last  = */ r->last,
            /* .prompt   = */ r->cached,
            /* .result   = */ &r->tokens,
        };
        asked.push_back(r);
    }
    if (asked.empty()) return;
    try {
        common_speculative_draft(spec_.get());
    } catch (const std::exception &) {
        // No slot may stay marked as drafting into a request that is gone.
        for (int32_t seq = 0; seq < n_slots_; ++seq)
            common_speculative_get_draft_params(spec_.get(), seq).drafting = false;
        for (DraftRequest * r : asked) r->tokens.clear();
    }
    for (DraftRequest * r : asked) {
        if ((int32_t) r->tokens.size() > r->n_max) r->tokens.resize(r->n_max);
    }
}

void NgramDrafter::accept(int32_t seq, int32_t n_accepted) {
    if (!spec_ || seq < 0 || seq >= n_slots_) return;
    try {
        common_speculative_accept(spec_.get(), seq, (uint16_t) std::clamp(n_accepted, 0, 65535));
    } catch (const std::exception &) {
    }
}

}  // namespace llama_tp::server

#include "server/speculative/draft_engine.h"

#include "runtime/engine.h"
#include "server/log.h"

namespace llama_tp::server {

DraftEngine::DraftEngine(std::unique_ptr<Engine> engine, std::string what)
    : engine_(std::move(engine)), what_(std::move(what)) {}

DraftEngine::~DraftEngine() = default;

bool DraftEngine::usable() const {
    return failures_ < kMaxFailures && !engine_->asleep();
}

void DraftEngine::failed(const std::exception & e) {
    if (++failures_ >= kMaxFailures) {
        SRV_ERR("%s failed %d times in a row (%s): no more drafts from it", what_.c_str(), failures_, e.what());
    } else {
        SRV_WRN("%s failed (%s); its cache starts again empty", what_.c_str(), e.what());
    }
}

void DraftEngine::sleep() {
    try {
        engine_->sleep();
    } catch (const std::exception & e) {
        SRV_WRN("%s cannot sleep: %s", what_.c_str(), e.what());
    }
}

void DraftEngine::wake() {
    if (!engine_->asleep()) return;
    try {
        engine_->wake();
        failures_ = 0;
    } catch (const std::exception & e) {
        SRV_ERR("%s could not be loaded again (%s): no more drafts from it", what_.c_str(), e.what());
        failures_ = kMaxFailures;
    }
}

}  // namespace llama_tp::server

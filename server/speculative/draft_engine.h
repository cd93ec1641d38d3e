#pragma once
// The engine a drafter runs (a draft model, or the model's prediction
// layer), with what every such drafter does around it: it stops proposing
// after kMaxFailures failures in a row, and it frees the engine while the
// server sleeps and loads it again when it wakes, never throwing.

#include <exception>
#include <memory>
#include <string>

namespace llama_tp {
class Engine;
}

namespace llama_tp::server {

class DraftEngine {
  public:
    // what: how the logs name it ("the draft model").
    DraftEngine(std::unique_ptr<Engine> engine, std::string what);
    ~DraftEngine();

    Engine & operator*() const { return *engine_; }
    Engine * operator->() const { return engine_.get(); }

    // Whether it is loaded and has not failed kMaxFailures times in a row.
    bool usable() const;
    // A proposal went through: the failures in a row start again.
    void succeeded() { failures_ = 0; }
    // A proposal failed (the caller has dropped its cache): logged.
    void failed(const std::exception & e);
    void sleep();
    // A failure to load again is logged, and it proposes nothing from then on.
    void wake();

  private:
    static constexpr int kMaxFailures = 3;
    std::unique_ptr<Engine> engine_;
    const std::string what_;
    int failures_ = 0;
};

}  // namespace llama_tp::server

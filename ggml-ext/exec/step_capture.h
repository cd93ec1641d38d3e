#pragma once
// A whole step of a GPU rank, collectives included, captured into one CUDA
// graph and replayed: begin() starts capturing everything queued on the
// backend's stream and on streams that join it (a StreamBridge's), and
// end_and_launch() ends the capture, makes the executable graph and launches
// it; replay() launches it again. The backend's later work waits for the
// launch. Only work that keeps no per-call state on the host may be captured
// (AllReduceEngine::sums_replay_in_graphs).

#include <memory>

#include "ggml-backend.h"

namespace llama_tp {

class StepCapture {
  public:
    virtual ~StepCapture() = default;
    virtual void begin() = 0;
    // Throws llama_tp::Error when the capture failed (work that cannot be captured).
    virtual void end_and_launch() = 0;
    // Ends a capture without launching it (the step failed while queueing). Throws nothing.
    virtual void abandon() = 0;
    virtual void replay() = 0;
};

// For a backend of ggml's CUDA (or HIP) backend on the runtime's device
// cuda_device (GPU builds only; the backend's own capture of its graphs must
// be off: GGML_CUDA_DISABLE_GRAPHS). Throws llama_tp::Error where the backend
// has no events.
std::unique_ptr<StepCapture> make_cuda_step_capture(ggml_backend_t backend, int cuda_device);

}  // namespace llama_tp

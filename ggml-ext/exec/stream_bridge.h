#pragma once
// Work of llama-tp's own (a collective, an exact sum) ordered on a ggml GPU
// backend's stream without a wait on the host: enter() makes a stream of the
// bridge's wait for everything queued on the backend so far and returns it
// (a cudaStream_t); leave() makes the backend wait for everything queued on
// that stream since. The segment executor queues a segment, enters, queues the
// node's work, leaves, and queues the next segment.

#include <memory>

#include "ggml-backend.h"

namespace llama_tp {

class StreamBridge {
  public:
    virtual ~StreamBridge() = default;
    virtual void * enter() = 0;
    virtual void leave() = 0;
};

// For a backend of ggml's CUDA (or HIP) backend on the runtime's device
// cuda_device (GPU builds only). Throws llama_tp::Error where the backend
// has no events.
std::unique_ptr<StreamBridge> make_cuda_stream_bridge(ggml_backend_t backend, int cuda_device);

}  // namespace llama_tp

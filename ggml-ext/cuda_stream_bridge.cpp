// StreamBridge on ggml's CUDA backend. ggml's public API records an event on
// a backend's stream and makes a backend wait for an event, but gives out
// neither its stream nor its events' CUDA handles. This file alone reads the
// handle, ggml_backend_event::context (a cudaEvent_t on the CUDA backend, in
// ggml-backend-impl.h at the pinned commit), to join a stream of our own.

#include "ggml-ext/stream_bridge.h"

#include "ggml-ext/cuda_runtime.h"
#include "ggml-ext/error.h"
#include "ggml-ext/gpu_runtime_api.h"

#include "ggml-backend-impl.h"

namespace llama_tp {
namespace {

struct EventDeleter {
    void operator()(ggml_backend_event_t e) const { ggml_backend_event_free(e); }
};
using EventPtr = std::unique_ptr<ggml_backend_event, EventDeleter>;

cudaEvent_t handle(ggml_backend_event_t event) {
    return static_cast<cudaEvent_t>(event->context);
}

class CudaStreamBridge final : public StreamBridge {
  public:
    CudaStreamBridge(ggml_backend_t backend, int cuda_device)
        : backend_(backend),
          stream_(cuda_device),
          produced_(ggml_backend_event_new(ggml_backend_get_device(backend))),
          consumed_(ggml_backend_event_new(ggml_backend_get_device(backend))) {
        if (!produced_ || !consumed_) {
            throw Error(std::string("the ") + ggml_backend_name(backend) + " backend has no events");
        }
    }

    void * enter() override {
        ggml_backend_event_record(produced_.get(), backend_);
        CurrentDevice current(stream_.device());
        check_cuda(cudaStreamWaitEvent(stream_.get(), handle(produced_.get()), 0), "cudaStreamWaitEvent",
                   stream_.device());
        return stream_.get();
    }

    void leave() override {
        CurrentDevice current(stream_.device());
        check_cuda(cudaEventRecord(handle(consumed_.get()), stream_.get()), "cudaEventRecord", stream_.device());
        ggml_backend_event_wait(backend_, consumed_.get());
    }

  private:
    ggml_backend_t backend_;
    CudaStream stream_;
    EventPtr produced_, consumed_;
};

}  // namespace

std::unique_ptr<StreamBridge> make_cuda_stream_bridge(ggml_backend_t backend, int cuda_device) {
    return std::make_unique<CudaStreamBridge>(backend, cuda_device);
}

}  // namespace llama_tp

// StreamBridge and StepCapture on ggml's CUDA backend. ggml's public API
// records an event on a backend's stream and makes a backend wait for an
// event, but gives out neither its stream nor its events' CUDA handles. This
// file alone reads the handle, ggml_backend_event::context (a cudaEvent_t on
// the CUDA backend, in ggml-backend-impl.h at the pinned commit), to join a
// stream of our own.

#include "ggml-ext/exec/step_capture.h"
#include "ggml-ext/exec/stream_bridge.h"

#include "ggml-ext/gpu/cuda_runtime.h"
#include "ggml-ext/error.h"
#include "ggml-ext/gpu/gpu_runtime_api.h"

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

// The capture's origin is a stream of its own; the backend's stream joins it
// by waiting for an event recorded there while capturing (CUDA captures
// across streams that way), and leaves it the same way back. Launches order
// after the backend's work and before its later work through two events of
// their own.
class CudaStepCapture final : public StepCapture {
  public:
    CudaStepCapture(ggml_backend_t backend, int cuda_device)
        : backend_(backend),
          origin_(cuda_device),
          fork_(new_event(backend)),
          join_(new_event(backend)),
          before_(new_event(backend)),
          after_(new_event(backend)) {}
    ~CudaStepCapture() override {
        if (exec_) (void) cudaGraphExecDestroy(exec_);
    }

    void begin() override {
        CurrentDevice current(origin_.device());
        check(cudaStreamBeginCapture(origin_.get(), cudaStreamCaptureModeRelaxed), "cudaStreamBeginCapture");
        check(cudaEventRecord(handle(fork_.get()), origin_.get()), "cudaEventRecord");
        ggml_backend_event_wait(backend_, fork_.get());
    }

    void end_and_launch() override {
        CurrentDevice current(origin_.device());
        ggml_backend_event_record(join_.get(), backend_);
        check(cudaStreamWaitEvent(origin_.get(), handle(join_.get()), 0), "cudaStreamWaitEvent");
        cudaGraph_t graph = nullptr;
        check(cudaStreamEndCapture(origin_.get(), &graph), "capturing a step into a CUDA graph");
        // The graph replaces the last one only once it is made: until then that one stays valid.
        cudaGraphExec_t made = nullptr;
        const cudaError_t status = cudaGraphInstantiateWithFlags(&made, graph, 0);
        (void) cudaGraphDestroy(graph);
        check(status, "cudaGraphInstantiateWithFlags");
        if (exec_) (void) cudaGraphExecDestroy(exec_);
        exec_ = made;
        launch();
    }

    void abandon() override {
        CurrentDevice current(origin_.device());
        ggml_backend_event_record(join_.get(), backend_);
        (void) cudaStreamWaitEvent(origin_.get(), handle(join_.get()), 0);
        cudaGraph_t graph = nullptr;
        if (cudaStreamEndCapture(origin_.get(), &graph) == cudaSuccess && graph) (void) cudaGraphDestroy(graph);
    }

    void replay() override {
        CurrentDevice current(origin_.device());
        launch();
    }

  private:
    static EventPtr new_event(ggml_backend_t backend) {
        EventPtr event(ggml_backend_event_new(ggml_backend_get_device(backend)));
        if (!event) throw Error(std::string("the ") + ggml_backend_name(backend) + " backend has no events");
        return event;
    }

    void launch() {
        ggml_backend_event_record(before_.get(), backend_);
        check(cudaStreamWaitEvent(origin_.get(), handle(before_.get()), 0), "cudaStreamWaitEvent");
        check(cudaGraphLaunch(exec_, origin_.get()), "cudaGraphLaunch");
        check(cudaEventRecord(handle(after_.get()), origin_.get()), "cudaEventRecord");
        ggml_backend_event_wait(backend_, after_.get());
    }

    void check(cudaError_t status, const char * what) const { check_cuda(status, what, origin_.device()); }

    ggml_backend_t backend_;
    CudaStream origin_;
    EventPtr fork_, join_, before_, after_;
    cudaGraphExec_t exec_ = nullptr;
};

}  // namespace

std::unique_ptr<StepCapture> make_cuda_step_capture(ggml_backend_t backend, int cuda_device) {
    return std::make_unique<CudaStepCapture>(backend, cuda_device);
}

std::unique_ptr<StreamBridge> make_cuda_stream_bridge(ggml_backend_t backend, int cuda_device) {
    return std::make_unique<CudaStreamBridge>(backend, cuda_device);
}

}  // namespace llama_tp

#pragma once
// RAII for the CUDA runtime resources the GPU engines hold (streams, mapped
// pinned host memory, the current device), and errors that say which call
// failed on which device. CUDA builds only.

#include "ggml-ext/gpu/gpu_runtime_api.h"

#include <atomic>
#include <cstddef>
#include <string>

namespace llama_tp {

// Blocks of `threads` for a grid-stride loop over n elements (at most 65535;
// the loop covers the rest).
inline unsigned grid_blocks(size_t n, int threads) {
    const size_t blocks = (n + threads - 1) / threads;
    return (unsigned) (blocks < 65535 ? blocks : 65535);
}

// Throws llama_tp::Error "what on CUDA device d: <the runtime's message>" unless status is cudaSuccess.
void check_cuda(cudaError_t status, const char * what, int device);

// The CUDA ordinal of the GPU at a PCI bus id as ggml's CUDA backend reports
// it (props.device_id; "-vN" marks one of several virtual devices of a GPU).
// Throws llama_tp::Error for a bus id no visible GPU has.
int cuda_device_of_bus_id(const std::string & bus_id);

// Makes a device current for a scope, and the previous one again after it.
class CurrentDevice {
  public:
    explicit CurrentDevice(int device);
    ~CurrentDevice();
    CurrentDevice(const CurrentDevice &) = delete;
    CurrentDevice & operator=(const CurrentDevice &) = delete;

  private:
    int previous_ = 0;
};

class CudaStream {
  public:
    // A non-blocking stream on the device.
    explicit CudaStream(int device);
    ~CudaStream();
    CudaStream(const CudaStream &) = delete;
    CudaStream & operator=(const CudaStream &) = delete;
    cudaStream_t get() const { return stream_; }
    int device() const { return device_; }

  private:
    int device_;
    cudaStream_t stream_ = nullptr;
};

// An event for ordering streams (no timing), of the device current at its creation.
class CudaEvent {
  public:
    explicit CudaEvent(int device);
    ~CudaEvent();
    CudaEvent(const CudaEvent &) = delete;
    CudaEvent & operator=(const CudaEvent &) = delete;
    cudaEvent_t get() const { return event_; }

  private:
    cudaEvent_t event_ = nullptr;
};

// Device memory of one device.
class DeviceBuffer {
  public:
    DeviceBuffer(size_t bytes, int device);
    ~DeviceBuffer();
    DeviceBuffer(const DeviceBuffer &) = delete;
    DeviceBuffer & operator=(const DeviceBuffer &) = delete;
    void * get() const { return data_; }

  private:
    void * data_ = nullptr;
};

// Page-locked host memory that every device reads and writes directly
// (mapped, portable): what two GPUs without a peer link exchange values through.
class MappedHostBuffer {
  public:
    // device: the one current while it is allocated (for messages).
    MappedHostBuffer(size_t bytes, int device);
    ~MappedHostBuffer();
    MappedHostBuffer(const MappedHostBuffer &) = delete;
    MappedHostBuffer & operator=(const MappedHostBuffer &) = delete;
    void * host() const { return host_; }
    // The address a kernel uses (the same as host() under unified addressing).
    void * device() const { return device_; }
    size_t bytes() const { return bytes_; }

  private:
    size_t bytes_;
    void * host_ = nullptr;
    void * device_ = nullptr;
};

// Waits for a stream's work without holding a core, until it completes (true)
// or give_up is set or timeout_s passes (false). Throws llama_tp::Error when
// the work failed.
bool wait_for_stream(cudaStream_t stream, int device, double timeout_s, const std::atomic<bool> & give_up);

}  // namespace llama_tp

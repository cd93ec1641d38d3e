#include "ggml-ext/gpu/cuda_runtime.h"

#include "ggml-ext/comm/allreduce_backoff.h"
#include "ggml-ext/error.h"

#include <string>

namespace llama_tp {

void check_cuda(cudaError_t status, const char * what, int device) {
    if (status == cudaSuccess) return;
    throw Error(std::string(what) + " on CUDA device " + std::to_string(device) + ": " + cudaGetErrorString(status));
}

int cuda_device_of_bus_id(const std::string & bus_id) {
    const size_t virtual_mark = bus_id.find("-v");
    const std::string physical = bus_id.substr(0, virtual_mark);
    int device = -1;
    const cudaError_t status = cudaDeviceGetByPCIBusId(&device, physical.c_str());
    if (status != cudaSuccess) {
        throw Error("no CUDA device at PCI bus id '" + physical + "': " + cudaGetErrorString(status));
    }
    return device;
}

CurrentDevice::CurrentDevice(int device) {
    check_cuda(cudaGetDevice(&previous_), "cudaGetDevice", device);
    check_cuda(cudaSetDevice(device), "cudaSetDevice", device);
}

CurrentDevice::~CurrentDevice() {
    (void) cudaSetDevice(previous_);
}

CudaStream::CudaStream(int device) : device_(device) {
    CurrentDevice current(device);
    check_cuda(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking), "cudaStreamCreateWithFlags", device);
}

CudaStream::~CudaStream() {
    if (stream_) (void) cudaStreamDestroy(stream_);
}

CudaEvent::CudaEvent(int device) {
    CurrentDevice current(device);
    check_cuda(cudaEventCreateWithFlags(&event_, cudaEventDisableTiming), "cudaEventCreateWithFlags", device);
}

CudaEvent::~CudaEvent() {
    if (event_) (void) cudaEventDestroy(event_);
}

DeviceBuffer::DeviceBuffer(size_t bytes, int device) {
    CurrentDevice current(device);
    check_cuda(cudaMalloc(&data_, bytes), "cudaMalloc", device);
}

DeviceBuffer::~DeviceBuffer() {
    if (data_) (void) cudaFree(data_);
}

MappedHostBuffer::MappedHostBuffer(size_t bytes, int device) : bytes_(bytes) {
    check_cuda(cudaHostAlloc(&host_, bytes, cudaHostAllocPortable | cudaHostAllocMapped), "cudaHostAlloc", device);
    const cudaError_t mapped = cudaHostGetDevicePointer(&device_, host_, 0);
    if (mapped != cudaSuccess) {
        (void) cudaFreeHost(host_);
        check_cuda(mapped, "cudaHostGetDevicePointer", device);
    }
}

MappedHostBuffer::~MappedHostBuffer() {
    if (host_) (void) cudaFreeHost(host_);
}

bool wait_for_stream(cudaStream_t stream, int device, double timeout_s, const std::atomic<bool> & give_up) {
    Backoff backoff(timeout_s);
    for (;;) {
        const cudaError_t status = cudaStreamQuery(stream);
        if (status == cudaSuccess) return true;
        if (status != cudaErrorNotReady) check_cuda(status, "a collective's work", device);
        if (give_up.load() || !backoff.pause()) return false;
    }
}

}  // namespace llama_tp

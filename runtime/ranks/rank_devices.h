#pragma once
// The backend device each rank of a process runs on. A rank holds its whole
// shard on its device: the GPUs where the build has them (rank r of a process
// on the host's GPU r), the CPU otherwise, or the devices -dev names.

#include <cstdint>
#include <string>
#include <vector>

#include "ggml-backend.h"

namespace llama_tp {

// llama-server's -dev and -ngl, as they apply to whole shards.
struct DeviceOptions {
    // One device per rank of the process, or one for all of them; "none": the
    // CPU. Empty: the default above.
    std::vector<std::string> names;
    // Layers on the GPUs: -1 auto, -2 all, else a count. 0 keeps the ranks on
    // the CPU; a count below the model's layers (part of the model on a GPU)
    // is refused where the ranks would run on GPUs.
    int32_t gpu_layers = -1;
};

struct RankDevices {
    std::vector<ggml_backend_dev_t> devices;  // one per rank of the process
    std::string why;                          // how they were chosen, for the log
};

// first_gpu: the host-wide index of the process's first rank (its index among
// the host's processes times the ranks per process), so that processes of one
// host take different GPUs. Throws llama_tp::Error naming the devices there are.
RankDevices choose_rank_devices(const DeviceOptions & options, int n_local, int first_gpu, int n_layer);

// The same choice over a list of devices (the build's, or a test's).
struct DeviceEntry {
    std::string name;  // "CPU", "CUDA0"
    std::string description;
    bool gpu = false;
};
using DeviceCatalog = std::vector<DeviceEntry>;
struct RankDeviceChoice {
    std::vector<size_t> entries;  // one catalog index per rank of the process
    std::string why;
};
RankDeviceChoice choose_rank_device_entries(const DeviceOptions & options, const DeviceCatalog & catalog, int n_local,
                                            int first_gpu, int n_layer);
// The build's devices, in ggml's registry order.
DeviceCatalog device_catalog();

// What ggml's CUDA backend names its devices before their index: "CUDA",
// "ROCm" on a HIP build.
const char * gpu_device_prefix();
// The index of a device of ggml's CUDA backend by its name ("CUDA1": 1;
// "ROCm1" on a HIP build), else -1.
int cuda_ordinal(const std::string & device_name);
// The CUDA runtime's ordinal of the GPU under a device of ggml's CUDA backend
// (GGML_CUDA_DEVICES may make several devices of one GPU), else -1.
int physical_cuda_device(ggml_backend_dev_t device);

// The devices of this build, a line each ("CUDA0: NVIDIA H200"), for --list-devices.
std::string device_list();

// Parses -dev's value: comma-separated names (white space ignored).
std::vector<std::string> parse_device_names(const std::string & value);

}  // namespace llama_tp

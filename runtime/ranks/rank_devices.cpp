#include "runtime/ranks/rank_devices.h"

#include "runtime/error.h"

#include <cctype>
#include <cstdlib>

#ifdef LLAMA_TP_HAVE_CUDA
#include "ggml-ext/gpu/cuda_runtime.h"
#endif

namespace llama_tp {

namespace {

std::string names_of(const DeviceCatalog & catalog, const std::vector<size_t> & picked) {
    std::string out;
    for (size_t i : picked) out += (out.empty() ? "" : ", ") + catalog[i].name;
    return out;
}

size_t cpu_entry(const DeviceCatalog & catalog) {
    for (size_t i = 0; i < catalog.size(); ++i) {
        if (!catalog[i].gpu) return i;
    }
    throw Error("no CPU backend device is available");
}

size_t named_entry(const DeviceCatalog & catalog, const std::string & name) {
    if (name == "none") return cpu_entry(catalog);
    for (size_t i = 0; i < catalog.size(); ++i) {
        if (catalog[i].name == name) return i;
    }
    std::string all;
    for (const DeviceEntry & e : catalog) all += (all.empty() ? "" : ", ") + e.name;
    throw Error("-dev: no device '" + name + "' in this build (devices: " + all + ")");
}

bool is_gpu(ggml_backend_dev_t d) {
    const enum ggml_backend_dev_type t = ggml_backend_dev_type(d);
    return t == GGML_BACKEND_DEVICE_TYPE_GPU || t == GGML_BACKEND_DEVICE_TYPE_IGPU;
}

}  // namespace

RankDeviceChoice choose_rank_device_entries(const DeviceOptions & options, const DeviceCatalog & catalog, int n_local,
                                            int first_gpu, int n_layer) {
    if (n_local < 1) throw Error("a process needs at least 1 rank");
    RankDeviceChoice out;
    const std::vector<std::string> & names = options.names;
    if (!names.empty()) {
        if (names.size() != 1 && (int) names.size() != n_local) {
            throw Error("-dev names " + std::to_string(names.size()) + " devices for " + std::to_string(n_local) +
                        " ranks in this process: name one per rank, or one for all");
        }
        for (int r = 0; r < n_local; ++r) out.entries.push_back(named_entry(catalog, names[names.size() == 1 ? 0 : r]));
        out.why = "-dev";
        return out;
    }
    std::vector<size_t> gpus;
    for (size_t i = 0; i < catalog.size(); ++i) {
        if (catalog[i].gpu) gpus.push_back(i);
    }
    if (gpus.empty() || options.gpu_layers == 0) {
        out.entries.assign((size_t) n_local, cpu_entry(catalog));
        out.why = gpus.empty() ? "no GPU in this build" : "-ngl 0";
        return out;
    }
    if (options.gpu_layers > 0 && options.gpu_layers < n_layer) {
        throw Error("-ngl " + std::to_string(options.gpu_layers) + " asks for " + std::to_string(options.gpu_layers) +
                    " of the model's " + std::to_string(n_layer) +
                    " layers on the GPUs, but each rank holds its whole shard on one device: use -ngl all (the "
                    "model on the GPUs) or -ngl 0 (on the CPU)");
    }
    if (first_gpu + n_local > (int) gpus.size()) {
        throw Error(std::to_string(first_gpu + n_local) + " ranks on this host need as many GPUs, and it has " +
                    std::to_string(gpus.size()) + " (" + names_of(catalog, gpus) +
                    "): name one device per rank with -dev, or run the ranks on the CPU with -ngl 0");
    }
    out.entries.assign(gpus.begin() + first_gpu, gpus.begin() + first_gpu + n_local);
    out.why = "one GPU per rank";
    return out;
}

DeviceCatalog device_catalog() {
    DeviceCatalog out;
    for (size_t i = 0; i < ggml_backend_dev_count(); ++i) {
        ggml_backend_dev_t d = ggml_backend_dev_get(i);
        out.push_back({ggml_backend_dev_name(d), ggml_backend_dev_description(d), is_gpu(d)});
    }
    return out;
}

RankDevices choose_rank_devices(const DeviceOptions & options, int n_local, int first_gpu, int n_layer) {
    const RankDeviceChoice choice = choose_rank_device_entries(options, device_catalog(), n_local, first_gpu, n_layer);
    RankDevices out;
    for (size_t i : choice.entries) out.devices.push_back(ggml_backend_dev_get(i));
    out.why = choice.why;
    return out;
}

const char * gpu_device_prefix() {
#ifdef LLAMA_TP_HAVE_HIP
    return "ROCm";
#else
    return "CUDA";
#endif
}

int cuda_ordinal(const std::string & name) {
    const std::string prefix = gpu_device_prefix();
    if (name.size() <= prefix.size() || name.compare(0, prefix.size(), prefix) != 0) return -1;
    for (size_t i = prefix.size(); i < name.size(); ++i) {
        if (!std::isdigit((unsigned char) name[i])) return -1;
    }
    return std::stoi(name.substr(prefix.size()));
}

int physical_cuda_device(ggml_backend_dev_t device) {
    if (cuda_ordinal(ggml_backend_dev_name(device)) < 0) return -1;
#ifdef LLAMA_TP_HAVE_CUDA
    ggml_backend_dev_props props{};
    ggml_backend_dev_get_props(device, &props);
    if (props.device_id) return cuda_device_of_bus_id(props.device_id);
#endif
    return cuda_ordinal(ggml_backend_dev_name(device));
}

std::string device_list() {
    std::string out;
    for (const DeviceEntry & e : device_catalog()) {
        out += (out.empty() ? "" : "\n") + e.name;
        if (!e.description.empty() && e.description != e.name) out += ": " + e.description;
    }
    return out;
}

std::vector<std::string> parse_device_names(const std::string & value) {
    std::vector<std::string> out;
    std::string name;
    for (size_t i = 0; i <= value.size(); ++i) {
        if (i == value.size() || value[i] == ',') {
            if (name.empty()) throw Error("an empty device name in '" + value + "'");
            out.push_back(name);
            name.clear();
        } else if (!std::isspace((unsigned char) value[i])) {
            name += value[i];
        }
    }
    return out;
}

}  // namespace llama_tp

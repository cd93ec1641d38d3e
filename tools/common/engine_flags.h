#pragma once
// The flags every tool that loads a model shares, with the same names and
// meaning as the server's: -m, -t, --tp, -ts, -dev, -ngl, --allreduce,
// --bf16-wire, --f32-wire, --[no-]split-invariant, -ctk/-ctv, --swa-full, the RoPE
// overrides, LoRA adapters and control vectors.

#include "ggml-ext/comm/process_group.h"
#include "runtime/engine.h"
#include "runtime/error.h"
#include "tools/common/args.h"

#include <algorithm>
#include <cstdlib>
#include <map>
#include <optional>
#include <string>
#include <vector>

namespace llama_tp {

struct EngineFlags {
    std::string model;
    int threads = 0;
    int tp = 1;
    std::vector<float> split;
    std::string allreduce = "auto";
    std::optional<WireType> wire;         // --bf16-wire, --f32-wire; unset: the engine's
    std::optional<bool> split_invariant;  // unset: the engine decides (EngineOptions)
    KvTypes kv_types;
    bool swa_full = false;
    bool check_tensors = false;
    std::vector<MetadataOverride> metadata_overrides;  // --override-kv
    RopeOverrides rope;
    std::vector<LoraOptions> loras;                     // --lora / --lora-scaled, in order
    std::vector<ControlVectorOptions> control_vectors;  // --control-vector / --control-vector-scaled
    ControlVectorRange control_range;                   // --control-vector-layer-range
    DeviceOptions devices;                              // -dev, -ngl
    bool portable_graph = false;
    std::map<int, std::string> model_path_of_process;
    // The processes of an MPI launch (see join_launched_processes), owned by main.
    ProcessGroup * processes = nullptr;

    static constexpr const char * kUsage =
        "  -m, --model FILE          GGUF model\n"
        "  -t, --threads N           threads, divided among ranks (default: all cores)\n"
        "  --tp N                    tensor-parallel ranks (default 1)\n"
        "  -ts, --tensor-split a,b   uneven split weights, one per rank\n"
        "  -dev, --device D[,D..]    the device of each rank, or one for all (none: the CPU;\n"
        "                            default: one GPU per rank where the build has GPUs)\n"
        "  -ngl, --gpu-layers N      all or auto: the ranks on GPUs; 0: on the CPU\n"
        "  --portable-graph          graphs of ggml's operations only, as on a GPU, on any device\n"
        "  --allreduce ENGINE        auto|cpu|butterfly (default auto; env LLAMA_TP_ALLREDUCE)\n"
        "  --bf16-wire               BF16 on the AllReduce wire, every float sum\n"
        "  --f32-wire                F32 on the wire, every float sum (default: F32 in host\n"
        "                            memory, BF16 from a size on between GPUs)\n"
        "  --split-invariant         logits that do not depend on --tp / -ts (exact sums on\n"
        "                            a reduction grid fixed by the model; the default where\n"
        "                            it costs nothing: dense q8_0 models, Q4_K_M/Q5_K_M/\n"
        "                            Q6_K/Q4_0/IQ4_XS ones with AVX-512; no --bf16-wire)\n"
        "  --no-split-invariant      ggml's float sums, upstream's numbers on one device\n"
        "  --model-path-rank R=PATH  under mpirun: process R reads the model at PATH\n"
        "  -ctk, --cache-type-k T    KV cache type of keys: f16 (default), bf16, f32, q8_0, q4_0,\n"
        "                            q4_1, q5_0, q5_1, iq4_nl\n"
        "  -ctv, --cache-type-v T    the same for values\n"
        "  --swa-full                sliding-window layers keep every cell, not their window\n"
        "  --check-tensors           check every weight value read (NaN, infinity, block scales)\n"
        "  --override-kv K=T:V[,..]  metadata read in place of the file's (T: int, float, bool, str)\n"
        "  --lora FILE[,FILE..]      LoRA adapters at scale 1 (repeatable; upstream's too)\n"
        "  --lora-scaled F:S[,F:S..] LoRA adapters at those scales\n"
        "  --control-vector F[,F..]  control vectors at scale 1 (upstream's too)\n"
        "  --control-vector-scaled F:S[,F:S..]  control vectors at those scales\n"
        "  --control-vector-layer-range A B  the layers they change, both inclusive (default: all)\n"
        "  --rope-scaling T, --rope-scale N, --rope-freq-base N, --rope-freq-scale N,\n"
        "  --yarn-orig-ctx N, --yarn-ext-factor N, --yarn-attn-factor N, --yarn-beta-slow N,\n"
        "  --yarn-beta-fast N        RoPE overrides, as llama-server's (none, linear, yarn)\n";

    // Consumes flag f (and its value) if it is one of these; false otherwise.
    bool take(const std::string & f, ArgReader & a) {
        if (f == "-m" || f == "--model")
            model = a.value(f);
        else if (f == "-t" || f == "--threads")
            threads = (int) a.integer(f, 0, 1024);
        else if (f == "--tp")
            tp = (int) a.integer(f, 1, 64);
        else if (f == "-ts" || f == "--tensor-split")
            split = a.reals(f);
        else if (f == "-dev" || f == "--device") {
            try {
                devices.names = parse_device_names(a.value(f));
            } catch (const Error & e) {
                a.fail(f + ": " + e.what());
            }
        } else if (f == "-ngl" || f == "--gpu-layers" || f == "--n-gpu-layers") {
            const std::string v = a.value(f);
            devices.gpu_layers = v == "auto" ? -1 : v == "all" ? -2 : (int32_t) a.integer(f, v, 0, 1 << 20);
        } else if (f == "--portable-graph")
            portable_graph = true;
        else if (f == "--allreduce")
            allreduce = a.value(f);
        else if (f == "--bf16-wire" || f == "--f32-wire") {
            const WireType w = f == "--bf16-wire" ? WireType::BF16 : WireType::F32;
            if (wire && *wire != w) a.fail("--bf16-wire and --f32-wire exclude each other");
            wire = w;
        } else if (f == "--swa-full")
            swa_full = true;
        else if (f == "--check-tensors")
            check_tensors = true;
        else if (f == "--override-kv") {
            const std::string v = a.value(f);
            size_t at = 0;
            while (at <= v.size()) {
                const size_t comma = std::min(v.find(',', at), v.size());
                try {
                    metadata_overrides.push_back(MetadataOverride::parse(v.substr(at, comma - at)));
                } catch (const Error & e) {
                    a.fail(f + ": " + e.what());
                }
                at = comma + 1;
            }
        } else if (f == "--lora" || f == "--lora-scaled") {
            for (auto & [path, scale] : scaled_files(f, a.value(f), f == "--lora-scaled", a))
                loras.push_back({path, scale});
        } else if (f == "--control-vector" || f == "--control-vector-scaled") {
            for (auto & [path, scale] : scaled_files(f, a.value(f), f == "--control-vector-scaled", a)) {
                control_vectors.push_back({path, scale});
            }
        } else if (f == "--control-vector-layer-range") {
            control_range.first = (int32_t) a.integer(f, 0, 1 << 20);
            control_range.last = (int32_t) a.integer(f, 0, 1 << 20);
        } else if (f == "--split-invariant")
            split_invariant = true;
        else if (f == "--no-split-invariant")
            split_invariant = false;
        else if (f == "-ctk" || f == "--cache-type-k" || f == "-ctv" || f == "--cache-type-v") {
            const std::string v = a.value(f);
            try {
                (f == "-ctk" || f == "--cache-type-k" ? kv_types.k : kv_types.v) = kv_type_from_name(v);
            } catch (const Error & e) {
                a.fail(f + ": " + e.what());
            }
        } else if (take_rope(f, a)) {
        } else if (f == "--model-path-rank") {
            const std::string v = a.value(f);
            const size_t eq = v.find('=');
            char * end = nullptr;
            const long p = eq == std::string::npos ? -1 : std::strtol(v.c_str(), &end, 10);
            if (p < 0 || end != v.c_str() + eq || eq + 1 == v.size()) a.fail(f + " expects RANK=PATH, not '" + v + "'");
            model_path_of_process[(int) p] = v.substr(eq + 1);
        } else
            return false;
        return true;
    }

    // FILE[,FILE..] at scale 1, or with `scaled` FILE:SCALE[,FILE:SCALE..], as
    // llama-server's --lora / --lora-scaled and --control-vector[-scaled].
    static std::vector<std::pair<std::string, float>> scaled_files(const std::string & f, const std::string & v,
                                                                   bool scaled, ArgReader & a) {
        std::vector<std::pair<std::string, float>> files;
        size_t at = 0;
        while (at <= v.size()) {
            const size_t comma = std::min(v.find(',', at), v.size());
            const std::string item = v.substr(at, comma - at);
            at = comma + 1;
            if (!scaled) {
                files.emplace_back(item, 1.0f);
                continue;
            }
            const size_t colon = item.rfind(':');
            char * end = nullptr;
            const double scale = colon == std::string::npos ? 0.0 : std::strtod(item.c_str() + colon + 1, &end);
            if (colon == std::string::npos || colon == 0 || end == item.c_str() + colon + 1 || *end != '\0') {
                a.fail(f + " expects FILE:SCALE, not '" + item + "'");
            }
            files.emplace_back(item.substr(0, colon), (float) scale);
        }
        return files;
    }

    // The RoPE overrides; false if f is none of them.
    bool take_rope(const std::string & f, ArgReader & a) {
        if (f == "--rope-scaling") {
            const std::string v = a.value(f);
            rope.scaling = rope_scaling_from_name(v);
            if (!rope.scaling) a.fail(f + " takes none, linear or yarn, not '" + v + "'");
        } else if (f == "--rope-scale") {
            const double scale = a.real(f);
            if (scale <= 0.0) a.fail(f + " must be positive");
            rope.freq_scale = (float) (1.0 / scale);
        } else if (f == "--rope-freq-base") {
            rope.freq_base = (float) a.real(f);
        } else if (f == "--rope-freq-scale") {
            rope.freq_scale = (float) a.real(f);
        } else if (f == "--yarn-orig-ctx") {
            rope.yarn_orig_ctx = (int32_t) a.integer(f, 0, 1 << 30);
        } else if (f == "--yarn-ext-factor") {
            rope.yarn_ext_factor = (float) a.real(f);
        } else if (f == "--yarn-attn-factor") {
            rope.yarn_attn_factor = (float) a.real(f);
        } else if (f == "--yarn-beta-slow") {
            rope.yarn_beta_slow = (float) a.real(f);
        } else if (f == "--yarn-beta-fast") {
            rope.yarn_beta_fast = (float) a.real(f);
        } else {
            return false;
        }
        return true;
    }

    // Joins the processes of an MPI launch (owned by the caller) and takes
    // this process's own model path where --model-path-rank gives one.
    void join(ProcessGroup * group) {
        processes = group;
        const auto own = model_path_of_process.find(group ? group->rank() : 0);
        if (own != model_path_of_process.end()) model = own->second;
    }

    // Engine options for these flags at a given tensor-parallel degree (per
    // process); joined: the engine spans the processes of an MPI launch.
    EngineOptions options(int degree, bool joined = true) const {
        EngineOptions eo;
        eo.model_path = model;
        eo.n_threads = threads;
        eo.tp = degree;
        eo.processes = joined ? processes : nullptr;
        // A BF16 wire takes the float sums at every degree, so that a TP=1
        // reference sums as the run it is compared with.
        eo.split_invariant = split_invariant;
        if (!split_invariant && wire == WireType::BF16) eo.split_invariant = false;
        eo.kv_types = kv_types;
        eo.swa_full = swa_full;
        eo.check_tensors = check_tensors;
        eo.metadata_overrides = metadata_overrides;
        eo.rope = rope;
        eo.loras = loras;
        eo.control_vectors = control_vectors;
        eo.control_range = control_range;
        eo.devices = devices;
        eo.portable_graph = portable_graph;
        if (degree > 1 || eo.processes) {
            eo.tensor_split = split;
            eo.allreduce = allreduce;
            eo.allreduce_wire = wire;
        }
        return eo;
    }
};

// Before any graph, a reference run's included: ggml's own CUDA graphs off
// for the process where whole steps are to be captured
// (ggml_graphs_off_for_capture). Throws llama_tp::Error for a malformed value.
inline void prepare_process_for_capture() {
    if (ggml_graphs_off_for_capture(Environment::of_process())) setenv("GGML_CUDA_DISABLE_GRAPHS", "1", 1);
}

}  // namespace llama_tp

// llama-tp-bench: prefill and decode tokens per second of the llama-tp
// runtime, optionally beside upstream llama_decode on the same model in the
// same process (alternating runs, medians, ratios), plus decode's fraction
// of the memory-bandwidth ceiling.

#include "runtime/engine.h"
#include "runtime/error.h"
#include "runtime/model/gguf_file.h"
#include "runtime/model/hparams.h"
#include "tools/common/args.h"
#include "tools/common/engine_flags.h"
#include "tools/common/memory_bandwidth.h"
#include "tools/common/upstream_decoder.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <functional>
#include <memory>
#include <string>
#include <vector>

namespace llama_tp {
namespace {

const std::string kUsage = std::string("usage: llama-tp-bench -m FILE [options]\n") + EngineFlags::kUsage +
                           "  -p N                      prompt tokens for the prefill figure (default 512; 0: skip)\n"
                           "  -n N                      tokens for the decode figure (default 128; 0: skip)\n"
                           "  -b, --batch-size N        prefill chunk (default 512)\n"
                           "  -np, --parallel N         decode N sequences together, one token each per step,\n"
                           "                            each after a prompt of -d tokens (default 1); upstream\n"
                           "                            then keeps one KV stream per sequence, as llama-server\n"
                           "  -d, --depth N             prompt tokens before the decode figure (default 0)\n"
                           "  -r, --repetitions N       runs per figure, median reported (default 3)\n"
                           "  -kvu, --kv-unified        one KV pool for all sequences and ggml's attention\n"
                           "                            (upstream's layout) instead of per-sequence regions\n"
                           "                            and row attention\n"
                           "  --vs-upstream             also run upstream llama_decode (order swapped every\n"
                           "                            repetition) and print ratios\n"
                           "  --json                    print one JSON object\n";

struct Options {
    EngineFlags engine;
    int n_prompt = 512;
    int n_gen = 128;
    int n_batch = 512;
    int n_parallel = 1;
    int depth = 0;
    int reps = 3;
    bool kv_unified = false;
    bool vs_upstream = false;
    bool json = false;
};

Options parse(int argc, char ** argv) {
    Options o;
    ArgReader a(argc, argv, kUsage);
    while (!a.done()) {
        const std::string f = a.next();
        if (o.engine.take(f, a)) continue;
        if (f == "-p")
            o.n_prompt = (int) a.integer(f, 0, 1 << 16);
        else if (f == "-n")
            o.n_gen = (int) a.integer(f, 0, 1 << 16);
        else if (f == "-b" || f == "--batch-size")
            o.n_batch = (int) a.integer(f, 1, 1 << 16);
        else if (f == "-np" || f == "--parallel")
            o.n_parallel = (int) a.integer(f, 1, 256);
        else if (f == "-d" || f == "--depth")
            o.depth = (int) a.integer(f, 0, 1 << 16);
        else if (f == "-r" || f == "--repetitions")
            o.reps = (int) a.integer(f, 1, 100);
        else if (f == "-kvu" || f == "--kv-unified")
            o.kv_unified = true;
        else if (f == "--vs-upstream")
            o.vs_upstream = true;
        else if (f == "--json")
            o.json = true;
        else if (f == "-h" || f == "--help")
            a.help();
        else
            a.fail("unknown argument '" + f + "'");
    }
    if (o.engine.model.empty()) a.fail("a model is required (-m FILE)");
    return o;
}

double seconds_of(const std::function<void()> & fn) {
    const auto t0 = std::chrono::steady_clock::now();
    fn();
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

double median(std::vector<double> v) {
    std::sort(v.begin(), v.end());
    return v.empty() ? 0.0 : v[v.size() / 2];
}

// Prefill of n tokens in chunks, then decode of n_gen tokens one at a time,
// on a fresh sequence; works for Engine and UpstreamDecoder alike.
template <typename Decoder>
double time_prefill(Decoder & d, int n, int n_batch, int32_t n_vocab) {
    d.seq_remove(0, 0, -1);
    return seconds_of([&] {
        Batch b;
        for (int start = 0; start < n; start += n_batch) {
            b.clear();
            const int end = std::min(n, start + n_batch);
            for (int i = start; i < end; ++i) b.add((i * 7919 + 13) % n_vocab, i, 0, i == end - 1);
            d.decode(b);
        }
    });
}

// n_seq sequences, each given `depth` prompt tokens (one batch per
// sequence), then n decode steps of one token per sequence; returns seconds
// for the steps.
template <typename Decoder>
double time_decode(Decoder & d, int n, int n_seq, int depth, int n_batch, int32_t n_vocab) {
    Batch b;
    for (int s = 0; s < n_seq; ++s) {
        d.seq_remove(s, 0, -1);
        for (int start = 0; start < depth; start += n_batch) {
            b.clear();
            const int end = std::min(depth, start + n_batch);
            for (int i = start; i < end; ++i) b.add((i * 7919 + 13 * s) % n_vocab, i, s, i == end - 1);
            d.decode(b);
        }
    }
    auto step = [&](int i) {
        b.clear();
        for (int s = 0; s < n_seq; ++s) b.add((i * 7919 + 13 * s) % n_vocab, depth + i, s, true);
        d.decode(b);
    };
    step(0);  // the first step builds the graph; not timed (llama-bench warms up too)
    return seconds_of([&] {
        for (int i = 1; i <= n; ++i) step(i);
    });
}

struct Figures {
    std::vector<double> ours_pp, ours_tg, up_pp, up_tg;
};

int run(const Options & o) {
    EngineOptions eo = o.engine.options(o.engine.tp);
    // Every sequence's share of the cells holds the longer of the figures.
    eo.n_ctx = o.n_parallel * (std::max(o.n_prompt, o.depth + o.n_gen) + 16);
    eo.n_seq_max = o.n_parallel;
    eo.n_batch = std::max(o.n_batch, o.n_parallel);
    eo.progress = !o.json;
    eo.kv_unified = o.kv_unified;
    std::unique_ptr<Engine> ours = Engine::load(eo);
    if (ours->follower()) {
        ours->follow();
        return 0;
    }
    const int32_t n_vocab = ours->info().n_vocab;
    const int threads = ours->options().n_threads;

    std::unique_ptr<UpstreamDecoder> up;
    if (o.vs_upstream) {
        UpstreamOptions uo;
        uo.model_path = o.engine.model;
        uo.n_threads = threads;
        uo.n_ctx = eo.n_ctx;
        uo.n_batch = eo.n_batch;
        uo.n_seq_max = o.n_parallel;
        uo.kv_unified = o.n_parallel == 1;
        uo.kv_types = eo.kv_types;
        uo.swa_full = eo.swa_full;  // as llama-server, which keeps the window unless told
        uo.rope = eo.rope;
        uo.loras = eo.loras;
        uo.control_vectors = eo.control_vectors;
        uo.control_range = eo.control_range;
        uo.metadata_overrides = eo.metadata_overrides;
        uo.devices = eo.devices;
        up = std::make_unique<UpstreamDecoder>(uo);
    }

    // A/B alternation with the order swapped every repetition, so that
    // neither side always runs with the caches and clocks the other left.
    Figures f;
    const double tokens_per_step = o.n_parallel;
    auto decode_seconds = [&](auto & d) { return time_decode(d, o.n_gen, o.n_parallel, o.depth, o.n_batch, n_vocab); };
    // Rank 0's time inside collectives, as a share of our runs' time.
    double ours_s = 0.0, collective_s = 0.0;
    auto run_ours = [&] {
        const double c0 = ours->collective_stats()[0].seconds;
        ours_s += seconds_of([&] {
            if (o.n_prompt > 0) f.ours_pp.push_back(o.n_prompt / time_prefill(*ours, o.n_prompt, o.n_batch, n_vocab));
            if (o.n_gen > 0) f.ours_tg.push_back(tokens_per_step * o.n_gen / decode_seconds(*ours));
        });
        collective_s += ours->collective_stats()[0].seconds - c0;
    };
    auto run_upstream = [&] {
        if (!up) return;
        if (o.n_prompt > 0) f.up_pp.push_back(o.n_prompt / time_prefill(*up, o.n_prompt, o.n_batch, n_vocab));
        if (o.n_gen > 0) f.up_tg.push_back(tokens_per_step * o.n_gen / decode_seconds(*up));
    };
    for (int r = 0; r < o.reps; ++r) {
        if (r % 2 == 0) {
            run_ours();
            run_upstream();
        } else {
            run_upstream();
            run_ours();
        }
    }

    const double bw = measure_read_bandwidth(threads);
    const ModelInfo & mi = ours->info();
    // A decode step reads every weight but the embedding table (one row per
    // token) once for all its sequences, plus each sequence's KV cache: its
    // prompt and on average half of what the run adds (F16 K and V), of
    // sliding-window layers only the window.
    const double embd_bytes = (double) mi.n_vocab * mi.n_embd * (double) mi.weight_bytes / (double) mi.n_params;
    const double cells = o.depth + o.n_gen / 2.0;
    const HParams hp = read_hparams(GgufFile(o.engine.model, o.engine.metadata_overrides));
    double kv_bytes = 0.0;
    for (int il = 0; il < hp.n_layer_kv(); ++il) {
        const double read = hp.is_swa(il) && hp.n_swa > 0 ? std::min(cells, (double) hp.n_swa) : cells;
        kv_bytes += 2.0 * 2.0 * (double) hp.n_embd_kv(il) * read;
    }
    const double bytes_per_token = ((double) mi.weight_bytes - embd_bytes) / o.n_parallel + kv_bytes;
    const double tg = median(f.ours_tg);
    const double roofline = bw > 0 ? tg * bytes_per_token / bw : 0.0;

    std::printf(
        "{\"model\": \"%s\", \"threads\": %d, \"tp\": %d, \"processes\": %d, \"split_invariant\": %s, "
        "\"one_pass_products\": %s, \"n_prompt\": %d, \"n_gen\": %d, \"parallel\": %d, \"depth\": %d, "
        "\"repetitions\": %d",
        o.engine.model.c_str(), threads, mi.tp, o.engine.processes ? o.engine.processes->size() : 1,
        ours->options().exact_sums() ? "true" : "false",
        ours->options().one_pass_products.value_or(false) ? "true" : "false", o.n_prompt, o.n_gen, o.n_parallel,
        o.depth, o.reps);
    std::printf(", \"prefill_tok_s\": %.2f, \"decode_tok_s\": %.2f", median(f.ours_pp), tg);
    if (up) {
        const double upp = median(f.up_pp), utg = median(f.up_tg);
        std::printf(", \"upstream_prefill_tok_s\": %.2f, \"upstream_decode_tok_s\": %.2f", upp, utg);
        std::printf(", \"prefill_ratio\": %.3f, \"decode_ratio\": %.3f", upp > 0 ? median(f.ours_pp) / upp : 0.0,
                    utg > 0 ? tg / utg : 0.0);
        std::printf(", \"upstream_roofline_fraction\": %.3f", bw > 0 ? utg * bytes_per_token / bw : 0.0);
    }
    std::printf(", \"collective_share\": %.3f", ours_s > 0 ? collective_s / ours_s : 0.0);
    std::printf(", \"rank_memory_mib\": [");
    const std::vector<uint64_t> mem = ours->rank_memory_bytes();
    for (size_t r = 0; r < mem.size(); ++r) std::printf("%s%.1f", r ? ", " : "", mem[r] / 1048576.0);
    std::printf("]");
    std::printf(", \"decode_bytes_per_token\": %.0f, \"memory_bandwidth_gb_s\": %.2f, \"roofline_fraction\": %.3f}\n",
                bytes_per_token, bw / 1e9, roofline);
    return 0;
}

}  // namespace
}  // namespace llama_tp

int main(int argc, char ** argv) {
    llama_tp::Options o = llama_tp::parse(argc, argv);
    // Outlives the error message: a process group that did not end together
    // ends the whole job when it goes.
    std::unique_ptr<llama_tp::ProcessGroup> processes;
    try {
        llama_tp::prepare_process_for_capture();
        processes = llama_tp::join_launched_processes(llama_tp::kProcessTimeout_s);
        o.engine.join(processes.get());
        return llama_tp::run(o);
    } catch (const llama_tp::Error & e) {
        std::fprintf(stderr, "error: %s\n", e.what());
        return 1;
    }
}

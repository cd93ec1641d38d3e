// llama-tp-make-model: writes GGUF models with seeded random weights and a
// real tokenizer, to test llama-tp's runtime against upstream libllama.

#include "tools/make-model/output/gguf_output.h"
#include "tools/make-model/spec/model_spec.h"
#include "tools/make-model/options.h"

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

namespace {

using namespace llama_tp::make_model;

// Default vocabularies and chat templates are copied at build time into
// ../share/llama-tp/ relative to the executable, which keeps the build tree
// relocatable.
std::string share_path(const char * name, const char * argv0) {
    std::error_code ec;
    std::filesystem::path exe = std::filesystem::read_symlink("/proc/self/exe", ec);
    if (ec) {
        exe = std::filesystem::absolute(argv0, ec);
    }
    return (exe.parent_path().parent_path() / "share" / "llama-tp" / name).string();
}

// The chat template to write: the named file, else the architecture's
// default beside the vocabularies; empty for the vocabulary's own.
std::string read_chat_template(const Options & options, const char * argv0) {
    std::string path = options.chat_template_path;
    if (path.empty()) {
        const char * name = default_chat_template_file(options.spec.arch);
        if (!name) {
            return "";
        }
        path = share_path(name, argv0);
    }
    std::ifstream in(path, std::ios::binary);
    if (!in) {
        throw IoError("cannot read chat template '" + path + "'");
    }
    std::ostringstream text;
    text << in.rdbuf();
    if (text.str().empty()) {
        throw IoError("chat template '" + path + "' is empty");
    }
    return text.str();
}

std::string resolve_vocab_path(const Options & options, const char * argv0) {
    if (!options.vocab_path.empty()) {
        return options.vocab_path;
    }
    const std::string path = share_path(default_vocab_file(options.spec.arch), argv0);
    std::error_code ec;
    if (!std::filesystem::exists(path, ec)) {
        throw IoError("default vocabulary '" + path + "' not found (is the build complete?); pass --vocab FILE");
    }
    return path;
}

void report_plan(const ModelSpec & spec, const std::vector<TensorPlan> & plans) {
    for (const TensorPlan & plan : plans) {
        if (!plan.fallback.empty()) {
            std::fprintf(stderr, "note: %s: %s\n", plan.name.c_str(), plan.fallback.c_str());
        }
    }
    const Shape & s = spec.shape;
    std::fprintf(stderr,
                 "%s: n_embd=%lld n_layer=%lld n_head=%lld n_head_kv=%lld head_dim=%lld n_ff=%lld n_ctx=%lld "
                 "rope_theta=%g%s",
                 spec.display_name().c_str(), (long long) s.n_embd, (long long) s.n_layer, (long long) s.n_head,
                 (long long) s.n_head_kv, (long long) s.head_dim, (long long) s.n_ff, (long long) s.n_ctx, s.rope_theta,
                 s.tied_output ? " tied-output" : "");
    if (spec.arch == Arch::gemma2 || spec.arch == Arch::gemma3 || spec.arch == Arch::gemma4 ||
        spec.arch == Arch::gpt_oss) {
        std::fprintf(stderr, " n_swa=%lld swa_pattern=%lld", (long long) s.n_swa, (long long) s.swa_pattern);
        if (s.logit_softcap > 0.0) std::fprintf(stderr, " logit_softcap=%g", s.logit_softcap);
    }
    if (spec.arch == Arch::gemma4) {
        std::fprintf(stderr, " head_dim_global=%lld n_head_kv_global=%lld n_embd_per_layer=%lld n_kv_shared=%lld",
                     (long long) s.head_dim_global, (long long) s.n_head_kv_global, (long long) s.n_embd_per_layer,
                     (long long) s.n_kv_shared);
    }
    if (s.full_attention_interval > 0) {
        std::fprintf(stderr,
                     " full_attention_interval=%lld ssm_n_group=%lld ssm_dt_rank=%lld ssm_d_state=%lld n_rot=%lld",
                     (long long) s.full_attention_interval, (long long) s.ssm_n_group, (long long) s.ssm_dt_rank,
                     (long long) s.ssm_d_state, (long long) s.n_rot);
        if (s.ssm_in) std::fprintf(stderr, " ssm_in");
    }
    if (spec.arch == Arch::phi3) {
        std::fprintf(stderr, " n_ctx_orig=%lld (LongRoPE)", (long long) s.n_ctx_orig);
    }
    if (spec.arch == Arch::deepseek2) {
        std::fprintf(stderr, " q_lora_rank=%lld kv_lora_rank=%lld n_rot=%lld v_head_dim=%lld expert_groups=%lld/%lld%s",
                     (long long) s.q_lora_rank, (long long) s.kv_lora_rank, (long long) s.n_rot,
                     (long long) s.v_head_dim, (long long) s.n_group_used, (long long) s.n_expert_groups,
                     s.softmax_routing ? " softmax" : "");
    }
    if (has_experts(s)) {
        std::fprintf(stderr, " n_expert=%lld n_expert_used=%lld n_ff_exp=%lld", (long long) s.n_expert,
                     (long long) s.n_expert_used, (long long) s.n_ff_exp);
    }
    std::fprintf(stderr, "\n");
}

int run(const Options & options, const char * argv0) {
    const int n_threads =
        options.n_threads > 0 ? options.n_threads : static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
    if (!options.control_vector.base_path.empty()) {
        const ControlVectorResult r = write_control_vector(options.output_path, options.control_vector);
        std::fprintf(stderr, "wrote %s: control vector for %s, %lld directions of %lld\n", options.output_path.c_str(),
                     options.control_vector.base_path.c_str(), (long long) r.n_layers, (long long) r.n_embd);
        return 0;
    }
    if (!options.lora.base_path.empty()) {
        const LoraResult r = write_lora_adapter(options.output_path, options.lora, n_threads);
        std::fprintf(stderr, "wrote %s: LoRA adapter of rank %lld for %s, %zu pairs, %.1f KiB\n",
                     options.output_path.c_str(), (long long) options.lora.rank, options.lora.base_path.c_str(),
                     r.n_pairs, static_cast<double>(r.file_bytes) / 1024);
        return 0;
    }
    ModelSpec spec = options.spec;
    spec.chat_template = read_chat_template(options, argv0);
    const Vocabulary vocab(resolve_vocab_path(options, argv0));
    const std::vector<TensorPlan> plans = plan_tensors(spec.arch, spec.shape, spec.type, vocab.n_tokens());
    report_plan(spec, plans);
    if (options.dry_run) {
        const size_t n_parts = plan_parts(plans, options.split_max_bytes).size();
        std::printf("%s: %zu tensors, %llu bytes", spec.display_name().c_str(), plans.size(),
                    static_cast<unsigned long long>(planned_file_size(spec, vocab, plans, options.split_max_bytes)));
        std::printf(options.split_max_bytes > 0 ? " in %zu parts\n" : "\n", n_parts);
        return 0;
    }

    const WriteResult result = write_model(options.output_path, spec, vocab, plans, n_threads, options.split_max_bytes);
    const std::string parts =
        result.paths.size() > 1 ? " in " + std::to_string(result.paths.size()) + " parts" : std::string();
    std::fprintf(stderr, "wrote %s: %zu tensors%s, %.1f MiB, vocabulary %lld tokens from %s\n", result.paths[0].c_str(),
                 result.n_tensors, parts.c_str(), static_cast<double>(result.file_bytes) / (1 << 20),
                 static_cast<long long>(vocab.n_tokens()), vocab.path().c_str());
    for (size_t p = 1; p < result.paths.size(); ++p) {
        std::fprintf(stderr, "wrote %s\n", result.paths[p].c_str());
    }
    return 0;
}

}  // namespace

int main(int argc, char ** argv) {
    const std::string program = std::filesystem::path(argv[0]).filename().string();
    try {
        const Options options = parse_options(std::vector<std::string>(argv + 1, argv + argc));
        if (options.help) {
            std::fputs(usage_text(program).c_str(), stdout);
            return 0;
        }
        return run(options, argv[0]);
    } catch (const UsageError & e) {
        std::fprintf(stderr, "%s: error: %s\n\n%s", program.c_str(), e.what(), usage_text(program).c_str());
        return 2;
    } catch (const IoError & e) {
        std::fprintf(stderr, "%s: error: %s\n", program.c_str(), e.what());
        return 1;
    } catch (const std::exception & e) {
        std::fprintf(stderr, "%s: error: %s\n", program.c_str(), e.what());
        return 1;
    }
}

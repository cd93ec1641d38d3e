#include "tools/make-model/options.h"

#include <cerrno>
#include <cstdint>
#include <charconv>
#include <cmath>
#include <cstdlib>
#include <functional>
#include <algorithm>
#include <map>

namespace llama_tp::make_model {
namespace {

// An integer of at least `least` (1: positive; 0: a count that may be none).
int64_t parse_integer(const std::string & flag, const std::string & text, int64_t least) {
    int64_t value = 0;
    const char * end = text.data() + text.size();
    const auto [ptr, ec] = std::from_chars(text.data(), end, value);
    if (text.empty() || ec != std::errc() || ptr != end) {
        throw UsageError(flag + " needs an integer, got '" + text + "'");
    }
    if (value < least) {
        throw UsageError(flag + (least > 0 ? " must be positive, got " : " must not be negative, got ") + text);
    }
    return value;
}

int64_t parse_positive(const std::string & flag, const std::string & text) {
    return parse_integer(flag, text, 1);
}

uint64_t parse_seed(const std::string & text) {
    uint64_t value = 0;
    const char * end = text.data() + text.size();
    const auto [ptr, ec] = std::from_chars(text.data(), end, value);
    if (text.empty() || ec != std::errc() || ptr != end) {
        throw UsageError("--seed needs a non-negative integer below 2^64, got '" + text + "'");
    }
    return value;
}

double parse_positive_real(const std::string & flag, const std::string & text) {
    errno = 0;
    char * end = nullptr;
    const double value = std::strtod(text.c_str(), &end);
    if (text.empty() || end != text.c_str() + text.size() || errno != 0 || !std::isfinite(value)) {
        throw UsageError(flag + " needs a number, got '" + text + "'");
    }
    if (value <= 0.0) {
        throw UsageError(flag + " must be positive, got " + text);
    }
    return value;
}

// A byte count with an optional K, M or G suffix (powers of 1024).
uint64_t parse_size(const std::string & flag, const std::string & text) {
    std::string digits = text;
    uint64_t unit = 1;
    if (!digits.empty()) {
        switch (digits.back()) {
            case 'K':
                unit = uint64_t(1) << 10;
                break;
            case 'M':
                unit = uint64_t(1) << 20;
                break;
            case 'G':
                unit = uint64_t(1) << 30;
                break;
        }
        if (unit > 1) digits.pop_back();
    }
    const int64_t n = parse_positive(flag, digits);
    if ((uint64_t) n > UINT64_MAX / unit) {
        throw UsageError(flag + " is too large: " + text);
    }
    return (uint64_t) n * unit;
}

struct ParseState {
    Options options;
    ShapeOverrides overrides;
    std::string arch = "llama";
    std::string preset = "tiny";
    std::string type = "f16";
};

using ValueHandler = std::function<void(ParseState &, const std::string & flag, const std::string & value)>;

ValueHandler size_field(std::optional<int64_t> ShapeOverrides::*field) {
    return [field](ParseState & s, const std::string & flag, const std::string & value) {
        s.overrides.*field = parse_positive(flag, value);
    };
}

const std::map<std::string, ValueHandler> & value_flags() {
    static const std::map<std::string, ValueHandler> flags = {
        {"--arch", [](ParseState & s, const std::string &, const std::string & v) { s.arch = v; }},
        {"--preset", [](ParseState & s, const std::string &, const std::string & v) { s.preset = v; }},
        {"--type", [](ParseState & s, const std::string &, const std::string & v) { s.type = v; }},
        {"--seed",
         [](ParseState & s, const std::string &, const std::string & v) { s.options.spec.seed = parse_seed(v); }},
        {"--split-max-size", [](ParseState & s, const std::string & flag,
                                const std::string & v) { s.options.split_max_bytes = parse_size(flag, v); }},
        {"-o", [](ParseState & s, const std::string &, const std::string & v) { s.options.output_path = v; }},
        {"--output", [](ParseState & s, const std::string &, const std::string & v) { s.options.output_path = v; }},
        {"--vocab", [](ParseState & s, const std::string &, const std::string & v) { s.options.vocab_path = v; }},
        {"--chat-template",
         [](ParseState & s, const std::string &, const std::string & v) { s.options.chat_template_path = v; }},
        {"--threads",
         [](ParseState & s, const std::string & f, const std::string & v) {
             s.options.n_threads = static_cast<int>(std::min<int64_t>(parse_positive(f, v), 1024));
         }},
        {"--n-embd", size_field(&ShapeOverrides::n_embd)},
        {"--n-layer", size_field(&ShapeOverrides::n_layer)},
        {"--n-head", size_field(&ShapeOverrides::n_head)},
        {"--n-head-kv", size_field(&ShapeOverrides::n_head_kv)},
        {"--head-dim", size_field(&ShapeOverrides::head_dim)},
        {"--n-ff", size_field(&ShapeOverrides::n_ff)},
        {"--n-ctx", size_field(&ShapeOverrides::n_ctx)},
        {"--n-ctx-orig", size_field(&ShapeOverrides::n_ctx_orig)},
        {"--n-expert", size_field(&ShapeOverrides::n_expert)},
        {"--n-expert-used", size_field(&ShapeOverrides::n_expert_used)},
        {"--n-ff-exp", size_field(&ShapeOverrides::n_ff_exp)},
        {"--n-swa", size_field(&ShapeOverrides::n_swa)},
        {"--swa-pattern", size_field(&ShapeOverrides::swa_pattern)},
        {"--head-dim-global", size_field(&ShapeOverrides::head_dim_global)},
        {"--n-head-kv-global", size_field(&ShapeOverrides::n_head_kv_global)},
        {"--n-embd-per-layer", size_field(&ShapeOverrides::n_embd_per_layer)},
        {"--n-kv-shared", size_field(&ShapeOverrides::n_kv_shared)},
        {"--full-attention-interval", size_field(&ShapeOverrides::full_attention_interval)},
        {"--ssm-n-group", size_field(&ShapeOverrides::ssm_n_group)},
        {"--ssm-dt-rank", size_field(&ShapeOverrides::ssm_dt_rank)},
        {"--ssm-d-state", size_field(&ShapeOverrides::ssm_d_state)},
        {"--nextn-layers", size_field(&ShapeOverrides::nextn_layers)},
        {"--q-lora-rank", [](ParseState & s, const std::string & f,
                             const std::string & v) { s.overrides.q_lora_rank = parse_integer(f, v, 0); }},
        {"--kv-lora-rank", size_field(&ShapeOverrides::kv_lora_rank)},
        {"--rope-dim", size_field(&ShapeOverrides::rope_dim)},
        {"--v-head-dim", size_field(&ShapeOverrides::v_head_dim)},
        {"--expert-groups", size_field(&ShapeOverrides::n_expert_groups)},
        {"--expert-groups-used", size_field(&ShapeOverrides::n_group_used)},
        {"--leading-dense-layers", [](ParseState & s, const std::string & f,
                                      const std::string & v) { s.overrides.n_dense_lead = parse_integer(f, v, 0); }},
        {"--logit-softcap", [](ParseState & s, const std::string & f,
                               const std::string & v) { s.overrides.logit_softcap = parse_positive_real(f, v); }},
        {"--rope-theta", [](ParseState & s, const std::string & f,
                            const std::string & v) { s.overrides.rope_theta = parse_positive_real(f, v); }},
        {"--suppress-tokens",
         [](ParseState & s, const std::string & f, const std::string & v) {
             size_t at = 0;
             while (at <= v.size()) {
                 const size_t comma = std::min(v.find(',', at), v.size());
                 s.options.spec.suppress_tokens.push_back((int32_t) parse_positive(f, v.substr(at, comma - at)));
                 at = comma + 1;
             }
         }},
        {"--lora-of", [](ParseState & s, const std::string &, const std::string & v) { s.options.lora.base_path = v; }},
        {"--control-vector-of",
         [](ParseState & s, const std::string &, const std::string & v) { s.options.control_vector.base_path = v; }},
        {"--lora-rank", [](ParseState & s, const std::string & f,
                           const std::string & v) { s.options.lora.rank = parse_positive(f, v); }},
        {"--lora-alpha", [](ParseState & s, const std::string & f,
                            const std::string & v) { s.options.lora.alpha = (float) parse_positive_real(f, v); }},
    };
    return flags;
}

// Accepts "--flag value" and "--flag=value".
void parse_argument(ParseState & state, const std::vector<std::string> & args, size_t & i) {
    std::string flag = args[i];
    std::optional<std::string> value;
    const size_t equals = flag.find('=');
    if (flag.rfind("--", 0) == 0 && equals != std::string::npos) {
        value = flag.substr(equals + 1);
        flag = flag.substr(0, equals);
    }
    if (flag == "-h" || flag == "--help") {
        state.options.help = true;
        return;
    }
    if (flag == "--tied-output" && !value) {
        state.overrides.tied_output = true;
        return;
    }
    if (flag == "--reranker" && !value) {
        state.overrides.reranker = true;
        return;
    }
    if (flag == "--ssm-in" && !value) {
        state.overrides.ssm_in = true;
        return;
    }
    if (flag == "--softmax-routing" && !value) {
        state.overrides.softmax_routing = true;
        return;
    }
    if (flag == "--expanded-latent" && !value) {
        state.overrides.latent_expanded = true;
        return;
    }
    if (flag == "--bigram" && !value) {
        state.overrides.bigram = true;
        return;
    }
    if (flag == "--dry-run" && !value) {
        state.options.dry_run = true;
        return;
    }
    const auto handler = value_flags().find(flag);
    if (handler == value_flags().end()) {
        throw UsageError("unknown option '" + args[i] + "'");
    }
    if (!value) {
        if (i + 1 >= args.size()) {
            throw UsageError(flag + " needs a value");
        }
        value = args[++i];
    }
    handler->second(state, flag, *value);
}

}  // namespace

Options parse_options(const std::vector<std::string> & args) {
    ParseState state;
    for (size_t i = 0; i < args.size(); ++i) {
        parse_argument(state, args, i);
    }
    Options & options = state.options;
    if (options.help) {
        return options;
    }
    if (options.output_path.empty() && !options.dry_run) {
        throw UsageError("an output file is required (-o FILE)");
    }
    if ((!options.control_vector.base_path.empty() || !options.lora.base_path.empty()) && options.output_path.empty()) {
        throw UsageError("an output file is required (-o FILE); --dry-run is for models");
    }
    if (!options.control_vector.base_path.empty()) {
        if (!options.lora.base_path.empty())
            throw UsageError("--control-vector-of and --lora-of write different files");
        options.control_vector.seed = options.spec.seed;
        return options;
    }
    if (!options.lora.base_path.empty()) {
        // An adapter: its halves in F32 unless --type says F16 or Q8_0.
        const std::map<std::string, ggml_type> types = {
            {"f16", GGML_TYPE_F32}, {"f32", GGML_TYPE_F32}, {"q8_0", GGML_TYPE_Q8_0}};
        const bool given =
            std::find(args.begin(), args.end(), "--type") != args.end() ||
            std::any_of(args.begin(), args.end(), [](const std::string & a) { return a.rfind("--type=", 0) == 0; });
        if (given && !types.count(state.type)) throw UsageError("--lora-of takes --type f32, f16 or q8_0");
        options.lora.type = !given ? GGML_TYPE_F32 : state.type == "f16" ? GGML_TYPE_F16 : types.at(state.type);
        options.lora.seed = options.spec.seed;
        return options;
    }
    ModelSpec & spec = options.spec;
    spec.arch = parse_arch(state.arch);
    spec.preset = parse_preset(state.preset);
    spec.type = parse_weight_type(state.type);
    spec.shape = resolve_shape(spec.arch, spec.preset, state.overrides);
    spec.customized = state.overrides.any();
    return options;
}

std::string usage_text(const std::string & program) {
    return "usage: " + program + R"( -o FILE [options]

Writes a GGUF model with seeded random weights and a real tokenizer, loadable
by upstream libllama. Same arguments and seed give a byte-identical file.

  --arch llama|qwen2|qwen3|qwen3moe|phi3|gemma2|gemma3|gemma4|gpt-oss|qwen35|qwen35moe|
         qwen3next|glm4moe|deepseek2
                                      architecture (default llama)
  --preset tiny|small|1b              shape preset (default tiny)
  --type f32|f16|q8_0|q4_0|q4_k|mxfp4 weight type (default f16); norms, biases and
                                      the MoE router stay f32; under q4_0/q4_k/mxfp4
                                      the embedding and output head are q8_0
  --seed N                            random seed (default 1)
  -o, --output FILE                   output GGUF (written atomically)
  --vocab FILE                        tokenizer source GGUF (default: the arch's
                                      ggml-vocab-*.gguf in ../share/llama-tp/
                                      relative to this executable)
  --chat-template FILE                tokenizer.chat_template from a Jinja file (default:
                                      gpt-oss gets upstream's harmony template from
                                      ../share/llama-tp/, the others their vocabulary's)
  --threads N                         generation threads (default: all)
  --split-max-size N[K|M|G]           write the model in parts of at most N bytes of
                                      tensor data (a bigger tensor gets a part of its
                                      own), named as gguf-split names them:
                                      FILE without .gguf, then -00001-of-0000K.gguf
  --dry-run                           print the shape and file size, write nothing
  --suppress-tokens ID,ID,...         tokenizer.ggml.suppress_tokens: tokens never sampled
                                      (as Gemma 4 Unified conversions write them)
  --lora-of MODEL.gguf                write a LoRA adapter for MODEL instead: a seeded
                                      pair for every attention and FFN projection
                                      (experts' too) and the output head, upstream's
                                      layout (--type f32 (default), f16 or q8_0)
  --control-vector-of MODEL.gguf      write a control vector for MODEL instead: a seeded
                                      direction.N (F32, the hidden state's width) for
                                      every layer from 1 to the last but one
  --lora-rank N, --lora-alpha X       the adapter's rank (default 8) and alpha
                                      (default twice the rank)

shape overrides (positive integers unless noted):
  --n-embd --n-layer --n-head --n-head-kv --head-dim --n-ff --n-ctx
  --rope-theta X (positive real)
  --n-ctx-orig N                      phi3: LongRoPE's original context (default --n-ctx;
                                      upstream uses the long factors above it)
  --n-swa N --swa-pattern P           gemma2, gemma3, gemma4, gpt-oss: sliding window of N
                                      positions (default 4096, 512, 512, 128) on all
                                      layers but every P-th (default 2, 6, 4, 2)
  --logit-softcap X                   gemma2, gemma3, gemma4: final logit soft-cap
                                      (default 30, none, 30); gemma2's attention is
                                      capped at 50
  --head-dim-global N --n-head-kv-global N   gemma4: the global layers' head size and
                                      KV heads (default twice --head-dim, half
                                      --n-head-kv); their values are their keys
  --n-embd-per-layer N                gemma4: per-layer token embeddings of width N
  --n-kv-shared N                     gemma4: the last N layers share the cache of the
                                      last earlier layer of their kind, their FFN twice
                                      as wide
  --n-expert --n-expert-used --n-ff-exp   (qwen3moe, qwen35moe, qwen3next, glm4moe, gpt-oss; gemma4 beside its dense
                                      FFN, default 2 used, --n-ff / 2 wide; llama takes
                                      --n-expert and --n-expert-used, default 2, for
                                      Mixtral-style experts --n-ff wide)
  --full-attention-interval N         qwen35, qwen35moe, qwen3next: every N-th layer is
                                      gated full attention (default 4), the others
                                      linear attention
  --ssm-n-group N --ssm-dt-rank N --ssm-d-state N   qwen35, qwen35moe, qwen3next: the
                                      linear attention's key heads, value heads (a
                                      multiple of the key heads) and head size
                                      (default --n-head-kv, twice that, 64)
  --ssm-in                            qwen3next: q, k, v and the output gate in one
                                      ssm_in.weight per key head, as early files
  --nextn-layers 1                    qwen35, qwen35moe, qwen3next, glm4moe, deepseek2:
                                      a multi-token-prediction layer after the others
                                      (nextn_predict_layers, blk.N.nextn.*)
  --leading-dense-layers N            glm4moe, deepseek2: the first N layers a dense
                                      FFN --n-ff wide (default 1), the others experts
  --q-lora-rank N --kv-lora-rank N    deepseek2: the queries' low-rank pair (0: a plain
                                      attn_q, as V2-Lite; default 3 latents) and the
                                      latent's width (default 8 RoPE parts)
  --head-dim N --rope-dim N --v-head-dim N   deepseek2: a head's query/key width,
                                      its rotated part and its value width (default
                                      48, 16, 32; small and 1b twice that)
  --expert-groups N --expert-groups-used N   deepseek2: experts picked within the
                                      best N of their groups (default 4, 2)
  --softmax-routing                   deepseek2: softmax scores without a selection
                                      bias or normalisation (V2), not sigmoid (V3)
  --expanded-latent                   deepseek2: attn_kv_b (each head's key and value
                                      rows) as older files, not attn_k_b and attn_v_b
  --bigram                            every layer's output projections zero: the next
                                      token follows from the last alone; a prediction
                                      layer (--nextn-layers) then proposes exactly it
                                      (for speculative decoding's checks)
  --tied-output                       no output.weight: the head reuses token_embd
  --reranker                          qwen3: a reranker (rank pooling, cls.output.weight,
                                      a rerank prompt template)

The vocabulary size always comes from the vocabulary file.
Exit status: 0 success, 1 file error, 2 bad arguments.
)";
}

}  // namespace llama_tp::make_model

#include "server/api/request.h"

#include "server/api/grammar_limits.h"

#include "sampling.h"

#include <cmath>
#include <cstdlib>
#include <limits>

namespace llama_tp::server {

namespace {

bool is_token_array(const json & v) {
    if (!v.is_array() || v.empty()) {
        return false;
    }
    for (const auto & t : v) {
        if (!is_integral(t)) {
            return false;
        }
    }
    return true;
}

std::vector<int32_t> to_tokens(const json & v) {
    std::vector<int32_t> out;
    out.reserve(v.size());
    for (const auto & t : v) {
        const double d = t.get<double>();
        if (d < 0 || d > std::numeric_limits<int32_t>::max()) {
            throw bad_request("'prompt' contains an invalid token id " + t.dump(), "prompt", "invalid_value");
        }
        out.push_back((int32_t) d);
    }
    return out;
}

constexpr const char * kPromptForms =
    "a string, an array of token ids, an object with 'prompt_string', or an array of them";

// One prompt: a string, token ids, or llama-server's object form
// {"prompt_string": ..., "multimodal_data": [...]}. False for anything else.
bool read_one_prompt(const json & e, PromptInput & out) {
    if (e.is_string()) {
        out.text = e.get<std::string>();
        return true;
    }
    if (e.is_array() && !e.empty() && is_token_array(e)) {
        out.is_tokens = true;
        out.tokens = to_tokens(e);
        return true;
    }
    if (!e.is_object()) return false;
    const json * media = field(e, "multimodal_data");
    if (media != nullptr && !(media->is_array() && media->empty())) {
        throw bad_request("'prompt.multimodal_data' needs a multimodal model, which this server does not load",
                          "prompt", "unsupported_value");
    }
    if (field(e, "prompt_string") == nullptr) {
        throw bad_request("'prompt.prompt_string' is required", "prompt", "missing_required_parameter");
    }
    out.text = string_in(e, "prompt_string", "prompt");
    return true;
}

void parse_prompt(const json & body, GenerationRequest & r) {
    const json * p = field(body, "prompt");
    if (p == nullptr) {
        throw bad_request("'prompt' is required", "prompt", "missing_required_parameter");
    }
    if (p->is_array() && p->empty()) {
        throw bad_request("'prompt' must not be an empty array", "prompt", "invalid_value");
    }
    PromptInput one;
    if (read_one_prompt(*p, one)) {
        r.take_prompt(std::move(one));
        return;
    }
    if (!p->is_array()) throw wrong_type("prompt", kPromptForms, *p);
    for (size_t k = 0; k < p->size(); ++k) {
        one = {};
        if (!read_one_prompt((*p)[k], one)) throw wrong_type("prompt", kPromptForms, *p);
        if (k == 0) {
            r.take_prompt(std::move(one));
        } else {
            r.more_prompts.push_back(std::move(one));
        }
    }
}

std::string message_content(const json & msg, size_t i, const std::string & role) {
    const std::string param = "messages[" + std::to_string(i) + "].content";
    const auto it = msg.find("content");
    if (it == msg.end() || it->is_null()) {
        if (role == "assistant") {
            return "";  // an assistant turn that only made tool calls
        }
        throw bad_request("'" + param + "' is required for role '" + role + "'", param, "missing_required_parameter");
    }
    if (it->is_string()) {
        return it->get<std::string>();
    }
    if (!it->is_array()) {
        throw wrong_type(param, "a string or an array of content parts", *it);
    }
    std::string text;
    for (size_t k = 0; k < it->size(); k++) {
        const json & part = (*it)[k];
        const std::string pparam = param + "[" + std::to_string(k) + "]";
        if (!part.is_object()) {
            throw wrong_type(pparam, "an object", part);
        }
        const auto type = part.find("type");
        if (type == part.end() || !type->is_string()) {
            throw bad_request("'" + pparam + ".type' must be a string", pparam + ".type", "invalid_type");
        }
        if (*type != "text") {
            throw bad_request("content part type '" + type->get<std::string>() + "' is not supported (text only)",
                              pparam + ".type", "unsupported_value");
        }
        const auto t = part.find("text");
        if (t == part.end() || !t->is_string()) {
            throw bad_request("'" + pparam + ".text' must be a string", pparam + ".text", "invalid_type");
        }
        if (!text.empty()) {
            text += "\n";
        }
        text += t->get<std::string>();
    }
    return text;
}

void parse_messages(const json & body, GenerationRequest & r) {
    const json * m = field(body, "messages");
    if (m == nullptr) {
        throw bad_request("'messages' is required", "messages", "missing_required_parameter");
    }
    if (!m->is_array()) {
        throw wrong_type("messages", "an array", *m);
    }
    if (m->empty()) {
        throw bad_request("'messages' must contain at least one message", "messages", "invalid_value");
    }
    for (size_t i = 0; i < m->size(); i++) {
        const json & msg = (*m)[i];
        const std::string param = "messages[" + std::to_string(i) + "]";
        if (!msg.is_object()) {
            throw wrong_type(param, "an object", msg);
        }
        const auto role_it = msg.find("role");
        if (role_it == msg.end() || role_it->is_null()) {
            throw bad_request("'" + param + ".role' is required", param + ".role", "missing_required_parameter");
        }
        if (!role_it->is_string()) {
            throw wrong_type(param + ".role", "a string", *role_it);
        }
        std::string role = role_it->get<std::string>();
        if (role == "developer") {
            role = "system";
        }
        if (role != "system" && role != "user" && role != "assistant" && role != "tool") {
            throw bad_request("'" + param + ".role' must be one of system, developer, user, assistant, tool; got '" +
                                  role_it->get<std::string>() + "'",
                              param + ".role", "invalid_value");
        }
        ChatMessage cm;
        cm.role = role;
        cm.content = message_content(msg, i, role);
        cm.reasoning_content = get_string(msg, "reasoning_content", "");
        cm.name = get_string(msg, "name", "");
        cm.tool_call_id = get_string(msg, "tool_call_id", "");
        if (const json * calls = field(msg, "tool_calls")) {
            cm.tool_calls = parse_history_tool_calls(*calls, param + ".tool_calls");
        }
        r.messages.push_back(std::move(cm));
    }
}

void parse_stop(const json & body, GenerationRequest & r) {
    const json * s = field(body, "stop");
    if (s == nullptr) {
        return;
    }
    if (s->is_string()) {
        if (!s->get<std::string>().empty()) {
            r.stop.push_back(s->get<std::string>());
        }
        return;
    }
    if (!s->is_array()) {
        throw wrong_type("stop", "a string or an array of strings", *s);
    }
    if (s->size() > 64) {
        throw bad_request("'stop' has too many entries (at most 64)", "stop", "invalid_value");
    }
    for (const auto & e : *s) {
        if (!e.is_string()) {
            throw bad_request("'stop' must be a string or an array of strings; found " + std::string(type_name(e)),
                              "stop", "invalid_type");
        }
        if (!e.get<std::string>().empty()) {
            r.stop.push_back(e.get<std::string>());
        }
    }
}

void parse_response_format(const json & body, GenerationRequest & r) {
    const json * rf = field(body, "response_format");
    if (rf == nullptr) {
        return;
    }
    if (!rf->is_object()) {
        throw wrong_type("response_format", "an object", *rf);
    }
    const std::string type = get_string(*rf, "type", "text");
    if (type == "text") {
        return;
    }
    if (type == "json_object") {
        const json * schema = field(*rf, "schema");  // llama-server extension
        r.json_schema = schema != nullptr ? schema->dump() : std::string(R"({"type":"object"})");
        return;
    }
    if (type == "json_schema") {
        const json * js = field(*rf, "json_schema");
        if (js == nullptr || !js->is_object()) {
            throw bad_request("'response_format.json_schema' must be an object", "response_format.json_schema",
                              "invalid_type");
        }
        const json * schema = field(*js, "schema");
        if (schema == nullptr || !(schema->is_object() || schema->is_boolean())) {
            throw bad_request("'response_format.json_schema.schema' must be an object",
                              "response_format.json_schema.schema", "invalid_type");
        }
        r.json_schema = schema->dump();
        return;
    }
    throw bad_request("'response_format.type' must be text, json_object or json_schema; got '" + type + "'",
                      "response_format.type", "invalid_value");
}

SamplerStage stage_of(common_sampler_type t, const std::string & name, const std::string & param) {
    switch (t) {
        case COMMON_SAMPLER_TYPE_PENALTIES:
            return SamplerStage::Penalties;
        case COMMON_SAMPLER_TYPE_DRY:
            return SamplerStage::Dry;
        case COMMON_SAMPLER_TYPE_TOP_N_SIGMA:
            return SamplerStage::TopNSigma;
        case COMMON_SAMPLER_TYPE_TOP_K:
            return SamplerStage::TopK;
        case COMMON_SAMPLER_TYPE_TYPICAL_P:
            return SamplerStage::TypicalP;
        case COMMON_SAMPLER_TYPE_TOP_P:
            return SamplerStage::TopP;
        case COMMON_SAMPLER_TYPE_MIN_P:
            return SamplerStage::MinP;
        case COMMON_SAMPLER_TYPE_XTC:
            return SamplerStage::Xtc;
        case COMMON_SAMPLER_TYPE_TEMPERATURE:
            return SamplerStage::Temperature;
        default:
            throw bad_request("'" + param + "': sampler '" + name + "' is not available here", param,
                              "unsupported_value");
    }
}

void parse_more_samplers(const json & body, SamplingParams & s) {
    const long long kMax = std::numeric_limits<int32_t>::max();
    s.typical_p = (float) get_number(body, "typical_p", 0.0, 1.0, s.typical_p);
    s.top_n_sigma = (float) get_number(body, "top_n_sigma", -1.0, 1e4, s.top_n_sigma);
    s.dynatemp_range = (float) get_number(body, "dynatemp_range", 0.0, 1e4, s.dynatemp_range);
    s.dynatemp_exponent = (float) get_number(body, "dynatemp_exponent", 0.0, 1e4, s.dynatemp_exponent);
    s.xtc_probability = (float) get_number(body, "xtc_probability", 0.0, 1.0, s.xtc_probability);
    s.xtc_threshold = (float) get_number(body, "xtc_threshold", 0.0, 1.0, s.xtc_threshold);
    s.dry_multiplier = (float) get_number(body, "dry_multiplier", 0.0, 1e4, s.dry_multiplier);
    s.dry_base = (float) get_number(body, "dry_base", 1.0, 1e4, s.dry_base);
    s.dry_allowed_length = (int32_t) get_int(body, "dry_allowed_length", 0, kMax, s.dry_allowed_length);
    s.dry_penalty_last_n = (int32_t) get_int(body, "dry_penalty_last_n", -1, kMax, s.dry_penalty_last_n);
    if (const json * b = field(body, "dry_sequence_breakers")) {
        if (!b->is_array()) throw wrong_type("dry_sequence_breakers", "an array of strings", *b);
        s.dry_sequence_breakers.clear();
        for (const auto & e : *b) {
            if (!e.is_string() || e.get<std::string>().empty()) {
                throw bad_request("'dry_sequence_breakers' must hold non-empty strings", "dry_sequence_breakers",
                                  "invalid_type");
            }
            s.dry_sequence_breakers.push_back(e.get<std::string>());
        }
    }
    s.mirostat = (int32_t) get_int(body, "mirostat", 0, 2, s.mirostat);
    s.mirostat_tau = (float) get_number(body, "mirostat_tau", 0.0, 1e4, s.mirostat_tau);
    s.mirostat_eta = (float) get_number(body, "mirostat_eta", 0.0, 1e4, s.mirostat_eta);
    s.min_keep = (int32_t) get_int(body, "min_keep", 0, kMax, s.min_keep);
    if (const json * order = field(body, "samplers")) s.order = sampler_order(*order, "samplers");
}

void parse_infill(const json & body, GenerationRequest & r) {
    for (const char * name : {"input_prefix", "input_suffix"}) {
        if (field(body, name) == nullptr) {
            throw bad_request(std::string("'") + name + "' is required", name, "missing_required_parameter");
        }
    }
    r.input_prefix = get_string(body, "input_prefix", "");
    r.input_suffix = get_string(body, "input_suffix", "");
    r.prompt_text = get_string(body, "prompt", "");
    if (const json * extra = field(body, "input_extra")) {
        if (!extra->is_array()) throw wrong_type("input_extra", "an array of {\"filename\", \"text\"}", *extra);
        for (size_t i = 0; i < extra->size(); ++i) {
            const json & e = (*extra)[i];
            if (!e.is_object() || !e.contains("text") || !e["text"].is_string() ||
                (e.contains("filename") && !e["filename"].is_string())) {
                throw bad_request(
                    "'input_extra[" + std::to_string(i) + "]' must be {\"filename\": string, \"text\": string}",
                    "input_extra", "invalid_type");
            }
            r.input_extra.emplace_back(e.value("filename", ""), e["text"].get<std::string>());
        }
    }
}

bool non_empty(const json & v) {
    return !v.is_null() && !((v.is_string() || v.is_array() || v.is_object()) && v.empty());
}

// llama-server's request fields that would change the answer and that this
// server does not implement: a 400 naming them, rather than an answer that
// silently differs. (Fields upstream also ignores without a draft model,
// such as speculative.*, pass.)
void refuse_unimplemented(const json & body, Endpoint endpoint) {
    struct Unimplemented {
        const char * name;
        bool (*used)(const json &);
        const char * what;
        bool raw_only;  // what llama-server's chat layer hands its raw completion (ignored on chat)
    };
    static const Unimplemented fields[] = {
        {"t_max_prompt_ms", [](const json & v) { return v.is_number() && v.get<double>() > 0; },
         "a time limit on prompt processing", false},
        {"adaptive_target", [](const json & v) { return v.is_number() && v.get<double>() >= 0; },
         "the adaptive-p sampler", false},
        {"n_indent", [](const json & v) { return v.is_number() && v.get<double>() > 0; }, "indentation limits", false},
        {"grammar_lazy", [](const json & v) { return v.is_boolean() && v.get<bool>(); },
         "lazy grammars given in a request", false},
        {"verbose", [](const json & v) { return v.is_boolean() && v.get<bool>(); }, "the __verbose debug field", false},
        {"grammar_triggers", non_empty, "lazy grammars given in a request", true},
        {"preserved_tokens", non_empty, "tokens a lazy grammar keeps whole", true},
        {"chat_format", [](const json & v) { return v.is_number() && v.get<double>() != 0; },
         "parsing a raw completion in a chat format; use /v1/chat/completions", true},
        {"chat_parser", non_empty, "parsing a raw completion with a chat parser; use /v1/chat/completions", true},
        {"generation_prompt", non_empty, "a chat template's generation prompt in a raw completion", true},
        {"parse_tool_calls", [](const json & v) { return v.is_boolean() && v.get<bool>(); },
         "tool calls parsed from a raw completion; use /v1/chat/completions", true},
        {"reasoning_budget_start_tag", non_empty, "reasoning tags in a raw completion; use --reasoning-budget", true},
        {"reasoning_budget_end_tags", non_empty, "reasoning tags in a raw completion; use --reasoning-budget", true},
    };
    for (const Unimplemented & f : fields) {
        if (f.raw_only && endpoint == Endpoint::Chat) continue;
        const json * v = field(body, f.name);
        if (v != nullptr && f.used(*v)) {
            throw bad_request(std::string("'") + f.name + "' is not supported by llama-tp-server (" + f.what + ")",
                              f.name, "unsupported_value");
        }
    }
}

// How the template renders this turn: thinking, its variables, prefill.
void parse_chat_turn(const json & body, GenerationRequest & r) {
    r.reasoning_format = get_string(body, "reasoning_format", "");
    if (!r.reasoning_format.empty() && r.reasoning_format != "none" && r.reasoning_format != "auto" &&
        r.reasoning_format != "deepseek" && r.reasoning_format != "deepseek-legacy") {
        throw bad_request(
            "'reasoning_format' must be none, auto, deepseek or deepseek-legacy; got '" + r.reasoning_format + "'",
            "reasoning_format", "invalid_value");
    }
    r.reasoning_effort = get_string(body, "reasoning_effort", "");
    // upstream's name, then the one it also takes
    const char * budget = field(body, "reasoning_budget_tokens") ? "reasoning_budget_tokens" : "thinking_budget_tokens";
    r.reasoning_budget = (int32_t) get_int(body, budget, -1, INT32_MAX, -1);
    r.reasoning_control = get_bool(body, "reasoning_control", false);
    if (field(body, "reasoning_budget_message")) {
        r.reasoning_budget_message = get_string(body, "reasoning_budget_message", "");
    }
    if (const json * kw = field(body, "chat_template_kwargs")) {
        if (!kw->is_object()) throw wrong_type("chat_template_kwargs", "an object", *kw);
        const auto it = kw->find("enable_thinking");
        if (it != kw->end() && !it->is_boolean()) {
            throw bad_request("'chat_template_kwargs.enable_thinking' must be a boolean",
                              "chat_template_kwargs.enable_thinking", "invalid_type");
        }
        r.chat_template_kwargs = *kw;
    }
    r.add_generation_prompt = get_bool(body, "add_generation_prompt", true);
    if (const json * c = field(body, "continue_final_message")) {
        if (!c->is_boolean()) throw wrong_type("continue_final_message", "a boolean", *c);
        r.continue_final_message = c->get<bool>() ? 1 : 0;
    }
    if (r.continue_final_message == 1 && r.add_generation_prompt && field(body, "add_generation_prompt")) {
        throw bad_request("'continue_final_message' and 'add_generation_prompt' cannot both be true",
                          "continue_final_message", "invalid_value");
    }
    const bool last_is_assistant = !r.messages.empty() && r.messages.back().role == "assistant";
    if (r.continue_final_message == 1 && !last_is_assistant) {
        throw bad_request("'continue_final_message' needs an assistant message at the end", "continue_final_message",
                          "invalid_value");
    }
    if (last_is_assistant && r.continue_final_message != 0 && !r.messages.back().tool_calls.empty()) {
        throw bad_request("an assistant message with tool calls cannot be continued", "messages", "invalid_value");
    }
}

// A bias: a number, or false for "never" (llama-server).
float bias_value(const json & v, const std::string & where) {
    if (v.is_boolean() && !v.get<bool>()) return -INFINITY;
    if (!v.is_number() || !std::isfinite(v.get<double>())) {
        throw bad_request("'" + where + "' must be a number or false", "logit_bias", "invalid_type");
    }
    return (float) v.get<double>();
}

void add_bias(GenerationRequest & r, const std::string & key_text, const json * key, float bias,
              const std::string & where) {
    if (key != nullptr && is_integral(*key)) {
        const double id = key->get<double>();
        if (id < 0 || id > std::numeric_limits<int32_t>::max()) {
            throw bad_request("'" + where + "' names token " + key->dump() + ", which is not a token id", "logit_bias",
                              "invalid_value");
        }
        r.sampling.logit_bias.emplace_back((int32_t) id, bias);
        return;
    }
    // Object keys are strings: a number in a string is a token id (OpenAI).
    char * end = nullptr;
    const long long id = std::strtoll(key_text.c_str(), &end, 10);
    if (!key_text.empty() && *end == '\0' && id >= 0 && id <= std::numeric_limits<int32_t>::max()) {
        r.sampling.logit_bias.emplace_back((int32_t) id, bias);
    } else if (!key_text.empty()) {
        r.logit_bias_text.emplace_back(key_text, bias);
    } else {
        throw bad_request("'" + where + "' has an empty token", "logit_bias", "invalid_value");
    }
}

// OpenAI's {"token id": bias} and llama-server's [[token id or text, bias], ...].
void parse_logit_bias(const json & body, GenerationRequest & r) {
    const json * lb = field(body, "logit_bias");
    if (lb == nullptr) return;
    if (lb->is_object()) {
        if (lb->size() > 1024)
            throw bad_request("'logit_bias' has more than 1024 entries", "logit_bias", "invalid_value");
        for (const auto & [key, value] : lb->items()) {
            add_bias(r, key, nullptr, bias_value(value, "logit_bias." + key), "logit_bias." + key);
        }
        return;
    }
    if (!lb->is_array()) throw wrong_type("logit_bias", "an object or an array of [token, bias] pairs", *lb);
    if (lb->size() > 1024) throw bad_request("'logit_bias' has more than 1024 entries", "logit_bias", "invalid_value");
    for (size_t i = 0; i < lb->size(); ++i) {
        const json & e = (*lb)[i];
        const std::string where = "logit_bias[" + std::to_string(i) + "]";
        if (!e.is_array() || e.size() != 2 || !(e[0].is_string() || is_integral(e[0]))) {
            throw bad_request("'" + where + "' must be a [token id or text, bias] pair", "logit_bias", "invalid_type");
        }
        add_bias(r, e[0].is_string() ? e[0].get<std::string>() : std::string(), e[0].is_string() ? nullptr : &e[0],
                 bias_value(e[1], where), where);
    }
}

}  // namespace

std::vector<SamplerStage> sampler_order(const json & v, const std::string & param) {
    std::vector<SamplerStage> out;
    if (v.is_string()) {
        for (char c : v.get<std::string>()) {
            const auto types = common_sampler_types_from_chars(std::string(1, c));
            if (types.empty()) {
                throw bad_request("'" + param + "': unknown sampler code '" + std::string(1, c) + "'", param,
                                  "invalid_value");
            }
            out.push_back(stage_of(types[0], std::string(1, c), param));
        }
        return out;
    }
    if (!v.is_array()) throw wrong_type(param, "an array of sampler names or a string of codes", v);
    for (const auto & e : v) {
        if (!e.is_string()) throw wrong_type(param, "an array of sampler names", v);
        const auto types = common_sampler_types_from_names({e.get<std::string>()});
        if (types.empty()) {
            throw bad_request("'" + param + "': unknown sampler '" + e.get<std::string>() + "'", param,
                              "invalid_value");
        }
        out.push_back(stage_of(types[0], e.get<std::string>(), param));
    }
    return out;
}

GenerationRequest parse_generation_request(Endpoint endpoint, const json & body, const RequestDefaults & defaults) {
    GenerationRequest r;
    r.endpoint = endpoint;
    r.sampling = defaults.sampling;
    r.model = get_string(body, "model", "");

    if (endpoint == Endpoint::Chat) {
        parse_messages(body, r);
    } else if (endpoint == Endpoint::Infill) {
        parse_infill(body, r);
    } else {
        parse_prompt(body, r);
    }

    // Length: OpenAI's two names and llama-server's n_predict.
    const long long kMax = std::numeric_limits<int32_t>::max();
    long long max_tokens = get_int(body, "n_predict", -1, kMax, -1);
    max_tokens = get_int(body, "max_tokens", 1, kMax, max_tokens);
    max_tokens = get_int(body, "max_completion_tokens", 1, kMax, max_tokens);
    r.max_tokens = (int32_t) max_tokens;
    r.n_keep = (int32_t) get_int(body, "n_keep", -1, kMax, -2);
    r.n_discard = (int32_t) get_int(body, "n_discard", 0, kMax, 0);

    parse_stop(body, r);
    // As llama-server: no effective stop string in the request takes -r's.
    if (r.stop.empty()) {
        r.stop = defaults.stop;
        r.stop_is_default = true;
    }

    SamplingParams & s = r.sampling;
    s.temperature = (float) get_number(body, "temperature", 0.0, 1e4, s.temperature);
    s.top_p = (float) get_number(body, "top_p", 0.0, 1.0, s.top_p);
    s.min_p = (float) get_number(body, "min_p", 0.0, 1.0, s.min_p);
    s.top_k = (int32_t) std::max(0LL, get_int(body, "top_k", -1, kMax, s.top_k));
    s.presence_penalty = (float) get_number(body, "presence_penalty", -2.0, 2.0, s.presence_penalty);
    s.frequency_penalty = (float) get_number(body, "frequency_penalty", -2.0, 2.0, s.frequency_penalty);
    s.repeat_penalty = (float) get_number(body, "repeat_penalty", 0.0, 1e4, s.repeat_penalty);
    s.penalty_last_n = (int32_t) get_int(body, "repeat_last_n", -1, kMax, s.penalty_last_n);
    {
        const long long seed =
            get_int(body, "seed", std::numeric_limits<long long>::min(), std::numeric_limits<long long>::max(), -2);
        if (seed == -2 && field(body, "seed") == nullptr) {
            // keep the server default
        } else if (seed < 0) {
            s.seed = 0xFFFFFFFFu;
        } else {
            s.seed = (uint32_t) (seed & 0xFFFFFFFFLL);
        }
    }
    parse_more_samplers(body, s);
    r.ignore_eos = get_bool(body, "ignore_eos", defaults.ignore_eos);
    r.cache_prompt = get_bool(body, "cache_prompt", defaults.cache_prompt);
    r.n_cache_reuse = (int32_t) get_int(body, "n_cache_reuse", 0, kMax, defaults.n_cache_reuse);
    r.sse_ping_interval_s = (int32_t) get_int(body, "sse_ping_interval", std::numeric_limits<int32_t>::min(), kMax,
                                              defaults.sse_ping_interval_s);

    // A server default grammar (--grammar, -j) gives way to any format the request asks for.
    const bool grammar_in_request = field(body, "grammar") != nullptr;
    s.grammar = get_string(body, "grammar", s.grammar);
    if (grammar_in_request) check_grammar(s.grammar, "grammar");
    parse_response_format(body, r);
    if (const json * js = field(body, "json_schema")) {  // llama-server's top-level form
        if (!js->is_object() && !js->is_boolean()) throw wrong_type("json_schema", "an object", *js);
        if (!r.json_schema.empty()) {
            throw bad_request("'json_schema' and 'response_format' cannot be combined", "json_schema", "invalid_value");
        }
        r.json_schema = js->dump();
    }
    if (!grammar_in_request && !r.json_schema.empty()) s.grammar.clear();
    if (!s.grammar.empty() && !r.json_schema.empty()) {
        throw bad_request("'grammar' and 'response_format' cannot be combined", "grammar", "invalid_value");
    }

    r.stream = get_bool(body, "stream", false);
    if (const json * so = field(body, "stream_options")) {
        if (!so->is_object()) {
            throw wrong_type("stream_options", "an object", *so);
        }
        r.include_usage = get_bool(*so, "include_usage", false);
    }

    r.n_choices = (int32_t) get_int(body, "n", 1, 128, 1);
    r.n_choices = (int32_t) get_int(body, "n_cmpl", 1, 128, r.n_choices);
    if (endpoint == Endpoint::Completion) {
        if (get_int(body, "best_of", 1, 128, 1) != 1) {
            throw bad_request("'best_of' > 1 is not supported", "best_of", "unsupported_value");
        }
        if (get_bool(body, "echo", false)) {
            throw bad_request("'echo' is not supported", "echo", "unsupported_value");
        }
        if (!get_string(body, "suffix", "").empty()) {
            throw bad_request("'suffix' is not supported", "suffix", "unsupported_value");
        }
        if (const json * lp = field(body, "logprobs")) {
            if (lp->is_boolean()) {
                r.logprobs = lp->get<bool>();
            } else {
                const long long n = get_int(body, "logprobs", 0, 20, 0);
                r.logprobs = n > 0;
                r.top_logprobs = (int32_t) n;
            }
        }
    } else if (endpoint == Endpoint::Native || endpoint == Endpoint::Infill) {
        r.top_logprobs = (int32_t) get_int(body, "n_probs", 0, 100, 0);
        r.logprobs = r.top_logprobs > 0;
        r.return_tokens = get_bool(body, "return_tokens", false);
    } else {
        r.logprobs = get_bool(body, "logprobs", false);
        r.top_logprobs = (int32_t) get_int(body, "top_logprobs", 0, 20, 0);
        if (r.top_logprobs > 0 && !r.logprobs) {
            throw bad_request("'top_logprobs' requires 'logprobs' to be true", "top_logprobs", "invalid_value");
        }
    }
    r.post_sampling_probs = get_bool(body, "post_sampling_probs", false);
    if (r.post_sampling_probs && endpoint == Endpoint::Completion) {
        // OpenAI's completion logprobs (tokens, token_logprobs, top_logprobs) hold log-probabilities only.
        throw bad_request(
            "'post_sampling_probs' is not supported on /v1/completions, whose logprobs hold log-probabilities "
            "only; use /completion or /v1/chat/completions",
            "post_sampling_probs", "unsupported_value");
    }

    parse_logit_bias(body, r);

    if (endpoint != Endpoint::Chat) {
        get_bool(body, "parallel_tool_calls", false);
    } else {
        r.tools = parse_tool_set(body);
        if (r.tools.active() && !grammar_in_request) s.grammar.clear();
        if (r.tools.active() && (!s.grammar.empty() || !r.json_schema.empty())) {
            throw bad_request("'tools' cannot be combined with 'grammar' or 'response_format'", "tools",
                              "invalid_value");
        }
    }
    expect_type(body, "functions", body.contains("functions") && body["functions"].is_array(), "an array");
    if (const json * functions = field(body, "functions"); functions != nullptr && !functions->empty()) {
        throw bad_request("the legacy 'functions' field is not supported; use 'tools'", "functions",
                          "unsupported_value");
    }

    if (endpoint == Endpoint::Chat) parse_chat_turn(body, r);
    refuse_unimplemented(body, endpoint);
    if (const json * rf = field(body, "response_fields")) {
        if (!rf->is_array()) throw wrong_type("response_fields", "an array of strings", *rf);
        for (const auto & f : *rf) {
            if (!f.is_string()) throw wrong_type("response_fields", "an array of strings", *rf);
            r.response_fields.push_back(f.get<std::string>());
        }
    }

    // OpenAI fields with no effect here; their types are still checked.
    get_string(body, "user", "");
    get_string(body, "service_tier", "");
    get_string(body, "reasoning_effort", "");
    get_bool(body, "store", false);
    get_string(body, "verbosity", "");
    get_string(body, "safety_identifier", "");
    get_string(body, "prompt_cache_key", "");
    r.id_slot = (int32_t) get_int(body, "id_slot", -1, std::numeric_limits<int32_t>::max(), -1);
    if (const json * lora = field(body, "lora"); lora != nullptr && !lora->is_null()) r.lora = *lora;
    r.t_max_predict_ms = (int32_t) get_int(body, "t_max_predict_ms", 0, std::numeric_limits<int32_t>::max(), 0);
    r.timings_per_token = get_bool(body, "timings_per_token", false);
    r.return_progress = get_bool(body, "return_progress", false);
    expect_type(body, "metadata", body.contains("metadata") && body["metadata"].is_object(), "an object");
    expect_type(body, "modalities", body.contains("modalities") && body["modalities"].is_array(), "an array");
    expect_type(body, "audio", body.contains("audio") && body["audio"].is_object(), "an object");
    expect_type(body, "prediction", body.contains("prediction") && body["prediction"].is_object(), "an object");
    expect_type(body, "web_search_options",
                body.contains("web_search_options") && body["web_search_options"].is_object(), "an object");
    expect_type(
        body, "function_call",
        body.contains("function_call") && (body["function_call"].is_string() || body["function_call"].is_object()),
        "a string or an object");
    return r;
}

}  // namespace llama_tp::server

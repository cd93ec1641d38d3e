#include "server/routes/handlers.h"

#include "runtime/engine.h"
#include "runtime/error.h"
#include "runtime/text/tokenizer.h"
#include "server/build_info.h"
#include "server/http/http_access.h"
#include "server/api/native_response.h"
#include "server/chat/chat_format.h"
#include "server/http/metrics.h"
#include "server/serving/lora_adapters.h"
#include "server/serving/scheduler/scheduler.h"
#include "server/serving/cache/slot_file.h"

#include <cpp-httplib/httplib.h>

#include <chrono>
#include <cstdlib>
#include <fstream>

namespace llama_tp::server {

using httplib::Request;
using httplib::Response;

namespace {

// The text that stands for an image or audio clip in a prompt; multimodal
// input is not served here, but clients read it from /props.
std::string media_marker() {
    const char * pinned = std::getenv("LLAMA_MEDIA_MARKER");  // llama-server's variable
    return pinned && *pinned ? pinned : "<__media__>";
}

json props_json(const ServerState & st) {
    const auto stats = st.scheduler->stats();
    const Tokenizer & tok = st.engine->tokenizer();
    auto token_text = [&tok](int32_t id) { return id >= 0 ? tok.piece(id, true) : std::string(); };
    json params = sampling_settings_json(st.opts.requests.sampling, st.opts.n_predict, st.opts.requests.ignore_eos);
    params["speculative.types"] = st.speculative_types;
    json props = {{"default_generation_settings", {{"n_ctx", st.n_ctx_slot}, {"params", params}}},
                  {"total_slots", st.scheduler->n_slots()},
                  {"model_alias", st.model_name},
                  {"model_path", st.opts.engine.model_path},
                  {"model_ftype", st.engine->info().file_type},
                  {"modalities", {{"vision", false}, {"video", false}, {"audio", false}}},
                  {"media_marker", media_marker()},
                  {"endpoint_slots", st.opts.endpoint_slots},
                  {"endpoint_props", st.opts.endpoint_props},
                  {"endpoint_metrics", st.opts.endpoint_metrics},
                  {"ui", false},  // no web UI here
                  {"ui_settings", json::object()},
                  {"chat_template", st.chat->source()},
                  {"chat_template_caps", st.chat->capabilities()},
                  {"chat_template_origin", st.chat->origin()},
                  {"bos_token", token_text(tok.bos())},
                  {"eos_token", token_text(tok.eos())},
                  {"build_info", build_fingerprint()},
                  {"is_sleeping", st.scheduler->asleep()},
                  {"cors_proxy_enabled", false},  // /cors-proxy answers 403 here
                  // llama-tp's own
                  {"busy_slots", stats.busy},
                  {"queued_requests", stats.queued},
                  {"n_ctx", st.n_ctx},
                  {"n_ctx_slot", st.n_ctx_slot},
                  {"tp", st.engine->info().tp},
                  {"cache_type_k", kv_type_name(st.engine->options().kv_types.k)},
                  {"cache_type_v", kv_type_name(st.engine->options().kv_types.v)}};
    const std::string tool_use = st.chat->tool_use_source();
    if (!tool_use.empty()) props["chat_template_tool_use"] = tool_use;
    return props;
}

json slot_json(const ServerState & st, const Scheduler::SlotView & v) {
    json j = {{"id", v.id},
              {"n_ctx", st.n_ctx_slot},
              {"speculative", st.speculative_types != "none"},
              {"is_processing", v.busy}};
    // The running task's figures, else the last one's, as llama-server.
    if (v.task_id != 0) {
        j["id_task"] = v.task_id;
        j["n_prompt_tokens"] = v.n_prompt;
        j["n_prompt_tokens_processed"] = v.n_prompt_processed;
        j["n_prompt_tokens_cache"] = v.n_prompt_cached;
        j["params"] = v.settings ? json::parse(*v.settings, nullptr, false) : json();
        if (!j["params"].is_object()) j["params"] = {{"n_predict", v.n_predict}};
        j["params"]["speculative.types"] = st.speculative_types;
        j["next_token"] = json::array({{{"has_next_token", v.busy},
                                        {"has_new_line", v.has_new_line},
                                        {"n_remain", v.busy ? v.n_predict - v.n_decoded : 0},
                                        {"n_decoded", v.n_decoded}}});
    }
    j["n_cached_tokens"] = v.n_cached_tokens;
    return j;
}

int32_t slot_id(const Request & req) {
    const auto it = req.path_params.find("id_slot");
    const std::string v = it == req.path_params.end() ? "" : it->second;
    char * end = nullptr;
    const long id = std::strtol(v.c_str(), &end, 10);
    if (v.empty() || *end != '\0' || id < 0 || id > INT32_MAX) {
        throw bad_request("'" + v + "' is not a slot id", "id_slot", "invalid_value");
    }
    return (int32_t) id;
}

// The file a save or restore names, under --slot-save-path.
std::string slot_path(const ServerState & st, const json & body) {
    const auto it = body.find("filename");
    if (it == body.end() || !it->is_string())
        throw bad_request("'filename' must be a string", "filename", "invalid_type");
    const std::string name = it->get<std::string>();
    const std::string problem = slot_file_name_problem(name);
    if (!problem.empty()) throw bad_request("'filename' " + problem, "filename", "invalid_value");
    std::string dir = st.opts.slot_save_path;
    if (!dir.empty() && dir.back() != '/') dir += '/';
    return dir + name;
}

Scheduler::SlotAction run_slot_action(const ServerState & st, Scheduler::SlotAction a) {
    a = st.scheduler->slot_action(std::move(a)).get();
    if (a.status != 0) throw ApiError(a.status, a.message, "id_slot", a.status == 501 ? "" : "slot_action_failed");
    return a;
}

// POST /v1/chat/completions/control {id, action: "reasoning_end"}, as
// llama-server: a running completion that armed reasoning_control ends its
// thinking now. An id that matches nothing running is not an error
// (the completion may just have finished): {"success": false, "message"}.
json control_completion(const ServerState & st, const Request & req) {
    const json body = parse_json_body(req.body);
    auto text = [&body](const char * name) {
        const auto it = body.find(name);
        if (it == body.end() || it->is_null()) return std::string();
        if (!it->is_string()) throw bad_request(std::string("'") + name + "' must be a string", name, "invalid_type");
        return it->get<std::string>();
    };
    const std::string id = text("id");
    const std::string action = text("action");
    if (id.empty()) throw bad_request("missing completion id", "id", "invalid_value");
    if (action != "reasoning_end") {
        throw bad_request("unknown control action '" + action + "' (reasoning_end is the one there is)", "action",
                          "invalid_value");
    }
    Scheduler::SlotAction a;
    a.kind = Scheduler::SlotAction::Kind::EndReasoning;
    a.completion_id = id;
    a = st.scheduler->slot_action(std::move(a)).get();
    if (a.status != 0 && a.status != 404 && a.status != 409) throw ApiError(a.status, a.message);
    json r = {{"success", a.status == 0}};
    if (a.status != 0) r["message"] = a.message;
    return r;
}

// POST /slots/{id}?action=save|restore|erase, as llama-server.
json slot_action(const ServerState & st, const Request & req) {
    if (st.opts.slot_save_path.empty()) {
        throw not_supported("This server does not support slots action. Start it with `--slot-save-path`");
    }
    const int32_t id = slot_id(req);
    const std::string action = req.get_param_value("action");
    const auto t0 = std::chrono::steady_clock::now();
    auto ms = [&t0] {
        return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    };
    Scheduler::SlotAction a;
    a.slot = id;
    if (action == "erase") {
        a.kind = Scheduler::SlotAction::Kind::Erase;
        a = run_slot_action(st, std::move(a));
        return {{"id_slot", id}, {"n_erased", a.tokens.size()}};
    }
    if (action != "save" && action != "restore") {
        throw bad_request("'action' must be save, restore or erase; got '" + action + "'", "action", "invalid_value");
    }
    const json body = parse_json_body(req.body.empty() ? "{}" : req.body);
    const std::string path = slot_path(st, body);
    const std::string filename = body["filename"].get<std::string>();
    const ModelInfo & info = st.engine->info();
    const KvTypes types = st.engine->options().kv_types;
    if (action == "save") {
        a.kind = Scheduler::SlotAction::Kind::Save;
        a = run_slot_action(st, std::move(a));
        SlotImage image{info.file_size, info.header_digest,  types,
                        info.kv_format, std::move(a.tokens), std::move(a.kv)};
        size_t written = 0;
        try {
            written = write_slot_file(path, image);
        } catch (const SlotFileError & e) {
            throw ApiError(500, e.what(), "filename", "slot_file_error");
        }
        return {{"id_slot", id},
                {"filename", filename},
                {"n_saved", image.tokens.size()},
                {"n_written", written},
                {"timings", {{"save_ms", ms()}}}};
    }
    SlotImage image;
    try {
        image = read_slot_file(path);
    } catch (const SlotFileError & e) {
        // Clients see the file name, not where the server keeps it.
        std::string message = e.what();
        const size_t at = message.find(path);
        if (at != std::string::npos) message.replace(at, path.size(), filename);
        throw ApiError(std::ifstream(path).good() ? 400 : 404, message, "filename", "slot_file_error");
    }
    if (image.model_size != info.file_size || image.model_digest != info.header_digest) {
        throw bad_request("slot file '" + filename + "' was saved from another model", "filename", "invalid_value");
    }
    if (image.kv_types.k != types.k || image.kv_types.v != types.v) {
        throw bad_request(std::string("slot file '") + filename + "' holds a " + kv_type_name(image.kv_types.k) +
                              " / " + kv_type_name(image.kv_types.v) + " cache; this server stores " +
                              kv_type_name(types.k) + " / " + kv_type_name(types.v),
                          "filename", "invalid_value");
    }
    if (!image.kv_format.empty() && image.kv_format != info.kv_format) {
        throw bad_request(
            "slot file '" + filename + "' was saved with " + image.kv_format + "; this server has " + info.kv_format,
            "filename", "invalid_value");
    }
    const size_t n_read = image.kv.size();
    a.kind = Scheduler::SlotAction::Kind::Restore;
    a.lora = st.loras->scales();  // the file does not say; as llama-server, the server's own
    a.tokens = std::move(image.tokens);
    a.kv = std::move(image.kv);
    a = run_slot_action(st, std::move(a));
    return {{"id_slot", id},
            {"filename", filename},
            {"n_restored", a.tokens.size()},
            {"n_read", n_read},
            {"timings", {{"restore_ms", ms()}}}};
}

}  // namespace

// Public (no API key) and answered while the model loads.
void handle_health(ServerState & st, const Request &, Response & res) {
    const std::string failure = st.ready ? st.engine->failure() : "";
    if (!failure.empty()) {
        send_json(res, {{"status", "error"}, {"error", "the rank group failed: " + failure}}, 503);
    } else if (st.ready) {
        send_json(res, {{"status", "ok"}});
    } else {
        send_json(res, {{"status", "loading"}}, 503);
    }
}

void handle_metrics(ServerState & st, const Request &, Response & res) {
    if (!st.opts.endpoint_metrics) {
        throw not_supported("This server does not support metrics endpoint. Start it with `--metrics`");
    }
    const auto stats = st.scheduler->stats();
    SchedulerGauges g;
    g.busy_slots = stats.busy;
    g.total_slots = st.scheduler->n_slots();
    g.queued = stats.queued;
    g.collectives = st.engine->collective_stats();
    res.set_content(st.metrics.prometheus(g), "text/plain; version=0.0.4; charset=utf-8");
}

void handle_props(ServerState & st, const Request &, Response & res) {
    send_json(res, props_json(st));
}

void handle_set_props(ServerState & st, const Request & req, Response & res) {
    if (!st.opts.endpoint_props) {
        throw not_supported("This server does not support changing global properties. Start it with `--props`");
    }
    parse_json_body(req.body);  // nothing is changeable yet, as in llama-server
    send_json(res, {{"success", true}});
}

void handle_slots(ServerState & st, const Request & req, Response & res) {
    if (!st.opts.endpoint_slots) {
        throw not_supported("This server does not support slots endpoint. Start it with `--slots`");
    }
    const auto views = st.scheduler->slot_views();
    if (req.has_param("fail_on_no_slot") && !req.get_param_value("fail_on_no_slot").empty()) {
        bool idle = false;
        for (const auto & v : views) idle |= !v.busy;
        if (!idle) throw ApiError(503, "no slot available", "", "", "unavailable_error");
    }
    json out = json::array();
    for (const auto & v : views) out.push_back(slot_json(st, v));
    send_json(res, out);
}

void handle_slot_action(ServerState & st, const Request & req, Response & res) {
    send_json(res, slot_action(st, req));
}

// The global LoRA scales, which requests without their own `lora` take.
void handle_lora_adapters(ServerState & st, const Request &, Response & res) {
    send_json(res, st.loras->to_json());
}

void handle_set_lora_adapters(ServerState & st, const Request & req, Response & res) {
    st.loras->set_scales(st.loras->parse(parse_json(req.body), "body"));
    send_json(res, {{"success", true}});
}

void handle_completion_control(ServerState & st, const Request & req, Response & res) {
    send_json(res, control_completion(st, req));
}

}  // namespace llama_tp::server

#include "server/routes/handlers.h"

#include "runtime/engine.h"
#include "runtime/error.h"
#include "runtime/text/tokenizer.h"
#include "server/http/http_access.h"
#include "server/api/request.h"
#include "server/chat/chat_format.h"
#include "server/serving/generation.h"
#include "server/serving/prompt.h"

#include <cpp-httplib/httplib.h>

namespace llama_tp::server {

using httplib::Request;
using httplib::Response;

namespace {

bool is_valid_utf8(const std::string & s) {
    size_t i = 0;
    while (i < s.size()) {
        const unsigned char c = (unsigned char) s[i];
        const size_t n = c < 0x80 ? 1 : (c >> 5) == 0x6 ? 2 : (c >> 4) == 0xE ? 3 : (c >> 3) == 0x1E ? 4 : 0;
        if (n == 0 || i + n > s.size()) return false;
        for (size_t k = 1; k < n; ++k) {
            if ((((unsigned char) s[i + k]) >> 6) != 0x2) return false;
        }
        i += n;
    }
    return true;
}

// A token's text, or its bytes where it is not whole UTF-8 (as llama-server).
json piece_json(const std::string & piece) {
    if (is_valid_utf8(piece)) return piece;
    json bytes = json::array();
    for (unsigned char c : piece) bytes.push_back((int) c);
    return bytes;
}

}  // namespace

// llama-server's own completion shape under its own names.
void handle_native_completion(ServerState & st, const Request & req, Response & res) {
    handle_generation(st, Endpoint::Native, req, res, Shape::Native);
}

void handle_infill(ServerState & st, const Request & req, Response & res) {
    handle_generation(st, Endpoint::Infill, req, res, Shape::Native);
}

void handle_tokenize(ServerState & st, const Request & req, Response & res) {
    const json body = parse_json_body(req.body);
    const auto it = body.find("content");
    if (it == body.end() || !it->is_string()) {
        throw bad_request("'content' must be a string", "content", "invalid_type");
    }
    const bool add_special = get_bool(body, "add_special", false);
    const bool parse_special = get_bool(body, "parse_special", true);
    const bool with_pieces = get_bool(body, "with_pieces", false);
    const auto & tok = st.engine->tokenizer();
    const std::vector<int32_t> ids = tok.tokenize(it->get<std::string>(), add_special, parse_special);
    if (!with_pieces) {
        send_json(res, {{"tokens", ids}});
        return;
    }
    json tokens = json::array();
    for (int32_t id : ids) tokens.push_back({{"id", id}, {"piece", piece_json(tok.piece(id, true))}});
    send_json(res, {{"tokens", tokens}});
}

void handle_detokenize(ServerState & st, const Request & req, Response & res) {
    const json body = parse_json_body(req.body);
    const auto it = body.find("tokens");
    if (it == body.end() || !it->is_array()) {
        throw bad_request("'tokens' must be an array of token ids", "tokens", "invalid_type");
    }
    const auto & tok = st.engine->tokenizer();
    std::vector<int32_t> tokens;
    for (const auto & t : *it) {
        if (!t.is_number_integer() || t.get<long long>() < 0 || t.get<long long>() >= tok.n_vocab()) {
            throw bad_request("'tokens' must hold token ids in [0, " + std::to_string(tok.n_vocab()) + ")", "tokens",
                              "invalid_value");
        }
        tokens.push_back(t.get<int32_t>());
    }
    // As llama-server: every token's piece, special tokens as their text.
    std::string content;
    for (int32_t t : tokens) content += tok.piece(t, true);
    send_json(res, {{"content", content}});
}

void handle_apply_template(ServerState & st, const Request & req, Response & res) {
    const json body = parse_json_body(req.body);
    GenerationRequest gr = parse_generation_request(Endpoint::Chat, body, st.opts.requests);
    send_json(res, {{"prompt", st.chat->apply(gr.messages, gr.tools, turn_options(st, gr)).prompt}});
}

}  // namespace llama_tp::server

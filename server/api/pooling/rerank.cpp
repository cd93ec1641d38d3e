#include "server/api/pooling/rerank.h"

#include "runtime/text/tokenizer.h"
#include "server/http/api_error.h"

#include <algorithm>
#include <numeric>

namespace llama_tp::server {

namespace {

std::vector<std::string> documents_of(const json & body, const char * name) {
    const auto at = body.find(name);
    if (at == body.end()) throw bad_request(std::string("'") + name + "' must be provided", name, "missing_field");
    const json & v = *at;
    const std::string why = std::string("'") + name + "' must be a non-empty array of strings";
    if (!v.is_array() || v.empty()) throw bad_request(why, name, "invalid_type");
    std::vector<std::string> out;
    for (const json & d : v) {
        if (!d.is_string()) throw bad_request(why, name, "invalid_type");
        out.push_back(d.get<std::string>());
    }
    return out;
}

void replace_all(std::string & s, const std::string & from, const std::string & to) {
    for (size_t at = s.find(from); at != std::string::npos; at = s.find(from, at + to.size())) {
        s.replace(at, from.size(), to);
    }
}

}  // namespace

RerankRequest parse_rerank_request(const json & body) {
    RerankRequest r;
    const auto query = body.find("query");
    if (query == body.end()) throw bad_request("'query' must be provided", "query", "missing_field");
    if (!query->is_string()) throw bad_request("'query' must be a string", "query", "invalid_type");
    r.query = query->get<std::string>();
    r.tei = body.contains("texts");
    r.documents = documents_of(body, r.tei ? "texts" : "documents");
    r.top_n = (int32_t) r.documents.size();
    if (const auto top = body.find("top_n"); top != body.end() && !top->is_null()) {
        if (!top->is_number_integer() || top->get<long long>() < 0) {
            throw bad_request("'top_n' must be a non-negative integer", "top_n", "invalid_value");
        }
        r.top_n = (int32_t) std::min<long long>(top->get<long long>(), (long long) r.documents.size());
    }
    r.return_text = r.tei && get_bool(body, "return_text", false);
    if (const auto m = body.find("model"); m != body.end() && m->is_string()) r.model = m->get<std::string>();
    return r;
}

std::vector<int32_t> rerank_prompt(const Tokenizer & tok, const std::string & query, const std::string & document) {
    std::string tmpl = tok.chat_template("rerank");
    if (!tmpl.empty()) {
        replace_all(tmpl, "{query}", query);
        replace_all(tmpl, "{document}", document);
        return tok.tokenize(tmpl, false, true);
    }
    const int32_t end = tok.eos() >= 0 ? tok.eos() : tok.sep();
    std::vector<int32_t> out;
    if (tok.add_bos()) out.push_back(tok.bos());
    const std::vector<int32_t> q = tok.tokenize(query, false, false);
    out.insert(out.end(), q.begin(), q.end());
    if (tok.add_eos() && end >= 0) out.push_back(end);
    if (tok.add_sep() && tok.sep() >= 0) out.push_back(tok.sep());
    const std::vector<int32_t> d = tok.tokenize(document, false, false);
    out.insert(out.end(), d.begin(), d.end());
    if (tok.add_eos() && end >= 0) out.push_back(end);
    return out;
}

json rerank_json(const RerankRequest & r, const std::string & model_name, const std::vector<float> & scores,
                 const std::vector<int32_t> & n_tokens) {
    std::vector<size_t> order(scores.size());
    std::iota(order.begin(), order.end(), 0);
    std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) { return scores[a] > scores[b]; });
    order.resize(std::min(order.size(), (size_t) r.top_n));
    const char * label = r.tei ? "score" : "relevance_score";
    json results = json::array();
    for (size_t i : order) {
        json e = {{"index", i}, {label, scores[i]}};
        if (r.return_text) e["text"] = r.documents[i];
        results.push_back(std::move(e));
    }
    if (r.tei) return results;
    const int64_t n = std::accumulate(n_tokens.begin(), n_tokens.end(), (int64_t) 0);
    return {{"model", r.model.empty() ? model_name : r.model},
            {"object", "list"},
            {"usage", {{"prompt_tokens", n}, {"total_tokens", n}}},
            {"results", std::move(results)}};
}

}  // namespace llama_tp::server

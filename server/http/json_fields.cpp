#include "server/http/json_fields.h"

#include <cmath>
#include <cstdio>
#include <limits>

namespace llama_tp::server {

const char * type_name(const json & v) {
    switch (v.type()) {
        case json::value_t::null:
            return "null";
        case json::value_t::boolean:
            return "a boolean";
        case json::value_t::number_integer:
        case json::value_t::number_unsigned:
            return "an integer";
        case json::value_t::number_float:
            return "a number";
        case json::value_t::string:
            return "a string";
        case json::value_t::array:
            return "an array";
        case json::value_t::object:
            return "an object";
        default:
            return "an unsupported value";
    }
}

ApiError wrong_type(const std::string & name, const char * expected, const json & got) {
    return bad_request("'" + name + "' must be " + expected + ", got " + type_name(got), name, "invalid_type");
}

ApiError out_of_range(const std::string & name, const std::string & what) {
    return bad_request("'" + name + "' " + what, name, "invalid_value");
}

// The field's value, or nullptr when absent or null (OpenAI clients send null
// for "not set").
const json * field(const json & body, const char * name) {
    const auto it = body.find(name);
    if (it == body.end() || it->is_null()) {
        return nullptr;
    }
    return &*it;
}

bool is_integral(const json & v) {
    if (v.is_number_integer() || v.is_number_unsigned()) {
        return true;
    }
    if (v.is_number_float()) {
        const double d = v.get<double>();
        return std::isfinite(d) && std::floor(d) == d && std::fabs(d) < 9e15;
    }
    return false;
}

// Integer in [lo, hi]; `fallback` when absent.
long long get_int(const json & body, const char * name, long long lo, long long hi, long long fallback) {
    const json * v = field(body, name);
    if (v == nullptr) {
        return fallback;
    }
    if (!is_integral(*v)) {
        throw wrong_type(name, "an integer", *v);
    }
    long long x;
    if (v->is_number_unsigned()) {
        const auto u = v->get<unsigned long long>();
        x = u > (unsigned long long) std::numeric_limits<long long>::max() ? std::numeric_limits<long long>::max()
                                                                           : (long long) u;
    } else if (v->is_number_float()) {
        x = (long long) v->get<double>();
    } else {
        x = v->get<long long>();
    }
    if (x < lo || x > hi) {
        throw out_of_range(name, "must be between " + std::to_string(lo) + " and " + std::to_string(hi) + ", got " +
                                     std::to_string(x));
    }
    return x;
}

double get_number(const json & body, const char * name, double lo, double hi, double fallback) {
    const json * v = field(body, name);
    if (v == nullptr) {
        return fallback;
    }
    if (!v->is_number()) {
        throw wrong_type(name, "a number", *v);
    }
    const double x = v->get<double>();
    if (!std::isfinite(x) || x < lo || x > hi) {
        char buf[160];
        std::snprintf(buf, sizeof(buf), "must be between %g and %g, got %g", lo, hi, x);
        throw out_of_range(name, buf);
    }
    return x;
}

bool get_bool(const json & body, const char * name, bool fallback) {
    const json * v = field(body, name);
    if (v == nullptr) {
        return fallback;
    }
    if (!v->is_boolean()) {
        throw wrong_type(name, "a boolean", *v);
    }
    return v->get<bool>();
}

std::string get_string(const json & body, const char * name, const std::string & fallback) {
    const json * v = field(body, name);
    if (v == nullptr) {
        return fallback;
    }
    if (!v->is_string()) {
        throw wrong_type(name, "a string", *v);
    }
    return v->get<std::string>();
}

void expect_type(const json & body, const char * name, bool ok, const char * expected) {
    const json * v = field(body, name);
    if (v != nullptr && !ok) {
        throw wrong_type(name, expected, *v);
    }
}

std::string string_in(const json & obj, const char * key, const std::string & where, const std::string & fallback) {
    const std::string name = where + "." + key;
    if (!obj.is_object()) throw wrong_type(where, "an object", obj);
    const json * v = field(obj, key);
    if (v == nullptr) return fallback;
    if (!v->is_string()) throw wrong_type(name, "a string", *v);
    return v->get<std::string>();
}

bool bool_in(const json & obj, const char * key, const std::string & where, bool fallback) {
    if (!obj.is_object()) throw wrong_type(where, "an object", obj);
    const json * v = field(obj, key);
    if (v == nullptr) return fallback;
    if (!v->is_boolean()) throw wrong_type(where + "." + key, "a boolean", *v);
    return v->get<bool>();
}

json parse_json(const std::string & body) {
    // Bounded as it is read, before any recursive code (serializing, the
    // schema-to-grammar conversion, the chat template) walks it.
    const json::parser_callback_t bounded = [](int depth, json::parse_event_t event, json &) {
        if ((event == json::parse_event_t::object_start || event == json::parse_event_t::array_start) &&
            depth >= kMaxJsonDepth) {
            throw bad_request(
                "the request body nests objects and arrays deeper than " + std::to_string(kMaxJsonDepth) + " levels",
                "", "invalid_json");
        }
        return true;
    };
    try {
        return json::parse(body, bounded);
    } catch (const json::exception & e) {
        // A syntax error, or a number beyond a double's range (1e400).
        throw bad_request(std::string("the request body is not valid JSON: ") + e.what(), "", "invalid_json");
    }
}

json parse_json_body(const std::string & body) {
    const json j = parse_json(body);
    if (!j.is_object()) {
        throw bad_request(std::string("the request body must be a JSON object, got ") + type_name(j), "",
                          "invalid_json");
    }
    return j;
}

}  // namespace llama_tp::server

#pragma once
// Reading a client's JSON: the body parsed with bounds, and typed reads of
// its fields. A wrong type or value is an ApiError 400 naming the field; an
// absent or null field (OpenAI clients send null for "not set") is the
// fallback.

#include "server/http/api_error.h"

#include <nlohmann/json.hpp>

#include <string>

namespace llama_tp::server {

using json = nlohmann::json;

// The deepest nesting of objects and arrays a request body may have (a
// json_schema or a tool's parameters included): deeper bodies are a 400.
constexpr int kMaxJsonDepth = 256;

// Parses a request body, throwing ApiError 400 when it is not a JSON object,
// is nested deeper than kMaxJsonDepth or holds a number beyond a double's range.
json parse_json_body(const std::string & body);
// Any JSON value (for the endpoints whose body is an array); throws as above.
json parse_json(const std::string & body);

// "a string", "an integer", ... for messages.
const char * type_name(const json & v);
ApiError wrong_type(const std::string & name, const char * expected, const json & got);
ApiError out_of_range(const std::string & name, const std::string & what);

// The field's value, or nullptr when absent or null.
const json * field(const json & body, const char * name);
// An integer, or a float with an integral value.
bool is_integral(const json & v);

// Fields of a request's top level, named by `name`.
long long get_int(const json & body, const char * name, long long lo, long long hi, long long fallback);
double get_number(const json & body, const char * name, double lo, double hi, double fallback);  // finite, in [lo, hi]
bool get_bool(const json & body, const char * name, bool fallback);
std::string get_string(const json & body, const char * name, const std::string & fallback);
// A 400 where the field is present and !ok.
void expect_type(const json & body, const char * name, bool ok, const char * expected);

// A string field of a nested object `where` names ("input[0]"): a 400 naming
// "where.key" for another type, or "where" when obj is no object.
std::string string_in(const json & obj, const char * key, const std::string & where, const std::string & fallback = "");
bool bool_in(const json & obj, const char * key, const std::string & where, bool fallback);

}  // namespace llama_tp::server

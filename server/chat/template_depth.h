#pragma once
// libcommon's template engine parses and renders by recursion, so a chat
// template nested thousands of levels deep overflows the stack and takes the
// server down at start (a model file can carry one). Its nesting is measured
// first, by a scan that recurses into nothing.

#include <string>

namespace llama_tp::server {

// The deepest nesting of blocks ({% if %} ... {% endif %} and the other
// block statements) plus brackets inside a tag that the template reaches.
int template_depth(const std::string & source);

constexpr int kMaxTemplateDepth = 256;

// Throws std::runtime_error naming `origin` when the template nests deeper
// than kMaxTemplateDepth.
void check_template_depth(const std::string & source, const std::string & origin);

}  // namespace llama_tp::server

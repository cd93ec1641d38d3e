#pragma once
// libcommon's template engine calls macros and recursive loops by recursion
// with no limit, so a template whose macro calls itself for ever (a model
// file can carry one) overflows the stack and kills the server. Such a
// template is first set up and rendered in a child process (setting up runs
// libcommon's capability probes, which render tools, tool calls and tool
// results too): one that dies there, or does not finish, is refused before
// this process renders it.

#include <functional>
#include <string>

namespace llama_tp::server {

// Whether rendering the template can recurse: it defines a macro or a
// recursive loop.
bool template_may_recurse(const std::string & source);

// Whether its recursion can depend on what it renders: a macro whose calls
// reach itself, a macro used other than by calling it by name (passed on,
// renamed), a recursive loop or a call block. Macros that only call others
// down to an end render alike for every conversation. Such a template
// renders each request in a child process first (template_sandbox.h).
bool template_calls_itself(const std::string & source);

constexpr int kTemplateProbeSeconds = 30;
// The most a request's conversation may take to render (template_sandbox.h).
constexpr int kRequestProbeSeconds = 10;

// Runs render in a forked child process (its output discarded). Throws
// std::runtime_error naming origin when the child dies of a signal or runs
// past kTemplateProbeSeconds. An exception inside render proves nothing
// here: the caller meets it again when it renders itself.
void probe_render_in_child(const std::function<void()> & render, const std::string & origin);

}  // namespace llama_tp::server

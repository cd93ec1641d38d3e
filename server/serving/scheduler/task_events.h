#pragma once
// What the scheduler's parts share: an error event for a task's channel and
// the milliseconds between two instants.

#include "server/serving/task.h"

#include <chrono>
#include <string>

namespace llama_tp::server {

inline double ms_between(std::chrono::steady_clock::time_point a, std::chrono::steady_clock::time_point b) {
    return std::chrono::duration<double, std::milli>(b - a).count();
}

inline TaskEvent error_event(int status, const std::string & message) {
    TaskEvent e;
    e.kind = TaskEvent::Kind::Error;
    e.status = status;
    e.message = message;
    return e;
}

}  // namespace llama_tp::server

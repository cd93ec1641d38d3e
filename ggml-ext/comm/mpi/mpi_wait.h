#pragma once
// Waiting for an MPI request without busy-polling: Open MPI's blocking calls
// spin a core, which on a machine shared by several ranks starves the rank
// being waited for. Tests the request, backing off as the other waits do.

#include "ggml-ext/comm/allreduce_backoff.h"

#include <atomic>
#include <string>
#include <vector>

#include <mpi.h>

namespace llama_tp {

// The text of an MPI error code.
std::string mpi_error_text(int code);

// Returns MPI_SUCCESS once the request completed, MPI_ERR_PENDING when the
// backoff ran out or *abandon became true first (the request stays
// posted), or the MPI error.
int mpi_wait(MPI_Request & request, Backoff & backoff, const std::atomic<bool> * abandon = nullptr);
// The same for all of them; statuses (resized) receives theirs.
int mpi_wait_all(std::vector<MPI_Request> & requests, std::vector<MPI_Status> & statuses, Backoff & backoff,
                 const std::atomic<bool> * abandon = nullptr);

}  // namespace llama_tp

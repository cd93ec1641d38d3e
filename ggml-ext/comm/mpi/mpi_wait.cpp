#include "ggml-ext/comm/mpi/mpi_wait.h"

namespace llama_tp {

std::string mpi_error_text(int code) {
    char text[MPI_MAX_ERROR_STRING];
    int n = 0;
    if (MPI_Error_string(code, text, &n) != MPI_SUCCESS) return "MPI error " + std::to_string(code);
    return std::string(text, n);
}

int mpi_wait(MPI_Request & request, Backoff & backoff, const std::atomic<bool> * abandon) {
    for (;;) {
        int done = 0;
        const int rc = MPI_Test(&request, &done, MPI_STATUS_IGNORE);
        if (rc != MPI_SUCCESS) return rc;
        if (done) return MPI_SUCCESS;
        if (!backoff.pause() || (abandon && abandon->load(std::memory_order_acquire))) return MPI_ERR_PENDING;
    }
}

int mpi_wait_all(std::vector<MPI_Request> & requests, std::vector<MPI_Status> & statuses, Backoff & backoff,
                 const std::atomic<bool> * abandon) {
    statuses.resize(requests.size());
    for (;;) {
        int done = 0;
        const int rc = MPI_Testall((int) requests.size(), requests.data(), &done, statuses.data());
        if (rc != MPI_SUCCESS) return rc;
        if (done) return MPI_SUCCESS;
        if (!backoff.pause() || (abandon && abandon->load(std::memory_order_acquire))) return MPI_ERR_PENDING;
    }
}

}  // namespace llama_tp

#include "ggml-ext/comm/process_group.h"

#include "ggml-ext/environment.h"
#include "ggml-ext/error.h"

namespace llama_tp {

bool launched_by_mpi() {
    const Environment env = Environment::of_process();
    return env.has("OMPI_COMM_WORLD_SIZE") || env.has("PMIX_RANK") || env.has("PMI_SIZE");
}

#ifndef LLAMA_TP_HAVE_MPI
// Without MPI a process launched by mpirun says so, instead of running as an
// unrelated single process next to its peers.
std::unique_ptr<ProcessGroup> join_launched_processes(double) {
    if (!launched_by_mpi()) return nullptr;
    throw Error("launched by mpirun, but this build has no MPI: install Open MPI (libopenmpi-dev) and rebuild");
}
#endif

}  // namespace llama_tp

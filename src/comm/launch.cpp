// Detecting mpirun, and the MPI entry points of a build without MPI.
#include <cstdint>
#include <cstdio>
#include <cstdlib>

#include "comm/communicator.h"

namespace ringside {

bool launched_by_mpirun() {
  for (const char* v : {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMIX_RANK", "MPI_LOCALNRANKS"})
    if (std::getenv(v)) return true;
  return false;
}

int mpirun_rank() {
  for (const char* v : {"OMPI_COMM_WORLD_RANK", "PMI_RANK", "PMIX_RANK"}) {
    const char* value = std::getenv(v);
    char* end = nullptr;
    const long rank = value && *value ? std::strtol(value, &end, 10) : -1;
    if (value && *value && *end == '\0' && rank >= 0 && rank <= INT32_MAX) return int(rank);
  }
  return -1;
}

#ifndef RINGSIDE_HAVE_MPI
bool mpi_available() { return false; }
bool mpi_active() { return false; }
Communicator& mpi_world(double) { throw Error("this build has no MPI backend (configure with RINGSIDE_MPI=ON and Open MPI)"); }
[[noreturn]] void mpi_abort(const std::string& message) {
  std::fprintf(stderr, "ringside: %s\n", message.c_str());
  std::_Exit(1);
}
void mpi_finalize() {}
#endif

}  // namespace ringside

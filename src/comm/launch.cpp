// Detecting mpirun, and the MPI entry points of a build without MPI.
#include <cstdio>
#include <cstdlib>

#include "comm/communicator.h"

namespace ringside {

bool launched_by_mpirun() {
  for (const char* v : {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMIX_RANK", "MPI_LOCALNRANKS"})
    if (std::getenv(v)) return true;
  return false;
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

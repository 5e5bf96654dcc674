// The MPI test binary: every rank runs the same Catch2 test cases on the MPI world, under
// `mpirun -np P`. A failing assertion on any rank fails that rank, and so the mpirun.
#define CATCH_CONFIG_RUNNER
#include <catch2/catch.hpp>

#include "comm/communicator.h"
#include "core/memory_limits.h"

int main(int argc, char** argv) {
  ringside::restart_within_limits(argv);  // before MPI_Init: the kernels ringside itself runs
  ringside::Communicator& world = ringside::mpi_world();
  Catch::Session session;
  if (const int rc = session.applyCommandLine(argc, argv)) return rc;
  const int failed = session.run();
  world.barrier();
  ringside::mpi_finalize();
  return failed ? 1 : 0;
}

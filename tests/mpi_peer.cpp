// A process that joins an MPI job and then does nothing for a while: the peer that reaches
// MPI_Init but never ringside's first collective (tests: "mpi: an absent peer ...").
//   ringside_mpi_peer SECONDS
#include <mpi.h>
#include <unistd.h>

#include <cstdlib>

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  sleep(argc > 1 ? unsigned(std::atoi(argv[1])) : 30u);
  MPI_Finalize();
  return 0;
}

// The MPI communicator: the same collective checks as the local one (tests/comm_checks.h).
#include <catch2/catch.hpp>

#include "comm_checks.h"

TEST_CASE("MPI collectives match the serial computation", "[mpi]") { comm_checks::all(ringside::mpi_world()); }

TEST_CASE("MPI point-to-point and split", "[mpi]") { comm_checks::p2p_and_split(ringside::mpi_world()); }

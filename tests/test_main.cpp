// The test binary's main: as ringside's own, it first restarts once where its settings ask
// (restart_within_limits: one OpenBLAS thread, OpenBLAS's kernels for this CPU), so that the
// tests compute with the kernels the commands they check compute with.
#define CATCH_CONFIG_RUNNER
#include <catch2/catch.hpp>

#include "core/memory_limits.h"

int main(int argc, char** argv) {
  ringside::restart_within_limits(argv);
  return Catch::Session().run(argc, argv);
}

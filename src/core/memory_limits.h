// What this process may hold: physical memory or its cgroup's memory.max, and its address-space
// and data limits (ulimit -v, -d). Checked before any work, so that running out is an error.
#pragma once
#include <string>

namespace ringside {

/// Refuses before any work (ConfigError "<what> needs about X of memory and this machine has
/// Y; use a smaller <smaller>", that last part without `smaller`) a job whose `need` bytes exceed 90% of what this process may
/// hold: physical memory or its cgroup's memory.max, and, with the stacks of its threads
/// (`blas_threads` calling OpenBLAS, which maps 128 MiB each and spins when it cannot;
/// `other_threads` not), its address-space and data limits (ulimit -v, -d).
void require_memory(double need, const std::string& what, const std::string& smaller, int blas_threads = 1,
                    int other_threads = 0);

}  // namespace ringside

// What this process may hold: physical memory or its cgroup's memory.max, and its address-space
// and data limits (ulimit -v, -d). Checked before any work, so that running out is an error.
#pragma once
#include <string>

namespace ringside {

/// What ringside says when memory runs out (std::bad_alloc): in main, and before it.
inline constexpr const char* kOutOfMemory = "out of memory (the machine's, or a limit on this process: ulimit -v)";

/// Refuses before any work (ConfigError "<what> needs about X of memory and this machine has
/// Y; use a smaller <smaller>", that last part without `smaller`) a job whose `need` bytes exceed 90% of what this process may
/// hold: physical memory or its cgroup's memory.max, and, with the stacks of its threads
/// (`blas_threads` calling OpenBLAS, which maps 128 MiB each and spins when it cannot;
/// `other_threads` not), its address-space and data limits (ulimit -v, -d).
void require_memory(double need, const std::string& what, const std::string& smaller, int blas_threads = 1,
                    int other_threads = 0);

/// Under an address-space limit (ulimit -v), caps glibc's malloc arenas at 2: each reserves
/// 64 MiB of address space, and by default a process gets one per thread up to 8 per core,
/// which a plan's dry runs (two threads per rank) would spend on reservations alone. Called
/// in main, before any thread starts; require_memory() counts the arenas accordingly.
void limit_malloc_arenas();

/// Called first thing in main: restarts the program once (execv of itself, same arguments) to
/// run within what its limits allow:
///   - with OPENBLAS_NUM_THREADS=1. OpenBLAS starts a pool of worker threads when it loads,
///     before main, although ringside never uses it (one thread per GEMM call, each rank a
///     thread). Under an address-space limit a worker whose 128 MiB buffer cannot be mapped
///     retries for ever, and the process cannot exit past it;
///   - with a stack of at least 8 MiB for the main thread, where `ulimit -s` is smaller and
///     the hard limit allows (the other threads get theirs: ensure_thread_stacks);
///   - with OpenBLAS's kernels for this CPU's vector width, where OpenBLAS loaded narrower
///     ones (its generic fallback on a CPU it does not recognise) and the user forced none
///     (choose_blas_kernels_for_restart, kernels/cpu/blas_kernels.h).
/// Returns at once when there is nothing to change, or when the restart fails. Until it is
/// called, SIGINT is ignored (from before the libraries' initialisers: OpenBLAS raises it when
/// its pool cannot start); it first puts SIGINT back as the caller left it, and makes an
/// exception no code catches (std::bad_alloc while setting up) one line and exit 1.
void restart_within_limits(char** argv);

}  // namespace ringside

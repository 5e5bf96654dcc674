// Memory before the work: what a job will need, against what this process may actually hold.
//
// Out of memory must be an error, never a spin. The limit is not only the machine's RAM: a
// cgroup (a container's memory.max), `ulimit -v` (the address space) and `ulimit -d` (data)
// bound a process too. Under an address-space limit the failure is not even clean: OpenBLAS
// maps a 128 MiB buffer for each thread that calls it, and when the mapping fails it retries
// for ever (blas_memory_alloc in its driver/others/memory.c). So the check counts what each
// thread maps beside the tensors, and refuses the job up front.
#include "core/memory_limits.h"

#include <errno.h>
#include <malloc.h>
#include <signal.h>
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <exception>
#include <fstream>
#include <vector>
#include <limits>
#include <new>
#include <string>
#include <tuple>

#include "core/error.h"
#include "core/units.h"
#include "kernels/cpu/blas_kernels.h"

namespace ringside {

namespace {

constexpr double kMiB = 1024.0 * 1024.0;
constexpr double kUnlimited = std::numeric_limits<double>::infinity();
// Address space a thread maps beside the data: OpenBLAS's buffer (BUFFER_SIZE, 128 MiB in
// Debian's build, seen as a 134217728-byte mmap) and a glibc malloc arena (64 MiB reserved,
// one per thread up to M_ARENA_MAX).
constexpr double kBlasBuffer = 128 * kMiB, kMallocArena = 64 * kMiB;

double rlimit(int resource) {
  struct rlimit l {};
  if (getrlimit(resource, &l) != 0 || l.rlim_cur == RLIM_INFINITY) return kUnlimited;
  return double(l.rlim_cur);
}

// A thread's stack: glibc sizes it by `ulimit -s`, and ringside's threads take at least 8 MiB
// (comm/communicator.h: ensure_thread_stacks).
double thread_stack() {
  const double s = rlimit(RLIMIT_STACK);
  return std::isinf(s) ? 8 * kMiB : std::max(s, 8 * kMiB);
}

// A cgroup v2 (or v1) memory limit on this process, if any: its own group's (/proc/self/cgroup
// names it: "0::/path" for v2, "N:memory:/path" for v1) and the root's, the smallest.
double cgroup_limit() {
  std::vector<std::string> paths = {"/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory/memory.limit_in_bytes"};
  std::ifstream self("/proc/self/cgroup");
  for (std::string line; std::getline(self, line);) {
    if (line.starts_with("0::/") && line.size() > 4) paths.push_back("/sys/fs/cgroup" + line.substr(3) + "/memory.max");
    if (const size_t at = line.find(":memory:/"); at != std::string::npos && line.size() > at + 9)
      paths.push_back("/sys/fs/cgroup/memory" + line.substr(at + 8) + "/memory.limit_in_bytes");
  }
  double limit = kUnlimited;
  for (const std::string& path : paths) {
    std::ifstream f(path);
    double v = 0;
    if (f >> v && v > 0 && v < 1e18) limit = std::min(limit, v);  // "max" does not parse: no limit
  }
  return limit;
}

// This process's address space and data now (/proc/self/statm: pages).
std::pair<double, double> mapped_now() {
  std::ifstream f("/proc/self/statm");
  double size = 0, resident = 0, shared = 0, text = 0, lib = 0, data = 0;
  f >> size >> resident >> shared >> text >> lib >> data;
  const double page = double(sysconf(_SC_PAGE_SIZE));
  return {size * page, data * page};
}

// How many malloc arenas there may be: glibc's default is 8 per core (64-bit), and
// limit_malloc_arenas() lowers it under an address-space limit.
int g_arena_max = 0;  // 0: glibc's default

// The arenas `threads` threads may map: one each, up to the most there may be beside the
// main heap (which grows by brk and reserves nothing).
double malloc_arenas(int threads) {
  const int max_arenas = g_arena_max > 0 ? g_arena_max : 8 * int(std::max<long>(1, sysconf(_SC_NPROCESSORS_ONLN)));
  return std::min(threads, max_arenas - 1) * kMallocArena;
}

}  // namespace

void limit_malloc_arenas() {
#ifdef __GLIBC__
  if (std::isinf(rlimit(RLIMIT_AS))) return;
  constexpr int kArenas = 2;  // the main heap and one more: the ranks' threads share them
  if (mallopt(M_ARENA_MAX, kArenas) == 1) g_arena_max = kArenas;
#endif
}

void require_memory(double need, const std::string& what, const std::string& smaller, int blas_threads, int other_threads) {
  // Resident memory: the machine's, or the cgroup's if that is less.
  const double ram = double(sysconf(_SC_PHYS_PAGES)) * double(sysconf(_SC_PAGE_SIZE)), cgroup = cgroup_limit();
  const double have = std::min(ram, cgroup);
  const std::string where = cgroup < ram ? "this cgroup allows (memory.max)" : "this machine has";
  if (need > 0.9 * have)
    throw ConfigError(what + " needs about " + format_bytes(need) + " of memory and " + where + " " + format_bytes(have) +
                      (smaller.empty() ? std::string() : "; use a smaller " + smaller));
  // Address space and data: what is mapped now, the data, and each thread's stack and buffers.
  const double threads = blas_threads * (thread_stack() + kBlasBuffer) + other_threads * thread_stack() +
                         malloc_arenas(blas_threads + other_threads);
  const auto [size_now, data_now] = mapped_now();
  for (const auto& [limit, flag, now] : {std::tuple{rlimit(RLIMIT_AS), "ulimit -v", size_now},
                                         std::tuple{rlimit(RLIMIT_DATA), "ulimit -d", data_now}}) {
    const double total = now + need + threads;
    if (total > 0.9 * limit)  // the same headroom as for memory: the estimates are estimates
      throw ConfigError(detail::concat(
          what, " needs about ", format_bytes(total), " of address space (", format_bytes(need), " of data, ",
          blas_threads + other_threads == 0 ? std::string()
                                            : detail::concat(format_bytes(threads), " for ", blas_threads + other_threads,
                                                             " threads' stacks, malloc arenas", blas_threads ? " and BLAS buffers" : "", ", "),
          format_bytes(now), " mapped already) and ", flag, " allows ", format_bytes(0.9 * limit), " of it with headroom",
          ": raise the limit", smaller.empty() ? "" : " or use a smaller " + smaller));
  }
}

namespace {
// An exception no code catches (std::bad_alloc while the program sets up, under a tight
// ulimit -v) ends the program with one line and exit 1, not "terminate called ..." and abort.
// Fixed strings only: memory may be what ran out.
[[noreturn]] void on_terminate() {
  if (const std::exception_ptr e = std::current_exception()) {
    const char* what = "an unknown exception";
    try {
      std::rethrow_exception(e);
    } catch (const std::bad_alloc&) {
      what = kOutOfMemory;
    } catch (const std::exception& x) {
      what = x.what();
    } catch (...) {
    }
    std::fputs(program_invocation_short_name, stderr);
    std::fputs(": error: ", stderr);
    std::fputs(what, stderr);
    std::fputs("\n", stderr);
    std::fflush(stderr);
    std::_Exit(1);
  }
  std::abort();  // no exception: a bug (a joinable thread destroyed); keep the core dump
}

// OpenBLAS starts a pool of threads in its initialiser, before main, and when one cannot start
// (a limit on processes, ulimit -u, or on address space, ulimit -v) it raises SIGINT to end the
// process (blas_thread_init, in its driver/others/blas_server.c): exit 130 and no word from
// ringside. ringside never uses that pool and restarts without it (below), so until then
// SIGINT is caught and does nothing. An executable's .preinit_array runs before any shared
// library's initialiser and any static one; this object is linked into every program that
// calls restart_within_limits.
struct sigaction g_sigint_before;
void ignore_signal(int) {}
void before_libraries(int, char**, char**) {
  struct sigaction ignore {};
  ignore.sa_handler = ignore_signal;
  sigaction(SIGINT, &ignore, &g_sigint_before);
  std::set_terminate(on_terminate);  // before the static initialisers, which allocate too
  kernels::cpu::simulate_openblas_fallback();  // RINGSIDE_OPENBLAS_FALLBACK=1: before OpenBLAS loads
}
__attribute__((section(".preinit_array"), used)) void (*const g_before_libraries)(int, char**, char**) = before_libraries;

}  // namespace

void restart_within_limits(char** argv) {
  sigaction(SIGINT, &g_sigint_before, nullptr);  // as the caller left it
  bool restart = false;
  const char* threads = std::getenv("OPENBLAS_NUM_THREADS");
  if (!threads || std::string(threads) != "1") {  // unset, or a pool ringside would not use
    ::setenv("OPENBLAS_NUM_THREADS", "1", 1);
    restart = true;
  }
  struct rlimit stack {};
  constexpr rlim_t kStack = rlim_t(8) << 20;
  if (getrlimit(RLIMIT_STACK, &stack) == 0 && stack.rlim_cur != RLIM_INFINITY && stack.rlim_cur < kStack &&
      (stack.rlim_max == RLIM_INFINITY || stack.rlim_max >= kStack)) {
    stack.rlim_cur = kStack;
    restart |= setrlimit(RLIMIT_STACK, &stack) == 0;
  }
  restart |= kernels::cpu::choose_blas_kernels_for_restart();  // OpenBLAS's kernels for this CPU
  if (restart) ::execv("/proc/self/exe", argv);  // returns only if it failed: then run on as we are
}

}  // namespace ringside

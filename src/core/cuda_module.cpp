// Loading the CUDA module (core/cuda_module.h).
#include "core/cuda_module.h"

#include <dlfcn.h>
#include <unistd.h>

#include <atomic>
#include <climits>
#include <mutex>
#include <string>

#include "core/error.h"

namespace ringside::cuda_module {

namespace {

std::mutex g_mu;
void* g_handle = nullptr;  // RTLD_DEFAULT when linked in; dlopen's handle otherwise
std::atomic<bool> g_loaded{false};

// The directory of this executable (/proc/self/exe), with a trailing '/'.
std::string executable_dir() {
  char path[PATH_MAX];
  const ssize_t n = ::readlink("/proc/self/exe", path, sizeof path - 1);
  if (n <= 0) return "./";
  const std::string exe(path, size_t(n));
  return exe.substr(0, exe.rfind('/') + 1);
}

}  // namespace

void* symbol(const char* name) {
  std::lock_guard lock(g_mu);
  if (!g_handle) {
    if (::dlsym(RTLD_DEFAULT, name)) {
      g_handle = RTLD_DEFAULT;
    } else {
      const std::string file = executable_dir() + kFileName;
      g_handle = ::dlopen(file.c_str(), RTLD_NOW | RTLD_LOCAL);
      if (!g_handle) {
        const char* why = ::dlerror();
        throw ConfigError(detail::concat("--device cuda: cannot load the CUDA backend (", file, "): ",
                                         why ? why : "unknown reason",
                                         " (it needs the CUDA 13 runtime, cuBLAS and NCCL, and about 2 GiB of address "
                                         "space: ulimit -v)"));
      }
    }
    g_loaded = true;
  }
  void* f = ::dlsym(g_handle, name);
  RS_CHECK(f != nullptr, "the CUDA backend (", kFileName, ") has no ", name, " (a module of another ringside version?)");
  return f;
}

bool loaded() { return g_loaded; }

}  // namespace ringside::cuda_module

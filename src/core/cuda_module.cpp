// Loading the CUDA module (core/cuda_module.h).
#include "core/cuda_module.h"

#include <dlfcn.h>
#include <elf.h>
#include <sys/stat.h>
#include <unistd.h>

#include <climits>
#include <cstring>
#include <fstream>
#include <mutex>
#include <string>

#include "core/error.h"

namespace ringside::cuda_module {

namespace {

std::mutex g_mu;
bool g_found = false;      // the module is this executable's own, or loaded
void* g_handle = nullptr;  // dlopen's handle; RTLD_DEFAULT (this executable) when linked in

// Why `file` cannot be dlopen()ed safely, or "" when it can: not a regular file (a FIFO would
// block dlopen, a directory fail it), or an ELF file shorter than its headers say (dlopen maps
// it, and touching the missing part is SIGBUS, not an error).
std::string unloadable(const std::string& file) {
  struct stat st {};
  if (::stat(file.c_str(), &st) != 0) return "";  // dlopen says why (no such file)
  if (!S_ISREG(st.st_mode)) return "not a regular file";
  const auto size = uint64_t(st.st_size);
  std::ifstream in(file, std::ios::binary);
  Elf64_Ehdr eh{};
  if (!in.read(reinterpret_cast<char*>(&eh), sizeof eh) || std::memcmp(eh.e_ident, ELFMAG, SELFMAG) != 0 ||
      eh.e_ident[EI_CLASS] != ELFCLASS64)
    return "not a 64-bit ELF shared library";
  const auto within = [&](uint64_t offset, uint64_t bytes) { return offset <= size && bytes <= size - offset; };
  if (eh.e_phentsize != sizeof(Elf64_Phdr) || !within(eh.e_phoff, uint64_t(eh.e_phnum) * sizeof(Elf64_Phdr)) ||
      (eh.e_shoff != 0 && !within(eh.e_shoff, uint64_t(eh.e_shnum) * eh.e_shentsize)))
    return "damaged: shorter than its ELF headers say (rebuild it)";
  in.seekg(std::streamoff(eh.e_phoff));
  for (int i = 0; i < eh.e_phnum; ++i) {
    Elf64_Phdr ph{};
    if (!in.read(reinterpret_cast<char*>(&ph), sizeof ph)) return "damaged: its program headers cannot be read";
    if (ph.p_type == PT_LOAD && !within(ph.p_offset, ph.p_filesz))
      return "damaged: shorter than its ELF headers say (rebuild it)";
  }
  return "";
}

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
  if (!g_found) {
    if (::dlsym(RTLD_DEFAULT, name)) {
      g_handle = RTLD_DEFAULT;
    } else {
      const std::string file = executable_dir() + kFileName;
      if (const std::string why = unloadable(file); !why.empty())
        throw ConfigError(detail::concat("--device cuda: cannot load the CUDA backend (", file, "): it is ", why));
      g_handle = ::dlopen(file.c_str(), RTLD_NOW | RTLD_LOCAL);
      if (!g_handle) {
        const char* why = ::dlerror();
        throw ConfigError(detail::concat("--device cuda: cannot load the CUDA backend (", file, "): ",
                                         why ? why : "unknown reason",
                                         " (it needs the CUDA 13 runtime, cuBLAS and NCCL, and far more address "
                                         "space than a CPU run: ulimit -v)"));
      }
    }
    g_found = true;
  }
  void* f = ::dlsym(g_handle, name);
  RS_CHECK(f != nullptr, "the CUDA backend (", kFileName, ") has no ", name, " (a module of another ringside version?)");
  return f;
}

}  // namespace ringside::cuda_module

#include "kernels/cpu/isa.h"

#include <atomic>
#include <cstdlib>
#include <cstring>
#include <string>

#include "core/error.h"
#include "kernels/cpu/isa_paths.h"

namespace ringside::kernels::cpu {

namespace {
// -1: not chosen yet; else the CpuIsa.
std::atomic<int> g_isa{-1};

// Throws ConfigError unless this CPU runs the path; `asked` says who asked for it.
void require_supported(CpuIsa isa, const std::string& asked) {
  if (!cpu_supports(isa))
    throw ConfigError(detail::concat(asked, " needs ", isa == CpuIsa::avx512 ? "AVX-512F" : "AVX2 and FMA",
                                     ", which this CPU lacks (its best is ", to_string(best_cpu_isa()), ")"));
}
// The variable's value as a message may show it: printable ASCII, at most 40 characters.
std::string shown(const char* value) {
  std::string out;
  for (const char* c = value; *c != '\0'; ++c) {
    if (out.size() == 40) return out + "...";
    out += (*c >= 0x20 && *c < 0x7f) ? *c : '?';
  }
  return out;
}
}  // namespace

const char* to_string(CpuIsa isa) {
  switch (isa) {
    case CpuIsa::avx512: return "avx512";
    case CpuIsa::avx2: return "avx2";
    case CpuIsa::generic: return "generic";
  }
  return "?";
}

CpuIsa parse_cpu_isa(const char* name) {
  for (CpuIsa isa : {CpuIsa::avx512, CpuIsa::avx2, CpuIsa::generic})
    if (std::strcmp(name, to_string(isa)) == 0) return isa;
  throw ConfigError(detail::concat("unknown CPU kernel path '", name, "': expected avx512, avx2 or generic"));
}

bool cpu_supports(CpuIsa isa) {
#if RS_HAVE_X86_PATHS  // a build without the x86 paths (another compiler or CPU) runs generic alone
  switch (isa) {
    case CpuIsa::avx512: return __builtin_cpu_supports("avx512f");
    case CpuIsa::avx2: return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
    case CpuIsa::generic: return true;
  }
  return false;
#else
  return isa == CpuIsa::generic;
#endif
}

CpuIsa best_cpu_isa() {
  for (CpuIsa isa : {CpuIsa::avx512, CpuIsa::avx2})
    if (cpu_supports(isa)) return isa;
  return CpuIsa::generic;
}

void set_cpu_isa(CpuIsa isa) {
  require_supported(isa, detail::concat("the CPU kernel path ", to_string(isa)));
  g_isa.store(static_cast<int>(isa));
}

CpuIsa active_cpu_isa() {
  int isa = g_isa.load(std::memory_order_relaxed);
  if (isa >= 0) return static_cast<CpuIsa>(isa);
  const char* env = std::getenv("RINGSIDE_CPU_ISA");
  CpuIsa chosen = best_cpu_isa();
  if (env != nullptr && *env != '\0') {
    try {
      chosen = parse_cpu_isa(env);
    } catch (const ConfigError&) {
      throw ConfigError(detail::concat("RINGSIDE_CPU_ISA: unknown CPU kernel path '", shown(env),
                                       "': expected avx512, avx2 or generic"));
    }
    require_supported(chosen, detail::concat("RINGSIDE_CPU_ISA=", env));
  }
  g_isa.store(static_cast<int>(chosen));
  return chosen;
}

}  // namespace ringside::kernels::cpu

// Which of OpenBLAS's kernel sets runs ringside's GEMMs (blas_kernels.h).
#include "kernels/cpu/blas_kernels.h"

#include <algorithm>
#include <cctype>
#include <cstdlib>
#include <cstring>
#include <string>

#include "core/error.h"

#if RINGSIDE_OPENBLAS
extern "C" char* openblas_get_config(void);
extern "C" char* openblas_get_corename(void);
#endif

namespace ringside::kernels::cpu {

namespace {

// The environment: OPENBLAS_CORETYPE is OpenBLAS's (read as it loads); RINGSIDE_OPENBLAS_CHOSE
// is what ringside chose before restarting ("SkylakeX over Prescott"); RINGSIDE_OPENBLAS_FALLBACK
// acts as on a CPU OpenBLAS does not recognise.
constexpr const char* kCoretype = "OPENBLAS_CORETYPE";
constexpr const char* kChose = "RINGSIDE_OPENBLAS_CHOSE";
constexpr const char* kFallback = "RINGSIDE_OPENBLAS_FALLBACK";
// What OpenBLAS's fallback loads on a CPU it does not recognise (its driver/others/dynamic.c).
constexpr const char* kGeneric = "Prescott";
// Set by simulate_openblas_fallback, before OpenBLAS loads, when it set OPENBLAS_CORETYPE itself.
bool g_simulated = false;

// OpenBLAS matches OPENBLAS_CORETYPE without regard to case.
bool same_name(const std::string& a, const std::string& b) {
  return a.size() == b.size() && std::equal(a.begin(), a.end(), b.begin(), [](char x, char y) {
           return std::tolower(static_cast<unsigned char>(x)) == std::tolower(static_cast<unsigned char>(y));
         });
}

std::string env(const char* name) {
  const char* value = std::getenv(name);
  return value ? value : "";
}

// RINGSIDE_OPENBLAS_CHOSE's two names: what ringside chose, and what OpenBLAS had loaded.
struct Chose {
  std::string chosen, over;
};
Chose parse_chose(const std::string& value) {
  const size_t at = value.find(" over ");
  if (at == std::string::npos) return {};
  return {value.substr(0, at), value.substr(at + 6)};
}

// The set OpenBLAS loaded in this process, and whether it was built to choose (DYNAMIC_ARCH).
std::string loaded_kernels() {
#if RINGSIDE_OPENBLAS
  return openblas_get_corename();
#else
  return "";
#endif
}
bool openblas_chooses() {
#if RINGSIDE_OPENBLAS
  return std::strstr(openblas_get_config(), "DYNAMIC_ARCH") != nullptr;
#else
  return false;
#endif
}

// How a set's width reads: "AVX-512", "AVX2", "SSE2".
const char* width_name(std::string_view set) {
  switch (openblas_kernel_width(set)) {
    case 512: return "AVX-512";
    case 256: return set == "Sandybridge" ? "AVX" : "AVX2";
    case 128: return "SSE2";
  }
  return "its own";
}

}  // namespace

int openblas_kernel_width(std::string_view name) {
  for (const char* wide : {"SkylakeX", "Cooperlake", "SapphireRapids"})
    if (name == wide) return 512;
  for (const char* avx : {"Haswell", "Zen", "Sandybridge"})
    if (name == avx) return 256;
  // OpenBLAS 0.3.21's SSE sets (and AMD's Bulldozer family, whose kernels are 128-bit FMA4).
  for (const char* sse : {"Prescott", "Core2", "Penryn", "Dunnington", "Nehalem", "Atom", "Opteron", "Opteron(SSE3)",
                          "Barcelona", "Bobcat", "Bulldozer", "Piledriver", "Steamroller", "Excavator", "Nano",
                          "Katmai", "Coppermine", "Northwood", "Banias"})
    if (name == sse) return 128;
  return 0;
}

std::string best_openblas_kernels() {
#if defined(__x86_64__) && defined(__GNUC__)
  __builtin_cpu_init();  // safe before libgcc's own initialiser has run
  if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512dq") &&
      __builtin_cpu_supports("avx512vl"))
    return "SkylakeX";
  if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) return "Haswell";
#endif
  return "";
}

std::string kernels_to_restart_with(std::string_view in_use, std::string_view best, bool forced) {
  const int have = openblas_kernel_width(in_use), can = openblas_kernel_width(best);
  if (forced || have == 0 || can == 0 || have >= can) return "";
  return std::string(best);
}

bool BlasKernels::below_best() const {
  const int have = openblas_kernel_width(in_use), can = openblas_kernel_width(best);
  return have != 0 && can != 0 && have < can;
}

std::string BlasKernels::describe() const {
  if (how == BlasChoice::not_openblas) return "the reference BLAS (netlib; no OpenBLAS in this build)";
  auto set = [](const std::string& name) {
    return openblas_kernel_width(name) ? name + " (" + width_name(name) + ")" : name;
  };
  std::string d = "kernel set " + set(in_use);
  if (how == BlasChoice::ringside && in_use == chosen)
    return d + ", ringside's choice for this CPU (OpenBLAS's own: " + openblas_chose + ", " + width_name(openblas_chose) + ")";
  if (how == BlasChoice::ringside)  // the restart did not take: OpenBLAS runs what it chose
    return d + ", OpenBLAS's choice: ringside's restart on " + set(chosen) + ", this CPU's best, did not happen; " +
           "OPENBLAS_CORETYPE=" + chosen + " selects it";
  if (how == BlasChoice::forced && !same_name(forced, in_use))
    return d + ", OpenBLAS's choice: OPENBLAS_CORETYPE='" + detail::shown_input(forced) + "' names no kernel set it knows";
  if (how == BlasChoice::forced) d += ", as OPENBLAS_CORETYPE asks";
  else d += ", OpenBLAS's choice";
  if (below_best())
    d += ", below this CPU's best, " + set(best) +
         (how == BlasChoice::forced ? ": unset OPENBLAS_CORETYPE for it" : ": OPENBLAS_CORETYPE=" + best + " selects it");
  return d;
}

BlasKernels blas_kernels() {
  BlasKernels k;
  k.in_use = loaded_kernels();
  k.best = best_openblas_kernels();
  if (k.in_use.empty()) {
    k.how = BlasChoice::not_openblas;
    return k;
  }
  const std::string coretype = env(kCoretype);
  const Chose chose = parse_chose(env(kChose));
  // ringside's own choice only where it is what ringside would choose: the CPU's best.
  if (!chose.chosen.empty() && chose.chosen == coretype && chose.chosen == k.best) {
    k.how = BlasChoice::ringside;
    k.chosen = chose.chosen;
    k.openblas_chose = chose.over;
  } else if (!coretype.empty() && !g_simulated) {
    k.how = BlasChoice::forced;
    k.forced = coretype;
  }
  return k;
}

bool choose_blas_kernels_for_restart() {
  if (!openblas_chooses()) return false;
  const BlasKernels k = blas_kernels();
  // Chosen once: a restart that still runs narrower kernels (OpenBLAS refused the name) stays.
  if (k.how == BlasChoice::ringside) return false;
  const std::string target = kernels_to_restart_with(k.in_use, k.best, k.how == BlasChoice::forced);
  if (target.empty()) return false;
  ::setenv(kCoretype, target.c_str(), 1);
  ::setenv(kChose, (target + " over " + k.in_use).c_str(), 1);
  return true;
}

void simulate_openblas_fallback() {
  if (env(kFallback) == "1" && env(kCoretype).empty() && env(kChose).empty()) {
    ::setenv(kCoretype, kGeneric, 1);
    g_simulated = true;  // this process's OPENBLAS_CORETYPE stands for OpenBLAS's own fallback
  }
}

void check_blas_environment() {
  const std::string fallback = env(kFallback);
  if (!fallback.empty() && fallback != "0" && fallback != "1")
    throw ConfigError(detail::concat(kFallback, ": expected 1 (act as on a CPU OpenBLAS does not recognise) or 0, not '",
                                     detail::shown_input(fallback), "'"));
}

}  // namespace ringside::kernels::cpu

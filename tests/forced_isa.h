// Forcing a CPU kernel path in a test (kernels/cpu/isa.h), and the paths this CPU runs.
#pragma once
#include <vector>

#include "kernels/cpu/isa.h"

namespace ringside {

/// Forces `isa` for the scope and puts back the path in force before.
struct ForcedIsa {
  kernels::cpu::CpuIsa before = kernels::cpu::active_cpu_isa();
  explicit ForcedIsa(kernels::cpu::CpuIsa isa) { kernels::cpu::set_cpu_isa(isa); }
  ~ForcedIsa() { kernels::cpu::set_cpu_isa(before); }
};

/// Every path this CPU runs, generic first, then the wider ones.
inline std::vector<kernels::cpu::CpuIsa> paths_here() {
  using kernels::cpu::CpuIsa;
  std::vector<CpuIsa> paths;
  for (CpuIsa isa : {CpuIsa::generic, CpuIsa::avx2, CpuIsa::avx512})
    if (kernels::cpu::cpu_supports(isa)) paths.push_back(isa);
  return paths;
}

}  // namespace ringside

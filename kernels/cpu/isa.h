// Which vector instruction set the hand-written CPU kernels use (attention version 2 and the
// float helpers of vec.cpp, each compiled once per path through isa_paths.h): chosen at run time
// from the CPU's features, and overridable so that every path can be tested on one machine, and
// so that the generic path gives the same float bits on every x86-64 CPU.
//
//   avx512   AVX-512F: 16 floats a vector, 32 registers
//   avx2     AVX2 + FMA: 8 floats a vector, 16 registers
//   generic  what every x86-64 (SSE2) or other target has: 4 floats a vector, no FMA
//
// The environment variable RINGSIDE_CPU_ISA=avx512|avx2|generic forces one (read once, at the
// first kernel call; set but empty counts as unset); set_cpu_isa does the same from code.
#pragma once

namespace ringside::kernels::cpu {

enum class CpuIsa { generic, avx2, avx512 };

/// "generic", "avx2", "avx512".
const char* to_string(CpuIsa isa);
/// Throws ringside::ConfigError naming the accepted values on anything else.
CpuIsa parse_cpu_isa(const char* name);
/// Whether this CPU (and this build) can run the path.
bool cpu_supports(CpuIsa isa);
/// The widest path this CPU runs.
CpuIsa best_cpu_isa();
/// The path in force: RINGSIDE_CPU_ISA when set, else best_cpu_isa(). Throws ringside::ConfigError
/// (a configuration error: the command exits 2) when the variable names an unknown path or one
/// this CPU cannot run.
CpuIsa active_cpu_isa();
/// Forces a path (tests and benchmarks); throws ringside::ConfigError when the CPU cannot run it.
/// Not thread-safe against kernels running at the same moment: call it between runs.
void set_cpu_isa(CpuIsa isa);

}  // namespace ringside::kernels::cpu

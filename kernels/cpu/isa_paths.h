// One compiled body per vector path of isa.h, the one active_cpu_isa() names run: how every
// hand-vectorised float kernel is built (vec.cpp's helpers through RS_ISA_DISPATCH; attention
// version 2, whose bodies are templates on the path, switches on active_cpu_isa() itself), so
// that RINGSIDE_CPU_ISA / set_cpu_isa decide what runs, and the generic path, compiled for
// baseline x86-64, gives the same bits on every machine. (The loader's target_clones, which
// chose by the CPU alone, gave an AVX-512 machine other float bits than an AVX2 one: issue 36.)
// Float loops with no path of their own (LayerNorm's statistics in ops.cpp) are compiled once,
// for baseline x86-64: the same bits everywhere too. For the kernels' own .cpp files.
#pragma once

#include "kernels/cpu/isa.h"

#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
#define RS_TARGET_AVX512 __attribute__((target("avx512f,avx2,fma")))
#define RS_TARGET_AVX2 __attribute__((target("avx2,fma")))
#define RS_HAVE_X86_PATHS 1
#else
#define RS_TARGET_AVX512
#define RS_TARGET_AVX2
#define RS_HAVE_X86_PATHS 0
#endif
// A body written once and inlined into each path's function (GCC vectorises it there for that
// path's target; without always_inline it would not inline a target-less function into them).
#define RS_INLINE __attribute__((always_inline)) inline

/// Defines `ret name params` to run `name##_body args` compiled for the path in force:
///   RS_ISA_DISPATCH(float, dot, (const float* a, const float* b, int64_t n), (a, b, n))
/// Must be used inside namespace ringside::kernels::cpu.
#if RS_HAVE_X86_PATHS
#define RS_ISA_DISPATCH(ret, name, params, args)                                    \
  RS_TARGET_AVX512 static ret name##_avx512 params { return name##_body args; }     \
  RS_TARGET_AVX2 static ret name##_avx2 params { return name##_body args; }         \
  static ret name##_generic params { return name##_body args; }                     \
  ret name params {                                                                 \
    switch (active_cpu_isa()) {                                                     \
      case CpuIsa::avx512: return name##_avx512 args;                               \
      case CpuIsa::avx2: return name##_avx2 args;                                   \
      default: return name##_generic args;                                          \
    }                                                                               \
  }
#else
#define RS_ISA_DISPATCH(ret, name, params, args) \
  ret name params { return name##_body args; }
#endif

// Which of OpenBLAS's kernel sets runs ringside's GEMMs, and why.
//
// Debian's OpenBLAS is built with DYNAMIC_ARCH: it carries one kernel set per CPU family and
// picks one by the CPU's model number as it loads, before main. A CPU newer than that OpenBLAS
// knows (Debian 12's 0.3.21 on a Xeon of family 6 model 207, say) gets its generic "Prescott"
// kernels (SSE2), 4 to 5 times below what the CPU can do; AMD's AVX-512 CPUs get the AVX2 ones.
// OpenBLAS reads OPENBLAS_CORETYPE while it loads, so ringside cannot change the set in place:
// when OpenBLAS chose a set narrower than the CPU's vector units, ringside sets
// OPENBLAS_CORETYPE to the set of the CPU's width and restarts itself once
// (restart_within_limits, core/memory_limits.h). A set the user forces is kept, and said.
// Why a restart and not another BLAS: docs/design.md, "GEMMs at the CPU's speed".
#pragma once
#include <string>
#include <string_view>

namespace ringside::kernels::cpu {

/// How the kernel set in use was chosen.
enum class BlasChoice {
  openblas,     ///< OpenBLAS's own choice for this CPU
  ringside,     ///< ringside's, over OpenBLAS's narrower one (RINGSIDE_OPENBLAS_CHOSE says which)
  forced,       ///< the user's, with OPENBLAS_CORETYPE
  not_openblas  ///< no OpenBLAS in this build (the reference BLAS)
};

/// The kernel set in use, the best this CPU runs, and how the one in use was chosen.
struct BlasKernels {
  std::string in_use;          ///< openblas_get_corename(): "SkylakeX", "Haswell", "Prescott", ...
  std::string best;            ///< best_openblas_kernels(); "" where no set is known to be better
  std::string openblas_chose;  ///< with BlasChoice::ringside: the set OpenBLAS had loaded itself
  BlasChoice how = BlasChoice::openblas;
  std::string chosen;          ///< with BlasChoice::ringside: the set ringside restarted on
  std::string forced;          ///< with BlasChoice::forced: OPENBLAS_CORETYPE's value

  /// Whether the set in use is narrower than the CPU's best: GEMM then runs below what the CPU
  /// can do, and a ratio against it is a ratio against a fallback.
  bool below_best() const;
  /// What the backend line says: "kernel set SkylakeX (AVX-512), OpenBLAS's choice"; "kernel
  /// set SkylakeX (AVX-512), ringside's choice for this CPU (OpenBLAS's own: Prescott, SSE2)";
  /// "kernel set Prescott (SSE2), as OPENBLAS_CORETYPE asks, below this CPU's best, SkylakeX
  /// (AVX-512): unset OPENBLAS_CORETYPE for it"; and where the restart did not take, or
  /// OPENBLAS_CORETYPE names no set OpenBLAS knows, that.
  std::string describe() const;
};

/// The kernel set in use and how it was chosen (reads OpenBLAS and the environment).
BlasKernels blas_kernels();

/// The OpenBLAS kernel set of the CPU's widest vector units: "SkylakeX" with AVX-512 (F, BW,
/// DQ and VL, as OpenBLAS's SkylakeX kernels use them), "Haswell" with AVX2 and FMA, "" below
/// (OpenBLAS's own choice among its SSE sets stands).
std::string best_openblas_kernels();

/// The vector width in bits of an OpenBLAS kernel set's sgemm (512 SkylakeX, Cooperlake,
/// SapphireRapids; 256 Haswell, Zen, Sandybridge; 128 the SSE sets: Prescott, Core2, Nehalem,
/// ...), 0 for a name this table does not know (a newer OpenBLAS's: its choice stands).
int openblas_kernel_width(std::string_view name);

/// The decision, a pure function: the set to restart with ("" for none) when OpenBLAS loaded
/// `in_use` on a CPU whose best is `best`. None when the user forced the set, when `best` is ""
/// or unknown, or when `in_use` is unknown or already as wide.
std::string kernels_to_restart_with(std::string_view in_use, std::string_view best, bool forced);

/// Called by restart_within_limits, after OpenBLAS has loaded: where it chose narrower kernels
/// than the CPU runs and OPENBLAS_CORETYPE was not given, sets OPENBLAS_CORETYPE to the best
/// set and RINGSIDE_OPENBLAS_CHOSE to "<best> over <OpenBLAS's>", and returns true (restart).
/// Returns false in a build without OpenBLAS or without DYNAMIC_ARCH (the set is fixed).
bool choose_blas_kernels_for_restart();

/// RINGSIDE_OPENBLAS_FALLBACK=1 acts as on a CPU this OpenBLAS does not recognise: the process
/// first loads the generic Prescott kernels, as OpenBLAS's fallback does, and ringside chooses
/// from there (tests/portability.sh's condition "blas-unrecognised"). Called from the
/// executable's .preinit_array, before OpenBLAS loads; does nothing once ringside has chosen.
/// Any value but "1" and "0" is refused by check_blas_environment.
void simulate_openblas_fallback();

/// Throws ringside::ConfigError for a RINGSIDE_OPENBLAS_FALLBACK other than "0" or "1".
void check_blas_environment();

}  // namespace ringside::kernels::cpu

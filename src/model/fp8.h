// FP8 training as TransformerEngine (and torchao) run it: a GEMM's FP8 kernel is about twice as
// fast as bf16's, but its inputs must first be quantized, and that is memory-bound work of its
// own. The recipe decides how much.
//
// Per linear layer and microbatch (TransformerEngine's Linear in training):
//   forward   its input x [tokens, in] is quantized for the forward GEMM and, transposed, for
//             the weight gradient: one cast-transpose (read 2 bytes an element, write 1 + 1)
//   backward  the output's gradient dy [tokens, out] likewise, for the data gradient and,
//             transposed, the weight gradient; the weight-gradient GEMM quantizes nothing new
//   weights   cast (and transposed for the backward) once a step, cached for the later
//             microbatches (TE's is_first_microbatch; Megatron's FP8 parameters)
// Bytes an input element costs, by recipe:
//   delayed   4: the scale from the amax history, computed in the same pass (TE DelayedScaling)
//   current   6: an amax pass over the tensor first (read 2), then the cast-transpose (TE's
//             Float8CurrentScaling; torchao's tensorwise)
//   block     6: 1x128 and 128x128 blocks, rowwise and columnwise quantized separately (TE's
//             Float8BlockScaling, DeepSeek-V3's), and its block-scaled GEMMs slower on Hopper
//   mxfp8     4: 1x32 blocks with E8M0 scales, one fused pass (Blackwell's MXFP8)
// at the profile's memory-bound rate. Checked against TransformerEngine's GEMM profiling on an
// H200 NVL (docs/calibration.md I): its quantization overheads come out at 83% (current) and 85%
// (delayed) of HBM, the profiles' 85% memory-bound fraction.
#pragma once
#include <string>

namespace ringside::model {

struct Fp8Recipe {
  const char* name;
  double input_bytes;   ///< bytes a quantized input element moves (cast-transpose, and amax where it reads twice)
  int kernels;          ///< kernels it launches per quantized tensor
  double gemm_rate;     ///< the FP8 GEMM's rate under it, relative to per-tensor FP8 (block scaling's is lower)
  bool blackwell_only;  ///< needs MXFP8 tensor cores
  const char* what;
};

/// The recipe named `name` (delayed, current, tensorwise (current's torchao name), block, mxfp8).
/// Throws ConfigError naming the known ones.
const Fp8Recipe& fp8_recipe(const std::string& name);
/// Whether `name` is a recipe fp8_recipe() knows.
bool fp8_recipe_known(const std::string& name);
/// "delayed, current (tensorwise), block or mxfp8", for messages.
std::string fp8_recipe_names();

/// Bytes a weight element costs when cast once a step: read 2, write 1 and its transpose 1.
inline constexpr double kFp8WeightCastBytes = 4;

}  // namespace ringside::model

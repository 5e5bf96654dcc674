// The FP8 recipes (fp8.h).
#include "model/fp8.h"

#include "core/error.h"

namespace ringside::model {

namespace {

// Block scaling's GEMM rate: TransformerEngine's GEMM profiling on an H200 NVL (gemm_profiling.rst
// @1609c89): block 22.882 ms a layer with its quantization, current 20.285 with, 16.785 without;
// block's quantization taken as current's (the same bytes), 3.50 ms: 16.785 / (22.882 - 3.50).
constexpr double kBlockGemmRate = 16.785 / (22.882 - (20.285 - 16.785));

// MXFP8's GEMM is taken at per-tensor FP8's rate (1.0) and its quantization as delayed scaling's one
// fused pass [assumed: no Blackwell A/B of MXFP8 against per-tensor FP8 GEMMs, nor of MXFP8's
// quantization, was found; the Blackwell parts' fp8 fraction is B200's per-tensor MAMF].
const Fp8Recipe kRecipes[] = {
    {"delayed", 4, 1, 1.0, false, "per-tensor scales from the amax history (TransformerEngine's DelayedScaling)"},
    {"current", 6, 2, 1.0, false, "per-tensor scales from this tensor's amax (TE's Float8CurrentScaling, torchao's tensorwise)"},
    {"block", 6, 2, kBlockGemmRate, false, "1x128 and 128x128 blocks (TE's Float8BlockScaling)"},
    {"mxfp8", 4, 1, 1.0, true, "1x32 blocks with E8M0 scales (Blackwell's MXFP8)"},
};

}  // namespace

bool fp8_recipe_known(const std::string& name) {
  if (name == "tensorwise") return true;
  for (const Fp8Recipe& r : kRecipes)
    if (name == r.name) return true;
  return false;
}

const Fp8Recipe& fp8_recipe(const std::string& name) {
  const std::string n = name == "tensorwise" ? "current" : name;
  for (const Fp8Recipe& r : kRecipes)
    if (n == r.name) return r;
  throw ConfigError("--fp8-recipe " + detail::shown_input(name) + ": " + fp8_recipe_names());
}

std::string fp8_recipe_names() { return "delayed, current (tensorwise), block or mxfp8"; }

}  // namespace ringside::model

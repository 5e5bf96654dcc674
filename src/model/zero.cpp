#include "model/zero.h"

#include "core/error.h"

namespace ringside::model {

ZeroStateBytes zero_state_bytes(double params, int dp, int stage, double weight_bytes) {
  if (stage < 0 || stage > 3) throw ConfigError(detail::concat("ZeRO stage ", stage, " is not 0, 1, 2 or 3"));
  if (dp < 1) throw ConfigError(detail::concat("data-parallel size N_d = ", dp, " must be >= 1"));
  if (!(params >= 0)) throw ConfigError("the parameter count must be >= 0");
  if (weight_bytes != 2 && weight_bytes != 4)
    throw ConfigError(detail::concat("a weight of ", weight_bytes, " bytes: 2 (bf16) or 4 (fp32)"));
  // Mixed precision: bf16 weights and gradients, fp32 master + m + v; fp32: m + v only.
  const double optimizer = weight_bytes == 2 ? 12 : 8;
  ZeroStateBytes b{weight_bytes * params, weight_bytes * params, optimizer * params};
  if (stage >= 1) b.optimizer /= dp;
  if (stage >= 2) b.grads /= dp;
  if (stage >= 3) b.weights /= dp;
  return b;
}

}  // namespace ringside::model

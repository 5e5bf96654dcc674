// What a GPU holds of the model's training state under data parallelism with ZeRO (Rajbhandari
// et al. 2020, "ZeRO: Memory Optimizations Toward Training Trillion Parameter Models", section 3
// and Figure 1): mixed-precision Adam keeps per parameter bf16 weights (2 bytes), bf16 gradients
// (2) and K = 12 bytes of optimizer state (fp32 master weights, momentum and variance, 4 each).
// ZeRO stage 1 shards the optimizer state over the N_d data-parallel ranks, stage 2 the gradients
// too, stage 3 (FSDP) the weights too.
#pragma once

namespace ringside::model {

/// Bytes one GPU holds, each term sharded as its ZeRO stage says.
struct ZeroStateBytes {
  double weights = 0, grads = 0, optimizer = 0;
  double total() const { return weights + grads + optimizer; }
};

/// For `params` parameters on this GPU's model shard (its TP and PP share, Ψ) and N_d = `dp`
/// data-parallel ranks:
///   stage 0  2 Ψ + 2 Ψ + 12 Ψ
///   stage 1  2 Ψ + 2 Ψ + 12 Ψ / N_d
///   stage 2  2 Ψ + 2 Ψ / N_d + 12 Ψ / N_d
///   stage 3  (2 Ψ + 2 Ψ + 12 Ψ) / N_d
/// (ZeRO's Figure 1: Ψ = 7.5 B, N_d = 64 gives 120, 31.4, 16.6 and 1.9 GB). That is mixed
/// precision, `weight_bytes` 2; in fp32 (4) weights and gradients take 4 Ψ each and the
/// optimizer 8 Ψ (m and v; the weights are their own master copy). Throws ConfigError for a
/// stage outside 0..3, dp < 1, params < 0 or weight_bytes other than 2 or 4.
ZeroStateBytes zero_state_bytes(double params, int dp, int stage, double weight_bytes = 2);

}  // namespace ringside::model

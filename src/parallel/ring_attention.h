// Ring attention context parallelism (Liu et al. 2023), with causal load balancing.
#pragma once
#include <array>
#include "parallel/strategy.h"

namespace ringside {

/// Ring attention as a Strategy: name "ring".
Strategy ring_strategy();

/// The global positions rank `rank` of P holds, ascending, under `layout` (automatic must be
/// resolved first, see LayerConfig::cp_layout):
///   contiguous  [r s/P, (r+1) s/P)
///   zigzag      chunks r and 2P-1-r of 2P chunks of s/(2P) (Brandon et al. 2023; ring-flash-attention)
///   striped     r, r + P, r + 2P, ... (Brandon et al. 2023, "Striped Attention")
std::vector<int64_t> layout_positions(Layout layout, int64_t s, int P, int rank);

/// The arithmetic runs of rank's tokens under `layout` (resolved): {local start, length, first
/// global position, stride} each; contiguous and striped give one, zigzag two (one where its
/// chunks touch). Computed in O(1), as each ring step does; by_scanning finds them by scanning
/// layout_positions instead (O(s/P)), which the tests compare it with.
std::vector<std::array<int64_t, 4>> layout_run_list(Layout layout, int64_t s, int P, int rank, bool by_scanning = false);
/// Throws ConfigError unless s % P == 0 (s % 2P for zigzag).
void validate_ring(const LayerConfig& cfg, int P);

/// Saved-activation bytes per rank: the reference's divided by P (every saved tensor, the
/// attention's q, k, v, out and lse included, holds only the rank's s/P tokens).
int64_t ring_saved_bytes(const LayerConfig& cfg, int P, int rank, DType dt);

/// Bytes rank `rank` sends, with kv = b (s/P) Hkv d elements (one of K or V of a block):
/// forward, K and V pass P-1 hops: 2 kv (P-1), i.e. 2 (Hkv/H) N h (P-1)/P over all ranks
/// (design.md). Backward: K and V again (P-1 hops) and their gradients all P hops home,
/// 2 kv (2P - 1), plus a ring all-reduce of every weight gradient. Nothing when P = 1.
CommBytes ring_comm_bytes(const LayerConfig& cfg, int P, int rank, DType dt);

/// Forward attention FLOPs rank `rank` computes (visible query-key pairs, 4 d per pair per
/// head, as attention_forward_flops counts them) under cfg's layout: the per-rank work table.
double ring_attention_flops(const LayerConfig& cfg, int P, int rank);

/// One rank of ring attention, forward and backward (see strategy.h).
RankResult ring_run(const LayerConfig& cfg, Communicator& comm, Backend& be, MemoryTracker& tracker, DType dt);

}  // namespace ringside

// Which tokens each rank of a resolved configuration holds: the padded sequence the shards split
// (layer/packing.h), the layout of the context-parallel shards (parallel/layout.h), and a rank's
// slots in it. RunPlan (parallel/run_plan.h) computes these once per run; everything downstream
// reads them from the plan.
#pragma once
#include <cstdint>
#include <vector>

#include "layer/packing.h"
#include "parallel/config.h"
#include "parallel/layout.h"

namespace ringside {

/// The layout the context-parallel shards of a resolved configuration use: the requested one
/// (automatic resolved by causal) for a scheme with a token layout (p2p, all_gather, a2a+p2p,
/// p2p-q); contiguous for a2a (every rank sees the whole sequence) and without context
/// parallelism.
Layout shard_layout(const ParallelConfig& par, const LayerConfig& cfg);

/// The ranks the layout spans: the ring's R for a scheme with a ring, C for one without (all_gather),
/// 1 for a scheme without a token layout.
int layout_ranks(const ParallelConfig& par);

/// The padded sequence a resolved configuration splits. With G = layout_ranks every shard must
/// hold S / (T C) tokens per rank between the TP blocks (S / C without sequence parallelism:
/// T stands for sequence_split() here), so S is a multiple of T C, and of 2 G
/// for zigzag (two chunks per rank); the per-document layouts pad each document to a multiple
/// of 2 G and S to one of lcm(2 G, T C). The padding is the least that makes every split exact;
/// none when s already divides.
Packing sequence_packing(const ParallelConfig& par, const LayerConfig& cfg);

/// The layout of the context-parallel shards over the G ranks it spans, on `packing` (which
/// must outlive it).
RingLayout cp_layout(const ParallelConfig& par, const LayerConfig& cfg, const Packing& packing);

/// The slots (global positions of the padded sequence), ascending in local order, of CP rank
/// c's shard: its layout's share for p2p and all_gather; the contiguous c-th of C for a2a; for
/// a2a+p2p the u-th of U equal pieces of ring rank r's layout share, so that the all-to-all
/// gathers exactly the ring's shard (forgetting this reorder is long-context-attention's issue 53).
std::vector<int64_t> cp_positions(const ParallelConfig& par, const RingLayout& layout, int c);

/// World rank `rank`'s own slots between the TP blocks: the t-th of T equal pieces of its CP
/// shard (Megatron's sequence parallelism); without sequence parallelism, the whole shard.
std::vector<int64_t> rank_positions(const ParallelConfig& par, const RingLayout& layout, int rank);

}  // namespace ringside

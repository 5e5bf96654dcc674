// The collectives of a whole training step in closed form, for groups too large to dry-run rank
// by rank (data parallelism over thousands of GPUs): the ring algorithms' time on the link tiers
// a group really spans (topology.h), hierarchical when it spans several domains (inside each
// domain first, then across, as NCCL's tree/ring hierarchy and Megatron's distributed optimizer
// use the fabric).
//
// A ring collective of S bytes (the whole buffer, as nccl-tests counts it) over n ranks takes
// n - 1 steps of S / n bytes each way; an all-reduce is a reduce-scatter and an all-gather:
//   reduce_scatter, all_gather   (n - 1) (latency + (S / n) / busbw)
//   all_reduce                   2 (n - 1) (latency + (S / n) / busbw)
// so that S / time -> busbw (n - 1) / n and busbw 2 (n - 1) / n as nccl-tests define them.
// Across tiers, level by level: a ring of k_0 members inside each innermost domain on S, then a
// ring of k_1 of those domains inside each domain of the next tier on S / k_0 (each GPU has its
// own NIC: the k_0 rings run side by side), and so on out to the outermost tier the group uses;
// an all-reduce reduce-scatters inward-out, all-reduces at the top and all-gathers back:
//   all_reduce   2 sum_{l < top} RS_l + AR_top,   all_gather, reduce_scatter   sum_l RS_l
// An uneven span (domains holding different numbers of members) runs each level's ring at its
// most members, and the level above on the share of its fewest: S / fewest (the slowest GPU's).
// The top level's all-reduce, on a tier that reduces in the network (NVLS in an NVLink switch,
// SHARP in an InfiniBand one), runs at that reduction's busbw instead of the ring's:
// latency + 2 (n - 1) / n S' / busbw (achieved rates only: the roofline is the ring's).
#pragma once

#include "model/model.h"

namespace ringside::model {

enum class Collective { all_reduce, reduce_scatter, all_gather };

/// Seconds for `kind` of `bytes` (S, the whole buffer) over `span` on `hw`'s tiers
/// (transfer_seconds' rates: achieved or ideal as `o` says), hierarchical as above. A group of
/// one takes no time.
double collective_seconds(Collective kind, double bytes, const Span& span, const Hardware& hw, const ModelOptions& o);

/// Bytes each GPU sends on links of tier `tier` for `kind` over `span`: the level-`tier` ring's
/// (n - 1) / n of its share S / (members below), twice for an all-reduce at a level below the
/// top (reduce-scatter out, all-gather back) or at the top; 0 for a tier the group does not use.
double tier_bytes(Collective kind, double bytes, const Span& span, size_t tier);

}  // namespace ringside::model

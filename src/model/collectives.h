// The collectives of a whole training step in closed form, for groups too large to dry-run rank
// by rank (data parallelism over thousands of GPUs): the ring algorithms' time on the links a
// group really spans, hierarchical when it spans nodes (inside each node first, then across,
// as NCCL's tree/ring hierarchy and Megatron's distributed optimizer use the fabric).
//
// A ring collective of S bytes (the whole buffer, as nccl-tests counts it) over n ranks takes
// n - 1 steps of S / n bytes each way; an all-reduce is a reduce-scatter and an all-gather:
//   reduce_scatter, all_gather   (n - 1) (latency + (S / n) / busbw)
//   all_reduce                   2 (n - 1) (latency + (S / n) / busbw)
// so that S / time -> busbw (n - 1) / n and busbw 2 (n - 1) / n as nccl-tests define them. With k
// members in each of n' nodes: the k-ring inside on S, then the n'-ring across on S / k (each GPU
// has its own NIC), then (all-reduce, all-gather) the k-ring inside again.
#pragma once

#include "model/model.h"

namespace ringside::model {

enum class Collective { all_reduce, reduce_scatter, all_gather };

/// Where a group's members sit: `size` ranks, `per_node` of them in each node it touches.
struct GroupSpan {
  int size = 1;
  int per_node = 1;
  int nodes() const { return size / per_node; }
};

/// The span of a group of `size` ranks spaced `stride` apart in rank order, on nodes of
/// `gpus_per_node` consecutive ranks: per_node = min(size, G / stride) when stride divides G,
/// 1 when G divides stride. Throws ConfigError when neither divides the other, or a size,
/// stride or G below 1.
GroupSpan group_span(int size, int stride, int gpus_per_node);

/// Seconds for `kind` over `span` on `hw` (transfer_seconds' rates: achieved or ideal as `o`
/// says), hierarchical as above. A group of one takes no time.
double collective_seconds(Collective kind, double bytes, const GroupSpan& span, const Hardware& hw, const ModelOptions& o);

/// Bytes each GPU sends across nodes for `kind`: 0 inside one node; else the n'-ring's share of
/// S / k, (n' - 1) / n' S / k, twice for an all-reduce.
double inter_node_bytes(Collective kind, double bytes, const GroupSpan& span);

}  // namespace ringside::model

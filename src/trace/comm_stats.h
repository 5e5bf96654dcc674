// Communication per collective kind, in nccl-tests' terms (github.com/NVIDIA/nccl-tests,
// doc/PERFORMANCE.md), for any trace: ringside's own and foreign ones read into TraceData.
//
//   size    S, bytes, as nccl-tests' "size" column: all_reduce the buffer; all_gather the
//           gathered output (n x each rank's part); reduce_scatter the input (n x each rank's
//           part); all_to_all each rank's whole send buffer (src/alltoall.cu: count x nranks);
//           send/recv the message
//   algbw   S / t, t the call's time
//   busbw   algbw x factor(kind, n): what each rank's link must carry per byte of S in a
//           bandwidth-optimal algorithm, so that busbw compares with the link's peak whatever n:
//             all_reduce 2 (n-1)/n; all_gather, reduce_scatter, all_to_all (n-1)/n;
//             send/recv 1 (src/sendrecv.cu); broadcast and reduce 1 (a foreign trace's other
//             communication gets this factor)
//           (PERFORMANCE.md's summary; n the ranks of the collective's group)
//
// A *call* is one rank's part of one collective, or one point-to-point message:
//   collective  the rank's transfers of one kind sharing a `collective` id (a transfer with id
//               -1 is a call of its own). Time: its first transfer's start to its last's end.
//               Size: when none of its transfers has a direction (a Kineto trace: one event per
//               call whose bytes are nccl-tests' size), the largest one's bytes; otherwise the
//               bytes the rank sent in the call / factor(kind, n). That assumes what ringside's
//               rings do (comm/communicator.h; the NCCL backend records one send of the same
//               volume): a bandwidth-optimal algorithm, each rank sending S x factor, i.e.
//               every chunk but one in all_gather and reduce_scatter, both rings in all_reduce,
//               every block but its own in all_to_all. With even shares that is exact per rank;
//               with uneven ones the rings' sizes are exact summed over the ranks taking part
//               (each chunk crosses n-1 links per ring), each rank's off by its share's difference.
//   p2p         each send (or p2p transfer without a direction) is a call: time its duration,
//               size its bytes. A receive is the same message seen from the other end: not
//               counted again.
//   n           the transfers' group_size, or the strategy's rank count where they do not say.
// A transfer is a comm-stream event of a transfer kind (p2p ... all_to_all) or of a foreign kind
// (Kind::other); ops moved onto the comm stream (the modeled overlapped gradient bucket's
// packing) are not transfers.
#pragma once
#include <cstdint>
#include <limits>
#include <vector>

#include "trace/trace.h"

namespace ringside::trace {

/// a += b, saturating at int64's ends instead of wrapping: sums of many ranks' or events'
/// values, which a hostile file may push past int64 (the metrics and these tables use it).
inline void add_saturating(int64_t& a, int64_t b) {
  if (__builtin_add_overflow(a, b, &a)) a = b > 0 ? std::numeric_limits<int64_t>::max() : std::numeric_limits<int64_t>::min();
}

/// nccl-tests' bus bandwidth factor of `kind` over n ranks: all_reduce 2 (n-1)/n; all_gather,
/// reduce_scatter, all_to_all (n-1)/n; p2p and other (broadcast, reduce) 1. 0 for n < 1 where
/// it depends on n. Kinds that are not transfers: 0.
double busbw_factor(Kind kind, int n);

/// One rank's part of one collective call, or one p2p send (see the header comment).
struct CommCall {
  Kind kind = Kind::other;
  int64_t collective = -1;            ///< the call's id; -1 for p2p and a transfer that names none
  int64_t begin_ns = 0, end_ns = 0;   ///< its first transfer's start, its last's end
  int64_t size_bytes = 0;             ///< S: nccl-tests' size
  int group_size = 0;                 ///< n; 0 for p2p (a message has no group; its factor is 1)
  int64_t time_ns() const { return end_ns - begin_ns; }
  double bus_bytes() const { return double(size_bytes) * busbw_factor(kind, group_size); }
};

/// The calls of one rank's transfers, by start (ties by kind, then id). `default_group_size`
/// is n for transfers whose group_size is 0 (not said).
std::vector<CommCall> comm_calls(const RankTrace& r, int default_group_size);

/// One kind's calls, summed over every call of every rank: size and time add, so that
/// algbw = sum S / sum t and busbw = sum (S x factor) / sum t, GB/s (1e9 bytes/s). For calls
/// alike these are nccl-tests' numbers of one call; otherwise time-weighted means, the slow
/// calls weighing as much as they cost. time_ns / calls is the mean time of one rank's call
/// (nccl-tests' "time" column).
struct CollectiveStats {
  Kind kind = Kind::other;
  int64_t calls = 0;
  int group_size = 0;      ///< n of every call (0: p2p); -1 when they differ
  int64_t size_bytes = 0;  ///< sum of S
  double bus_bytes = 0;    ///< sum of S x factor(kind, n)
  int64_t time_ns = 0;     ///< sum of the calls' times
  /// sum S / sum t, GB/s; NaN when no time or no size was recorded (a foreign kernel's bytes).
  double algbw_gbps() const;
  /// sum (S x factor) / sum t, GB/s; NaN as algbw.
  double busbw_gbps() const;
};

/// Communication by collective kind of one strategy's ranks: the calls that start inside
/// [begin_ns, end_ns) (the strategy's window, as metrics.h's), summed per kind. n defaults to
/// ranks.size(). Kinds in Kind order (p2p, all_gather, reduce_scatter, all_reduce, all_to_all,
/// other), only those with a call.
std::vector<CollectiveStats> comm_by_kind(const std::vector<const RankTrace*>& ranks, int64_t begin_ns, int64_t end_ns);

}  // namespace ringside::trace

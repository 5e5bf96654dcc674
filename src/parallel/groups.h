// Parallel configurations and their process groups.
//
// A configuration is degrees whose product is the number of ranks P: tensor parallelism T
// (Megatron TP with sequence parallelism) and context parallelism C, whose attention is one of
// TransformerEngine's cp_comm_type values:
//   p2p        the K/V ring (ring attention)
//   all_gather all-gather K/V, attend locally, reduce-scatter dK/dV (Llama 3)
//   a2a        all-to-all from sequence to heads and back (DeepSpeed-Ulysses)
//   a2a+p2p    all-to-all inside groups of U ranks, the ring across the C/U groups (USP, LoongTrain)
// Ranks are numbered TP innermost, then the a2a group, then the ring (Megatron's tp-cp order),
// so that neighbouring ranks, which share a node, share the chattiest group; cp-tp reverses it
// to show what the wrong placement costs.
//
// A configuration's name says the same, innermost group first: tp2xring2 (T 2 x ring 2),
// ulysses2xring2 (a2a+p2p, U 2, R 2), tp2xall-gather2, ring2xtp2 (cp-tp order). A degree left
// out takes the rest of P: "ring" is the ring over every rank, "tp-sp" TP over every rank.
#pragma once
#include <memory>
#include <string>
#include <vector>

#include "comm/communicator.h"
#include "layer/config.h"
#include "layer/packing.h"
#include "parallel/layout.h"

namespace ringside {

/// none: no context parallelism (C = 1, TP only: attention on whole sequences).
enum class CpComm { none, p2p, all_gather, a2a, a2a_p2p };
/// "none", "p2p", "all_gather", "a2a", "a2a+p2p"; parse throws ConfigError on anything else.
const char* to_string(CpComm c);
CpComm parse_cp_comm(const std::string& s);

enum class RankOrder { tp_cp, cp_tp };
const char* to_string(RankOrder o);
RankOrder parse_rank_order(const std::string& s);

/// The most ranks a configuration may name (degrees and their products).
inline constexpr int64_t kMaxRanks = 1 << 20;

struct ParallelConfig {
  int tp = 1;  ///< T; 0: the rest of P
  int cp = 1;  ///< C; 0: the rest of P
  CpComm cp_comm = CpComm::p2p;
  int cp_a2a = 1;  ///< U, the all-to-all degree of a2a+p2p (a2a: C); the ring has R = C / U
  RankOrder order = RankOrder::tp_cp;

  /// The degrees for P ranks (a degree of 0 takes the rest); a2a+p2p with U = 1 or U = C is
  /// the ring or Ulysses alone, and becomes it, as C = 1 under TP becomes TP alone. Throws ConfigError naming the rule: T x C != P,
  /// or U not dividing C.
  ParallelConfig resolved(int P) const;
  int a2a_size() const { return cp_comm == CpComm::a2a ? cp : cp_comm == CpComm::a2a_p2p ? cp_a2a : 1; }
  int ring_size() const { return cp_comm == CpComm::p2p ? cp : cp_comm == CpComm::a2a_p2p ? cp / cp_a2a : 1; }
  /// The name (see above); for the three pure strategies and all_gather, their short names
  /// ("tp-sp", "ring", "ulysses", "all-gather") when the degrees are left to P.
  std::string name() const;
  /// The name of a resolved configuration as every table prints it: the short names for TP
  /// alone and for one kind of context parallelism over every rank ("ring", not "ring4"), the
  /// degrees otherwise ("tp2xring2", not "tp2xring").
  std::string canonical_name() const;
  /// Throws ConfigError, with one message naming the broken rule, unless the layer splits this
  /// way on P ranks: T x C = P, U | C, H % (T U), Hkv % T, f % T, and the layer's own rules
  /// (LayerConfig::validate). Any s splits: a length the shards do not divide is padded
  /// (sequence_packing).
  void validate(const LayerConfig& cfg, int P) const;
  /// The token layout of the context-parallel shards: cfg's for p2p, all_gather and a2a+p2p
  /// (over the ring's R ranks); contiguous for a2a (every rank sees the whole sequence).
  Layout layout(const LayerConfig& cfg) const;
};

/// Parses a configuration's name (see above). Throws ConfigError with the grammar otherwise.
ParallelConfig parse_parallel_config(const std::string& name);

/// Where world rank `rank` sits: its TP rank t, CP rank c = u + U r, a2a rank u, ring rank r.
struct GroupCoords {
  int t = 0, c = 0, u = 0, r = 0;
};
/// The groups of a resolved configuration by their world ranks, for a reader: "TP {0 1} {2 3};
/// ring {0 2} {1 3}" (groups of one rank left out; past `shown` groups of a kind, a count).
std::string describe_groups(const ParallelConfig& par, size_t shown = 4);

/// The coordinates of world rank `rank` under the configuration's order (resolved degrees).
GroupCoords coords_of(const ParallelConfig& par, int rank);
/// The world rank at coordinates (t, c): t + T c in tp-cp order, c + C t in cp-tp.
int world_rank_of(const ParallelConfig& par, int t, int c);

/// The padded sequence a resolved configuration splits (layer/packing.h). With G the ranks the
/// layout spans (C for all_gather, R otherwise) every shard must hold S / (T C) tokens per rank
/// between the TP blocks, so S is a multiple of T C, and of 2 G for zigzag (two chunks per rank);
/// the per-document layouts pad each document to a multiple of 2 G and S to one of lcm(2 G, T C).
/// The padding is the least that makes every split exact; none when s already divides.
Packing sequence_packing(const ParallelConfig& par, const LayerConfig& cfg);
/// The layout of the context-parallel shards over the G ranks it spans (see sequence_packing),
/// on `packing` (which must outlive it).
RingLayout cp_layout(const ParallelConfig& par, const LayerConfig& cfg, const Packing& packing);

/// The slots (global positions of the padded sequence), ascending in local order, of CP rank
/// c's shard: its layout's share for p2p and all_gather; the contiguous c-th of C for a2a; for
/// a2a+p2p the u-th of U equal pieces of ring rank r's layout share, so that the all-to-all
/// gathers exactly the ring's shard (forgetting this reorder is long-context-attention's issue 53).
std::vector<int64_t> cp_positions(const ParallelConfig& par, const RingLayout& layout, int c);
/// World rank `rank`'s own slots between the TP blocks: the t-th of T equal pieces of its CP
/// shard (Megatron's sequence parallelism).
std::vector<int64_t> rank_positions(const ParallelConfig& par, const RingLayout& layout, int rank);
/// The same for cfg's own packing and layout (sequence_packing, cp_layout).
std::vector<int64_t> cp_positions(const ParallelConfig& par, const LayerConfig& cfg, int c);
std::vector<int64_t> rank_positions(const ParallelConfig& par, const LayerConfig& cfg, int rank);

/// One rank's communicators, built with Communicator::split (collective over `world`).
struct ProcessGroups {
  ProcessGroups(Communicator& world, const ParallelConfig& par);
  Communicator& world;
  ParallelConfig par;
  GroupCoords at;
  std::unique_ptr<Communicator> tp, cp, a2a, ring;  ///< size T, C, U and R
};

}  // namespace ringside

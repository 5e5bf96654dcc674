// Parallel configurations: how the layer is split over P ranks.
//
// A configuration is degrees whose product is the number of ranks P: tensor parallelism T
// (Megatron TP with sequence parallelism) and context parallelism C, whose attention is a
// registered scheme (parallel/cp_scheme.h), named by TransformerEngine's cp_comm_type values:
//   p2p        the K/V ring (ring attention)
//   all_gather all-gather K/V, attend locally, reduce-scatter dK/dV (Llama 3)
//   a2a        all-to-all from sequence to heads and back (DeepSpeed-Ulysses)
//   a2a+p2p    all-to-all inside groups of U ranks, the ring across the C/U groups (USP, LoongTrain)
// and ringside's p2p-q, the ring that passes queries instead of K/V.
// Ranks are numbered TP innermost, then the a2a group, then the ring (Megatron's tp-cp order),
// so that neighbouring ranks, which share a node, share the chattiest group; cp-tp reverses it
// to show what the wrong placement costs. With the degrees go the two choices of how the split
// runs: the token layout of the context-parallel shards and the activation recomputation.
//
// A configuration's name says the degrees, innermost group first: tp2xring2 (T 2 x ring 2),
// ulysses2xring2 (a2a+p2p, U 2, R 2), tp2xall-gather2, ring2xtp2 (cp-tp order). A degree left
// out takes the rest of P: "ring" is the ring over every rank, "tp-sp" TP over every rank.
// "tp" alone is Megatron's TP without --sequence-parallel (Shoeybi et al. 2019): every TP rank
// holds all the tokens between the blocks, and all-reduces where TP+SP all-gathers and
// reduce-scatters. It is TP alone over every rank (no context parallelism beside it), the
// baseline that lesson 2 and compare set beside tp-sp.
#pragma once
#include <cstdint>
#include <string>

#include "layer/config.h"
#include "parallel/cp_scheme.h"

namespace ringside {

/// The scheme called `s` (cp_scheme.h's cp_scheme): throws ConfigError naming the choices.
inline const CpScheme* parse_cp_comm(const std::string& s) { return &cp_scheme(s); }

enum class RankOrder { tp_cp, cp_tp };
const char* to_string(RankOrder o);
RankOrder parse_rank_order(const std::string& s);

/// The most ranks a configuration may name (degrees and their products).
inline constexpr int64_t kMaxRanks = 1 << 20;

struct ParallelConfig {
  int tp = 1;  ///< T; 0: the rest of P
  int cp = 1;  ///< C; 0: the rest of P
  const CpScheme* cp_comm = &default_cp_scheme();  ///< never null; no_cp_scheme() without CP
  int cp_a2a = 1;  ///< U, the all-to-all degree of a2a+p2p (a2a: C); the ring has R = C / U
  RankOrder order = RankOrder::tp_cp;
  Layout layout = Layout::automatic;      ///< token-to-rank map of the context-parallel shards
  Recompute recompute = Recompute::none;  ///< activation recomputation (every configuration)
  /// Megatron's --sequence-parallel: the norm, dropout and residual region split by sequence
  /// over TP. false only for plain TP ("tp"), which has no context parallelism.
  bool sequence_parallel = true;
  /// The tokens each TP rank holds between the TP blocks, out of its CP shard's: T with
  /// sequence parallelism, 1 (all of them) without.
  int sequence_split() const { return sequence_parallel ? tp : 1; }
  /// The degrees for P ranks (a degree of 0 takes the rest); a2a+p2p with U = 1 or U = C is
  /// the ring or Ulysses alone, and becomes it, as C = 1 under TP becomes TP alone. Throws
  /// ConfigError naming the rule: T x C != P, U not dividing C, or plain TP beside context
  /// parallelism.
  ParallelConfig resolved(int P) const;
  const CpScheme& scheme() const { return *cp_comm; }
  /// U, the all-to-all's degree: C for a scheme whose all-to-all spans the CP group, cp_a2a for
  /// one nested with a ring, 1 without an all-to-all.
  int a2a_size() const { return !cp_comm->groups.a2a ? 1 : cp_comm->groups.ring ? cp_a2a : cp; }
  /// R, the ring's degree: C / U with a ring, 1 without.
  int ring_size() const { return cp_comm->groups.ring ? cp / a2a_size() : 1; }
  /// The layout asked for, automatic resolved to what balances the work: zigzag under a causal
  /// mask over one sequence; striped over packed documents (each document's triangle dealt
  /// round-robin: max / mean work 1.01 on lesson 4's pack, where zigzag's halves leave whole
  /// documents to one rank); contiguous otherwise. (What the shards of a resolved configuration
  /// use is RunPlan::layout.)
  Layout requested_layout(const LayerConfig& cfg) const {
    if (layout != Layout::automatic) return layout;
    if (!cfg.causal) return Layout::contiguous;
    return cfg.docs.size() > 1 ? Layout::striped : Layout::zigzag;
  }
  /// Whether the layout changes anything: the scheme's shards have a token layout and the mask
  /// is causal (without one every layout does the same work).
  bool layout_matters(const LayerConfig& cfg) const { return cfg.causal && cp_comm->token_layout; }
  /// The name (see above); for the pure strategies and all_gather, their short names ("tp",
  /// "tp-sp", "ring", "ulysses", "all-gather") when the degrees are left to P.
  std::string name() const;
  /// The name of a resolved configuration as every table prints it: the short names for TP
  /// alone and for one kind of context parallelism over every rank ("ring", not "ring4"), the
  /// degrees otherwise ("tp2xring2", not "tp2xring").
  std::string canonical_name() const;
};

/// Parses a configuration's name (see above). Throws ConfigError with the grammar otherwise.
ParallelConfig parse_parallel_config(const std::string& name);

}  // namespace ringside

// A run's plan: one parallel configuration of one layer on P ranks of one device, resolved and
// validated once. Every command, lesson, formula and the planner take a RunPlan, so nothing
// downstream validates the configuration or computes the packing again.
//
//   RunPlan plan = resolve(parse_parallel_config("tp2xring2"), cfg, 4);
//   // plan.par: every degree; plan.packing: the padded sequence; plan.ring: the shards' layout
#pragma once
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/tensor.h"
#include "layer/config.h"
#include "layer/packing.h"
#include "parallel/config.h"
#include "parallel/groups.h"
#include "parallel/layout.h"

namespace ringside {

struct RunPlan {
  ParallelConfig par;  ///< resolved: every degree given (par.resolved(P) is par)
  LayerConfig layer;   ///< the model's shape and data
  int P = 1;
  Device device = Device::cpu;
  std::string name;     ///< canonical: "tp2xring2", "ring" (parallel/config.h)
  std::string summary;  ///< one line of what the configuration does
  Layout layout = Layout::contiguous;  ///< the context-parallel shards' layout (sharding.h's shard_layout)
  std::shared_ptr<const Packing> packing;  ///< the padded sequence the shards split
  std::shared_ptr<const RingLayout> ring;  ///< the shards' layout over the ranks it spans, on *packing

  Recompute recompute() const { return par.recompute; }
  /// How the trace's tile map draws this run (trace::RankTrace::tile_map): its scheme's when it
  /// spans every rank (T 1), none under TP.
  std::string tile_map() const { return par.tp == 1 ? par.scheme().tile_map : ""; }
  /// The layout the user asked for (automatic resolved by causal), as the headers print it.
  Layout requested_layout() const { return par.requested_layout(layer); }
  GroupCoords coords(int rank) const { return coords_of(par, rank); }
  /// World rank `rank`'s slots between the TP blocks, and CP rank c's shard (sharding.h).
  std::vector<int64_t> rank_positions(int rank) const;
  std::vector<int64_t> cp_positions(int c) const;
  /// The layer's JSON with the run's "layout" (requested) and "recompute": the "config" of a
  /// trace, compare's JSON and a dump's manifest.
  nlohmann::json config_json() const;
};

/// The layer's JSON with the run's "layout" (as requested: automatic resolved by causal) and
/// "recompute" from `par`.
nlohmann::json config_json(const LayerConfig& cfg, const ParallelConfig& par);

/// The plan of `par` for `cfg` on P ranks of `device`. Throws ConfigError, with one message
/// naming the broken rule, identically on every rank and before any communication:
/// LayerConfig::validate's rules, the degrees' (ParallelConfig::resolved: T x C = P, U | C),
/// H % (T U), Hkv % T, f % T, the padded sequence within the layer's limits, and on
/// Device::cuda a run that needs a mask beyond the causal one (packed documents, a window, or
/// padding), which the CUDA kernels do not take yet. Any s splits: a length the shards do not
/// divide is padded (sharding.h).
RunPlan resolve(const ParallelConfig& par, const LayerConfig& cfg, int P, Device device = Device::cpu);
/// The plan of the layer on one rank, unsplit: what the reference, the benchmarks and the planner
/// check a layer against before they size or run it (the same rules and messages as resolve's).
RunPlan resolve_one_rank(const LayerConfig& cfg);

/// The named strategies, in the order compare runs them: tp-sp, ring, ulysses, all-gather.
const std::vector<ParallelConfig>& strategies();
/// The configurations compare runs by default on P ranks: the named ones, then one of each
/// hybrid whose degrees fit P (at P 4: tp2xring2, ulysses2xring2).
std::vector<ParallelConfig> default_strategies(int P);

}  // namespace ringside

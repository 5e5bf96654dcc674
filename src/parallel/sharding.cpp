#include "parallel/sharding.h"

#include <numeric>

#include "parallel/groups.h"

namespace ringside {

Layout shard_layout(const ParallelConfig& par, const LayerConfig& cfg) {
  return !par.scheme().token_layout || par.cp == 1 ? Layout::contiguous : par.requested_layout(cfg);
}

int layout_ranks(const ParallelConfig& par) {
  const CpScheme& scheme = par.scheme();
  if (!scheme.token_layout) return 1;
  return scheme.groups.ring ? par.ring_size() : par.cp;  // over its ring, else over the CP group
}

Packing sequence_packing(const ParallelConfig& par, const LayerConfig& cfg) {
  const int64_t G = layout_ranks(par), TC = int64_t(par.sequence_split()) * par.cp;
  const Layout l = shard_layout(par, cfg);
  if (per_document(l) && G > 1) return Packing(cfg, std::lcm(2 * G, TC), 2 * G);
  return Packing(cfg, l == Layout::zigzag && G > 1 ? std::lcm(2 * G, TC) : TC);
}

RingLayout cp_layout(const ParallelConfig& par, const LayerConfig& cfg, const Packing& packing) {
  const int G = layout_ranks(par);
  const Layout l = shard_layout(par, cfg);
  return RingLayout(per_document(l) && G == 1 ? Layout::contiguous : l, packing, G, cfg.causal);
}

std::vector<int64_t> cp_positions(const ParallelConfig& par, const RingLayout& layout, int c) {
  // The ring's (or the layout's) shard of c's group, split over the U ranks of its all-to-all.
  const int U = par.a2a_size();
  const std::vector<int64_t> ring_shard = layout.positions(c / U);
  const int64_t n = int64_t(ring_shard.size()) / U, u = c % U;
  return {ring_shard.begin() + u * n, ring_shard.begin() + (u + 1) * n};
}

std::vector<int64_t> rank_positions(const ParallelConfig& par, const RingLayout& layout, int rank) {
  const GroupCoords g = coords_of(par, rank);
  const std::vector<int64_t> shard = cp_positions(par, layout, g.c);
  if (!par.sequence_parallel) return shard;  // plain TP: every TP rank holds the whole shard
  const int64_t n = int64_t(shard.size()) / par.tp;
  return {shard.begin() + g.t * n, shard.begin() + (g.t + 1) * n};
}

}  // namespace ringside

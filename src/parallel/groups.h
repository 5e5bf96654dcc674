// A resolved configuration's process groups (parallel/config.h): where each world rank sits,
// which ranks share a group, and one rank's communicators over them, each the layer's rank grid's
// answer (rank_grid.h), never derived here.
#pragma once
#include <memory>
#include <string>
#include <vector>

#include "comm/communicator.h"
#include "parallel/config.h"
#include "parallel/rank_grid.h"

namespace ringside {

/// Where world rank `rank` sits: its TP rank t, CP rank c = u + U r, a2a rank u, ring rank r.
struct GroupCoords {
  int t = 0, c = 0, u = 0, r = 0;
};

/// The coordinates of world rank `rank` under the configuration's order (resolved degrees), as
/// the layer's rank grid (RankGrid::of) gives them.
GroupCoords coords_of(const ParallelConfig& par, int rank);
/// The world rank at coordinates (t, c): t + T c in tp-cp order, c + C t in cp-tp (the grid's).
int world_rank_of(const ParallelConfig& par, int t, int c);

/// The kinds of group are the layer grid's dimensions: TP (ranks that vary t), CP (vary c: the
/// all-gather's and the gradient all-reduce's), the all-to-all (vary u) and the ring (vary r).
using GroupKind = Dim;

/// Every group of one kind of a resolved configuration, by world rank: each in group order
/// (the rank's index in it is its coordinate), the groups in order of their first member:
/// RankGrid::of(par).groups({kind}). The communicators, describe_groups and the planner use it.
std::vector<std::vector<int>> group_members(const ParallelConfig& par, GroupKind kind);

/// The groups of a resolved configuration by their world ranks, for a reader: "TP {0 1} {2 3};
/// ring {0 2} {1 3}" (groups of one rank left out; past `shown` groups of a kind, a count).
std::string describe_groups(const ParallelConfig& par, size_t shown = 4);

/// One rank's communicators, each split from `world` along its dimension of the layer's grid
/// (Communicator::split_by with RankGrid::color_key: collective over `world`).
struct ProcessGroups {
  ProcessGroups(Communicator& world, const ParallelConfig& par);
  Communicator& world;
  ParallelConfig par;
  RankGrid grid;  ///< the layer's, RankGrid::of(par)
  GroupCoords at;
  std::unique_ptr<Communicator> tp, cp, a2a, ring;  ///< size T, C, U and R
};

}  // namespace ringside

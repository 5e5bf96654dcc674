#include "parallel/groups.h"

#include "core/error.h"

namespace ringside {

GroupCoords coords_of(const ParallelConfig& par, int rank) {
  const RankGrid grid = RankGrid::of(par);
  return {grid.coord(rank, Dim::tp), grid.coord(rank, Dim::cp), grid.coord(rank, Dim::a2a), grid.coord(rank, Dim::ring)};
}

int world_rank_of(const ParallelConfig& par, int t, int c) { return RankGrid::of(par).rank_at({{Dim::tp, t}, {Dim::cp, c}}); }

std::vector<std::vector<int>> group_members(const ParallelConfig& par, GroupKind kind) { return RankGrid::of(par).groups({kind}); }

std::string describe_groups(const ParallelConfig& par, size_t shown) {
  std::string out;
  auto kind = [&](const char* name, int size, GroupKind k) {
    if (size < 2) return;
    const std::vector<std::vector<int>> groups = group_members(par, k);
    out += (out.empty() ? "" : "; ") + std::string(name);
    for (size_t i = 0; i < groups.size() && i < shown; ++i) {
      out += " {";
      for (size_t j = 0; j < groups[i].size(); ++j) {
        if (j) out += ' ';
        out += std::to_string(groups[i][j]);
      }
      out += "}";
    }
    if (groups.size() > shown) out += detail::concat(" ... (", groups.size(), " groups)");
  };
  kind("TP", par.tp, GroupKind::tp);
  if (par.scheme().groups.cp) kind("all-gather", par.cp, GroupKind::cp);
  kind("all-to-all", par.a2a_size(), GroupKind::a2a);
  kind("ring", par.ring_size(), GroupKind::ring);
  return out;
}

ProcessGroups::ProcessGroups(Communicator& w, const ParallelConfig& p)
    : world(w), par(p.resolved(w.size())), grid(RankGrid::of(par)), at(coords_of(par, w.rank())) {
  auto split = [&](GroupKind kind) { return world.split_by([&](int rank) { return grid.color_key(rank, {kind}); }); };
  tp = split(GroupKind::tp);
  cp = split(GroupKind::cp);
  a2a = split(GroupKind::a2a);
  ring = split(GroupKind::ring);
}

}  // namespace ringside

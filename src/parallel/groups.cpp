#include "parallel/groups.h"

#include <algorithm>
#include <map>

#include "core/error.h"

namespace ringside {

GroupCoords coords_of(const ParallelConfig& par, int rank) {
  GroupCoords g;
  if (par.order == RankOrder::tp_cp) g.t = rank % par.tp, g.c = rank / par.tp;
  else g.c = rank % par.cp, g.t = rank / par.cp;
  const int U = par.a2a_size();
  g.u = g.c % U, g.r = g.c / U;
  return g;
}

int world_rank_of(const ParallelConfig& par, int t, int c) {
  return par.order == RankOrder::tp_cp ? t + par.tp * c : c + par.cp * t;
}

namespace {

// Which ranks share a group, and their order in it, from a rank's coordinates: (color, key) as
// MPI_Comm_split takes them. Inside a CP group (ranks c = u + U r) the a2a groups share r, the
// rings share u.
std::pair<int, int> membership(const ParallelConfig& p, GroupKind kind, const GroupCoords& g) {
  switch (kind) {
    case GroupKind::tp: return {g.c, g.t};
    case GroupKind::cp: return {g.t, g.c};
    case GroupKind::a2a: return {g.t * p.ring_size() + g.r, g.u};
    case GroupKind::ring: return {g.t * p.a2a_size() + g.u, g.r};
  }
  throw Error("unknown group kind");
}

}  // namespace

std::vector<std::vector<int>> group_members(const ParallelConfig& par, GroupKind kind) {
  const int P = par.tp * par.cp;
  std::map<int, std::map<int, int>> groups;  // color -> key -> world rank
  for (int rank = 0; rank < P; ++rank) {
    const auto [color, key] = membership(par, kind, coords_of(par, rank));
    groups[color][key] = rank;
  }
  std::vector<std::vector<int>> ordered;
  for (const auto& [color, members] : groups) {
    ordered.emplace_back();
    for (const auto& [key, rank] : members) ordered.back().push_back(rank);
  }
  std::sort(ordered.begin(), ordered.end());
  return ordered;
}

std::string describe_groups(const ParallelConfig& par, size_t shown) {
  std::string out;
  auto kind = [&](const char* name, int size, GroupKind k) {
    if (size < 2) return;
    const std::vector<std::vector<int>> groups = group_members(par, k);
    out += (out.empty() ? "" : "; ") + std::string(name);
    for (size_t i = 0; i < groups.size() && i < shown; ++i) {
      out += " {";
      for (size_t j = 0; j < groups[i].size(); ++j) out += (j ? " " : "") + std::to_string(groups[i][j]);
      out += "}";
    }
    if (groups.size() > shown) out += detail::concat(" ... (", groups.size(), " groups)");
  };
  kind("TP", par.tp, GroupKind::tp);
  if (par.cp_comm == CpComm::all_gather) kind("all-gather", par.cp, GroupKind::cp);
  kind("all-to-all", par.a2a_size(), GroupKind::a2a);
  kind("ring", par.ring_size(), GroupKind::ring);
  return out;
}

ProcessGroups::ProcessGroups(Communicator& w, const ParallelConfig& p)
    : world(w), par(p.resolved(w.size())), at(coords_of(par, w.rank())) {
  auto split = [&](GroupKind kind) {
    return world.split_by([&](int rank) { return membership(par, kind, coords_of(par, rank)); });
  };
  tp = split(GroupKind::tp);
  cp = split(GroupKind::cp);
  a2a = split(GroupKind::a2a);
  ring = split(GroupKind::ring);
}

}  // namespace ringside

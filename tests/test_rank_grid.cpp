// The rank grid (parallel/rank_grid.h): its groups against members derived by hand in tp-cp and
// cp-tp, with U x R inside CP and PP and DP outside; its strides; every group covering the world
// once; and the placements of before it (groups.cpp's coordinates and the step planner's
// strides), kept bit for bit.
#include <catch2/catch.hpp>

#include <algorithm>
#include <map>
#include <mutex>
#include <tuple>

#include "configurations.h"
#include "core/error.h"
#include "model/step_plan.h"
#include "parallel/groups.h"
#include "parallel/rank_grid.h"

using namespace ringside;

namespace {

using Groups = std::vector<std::vector<int>>;

GridSizes sizes(int tp, int a2a, int ring, int pp = 1, int dp = 1) {
  GridSizes s;
  s.tp = tp, s.a2a = a2a, s.ring = ring, s.pp = pp, s.dp = dp;
  return s;
}

// groups.cpp's arithmetic before the grid (issue 59), kept as the reference the grid must equal:
// t and c from the order, u = c % U and r = c / U, and MPI_Comm_split's (color, key) per kind.
GroupCoords old_coords_of(const ParallelConfig& par, int rank) {
  GroupCoords g;
  if (par.order == RankOrder::tp_cp) g.t = rank % par.tp, g.c = rank / par.tp;
  else g.c = rank % par.cp, g.t = rank / par.cp;
  const int U = par.a2a_size();
  g.u = g.c % U, g.r = g.c / U;
  return g;
}

int old_world_rank_of(const ParallelConfig& par, int t, int c) { return par.order == RankOrder::tp_cp ? t + par.tp * c : c + par.cp * t; }

Groups old_group_members(const ParallelConfig& p, GroupKind kind) {
  std::map<int, std::map<int, int>> groups;  // color -> key -> world rank
  for (int rank = 0; rank < p.tp * p.cp; ++rank) {
    const GroupCoords g = old_coords_of(p, rank);
    std::pair<int, int> ck;
    if (kind == GroupKind::tp) ck = {g.c, g.t};
    else if (kind == GroupKind::cp) ck = {g.t, g.c};
    else if (kind == GroupKind::a2a) ck = {g.t * p.ring_size() + g.r, g.u};
    else ck = {g.t * p.a2a_size() + g.u, g.r};
    groups[ck.first][ck.second] = rank;
  }
  Groups ordered;
  for (const auto& [color, members] : groups) {
    ordered.emplace_back();
    for (const auto& [key, rank] : members) ordered.back().push_back(rank);
  }
  std::sort(ordered.begin(), ordered.end());
  return ordered;
}

// Every configuration of the tests' sweep on up to 12 ranks, in tp-cp and (where both degrees
// are above 1) cp-tp.
std::vector<ParallelConfig> swept() {
  std::vector<ParallelConfig> all;
  for (ParallelConfig par :
       testing::configurations({{1, 1}, {2, 1}, {1, 2}, {2, 2}, {1, 4}, {4, 1}, {2, 4}, {4, 2}, {1, 6}, {2, 6}, {3, 4}, {1, 8}})) {
    all.push_back(par);
    if (par.tp > 1 && par.cp > 1) par.order = RankOrder::cp_tp, all.push_back(par);
  }
  return all;
}

// The grid's groups along `dims` partition the world: each group has the dimensions' size,
// members distinct, every rank in exactly one group, the groups in order of their first member,
// a member's index its coordinate and color_key the same answer.
void check_partition(const RankGrid& grid, const std::vector<Dim>& dims) {
  const Groups groups = grid.groups(dims);
  int size = 1;
  for (Dim d : dims) size *= grid.size(d);
  REQUIRE(groups.size() == size_t(grid.world() / size));
  std::vector<int> seen(size_t(grid.world()), 0);
  for (size_t g = 0; g < groups.size(); ++g) {
    REQUIRE(groups[g].size() == size_t(size));
    if (g > 0) CHECK(groups[g - 1].front() < groups[g].front());
    for (size_t i = 0; i < groups[g].size(); ++i) {
      const int rank = groups[g][i];
      ++seen[size_t(rank)];
      CHECK(grid.color_key(rank, dims) == std::pair{groups[g].front(), int(i)});
      if (dims.size() == 1) CHECK(grid.coord(rank, dims.front()) == int(i));
    }
  }
  CHECK(std::all_of(seen.begin(), seen.end(), [](int n) { return n == 1; }));
}

}  // namespace

TEST_CASE("the rank grid in tp-cp: TP innermost, then the a2a group, then the ring, by hand", "[grid]") {
  // T 2, U 2, R 2: rank = t + 2 u + 4 r.
  const RankGrid grid(sizes(2, 2, 2), "tp-cp");
  CHECK(grid.world() == 8);
  CHECK(grid.order() == "tp-cp-pp-dp");
  CHECK(grid.groups({Dim::tp}) == Groups{{0, 1}, {2, 3}, {4, 5}, {6, 7}});
  CHECK(grid.groups({Dim::a2a}) == Groups{{0, 2}, {1, 3}, {4, 6}, {5, 7}});
  CHECK(grid.groups({Dim::ring}) == Groups{{0, 4}, {1, 5}, {2, 6}, {3, 7}});
  CHECK(grid.groups({Dim::cp}) == Groups{{0, 2, 4, 6}, {1, 3, 5, 7}});  // c = u + U r
  CHECK(grid.groups({Dim::tp, Dim::cp}) == Groups{{0, 1, 2, 3, 4, 5, 6, 7}});
  CHECK(grid.stride(Dim::tp) == 1);
  CHECK(grid.stride(Dim::a2a) == 2);
  CHECK(grid.stride(Dim::cp) == 2);
  CHECK(grid.stride(Dim::ring) == 4);
  CHECK(grid.size(Dim::cp) == 4);
  // Rank 7 = 1 + 2 x 1 + 4 x 1: t 1, u 1, r 1, c 3.
  CHECK(grid.coord(7, Dim::tp) == 1);
  CHECK(grid.coord(7, Dim::cp) == 3);
  CHECK(grid.coord(6, Dim::a2a) == 1);
  CHECK(grid.coord(6, Dim::ring) == 1);
  CHECK(grid.rank_at({{Dim::tp, 1}, {Dim::cp, 2}}) == 5);
  CHECK(grid.rank_at({{Dim::ring, 1}}) == 4);
}

TEST_CASE("the rank grid in cp-tp: the a2a group innermost, then the ring, TP across them, by hand", "[grid]") {
  // U 2, R 2, T 2: rank = u + 2 r + 4 t.
  const RankGrid grid(sizes(2, 2, 2), "cp-tp");
  CHECK(grid.order() == "cp-tp-pp-dp");
  CHECK(grid.groups({Dim::tp}) == Groups{{0, 4}, {1, 5}, {2, 6}, {3, 7}});
  CHECK(grid.groups({Dim::a2a}) == Groups{{0, 1}, {2, 3}, {4, 5}, {6, 7}});
  CHECK(grid.groups({Dim::ring}) == Groups{{0, 2}, {1, 3}, {4, 6}, {5, 7}});
  CHECK(grid.groups({Dim::cp}) == Groups{{0, 1, 2, 3}, {4, 5, 6, 7}});
  CHECK(grid.stride(Dim::tp) == 4);
  CHECK(grid.stride(Dim::cp) == 1);
  CHECK(grid.stride(Dim::ring) == 2);
  CHECK(grid.coord(5, Dim::tp) == 1);
  CHECK(grid.coord(5, Dim::cp) == 1);
  // The same coordinates in the other order: tp-cp's rank 1 (t 1, c 0) is cp-tp's rank 4.
  CHECK(grid.rank_at(RankGrid(sizes(2, 2, 2), "tp-cp"), 1) == 4);
  CHECK_THROWS_AS(grid.rank_at(RankGrid(sizes(4, 1, 2), "tp-cp"), 1), Error);  // other sizes
}

TEST_CASE("the rank grid with PP and DP outside the group, in both outer orders, by hand", "[grid]") {
  // T 2, U 1, R 3 (a ring of 3), PP 2, DP 2: 24 ranks.
  const RankGrid pp_dp(sizes(2, 1, 3, 2, 2), "tp-cp-pp-dp");
  CHECK(pp_dp.world() == 24);
  CHECK(pp_dp.stride(Dim::cp) == 2);
  CHECK(pp_dp.stride(Dim::pp) == 6);
  CHECK(pp_dp.stride(Dim::dp) == 12);
  CHECK(pp_dp.groups({Dim::pp}).front() == std::vector<int>{0, 6});
  CHECK(pp_dp.groups({Dim::dp}).front() == std::vector<int>{0, 12});
  CHECK(pp_dp.groups({Dim::dp})[1] == std::vector<int>{1, 13});
  // DP x CP, the ranks that hold the same weights: CP fastest, then DP.
  CHECK(pp_dp.groups({Dim::cp, Dim::dp}).front() == std::vector<int>{0, 2, 4, 12, 14, 16});
  CHECK(pp_dp.groups({Dim::cp, Dim::dp}).size() == 4);
  // Rank 19 = 1 + 2 x 0 + 6 x 1 + 12 x 1: t 1, c 0, p 1, d 1.
  CHECK(pp_dp.coord(19, Dim::tp) == 1);
  CHECK(pp_dp.coord(19, Dim::cp) == 0);
  CHECK(pp_dp.coord(19, Dim::pp) == 1);
  CHECK(pp_dp.coord(19, Dim::dp) == 1);
  CHECK(pp_dp.rank_at({{Dim::tp, 1}, {Dim::pp, 1}, {Dim::dp, 1}}) == 19);

  const RankGrid dp_pp(sizes(2, 1, 3, 2, 2), "tp-cp-dp-pp");  // Megatron's default without EP
  CHECK(dp_pp.stride(Dim::dp) == 6);
  CHECK(dp_pp.stride(Dim::pp) == 12);
  CHECK(dp_pp.groups({Dim::pp}).front() == std::vector<int>{0, 12});
  CHECK(dp_pp.groups({Dim::dp}).front() == std::vector<int>{0, 6});
  CHECK(dp_pp.coord(19, Dim::pp) == 1);
  CHECK(dp_pp.coord(19, Dim::dp) == 1);
  CHECK(dp_pp.coord(13, Dim::dp) == 0);

  // picotron's view(dp, pp, cp, tp) is tp-cp-pp-dp; any order of the four names is a grid.
  const RankGrid outer_first(sizes(2, 2, 1, 2, 1), "pp-cp-tp");
  CHECK(outer_first.order() == "pp-cp-tp-dp");
  CHECK(outer_first.stride(Dim::pp) == 1);
  CHECK(outer_first.stride(Dim::cp) == 2);
  CHECK(outer_first.stride(Dim::tp) == 4);
  CHECK(outer_first.groups({Dim::tp}).front() == std::vector<int>{0, 4});
}

TEST_CASE("every group of every dimension covers the world once, on a sweep of shapes and orders", "[grid]") {
  const std::vector<std::vector<Dim>> dim_sets = {{Dim::tp}, {Dim::cp},         {Dim::a2a},          {Dim::ring},
                                                  {Dim::pp}, {Dim::dp},         {Dim::cp, Dim::dp}, {Dim::tp, Dim::cp},
                                                  {}};
  for (const std::string order : {"tp-cp-pp-dp", "tp-cp-dp-pp", "cp-tp-pp-dp", "cp-tp-dp-pp", "dp-pp-cp-tp"})
    for (const auto& [T, U, R] : {std::tuple{1, 1, 1}, {2, 1, 4}, {4, 2, 1}, {2, 2, 3}, {3, 4, 2}})
      for (const auto& [PP, DP] : {std::pair{1, 1}, {2, 3}, {3, 2}}) {
        const RankGrid grid(sizes(T, U, R, PP, DP), order);
        INFO(order << " T " << T << " U " << U << " R " << R << " PP " << PP << " DP " << DP);
        CHECK(grid.world() == T * U * R * PP * DP);
        for (const std::vector<Dim>& dims : dim_sets) check_partition(grid, dims);
        // A group's members are its stride apart; coordinates and ranks are each other's inverse.
        for (Dim d : {Dim::tp, Dim::a2a, Dim::ring, Dim::pp, Dim::dp})
          for (const std::vector<int>& g : grid.groups({d}))
            for (size_t i = 1; i < g.size(); ++i) CHECK(g[i] - g[i - 1] == grid.stride(d));
        for (int rank = 0; rank < grid.world(); ++rank)
          CHECK(grid.rank_at({{Dim::tp, grid.coord(rank, Dim::tp)},
                              {Dim::cp, grid.coord(rank, Dim::cp)},
                              {Dim::pp, grid.coord(rank, Dim::pp)},
                              {Dim::dp, grid.coord(rank, Dim::dp)}}) == rank);
      }
}

TEST_CASE("groups.cpp asks the grid: coordinates and every kind's groups as before, on the tests' configurations", "[grid][hybrid]") {
  for (const ParallelConfig& given : swept()) {
    const int P = given.tp * given.cp;
    const ParallelConfig par = given.resolved(P);
    INFO(par.name() << " order " << to_string(par.order));
    for (GroupKind kind : {GroupKind::tp, GroupKind::cp, GroupKind::a2a, GroupKind::ring}) {
      INFO("kind " << to_string(kind));
      // The one difference, a bug of the old colors: under all_gather (U 1, yet r = c over all
      // of CP) the a2a color t R + r with R = ring_size() = 1 was t + c, which merged (t 1, c 0)
      // with (t 0, c 1) under one key and lost ranks (all-gather4xtp3: {0} {4} {8} {9} {10} {11}
      // of 12). The grid's a2a groups there are every rank alone, as U = 1 says; no attention
      // ran on them (all_gather uses the CP group).
      if (kind == GroupKind::a2a && par.a2a_size() == 1 && par.ring_size() == 1 && par.cp > 1) {
        Groups alone;
        for (int rank = 0; rank < P; ++rank) alone.push_back({rank});
        CHECK(group_members(par, kind) == alone);
        continue;
      }
      CHECK(group_members(par, kind) == old_group_members(par, kind));
    }
    for (int rank = 0; rank < P; ++rank) {
      const GroupCoords now = coords_of(par, rank), before = old_coords_of(par, rank);
      CHECK(std::tie(now.t, now.c, now.u, now.r) == std::tie(before.t, before.c, before.u, before.r));
      CHECK(world_rank_of(par, now.t, now.c) == old_world_rank_of(par, now.t, now.c));
      CHECK(world_rank_of(par, now.t, now.c) == rank);
    }
  }
}

TEST_CASE("each rank's communicators hold its grid groups' members, in group order", "[grid][hybrid]") {
  for (const char* name : {"tp2xulysses2xring2", "ulysses2xring2xtp2", "tp2xall-gather4", "ring4xtp2"}) {
    const ParallelConfig par = parse_parallel_config(name).resolved(8);
    const RankGrid grid = RankGrid::of(par);
    std::mutex m;
    std::vector<std::string> wrong;
    run_local(8, [&](Communicator& world) {
      const ProcessGroups groups(world, par);
      const std::pair<Communicator*, Dim> comms[] = {
          {groups.tp.get(), Dim::tp}, {groups.cp.get(), Dim::cp}, {groups.a2a.get(), Dim::a2a}, {groups.ring.get(), Dim::ring}};
      for (const auto& [comm, dim] : comms) {
        std::vector<int> members;
        for (int i = 0; i < comm->size(); ++i) members.push_back(comm->world_rank(i));
        const Groups all = grid.groups({dim});
        const bool found = std::find(all.begin(), all.end(), members) != all.end();
        const bool mine = comm->world_rank(comm->rank()) == world.rank();
        if (!found || !mine || comm->rank() != grid.coord(world.rank(), dim)) {
          const std::lock_guard<std::mutex> lock(m);
          wrong.push_back(detail::concat(name, " rank ", world.rank(), " ", to_string(dim)));
        }
      }
    });
    CHECK(wrong == std::vector<std::string>{});
  }
}

TEST_CASE("the step planner's strides are its candidate's grid's, as they were derived before", "[grid][step]") {
  // step_parts' strides before the grid: the group innermost (TP at 1 and CP at T in tp-cp, CP
  // at 1 and TP at C in cp-tp), then PP at G and DP at G PP (pp-dp) or DP at G and PP at G DP.
  for (const char* name : {"tp2xring4", "ring4xtp2", "tp2xulysses2xring2", "ulysses2xring2xtp2", "tp8", "ring8"})
    for (model::OuterOrder outer : {model::OuterOrder::pp_dp, model::OuterOrder::dp_pp})
      for (const auto& [pp, dp] : {std::pair{1, 1}, {2, 4}, {4, 2}, {3, 1}}) {
        model::StepCandidate c;
        c.layer.par = parse_parallel_config(name).resolved(8), c.pp = pp, c.dp = dp, c.order = outer;
        const ParallelConfig& par = c.layer.par;
        const int G = par.tp * par.cp;
        const bool tp_inner = par.order == RankOrder::tp_cp, pp_dp = outer == model::OuterOrder::pp_dp;
        const RankGrid grid = c.grid();
        INFO(c.name() << " " << c.order_name());
        CHECK(grid.order() == c.order_name());
        CHECK(grid.world() == G * pp * dp);
        CHECK(grid.stride(Dim::tp) == (tp_inner ? 1 : par.cp));
        CHECK(grid.stride(Dim::cp) == (tp_inner ? par.tp : 1));
        CHECK(grid.stride(Dim::pp) == (pp_dp ? G : G * dp));
        CHECK(grid.stride(Dim::dp) == (pp_dp ? G * pp : G));
        CHECK(grid.size(Dim::cp) == par.cp);
      }
}

TEST_CASE("the rank grid's bad input: one clear error each", "[grid]") {
  CHECK_THROWS_WITH(RankGrid(sizes(2, 1, 1), "tp-xp"), Catch::Contains("'xp' is none of tp, cp, pp and dp"));
  CHECK_THROWS_WITH(RankGrid(sizes(2, 1, 1), "tp-cp-tp"), Catch::Contains("names tp twice"));
  CHECK_THROWS_WITH(RankGrid(sizes(2, 1, 1), ""), Catch::Contains("'' is none of tp, cp, pp and dp"));
  // Megatron's rule: a dimension left out of the order has one rank.
  CHECK(RankGrid(sizes(2, 1, 1), "tp").order() == "tp-cp-pp-dp");
  CHECK_THROWS_WITH(RankGrid(sizes(2, 1, 1, 4), "tp-cp"), Catch::Contains("leaves out pp, whose size is 4"));
  CHECK_THROWS_WITH(RankGrid(sizes(2, 2, 2), "tp"), Catch::Contains("leaves out cp, whose size is 4"));
  CHECK_THROWS_AS(RankGrid(sizes(2, 1, 1, 0), "tp-cp-pp-dp"), ConfigError);
  CHECK_THROWS_WITH(RankGrid(sizes(1024, 1, 1024, 2), "tp-cp-pp-dp"), Catch::Contains("more than 1048576 ranks"));
  const RankGrid grid(sizes(2, 2, 2), "tp-cp");
  CHECK_THROWS_AS(grid.coord(8, Dim::tp), Error);
  CHECK_THROWS_AS(grid.coord(-1, Dim::tp), Error);
  CHECK_THROWS_AS(grid.rank_at({{Dim::tp, 2}}), Error);
  CHECK_THROWS_AS(grid.rank_at({{Dim::cp, 1}, {Dim::a2a, 0}}), Error);  // cp holds a2a
  CHECK_THROWS_AS(grid.groups({Dim::cp, Dim::ring}), Error);
}

// The rank grid (rank_grid.h): strides from the order, coordinates from the strides, groups
// from the coordinates.
#include "parallel/rank_grid.h"

#include <algorithm>
#include <map>

#include "core/error.h"

namespace ringside {

const char* to_string(Dim d) {
  switch (d) {
    case Dim::tp: return "tp";
    case Dim::cp: return "cp";
    case Dim::a2a: return "a2a";
    case Dim::ring: return "ring";
    case Dim::pp: return "pp";
    case Dim::dp: return "dp";
  }
  return "?";
}

GridSizes GridSizes::of(const ParallelConfig& par, int pp, int dp) {
  const int U = par.a2a_size();
  RS_CHECK(par.tp >= 1 && par.cp >= 1 && U >= 1 && par.cp % U == 0, "a rank grid needs a resolved configuration: T = ", par.tp,
           ", C = ", par.cp, ", U = ", U);
  return {par.tp, U, par.cp / U, pp, dp};
}

namespace {

// The names an order may give, each with the axes it lays out (cp: a2a inside ring).
struct Named {
  const char* name;
  std::vector<Dim> axes;
};
const std::vector<Named>& names() {
  static const std::vector<Named> n = {
      {"tp", {Dim::tp}}, {"cp", {Dim::a2a, Dim::ring}}, {"pp", {Dim::pp}}, {"dp", {Dim::dp}}};
  return n;
}

int size_in(const GridSizes& s, Dim axis) {
  switch (axis) {
    case Dim::tp: return s.tp;
    case Dim::a2a: return s.a2a;
    case Dim::ring: return s.ring;
    case Dim::pp: return s.pp;
    case Dim::dp: return s.dp;
    case Dim::cp: break;
  }
  return s.a2a * s.ring;
}

std::vector<std::string> split_order(const std::string& order) {
  std::vector<std::string> tokens;
  size_t start = 0;
  while (true) {
    const size_t dash = order.find('-', start);
    tokens.push_back(order.substr(start, dash - start));
    if (dash == std::string::npos) return tokens;
    start = dash + 1;
  }
}

}  // namespace

RankGrid::RankGrid(const GridSizes& sizes, const std::string& order) {
  const std::string shown = detail::shown_input(order);
  std::vector<const Named*> laid;
  for (const std::string& token : split_order(order)) {
    const Named* n = nullptr;
    for (const Named& x : names())
      if (token == x.name) n = &x;
    if (!n) throw ConfigError("rank order '" + shown + "': '" + detail::shown_input(token) + "' is none of tp, cp, pp and dp");
    for (const Named* seen : laid)
      if (seen == n) throw ConfigError("rank order '" + shown + "' names " + n->name + " twice");
    laid.push_back(n);
  }
  for (const Named& x : names()) {  // Megatron's rule: a dimension left out has one rank, outermost
    if (std::find(laid.begin(), laid.end(), &x) != laid.end()) continue;
    int64_t size = 1;
    for (Dim axis : x.axes) size *= size_in(sizes, axis);
    if (size != 1)
      throw ConfigError(detail::concat("rank order '", shown, "' leaves out ", x.name, ", whose size is ", size,
                                       " (only a dimension of one rank may be left out)"));
    laid.push_back(&x);
  }
  int64_t world = 1;
  for (const Named* n : laid)
    for (Dim axis : n->axes) {
      const int size = size_in(sizes, axis);
      if (size < 1) throw ConfigError(detail::concat("rank grid: ", to_string(axis), " has size ", size, " (at least 1)"));
      axes_.push_back({axis, size, int(world)});
      world *= size;
      if (world > kMaxRanks) throw ConfigError(detail::concat("rank grid: more than ", kMaxRanks, " ranks"));
    }
  world_ = int(world);
}

RankGrid RankGrid::of(const ParallelConfig& par) { return RankGrid(GridSizes::of(par), to_string(par.order)); }

std::string RankGrid::order() const {
  std::string out;
  for (const Axis& a : axes_) {
    if (a.dim == Dim::ring) continue;  // spelled with a2a, as cp
    if (!out.empty()) out += '-';
    out += a.dim == Dim::a2a ? "cp" : to_string(a.dim);
  }
  return out;
}

const RankGrid::Axis& RankGrid::axis(Dim d) const {
  for (const Axis& a : axes_)
    if (a.dim == d) return a;
  throw Error(detail::concat("rank grid: no axis ", to_string(d)));  // every axis is laid out
}

std::vector<const RankGrid::Axis*> RankGrid::parts(Dim d) const {
  if (d == Dim::cp) return {&axis(Dim::a2a), &axis(Dim::ring)};
  return {&axis(d)};
}

int RankGrid::size(Dim d) const {
  int n = 1;
  for (const Axis* a : parts(d)) n *= a->size;
  return n;
}

int RankGrid::stride(Dim d) const { return parts(d).front()->stride; }

int RankGrid::coord(int rank, Dim d) const {
  RS_CHECK(rank >= 0 && rank < world_, "rank grid: rank ", rank, " of ", world_);
  int x = 0, scale = 1;
  for (const Axis* a : parts(d)) x += rank / a->stride % a->size * scale, scale *= a->size;
  return x;
}

int RankGrid::rank_at(const std::vector<std::pair<Dim, int>>& at) const {
  int rank = 0;
  std::vector<const Axis*> named;
  for (const auto& [d, x] : at) {
    RS_CHECK(x >= 0 && x < size(d), "rank grid: ", to_string(d), " coordinate ", x, " of ", size(d));
    int rest = x;
    for (const Axis* a : parts(d)) {
      RS_CHECK(std::find(named.begin(), named.end(), a) == named.end(), "rank grid: ", to_string(a->dim), " named twice");
      named.push_back(a);
      rank += rest % a->size * a->stride, rest /= a->size;
    }
  }
  return rank;
}

int RankGrid::rank_at(const RankGrid& from, int rank) const {
  std::vector<std::pair<Dim, int>> at;
  for (const Axis& a : from.axes_) {
    RS_CHECK(a.size == axis(a.dim).size, "rank grid: ", to_string(a.dim), " has ", a.size, " ranks there and ", axis(a.dim).size,
             " here");
    at.push_back({a.dim, from.coord(rank, a.dim)});
  }
  return rank_at(at);
}

std::pair<int, int> RankGrid::color_key(int rank, const std::vector<Dim>& dims) const {
  RS_CHECK(rank >= 0 && rank < world_, "rank grid: rank ", rank, " of ", world_);
  // The first member has 0 on every dimension of the group; the key counts the group's
  // coordinates innermost first.
  int first = rank, key = 0, scale = 1;
  std::vector<const Axis*> seen;
  for (Dim d : dims)
    for (const Axis* a : parts(d)) {
      RS_CHECK(std::find(seen.begin(), seen.end(), a) == seen.end(), "rank grid: ", to_string(a->dim), " named twice");
      seen.push_back(a);
    }
  for (const Axis& a : axes_) {
    if (std::find(seen.begin(), seen.end(), &a) == seen.end()) continue;
    const int x = rank / a.stride % a.size;
    first -= x * a.stride, key += x * scale, scale *= a.size;
  }
  return {first, key};
}

std::vector<std::vector<int>> RankGrid::groups(const std::vector<Dim>& dims) const {
  std::map<int, std::vector<int>> by_first;  // first member -> members in group order
  int group_size = 1;
  for (Dim d : dims) group_size *= size(d);
  for (int rank = 0; rank < world_; ++rank) {
    const auto [first, key] = color_key(rank, dims);
    std::vector<int>& members = by_first[first];
    members.resize(size_t(group_size));
    members[size_t(key)] = rank;
  }
  std::vector<std::vector<int>> out;
  for (auto& [first, members] : by_first) out.push_back(std::move(members));
  return out;
}

}  // namespace ringside

#include "parallel/groups.h"

#include <algorithm>
#include <map>
#include <numeric>
#include <regex>

#include "core/error.h"
#include "parallel/layout.h"

namespace ringside {

const char* to_string(CpComm c) {
  switch (c) {
    case CpComm::none: return "none";
    case CpComm::p2p: return "p2p";
    case CpComm::all_gather: return "all_gather";
    case CpComm::a2a: return "a2a";
    case CpComm::a2a_p2p: return "a2a+p2p";
  }
  return "?";
}

CpComm parse_cp_comm(const std::string& s) {
  if (s == "all-gather") return CpComm::all_gather;  // the strategy's spelling
  for (CpComm c : {CpComm::none, CpComm::p2p, CpComm::all_gather, CpComm::a2a, CpComm::a2a_p2p})
    if (s == to_string(c)) return c;
  throw ConfigError("unknown --cp-comm '" + s + "' (p2p, all_gather, a2a or a2a+p2p)");
}

const char* to_string(RankOrder o) { return o == RankOrder::tp_cp ? "tp-cp" : "cp-tp"; }

RankOrder parse_rank_order(const std::string& s) {
  if (s == "tp-cp") return RankOrder::tp_cp;
  if (s == "cp-tp") return RankOrder::cp_tp;
  throw ConfigError("unknown --order '" + s + "' (tp-cp: TP innermost, as Megatron; cp-tp: the reverse)");
}

ParallelConfig ParallelConfig::resolved(int P) const {
  ParallelConfig r = *this;
  if (P < 1) throw ConfigError(detail::concat("P = ", P, ": need at least one rank"));
  auto rest = [&](int other, const char* which) {
    if (other < 1 || P % other != 0)
      throw ConfigError(detail::concat(name(), " on P = ", P, ": ", which, " = ", other, " does not divide P"));
    return P / other;
  };
  if (r.tp == 0 && r.cp == 0) throw ConfigError(name() + ": give the TP or the CP degree");
  if (r.tp == 0) r.tp = rest(r.cp, "the CP degree C");
  if (r.cp == 0) r.cp = rest(r.tp, "the TP degree T");
  if (r.cp_comm == CpComm::a2a) r.cp_a2a = r.cp;
  if (r.cp_comm != CpComm::a2a && r.cp_comm != CpComm::a2a_p2p) r.cp_a2a = 1;
  if (int64_t(r.tp) * r.cp != P)
    throw ConfigError(detail::concat(name(), ": T x C must equal P, but T ", r.tp, " x C ", r.cp, " = ",
                                     int64_t(r.tp) * r.cp, " and P = ", P));
  if (r.cp_comm == CpComm::none && r.cp != 1)
    throw ConfigError(detail::concat(name(), ": C = ", r.cp, " needs a --cp-comm (p2p, all_gather, a2a or a2a+p2p)"));
  if (r.order == RankOrder::cp_tp && (r.tp == 1 || r.cp == 1))
    throw ConfigError(detail::concat(name(), ": the cp-tp order places context parallelism innermost and TP across it; it",
                                     " needs both degrees above 1 (T ", r.tp, ", C ", r.cp, ")"));
  if (r.cp_a2a < 1 || r.cp % r.cp_a2a != 0)
    throw ConfigError(detail::concat(name(), ": the all-to-all size U = ", r.cp_a2a, " must divide C = ", r.cp,
                                     " (a2a+p2p runs the ring over C / U groups of U ranks)"));
  // USP with a group of one is the other algorithm alone: an all-to-all over one rank moves
  // nothing (U 1: the ring), a ring of one rank passes nothing (R 1: Ulysses). Run, and name,
  // that algorithm.
  if (r.cp_comm == CpComm::a2a_p2p && r.cp_a2a == 1) r.cp_comm = CpComm::p2p;
  if (r.cp_comm == CpComm::a2a_p2p && r.cp_a2a == r.cp) r.cp_comm = CpComm::a2a;
  // Likewise context parallelism over one rank under TP: TP alone (tp4xring1 is tp-sp).
  if (r.cp == 1 && r.tp > 1) r.cp_comm = CpComm::none, r.cp_a2a = 1;
  return r;
}

std::string ParallelConfig::name() const {
  auto deg = [](int v) { return v == 0 ? std::string() : std::to_string(v); };
  if (cp_comm == CpComm::none) return tp == 0 ? "tp-sp" : "tp" + deg(tp);
  std::string c;
  switch (cp_comm) {
    case CpComm::none: break;
    case CpComm::p2p: c = "ring" + deg(cp); break;
    case CpComm::all_gather: c = "all-gather" + deg(cp); break;
    case CpComm::a2a: c = "ulysses" + deg(cp); break;
    case CpComm::a2a_p2p: c = "ulysses" + deg(cp_a2a) + "xring" + (cp == 0 ? "" : deg(cp / cp_a2a)); break;
  }
  if (order == RankOrder::cp_tp) return c + "xtp" + deg(tp);  // as given, even T 1 (which validate refuses)
  if (tp == 1) return c;
  return "tp" + deg(tp) + "x" + c;
}

std::string ParallelConfig::canonical_name() const {
  if (tp == 1 && cp_comm != CpComm::none && cp_comm != CpComm::a2a_p2p) {
    ParallelConfig whole = *this;  // pure context parallelism over every rank: its short name
    whole.cp = 0;
    return whole.name();
  }
  if (cp_comm == CpComm::none && cp == 1) return "tp-sp";
  return name();
}

ParallelConfig parse_parallel_config(const std::string& name) {
  const std::string shown = detail::shown_input(name, 48);
  auto bad = [&](const std::string& why) -> ConfigError {
    return ConfigError("strategy '" + shown + "': " + why +
                       " (names: tp-sp, ring, ulysses, all-gather, or degrees innermost first joined by x, e.g. "
                       "tp2xring2, ulysses2xring2, tp2xall-gather2, ring2xtp2)");
  };
  if (name == "tp-sp") return ParallelConfig{0, 1, CpComm::none};
  if (name.size() > 128) throw bad(detail::concat("a name of ", name.size(), " characters is not a configuration"));
  static const std::regex token(R"((tp|ring|ulysses|all-gather)([1-9][0-9]*)?)");
  std::vector<std::pair<std::string, int64_t>> parts;
  for (size_t at = 0; at <= name.size();) {
    const size_t x = name.find('x', at);
    const std::string t = name.substr(at, x == std::string::npos ? std::string::npos : x - at);
    std::smatch m;
    if (t.empty()) throw bad(x == std::string::npos ? "a name cannot end with 'x'" : "an empty group between 'x's, or before one");
    if (!std::regex_match(t, m, token)) throw bad("'" + detail::shown_input(t, 24) + "' is not a group");
    const std::string digits = m[2];  // at most 7 digits: no overflow, and a clear bound
    const int64_t degree = digits.empty() ? 0 : digits.size() > 7 ? kMaxRanks + 1 : std::stoll(digits);
    if (degree > kMaxRanks) throw bad(detail::concat("degree ", detail::shown_input(digits, 24), " is above ", kMaxRanks, " ranks"));
    parts.push_back({m[1], degree});
    if (x == std::string::npos) break;
    at = x + 1;
  }
  ParallelConfig par{1, 1};
  size_t i = 0;
  const bool tp_first = parts[0].first == "tp";
  if (tp_first) par.tp = int(parts[i++].second);
  bool have_cp = false;
  if (i < parts.size() && parts[i].first != "tp") {
    have_cp = true;
    const auto [kind, degree] = parts[i++];
    par.cp = int(degree);
    if (kind == "ring") par.cp_comm = CpComm::p2p;
    if (kind == "all-gather") par.cp_comm = CpComm::all_gather;
    if (kind == "ulysses") {
      par.cp_comm = CpComm::a2a;
      if (i < parts.size() && parts[i].first == "ring") {
        if (degree == 0) throw bad("ulysses inside a ring needs its degree, e.g. ulysses2xring");
        const int64_t cp = degree * parts[i].second;  // 64 bits: no wrap
        if (cp > kMaxRanks) throw bad(detail::concat("U x R = ", cp, " is above ", kMaxRanks, " ranks"));
        par.cp_comm = CpComm::a2a_p2p, par.cp_a2a = int(degree), par.cp = int(cp);
        ++i;
      }
    }
  }
  if (i < parts.size() && parts[i].first == "tp" && !tp_first && have_cp) {
    par.tp = int(parts[i++].second);
    par.order = RankOrder::cp_tp;
  }
  if (i != parts.size()) throw bad("groups out of order or repeated");
  if (!have_cp) par.cp = 1, par.cp_comm = CpComm::none;  // tpN: TP alone
  if (par.tp == 0 && par.cp == 0) throw bad("give every degree but one");
  return par;
}

void ParallelConfig::validate(const LayerConfig& cfg, int P) const {
  cfg.validate();
  const ParallelConfig r = resolved(P);
  const int T = r.tp, U = r.a2a_size();
  // "v must be divisible by T x C = 8 (why)", naming only the degrees above 1.
  auto need = [&](int64_t v, const char* what, std::vector<std::pair<const char*, int64_t>> by, const char* why) {
    int64_t product = 1;
    std::string names;
    for (const auto& [n, degree] : by)
      if (degree > 1 || by.size() == 1) product *= degree, names += (names.empty() ? "" : " x ") + std::string(n);
    if (names.empty()) return;
    if (v % product != 0)
      throw ConfigError(detail::concat(name(), " with P = ", P, ": ", what, " = ", v, " must be divisible by ", names,
                                       " = ", product, " (", why, ")"));
  };
  need(cfg.H, "heads H", {{"T", T}, {"U", U}},
       U > 1 ? (T > 1 ? "TP splits the heads, and the all-to-all splits each TP rank's heads"
                      : "the all-to-all gives each rank H/U heads")
             : "TP splits the heads");
  need(cfg.Hkv, "kv heads Hkv", {{"T", T}}, "each TP rank computes Hkv/T key/value heads");
  need(cfg.f, "ffn width f", {{"T", T}}, "each TP rank holds f/T columns of the MLP");
  // The padded sequence must fit where the real one does (BLAS's int, any machine's memory).
  LayerConfig padded = cfg;
  padded.s = sequence_packing(r, cfg).S, padded.docs.clear();
  if (padded.s == cfg.s) return;
  try {
    padded.validate();
  } catch (const ConfigError& e) {
    throw ConfigError(detail::concat("the sequence, padded from s = ", cfg.s, " to S = ", padded.s,
                                     " tokens so that every rank's shard is whole: ", e.what()));
  }
}

Layout ParallelConfig::layout(const LayerConfig& cfg) const {
  return cp_comm == CpComm::a2a || cp == 1 ? Layout::contiguous : cfg.cp_layout();
}

GroupCoords coords_of(const ParallelConfig& par, int rank) {
  GroupCoords g;
  if (par.order == RankOrder::tp_cp) g.t = rank % par.tp, g.c = rank / par.tp;
  else g.c = rank % par.cp, g.t = rank / par.cp;
  const int U = par.a2a_size();
  g.u = g.c % U, g.r = g.c / U;
  return g;
}

namespace {

// Which ranks share a group, and their order in it, from a rank's coordinates: (color, key) as
// MPI_Comm_split takes them. The one definition that the communicators and describe_groups use.
using Membership = std::pair<int, int> (*)(const ParallelConfig&, const GroupCoords&);
std::pair<int, int> tp_member(const ParallelConfig&, const GroupCoords& g) { return {g.c, g.t}; }
std::pair<int, int> cp_member(const ParallelConfig&, const GroupCoords& g) { return {g.t, g.c}; }
std::pair<int, int> a2a_member(const ParallelConfig& p, const GroupCoords& g) { return {g.t * p.ring_size() + g.r, g.u}; }
std::pair<int, int> ring_member(const ParallelConfig& p, const GroupCoords& g) { return {g.t * p.a2a_size() + g.u, g.r}; }

}  // namespace

std::string describe_groups(const ParallelConfig& par, size_t shown) {
  const int P = par.tp * par.cp;
  std::string out;
  // One kind of group: its members by world rank, in group order, groups by their first member.
  auto kind = [&](const char* name, int size, Membership member) {
    if (size < 2) return;
    std::map<int, std::map<int, int>> groups;  // color -> key -> world rank
    for (int rank = 0; rank < P; ++rank) {
      const auto [color, key] = member(par, coords_of(par, rank));
      groups[color][key] = rank;
    }
    std::vector<std::vector<int>> ordered;
    for (const auto& [color, members] : groups) {
      ordered.emplace_back();
      for (const auto& [key, rank] : members) ordered.back().push_back(rank);
    }
    std::sort(ordered.begin(), ordered.end());
    out += (out.empty() ? "" : "; ") + std::string(name);
    for (size_t i = 0; i < ordered.size() && i < shown; ++i) {
      out += " {";
      for (size_t j = 0; j < ordered[i].size(); ++j) out += (j ? " " : "") + std::to_string(ordered[i][j]);
      out += "}";
    }
    if (ordered.size() > shown) out += detail::concat(" ... (", ordered.size(), " groups)");
  };
  kind("TP", par.tp, tp_member);
  if (par.cp_comm == CpComm::all_gather) kind("all-gather", par.cp, cp_member);
  kind("all-to-all", par.a2a_size(), a2a_member);
  kind("ring", par.ring_size(), ring_member);
  return out;
}

int world_rank_of(const ParallelConfig& par, int t, int c) {
  return par.order == RankOrder::tp_cp ? t + par.tp * c : c + par.cp * t;
}

namespace {
// The ranks the layout spans: C for all_gather, the ring's R otherwise (1 without a ring).
int layout_ranks(const ParallelConfig& par) { return par.cp_comm == CpComm::all_gather ? par.cp : par.ring_size(); }
}  // namespace

Packing sequence_packing(const ParallelConfig& par, const LayerConfig& cfg) {
  const int64_t G = layout_ranks(par), TC = int64_t(par.tp) * par.cp;
  const Layout l = par.layout(cfg);
  if (per_document(l) && G > 1) return Packing(cfg, std::lcm(2 * G, TC), 2 * G);
  return Packing(cfg, l == Layout::zigzag && G > 1 ? std::lcm(2 * G, TC) : TC);
}

RingLayout cp_layout(const ParallelConfig& par, const LayerConfig& cfg, const Packing& packing) {
  const int G = layout_ranks(par);
  const Layout l = par.layout(cfg);
  return RingLayout(per_document(l) && G == 1 ? Layout::contiguous : l, packing, G, cfg.causal);
}

std::vector<int64_t> cp_positions(const ParallelConfig& par, const RingLayout& layout, int c) {
  const int U = par.a2a_size();
  if (par.cp_comm == CpComm::all_gather) return layout.positions(c);
  const std::vector<int64_t> ring_shard = layout.positions(c / U);
  const int64_t n = int64_t(ring_shard.size()) / U, u = c % U;
  return {ring_shard.begin() + u * n, ring_shard.begin() + (u + 1) * n};
}

std::vector<int64_t> rank_positions(const ParallelConfig& par, const RingLayout& layout, int rank) {
  const GroupCoords g = coords_of(par, rank);
  const std::vector<int64_t> shard = cp_positions(par, layout, g.c);
  const int64_t n = int64_t(shard.size()) / par.tp;
  return {shard.begin() + g.t * n, shard.begin() + (g.t + 1) * n};
}

std::vector<int64_t> cp_positions(const ParallelConfig& par, const LayerConfig& cfg, int c) {
  const Packing packing = sequence_packing(par, cfg);
  return cp_positions(par, cp_layout(par, cfg, packing), c);
}

std::vector<int64_t> rank_positions(const ParallelConfig& par, const LayerConfig& cfg, int rank) {
  const Packing packing = sequence_packing(par, cfg);
  return rank_positions(par, cp_layout(par, cfg, packing), rank);
}

ProcessGroups::ProcessGroups(Communicator& w, const ParallelConfig& p)
    : world(w), par(p.resolved(w.size())), at(coords_of(par, w.rank())) {
  auto split = [&](Membership member) {
    return world.split_by([&](int rank) { return member(par, coords_of(par, rank)); });
  };
  tp = split(tp_member);
  cp = split(cp_member);
  // Inside a CP group (ranks c = u + U r): the a2a groups share r, the rings share u.
  a2a = split(a2a_member);
  ring = split(ring_member);
}

}  // namespace ringside

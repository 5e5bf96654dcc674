#include "parallel/config.h"

#include <algorithm>
#include <regex>

#include "core/error.h"

namespace ringside {

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
  const CpGroups& groups = r.cp_comm->groups;
  if (groups.a2a && !groups.ring) r.cp_a2a = r.cp;  // the all-to-all spans the CP group
  if (!groups.a2a) r.cp_a2a = 1;
  if (int64_t(r.tp) * r.cp != P)
    throw ConfigError(detail::concat(name(), ": T x C must equal P, but T ", r.tp, " x C ", r.cp, " = ",
                                     int64_t(r.tp) * r.cp, " and P = ", P));
  if (!r.sequence_parallel && r.cp != 1)
    throw ConfigError(detail::concat(name(), ": plain TP (no sequence parallelism) runs alone; with C = ", r.cp,
                                     " use tpN, which is TP with sequence parallelism, e.g. tp2xring2"));
  if (r.cp_comm->none() && r.cp != 1)
    throw ConfigError(detail::concat(name(), ": C = ", r.cp, " needs a --cp-comm (", cp_comm_choices(), ")"));
  if (r.order == RankOrder::cp_tp && (r.tp == 1 || r.cp == 1))
    throw ConfigError(detail::concat(name(), ": the cp-tp order places context parallelism innermost and TP across it; it",
                                     " needs both degrees above 1 (T ", r.tp, ", C ", r.cp, ")"));
  if (r.cp_a2a < 1 || r.cp % r.cp_a2a != 0)
    throw ConfigError(detail::concat(name(), ": the all-to-all size U = ", r.cp_a2a, " must divide C = ", r.cp,
                                     " (a2a+p2p runs the ring over C / U groups of U ranks)"));
  // USP with a group of one is the other algorithm alone: an all-to-all over one rank moves
  // nothing (U 1: the ring), a ring of one rank passes nothing (R 1: Ulysses). Run, and name,
  // that algorithm.
  if (r.cp_comm->nested() && r.cp_a2a == 1) r.cp_comm = &cp_scheme(r.cp_comm->when_a2a_is_one);
  else if (r.cp_comm->nested() && r.cp_a2a == r.cp) r.cp_comm = &cp_scheme(r.cp_comm->when_ring_is_one);
  // Likewise context parallelism over one rank under TP: TP alone (tp4xring1 is tp-sp).
  if (r.cp == 1 && r.tp > 1) r.cp_comm = &no_cp_scheme(), r.cp_a2a = 1;
  return r;
}

std::string ParallelConfig::name() const {
  auto deg = [](int v) { return v == 0 ? std::string() : std::to_string(v); };
  if (!sequence_parallel) return "tp";  // TP alone, over every rank
  if (cp_comm->none()) return tp == 0 ? "tp-sp" : "tp" + deg(tp);
  // The scheme's group names with their degrees: ring4; ulysses2xring2 (U, then R).
  const std::vector<const char*>& groups = cp_comm->strategy;
  const std::string c = cp_comm->nested() ? groups[0] + deg(cp_a2a) + "x" + groups[1] + (cp == 0 ? "" : deg(cp / cp_a2a))
                                          : groups[0] + deg(cp);
  if (order == RankOrder::cp_tp) return c + "xtp" + deg(tp);  // as given, even T 1 (which validate refuses)
  if (tp == 1) return c;
  return "tp" + deg(tp) + "x" + c;
}

std::string ParallelConfig::canonical_name() const {
  if (tp == 1 && !cp_comm->none() && !cp_comm->nested()) {
    ParallelConfig whole = *this;  // pure context parallelism over every rank: its short name
    whole.cp = 0;
    return whole.name();
  }
  if (cp_comm->none() && cp == 1) return sequence_parallel ? "tp-sp" : "tp";
  return name();
}

namespace {

// A group of a configuration's name: tp, or a scheme's group ("ring", "all-gather", "ulysses"),
// with an optional degree. Longer names first, so that a name that extends another is tried first.
std::string group_pattern() {
  std::vector<std::string> names{"tp"};
  for (const CpScheme* s : cp_schemes())
    for (const char* g : s->strategy)
      if (std::find(names.begin(), names.end(), g) == names.end()) names.push_back(g);
  std::stable_sort(names.begin(), names.end(), [](const std::string& a, const std::string& b) { return a.size() > b.size(); });
  std::string alternatives;
  for (const std::string& n : names) alternatives += (alternatives.empty() ? "" : "|") + n;
  return "(" + alternatives + ")([0-9]+)?";
}

// The scheme whose groups the name's groups spell from `at` on, the longest first
// (ulysses2xring2 is a2a+p2p, not Ulysses followed by a stray ring).
const CpScheme& scheme_named_at(const std::vector<std::pair<std::string, int64_t>>& parts, size_t at) {
  const CpScheme* best = nullptr;
  for (const CpScheme* s : cp_schemes()) {
    if (s->strategy.empty() || at + s->strategy.size() > parts.size()) continue;
    bool match = true;
    for (size_t j = 0; j < s->strategy.size(); ++j) match = match && parts[at + j].first == s->strategy[j];
    if (match && (!best || s->strategy.size() > best->strategy.size())) best = s;
  }
  if (!best) throw Error("no scheme is named by group '" + parts[at].first + "'");  // the pattern admits none other
  return *best;
}

// The names a configuration goes by without degrees: tp, tp-sp, and each scheme of one group
// over every rank ("ring", "all-gather", "ulysses", "ring-q"), from the registry.
// The CP groups a scheme combines, as configuration names spell them: "ulysses2xring2", from the
// registry's nested schemes.
std::string combined_names() {
  std::string names;
  for (const CpScheme* s : cp_schemes())
    if (s->nested()) names += std::string(names.empty() ? "" : ", ") + s->strategy[0] + "2x" + s->strategy[1] + "2";
  return names;
}

std::string short_names() {
  std::string names = "tp, tp-sp";
  for (const CpScheme* s : cp_schemes())
    if (!s->none() && !s->nested()) names += std::string(", ") + s->strategy[0];
  return names;
}

}  // namespace

ParallelConfig parse_parallel_config(const std::string& name) {
  const std::string shown = detail::shown_input(name, 48);
  auto bad = [&](const std::string& why) -> ConfigError {
    return ConfigError("strategy '" + shown + "': " + why + " (names: " + short_names() +
                       ", or degrees innermost first joined by x, e.g. tp2xring2, ulysses2xring2, tp2xall-gather2, ring2xtp2)");
  };
  if (name == "tp-sp") return ParallelConfig{0, 1, &no_cp_scheme()};
  if (name == "tp") {  // Megatron TP without sequence parallelism, over every rank
    ParallelConfig plain{0, 1, &no_cp_scheme()};
    plain.sequence_parallel = false;
    return plain;
  }
  if (name.size() > 128) throw bad(detail::concat("a name of ", name.size(), " characters is not a configuration"));
  // A degree is a decimal number as on the command line (core/strict_flags.h): a leading zero
  // is decimal (ring08 is ring8), and 0 is no degree.
  static const std::regex token(group_pattern());
  std::vector<std::pair<std::string, int64_t>> parts;
  for (size_t at = 0; at <= name.size();) {
    const size_t x = name.find('x', at);
    const std::string t = name.substr(at, x == std::string::npos ? std::string::npos : x - at);
    std::smatch m;
    if (t.empty()) throw bad(x == std::string::npos ? "a name cannot end with 'x'" : "an empty group between 'x's, or before one");
    if (!std::regex_match(t, m, token)) throw bad("'" + detail::shown_input(t, 24) + "' is not a group");
    std::string digits = m[2];
    digits.erase(0, std::min(digits.find_first_not_of('0'), digits.size()));  // at most 7 digits left: no overflow
    if (!std::string(m[2]).empty() && digits.empty()) throw bad("'" + detail::shown_input(t, 24) + "': a degree is at least 1");
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
    const CpScheme& scheme = scheme_named_at(parts, i);
    have_cp = true;
    par.cp_comm = &scheme;
    const int64_t degree = parts[i].second;
    par.cp = int(degree);
    if (scheme.nested()) {  // U, then R: C = U R
      if (degree == 0)
        throw bad(detail::concat(scheme.strategy[0], " inside a ", scheme.strategy[1], " needs its degree, e.g. ",
                                 scheme.strategy[0], "2x", scheme.strategy[1]));
      const int64_t cp = degree * parts[i + 1].second;  // 64 bits: no wrap
      if (cp > kMaxRanks) throw bad(detail::concat("U x R = ", cp, " is above ", kMaxRanks, " ranks"));
      par.cp_a2a = int(degree), par.cp = int(cp);
    }
    i += scheme.strategy.size();
  }
  if (i < parts.size() && parts[i].first == "tp" && !tp_first && have_cp) {
    par.tp = int(parts[i++].second);
    par.order = RankOrder::cp_tp;
  }
  if (i != parts.size()) {
    // Two CP groups after one another that no scheme combines (ulysses2xring-q2, ring2xulysses2).
    if (have_cp && parts[i].first != "tp")
      throw bad("groups out of order or repeated, or context-parallel groups that no scheme combines; only " +
                combined_names() + " does");
    throw bad("groups out of order or repeated");
  }
  if (!have_cp) par.cp = 1, par.cp_comm = &no_cp_scheme();  // tpN: TP alone
  if (par.tp == 0 && par.cp == 0) throw bad("give every degree but one");
  return par;
}

}  // namespace ringside

#include "parallel/config.h"

#include <algorithm>
#include <regex>

#include "core/error.h"

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
  if (!r.sequence_parallel && r.cp != 1)
    throw ConfigError(detail::concat(name(), ": plain TP (no sequence parallelism) runs alone; with C = ", r.cp,
                                     " use tpN, which is TP with sequence parallelism, e.g. tp2xring2"));
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
  if (!sequence_parallel) return "tp";  // TP alone, over every rank
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
  if (cp_comm == CpComm::none && cp == 1) return sequence_parallel ? "tp-sp" : "tp";
  return name();
}

ParallelConfig parse_parallel_config(const std::string& name) {
  const std::string shown = detail::shown_input(name, 48);
  auto bad = [&](const std::string& why) -> ConfigError {
    return ConfigError("strategy '" + shown + "': " + why +
                       " (names: tp, tp-sp, ring, ulysses, all-gather, or degrees innermost first joined by x, e.g. "
                       "tp2xring2, ulysses2xring2, tp2xall-gather2, ring2xtp2)");
  };
  if (name == "tp-sp") return ParallelConfig{0, 1, CpComm::none};
  if (name == "tp") {  // Megatron TP without sequence parallelism, over every rank
    ParallelConfig plain{0, 1, CpComm::none};
    plain.sequence_parallel = false;
    return plain;
  }
  if (name.size() > 128) throw bad(detail::concat("a name of ", name.size(), " characters is not a configuration"));
  // A degree is a decimal number as on the command line (core/strict_flags.h): a leading zero
  // is decimal (ring08 is ring8), and 0 is no degree.
  static const std::regex token(R"((tp|ring|ulysses|all-gather)([0-9]+)?)");
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

}  // namespace ringside

// A system's link tiers and the job placed on them (topology.h).
#include "model/topology.h"

#include <algorithm>
#include <cmath>

#include "core/error.h"

namespace ringside::model {

namespace {

double number_in(const nlohmann::json& j, const char* key, const std::string& where, double lo, double hi, bool lo_open = false) {
  const auto it = j.find(key);
  const bool ok = it != j.end() && it->is_number() && std::isfinite(it->get<double>()) &&
                  (lo_open ? it->get<double>() > lo : it->get<double>() >= lo) && it->get<double>() <= hi;
  if (!ok)
    throw ConfigError(detail::concat(where, key, " must be a number in ", lo_open ? "(" : "[", lo, ", ", hi, "]",
                                     it == j.end() ? " (missing)" : ""));
  return it->get<double>();
}

int whole(const nlohmann::json& j, const char* key, const std::string& where) {
  const double v = number_in(j, key, where, 1, 1 << 20);
  if (v != std::floor(v)) throw ConfigError(detail::concat(where, key, " must be a whole number of GPUs"));
  return int(v);
}

std::string text(const nlohmann::json& j, const char* key, const std::string& where, bool required) {
  const auto it = j.find(key);
  if (it == j.end() && !required) return "";
  if (it == j.end() || !it->is_string() || it->get<std::string>().empty())
    throw ConfigError(detail::concat(where, key, " must be a non-empty string"));
  return it->get<std::string>();
}

}  // namespace

std::vector<Tier> parse_tiers(const nlohmann::json& j, const std::string& source) {
  if (!j.is_array() || j.empty()) throw ConfigError(source + ": tiers must be a list of at least one link tier, innermost first");
  std::vector<Tier> tiers;
  for (size_t i = 0; i < j.size(); ++i) {
    const nlohmann::json& t = j[i];
    const std::string where = detail::concat(source, ": tiers[", i, "].");
    if (!t.is_object()) throw ConfigError(where.substr(0, where.size() - 1) + " must be an object");
    Tier tier;
    tier.name = text(t, "name", where, true);
    const bool outermost = i + 1 == j.size();
    if (outermost && t.contains("gpus"))
      throw ConfigError(where + "gpus: the outermost tier joins every GPU of the job (give no gpus)");
    if (!outermost) {
      tier.gpus = whole(t, "gpus", where);
      if (!tiers.empty()) {
        const int inner = tiers.back().gpus;
        if (tier.gpus <= inner)
          throw ConfigError(detail::concat(where, "gpus: ", tier.gpus, " GPUs is not larger than tiers[", i - 1, "]'s ", inner,
                                           " (tiers go innermost first)"));
        if (tier.gpus % inner != 0)
          throw ConfigError(detail::concat(where, "gpus: ", tier.gpus, " GPUs is not a whole number of tiers[", i - 1,
                                           "] domains of ", inner));
      }
    }
    if (t.contains("unit")) {
      if (outermost) throw ConfigError(where + "unit: the outermost tier has no domain to give in units");
      tier.unit = whole(t, "unit", where);
      if (tier.gpus % tier.unit != 0)
        throw ConfigError(detail::concat(where, "unit: ", tier.unit, " GPUs does not divide the domain of ", tier.gpus));
    }
    tier.bandwidth = number_in(t, "bandwidth_GBps", where, 1e-3, 1e6) * 1e9;  // the first format's range: a unit slip is out of it
    tier.latency_s = number_in(t, "latency_us", where, 0, 1e6) * 1e-6;  // 0: an ideal link
    tier.efficiency = t.contains("efficiency") ? number_in(t, "efficiency", where, 0, 1, true) : 1.0;
    tier.source = text(t, "source", where, false);
    if (t.contains("in_network")) {
      const nlohmann::json& r = t["in_network"];
      const std::string rw = where + "in_network.";
      if (!r.is_object()) throw ConfigError(where + "in_network must be an object");
      tier.reduction = text(r, "name", rw, true);
      // busbw = algbw 2 (n-1)/n: a reduction in the switch moves each byte once each way, so
      // its busbw may pass the line rate, never twice it.
      tier.reduction_busbw = number_in(r, "all_reduce_busbw_GBps", rw, 0, 2 * tier.bandwidth / 1e9, true) * 1e9;
      tier.reduction_source = text(r, "source", rw, true);
    }
    tiers.push_back(std::move(tier));
  }
  return tiers;
}

nlohmann::json tiers_json(const std::vector<Tier>& tiers) {
  nlohmann::json all = nlohmann::json::array();
  for (size_t i = 0; i < tiers.size(); ++i) {
    const Tier& t = tiers[i];
    nlohmann::json j = {{"name", t.name}};
    if (i + 1 < tiers.size()) j["gpus"] = t.gpus;
    if (t.unit > 0) j["unit"] = t.unit;
    j["bandwidth_GBps"] = t.bandwidth / 1e9, j["latency_us"] = t.latency_s * 1e6, j["efficiency"] = t.efficiency;
    if (!t.source.empty()) j["source"] = t.source;
    if (t.reduction_busbw > 0)
      j["in_network"] = {{"name", t.reduction}, {"all_reduce_busbw_GBps", t.reduction_busbw / 1e9}, {"source", t.reduction_source}};
    all.push_back(j);
  }
  return all;
}

std::string tiers_words(const std::vector<Tier>& tiers) {
  std::string out;
  for (size_t i = 0; i < tiers.size(); ++i) {
    const Tier& t = tiers[i];
    out += (i == 0 ? "" : ", then ") + t.name + (i + 1 < tiers.size() ? detail::concat(" domains of ", t.gpus, t.gpus == 1 ? " GPU" : " GPUs") : "") +
           detail::concat(" at ", t.bandwidth / 1e9, " GB/s + ", t.latency_s * 1e6, " us");
  }
  return out;
}

Topology::Topology(std::vector<Tier> tiers, int world) : tiers_(std::move(tiers)), world_(world) {
  if (tiers_.empty()) throw ConfigError("a topology needs at least one link tier");
  if (world < 1) throw ConfigError(detail::concat("a topology of ", world, " GPUs"));
  used_.assign(tiers_.size(), world);
  for (size_t t = 0; t + 1 < tiers_.size(); ++t) {
    const int domain = tiers_[t].gpus;
    int used = t == 0 ? domain : std::min(world, used_[t - 1] * (domain / tiers_[t - 1].gpus));
    if (t == 0 && world > domain && world % domain != 0) {
      // The segment rule: the largest whole number of units, at least half the domain, that
      // divides the job; else whole domains filled in order, the last short.
      const int unit = tiers_[t].unit > 0 ? tiers_[t].unit : domain;
      for (int s = domain - domain % unit; s >= unit && 2 * s >= domain; s -= unit)
        if (world % s == 0) {
          used = s;
          break;
        }
    }
    used_[t] = std::min(used, world);
    uneven_ |= world % used_[t] != 0;
  }
}

size_t Topology::link(int a, int b) const {
  size_t t = 0;
  while (t + 1 < tiers_.size() && domain_of(a, t) != domain_of(b, t)) ++t;
  return t;
}

Span Topology::span(const std::vector<int>& members) const {
  if (members.empty()) throw ConfigError("the span of a group of no GPUs");
  for (int g : members)
    if (g < 0 || g >= world_) throw ConfigError(detail::concat("GPU ", g, " is not one of the job's ", world_));
  const size_t T = tiers_.size();
  Span s;
  s.size = int(members.size());
  s.most.assign(T, 0), s.fewest.assign(T, s.size), s.hops.assign(T, 0), s.parts.assign(T, 1);
  for (size_t t = 0; t < T; ++t) {
    // Members per domain of tier t: the domains are ordered, so count runs over sorted domains.
    std::vector<int> domains;
    domains.reserve(members.size());
    for (int g : members) domains.push_back(domain_of(g, t));
    std::sort(domains.begin(), domains.end());
    for (size_t i = 0; i < domains.size();) {
      size_t j = i;
      while (j < domains.size() && domains[j] == domains[i]) ++j;
      s.most[t] = std::max(s.most[t], int(j - i)), s.fewest[t] = std::min(s.fewest[t], int(j - i));
      i = j;
    }
    s.uneven |= s.most[t] != s.fewest[t];
    if (s.most[t] < s.size) s.tier = t + 1;
    // The inner domains inside each of these: distinct (domain of t, domain of t - 1) pairs.
    if (t == 0) {
      s.parts[0] = s.most[0];
      continue;
    }
    std::vector<std::pair<int, int>> nested;
    for (int g : members) nested.emplace_back(domain_of(g, t), domain_of(g, t - 1));
    std::sort(nested.begin(), nested.end());
    nested.erase(std::unique(nested.begin(), nested.end()), nested.end());
    for (size_t i = 0; i < nested.size();) {
      size_t j = i;
      while (j < nested.size() && nested[j].first == nested[i].first) ++j;
      s.parts[t] = std::max(s.parts[t], int(j - i));
      i = j;
    }
  }
  s.tier = std::min(s.tier, T - 1);
  if (s.size > 1)
    for (size_t i = 0; i < members.size(); ++i) ++s.hops[link(members[i], members[(i + 1) % members.size()])];
  return s;
}

std::string Topology::domain_words() const {
  const Tier& inner = tiers_.front();
  if (tiers_.size() == 1) return detail::concat(inner.name, " between every GPU");
  if (world_ <= inner.gpus) return detail::concat("all ", world_, " GPUs in one ", inner.name, " domain of ", inner.gpus);
  if (used_[0] == inner.gpus) return detail::concat(inner.name, " domains of ", inner.gpus, uneven_ ? " (the last fewer)" : "");
  return detail::concat(used_[0], " GPUs of each ", inner.name, " domain of ", inner.gpus, uneven_ ? " (the last fewer)" : "");
}

}  // namespace ringside::model

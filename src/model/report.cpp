// The numbers of a modeled run (report.h).
#include "model/report.h"

#include <algorithm>
#include <map>

#include "trace/metrics.h"

namespace ringside::model {

std::vector<StrategyReport> report_of(const trace::TraceData& modeled, const std::vector<trace::StrategyMetrics>& metrics) {
  std::vector<StrategyReport> out;
  for (const trace::StrategyMetrics& m : metrics) {
    StrategyReport s;
    s.strategy = m.strategy;
    std::map<int, RankReport> by_rank;
    for (const trace::RankMetrics& r : m.ranks) {
      RankReport& rr = by_rank[r.rank];
      rr.rank = r.rank;
      rr.total_s = double(r.time.window_ns) / 1e9;
      rr.compute_s = double(r.time.compute_ns) / 1e9;
      rr.comm_s = double(r.time.comm_ns) / 1e9;
      rr.exposed_s = double(r.time.exposed_comm_ns) / 1e9;
      rr.peak_memory_bytes = r.peak_memory_bytes;
    }
    for (const trace::RankTrace& r : modeled.ranks) {
      if (r.strategy != m.strategy || !by_rank.contains(r.rank)) continue;
      RankReport& rr = by_rank[r.rank];
      for (const trace::Event& e : r.events) {
        const double sec = double(e.dur_ns) / 1e9;
        const bool forward = e.phase == "forward" || (e.kind == trace::Kind::phase && e.name == "forward");
        const bool backward = e.phase == "backward" || (e.kind == trace::Kind::phase && e.name == "backward");
        PhaseSeconds* into = nullptr;
        if (e.kind == trace::Kind::phase) into = &rr.layer;
        else if (e.kind == trace::Kind::sublayer && e.name == "attention") into = &rr.attention;
        if (into && forward) into->forward_s += sec;
        if (into && backward) into->backward_s += sec;
      }
    }
    // Each figure's slowest rank: a forward alone takes the largest forward of any rank, forward
    // and backward together the largest window (so forward_s + backward_s may exceed total_s,
    // when two ranks are each slowest in one phase). rank: the one with the largest window.
    for (const auto& [rank, rr] : by_rank) {
      s.ranks.push_back(rr);
      RankReport& w = s.slowest;
      if (s.ranks.size() == 1 || rr.total_s > w.total_s) w.rank = rr.rank, w.total_s = rr.total_s;
      w.layer.forward_s = std::max(w.layer.forward_s, rr.layer.forward_s);
      w.layer.backward_s = std::max(w.layer.backward_s, rr.layer.backward_s);
      w.attention.forward_s = std::max(w.attention.forward_s, rr.attention.forward_s);
      w.attention.backward_s = std::max(w.attention.backward_s, rr.attention.backward_s);
      w.compute_s = std::max(w.compute_s, rr.compute_s);
      w.comm_s = std::max(w.comm_s, rr.comm_s);
      w.exposed_s = std::max(w.exposed_s, rr.exposed_s);
      w.peak_memory_bytes = std::max(w.peak_memory_bytes, rr.peak_memory_bytes);
    }
    out.push_back(std::move(s));
  }
  return out;
}

namespace {

nlohmann::json phases(const PhaseSeconds& p, double total_s) {
  return {{"forward_s", p.forward_s}, {"backward_s", p.backward_s}, {"total_s", total_s}};
}

nlohmann::json rank_json(const RankReport& r, bool only_attention) {
  nlohmann::json j = {{"attention", phases(r.attention, only_attention ? r.total_s : r.attention.forward_s + r.attention.backward_s)},
                      {"compute_s", r.compute_s},
                      {"comm_s", r.comm_s},
                      {"exposed_s", r.exposed_s}};
  if (!only_attention) j["layer"] = phases(r.layer, r.total_s), j["peak_memory_bytes"] = r.peak_memory_bytes;
  j["rank"] = r.rank;
  return j;
}

}  // namespace

nlohmann::json report_json(const StrategyReport& r, bool only_attention) {
  nlohmann::json j = rank_json(r.slowest, only_attention);
  j["slowest_rank"] = j["rank"];
  j.erase("rank");
  j["strategy"] = r.strategy;
  j["ranks"] = nlohmann::json::array();
  for (const RankReport& rr : r.ranks) j["ranks"].push_back(rank_json(rr, only_attention));
  return j;
}

trace::TraceData attention_only(trace::TraceData schedule) {
  for (trace::RankTrace& r : schedule.ranks) {
    std::erase_if(r.events, [](const trace::Event& e) { return e.kind != trace::Kind::phase && e.sublayer != "attention"; });
    r.memory.clear();  // the layer's memory, not attention's: peak memory is the layer's (model without --only)
  }
  schedule.flows.clear();
  return schedule;
}

}  // namespace ringside::model

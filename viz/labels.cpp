// What the viewer says about a group and an event: measured or modeled and on what (from
// trace/run_info.h), how much of its communication hid, and an event's details.
#include "viz/view_model.h"

#include <algorithm>
#include <cmath>
#include <cstdio>

namespace ringside::viz {

using trace::Event;

namespace {

std::string modeled_on(const std::string& hw) { return hw.empty() ? "MODELED" : "MODELED on " + hw; }

}  // namespace

std::string group_tag(const trace::RunInfo& info, const std::string& strategy) {
  // A modeled group names its own profile (a plan's groups may be on several).
  if (const trace::GroupInfo* twin = info.group(strategy)) return modeled_on(twin->hardware);
  if (info.modeled) return modeled_on(info.hardware_name());
  return !info.groups.empty() || !info.twins_hardware.is_null() ? "MEASURED" : "";
}

std::string twin_of(const trace::RunInfo& info, const std::string& strategy) {
  const trace::GroupInfo* twin = info.group(strategy);
  return twin ? twin->of : "";
}

std::string trace_tag(const trace::RunInfo& info) {
  if (info.modeled) {
    // Every profile the groups are modeled on, in order (a plan on several), else the trace's.
    std::vector<std::string> profiles;
    for (const auto& [label, group] : info.groups)
      if (!group.hardware.empty() && std::find(profiles.begin(), profiles.end(), group.hardware) == profiles.end())
        profiles.push_back(group.hardware);
    std::string names;
    for (const std::string& p : profiles) names += (names.empty() ? "" : ", ") + p;
    return "(" + modeled_on(names.empty() ? info.hardware_name() : names) + ")";
  }
  const std::string twins = info.twins_hardware_name();
  return twins.empty() ? "(measured)" : "(measured, and modeled on " + twins + ")";
}

std::string comm_summary(const trace::StrategyMetrics& m) {
  if (m.total.comm_ns <= 0) return "";
  const double gpus = double(std::max<size_t>(1, m.ranks.size()));
  auto part = [&](const char* what, const trace::Breakdown& b) {
    char out[96];
    std::snprintf(out, sizeof out, "%s %.0f%% hidden, %s exposed/GPU", what, b.overlap_pct(),
                  format_ns(double(b.exposed_comm_ns) / gpus).c_str());
    return std::string(out);
  };
  // Attention's own traffic where it has some (the ring's K/V, the all-to-alls), beside all of
  // it (the weight-gradient all-reduce too): compare's "attn hidden" and "exposed" columns.
  const std::optional<trace::Breakdown> attention = trace::sublayer_comm(m, "attention");
  if (!attention || attention->comm_ns <= 0) return part("all comm", m.total);
  return part("attention comm", *attention) + "; all comm " +
         format_ns(double(m.total.exposed_comm_ns) / gpus) + " exposed/GPU";
}

std::vector<std::string> describe_event(const Event& e) {
  std::vector<std::string> out;
  out.push_back(e.name + "  [" + trace::to_string(e.kind) + "]");
  std::string where = e.phase.empty() ? "" : e.phase;
  if (!e.sublayer.empty()) where += (where.empty() ? "" : " / ") + e.sublayer;
  if (e.step >= 0) where += (where.empty() ? "" : ", ") + std::string("ring step ") + std::to_string(e.step);
  if (!where.empty()) out.push_back(where);
  out.push_back("duration " + format_ns(double(e.dur_ns)) + ", at " + format_ns(double(e.ts_ns)));
  if (e.peer >= 0) out.push_back((e.direction == trace::Direction::recv ? "from rank " : e.direction == trace::Direction::send ? "to rank " : "peer rank ") + std::to_string(e.peer));
  if (e.bytes > 0) {
    std::string line = format_bytes(double(e.bytes));
    if (e.dur_ns > 0) {
      char b[48];
      std::snprintf(b, sizeof b, ", %.2f GB/s", double(e.bytes) / double(e.dur_ns));
      line += b;
    }
    out.push_back(line);
  }
  if (e.flops > 0) {
    char b[64];
    std::snprintf(b, sizeof b, "%.3f GFLOP", e.flops / 1e9);
    std::string line = b;
    if (e.dur_ns > 0) {
      std::snprintf(b, sizeof b, ", %.1f GFLOP/s", e.flops / double(e.dur_ns));
      line += b;
    }
    out.push_back(line);
  }
  if (e.collective >= 0) out.push_back("collective #" + std::to_string(e.collective));
  if (!e.detail.empty()) out.push_back(e.detail);
  return out;
}

}  // namespace ringside::viz

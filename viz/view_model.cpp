#include "viz/view_model.h"

#include "model/model.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <map>

namespace ringside::viz {

using trace::Event;
using trace::Interval;
using trace::RankTrace;
using trace::Stream;
using trace::TraceData;

Color color_of_kind(const std::string& cat) {
  // Compute in cool colours, communication in warm ones, waits grey.
  if (cat == "attention") return rgba(66, 133, 244);
  if (cat == "gemm") return rgba(52, 168, 83);
  if (cat == "norm") return rgba(171, 71, 188);
  if (cat == "elementwise") return rgba(0, 172, 193);
  if (cat == "memory") return rgba(120, 144, 156);
  if (cat == "wait") return rgba(90, 90, 90);
  if (cat == "p2p") return rgba(255, 167, 38);
  if (cat == "all_gather") return rgba(255, 213, 79);
  if (cat == "reduce_scatter") return rgba(255, 112, 67);
  if (cat == "all_reduce") return rgba(236, 64, 122);
  if (cat == "all_to_all") return rgba(255, 138, 101);
  if (cat == "collective") return rgba(140, 110, 60);
  if (cat == "phase") return rgba(70, 70, 80);
  if (cat == "sublayer") return rgba(95, 95, 110);
  if (cat == "ring_step") return rgba(60, 90, 130);
  return rgba(160, 160, 160);
}

Color color_of(const Event& e) { return e.cat == "collective" ? color_of_kind(e.name) : color_of_kind(e.cat); }

Color rank_color(int r) {
  // Pastel hues: not to be confused with the event kinds' saturated colours.
  static const Color c[12] = {rgba(160, 196, 255), rgba(255, 173, 173), rgba(253, 255, 182), rgba(202, 255, 191),
                              rgba(189, 178, 255), rgba(155, 246, 255), rgba(255, 214, 165), rgba(255, 198, 255),
                              rgba(210, 210, 160), rgba(170, 220, 200), rgba(230, 190, 150), rgba(200, 200, 230)};
  return r < 0 ? rgba(200, 200, 200) : c[r % 12];
}

Color memory_color(int category) {
  // Muted tones: a memory plot is not an event.
  static const Color c[kNumMemCategories] = {rgba(96, 110, 140), rgba(150, 120, 90), rgba(120, 170, 200),
                                             rgba(170, 150, 200), rgba(200, 170, 110)};
  return c[std::clamp(category, 0, kNumMemCategories - 1)];
}

void TimeAxis::zoom(double factor, float x) {
  const double t = t_of(x);
  double span = (t1 - t0) / factor;
  span = std::max(span, 100.0);  // 100 ns across the view at most zoom
  const double frac = double(x - x0) / double(x1 - x0);
  t0 = t - frac * span;
  t1 = t0 + span;
}

void TimeAxis::pan(float dx) {
  const double dt = double(dx) / double(x1 - x0) * (t1 - t0);
  t0 -= dt, t1 -= dt;
}

void TimeAxis::fit(double begin, double end) {
  const double span = std::max(end - begin, 1000.0);
  t0 = begin - 0.02 * span;
  t1 = end + 0.02 * span;
}

namespace {
Lane make_lane(Lane::Kind kind, size_t process, int comm_lane, float y, float height, float row, std::string label) {
  Lane l;
  l.kind = kind, l.process = process, l.comm_lane = comm_lane, l.y = y, l.height = height, l.row = row;
  l.label = std::move(label);
  return l;
}
}  // namespace

TimelineLayout make_layout(const TraceData& t, const LayoutOptions& o) {
  TimelineLayout l;
  l.begin_ns = INT64_MAX, l.end_ns = INT64_MIN;
  std::map<std::string, size_t> group_of;
  for (size_t p = 0; p < t.ranks.size(); ++p) {
    auto [it, fresh] = group_of.try_emplace(t.ranks[p].strategy, l.groups.size());
    if (fresh) {
      l.groups.emplace_back();
      l.groups.back().strategy = t.ranks[p].strategy;
    }
    l.groups[it->second].processes.push_back(p);
  }
  float y = 0;
  for (Group& g : l.groups) {
    std::sort(g.processes.begin(), g.processes.end(), [&](size_t a, size_t b) { return t.ranks[a].rank < t.ranks[b].rank; });
    g.y = y;
    y += o.header;
    g.begin_ns = INT64_MAX, g.end_ns = INT64_MIN;
    for (size_t p : g.processes) {
      const RankTrace& r = t.ranks[p];
      const std::string gpu = "GPU " + std::to_string(r.rank);
      std::vector<size_t> order(r.events.size());
      for (size_t i = 0; i < order.size(); ++i) order[i] = i;
      std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) {
        const Event &x = r.events[a], &z = r.events[b];
        return x.ts_ns != z.ts_ns ? x.ts_ns < z.ts_ns : x.dur_ns > z.dur_ns;
      });
      Lane compute = make_lane(Lane::compute, p, 0, y, o.row * float(o.max_depth), o.row, gpu + " compute");
      std::vector<Lane> comm;
      std::vector<int64_t> comm_end;
      std::vector<int64_t> open;  // ends of the enclosing compute slices
      for (size_t i : order) {
        const Event& e = r.events[i];
        g.begin_ns = std::min(g.begin_ns, e.ts_ns), g.end_ns = std::max(g.end_ns, e.end_ns());
        if (e.stream == Stream::comm) {
          size_t k = 0;
          while (k < comm_end.size() && comm_end[k] > e.ts_ns) ++k;
          if (k == comm_end.size()) {
            comm_end.push_back(0);
            comm.push_back(make_lane(Lane::comm, p, int(k), 0, o.row * 0.75f, 0, gpu + " comm" + (k ? " " + std::to_string(k + 1) : "")));
          }
          comm_end[k] = e.end_ns();
          comm[k].events.push_back(i);
        } else {
          while (!open.empty() && open.back() <= e.ts_ns) open.pop_back();
          compute.events.push_back(i);
          compute.depth.push_back(std::min(int(open.size()), o.max_depth - 1));
          open.push_back(e.end_ns());
        }
      }
      g.lanes.push_back(l.lanes.size());
      l.lanes.push_back(compute);
      y += compute.height;
      if (comm.empty()) comm.push_back(make_lane(Lane::comm, p, 0, 0, o.row * 0.75f, 0, gpu + " comm"));
      for (Lane& c : comm) {
        c.y = y;
        y += c.height;
        g.lanes.push_back(l.lanes.size());
        l.lanes.push_back(std::move(c));
      }
      g.lanes.push_back(l.lanes.size());
      l.lanes.push_back(make_lane(Lane::memory, p, 0, y, o.memory, 0, gpu + " memory"));
      y += o.memory + o.gap;
    }
    if (g.begin_ns > g.end_ns) g.begin_ns = g.end_ns = 0;
    g.zero_ns = g.begin_ns;
    int64_t first_phase = INT64_MAX;
    for (size_t p : g.processes)
      for (const Event& e : t.ranks[p].events)
        if (e.cat == "phase") first_phase = std::min(first_phase, e.ts_ns);
    if (first_phase != INT64_MAX) g.zero_ns = first_phase;
    g.height = y - g.y;
    l.begin_ns = std::min(l.begin_ns, g.begin_ns), l.end_ns = std::max(l.end_ns, g.end_ns);
    y += o.gap;
  }
  if (l.begin_ns > l.end_ns) l.begin_ns = l.end_ns = 0;
  l.height = y;
  return l;
}

std::vector<Interval> exposed_intervals(const RankTrace& r) {
  std::vector<Interval> compute, comm;
  for (const Event& e : r.events) {
    if (e.stream == Stream::comm) comm.push_back({e.ts_ns, e.end_ns()});
    else if (e.cat != "wait" && e.cat != "collective" && e.cat != "phase" && e.cat != "sublayer" && e.cat != "ring_step")
      compute.push_back({e.ts_ns, e.end_ns()});
  }
  compute = trace::merge_intervals(std::move(compute));
  comm = trace::merge_intervals(std::move(comm));
  // comm minus compute: walk both sorted lists.
  std::vector<Interval> out;
  size_t j = 0;
  for (Interval c : comm) {
    while (j < compute.size() && compute[j].end <= c.begin) ++j;
    int64_t at = c.begin;
    for (size_t k = j; k < compute.size() && compute[k].begin < c.end; ++k) {
      if (compute[k].begin > at) out.push_back({at, compute[k].begin});
      at = std::max(at, compute[k].end);
    }
    if (at < c.end) out.push_back({at, c.end});
  }
  return out;
}

namespace {

// A profile's name where otherData keeps it: a string, or an object's "name" ("" when neither).
std::string hardware_name(const nlohmann::json& j, const char* key) {
  const auto h = j.find(key);
  if (h == j.end()) return "";
  if (h->is_string()) return h->get<std::string>();
  if (h->is_object())
    if (const auto n = h->find("name"); n != h->end() && n->is_string()) return n->get<std::string>();
  return "";
}

bool modeled_trace(const nlohmann::json& other) {
  const auto m = other.find("modeled");
  return m != other.end() && m->is_boolean() && m->get<bool>();
}

std::string modeled_on(const std::string& hw) { return hw.empty() ? "MODELED" : "MODELED on " + hw; }

}  // namespace

std::string group_tag(const nlohmann::json& other, const std::string& strategy) {
  if (modeled_trace(other)) return modeled_on(hardware_name(other, "hardware"));
  if (model::is_modeled_twin(other, strategy)) return modeled_on(hardware_name(other["modeled_groups"][strategy], "hardware"));
  const auto groups = other.find("modeled_groups");
  return groups != other.end() && groups->is_object() ? "MEASURED" : "";
}

std::string trace_tag(const nlohmann::json& other) {
  if (modeled_trace(other)) return "(" + modeled_on(hardware_name(other, "hardware")) + ")";
  const std::string twins = hardware_name(other, "modeled_hardware");
  return twins.empty() ? "(measured)" : "(measured, and modeled on " + twins + ")";
}

std::string comm_summary(const trace::StrategyMetrics& m) {
  const std::optional<trace::Breakdown> attention = trace::sublayer_comm(m, "attention");
  const trace::Breakdown b = attention.value_or(m.total);
  const std::string what = attention ? "attention comm" : "comm";
  if (b.comm_ns <= 0) return "";
  const double per_gpu = double(b.exposed_comm_ns) / double(std::max<size_t>(1, m.ranks.size()));
  char out[96];
  std::snprintf(out, sizeof out, "%s %.0f%% hidden, %s exposed per GPU", what.c_str(), b.overlap_pct(),
                format_ns(per_gpu).c_str());
  return out;
}

std::vector<const Group*> groups_to_fit(const TimelineLayout& layout, const nlohmann::json& other, const std::string& what) {
  std::vector<const Group*> out;
  for (const Group& g : layout.groups) {
    const bool modeled = group_tag(other, g.strategy).starts_with("MODELED");
    if (what == "all" || (what == "modeled" && modeled) || (what == "measured" && !modeled) || what == g.strategy)
      out.push_back(&g);
  }
  return out;
}

std::vector<StepMark> step_marks(const TraceData& t) {
  std::map<std::tuple<std::string, int, int>, int64_t> first;  // (strategy, phase order, step) -> start
  for (const RankTrace& r : t.ranks)
    for (const Event& e : r.events)
      if (e.cat == "ring_step" && e.step >= 0) {
        auto key = std::make_tuple(r.strategy, e.phase == "backward" ? 1 : 0, e.step);
        auto [it, fresh] = first.try_emplace(key, e.ts_ns);
        if (!fresh) it->second = std::min(it->second, e.ts_ns);
      }
  std::vector<StepMark> marks;
  for (auto& [key, ts] : first) marks.push_back({std::get<0>(key), std::get<1>(key) ? "backward" : "forward", std::get<2>(key), ts});
  std::sort(marks.begin(), marks.end(), [](const StepMark& a, const StepMark& b) { return a.ts_ns < b.ts_ns; });
  return marks;
}

std::optional<int64_t> step_after(const std::vector<StepMark>& marks, int64_t t, int dir) {
  if (dir > 0) {
    for (const StepMark& m : marks)
      if (m.ts_ns > t) return m.ts_ns;
  } else {
    for (auto it = marks.rbegin(); it != marks.rend(); ++it)
      if (it->ts_ns < t) return it->ts_ns;
  }
  return std::nullopt;
}


bool Replay::advance(double wall_s, int64_t end_ns) {
  if (!playing) return false;
  const int64_t next = head_ns + int64_t(wall_s * speed * 1e9);
  if (next >= end_ns) {
    head_ns = end_ns;
    playing = false;
    return true;
  }
  head_ns = next;
  return true;
}

std::optional<Hit> hit_test(const TraceData& t, const TimelineLayout& l, const TimeAxis& axis, float x, float y, float lane_top) {
  const double time = axis.t_of(x);
  const double slop = (axis.t1 - axis.t0) / double(axis.x1 - axis.x0) * 1.5;  // 1.5 px: tiny events stay pickable
  for (const Lane& lane : l.lanes) {
    const float top = lane_top + lane.y;
    if (y < top || y >= top + lane.height) continue;
    if (lane.kind == Lane::memory) return std::nullopt;
    const RankTrace& r = t.ranks[lane.process];
    // The compute lane's row under y is a nesting depth: the event at that depth, or the
    // deepest above it (a row with nothing drawn belongs to the slice over it).
    const int want = lane.kind == Lane::compute ? int((y - top) / lane.row) : 0;
    std::optional<Hit> best;
    int best_depth = -1;
    for (size_t k = 0; k < lane.events.size(); ++k) {
      const Event& e = r.events[lane.events[k]];
      if (time < double(e.ts_ns) - slop || time > double(e.end_ns()) + slop) continue;
      const int depth = lane.kind == Lane::compute ? lane.depth[k] : 0;
      if (depth <= want && depth > best_depth) best = Hit{lane.process, lane.events[k]}, best_depth = depth;
    }
    return best;
  }
  return std::nullopt;
}

std::vector<std::string> describe_event(const Event& e) {
  std::vector<std::string> out;
  out.push_back(e.name + "  [" + e.cat + "]");
  std::string where = e.phase.empty() ? "" : e.phase;
  if (!e.sublayer.empty()) where += (where.empty() ? "" : " / ") + e.sublayer;
  if (e.step >= 0) where += (where.empty() ? "" : ", ") + std::string("ring step ") + std::to_string(e.step);
  if (!where.empty()) out.push_back(where);
  out.push_back("duration " + format_ns(double(e.dur_ns)) + ", at " + format_ns(double(e.ts_ns)));
  if (e.peer >= 0) out.push_back((e.direction == "recv" ? "from rank " : e.direction == "send" ? "to rank " : "peer rank ") + std::to_string(e.peer));
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

MemorySeries memory_series(const RankTrace& r) {
  MemorySeries s;
  for (const trace::MemorySample& m : r.memory) {
    s.ts.push_back(m.ts_ns);
    s.total.push_back(m.total());
    for (int c = 0; c < kNumMemCategories; ++c) s.by_category[c].push_back(m.bytes[c]);
  }
  // The peak as the metrics count it: over the rank's forward + backward, else the whole trace.
  const auto w = trace::phase_window(r).value_or(Interval{INT64_MIN, INT64_MAX});
  const trace::MemoryPeak peak = trace::memory_peak(r, w.begin, w.end);
  s.peak = peak.bytes, s.peak_ts = peak.ts_ns;
  return s;
}

}  // namespace ringside::viz

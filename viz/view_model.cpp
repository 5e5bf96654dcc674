#include "viz/view_model.h"

#include "model/model.h"
#include "core/error.h"

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <map>
#include <regex>

namespace ringside::viz {

using trace::Event;
using trace::Interval;
using trace::RankTrace;
using trace::Stream;
using trace::TraceData;

Color color_of_kind(const std::string& cat) {
  // Communication in the Okabe-Ito hues; compute in lighter tones of others; waits grey.
  if (cat == "attention") return rgba(0x77, 0x99, 0xff);
  if (cat == "gemm") return rgba(0x88, 0xee, 0xbb);
  if (cat == "norm") return rgba(0xaa, 0x99, 0xbb);
  if (cat == "elementwise") return rgba(0xff, 0xcc, 0x77);
  if (cat == "memory") return rgba(0xaa, 0x66, 0x44);
  if (cat == "wait") return rgba(90, 90, 90);
  if (cat == "p2p") return rgba(0xe6, 0x9f, 0x00);             // orange
  if (cat == "all_gather") return rgba(0xf0, 0xe4, 0x42);      // yellow
  if (cat == "reduce_scatter") return rgba(0xcc, 0x79, 0xa7);  // reddish purple
  if (cat == "all_reduce") return rgba(0x00, 0x72, 0xb2);      // blue
  if (cat == "all_to_all") return rgba(0x56, 0xb4, 0xe9);      // sky blue
  if (cat == "collective") return rgba(140, 110, 60);
  if (cat == "phase") return rgba(70, 70, 80);
  if (cat == "sublayer") return rgba(95, 95, 110);
  if (cat == "ring_step") return rgba(60, 90, 130);
  return rgba(160, 160, 160);
}

const std::vector<std::string>& compute_kinds() {
  static const std::vector<std::string> k{"attention", "gemm", "norm", "elementwise", "memory", "wait"};
  return k;
}

const std::vector<std::string>& comm_kinds() {
  static const std::vector<std::string> k{"p2p", "all_gather", "reduce_scatter", "all_reduce", "all_to_all"};
  return k;
}

namespace {

// CIELAB (D65) of an 8-bit sRGB colour, as seen with `v`.
std::array<double, 3> lab_of(Color c, Vision v) {
  auto linear = [](uint32_t byte) {
    const double x = double(byte & 0xff) / 255.0;
    return x <= 0.04045 ? x / 12.92 : std::pow((x + 0.055) / 1.055, 2.4);
  };
  std::array<double, 3> rgb{linear(c), linear(c >> 8), linear(c >> 16)};
  // Machado, Oliveira and Fernandes (2009), Table 1 at severity 1.0, on linear RGB.
  static const double kMachado[3][3][3] = {
      {{0.152286, 1.052583, -0.204868}, {0.114503, 0.786281, 0.099216}, {-0.003882, -0.048116, 1.051998}},   // protanopia
      {{0.367322, 0.860646, -0.227968}, {0.280085, 0.672501, 0.047413}, {-0.011820, 0.042940, 0.968881}},    // deuteranopia
      {{1.255528, -0.076749, -0.178779}, {-0.078411, 0.930809, 0.147602}, {0.004733, 0.691367, 0.303900}}};  // tritanopia
  if (v != Vision::normal) {
    const auto& m = kMachado[int(v) - 1];
    std::array<double, 3> out{};
    for (int i = 0; i < 3; ++i) out[i] = std::clamp(m[i][0] * rgb[0] + m[i][1] * rgb[1] + m[i][2] * rgb[2], 0.0, 1.0);
    rgb = out;
  }
  const double X = 0.4124564 * rgb[0] + 0.3575761 * rgb[1] + 0.1804375 * rgb[2];
  const double Y = 0.2126729 * rgb[0] + 0.7151522 * rgb[1] + 0.0721750 * rgb[2];
  const double Z = 0.0193339 * rgb[0] + 0.1191920 * rgb[1] + 0.9503041 * rgb[2];
  auto f = [](double t) { return t > 216.0 / 24389.0 ? std::cbrt(t) : (24389.0 / 27.0 * t + 16.0) / 116.0; };
  const double fx = f(X / 0.95047), fy = f(Y), fz = f(Z / 1.08883);
  return {116 * fy - 16, 500 * (fx - fy), 200 * (fy - fz)};
}

}  // namespace

double color_distance(Color a, Color b, Vision v) {
  const auto x = lab_of(a, v), y = lab_of(b, v);
  return std::hypot(x[0] - y[0], x[1] - y[1], x[2] - y[2]);
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

namespace {

// A GPU's full lanes from y down: its compute stream (with nesting), its comm lanes, its memory.
// Returns the y below them.
float add_full_lanes(TimelineLayout& l, Group& g, const TraceData& t, size_t p, float y, const LayoutOptions& o) {
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
  return y + o.memory + o.gap;
}

// The peak as the metrics count it: over the rank's forward + backward, else the whole trace.
trace::MemoryPeak layer_peak(const RankTrace& r) {
  const auto w = trace::phase_window(r).value_or(Interval{INT64_MIN, INT64_MAX});
  return trace::memory_peak(r, w.begin, w.end);
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
  for (size_t gi = 0; gi < l.groups.size(); ++gi) {
    Group& g = l.groups[gi];
    std::sort(g.processes.begin(), g.processes.end(), [&](size_t a, size_t b) { return t.ranks[a].rank < t.ranks[b].rank; });
    g.collapsed = o.collapse_all || std::find(o.collapsed.begin(), o.collapsed.end(), gi) != o.collapsed.end();
    g.y = y;
    g.begin_ns = INT64_MAX, g.end_ns = INT64_MIN;
    std::map<std::string, trace::Interval> phases;
    std::vector<std::string> phase_order;
    for (size_t p : g.processes)
      for (const Event& e : t.ranks[p].events) {
        g.begin_ns = std::min(g.begin_ns, e.ts_ns), g.end_ns = std::max(g.end_ns, e.end_ns());
        g.ring_steps |= e.cat == "ring_step";
        if (e.cat != "phase") continue;
        auto [it, fresh] = phases.try_emplace(e.name, trace::Interval{e.ts_ns, e.end_ns()});
        if (fresh) phase_order.push_back(e.name);
        it->second.begin = std::min(it->second.begin, e.ts_ns), it->second.end = std::max(it->second.end, e.end_ns());
      }
    if (g.begin_ns > g.end_ns) g.begin_ns = g.end_ns = 0;
    g.zero_ns = g.begin_ns, g.layer_end_ns = g.end_ns;
    if (!phases.empty()) {
      g.zero_ns = INT64_MAX, g.layer_end_ns = INT64_MIN;
      for (const std::string& name : phase_order) {
        const trace::Interval w = phases.at(name);
        g.phases.emplace_back(name, w);
        g.zero_ns = std::min(g.zero_ns, w.begin), g.layer_end_ns = std::max(g.layer_end_ns, w.end);
      }
    }
    g.header = (g.collapsed ? o.collapsed_header : o.header) + (g.ring_steps ? o.step_row : 0);
    y += g.header;
    if (!g.collapsed) {
      for (size_t p : g.processes) y = add_full_lanes(l, g, t, p, y, o);
    } else {
      // One summary row per GPU (thinner with many), a GPU drilled into in full after its row,
      // and one memory plot: the GPU of highest peak.
      const float row = std::max(2.0f, std::min(o.summary, o.overview / float(std::max<size_t>(1, g.processes.size()))));
      size_t peak_process = g.processes.empty() ? 0 : g.processes.front();
      int64_t highest = -1;
      for (size_t p : g.processes) {
        const RankTrace& r = t.ranks[p];
        if (const int64_t peak = layer_peak(r).bytes; peak > highest) highest = peak, peak_process = p;
        g.lanes.push_back(l.lanes.size());
        l.lanes.push_back(make_lane(Lane::summary, p, 0, y, row, row, "GPU " + std::to_string(r.rank)));
        y += row;
        if (std::find(o.expanded.begin(), o.expanded.end(), std::make_pair(gi, r.rank)) != o.expanded.end())
          y = add_full_lanes(l, g, t, p, y + 2, o);
      }
      if (!g.processes.empty()) {
        g.lanes.push_back(l.lanes.size());
        l.lanes.push_back(make_lane(Lane::memory, peak_process, 0, y + 1, o.group_memory, 0,
                                    "memory, GPU " + std::to_string(t.ranks[peak_process].rank) + " (peak)"));
        y += o.group_memory + 1;
      }
    }
    g.height = y - g.y;
    l.begin_ns = std::min(l.begin_ns, g.begin_ns), l.end_ns = std::max(l.end_ns, g.end_ns);
    y += o.gap;
  }
  if (l.begin_ns > l.end_ns) l.begin_ns = l.end_ns = 0;
  l.height = y;
  return l;
}

std::vector<Activity> activity(const RankTrace& r, const std::vector<Interval>& exposed) {
  std::vector<Activity> out;
  for (const Event& e : r.events)
    if (e.stream == Stream::compute && e.dur_ns > 0 && e.cat != "wait" && e.cat != "collective" && e.cat != "phase" &&
        e.cat != "sublayer" && e.cat != "ring_step")
      out.push_back({e.ts_ns, e.end_ns(), color_of_kind(e.cat)});
  for (const Interval& iv : exposed) out.push_back({iv.begin, iv.end, kExposedColor});
  std::stable_sort(out.begin(), out.end(), [](const Activity& a, const Activity& b) { return a.begin < b.begin; });
  return out;
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
  // A group listed in modeled_groups names its own profile (a plan's groups may be on several).
  if (model::is_modeled_twin(other, strategy)) return modeled_on(hardware_name(other["modeled_groups"][strategy], "hardware"));
  if (modeled_trace(other)) return modeled_on(hardware_name(other, "hardware"));
  const auto groups = other.find("modeled_groups");
  return groups != other.end() && groups->is_object() ? "MEASURED" : "";
}

std::string twin_of(const nlohmann::json& other, const std::string& strategy) {
  if (!model::is_modeled_twin(other, strategy)) return "";
  const nlohmann::json& twin = other["modeled_groups"][strategy];
  const auto of = twin.find("of");
  return of != twin.end() && of->is_string() ? of->get<std::string>() : "";
}

std::string trace_tag(const nlohmann::json& other) {
  if (modeled_trace(other)) {
    // Every profile the groups are modeled on, in order (a plan on several), else the trace's.
    std::vector<std::string> profiles;
    if (const auto g = other.find("modeled_groups"); g != other.end() && g->is_object())
      for (const auto& [label, group] : g->items())
        if (const std::string hw = group.is_object() ? hardware_name(group, "hardware") : "";
            !hw.empty() && std::find(profiles.begin(), profiles.end(), hw) == profiles.end())
          profiles.push_back(hw);
    std::string names;
    for (const std::string& p : profiles) names += (names.empty() ? "" : ", ") + p;
    return "(" + modeled_on(names.empty() ? hardware_name(other, "hardware") : names) + ")";
  }
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
  std::snprintf(out, sizeof out, "%s %.0f%% hidden, %s exposed/GPU", what.c_str(), b.overlap_pct(),
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

std::pair<std::string, std::string> split_fit(const TimelineLayout& layout, const nlohmann::json& other, const std::string& what) {
  const size_t colon = what.rfind(':');
  if (colon == std::string::npos || !groups_to_fit(layout, other, what).empty()) return {what, ""};
  return {what.substr(0, colon), what.substr(colon + 1)};
}

namespace {
// A group's layer (phase "") or one phase, in group time; nullopt when it has no such phase.
std::optional<Interval> group_window(const Group& g, const std::string& phase) {
  Interval w{g.zero_ns, g.layer_end_ns};
  if (!phase.empty()) {
    const auto it = std::find_if(g.phases.begin(), g.phases.end(), [&](const auto& p) { return p.first == phase; });
    if (it == g.phases.end()) return std::nullopt;
    w = it->second;
  }
  return Interval{w.begin - g.zero_ns, w.end - g.zero_ns};
}
}  // namespace

std::optional<Window> fit_window(const TimelineLayout& layout, const nlohmann::json& other, const std::string& what,
                                 const std::function<double(const Group&)>& scale) {
  const auto [groups, phase] = split_fit(layout, other, what);
  std::optional<Window> out;
  for (const Group* g : groups_to_fit(layout, other, groups))
    if (const auto w = group_window(*g, phase)) {
      const double k = scale ? scale(*g) : 1.0, b = double(w->begin) / k, e = double(w->end) / k;
      out = out ? Window{std::min(out->begin, b), std::max(out->end, e)} : Window{b, e};
    }
  return out;
}

Interval parse_zoom(const std::string& text) {
  const std::string usage = "--zoom " + text + ": expected START,END, times after the layer's start with a unit (ns, us, ms, s; "
                            "a bare number is seconds), START < END, for example 0,150us";
  const size_t comma = text.find(',');
  if (comma == std::string::npos) throw ConfigError(usage);
  auto time = [&](const std::string& v) {
    // A decimal number (no hex, no spaces, nothing that underflows) and a unit.
    static const std::regex number("[+-]?([0-9]+[.]?[0-9]*|[.][0-9]+)([eE][+-]?[0-9]+)?(ns|us|ms|s)?");
    if (!std::regex_match(v, number)) throw ConfigError(usage);
    char* end = nullptr;
    errno = 0;
    const double x = std::strtod(v.c_str(), &end);
    const std::string unit = end ? std::string(end) : "";
    if (errno == ERANGE || !std::isfinite(x)) throw ConfigError(usage);
    const double scale = unit.empty() || unit == "s" ? 1e9 : unit == "ms" ? 1e6 : unit == "us" ? 1e3 : unit == "ns" ? 1.0 : -1.0;
    if (scale < 0 || std::fabs(x * scale) > 9e15) throw ConfigError(usage);
    return int64_t(std::llround(x * scale));
  };
  const Interval w{time(text.substr(0, comma)), time(text.substr(comma + 1))};
  if (w.begin >= w.end) throw ConfigError(usage);
  return w;
}

std::vector<StepMark> step_marks(const TraceData& t) {
  std::map<std::tuple<std::string, int, int>, std::pair<int64_t, int64_t>> first;  // (strategy, phase order, step) -> extent
  for (const RankTrace& r : t.ranks)
    for (const Event& e : r.events)
      if (e.cat == "ring_step" && e.step >= 0 && e.phase != "recompute") {
        auto key = std::make_tuple(r.strategy, e.phase == "backward" ? 1 : 0, e.step);
        auto [it, fresh] = first.try_emplace(key, e.ts_ns, e.end_ns());
        it->second.first = std::min(it->second.first, e.ts_ns), it->second.second = std::max(it->second.second, e.end_ns());
      }
  std::vector<StepMark> marks;
  for (auto& [key, ext] : first)
    marks.push_back({std::get<0>(key), std::get<1>(key) ? "backward" : "forward", std::get<2>(key), ext.first, ext.second});
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


StepStrip step_strip(const std::vector<StepMark>& marks, const TimeAxis& axis, float char_width) {
  StepStrip out;
  // The bands of each phase, forward then backward.
  std::vector<std::vector<StepBand>> phases;
  std::vector<std::string> letters;
  for (const char* phase : {"forward", "backward"}) {
    std::vector<const StepMark*> steps;
    for (const StepMark& m : marks)
      if (m.phase == phase) steps.push_back(&m);
    std::sort(steps.begin(), steps.end(), [](const StepMark* a, const StepMark* b) { return a->step < b->step; });
    if (steps.empty()) continue;
    std::vector<StepBand> bands;
    for (size_t i = 0; i < steps.size(); ++i) {
      const int64_t end = i + 1 < steps.size() ? std::max(steps[i + 1]->ts_ns, steps[i]->ts_ns) : steps[i]->end_ns;
      bands.push_back({axis.x_of(double(steps[i]->ts_ns)), axis.x_of(double(end)), phase, steps[i]->step});
    }
    phases.push_back(std::move(bands));
    letters.push_back(phase == std::string("forward") ? "F" : "B");
  }
  auto width = [&](const std::string& s) { return float(s.size()) * char_width + 2; };
  for (size_t p = 0; p < phases.size(); ++p) {
    const std::vector<StepBand>& bands = phases[p];
    const std::string& letter = letters[p];
    // Each label must end before the next band starts, the phase's last before the next phase's first.
    const float limit = p + 1 < phases.size() ? phases[p + 1].front().x0 : INFINITY;
    auto fits = [&](bool lettered) {
      for (size_t i = 0; i < bands.size(); ++i) {
        const float next = i + 1 < bands.size() ? bands[i + 1].x0 : limit;
        if (width((lettered ? letter : "") + std::to_string(bands[i].step)) > next - bands[i].x0) return false;
      }
      return true;
    };
    // Every label in its band, "F2"; else every one abbreviated, "2"; else one for the phase.
    const bool lettered = fits(true);
    if (lettered || fits(false)) {
      for (const StepBand& b : bands) {
        const std::string text = (lettered ? letter : "") + std::to_string(b.step);
        out.labels.push_back({text, b.x0 + 1, b.x0 + width(text) - 1});
      }
    } else {
      const std::string text = letter + std::to_string(bands.front().step) + "-" + letter + std::to_string(bands.back().step) + " (" +
                               std::to_string(bands.size()) + " steps)";
      out.labels.push_back({text, bands.front().x0 + 1, bands.front().x0 + width(text) - 1});
    }
    out.bands.insert(out.bands.end(), bands.begin(), bands.end());
  }
  // A phase's one label may run past the next phase's start: what follows moves right of it.
  for (size_t i = 1; i < out.labels.size(); ++i)
    if (out.labels[i].x0 < out.labels[i - 1].x1 + 2) {
      const float w = out.labels[i].x1 - out.labels[i].x0;
      out.labels[i].x0 = out.labels[i - 1].x1 + 2, out.labels[i].x1 = out.labels[i].x0 + w;
    }
  return out;
}

Spread spread(const std::vector<double>& values, const std::vector<int>& ranks) {
  Spread s;
  if (values.empty()) return s;
  std::vector<double> sorted = values;
  std::sort(sorted.begin(), sorted.end());
  const size_t n = sorted.size();
  s.median = n % 2 ? sorted[n / 2] : 0.5 * (sorted[n / 2 - 1] + sorted[n / 2]);
  const auto lo = std::min_element(values.begin(), values.end()), hi = std::max_element(values.begin(), values.end());  // the first of each
  s.min = *lo, s.max = *hi;
  s.min_rank = ranks[size_t(lo - values.begin())], s.max_rank = ranks[size_t(hi - values.begin())];
  return s;
}

std::vector<int> outlier_ranks(const std::vector<double>& values, const std::vector<int>& ranks) {
  std::vector<int> out;
  if (values.size() < 4) return out;
  std::vector<double> sorted = values;
  std::sort(sorted.begin(), sorted.end());
  auto quantile = [&](double q) {  // linear interpolation between closest ranks
    const double at = q * double(sorted.size() - 1);
    const size_t i = size_t(at);
    return i + 1 < sorted.size() ? sorted[i] + (at - double(i)) * (sorted[i + 1] - sorted[i]) : sorted[i];
  };
  const double q1 = quantile(0.25), q3 = quantile(0.75), median = quantile(0.5);
  const double k = std::max(1.5 * (q3 - q1), 0.05 * std::fabs(median));
  for (size_t i = 0; i < values.size(); ++i)
    if (values[i] < q1 - k || values[i] > q3 + k) out.push_back(ranks[i]);
  return out;
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

std::optional<Hit> hit_test(const TraceData& t, const TimelineLayout& l, const std::vector<TimeAxis>& axes, float x, float y,
                            float lane_top) {
  for (size_t gi = 0; gi < l.groups.size() && gi < axes.size(); ++gi)
    for (size_t li : l.groups[gi].lanes) {
      const Lane& lane = l.lanes[li];
      const TimeAxis& axis = axes[gi];
      const double time = axis.t_of(x);
      const double slop = (axis.t1 - axis.t0) / double(axis.x1 - axis.x0) * 1.5;  // 1.5 px: tiny events stay pickable
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
  const trace::MemoryPeak peak = layer_peak(r);
  s.peak = peak.bytes, s.peak_ts = peak.ts_ns;
  return s;
}

}  // namespace ringside::viz

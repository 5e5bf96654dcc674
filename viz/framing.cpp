// Where the viewer looks: the groups --fit frames, --zoom's window, the ring steps to step
// through, the replay head, and the spread of a per-rank value.
#include "viz/view_model.h"

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
using trace::TraceData;

std::vector<const Group*> groups_to_fit(const TimelineLayout& layout, const trace::RunInfo& run, const std::string& what) {
  std::vector<const Group*> out;
  for (const Group& g : layout.groups) {
    const bool modeled = run.is_modeled(g.strategy);
    if (what == "all" || (what == "modeled" && modeled) || (what == "measured" && !modeled) || what == g.strategy)
      out.push_back(&g);
  }
  return out;
}

std::pair<std::string, std::string> split_fit(const TimelineLayout& layout, const trace::RunInfo& run, const std::string& what) {
  const size_t colon = what.rfind(':');
  if (colon == std::string::npos || !groups_to_fit(layout, run, what).empty()) return {what, ""};
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

std::optional<Window> fit_window(const TimelineLayout& layout, const trace::RunInfo& run, const std::string& what,
                                 const std::function<double(const Group&)>& scale) {
  const auto [groups, phase] = split_fit(layout, run, what);
  if (groups != what && phase.empty()) return std::nullopt;  // "ring:": a colon, and no phase after it
  std::optional<Window> out;
  for (const Group* g : groups_to_fit(layout, run, groups))
    if (const auto w = group_window(*g, phase)) {
      const double k = scale ? scale(*g) : 1.0, b = double(w->begin) / k, e = double(w->end) / k;
      out = out ? Window{std::min(out->begin, b), std::max(out->end, e)} : Window{b, e};
    }
  return out;
}

Landmarks landmarks(const TraceData& t, const Group& g) {
  Landmarks out{{"all", Interval{g.begin_ns, g.end_ns}}, {"layer", Interval{g.zero_ns, g.layer_end_ns}}};
  auto widen = [&](const std::string& name, const Event& e) {
    const auto [it, fresh] = out.emplace(name, Interval{e.ts_ns, e.end_ns()});
    if (!fresh) it->second = Interval{std::min(it->second.begin, e.ts_ns), std::max(it->second.end, e.end_ns())};
  };
  for (size_t p : g.processes)
    for (const Event& e : t.ranks[p].events) {
      if (e.kind == trace::Kind::phase) widen(e.name, e);
      else if (e.kind == trace::Kind::sublayer && !e.phase.empty()) widen(e.phase + "/" + (e.sublayer.empty() ? e.name : e.sublayer), e);
      else if (e.kind == trace::Kind::ring_step && !e.phase.empty()) widen(e.phase + "/step " + std::to_string(e.step), e);
    }
  return out;
}

Correspondence corresponding_window(const Landmarks& from, const Interval& focus, const Landmarks& to) {
  // The innermost common landmark that holds the focus; "all" holds every window of its group
  // (and places one that runs past its events in proportion all the same).
  std::string best;
  for (const auto& [name, span] : from) {
    if (!to.count(name) || span.begin > focus.begin || span.end < focus.end) continue;
    if (best.empty() || span.end - span.begin < from.at(best).end - from.at(best).begin) best = name;
  }
  if (best.empty() && from.count("all") && to.count("all")) best = "all";
  if (best.empty()) return {"", focus};  // nothing in common: the same times
  const Interval a = from.at(best), b = to.at(best);
  if (a.end <= a.begin) return {best, b};
  // focus in `a`, in proportion, placed in `b`.
  const double k = double(b.end - b.begin) / double(a.end - a.begin);
  auto place = [&](int64_t x) { return b.begin + int64_t(std::llround(double(x - a.begin) * k)); };
  return {best, Interval{place(focus.begin), std::max(place(focus.end), place(focus.begin) + 1)}};
}

std::string landmark_words(const std::string& landmark) {
  if (landmark == "all") return "whole run";
  std::string words = landmark;
  if (const size_t slash = words.find('/'); slash != std::string::npos)
    words.replace(slash, 1, words.compare(slash + 1, 5, "step ") == 0 ? " ring " : " ");
  return words;
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
      if (e.kind == trace::Kind::ring_step && e.step >= 0 && e.phase != "recompute") {
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

}  // namespace ringside::viz

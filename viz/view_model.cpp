// The viewer's model of a timeline: the time axis, the lanes and groups of the layout, each
// rank's activity and exposed communication, and its memory series.
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

// Whether some memory sample of `r` holds bytes: a memory plot of none would be an empty lane
// (a modeled step records no memory).
bool holds_memory(const RankTrace& r) {
  return std::any_of(r.memory.begin(), r.memory.end(), [](const trace::MemorySample& m) { return m.total() > 0; });
}

// A GPU's full lanes from y down: its compute stream, as many rows high as its events nest
// deep; its comm lanes, one per overlapping collective; its memory plot. A lane with nothing to
// draw (no compute, no communication, no memory held) is left out. Returns the y below them.
float add_full_lanes(TimelineLayout& l, Group& g, const TraceData& t, size_t p, float y, const LayoutOptions& o) {
  const RankTrace& r = t.ranks[p];
  const std::string gpu = row_name(t.run, r.rank);
  std::vector<size_t> order(r.events.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) {
    const Event &x = r.events[a], &z = r.events[b];
    return x.ts_ns != z.ts_ns ? x.ts_ns < z.ts_ns : x.dur_ns > z.dur_ns;
  });
  Lane compute = make_lane(Lane::compute, p, 0, y, 0, o.row, gpu + " compute");
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
        std::string name = gpu + " comm";  // "GPU 0 comm", then "GPU 0 comm 2", ...
        if (k) name += ' ', name += std::to_string(k + 1);
        comm.push_back(make_lane(Lane::comm, p, int(k), 0, o.row * 0.75f, 0, name));
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
  if (!compute.events.empty()) {
    // One row per nesting level that some event reaches: no empty rows beneath the deepest.
    compute.height = o.row * float(*std::max_element(compute.depth.begin(), compute.depth.end()) + 1);
    y += compute.height;
    g.lanes.push_back(l.lanes.size());
    l.lanes.push_back(std::move(compute));
  }
  for (Lane& c : comm) {
    c.y = y;
    y += c.height;
    g.lanes.push_back(l.lanes.size());
    l.lanes.push_back(std::move(c));
  }
  if (holds_memory(r)) {
    g.lanes.push_back(l.lanes.size());
    l.lanes.push_back(make_lane(Lane::memory, p, 0, y, o.memory, 0, gpu + " " + memory_words(t.run)));
    y += o.memory;
  }
  return y + o.gap;
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
        g.ring_steps |= e.kind == trace::Kind::ring_step;
        if (e.kind != trace::Kind::phase) continue;
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
    g.header = (g.collapsed ? o.collapsed_header : o.header) + float(std::max(1, o.title_rows) - 1) * o.title_row +
               (g.ring_steps ? o.step_row : 0);
    y += g.header;
    if (!g.collapsed) {
      for (size_t p : g.processes) y = add_full_lanes(l, g, t, p, y, o);
    } else {
      // One summary row per GPU (thinner with many), a GPU drilled into in full after its row,
      // and one memory plot: the GPU of highest peak (none when no GPU holds memory).
      const float row = std::max(2.0f, std::min(o.summary, o.overview / float(std::max<size_t>(1, g.processes.size()))));
      size_t peak_process = g.processes.empty() ? 0 : g.processes.front();
      int64_t highest = -1;
      for (size_t p : g.processes) {
        const RankTrace& r = t.ranks[p];
        if (const int64_t peak = layer_peak(r).bytes; peak > highest) highest = peak, peak_process = p;
        g.lanes.push_back(l.lanes.size());
        l.lanes.push_back(make_lane(Lane::summary, p, 0, y, row, row, row_name(t.run, r.rank)));
        y += row;
        if (std::find(o.expanded.begin(), o.expanded.end(), std::make_pair(gi, r.rank)) != o.expanded.end())
          y = add_full_lanes(l, g, t, p, y + 2, o);
      }
      if (highest > 0) {  // the GPU of highest peak holds some memory: its plot
        g.lanes.push_back(l.lanes.size());
        l.lanes.push_back(make_lane(Lane::memory, peak_process, 0, y + 1, o.group_memory, 0,
                                    memory_words(t.run) + ", " + row_name(t.run, t.ranks[peak_process].rank) + " (peak)"));
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
    if (e.stream == Stream::compute && e.dur_ns > 0 && trace::is_work(e.kind))
      out.push_back({e.ts_ns, e.end_ns(), color_of_kind(e.kind)});
  for (const Interval& iv : exposed) out.push_back({iv.begin, iv.end, kExposedColor});
  std::stable_sort(out.begin(), out.end(), [](const Activity& a, const Activity& b) { return a.begin < b.begin; });
  return out;
}

std::vector<Interval> exposed_intervals(const RankTrace& r) {
  std::vector<Interval> compute, comm;
  for (const Event& e : r.events) {
    if (e.stream == Stream::comm) comm.push_back({e.ts_ns, e.end_ns()});
    else if (trace::is_work(e.kind))
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

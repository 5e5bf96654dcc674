#include "trace/metrics.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <map>

namespace ringside::trace {

std::vector<Interval> merge_intervals(std::vector<Interval> v) {
  std::erase_if(v, [](const Interval& i) { return i.end <= i.begin; });
  std::sort(v.begin(), v.end(), [](const Interval& a, const Interval& b) { return a.begin < b.begin; });
  std::vector<Interval> out;
  for (const Interval& i : v) {
    if (!out.empty() && i.begin <= out.back().end) out.back().end = std::max(out.back().end, i.end);
    else out.push_back(i);
  }
  return out;
}

int64_t length(const std::vector<Interval>& merged) {
  int64_t n = 0;
  for (const Interval& i : merged) n += i.end - i.begin;
  return n;
}

int64_t intersection_length(const std::vector<Interval>& a, const std::vector<Interval>& b) {
  int64_t n = 0;
  size_t i = 0, j = 0;
  while (i < a.size() && j < b.size()) {
    const int64_t lo = std::max(a[i].begin, b[j].begin), hi = std::min(a[i].end, b[j].end);
    if (hi > lo) n += hi - lo;
    (a[i].end < b[j].end ? i : j)++;
  }
  return n;
}

double Breakdown::overlap_pct() const {
  return comm_ns > 0 ? 100.0 * double(overlap_ns) / double(comm_ns) : std::numeric_limits<double>::quiet_NaN();
}

Breakdown& Breakdown::operator+=(const Breakdown& o) {
  add_saturating(window_ns, o.window_ns), add_saturating(compute_ns, o.compute_ns), add_saturating(comm_ns, o.comm_ns);
  add_saturating(overlap_ns, o.overlap_ns), add_saturating(exposed_comm_ns, o.exposed_comm_ns), add_saturating(idle_ns, o.idle_ns);
  return *this;
}

namespace {

// Compute: the compute stream's work, not what a rank waits in nor the spans that only group
// other events.
bool is_compute(const Event& e) { return e.stream == Stream::compute && is_work(e.kind); }

// The breakdown of compute and comm intervals over [begin, end), everything clipped to it.
Breakdown breakdown(std::vector<Interval> compute, std::vector<Interval> comm, int64_t begin, int64_t end) {
  auto clip = [&](std::vector<Interval>& v) {
    for (Interval& i : v) i.begin = std::max(i.begin, begin), i.end = std::min(i.end, end);
    v = merge_intervals(std::move(v));
  };
  clip(compute);
  clip(comm);
  Breakdown b;
  b.window_ns = std::max<int64_t>(0, end - begin);
  b.compute_ns = length(compute);
  b.comm_ns = length(comm);
  b.overlap_ns = intersection_length(compute, comm);
  b.exposed_comm_ns = b.comm_ns - b.overlap_ns;
  b.idle_ns = b.window_ns - (b.compute_ns + b.comm_ns - b.overlap_ns);
  return b;
}

Breakdown breakdown_of(const std::vector<const Event*>& evs, int64_t begin, int64_t end) {
  std::vector<Interval> compute, comm;
  for (const Event* e : evs) {
    if (e->stream == Stream::comm) comm.push_back({e->ts_ns, e->end_ns()});
    else if (is_compute(*e)) compute.push_back({e->ts_ns, e->end_ns()});
  }
  return breakdown(std::move(compute), std::move(comm), begin, end);
}

}  // namespace

std::optional<Interval> phase_window(const RankTrace& r) {
  std::optional<Interval> w;
  for (const Event& e : r.events)
    if (e.kind == Kind::phase) {
      if (!w) w = Interval{e.ts_ns, e.end_ns()};
      w->begin = std::min(w->begin, e.ts_ns), w->end = std::max(w->end, e.end_ns());
    }
  return w;
}

MemoryPeak memory_peak(const RankTrace& r, int64_t begin, int64_t end) {
  MemoryPeak p;
  const MemorySample* carried = nullptr;  // live when the window opens
  for (const MemorySample& m : r.memory) {
    if (m.ts_ns < begin) {
      carried = &m;
      continue;
    }
    if (m.ts_ns > end) break;
    if (carried) {  // first, at the window's start: a later sample must exceed it
      p.bytes = carried->total(), p.ts_ns = begin, p.by_category = carried->bytes;
      carried = nullptr;
    }
    if (m.total() > p.bytes) p.bytes = m.total(), p.ts_ns = m.ts_ns;
    for (int c = 0; c < kNumMemCategories; ++c) p.by_category[c] = std::max(p.by_category[c], m.bytes[c]);
  }
  if (carried) p.bytes = carried->total(), p.ts_ns = begin, p.by_category = carried->bytes;  // nothing inside
  return p;
}

namespace {

// A ring step's key: (phase order, step), so that the forward's steps come before the backward's.
using StepKey = std::pair<int, int>;

// A strategy's ring steps, summed as its ranks are added: each step's metrics, and the
// duration of each rank's span of it (for the step's imbalance).
struct StepTally {
  std::map<StepKey, StepMetrics> steps;
  std::map<StepKey, std::vector<double>> durations;
};

// The ranks of each strategy, the strategies in the order they first appear in the trace; `out`
// gets one StrategyMetrics for each, named.
std::vector<std::vector<const RankTrace*>> group_by_strategy(const TraceData& t, std::vector<StrategyMetrics>& out) {
  std::map<std::string, size_t> index;
  std::vector<std::vector<const RankTrace*>> members;
  for (const RankTrace& r : t.ranks) {
    auto [it, fresh] = index.try_emplace(r.strategy, out.size());
    if (fresh) {
      out.push_back({});
      out.back().strategy = r.strategy;
      members.emplace_back();
    }
    members[it->second].push_back(&r);
  }
  return members;
}

// The window of a strategy: the forward and backward of every rank, or the selection; without
// phases, all its events; [0, 0] without events.
Interval strategy_window(const std::vector<const RankTrace*>& ranks, std::optional<Interval> window) {
  int64_t lo = std::numeric_limits<int64_t>::max(), hi = std::numeric_limits<int64_t>::min();
  int64_t any_lo = lo, any_hi = hi;
  for (const RankTrace* r : ranks)
    for (const Event& e : r->events) {
      any_lo = std::min(any_lo, e.ts_ns), any_hi = std::max(any_hi, e.end_ns());
      if (e.kind == Kind::phase) lo = std::min(lo, e.ts_ns), hi = std::max(hi, e.end_ns());
    }
  if (lo > hi) lo = any_lo, hi = any_hi;
  if (window) lo = window->begin, hi = window->end;
  if (lo > hi) lo = hi = 0;  // no events at all
  return {lo, hi};
}

// One rank's time over the window [lo, hi], and its bytes, FLOPs and memory peak. With
// `selected` (a window the caller chose) those count in the window too; else over the rank's
// own forward + backward (ranks start and end at different times; what a rank holds while it
// sets up is not the layer's).
RankMetrics rank_metrics(const RankTrace& r, const std::vector<const Event*>& evs, int64_t lo, int64_t hi, bool selected) {
  RankMetrics rm;
  rm.rank = r.rank;
  rm.time = breakdown_of(evs, lo, hi);
  int64_t rlo = lo, rhi = hi;
  if (!selected)
    if (const auto own = phase_window(r)) rlo = own->begin, rhi = own->end;
  for (const Event* e : evs) {
    if (e->ts_ns < rlo || e->ts_ns >= rhi) continue;
    if (e->stream == Stream::comm && e->direction == Direction::send) add_saturating(rm.bytes_sent, e->bytes);
    if (is_compute(*e)) rm.flops += e->flops;
  }
  const MemoryPeak peak = memory_peak(r, rlo, rhi);
  rm.peak_memory_bytes = peak.bytes, rm.peak_memory_ts_ns = peak.ts_ns, rm.peak_by_category = peak.by_category;
  rm.has_memory = !r.memory.empty();
  return rm;
}

// All of a rank's compute, merged.
std::vector<Interval> compute_intervals(const std::vector<const Event*>& evs) {
  std::vector<Interval> compute_all;
  for (const Event* e : evs)
    if (is_compute(*e)) compute_all.push_back({e->ts_ns, e->end_ns()});
  return merge_intervals(std::move(compute_all));
}

// Ring steps: one rank's step spans inside [lo, hi], and what ran and moved in each, added to
// the tally.
void add_ring_steps(const std::vector<const Event*>& evs, const std::vector<Interval>& compute_all, int64_t lo, int64_t hi,
                    StepTally& tally) {
  std::map<StepKey, std::vector<const Event*>> in_step;
  std::map<StepKey, Interval> span;
  for (const Event* e : evs) {
    if (e->step < 0 || e->phase == "recompute") continue;  // the forward's steps again: not steps of their own
    const StepKey key{e->phase == "backward" ? 1 : 0, e->step};
    if (e->kind == Kind::ring_step) span[key] = {std::max(e->ts_ns, lo), std::min(e->end_ns(), hi)};
    else in_step[key].push_back(e);
  }
  for (auto& [key, s] : span) {
    if (s.end <= s.begin) continue;  // outside the window
    StepMetrics& st = tally.steps[key];
    st.phase = key.first ? "backward" : "forward";
    st.step = key.second;
    // A step's window runs from its start until its own transfers finish, which may be
    // during the next step (the ring backward passes dK/dV on while computing the next
    // block): whatever compute runs in that window hides them.
    int64_t end = s.end;
    std::vector<Interval> comm;
    for (const Event* e : in_step[key])
      if (e->stream == Stream::comm) end = std::max(end, std::min(e->end_ns(), hi)), comm.push_back({e->ts_ns, e->end_ns()});
    // The rank's compute inside the window: a binary search into its merged intervals.
    auto first = std::lower_bound(compute_all.begin(), compute_all.end(), s.begin,
                                  [](const Interval& i, int64_t t) { return i.end <= t; });
    std::vector<Interval> compute;
    for (auto it = first; it != compute_all.end() && it->begin < end; ++it) compute.push_back(*it);
    const Breakdown b = breakdown(std::move(compute), std::move(comm), s.begin, end);
    st.ranks.push_back(b);
    st.total += b;
    for (const Event* e : in_step[key])
      if (e->stream == Stream::comm && e->direction == Direction::send) add_saturating(st.bytes_sent, e->bytes);
    tally.durations[key].push_back(double(s.end - s.begin));
    st.span_ns.push_back(s.end - s.begin);
  }
}

// Communication per sublayer: one rank's transfers posted in each against all of its compute
// over [lo, hi], added to `by_sublayer` (a sublayer joins it when it first sends).
void add_sublayer_comm(const std::vector<const Event*>& evs, const std::vector<Interval>& compute_all, int64_t lo, int64_t hi,
                       std::vector<std::pair<std::string, Breakdown>>& by_sublayer) {
  std::map<std::string, std::vector<Interval>> comm_of;
  for (const Event* e : evs)
    if (e->stream == Stream::comm) {
      auto [it, fresh] = comm_of.try_emplace(e->sublayer);
      if (fresh && std::find_if(by_sublayer.begin(), by_sublayer.end(),
                                [&](auto& p) { return p.first == e->sublayer; }) == by_sublayer.end())
        by_sublayer.emplace_back(e->sublayer, Breakdown{});
      it->second.push_back({e->ts_ns, e->end_ns()});
    }
  for (auto& [name, comm] : comm_of) {
    const Breakdown b = breakdown(compute_all, std::move(comm), lo, hi);
    for (auto& [n, total] : by_sublayer)
      if (n == name) add_saturating(total.comm_ns, b.comm_ns), add_saturating(total.overlap_ns, b.overlap_ns), add_saturating(total.exposed_comm_ns, b.exposed_comm_ns);
  }
}

// Fills in one strategy's metrics from its ranks (sorted here into rank order): the window, each
// rank's breakdown, the ring steps, the communication by sublayer and by collective kind, and the imbalances.
void strategy_metrics(StrategyMetrics& sm, std::vector<const RankTrace*>& ranks, std::optional<Interval> window) {
  std::sort(ranks.begin(), ranks.end(), [](const RankTrace* a, const RankTrace* b) { return a->rank < b->rank; });
  const Interval w = strategy_window(ranks, window);
  const int64_t lo = w.begin, hi = w.end;
  sm.begin_ns = lo, sm.end_ns = hi;

  std::vector<double> computes;
  StepTally tally;
  for (const RankTrace* r : ranks) {
    std::vector<const Event*> evs;
    for (const Event& e : r->events) evs.push_back(&e);
    const RankMetrics rm = rank_metrics(*r, evs, lo, hi, window.has_value());
    const std::vector<Interval> compute_all = compute_intervals(evs);
    add_ring_steps(evs, compute_all, lo, hi, tally);
    add_sublayer_comm(evs, compute_all, lo, hi, sm.comm_by_sublayer);
    computes.push_back(double(rm.time.compute_ns));
    sm.total += rm.time;
    sm.ranks.push_back(rm);
  }
  sm.comm_by_kind = comm_by_kind(ranks, lo, hi);
  // Imbalance: max / mean of the ranks' compute, and of each step's spans.
  sm.compute_imbalance = max_over_mean(computes);
  for (auto& [key, st] : tally.steps) {
    st.imbalance = max_over_mean(tally.durations[key]);
    sm.steps.push_back(std::move(st));
  }
}

}  // namespace

std::vector<StrategyMetrics> compute_metrics(const TraceData& t, std::optional<Interval> window) {
  std::vector<StrategyMetrics> out;
  std::vector<std::vector<const RankTrace*>> members = group_by_strategy(t, out);
  for (size_t si = 0; si < out.size(); ++si) strategy_metrics(out[si], members[si], window);
  return out;
}

std::vector<PhaseMetrics> phase_metrics(const TraceData& t, const StrategyMetrics& m) {
  struct Phase {
    int64_t first = std::numeric_limits<int64_t>::max();  // its earliest start on any rank
    std::vector<std::vector<const Event*>> evs;           // per rank, in m.ranks' order
  };
  std::map<std::string, Phase> phases;
  for (size_t i = 0; i < m.ranks.size(); ++i) {
    const RankTrace* r = nullptr;
    for (const RankTrace& c : t.ranks)
      if (c.strategy == m.strategy && c.rank == m.ranks[i].rank) r = &c;
    if (!r) continue;
    for (const Event& e : r->events) {
      if (e.kind == Kind::phase && e.name != e.phase) continue;  // a window, not a phase of it
      Phase& p = phases[e.phase];
      p.evs.resize(m.ranks.size());
      p.evs[i].push_back(&e);
      p.first = std::min(p.first, e.ts_ns);
    }
  }
  std::vector<std::pair<int64_t, PhaseMetrics>> out;
  for (auto& [name, p] : phases) {
    PhaseMetrics pm;
    pm.phase = name;
    for (std::vector<const Event*>& evs : p.evs) {
      // The span: its work, waits and transfers (and a comm stream's collective calls: a PyTorch
      // run's c10d ops), and its own `phase` span; not the spans that only enclose others (a
      // PyTorch run's ranges).
      int64_t lo = std::numeric_limits<int64_t>::max(), hi = std::numeric_limits<int64_t>::min();
      for (const Event* e : evs)
        if (e->kind == Kind::phase || e->stream == Stream::comm || !is_container(e->kind)) lo = std::min(lo, e->ts_ns), hi = std::max(hi, e->end_ns());
      lo = std::max(lo, m.begin_ns), hi = std::min(hi, m.end_ns);
      pm.ranks.push_back(lo < hi ? breakdown_of(evs, lo, hi) : Breakdown{});
    }
    out.emplace_back(p.first, std::move(pm));
  }
  std::stable_sort(out.begin(), out.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
  std::vector<PhaseMetrics> sorted;
  for (auto& [first, pm] : out) sorted.push_back(std::move(pm));
  return sorted;
}

SlowestRank slowest_rank(const StrategyMetrics& m) {
  SlowestRank out;
  if (m.ranks.size() < 2) return out;
  auto busy = [](const RankMetrics& r) { return r.time.compute_ns + r.time.exposed_comm_ns; };
  const RankMetrics* slowest = &m.ranks.front();
  for (const RankMetrics& r : m.ranks)
    if (busy(r) > busy(*slowest)) slowest = &r;
  out.rank = slowest->rank, out.mine = slowest->time;
  const int64_t n = int64_t(m.ranks.size()) - 1;
  for (const RankMetrics& r : m.ranks)
    if (&r != slowest) out.others += r.time;
  for (int64_t* v : {&out.others.window_ns, &out.others.compute_ns, &out.others.comm_ns, &out.others.overlap_ns,
                     &out.others.exposed_comm_ns, &out.others.idle_ns})
    *v /= n;
  out.compute_excess_ns = out.mine.compute_ns - out.others.compute_ns;
  out.exposed_excess_ns = out.mine.exposed_comm_ns - out.others.exposed_comm_ns;
  out.cause = out.compute_excess_ns >= out.exposed_excess_ns ? "compute" : "exposed communication";
  return out;
}

int64_t layer_ns(const StrategyMetrics& m) {
  int64_t t = 0;
  for (const RankMetrics& r : m.ranks) t = std::max(t, r.time.window_ns);
  return t;
}

std::optional<Breakdown> sublayer_comm(const StrategyMetrics& m, const std::string& sublayer) {
  for (const auto& [name, b] : m.comm_by_sublayer)
    if (name == sublayer) return b;
  return std::nullopt;
}

double max_over_mean(const std::vector<double>& v) {
  if (v.empty()) return 1;
  double sum = 0, hi = 0;
  for (double x : v) sum += x, hi = std::max(hi, x);
  return sum > 0 ? hi / (sum / double(v.size())) : 1;
}

}  // namespace ringside::trace

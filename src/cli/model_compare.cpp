// `ringside model --compare RUN`: a measured run beside the model of the configuration the flags
// name, phase by phase.
//
// Both sides are split by one function, trace::phase_metrics, over trace::compute_metrics'
// window: for each phase (Event::phase: forward and backward, then the rest by name), per rank,
//
//   time     the phase's span: from the first start to the last end of the rank's events in it
//   compute  the union of the compute intervals of its events (HTA's rules, as trace-stats)
//   comm     the union of its communication intervals
//
// and for the whole window (a PyTorch run's ProfilerStep, ringside's forward + backward, from
// the first rank's start to the last rank's end) the whole's compute and comm. Each figure is
// its slowest rank's: the largest over the ranks, each figure its own rank (as model::
// StrategyReport's `slowest`, which `model --json` writes). The measured side is wall-clock time
// of the user's run, whatever its machine; the modeled side, the dry run replayed on --hw.
#include <algorithm>
#include <cstdio>

#include "cli/commands.h"
#include "core/error.h"
#include "model/model.h"
#include "trace/kineto.h"
#include "trace/metrics.h"

namespace ringside::cli {

namespace {

std::string joined(const std::vector<std::string>& v) {
  std::string s;
  for (const std::string& x : v) s += (s.empty() ? "" : " ") + x;
  return s;
}

std::string listed(const std::vector<std::string>& groups) {
  std::string s;
  for (const std::string& g : groups) s += (s.empty() ? "" : ", ") + (g.empty() ? std::string("(unnamed)") : g);
  return s;
}

}  // namespace

trace::TraceData read_measured(const ModelCommandOptions& o, const RunPlan& plan) {
  const std::string what = "model --compare " + joined(o.compare);
  trace::TraceData t = trace::read_traces(o.compare, trace::clock_align_named(o.align));
  if (t.run.modeled)
    throw ConfigError(what + ": a modeled trace (" + t.run.producer + "), not a measured run; give the run it models");
  // The recorded groups (a ringside compare trace holds several, and modeled twins beside them).
  std::vector<std::string> groups;
  for (const trace::RankTrace& r : t.ranks)
    if (!t.run.is_modeled(r.strategy) && std::find(groups.begin(), groups.end(), r.strategy) == groups.end())
      groups.push_back(r.strategy);
  std::string group = groups.size() == 1 ? groups.front() : plan.name;
  if (std::find(groups.begin(), groups.end(), group) == groups.end() && !groups.empty())
    throw ConfigError(what + ": its recorded groups are " + listed(groups) + "; none is " + plan.name +
                      ", the configuration modeled");
  std::erase_if(t.ranks, [&](const trace::RankTrace& r) { return r.strategy != group || t.run.is_modeled(r.strategy); });
  t.flows.clear();  // indices into the ranks before the cut; nothing here reads them
  size_t events = 0;
  bool phased = false;
  for (const trace::RankTrace& r : t.ranks)
    for (const trace::Event& e : r.events) ++events, phased = phased || e.phase == "forward" || e.phase == "backward";
  if (events == 0) throw ConfigError(what + ": the trace holds no events");
  if (int(t.ranks.size()) != o.ranks)
    throw ConfigError(detail::concat(what, ": the run has ", t.ranks.size(), " rank", t.ranks.size() == 1 ? "" : "s",
                                     ", --ranks is ", o.ranks, ": they must be equal"));
  if (!phased)
    throw ConfigError(what + ": the run has no forward or backward phase to compare; the measured run needs "
                             "record_function ranges named forward and backward around its work, or autograd's backward ops");
  return t;
}

namespace {

// A duration with 4 significant digits in the unit that keeps it in [1, 1000): "3.421 ms".
std::string duration(int64_t ns) {
  double v = double(ns);
  const char* unit = "ns";
  if (v >= 1e9) v /= 1e9, unit = "s";
  else if (v >= 1e6) v /= 1e6, unit = "ms";
  else if (v >= 1e3) v /= 1e3, unit = "us";
  char b[32];
  std::snprintf(b, sizeof b, "%.4g %s", v, unit);
  return b;
}

std::string ratio(int64_t measured, int64_t modeled) {
  if (modeled <= 0) return "-";
  const double r = double(measured) / double(modeled);
  char b[32];
  std::snprintf(b, sizeof b, r >= 1000 ? "%.0f" : "%.4g", r);
  return b;
}

// One side's figures: per phase the slowest rank's time, compute and comm (ns), and the whole's.
struct Figures {
  int64_t time = 0, compute = 0, comm = 0;
};
struct Side {
  std::vector<std::pair<std::string, Figures>> phases;  // in phase_metrics' order
  Figures whole;                                        // time: the window
  const Figures* phase(const std::string& name) const {
    for (const auto& [n, f] : phases)
      if (n == name) return &f;
    return nullptr;
  }
};

// The one split both sides go through: compute_metrics' window and phase_metrics, the largest
// over the ranks of each figure. `t` holds one group.
Side side_of(const trace::TraceData& t) {
  Side s;
  const std::vector<trace::StrategyMetrics> all = trace::compute_metrics(t);
  if (all.empty()) return s;
  const trace::StrategyMetrics& m = all.front();
  s.whole.time = m.end_ns - m.begin_ns;
  for (const trace::RankMetrics& r : m.ranks)
    s.whole.compute = std::max(s.whole.compute, r.time.compute_ns), s.whole.comm = std::max(s.whole.comm, r.time.comm_ns);
  for (const trace::PhaseMetrics& p : trace::phase_metrics(t, m)) {
    Figures f;
    for (const trace::Breakdown& b : p.ranks)
      f.time = std::max(f.time, b.window_ns), f.compute = std::max(f.compute, b.compute_ns), f.comm = std::max(f.comm, b.comm_ns);
    s.phases.emplace_back(p.phase, f);
  }
  return s;
}

std::string label(const std::string& phase) { return phase.empty() ? "(no phase)" : phase; }

// The measured run in words: who recorded it, on how many ranks, where.
std::string describe(const trace::TraceData& t) {
  std::string s = t.run.producer == trace::kKinetoProducer ? std::string(trace::kKinetoProducer) + " traces"
                  : t.run.producer.empty()                 ? std::string("a trace")
                                                           : t.run.producer + "'s trace";
  s += detail::concat(" of ", t.ranks.size(), " ranks");
  if (t.run.producer != trace::kKinetoProducer && !t.ranks.empty() && !t.ranks.front().strategy.empty())
    s += " (" + t.ranks.front().strategy + ")";
  if (!t.run.backend.empty()) s += ", " + t.run.backend + " backend";
  if (!t.run.device.empty()) s += ", on " + t.run.device;
  return s;
}

// The modeled run as a profiler sees its GPU: each op's kernels without the launch gaps the model
// charges before them (its op_kernels x launch_us), since a profiler's kernels exclude those too.
trace::TraceData kernels_only(trace::TraceData t, const ModelRun& run) {
  const double launch_s = model::at_roofline(run.hw, run.modeling) ? 0 : run.hw.efficiency.launch_s;
  for (trace::RankTrace& r : t.ranks)
    for (trace::Event& e : r.events) {
      if (e.stream != trace::Stream::compute || !trace::is_work(e.kind) || trace::is_container(e.kind)) continue;
      const int64_t gap = std::min<int64_t>(e.dur_ns, std::llround(model::op_kernels(e, run.hw, run.modeling) * launch_s * 1e9));
      e.ts_ns += gap, e.dur_ns -= gap;
    }
  return t;
}

}  // namespace

void print_comparison(const ModelCommandOptions& o, const ModelRun& run) {
  const trace::TraceData& measured = *run.measured;
  const Side got = side_of(measured), want = side_of(kernels_only(run.modeled, run));
  // Rows: forward and backward first, then the measured run's other phases, then the model's.
  std::vector<std::string> rows;
  auto add = [&](const std::string& p) {
    if (std::find(rows.begin(), rows.end(), p) == rows.end()) rows.push_back(p);
  };
  for (const char* p : {"forward", "backward"})
    if (got.phase(p) || want.phase(p)) add(p);
  for (const auto& [p, f] : got.phases) add(p);
  for (const auto& [p, f] : want.phases) add(p);

  const std::string modeled_head = "modeled (" + run.hw.name + ")";
  std::printf("\n  measured against modeled: %s\n", joined(o.compare).c_str());
  std::printf("    measured   %s: the wall clock of that run\n", describe(measured).c_str());
  if (measured.run.device == "cpu") std::printf("               (CPU ranks that share cores wait for them inside their ops)\n");
  std::printf("    modeled    %s%s on %s, %s, %s rates: this configuration's schedule as ringside runs it\n",
              o.only == "attention" ? "the attention of " : "", run.plan->name.c_str(), run.hw.name.c_str(), run.modeling.dtype.c_str(),
              run.modeling.efficiency.c_str());
  std::printf("    each figure is its slowest rank's (the largest over the %d ranks, each figure its own); time: the phase's\n"
              "    span (its events' first start to last end); compute, comm: unions of intervals, as trace-stats counts them;\n"
              "    the modeled compute without the launch gaps the model charges before each kernel, as a profiler counts kernels\n",
              o.ranks);
  std::printf("  %-18s %-8s %26s %22s %17s\n", "phase", "figure", "measured (the run's clock)", modeled_head.c_str(),
              "measured/modeled");
  auto row = [&](const std::string& phase, const char* figure, const Figures* m, const Figures* w, int64_t Figures::*field) {
    std::printf("  %-18s %-8s %26s %22s %17s\n", phase.c_str(), figure, m ? duration(m->*field).c_str() : "-",
                w ? duration(w->*field).c_str() : "-", m && w ? ratio(m->*field, w->*field).c_str() : "-");
  };
  for (const std::string& p : rows) {
    const Figures *m = got.phase(p), *w = want.phase(p);
    row(label(p), "time", m, w, &Figures::time);
    row("", "compute", m, w, &Figures::compute);
    row("", "comm", m, w, &Figures::comm);
  }
  row("the whole", "window", &got.whole, &want.whole, &Figures::time);
  row("", "compute", &got.whole, &want.whole, &Figures::compute);
  row("", "comm", &got.whole, &want.whole, &Figures::comm);
  bool measured_only = false;
  for (const std::string& p : rows) {
    if (got.phase(p) && !want.phase(p))
      measured_only = true, std::printf("  %s: measured only; the model has no phase of that name\n", label(p).c_str());
    if (!got.phase(p) && want.phase(p)) std::printf("  %s: modeled only; the run has no phase of that name\n", label(p).c_str());
  }
  if (measured_only) {
    std::string phases;
    for (const auto& [p, f] : want.phases) phases += (phases.empty() ? "" : ", ") + label(p);
    const bool grad_sync = std::any_of(run.modeled.ranks.begin(), run.modeled.ranks.end(), [](const trace::RankTrace& r) {
      return std::any_of(r.events.begin(), r.events.end(), [](const trace::Event& e) { return e.sublayer == "grad_sync"; });
    });
    std::printf("  (the model's phases: %s%s)\n", phases.c_str(),
                o.only == "attention" ? "; --only attention models the attention alone, no gradient all-reduce"
                : grad_sync           ? "; its gradient all-reduce, sublayer grad_sync, is part of its backward"
                                      : "");
  }
  std::printf("  the whole: the window from the first rank's start to the last rank's end (a PyTorch run's ProfilerStep,\n"
              "  ringside's forward + backward), its compute and comm those of all its phases together\n");
}

}  // namespace ringside::cli

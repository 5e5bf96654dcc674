// `ringside trace-stats FILE`: the metrics of any trace file (trace/metrics.h), per strategy,
// per rank, per collective kind (trace/comm_stats.h) and per ring step. compare prints the same
// tables, but the collective kinds, for the run it just traced.
#include <algorithm>
#include <cmath>
#include <cstdio>

#include "cli/commands.h"
#include "cli/format.h"
#include "core/error.h"
#include "core/output.h"
#include "trace/kineto.h"
#include "trace/metrics.h"

namespace ringside::cli {

namespace {

std::string ms(int64_t ns) {
  if (ns > 0 && ns < 1000) return std::to_string(ns) + " ns";
  return format_seconds(double(ns) * 1e-9);
}

std::string name_of(const trace::StrategyMetrics& s) { return s.strategy.empty() ? "(unnamed)" : s.strategy; }

std::string pct(double p) {
  if (std::isnan(p)) return "-";
  char b[16];
  std::snprintf(b, sizeof b, "%.0f%%", p);
  return b;
}

double us(int64_t ns) { return double(ns) / 1000.0; }

nlohmann::json breakdown_json(const trace::Breakdown& b) {
  nlohmann::json j = {{"window_us", us(b.window_ns)},   {"compute_us", us(b.compute_ns)},
                      {"comm_us", us(b.comm_ns)},       {"overlap_us", us(b.overlap_ns)},
                      {"exposed_comm_us", us(b.exposed_comm_ns)}, {"idle_us", us(b.idle_ns)}};
  j["overlap_pct"] = std::isnan(b.overlap_pct()) ? nlohmann::json(nullptr) : nlohmann::json(b.overlap_pct());
  return j;
}

// A ringside trace's header: who wrote it, its ranks, backend and clocks.
void print_ringside_header(const trace::TraceData& t, const std::vector<trace::StrategyMetrics>& metrics) {
  if (!t.run.version.empty()) std::printf("  written by ringside %s", t.run.version.c_str());
  else std::printf("  a foreign trace (no ringside otherData)");
  size_t P = 0;
  for (const auto& s : metrics) P = std::max(P, s.ranks.size());
  std::printf(", P = %zu", P);
  if (!t.run.backend.empty()) std::printf(", %s backend", t.run.backend.c_str());
  if (!t.run.layout.empty()) std::printf(", ring layout %s", t.run.layout.c_str());
  int64_t worst_clock = 0;
  for (const trace::RankTrace& r : t.ranks) worst_clock = std::max(worst_clock, r.clock_uncertainty_ns);
  std::printf("\n  %zu process%s, %zu flow%s; clock alignment uncertainty %s\n\n", t.ranks.size(),
              t.ranks.size() == 1 ? "" : "es", t.flows.size(), t.flows.size() == 1 ? "" : "s",
              worst_clock ? ms(worst_clock).c_str() : "0 (one clock)");
}

// A Kineto run's header: what was read, and how its clocks were put together.
void print_kineto_header(const trace::TraceData& t) {
  std::printf("  %s traces of %zu rank%s (of %d), %s backend, on %s\n", trace::kKinetoProducer, t.ranks.size(),
              t.ranks.size() == 1 ? "" : "s", t.run.ranks, t.run.backend.empty() ? "an unnamed" : t.run.backend.c_str(),
              t.run.device.c_str());
  if (int(t.ranks.size()) < t.run.ranks)
    std::printf("  only these ranks' files were given: the others' sends, receives and ring steps are not paired or found\n");
  std::printf("  clocks: %s\n", t.run.clock.c_str());
  for (const trace::RankTrace& r : t.ranks)
    if (r.clock_offset_ns != 0 || r.clock_uncertainty_ns != 0)
      std::printf("    rank %d %s\n", r.rank, trace::clock_shift_text(t.run, r).c_str());
  std::printf("  measured by the profiler on the run's own clocks (so they vary from run to run); sent: the sends'\n"
              "  bytes (collectives are in the table by kind); a gloo send's or receive's time runs from its post to\n"
              "  its wait's return, so its busbw is a lower bound\n");
  std::printf("  %zu send%s paired with %s receive%s (flows); times from the earliest ProfilerStep's start\n\n",
              t.flows.size(), t.flows.size() == 1 ? "" : "s", t.flows.size() == 1 ? "its" : "their",
              t.flows.size() == 1 ? "" : "s");
}

// A bandwidth in GB/s with three figures or so; "-" when unknown.
std::string gbps(double v) {
  if (std::isnan(v)) return "-";
  char b[24];
  std::snprintf(b, sizeof b, v < 1 ? "%.3f" : v < 100 ? "%.2f" : "%.1f", v);
  return b;
}

nlohmann::json number_or_null(double v) { return std::isnan(v) ? nlohmann::json(nullptr) : nlohmann::json(v); }

// Communication by collective kind (trace/comm_stats.h): per strategy and kind, its calls with
// nccl-tests' size, time, algbw and busbw.
void print_comm_by_kind(const std::vector<trace::StrategyMetrics>& all, int w) {
  std::printf("\n  communication by collective kind (nccl-tests' PERFORMANCE.md). A call: one rank's part of a collective, or\n"
              "  one send. size: S as nccl-tests' size column, time: from the call's first transfer's start to its last's end,\n"
              "  both means per call; algbw = sum S / sum time, busbw = sum S x factor(n) / sum time, over every rank's calls:\n");
  std::printf("  %-*s %-15s %6s %5s  %10s  %9s  %10s  %10s\n", w, "strategy", "kind", "calls", "n", "size", "time", "algbw GB/s",
              "busbw GB/s");
  for (const trace::StrategyMetrics& s : all)
    for (const trace::CollectiveStats& k : s.comm_by_kind) {
      const std::string n = k.group_size == 0 ? "-" : k.group_size < 0 ? "mixed" : std::to_string(k.group_size);
      std::printf("  %-*s %-15s %6lld %5s  %10s  %9s  %10s  %10s\n", w, name_of(s).c_str(), trace::to_string(k.kind),
                  (long long)k.calls, n.c_str(), format_bytes(double(k.size_bytes) / double(k.calls)).c_str(),
                  ms(k.time_ns / k.calls).c_str(), gbps(k.algbw_gbps()).c_str(), gbps(k.busbw_gbps()).c_str());
    }
  if (std::all_of(all.begin(), all.end(), [](const trace::StrategyMetrics& s) { return s.comm_by_kind.empty(); }))
    std::printf("  (no transfers)\n");
}

// Per strategy, the rank the others wait for and what makes it so (trace::slowest_rank).
void print_slowest(const std::vector<trace::StrategyMetrics>& all) {
  bool header = false;
  for (const trace::StrategyMetrics& s : all) {
    const trace::SlowestRank w = trace::slowest_rank(s);
    if (w.rank < 0) continue;
    if (!header)
      std::printf("\n  the slowest rank (every rank shares the window: the one busy longest, compute + exposed communication,\n"
                  "  the last to finish; against the other ranks' mean):\n");
    header = true;
    const int64_t extra = w.cause == "compute" ? w.compute_excess_ns : w.exposed_excess_ns;
    std::printf("  %s: rank %d, busy %s of the %s window (compute %s, exposed communication %s, idle %s) against the others' "
                "%s (compute %s, exposed %s, idle %s): its %s, %s more\n",
                name_of(s).c_str(), w.rank, ms(w.busy_ns()).c_str(), ms(w.mine.window_ns).c_str(), ms(w.mine.compute_ns).c_str(),
                ms(w.mine.exposed_comm_ns).c_str(), ms(w.mine.idle_ns).c_str(), ms(w.others_busy_ns()).c_str(),
                ms(w.others.compute_ns).c_str(), ms(w.others.exposed_comm_ns).c_str(), ms(w.others.idle_ns).c_str(), w.cause.c_str(),
                ms(extra).c_str());
    // Busy in communication while computing less than the others: a trace cannot tell a transfer
    // from a wait for a peer, so the cause may be a slower link or a peer that posts late.
    if (w.cause != "compute" && w.compute_excess_ns < 0)
      std::printf("    its compute is %s less than theirs: its time went to communication, which a trace cannot split into\n"
                  "    transfer and waiting for a peer (a slower link, or a peer that posts late, would look alike)\n",
                  ms(-w.compute_excess_ns).c_str());
  }
}

}  // namespace

void add_align_option(CLI::App& c, std::string& align) {
  c.add_option("--align", align, trace::kClockAlignHelp)
      ->check(CLI::IsMember(std::vector<std::string>(std::begin(trace::kClockAlignNames), std::end(trace::kClockAlignNames))))
      ->default_str("auto");
}

void print_timeline(const std::vector<trace::StrategyMetrics>& all, bool with_steps, bool with_kinds) {
  int w = 10;  // the strategy column: as wide as the longest name (ulysses2xring2)
  for (const trace::StrategyMetrics& s : all) w = std::max(w, int(name_of(s).size()));
  std::printf("  %-*s %4s  %9s  %9s  %7s  %9s  %9s  %11s  %10s\n", w, "strategy", "rank", "compute", "comm", "overlap",
              "exposed", "idle", "peak memory", "sent");
  for (const trace::StrategyMetrics& s : all) {
    int64_t peak = -1;
    std::vector<int> at_peak;
    for (const trace::RankMetrics& r : s.ranks) {
      std::printf("  %-*s %4d  %9s  %9s  %7s  %9s  %9s  %11s  %10s\n", w, name_of(s).c_str(), r.rank, ms(r.time.compute_ns).c_str(),
                  ms(r.time.comm_ns).c_str(), pct(r.time.overlap_pct()).c_str(), ms(r.time.exposed_comm_ns).c_str(),
                  ms(r.time.idle_ns).c_str(), r.has_memory ? format_bytes(double(r.peak_memory_bytes)).c_str() : "-",
                  format_bytes(double(r.bytes_sent)).c_str());
      if (r.peak_memory_bytes > peak) peak = r.peak_memory_bytes, at_peak.clear();
      if (r.peak_memory_bytes == peak) at_peak.push_back(r.rank);
    }
    std::string who = at_peak.size() == s.ranks.size() && s.ranks.size() > 1 ? std::string("every rank") : "rank";
    if (who == "rank")
      for (size_t i = 0; i < at_peak.size(); ++i) who += (i ? ", " : " ") + std::to_string(at_peak[i]);
    if (std::none_of(s.ranks.begin(), s.ranks.end(), [](const trace::RankMetrics& r) { return r.has_memory; }))
      who = "not in the trace (no memory counters)";
    std::printf("  %-*s %4s  %9s  %9s  %7s  %9s  %9s  compute imbalance (max / mean) %.2f; peak memory: %s; window %s\n", w, name_of(s).c_str(), "sum",
                ms(s.total.compute_ns).c_str(), ms(s.total.comm_ns).c_str(), pct(s.total.overlap_pct()).c_str(),
                ms(s.total.exposed_comm_ns).c_str(), ms(s.total.idle_ns).c_str(), s.compute_imbalance, who.c_str(),
                ms(s.end_ns - s.begin_ns).c_str());
  }
  // Communication by sublayer: the ring's K/V hops apart from its gradient all-reduce.
  // A PyTorch run's "sublayers" are its record_function ranges (trace/kineto.h).
  const bool ranges = std::all_of(all.begin(), all.end(), [](auto& s) { return s.strategy == trace::kKinetoStrategy; });
  int sw = 10;  // the sublayer column: as wide as the longest name
  for (const trace::StrategyMetrics& s : all)
    for (const auto& [name, b] : s.comm_by_sublayer) sw = std::max(sw, int(name.size()));
  std::printf("\n  communication by %s (all ranks summed; overlap: the part under some compute):\n",
              ranges ? "innermost record_function range" : "sublayer");
  std::printf("  %-*s %-*s  %9s  %7s  %9s\n", w, "strategy", sw, ranges ? "range" : "sublayer", "comm", "overlap", "exposed");
  for (const trace::StrategyMetrics& s : all)
    for (const auto& [name, b] : s.comm_by_sublayer)
      std::printf("  %-*s %-*s  %9s  %7s  %9s\n", w, name_of(s).c_str(), sw, name.empty() ? (ranges ? "(no range)" : "-") : name.c_str(), ms(b.comm_ns).c_str(),
                  pct(b.overlap_pct()).c_str(), ms(b.exposed_comm_ns).c_str());
  if (with_kinds) print_comm_by_kind(all, w);
  if (!with_steps) return;
  for (const trace::StrategyMetrics& s : all) {
    if (s.steps.empty()) continue;
    if (s.strategy == trace::kKinetoStrategy)
      std::printf("\n  %s, per ring step, found from the sends and receives (trace/kineto.h): a step opens with each\n"
                  "  round of posts to the ring's neighbours (several inside one record_function range of the user's are\n"
                  "  one step) and lasts until the next; the phase's last lasts until the phase ends.\n",
                  name_of(s).c_str());
    else
      std::printf("\n  %s, per ring step: one step per ring rank per pass, each computing on the block it holds (K/V; the\n"
                  "  pass-Q ring's: queries) while the next moves (the K/V ring's last step moves none, the pass-Q ring's sends\n"
                  "  its results home; the accumulators hop too: dK/dV with their K/V in the backward, out, lse and dQ with\n"
                  "  their queries).\n",
                  name_of(s).c_str());
    std::printf("  time: the slowest rank's step; compute, comm, exposed: summed over ranks, each rank's step counted\n"
                "  until its transfers end; imbalance: max / mean of the ranks' step times.\n");
    std::printf("  %-9s %4s  %9s  %9s  %9s  %7s  %9s  %10s  %9s\n", "phase", "step", "time", "compute", "comm", "overlap",
                "exposed", "sent", "imbalance");
    for (const trace::StepMetrics& st : s.steps) {
      const int64_t slowest = st.span_ns.empty() ? 0 : *std::max_element(st.span_ns.begin(), st.span_ns.end());
      std::printf("  %-9s %4d  %9s  %9s  %9s  %7s  %9s  %10s  %9.2f\n", st.phase.c_str(), st.step, ms(slowest).c_str(),
                  ms(st.total.compute_ns).c_str(), ms(st.total.comm_ns).c_str(), pct(st.total.overlap_pct()).c_str(),
                  ms(st.total.exposed_comm_ns).c_str(), format_bytes(double(st.bytes_sent)).c_str(), st.imbalance);
    }
  }
}

nlohmann::json metrics_json(const trace::StrategyMetrics& s) {
  nlohmann::json j;
  j["strategy"] = s.strategy;
  j["window_us"] = us(s.end_ns - s.begin_ns);
  j["total"] = breakdown_json(s.total);
  j["compute_imbalance"] = s.compute_imbalance;
  for (const trace::RankMetrics& r : s.ranks) {
    nlohmann::json jr = breakdown_json(r.time);
    jr["rank"] = r.rank;
    if (r.has_memory) jr["peak_memory_bytes"] = r.peak_memory_bytes;
    else jr["peak_memory_bytes"] = nullptr;  // the trace has no memory counters
    jr["peak_memory_at_us"] = us(r.peak_memory_ts_ns - s.begin_ns);
    for (int c = 0; c < kNumMemCategories; ++c)
      jr["peak_by_category"][std::string(to_string(MemCategory(c)))] = r.peak_by_category[c];
    jr["bytes_sent"] = r.bytes_sent;
    jr["flops"] = r.flops;
    j["ranks"].push_back(jr);
  }
  for (const trace::StepMetrics& st : s.steps) {
    nlohmann::json js = breakdown_json(st.total);
    js["phase"] = st.phase;
    js["step"] = st.step;
    js["imbalance"] = st.imbalance;
    js["bytes_sent"] = st.bytes_sent;
    for (int64_t span : st.span_ns) js["span_us"].push_back(us(span));
    j["steps"].push_back(js);
  }
  for (const auto& [name, b] : s.comm_by_sublayer) {
    nlohmann::json jc = breakdown_json(b);
    for (const char* unused : {"window_us", "compute_us", "idle_us"}) jc.erase(unused);
    j["comm_by_sublayer"][name.empty() ? "-" : name] = jc;
  }
  for (const trace::CollectiveStats& k : s.comm_by_kind)
    j["comm_by_kind"][trace::to_string(k.kind)] = {
        {"calls", k.calls},         {"group_size", k.group_size <= 0 ? nlohmann::json(nullptr) : nlohmann::json(k.group_size)},
        {"size_bytes", k.size_bytes}, {"bus_bytes", k.bus_bytes}, {"time_us", us(k.time_ns)},
        {"algbw_gbps", number_or_null(k.algbw_gbps())}, {"busbw_gbps", number_or_null(k.busbw_gbps())}};
  return j;
}

CLI::App* add_trace_stats(CLI::App& app, TraceStatsOptions& o) {
  CLI::App* c = app.add_subcommand("trace-stats", "Print the metrics of a trace file: per strategy, rank, collective kind and ring step");
  c->add_option("files", o.files,
                "a trace written by ringside (compare --trace, run --trace), Chrome trace JSON of X, i, C, M, s and f "
                "events, or PyTorch profiler (Kineto) traces: a folder of them (rank*.json, *.pt.trace.json, .gz too) "
                "or one file per rank")
      ->required();
  add_align_option(*c, o.align);
  c->add_option("--json", o.json, "also write the metrics as JSON")
      ->option_text("FILE")
      ->check(non_empty("--json needs a file name"));
  c->footer(
      "Definitions (Holistic Trace Analysis): compute and comm are unions of intervals; overlap = time\n"
      "computing while communicating / time communicating; exposed = comm not overlapped; idle = the\n"
      "window minus the union of compute and comm (= window - compute - exposed); imbalance = max / mean\n"
      "over ranks of compute time (per ring step: of the step's time). Window: forward + backward (a PyTorch\n"
      "run: its ProfilerStep, from the first rank's start to the last rank's end). Times\n"
      "are wall-clock intervals: with more ranks than cores, an op's interval includes waits for a core.\n"
      "By collective kind (nccl-tests' PERFORMANCE.md, src/trace/comm_stats.h): algbw = size / time, busbw =\n"
      "algbw x 2(n-1)/n (all_reduce), (n-1)/n (all_gather, reduce_scatter, all_to_all), 1 (send/recv, other).");
  return c;
}

int trace_stats_command(const TraceStatsOptions& o) {
  if (!o.json.empty()) {
    // Never a trace it reads, one given or one in a folder given.
    for (const std::string& f : trace::trace_input_files(o.files)) output::check_distinct({{"--json", o.json}}, {{"", f}});
    output::check(o.json, "--json");
  }
  const trace::TraceData t = trace::read_traces(o.files, trace::clock_align_named(o.align));
  const auto metrics = trace::compute_metrics(t);
  std::string names;
  for (const std::string& f : o.files) names += (names.empty() ? "" : " ") + f;
  std::printf("ringside trace-stats: %s\n", names.c_str());
  if (t.run.producer == trace::kKinetoProducer) print_kineto_header(t);
  else print_ringside_header(t, metrics);
  if (metrics.empty()) std::printf("  no events\n");
  else print_timeline(metrics, true, true), print_slowest(metrics);
  if (!o.json.empty()) {
    nlohmann::json j = nlohmann::json::array();
    for (const auto& s : metrics) {
      nlohmann::json js = metrics_json(s);
      // How the ranks' clocks were put together, and each rank's shift (a PyTorch run's, or MPI's).
      js["clock"] = t.run.clock;
      if (const trace::SlowestRank w = trace::slowest_rank(s); w.rank >= 0)
        js["slowest_rank"] = {{"rank", w.rank}, {"cause", w.cause}, {"busy_us", us(w.busy_ns())},
                              {"self", breakdown_json(w.mine)}, {"others_mean", breakdown_json(w.others)},
                              {"compute_excess_us", us(w.compute_excess_ns)}, {"exposed_excess_us", us(w.exposed_excess_ns)}};
      for (nlohmann::json& jr : js["ranks"])
        for (const trace::RankTrace& r : t.ranks)
          if (r.strategy == s.strategy && r.rank == jr["rank"].get<int>())
            jr["clock_offset_us"] = double(r.clock_offset_ns) / 1000.0, jr["clock_uncertainty_us"] = double(r.clock_uncertainty_ns) / 1000.0;
      j.push_back(js);
    }
    output::write(o.json, j.dump(2) + "\n", "--json");
    std::printf("\n  json: %s\n", o.json.c_str());
  }
  return 0;
}

}  // namespace ringside::cli

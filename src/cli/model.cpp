// `ringside model`: a dry run of a strategy at any size, replayed on named hardware.
#include <optional>
#include <chrono>
#include <cstdio>
#include <filesystem>

#include "cli/commands.h"
#include "cli/format.h"
#include "core/error.h"
#include "core/output.h"
#include "model/model.h"
#include "parallel/harness.h"
#include "trace/metrics.h"

namespace ringside::cli {

CLI::App* add_model(CLI::App& app, ModelCommandOptions& o) {
  std::string names, hw;
  for (const Strategy& s : strategies()) names += (names.empty() ? "" : ", ") + s.name;
  for (const std::string& n : model::hardware_names()) hw += (hw.empty() ? "" : ", ") + n;
  CLI::App* m = app.add_subcommand(
      "model", "What if: a dry run of one strategy at any size, replayed on named hardware (time, overlap, memory)");
  add_config_flags(*m, o.cfg);
  m->add_option("--strategy", o.strategy, "one of: " + names + ", or a configuration such as tp8xring8 (or the degrees below)")
      ->check(non_empty("--strategy needs a name"));
  add_parallel_flags(*m, o.parallel);
  // The schedule grows as P^2 events (O(P) steps on each of P ranks): 256 ranks of the ring
  // are 4.0 million events, about 85 s and 3.4 GB here (model::schedule_bytes).
  m->add_option("--ranks", o.ranks, "number of ranks P (the dry run's threads), up to 256")->capture_default_str()->check(CLI::Range(1, 256));
  m->add_option("--hw", o.hw, "hardware: " + hw + ", or a profile JSON file")->capture_default_str()->check(
      non_empty("--hw needs a profile"));
  m->add_option("--dtype", o.dtype, "the element type modeled: bf16 (bytes halved, bf16 peak) or fp32")
      ->capture_default_str()
      ->check(CLI::IsMember({"bf16", "fp32"}));
  m->add_option("--trace", o.trace, "write the modeled timeline (Chrome trace JSON; ringside-viewer marks it modeled)")
      ->option_text("FILE")
      ->check(non_empty("--trace needs a file name"));
  m->add_option("--from", o.from, "model this recorded trace (ringside run/compare --trace) instead of a dry run")
      ->option_text("FILE")
      ->check(non_empty("--from needs a file name"));
  m->footer(
      "Examples:\n"
      "  ringside model --seq 1048576 --ranks 64 --strategy ring --hw h100-nvlink --trace out/1m.json\n"
      "  ringside model --strategy ulysses --ranks 8 --seq 262144 --hw a100-nvlink\n"
      "  ringside model --tp 8 --cp 8 --ranks 64 --seq 1048576 --heads 64 --kv-heads 8 --hidden 8192 --ffn 28672\n"
      "  ringside run --strategy ring --trace out/r.json && ringside model --from out/r.json --hw h200");
  return m;
}

namespace {

std::string seconds(double ns) { return format_seconds(ns / 1e9); }
// A GPU's capacity in GiB, as every memory figure, and in the decimal GB its profile and datasheet
// give it: "74.51 GiB (80.00 GB)".
std::string capacity(double bytes) { return format_bytes(bytes) + " (" + format_bytes(bytes, ByteUnits::decimal) + ")"; }
std::string pct(double p) { return std::isnan(p) ? "-" : std::to_string(int(std::lround(p))) + "%"; }

}  // namespace

int model_command(const ModelCommandOptions& o) {
  using clock = std::chrono::steady_clock;
  const bool dry = !o.strategy.empty() || o.parallel.given();
  if (o.from.empty() && !dry)
    throw ConfigError("model: give --strategy or the degrees (a dry run), or --from FILE (a recorded trace)");
  if (!o.from.empty() && dry)
    throw ConfigError("model: --strategy and the degrees (--tp, --cp, ...) run a dry run, --from reads a trace: give one");
  // The inputs: the recorded trace, and a profile given as a file.
  output::check_distinct({{"--trace", o.trace}}, {{"--from", o.from}, {"--hw", output::is_regular(o.hw) ? o.hw : ""}});
  const model::Hardware hw = model::load_hardware(o.hw);
  if (!o.trace.empty()) output::check(o.trace, "--trace");

  trace::TraceData schedule;
  std::optional<Strategy> st;
  MemoryTracker tracker;  // outlives the results' (dry) tensors
  std::vector<RankResult> results;
  auto t0 = clock::now();
  if (o.from.empty()) {
    o.cfg.validate();
    st = strategy_from(o.strategy, o.parallel, o.ranks);
    st->validate(o.cfg, o.ranks);
    st = resolve_strategy(*st, o.ranks);
    // Tensors cost nothing in a dry run, but each rank lists its tokens' global positions
    // (RoPE, dropout, the layout): 8 bytes a token, a few lists at once. And the schedule
    // itself: model_schedule_bytes.
    require_memory(32.0 * double(o.cfg.tokens()) + model::schedule_bytes(o.ranks, o.cfg),
                   detail::concat("the dry run on ", o.ranks, " ranks (its schedule and token positions)"),
                   "--ranks, --seq or --batch", 0, 2 * o.ranks);
    std::printf("ringside model: %s on P = %d ranks, %s\n", st->name.c_str(), o.ranks, o.cfg.summary().c_str());
    std::fflush(stdout);
    // The dry run: the strategy's own code, with tensors that hold no memory and no math.
    schedule = model::dry_run(*st, o.cfg, o.ranks, tracker, &results);
  } else {
    schedule = trace::read_trace(o.from);
    size_t recorded = 0;
    for (const trace::RankTrace& r : schedule.ranks) recorded += r.events.size();
    if (recorded == 0) throw ConfigError("--from " + o.from + ": the trace holds no events to model");
    for (const trace::RankTrace& r : schedule.ranks)  // the modeled trace is written in the same format
      if (!o.trace.empty() && r.rank >= trace::kMaxRanks)
        throw ConfigError(detail::concat("--from ", o.from, ": rank ", r.rank, r.strategy.empty() ? "" : " of " + r.strategy,
                                         " is beyond the ranks a ringside trace holds (0 to ", trace::kMaxRanks - 1,
                                         "), so --trace cannot write its model"));
    std::printf("ringside model: the schedule recorded in %s\n", o.from.c_str());
  }
  const double dry_s = std::chrono::duration<double>(clock::now() - t0).count();
  t0 = clock::now();
  model::ModelOptions mo;
  mo.dtype = o.dtype;
  const trace::TraceData modeled = model::model_trace(schedule, hw, mo);
  const double model_s = std::chrono::duration<double>(clock::now() - t0).count();
  size_t events = 0;
  for (const trace::RankTrace& r : modeled.ranks) events += r.events.size();
  if (events == 0)
    throw ConfigError("--from " + o.from + ": the trace holds only modeled twins (otherData.modeled_groups), no recorded run to model");

  std::printf("  hardware   %s: %s\n", hw.name.c_str(), hw.description.c_str());
  char inside[96] = "";  // a profile of one GPU per node has no link inside a node
  if (hw.gpus_per_node > 1) std::snprintf(inside, sizeof inside, "%.4g GB/s %.1f us inside, ", hw.intra_bandwidth / 1e9, hw.intra_latency_s * 1e6);
  std::printf("             %.4g TFLOP/s %s, %.4g GB/s memory, %.4g GB; %d GPU%s per node: %s%.4g GB/s %.1f us across\n",
              (o.dtype == "bf16" ? hw.peak_flops_bf16 : hw.peak_flops_fp32) / 1e12, o.dtype.c_str(), hw.memory_bandwidth / 1e9,
              hw.memory_bytes / 1e9, hw.gpus_per_node, hw.gpus_per_node == 1 ? "" : "s", inside, hw.inter_bandwidth / 1e9,
              hw.inter_latency_s * 1e6);
  std::printf("  schedule   %zu events on %zu ranks: %s %.2f s, model %.2f s\n", events, modeled.ranks.size(),
              o.from.empty() ? "dry run" : "read", dry_s, model_s);
  std::printf("  model      op = max(FLOPs / peak, bytes / memory bandwidth); transfer = latency + bytes / link; %s\n",
              o.dtype == "bf16" ? "bf16: half the fp32 run's bytes" : "fp32 bytes");

  for (const trace::StrategyMetrics& m : trace::compute_metrics(modeled)) {
    std::printf("\n  %s (modeled)\n", m.strategy.c_str());
    std::printf("  %5s %11s %11s %11s %8s %11s %13s\n", "rank", "time", "compute", "comm", "overlap", "exposed", "peak memory");
    const size_t n = m.ranks.size();
    int64_t peak = 0, span = 0, total_peak = 0;
    int worst = 0;
    for (size_t i = 0; i < n; ++i) {
      const trace::RankMetrics& r = m.ranks[i];
      if (r.peak_memory_bytes > peak) peak = r.peak_memory_bytes, worst = r.rank;
      total_peak += r.peak_memory_bytes;
      span = std::max(span, r.time.window_ns);
      if (n > 12 && i >= 4 && i + 4 < n) {
        if (i == 4) std::printf("  %5s\n", "...");
        continue;
      }
      std::printf("  %5d %11s %11s %11s %8s %11s %13s\n", r.rank, seconds(double(r.time.window_ns)).c_str(),
                  seconds(double(r.time.compute_ns)).c_str(), seconds(double(r.time.comm_ns)).c_str(),
                  pct(r.time.overlap_pct()).c_str(), seconds(double(r.time.exposed_comm_ns)).c_str(),
                  format_bytes(double(r.peak_memory_bytes)).c_str());
    }
    std::printf("  %5s %11s %11s %11s %8s %11s  imbalance %.2f\n", "sum", "", seconds(double(m.total.compute_ns)).c_str(),
                seconds(double(m.total.comm_ns)).c_str(), pct(m.total.overlap_pct()).c_str(),
                seconds(double(m.total.exposed_comm_ns)).c_str(), m.compute_imbalance);
    std::printf("  layer      forward + backward %s on the slowest rank\n", seconds(double(span)).c_str());
    if (st) {
      const double scale = o.dtype == "bf16" ? 0.5 : 1.0;
      int64_t saved = 0;
      for (const RankResult& r : results) saved = std::max(saved, r.peak_saved);
      std::printf("  saved      activations per rank %s (formula %s)\n", format_bytes(scale * double(saved)).c_str(),
                  format_bytes(scale * double(st->saved_bytes(o.cfg, o.ranks, 0, DType::f32))).c_str());
    }
    // A what-if that does not fit is an answer, not a failure: the exit status stays 0.
    if (hw.memory_shared) {  // this machine: the ranks share one memory
      std::printf("  memory     %s: the ranks' peaks add up to %s of this machine's %s\n",
                  double(total_peak) > hw.memory_bytes ? "OUT OF MEMORY" : "fits", format_bytes(double(total_peak)).c_str(),
                  capacity(hw.memory_bytes).c_str());
    } else if (double(peak) > hw.memory_bytes) {
      std::printf("  memory     OUT OF MEMORY: rank %d needs %s at its peak; a %s has %s\n", worst, format_bytes(double(peak)).c_str(),
                  hw.name.c_str(), capacity(hw.memory_bytes).c_str());
    } else {
      std::printf("  memory     fits: the largest peak, rank %d's %s, is %.0f%% of %s\n", worst, format_bytes(double(peak)).c_str(),
                  100.0 * double(peak) / hw.memory_bytes, capacity(hw.memory_bytes).c_str());
    }
  }
  if (!o.trace.empty()) {
    trace::write_trace(o.trace, modeled);
    std::printf("\n  trace: %s (modeled; ringside-viewer %s)\n", o.trace.c_str(), o.trace.c_str());
  }
  return 0;
}

}  // namespace ringside::cli

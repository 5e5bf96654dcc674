// The ring's load-balance table: each layout's forward attention work per rank, measured for the
// layouts that ran, from the formula for the rest (exact counts of the pairs the mask leaves
// visible), with its imbalance (max / mean, as everywhere ringside says imbalance) and the
// measured layouts' verdicts.
#include <algorithm>
#include <cstdio>

#include "cli/compare.h"
#include "cli/format.h"
#include "trace/metrics.h"

namespace ringside::cli {

namespace {

RunPlan in_layout(const RunPlan& ring, Layout layout) {
  ParallelConfig par = ring.par;
  par.layout = layout;
  return resolve(par, ring.layer, ring.P, ring.device);
}

std::string fixed2(double v) {
  char b[32];
  std::snprintf(b, sizeof b, "%.2f", v);
  return b;
}

// One layout's row: its plan (the padded length it needs), the job that ran it (null: the
// formula alone), and every rank's forward attention FLOPs.
struct Row {
  RunPlan plan;
  const JobRecord* job;
  std::vector<double> flops;
};

// A measured layout's verdict, as a strategy's: the error, and every rank's FLOPs, saved bytes
// and bytes sent equal to the formulas of its layout.
std::pair<RunCheck, std::string> layout_verdict(const JobRecord& job, const Yardstick& y) {
  RunCheck c = check_run(job, y);
  const bool exact = c.flops_ok() && c.saved_ok() && c.sent_ok();
  std::string v = c.accurate() && exact ? "OK" : exact ? std::string("FAIL: error above ") + kToleranceText
                                                       : "FAIL: FLOPs or bytes differ from the formulas";
  return {std::move(c), v};
}

}  // namespace

std::map<Layout, JobRecord> run_other_layouts(const RunPlan& ring, const Setup& s,
                                              const std::function<void(const std::string&)>& note) {
  std::map<Layout, JobRecord> runs;
  if (!ring.layer.masked()) return runs;
  for (Layout l : kLayouts) {
    if (l == ring.requested_layout()) continue;
    note(std::string("ring, layout ") + to_string(l) + " ...");
    std::vector<trace::RankTrace> not_kept;  // traced, but the file holds each strategy once
    runs.emplace(l, run_job(in_layout(ring, l), s.where, not_kept));
  }
  return runs;
}

int report_load_balance(const JobRecord& ring, const std::map<Layout, JobRecord>& others, const Yardstick& y,
                        const Setup& s, nlohmann::json& js) {
  const LayerConfig& cfg = ring.plan.layer;
  std::vector<Row> rows;
  double most = 0;
  for (Layout l : kLayouts) {
    const auto other = others.find(l);
    Row row{in_layout(ring.plan, l), l == ring.plan.requested_layout() ? &ring : other != others.end() ? &other->second : nullptr, {}};
    for (int r = 0; r < s.P; ++r) {
      row.flops.push_back(row.job ? row.job->ranks[size_t(r)].attention_flops : parallel_attention_flops(row.plan, r));
      most = std::max(most, row.flops.back());
    }
    rows.push_back(std::move(row));
  }
  // One unit for the table, so that a small layer's work is not all 0.00.
  const auto [unit, scale] = most >= 1e9 ? std::pair{"GFLOP", 1e9} : most >= 1e6 ? std::pair{"MFLOP", 1e6}
                                                                             : std::pair{"kFLOP", 1e3};
  std::printf("\n  %s attention work per rank (forward %s%s%s%s):\n  %-26s %6s", ring.plan.name.c_str(), unit,
              cfg.causal ? ", causal" : "",
              cfg.docs.size() > 1 ? detail::concat(", ", cfg.docs.size(), " documents").c_str() : "",
              cfg.window > 0 ? detail::concat(", window ", cfg.window).c_str() : "", "layout", "S");
  for (int r = 0; r < s.P; ++r) std::printf(" %7s", ("rank " + std::to_string(r)).c_str());
  std::printf("  work imbalance%s\n", others.empty() ? "" : "  worst error vs fp64        verdict");
  int failures = 0;
  nlohmann::json& jl = js["ring_work_per_rank"];
  for (const Row& row : rows) {
    const Layout layout = row.plan.par.layout;
    nlohmann::json& j = jl[to_string(layout)];
    std::string cells;
    for (double f : row.flops) {
      cells += detail::concat(" ", pad(fixed2(f / scale), 7, true));
      j["gflops"].push_back(f / 1e9);
    }
    const double lo = *std::min_element(row.flops.begin(), row.flops.end());
    const double hi = *std::max_element(row.flops.begin(), row.flops.end());
    // The imbalance, max / mean work: the busiest rank's work over the mean, what a ring step
    // that waits for the busiest rank loses. (max / min is kept in the JSON as it was; a rank
    // with no work, only padding or keys nobody sees, leaves it no ratio: null.)
    const double imbalance = trace::max_over_mean(row.flops);
    j["imbalance"] = imbalance;
    j["max_over_min"] = lo > 0 ? nlohmann::json(hi / lo) : nlohmann::json(nullptr);
    j["measured"] = row.job != nullptr;
    j["S"] = row.plan.packing->S;
    std::string checked;
    if (row.job && !others.empty()) {
      const auto [check, verdict] = layout_verdict(*row.job, y);
      failures += verdict != "OK";
      const auto& w = check.errors.worst;
      checked = "  " + pad(sci(w.second) + " " + w.first, 25) + "  " + verdict;
      j["worst"] = {{"tensor", w.first}, {"error", w.second}};
      j["verdict"] = verdict;
    }
    std::printf("  %-26s %6lld%s  %14s%s\n", (std::string(to_string(layout)) + (row.job ? " (measured)" : " (formula)")).c_str(),
                (long long)row.plan.packing->S, cells.c_str(), fixed2(imbalance).c_str(), checked.c_str());
  }
  return failures;
}

}  // namespace ringside::cli

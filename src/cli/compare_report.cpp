// compare's report: the measured table of every run's check, the modeled twin's table, the
// price of all_gather, and the notes on what the columns mean.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <optional>
#include <thread>

#include "cli/compare.h"
#include "cli/format.h"
#include "layer/reference.h"
#include "parallel/allgather_attention.h"

namespace ringside::cli {

namespace {

nlohmann::json errors_json(const TensorErrors& e) {
  nlohmann::json j;
  for (const auto& [n, x] : e.errors) j[n] = x;
  return j;
}

// One check as compare's JSON: per rank each measured value beside its formula and the rank's
// timeline.
nlohmann::json check_json(const JobRecord& job, const RunCheck& c, const trace::StrategyMetrics& tm) {
  nlohmann::json jr = nlohmann::json::array();
  nlohmann::json timeline_json = metrics_json(tm);  // once: each rank's row goes beside its counters
  for (size_t r = 0; r < c.ranks.size(); ++r) {
    const RankCheck& rc = c.ranks[r];
    const RankNumbers& n = rc.measured;
    jr.push_back({{"rank", int(r)},
                  {"peak_saved_bytes", int64_t(n.peak_saved)},
                  {"formula_saved_bytes", rc.saved_formula},
                  {"bytes_sent", {{"forward", int64_t(n.fwd_sent)}, {"backward", int64_t(n.bwd_sent)}}},
                  {"formula_bytes_sent", {{"forward", rc.sent_formula.forward}, {"backward", rc.sent_formula.backward}}},
                  {"bytes_received", {{"forward", int64_t(n.fwd_recv)}, {"backward", int64_t(n.bwd_recv)}}},
                  {"forward_s", n.fwd_s},
                  {"backward_s", n.bwd_s},
                  {"attention_flops", n.attention_flops},
                  {"formula_attention_flops", rc.flops_formula},
                  {"peak_bytes", int64_t(n.peak_bytes)},
                  {"forward_comm_peak", int64_t(n.peak_comm)},
                  {"formula_forward_comm_peak", rc.comm_peak_formula},
                  {"timeline", timeline_json["ranks"][r]}});
  }
  const ParallelConfig& par = job.plan.par;
  nlohmann::json j;
  j["name"] = c.name;
  j["parallel"] = {{"tp_size", par.tp}, {"cp_size", par.cp}, {"cp_comm_type", to_string(par.cp_comm)},
                   {"a2a_size", par.a2a_size()}, {"ring_size", par.ring_size()}, {"order", to_string(par.order)}};
  j["errors"] = errors_json(c.errors);
  j["worst"] = {{"tensor", c.errors.worst.first}, {"error", c.errors.worst.second}};
  j["ratio_to_fp32_reference"] = c.ratio_to_fp32;
  j["ok"] = c.ok();
  j["checks"] = {{"accurate", c.accurate()}, {"saved_bytes", c.saved_ok()}, {"bytes_sent", c.sent_ok()},
                 {"attention_flops", c.flops_ok()}, {"trace", c.trace_ok()}, {"tolerance", kTolerance}};
  timeline_json.erase("ranks");  // per rank above, beside the counters
  j["timeline"] = std::move(timeline_json);
  j["verdict"] = c.verdict();
  j["per_rank"] = jr;
  return j;
}

// The table's columns: the name (as wide as the longest), P, the worst error, its ratio to the
// fp32 reference's, saved and sent per rank beside their formulas, the time.
struct Columns {
  size_t width[7];
  std::string row(const std::string& name, int P, const std::string& error, const std::string& ratio, const std::string& saved,
                  const std::string& sent, const std::string& time) const {
    return pad(name, width[0]) + "  " + pad(std::to_string(P), width[1], true) + "  " + pad(error, width[2]) + "  " +
           pad(ratio, width[3]) + "  " + pad(saved, width[4]) + "  " + pad(sent, width[5]) + "  " + pad(time, width[6]) + "  ";
  }
};

}  // namespace

int report_checks(const std::vector<JobRecord>& jobs, const std::vector<RunCheck>& checks, const Yardstick& y,
                  const std::vector<std::pair<std::string, std::string>>& skipped, const Timelines& timelines,
                  const Setup& s, nlohmann::json& js) {
  const LayerConfig& cfg = jobs.front().plan.layer;
  const char* hdr[] = {"strategy", "P", "worst error vs fp64", "x fp32", "saved/rank (formula)", "sent/rank (formula)",
                       "time"};
  size_t name_width = 14;  // "reference fp32", or the longest configuration's name
  for (const RunCheck& c : checks) name_width = std::max(name_width, c.name.size());
  for (const auto& [name, why] : skipped) name_width = std::max(name_width, name.size());
  const Columns cols{{name_width, 2, 25, 6, 23, 23, 9}};
  std::string line;
  for (size_t i = 0; i < std::size(hdr); ++i) line += pad(hdr[i], cols.width[i], i == 1) + "  ";
  std::printf("  %sverdict\n", line.c_str());

  int failures = 0;
  {  // the yardstick: the single-device fp32 run against fp64
    const ReferenceRun& ref32 = *y.fp32;
    const TensorErrors& e = y.fp32_errors;
    const std::string& nothing = y.nothing_to_compare;
    const double seconds = ref32.forward_s + ref32.backward_s;
    const std::string row = cols.row("reference fp32", 1, sci(e.worst.second) + " " + e.worst.first, "1.00",
                                     format_bytes(double(ref32.peak_saved)) + " (" +
                                         format_bytes(double(saved_activation_bytes(cfg, DType::f32, jobs.front().plan.recompute()))) + ")",
                                     "0 B", format_seconds(seconds));
    const bool below = e.worst.second < kTolerance, ok = below && nothing.empty();
    failures += !ok;
    std::printf("  %s%s\n", row.c_str(),
                ok ? "OK (the yardstick)" : below ? ("FAIL: " + nothing).c_str() : (std::string("FAIL: above ") + kToleranceText).c_str());
    nlohmann::json& j = js["reference_fp32"];
    j["errors"] = errors_json(e);
    j["worst"] = {{"tensor", e.worst.first}, {"error", e.worst.second}};
    j["time_s"] = seconds;
    j["peak_saved_bytes"] = ref32.peak_saved;
    js["reference_fp64"]["time_s"] = y.fp64.forward_s + y.fp64.backward_s;
  }
  for (size_t i = 0; i < checks.size(); ++i) {
    const RunCheck& c = checks[i];
    double max_saved = 0, max_saved_formula = 0, max_sent = 0, max_sent_formula = 0, max_time = 0;
    for (const RankCheck& rc : c.ranks) {
      const RankNumbers& n = rc.measured;
      max_saved = std::max(max_saved, n.peak_saved);
      max_saved_formula = std::max(max_saved_formula, double(rc.saved_formula));
      max_sent = std::max(max_sent, n.fwd_sent + n.bwd_sent);
      max_sent_formula = std::max(max_sent_formula, double(rc.sent_formula.forward + rc.sent_formula.backward));
      max_time = std::max(max_time, n.fwd_s + n.bwd_s);
    }
    failures += !c.ok();
    char ratio[32];
    std::snprintf(ratio, sizeof ratio, c.ratio_to_fp32 < 1000 ? "%.2f" : "%.1e", c.ratio_to_fp32);
    const std::string row = cols.row(c.name, s.P, sci(c.errors.worst.second) + " " + c.errors.worst.first, ratio,
                                     format_bytes(max_saved) + " (" + format_bytes(max_saved_formula) + ")",
                                     format_bytes(max_sent) + " (" + format_bytes(max_sent_formula) + ")", format_seconds(max_time));
    std::printf("  %s%s\n", row.c_str(), c.verdict().c_str());
    js["strategies"].push_back(check_json(jobs[i], c, timelines.measured_of(c.name)));
  }
  for (const auto& [name, why] : skipped) {
    std::printf("  %s%s\n", (pad(name, cols.width[0]) + "  " + pad(std::to_string(s.P), cols.width[1], true) + "  ").c_str(),
                ("skipped: " + why).c_str());
    js["skipped"][name] = why;
  }
  return failures;
}

void report_all_gather(const std::vector<JobRecord>& jobs, const std::vector<RunCheck>& checks, nlohmann::json& js) {
  for (size_t i = 0; i < jobs.size(); ++i) {
    const RunPlan& plan = jobs[i].plan;
    if (!plan.par.scheme().groups.cp) continue;  // no all-gather over the CP group
    // The price of all_gather: every rank holds the whole sequence's K/V while it attends.
    const LayerConfig& cfg = plan.layer;
    const int64_t kv = allgather_kv_bytes(cfg.b, plan.packing->S, cfg.Hkv / plan.par.tp, cfg.d(), DType::f32);
    const int64_t peak = checks[i].ranks.front().comm_peak_formula;  // alike on every rank
    bool all_equal = true;
    nlohmann::json measured = nlohmann::json::array();
    for (const RankCheck& rc : checks[i].ranks) {
      all_equal &= rc.comm_peak_ok();
      measured.push_back(int64_t(rc.measured.peak_comm));
    }
    std::printf("\n  %s: each rank holds the whole sequence's K/V while it attends, 2 b S (Hkv/T) d x 4 B = %s;\n"
                "  with V's gather buffer its forward's communication buffers peak at %s (formula), %s (measured).\n",
                plan.name.c_str(), format_bytes(double(kv)).c_str(), format_bytes(double(peak)).c_str(),
                all_equal ? "the same on every rank" : "NOT the formula on some rank");
    js["all_gather_kv_bytes"][plan.name] = {{"formula", kv}, {"formula_forward_comm_peak", peak}, {"forward_comm_peak", measured}};
  }
}

void print_compare_footer(const Timelines& t, const Setup& s) {
  std::printf(
      "\n  worst error: the largest relative Frobenius error over out, dx and every weight gradient; x fp32:\n"
      "  that error over the single-device fp32 run's (near 1: as accurate as one device). saved/rank:\n"
      "  peak activations kept for backward, busiest rank; sent/rank: bytes sent forward + backward;\n"
      "  each beside its analytic formula. time: forward + backward, slowest rank, wall clock. OK: error\n"
      "  below %s, memory and bytes equal to their formulas, and the timeline equal to the counters.\n"
      "  modeled: overlap is time computing while communicating / time communicating, all ranks; exposed\n"
      "  is communication nothing hides; attn hidden, the overlap of attention's own traffic; compute imb.,\n"
      "  max / mean compute time over the ranks (the load-balance table's is max / mean attention work).\n",
      kToleranceText);
  print_measured_note(s.P);
  print_timelines(t, s.hw);
}

// The modeled twin's table: each strategy's layer on the profile, from the same schedule. Returns
// it as JSON: {hardware, dtype, stack, modeling, band, strategies: [metrics with layer_us], table: the printed table}.
nlohmann::json print_modeled(const Timelines& t, const model::Hardware& hw, const model::ModelOptions& o) {
  std::printf("\n  modeled on %s: the recorded schedule (its FLOPs, bytes and order) replayed in bf16 at\n"
              "  %s;\n  the same on every run and machine (ringside model --from the trace --hw %s gives it\n"
              "  too). Per rank: the mean over the ranks.\n",
              hw.name.c_str(), model::rates_summary(hw, o, "\n  ").c_str(), hw.name.c_str());
  size_t w = 14;
  for (const trace::StrategyMetrics& m : t.modeled) w = std::max(w, m.strategy.size());
  auto line = [&](const char* format, auto... args) {
    char b[256];
    std::snprintf(b, sizeof b, format, int(w), args...);
    return std::string(b);
  };
  std::string table = line("  %-*s %10s %10s %10s %8s %10s %12s %13s\n", "strategy", "layer time", "compute", "comm",
                           "overlap", "exposed", "attn hidden", "compute imb.");
  nlohmann::json j = nlohmann::json::array();
  for (const trace::StrategyMetrics& m : t.modeled) {
    const double n = double(std::max<size_t>(1, m.ranks.size()));
    const int64_t layer = trace::layer_ns(m);
    const std::optional<trace::Breakdown> att = trace::sublayer_comm(m, "attention");
    const double attention = att ? att->overlap_pct() : std::nan("");
    auto pct = [](double p) { return std::isnan(p) ? std::string("-") : std::to_string(int(std::lround(p))) + "%"; };
    table += line("  %-*s %10s %10s %10s %8s %10s %12s %13.2f\n", m.strategy.c_str(), format_seconds(layer / 1e9).c_str(),
                  format_seconds(m.total.compute_ns / n / 1e9).c_str(), format_seconds(m.total.comm_ns / n / 1e9).c_str(),
                  pct(m.total.overlap_pct()).c_str(), format_seconds(m.total.exposed_comm_ns / n / 1e9).c_str(),
                  pct(attention).c_str(), m.compute_imbalance);
    nlohmann::json mj = metrics_json(m);
    mj["layer_us"] = double(layer) / 1e3;
    mj["attention_comm_overlap_pct"] = std::isnan(attention) ? nlohmann::json(nullptr) : nlohmann::json(attention);
    j.push_back(std::move(mj));
  }
  std::printf("%s", table.c_str());
  // How far to trust each strategy's modeled layer: the held-out published runs nearest its kind
  // (model/bands.h). One line where they share a band, else one per band with its strategies.
  std::vector<std::pair<std::string, std::string>> bands;  // band text, its strategies
  nlohmann::json bj = nlohmann::json::object();
  for (const trace::StrategyMetrics& m : t.modeled) {
    ParallelConfig par;
    try {
      par = parse_parallel_config(m.strategy);
    } catch (const ConfigError&) {
    }
    const model::RunKind kind = model::run_kind(false, false, par, o.dtype, model::at_roofline(hw, o));
    const model::ErrorBand band = model::error_band(kind);
    const std::string text = model::band_text(band, kind);
    auto it = std::find_if(bands.begin(), bands.end(), [&](const auto& b) { return b.first == text; });
    if (it == bands.end()) bands.push_back({text, m.strategy});
    else it->second += ", " + m.strategy;
    bj[m.strategy] = model::band_json(band, kind);
  }
  for (const auto& [text, strategies] : bands)
    std::printf("  trust%s: %s\n", bands.size() == 1 ? "" : (" (" + strategies + ")").c_str(), text.c_str());
  return {{"hardware", hw.to_json()}, {"dtype", o.dtype},    {"stack", o.stack.name}, {"modeling", model::modeling_info(hw, o).to_json()},
          {"band", bj},               {"strategies", std::move(j)}, {"table", table}};
}

// The timeline tables: the modeled twin's (with its ring steps), then the measured one's.
void print_timelines(const Timelines& t, const model::Hardware& hw) {
  std::printf("\n  timeline per rank, modeled on %s in bf16 (forward + backward; compute and comm are unions of\n"
              "  intervals; sent: bf16 bytes, half the fp32 run's):\n",
              hw.name.c_str());
  print_timeline(t.modeled, true);
  std::printf("\n  timeline per rank, measured on this machine (times are wall clock and vary; memory and bytes do not):\n");
  print_timeline(t.measured, false);
}

// Why measured waits are not GPU waits, in one line, and when they can be compared.
void print_measured_note(int P) {
  const unsigned cores = std::thread::hardware_concurrency();
  if (cores >= unsigned(P) + 1)
    std::printf("  measured times: this machine has %u cores, at least P + 1 = %d, so each rank thread has one: its\n"
                "  measured overlaps can be set beside the modeled ones (a CPU's F/B, not the GPU's).\n", cores, P + 1);
  else
    std::printf("  measured times: %d rank threads (and their comm threads) share %u cores here, so a measured wait\n"
                "  includes time spent waiting for a core; they vary from run to run. The modeled times do not.\n", P, cores);
}

}  // namespace ringside::cli

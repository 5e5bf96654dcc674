// `ringside plan --gbs ...`: the whole training step planned (model/step_plan.h), printed as a
// ranked table with the rejected rules, the verdict, and every row in --json.
#include <algorithm>
#include <cmath>
#include <cstdio>

#include "cli/commands.h"
#include "cli/format.h"
#include "core/error.h"
#include "core/output.h"
#include "core/progress.h"
#include "layer/presets.h"
#include "lessons/lesson.h"  // wrap
#include "model/bubble.h"
#include "model/flops.h"
#include "model/validation.h"
#include "model/step_parts.h"
#include "model/step_plan.h"
#include "parallel/run_plan.h"

namespace ringside::cli {

namespace {

// The bubbles of the shown rows, against (PP-1)/(m VP) (model/bubble.h): the best row with a
// pipeline's, and the shown row's furthest from its formula when another; each step modeled
// again from its group's dry run. "" when no shown row has PP > 1.
std::string bubble_lines(const model::StepPlan& plan, size_t shown, const LayerConfig& cfg, const model::StepPlanOptions& so) {
  auto excess = [](const model::StepRow& r) {
    return std::abs(r.cost.bubble_fraction - double(r.candidate.pp - 1) / (double(r.candidate.microbatches) * r.candidate.vp));
  };
  std::vector<size_t> explained;
  for (size_t i = 0; i < shown; ++i)
    if (plan.rows[i].candidate.pp > 1) {
      if (explained.empty()) explained.push_back(i);
      else if (explained.size() == 1 && excess(plan.rows[i]) > excess(plan.rows[explained[0]]) + 0.0005) explained.push_back(i);
      else if (explained.size() == 2 && excess(plan.rows[i]) > excess(plan.rows[explained[1]])) explained[1] = i;
    }
  std::string text;
  for (size_t i : explained) {
    const model::ModeledStep m = model::model_step_of(cfg, plan.rows[i].candidate, so, plan.hw);
    // Continuation lines indented past the "#k's" they continue.
    text += lessons::wrap(detail::concat("#", i + 1, "'s ", model::bubble_words(model::bubble_parts(m.config, m.layer, m.ends, plan.hw, so.modeling))),
                          118, "    ").substr(2);
  }
  return text;
}

void print_step_plan(const model::StepPlan& plan, const PlanCommandOptions& o, const model::ModelOptions& mo,
                     const std::string& hw_given, const LayerConfig& cfg, const model::StepPlanOptions& so) {
  const model::Hardware& hw = plan.hw;
  std::printf("\n  on %s: %s\n", hw.name.c_str(), hw.description.c_str());
  std::printf("  modeled at %s\n", model::rates_summary(hw, mo, "\n  ").c_str());
  const size_t ranked = plan.ranked(), shown = std::min(ranked, size_t(o.top));
  size_t wname = 9;
  for (size_t i = 0; i < shown; ++i) wname = std::max(wname, plan.rows[i].candidate.name().size());
  std::printf("\n  %3s  %s  %9s  %6s  %9s  %7s  %27s  %48s  %s\n", "#", pad("candidate", wname).c_str(), "tokens/s", "MFU",
              "step", "bubble", "exposed TP / CP / PP / DP", "memory / GPU = w + g + opt + act", "why");
  for (size_t i = 0; i < shown; ++i) {
    const model::StepRow& r = plan.rows[i];
    const model::StepCost& s = r.cost;
    char mfu[32], exposed[64], bubble[16];
    std::snprintf(mfu, sizeof mfu, "%.1f%%", 100 * r.mfu);
    std::snprintf(exposed, sizeof exposed, "%s / %s / %s / %s", format_seconds(s.tp_exposed_s).c_str(), format_seconds(s.cp_exposed_s).c_str(),
                  format_seconds(s.pp_exposed_s).c_str(), format_seconds(s.dp_exposed_s).c_str());
    std::snprintf(bubble, sizeof bubble, "%.1f%%", 100 * s.bubble_fraction);
    std::printf("  %3zu  %s  %9.0f  %6s  %9s  %7s  %27s  %48s  %s\n", i + 1, pad(r.candidate.name(), wname).c_str(), r.tokens_per_s_per_gpu,
                mfu, format_seconds(s.step_s).c_str(), bubble, exposed, model::memory_text(s, hw.memory_bytes).c_str(),
                (r.versus.empty() ? r.reason : r.versus + "; " + r.reason).c_str());
  }
  if (shown < ranked) std::printf("  ... and %zu more that fit (--top %zu shows them)\n", ranked - shown, ranked);
  std::fputs(bubble_lines(plan, shown, cfg, so).c_str(), stdout);
  if (ranked > 0) {
    const model::StepRow& w = plan.rows.front();
    const model::RunKind kind =
        model::run_kind(false, true, w.candidate.layer.par, mo.dtype, model::at_roofline(hw, mo));
    const model::ErrorBand band = model::error_band(kind);
    std::printf("  trust: for the winner's kind, %s\n", (model::band_text(band, kind) +
                                             (band.found ? ": real GPUs would likely measure " + model::rate_range_text(w.tokens_per_s_per_gpu, band, "tokens/s per GPU")
                                                         : std::string()) + model::unvalidated_gpu_note(hw)).c_str());
    std::printf("  #1 modeled alone (--json gives every row's flags):\n    %s %s\n", plan_model_command(o, hw_given).c_str(),
                model_flags(w.candidate).c_str());
  }
  std::vector<double> shown_mfu;
  for (size_t i = 0; i < shown; ++i) shown_mfu.push_back(plan.rows[i].mfu);
  const std::string whole = model::whole_count_note(cfg, so.layers, so.vocab, shown_mfu);
  std::printf("  tokens/s: per GPU; MFU: %s;\n%s"
              "  step: the pipeline (its bubble: idle time over the busiest stage's work), then the exposed DP collectives and Adam;\n"
              "  exposed: communication no compute hides on the first stage, over the step (PP: what the transfers between stages\n"
              "  add); memory: the fullest stage's, of %s (%s); %s\n",
              model::mfu_counts_text(o.cfg, mo.dtype).c_str(), whole.empty() ? "" : ("  " + whole + ";\n").c_str(),
              format_bytes(hw.memory_bytes).c_str(), format_bytes(hw.memory_bytes, ByteUnits::decimal).c_str(), model::kMemoryTextLegend);
  std::vector<const model::StepRow*> bounded;
  for (const model::StepRow& r : plan.rows)
    if (r.status == model::PlanStatus::bounded) bounded.push_back(&r);
  if (!bounded.empty()) {
    std::printf("\n  not dry-run (%zu; their bound or estimate could not win; the %zu closest):\n", bounded.size(),
                std::min(bounded.size(), size_t(o.top)));
    for (size_t i = 0; i < bounded.size() && i < size_t(o.top); ++i)
      std::printf("    %s: %s\n", bounded[i]->candidate.name().c_str(), bounded[i]->reason.c_str());
  }
  // The rejected: the rules, each once, and the least memory-hungry that do not fit.
  std::vector<std::string> rules;
  std::vector<const model::StepRow*> oom;
  for (const model::StepRow& r : plan.rows) {
    if (r.status == model::PlanStatus::out_of_memory) oom.push_back(&r);
    if (r.status != model::PlanStatus::invalid) continue;
    const size_t colon = r.reason.find(": ");
    const std::string rule = colon == std::string::npos ? r.reason : r.reason.substr(colon + 2);
    if (std::find(rules.begin(), rules.end(), rule) == rules.end()) rules.push_back(rule);
  }
  if (!rules.empty()) {
    std::printf("\n  invalid (%zu rule%s):\n", rules.size(), rules.size() == 1 ? "" : "s");
    for (size_t i = 0; i < rules.size() && i < size_t(o.top); ++i) std::printf("    %s\n", rules[i].c_str());
  }
  std::vector<std::pair<std::string, std::string>> oom_rows;
  for (const auto* r : oom) oom_rows.push_back({r->candidate.name(), r->reason});
  print_out_of_memory(oom_rows, size_t(o.top));
  std::printf("\n  verdict\n%s", lessons::wrap(plan.verdict, 104, "    ").c_str());
}

}  // namespace

nlohmann::json step_row_json(const model::StepRow& r, const model::Hardware& hw, int place, const model::ModelOptions& mo) {
  const model::StepCandidate& c = r.candidate;
  const ParallelConfig& par = c.layer.par;
  nlohmann::json j = {{"name", c.name()}, {"tp", par.tp}, {"cp", par.cp}, {"cp_comm", to_string(par.cp_comm)},
                      {"cp_a2a", par.a2a_size()}, {"layout", to_string(par.layout)}, {"recompute", to_string(par.recompute)},
                      {"status", model::to_string(r.status)}, {"reason", r.reason}};
  if (c.pp > 0) {
    j["pp"] = c.pp, j["vp"] = c.vp, j["dp"] = c.dp, j["zero"] = c.zero, j["order"] = c.order_name();
    j["microbatches"] = c.microbatches;
    j["model_flags"] = model_flags(c);
  }
  if (r.status == model::PlanStatus::ranked) {
    const model::StepCost& s = r.cost;
    const model::RunKind kind = model::run_kind(false, true, par, mo.dtype, model::at_roofline(hw, mo));
    j["band"] = model::band_json(model::error_band(kind), kind);
    j["place"] = place;
    j["tokens_per_s_per_gpu"] = r.tokens_per_s_per_gpu;
    j["mfu"] = r.mfu;
    j["step_s"] = s.step_s, j["pipeline_s"] = s.pipeline_s, j["bubble_fraction"] = s.bubble_fraction;
    j["exposed_s"] = {{"tp", s.tp_exposed_s}, {"cp", s.cp_exposed_s}, {"pp", s.pp_exposed_s}, {"dp", s.dp_exposed_s}};
    j["dp_s"] = s.dp_s, j["optimizer_s"] = s.optimizer_s;
    j["time_by_class"] = model::time_parts_json(r.parts);
    j["versus"] = r.versus;
    // What leaves the innermost tier's domain (NVLink), per GPU a step, by dimension.
    j["beyond_domain_bytes"] = {{"tp_cp", s.group_beyond_bytes}, {"pp", s.pp_beyond_bytes}, {"dp", s.dp_beyond_bytes}};
  }
  if (r.status != model::PlanStatus::invalid) j["memory"] = memory_json(r.cost, hw);
  return j;
}

nlohmann::json memory_json(const model::StepCost& s, const model::Hardware& hw) {
  return {{"stage", s.fullest_stage}, {"weights_bytes", s.state.weights}, {"grads_bytes", s.state.grads},
          {"optimizer_bytes", s.state.optimizer}, {"activation_bytes", s.activation_bytes},
          {"total_bytes", s.total_bytes()}, {"capacity_bytes", hw.memory_bytes}, {"text", model::memory_text(s, hw.memory_bytes)}};
}

// The profiles ranked by their winners' tokens/s per GPU, and where each winner's groups sit.
static void print_systems_side_by_side(const std::vector<model::StepPlan>& plans, int gpus) {
  std::vector<const model::StepPlan*> ranked;
  for (const model::StepPlan& p : plans)
    if (p.ranked()) ranked.push_back(&p);
  std::stable_sort(ranked.begin(), ranked.end(), [](const model::StepPlan* a, const model::StepPlan* b) {
    return a->rows.front().tokens_per_s_per_gpu > b->rows.front().tokens_per_s_per_gpu;
  });
  std::printf("\n  the systems side by side, the same model on %d GPUs (modeled; #1 is: #1's tokens/s over this row's):\n", gpus);
  std::printf("  %3s  %-14s  %9s  %6s  %7s  %-46s  %-28s  %-28s  %s\n", "#", "system", "tokens/s", "MFU", "#1 is", "winner",
              "its TP x CP group", "its gradients (DP x CP)", "the job's GPUs");
  for (size_t i = 0; i < ranked.size(); ++i) {
    const model::StepPlan& p = *ranked[i];
    const model::StepRow& win = p.rows.front();
    const model::Topology topology = p.hw.topology(gpus);
    const model::step_parts::Spans spans = model::step_parts::spans_of(win.candidate, topology);
    const double times = ranked.front()->rows.front().tokens_per_s_per_gpu / win.tokens_per_s_per_gpu;
    std::printf("  %3zu  %-14s  %9.0f  %5.1f%%  %6.2fx  %-46s  %-28s  %-28s  %s\n", i + 1, p.hw.name.c_str(), win.tokens_per_s_per_gpu,
                100 * win.mfu, times, win.candidate.name().c_str(), model::link_words(spans.group, p.hw).c_str(),
                spans.weights.size > 1 ? model::link_words(spans.weights, p.hw).c_str() : "-", topology.domain_words().c_str());
  }
  for (const model::StepPlan& p : plans)
    if (!p.ranked()) std::printf("    -  %-14s  nothing fits\n", p.hw.name.c_str());
}

int plan_step_command(const PlanCommandOptions& o, const std::vector<model::Hardware>& profiles, const model::ModelOptions& modeling) {
  if (!o.trace.empty()) output::check(o.trace, "--trace");
  model::StepPlanOptions so;
  so.gpus = o.gpus;
  const ModelPreset* preset = o.preset.empty() ? nullptr : &find_preset(o.preset);
  so.layers = o.layers ? o.layers : preset ? preset->layers : 1;
  so.vocab = preset ? preset->vocab : 0;
  so.gbs = o.gbs, so.mbs = o.mbs, so.pp = o.pp, so.vp = o.vp, so.dp = o.dp, so.zero = o.zero;
  so.overlap_grad_reduce = o.overlap_grad_reduce, so.exhaustive = o.exhaustive;
  so.modeling = modeling;
  if (o.recompute != "any") so.modes = {parse_recompute(o.recompute)};
  so.layout = o.choices.layout;
  so.schemes = cp_schemes_named(o.cp_comm);
  // On stderr, every 2 s: the search's phase, how far it is and about how long is left.
  ProgressLine progress("plan");
  so.progress = &progress;
  if (o.cfg.b != 1)
    throw ConfigError(detail::concat("plan: with --gbs the microbatch is --mbs (MBS = ", o.mbs, "); --batch is the layer plan's b"));
  LayerConfig cfg = o.cfg;
  cfg.b = o.mbs;  // a dry run is of one microbatch
  resolve_one_rank(cfg);
  // The dry runs, of groups of up to 256 ranks: each rank lists its tokens' global positions, and the schedule.
  const int largest = std::min(o.gpus, so.max_group);
  require_memory(32.0 * double(cfg.tokens()) + model::schedule_bytes(largest, cfg, o.choices.applied_to({}).requested_layout(cfg)),
                 detail::concat("the plan's dry runs of up to ", largest, " ranks"), "--seq or --mbs", 0, 2 * largest);
  std::printf("ringside plan: %s%s on %d GPUs, the whole step: %d layers, V = %lld, GBS = %d sequences of %lld tokens, MBS = %d, "
              "recompute %s\n",
              o.preset.empty() ? "" : (o.preset + ": ").c_str(), cfg.summary().c_str(), o.gpus, so.layers, (long long)so.vocab, o.gbs,
              (long long)cfg.s, o.mbs, o.recompute.c_str());
  std::fflush(stdout);
  model::StepPlanStats stats;
  const std::vector<model::StepPlan> plans = model::make_step_plan(cfg, so, profiles, &stats);
  progress.finish();
  // A row not dry-run fits by the formulas alone; its dry run's working peak may not (--exhaustive counts more out of memory).
  std::printf("  %zu configurations (%zu invalid, %zu out of memory, %zu not dry-run: their bound lost, and fit by the formulas\n"
              "  alone, some not by a dry run); %zu TP x CP groups of at most %d GPUs, %zu dry runs; %.1f s\n",
              stats.candidates, stats.invalid, stats.memory_rejects, stats.bounded, stats.groups, so.max_group, stats.dry_runs,
              stats.seconds);
  std::printf("  modeled, not measured: the pipeline simulated around one TP x CP group's replay; DP and ZeRO in closed form\n"
              "  (docs/model.md, \"The whole step\"); how far published steps of the winner's kind were off: its trust line\n");
  const std::vector<std::string> hw_given = profile_list(o.hw);
  for (size_t p = 0; p < plans.size(); ++p) print_step_plan(plans[p], o, so.modeling, hw_given[p], cfg, so);
  if (plans.size() > 1) print_systems_side_by_side(plans, o.gpus);
  print_framework_flags(plans, o, cfg, so);
  if (!o.trace.empty()) {
    // The first profile's winner and runner-up, one row per pipeline stage each.
    const model::StepPlan& plan = plans.front();
    trace::TraceData t;
    const model::StepRow* second = model::step_runner_up(plan);
    if (second && second->status != model::PlanStatus::ranked) second = nullptr;
    progress.phase("dry-running the winner and the runner-up for --trace", 2, "steps");
    for (const model::StepRow* row : {&plan.rows.front(), second}) {
      progress.advance();
      if (!row || row->status != model::PlanStatus::ranked) continue;
      const std::string label = std::string(row == second ? "runner-up " : "winner ") + row->candidate.name();
      trace::TraceData one = model::step_timeline(model::model_step_of(cfg, row->candidate, so, plan.hw), plan.hw, so.modeling, label);
      if (t.ranks.empty()) t.run = one.run, t.run.config = cfg.to_json();
      for (trace::RankTrace& r : one.ranks) t.ranks.push_back(std::move(r));
    }
    trace::write_trace(o.trace, t);
    progress.finish();
    std::printf("\n  trace: %s (%s on %s%s, modeled: one row per pipeline stage; ringside-viewer %s)\n", o.trace.c_str(),
                second ? "the winner's and the runner-up's steps" : "the winner's step; there is no runner-up",
                plan.hw.name.c_str(), plans.size() > 1 ? " (the first --hw profile: the trace shows one)" : "", o.trace.c_str());
  }
  if (!o.json.empty()) {
    nlohmann::json js = {{"config", cfg.to_json()}, {"preset", o.preset}, {"gpus", o.gpus}, {"layers", so.layers},
                         {"vocab", so.vocab}, {"gbs", o.gbs}, {"mbs", o.mbs}, {"dtype", so.modeling.dtype}, {"recompute", o.recompute},
                         {"overlap_grad_reduce", o.overlap_grad_reduce},
                         {"software", software_json(model::modeling_info(profiles.front(), so.modeling))},
                         {"mfu_counts", model::mfu_counts_text(cfg, so.modeling.dtype)}};
    js["stats"] = {{"candidates", stats.candidates}, {"invalid", stats.invalid}, {"memory_rejects", stats.memory_rejects},
                   {"bounded", stats.bounded}, {"groups", stats.groups}, {"dry_runs", stats.dry_runs},
                   {"pipelines", stats.pipelines}, {"pipelines_reused", stats.pipelines_reused},
                   {"pipeline_ops", stats.pipeline_ops}, {"seconds", stats.seconds}};
    size_t rows = 0;
    for (const model::StepPlan& plan : plans) rows += plan.rows.size();
    progress.phase("writing every row to --json", rows, "rows");
    for (size_t i = 0; i < plans.size(); ++i) {
      const model::StepPlan& plan = plans[i];
      nlohmann::json p = {{"hardware", plan.hw.to_json()}, {"modeling", model::modeling_info(plan.hw, so.modeling).to_json()},
                          {"verdict", plan.verdict}, {"model_command", plan_model_command(o, hw_given[i])},
                          {"rows", nlohmann::json::array()}};
      int place = 0;
      for (const model::StepRow& r : plan.rows) {
        p["rows"].push_back(step_row_json(r, plan.hw, ++place, so.modeling));
        progress.advance();
      }
      js["plans"].push_back(p);
    }
    output::write(o.json, js.dump() + "\n", "--json");  // compact: a 16,384-GPU plan has about 150,000 rows
    progress.finish();
  }
  return 0;
}

}  // namespace ringside::cli

// The script a scenario builds: its steps and what they say, the numbers it records, its traced
// runs and their modeled twins, and the windows of the trace its steps are about.
#include "lessons/lesson.h"

#include <algorithm>
#include <cmath>
#include <cstdarg>
#include <memory>

#include "core/error.h"
#include "device/backend.h"
#include "layer/reference.h"
#include "layer/weights.h"
#include "lessons/text.h"
#include "model/validation.h"

namespace ringside::lessons {

Step& Script::step(const std::string& title, std::optional<Focus> focus) {
  steps.push_back(Step{title, "", std::move(focus), {}});
  return steps.back();
}

void Script::say(const char* format, ...) {
  RS_CHECK(!steps.empty(), "lesson ", number, ": say() before the first step");
  va_list args;
  va_start(args, format);
  steps.back().text += vformat(format, args) + '\n';
  va_end(args);
}

void Script::say_config(const LayerConfig& cfg, const char* after) {
  RS_CHECK(!steps.empty(), "lesson ", number, ": say_config() before the first step");
  steps.back().text += wrap(cfg.summary() + after, 92, "  ");
}

void Script::table(const Table& t) {
  RS_CHECK(!steps.empty(), "lesson ", number, ": table() before the first step");
  steps.back().text += t.str();
  steps.back().tables.push_back(t.str());
}

void Script::block(const std::string& lines) {
  RS_CHECK(!steps.empty(), "lesson ", number, ": block() before the first step");
  steps.back().text += lines;
  steps.back().tables.push_back(lines);
}

void Script::trust(const model::RunKind& kind, const model::Hardware* hw) {
  const model::ErrorBand band = model::error_band(kind);
  if (band.found) record("band_low", band.lo), record("band_high", band.hi);
  paragraph("How far to trust these times: " + model::band_text(band, kind) + (hw ? model::unvalidated_gpu_note(*hw) : "") +
            " (`ringside validate`).");
}

void Script::paragraph(const std::string& text) {
  const std::string lines = wrap(text, 92);
  size_t start = 0;
  for (size_t end = lines.find('\n'); end != std::string::npos; start = end + 1, end = lines.find('\n', start))
    say("%s", lines.substr(start, end - start).c_str());
}

void Script::blank() {
  RS_CHECK(!steps.empty(), "lesson ", number, ": blank() before the first step");
  steps.back().text += '\n';
}

double Script::record(const std::string& key, double value) {
  numbers[key] = value;
  return value;
}

namespace {

// "  1. text", wrapped to 92 columns under its first word.
std::string numbered(size_t n, const std::string& text) {
  std::string lines = wrap(text, 92, "     ");
  const std::string label = fmt("  %zu. ", n);
  return label + lines.substr(std::min(label.size(), size_t(5)));
}

}  // namespace

void Script::check_yourself(const std::vector<Question>& questions) {
  RS_CHECK(questions.size() >= 3, "lesson ", number, ": a check needs at least three questions");
  std::string asked, answered;
  for (size_t i = 0; i < questions.size(); ++i) {
    const Question& q = questions[i];
    record(fmt("check.%zu", i + 1), q.answer);
    asked += numbered(i + 1, q.question);
    answered += numbered(i + 1, q.shown + ": " + q.why + ".");
  }
  step("Check yourself");
  say("Work these out from the steps before; the next step gives the answers, computed by this");
  say("lesson's runs and formulas (the tests hold each one).");
  blank();
  block(asked);
  step("Answers");
  block(answered);
}

std::vector<RunRecord> Script::run(const RunPlan& plan, const std::string& label, const LocalOptions& local,
                                   const RankOptions& rank) {
  for (const trace::RankTrace& r : trace.ranks)
    RS_CHECK(r.strategy != label, "lesson ", number, ": two runs labelled ", label);
  if (trace.ranks.empty()) {
    // The first run describes the trace (the viewer's header and tile map read these).
    trace::RunInfo& run = trace.run;
    run.producer = "ringside lesson " + std::to_string(number);
    run.config = plan.config_json();
    run.layout = to_string(plan.requested_layout());
    run.ranks = plan.P, run.backend = "local", run.dtype = "float32", run.device = "cpu";
    run.clock = "steady_clock, one process";
  } else if (const nlohmann::json own = plan.config_json(); own != trace.run.config) {
    // A later run of another configuration (packed documents, another layout) carries its own,
    // so that its tile map and header describe what it ran, not what the first run did.
    trace.run.group_configs[label] = own;
  }
  static const int64_t origin = trace::Clock::steady_now_ns();
  trace::Clock clock;
  clock.origin_ns = origin;
  const size_t first = trace.ranks.size();
  TraceSink sink{clock, &trace.ranks};
  trackers.push_back(std::make_shared<MemoryTracker>());  // outlives the results' tensors
  std::vector<RunRecord> out = run_local_ranks(plan, DType::f32, *trackers.back(), local, &sink, rank);
  for (size_t i = first; i < trace.ranks.size(); ++i) trace.ranks[i].strategy = label;
  return out;
}

namespace {

// The metrics of one group of a trace, computed on that group alone.
trace::StrategyMetrics metrics_of(const trace::TraceData& t, const std::string& label) {
  trace::TraceData one;
  one.run = t.run, one.other = t.other;
  for (const trace::RankTrace& r : t.ranks)
    if (r.strategy == label) one.ranks.push_back(r);
  std::vector<trace::StrategyMetrics> m = trace::compute_metrics(one);
  RS_CHECK(m.size() == 1, "no timeline labelled ", label);
  return m[0];
}

}  // namespace

const trace::StrategyMetrics& Script::modeled(const std::string& label) {
  const std::string name = modeled_name(label);
  if (const auto it = modeled_metrics.find(name); it != modeled_metrics.end()) return it->second;
  model::add_modeled_twins(trace, hw, {}, label);
  return modeled_metrics[name] = metrics_of(trace, name);
}

const trace::StrategyMetrics& Script::dry_run(const RunPlan& plan, const std::string& label, const model::Hardware* on,
                                              const model::ModelOptions& options, const RankOptions& rank) {
  const model::Hardware& profile = on ? *on : hw;
  const std::string name = modeled_name(label, on);
  for (const trace::RankTrace& r : trace.ranks) RS_CHECK(r.strategy != name, "lesson ", number, ": two runs labelled ", name);
  trackers.push_back(std::make_shared<MemoryTracker>());
  RankOptions recorded = rank;
  recorded.overlap_grad_reduce = recorded.overlap_grad_reduce || options.overlap_grad_reduce;
  trace::TraceData modeled = model::model_trace(model::dry_run(plan, *trackers.back(), nullptr, recorded), profile, options);
  add_modeled(std::move(modeled.ranks), label, profile, options).dry_run = plan.config_json();
  return modeled_metrics[name] = metrics_of(trace, name);
}

trace::GroupInfo& Script::add_modeled(std::vector<trace::RankTrace> ranks, const std::string& label, const model::Hardware& profile,
                                      const model::ModelOptions& options) {
  trace::GroupInfo& entry = model::insert_modeled_group(trace, std::move(ranks), label, profile, options, trace.ranks.size());
  if (profile.name == hw.name) trace.run.twins_hardware = hw.to_json();
  return entry;
}

double attention_hidden_pct(const trace::StrategyMetrics& m) {
  const std::optional<trace::Breakdown> b = trace::sublayer_comm(m, "attention");
  return b ? b->overlap_pct() : std::nan("");
}

RunPlan plan_of(const std::string& name, const LayerConfig& cfg, int P, Layout layout) {
  ParallelConfig par = parse_parallel_config(name);
  par.layout = layout;
  return resolve(par, cfg, P);
}

double worst_error(const Tensor& out, const Tensor& dx, const LayerWeights& grads, const ReferenceRun& ref) {
  return errors_against(out, dx, grads, ref).worst.second;
}

std::optional<Focus> Script::window(const std::string& label, const std::function<bool(const trace::Event&)>& pred) const {
  std::optional<Focus> f;
  for (const trace::RankTrace& r : trace.ranks) {
    if (r.strategy != label) continue;
    for (const trace::Event& e : r.events)
      if (pred(e)) {
        if (!f) f = Focus{label, e.ts_ns, e.end_ns()};
        f->begin_ns = std::min(f->begin_ns, e.ts_ns);
        f->end_ns = std::max(f->end_ns, e.end_ns());
      }
  }
  return f;
}

std::optional<Focus> Script::phase(const std::string& label, const std::string& name) const {
  return window(label, [&](const trace::Event& e) { return e.kind == trace::Kind::phase && (name.empty() || e.name == name); });
}

}  // namespace ringside::lessons

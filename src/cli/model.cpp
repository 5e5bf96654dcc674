// `ringside model`: a dry run of a strategy at any size, replayed on named hardware.
#include <optional>
#include <chrono>
#include <cstdio>
#include <filesystem>

#include "cli/commands.h"
#include "layer/presets.h"
#include "cli/format.h"
#include "core/error.h"
#include "core/output.h"
#include "core/progress.h"
#include "model/bands.h"
#include "model/validation.h"
#include "model/flops.h"
#include "model/model.h"
#include "model/time_parts.h"
#include "lessons/lesson.h"  // wrap
#include "run/runner.h"
#include "trace/kineto.h"
#include "trace/metrics.h"

namespace ringside::cli {

CLI::App* add_model(CLI::App& app, ModelCommandOptions& o) {
  std::string names, hw;
  for (const ParallelConfig& s : strategies()) names += (names.empty() ? "" : ", ") + s.name();
  for (const std::string& n : model::hardware_names()) hw += (hw.empty() ? "" : ", ") + n;
  CLI::App* m = app.add_subcommand(
      "model", "What if: a dry run of one strategy at any size, replayed on named hardware (time, overlap, memory)");
  add_config_flags(*m, o.cfg, o.choices);
  refuse_seed_without_random_docs(*m);
  m->get_option("--preset")->each([&o](const std::string& v) { o.preset = v; });
  m->add_option("--strategy", o.strategy, "one of: " + names + ", tp (TP without sequence parallelism), or a configuration such as tp8xring8 (or the degrees below)")
      ->check(non_empty("--strategy needs a name"));
  add_parallel_flags(*m, o.parallel, true);
  // The schedule grows as P^2 events (O(P) steps on each of P ranks): 256 ranks of the ring
  // are 4.0 million events, about 85 s and 3.4 GB here (model::schedule_bytes).
  m->add_option("--ranks", o.ranks, "number of ranks P (the dry run's threads), up to 256")->capture_default_str()->check(CLI::Range(1, 256));
  m->add_option("--hw", o.hw, "hardware: " + hw + ", or a profile JSON file")->capture_default_str()->check(
      non_empty("--hw needs a profile"));
  add_modeling_flags(*m, o.modeling, ModelingScope::model);
  m->add_option("--only", o.only, "attention: model the strategy's attention alone (its communication included), as "
                                  "attention benchmarks measure it")
      ->check(CLI::IsMember({"attention"}));
  m->add_option("--json", o.json, "write the modeled times (seconds: /layer/forward_s, /attention/backward_s, ...), per rank "
                                  "and for the slowest rank")
      ->option_text("FILE")
      ->check(non_empty("--json needs a file name"));
  m->add_option("--trace", o.trace, "write the modeled timeline (Chrome trace JSON; ringside-viewer marks it modeled): the layer on every rank, "
                "or with --gbs the step, one row per pipeline stage (as plan --gbs --trace draws it)")
      ->option_text("FILE")
      ->check(non_empty("--trace needs a file name"));
  m->add_option("--gbs", o.gbs, "the whole step around this group (model/step_plan.h): the global batch in sequences (the microbatch is --batch)")
      ->check(CLI::Range(1, 1 << 24));
  m->add_option("--pp", o.pp, "with --gbs: pipeline stages PP")->capture_default_str()->check(CLI::Range(1, 16384));
  m->add_option("--vp", o.vp, "with --gbs: model chunks a rank (interleaved 1F1B)")->capture_default_str()->check(CLI::Range(1, 1000));
  m->add_option("--dp", o.dp, "with --gbs: data-parallel replicas DP")->capture_default_str()->check(CLI::Range(1, 16384));
  m->add_option("--zero", o.zero, "with --gbs: ZeRO stage 0, 1, 2 or 3")->capture_default_str()->check(CLI::Range(0, 3));
  m->add_option("--layers", o.layers, "with --gbs: L, the layers (default: the preset's depth)")->check(CLI::Range(1, 1000));
  m->add_option("--vocab", o.vocab, "with --gbs: V, the vocabulary of the embedding and LM head (default: the preset's; 0: none)")
      ->check(CLI::Range(int64_t{0}, int64_t{1} << 24));
  m->add_flag("!--no-overlap-grad-reduce", o.overlap_grad_reduce, "with --gbs: expose the gradient reduction instead of overlapping it");
  m->add_option("--from", o.from, "model this recorded trace (ringside run/compare --trace) instead of a dry run")
      ->option_text("FILE")
      ->check(non_empty("--from needs a file name"));
  m->add_option("--compare", o.compare,
                "a measured run to print beside the dry run, phase by phase (time, compute, comm, and the ratio "
                "measured / modeled): a folder of PyTorch profiler (Kineto) traces, one file per rank, several such "
                "files, or any ringside trace, of --ranks ranks; each figure its slowest rank's (docs/cli.md)")
      ->option_text("RUN...")
      ->each([](const std::string& v) {
        if (v.empty()) throw CLI::ValidationError("--compare", "--compare needs a folder or file name");
      });
  add_align_option(*m, o.align);
  m->footer(
      "Examples:\n"
      "  ringside model --seq 1048576 --ranks 64 --strategy ring --hw h100-nvlink --trace out/1m.json\n"
      "  ringside model --strategy ulysses --ranks 8 --seq 262144 --hw a100-nvlink\n"
      "  ringside model --only attention --strategy ring --layout zigzag --ranks 8 --seq 65536 --hidden 4096 --heads 32 \\\n"
      "      --kv-heads 8 --hw h800-nvlink --attention-kernel fa2 --json out/rfa.json\n"
      "  ringside model --tp 8 --cp 8 --ranks 64 --seq 1048576 --heads 64 --kv-heads 8 --hidden 8192 --ffn 28672\n"
      "  ringside run --strategy ring --trace out/r.json && ringside model --from out/r.json --hw h200\n"
      "  ringside model --compare tests/fixtures/kineto/ring4 --strategy ring --ranks 4 --seq 256 --hidden 64 --heads 4 \\\n"
      "      --kv-heads 4 --no-causal --no-rope --dropout 0 --layout contiguous --dtype fp32 --only attention --hw a100-nvlink\n"
      "    (the fixture's ring attention: 4 ranks of 64 tokens, 4 heads of d 16, fp32, no mask, K/V around the ring;\n"
      "    it has no projections, norms or MLP, hence --only attention; its backward is hand-written and its\n"
      "    all-reduce of a 256 x 256 gradient, grad_all_reduce, is a phase of its own that the model has not;\n"
      "    its times are those of 4 processes sharing 2 CPU cores, the model's those of 4 A100s)");
  return m;
}

model::RunKind run_kind_of(const ModelCommandOptions& o, const ModelRun& run, const std::string& strategy) {
  ParallelConfig par = run.plan ? run.plan->par : ParallelConfig{};
  if (!run.plan && !strategy.empty()) {
    try {
      par = parse_parallel_config(strategy);  // a recorded trace's strategy (--from)
    } catch (const ConfigError&) {
    }
  }
  return model::run_kind(o.only == "attention", run.step.has_value(), par, run.modeling.dtype, model::at_roofline(run.hw, run.modeling));
}

namespace {

std::string seconds(double ns) { return format_seconds(ns / 1e9); }
// A GPU's capacity in GiB, as every memory figure, and in the decimal GB its profile and datasheet
// give it: "74.51 GiB (80.00 GB)".
std::string capacity(double bytes) { return format_bytes(bytes) + " (" + format_bytes(bytes, ByteUnits::decimal) + ")"; }
std::string pct(double p) { return std::isnan(p) ? "-" : std::to_string(int(std::lround(p))) + "%"; }

}  // namespace

namespace {

// The step's options: L and V from the flags, else the preset's (the model options are the caller's).
model::StepPlanOptions step_options(const ModelCommandOptions& o) {
  const ModelPreset* preset = o.preset.empty() ? nullptr : &find_preset(o.preset);
  model::StepPlanOptions so;
  so.layers = o.layers ? o.layers : preset ? preset->layers : 1;
  so.vocab = o.vocab >= 0 ? o.vocab : preset ? preset->vocab : 0;
  so.gbs = o.gbs, so.mbs = int(o.cfg.b), so.pp = o.pp, so.vp = o.vp, so.dp = o.dp, so.zero = o.zero;
  so.overlap_grad_reduce = o.overlap_grad_reduce;
  return so;
}

}  // namespace

std::pair<int, int64_t> step_depth(const ModelCommandOptions& o) {
  const model::StepPlanOptions so = step_options(o);
  return {so.layers, so.vocab};
}

model::ModeledStep modeled_step(const ModelCommandOptions& o, const model::ModelOptions& modeling, const RunPlan& plan,
                                const model::Hardware& hw) {
  model::StepCandidate c;
  c.layer.par = plan.par;
  c.layer.par.layout = plan.requested_layout();  // as the step's name shows it: zigzag, not auto
  c.pp = o.pp, c.vp = o.vp, c.dp = o.dp, c.zero = o.zero, c.order = o.parallel.outer_order();
  const int gpus = plan.par.tp * plan.par.cp * o.pp * o.dp;
  model::StepPlanOptions so = step_options(o);
  so.modeling = modeling;
  return model::model_step_of(o.cfg, c, so, model::memory_per_rank(hw, gpus));
}

model::StepRow model_step(const ModelCommandOptions& o, const model::ModelOptions& modeling, const RunPlan& plan,
                          const model::Hardware& hw) {
  return modeled_step(o, modeling, plan, hw).row;
}

model::Hardware check_model_command(const ModelCommandOptions& o, std::optional<RunPlan>* plan, model::ModelOptions* modeling) {
  const bool dry = !o.strategy.empty() || o.parallel.given();
  if (!o.compare.empty() && !o.from.empty())
    throw ConfigError("model: --compare sets a measured run beside the dry run of the configuration the flags name, "
                      "--from models a recorded trace: give one");
  if (!o.compare.empty() && !dry)
    throw ConfigError("model: --compare needs the configuration to model beside the run: give --strategy or the degrees (--tp, --cp, ...)");
  if (!o.compare.empty() && o.gbs > 0)
    throw ConfigError("model: --compare sets one layer's schedule beside the run; --gbs models a whole step of L layers: give one");
  if (o.compare.empty() && o.align != "auto")
    throw ConfigError("model: --align puts the clocks of --compare's PyTorch traces together: give --compare");
  if (o.from.empty() && !dry)
    throw ConfigError("model: give --strategy or the degrees (a dry run), or --from FILE (a recorded trace)");
  if (!o.from.empty() && dry)
    throw ConfigError("model: --strategy and the degrees (--tp, --cp, ...) run a dry run, --from reads a trace: give one");
  if (o.gbs == 0 && (o.pp != 1 || o.vp != 1 || o.dp != 1 || o.zero != 1 || o.layers || o.vocab >= 0 || !o.overlap_grad_reduce ||
                     !o.modeling.grad_reduce.empty()))
    throw ConfigError("model: --pp, --vp, --dp, --zero, --layers, --vocab, --grad-reduce and --no-overlap-grad-reduce model a whole step: "
                      "give --gbs too");
  if (o.gbs == 0 && o.parallel.order.size() > 5)
    throw ConfigError("model: --order " + o.parallel.order + " also places a whole step's stages and replicas around the group: give --gbs "
                      "too, or --order " + o.parallel.group_order() + " for the group alone");
  if (o.modeling.overlap_grad_reduce && o.gbs > 0)
    throw ConfigError("model: --gbs overlaps the gradient reduction already (--no-overlap-grad-reduce exposes it); "
                      "--overlap-grad-reduce is the one layer's");
  if (o.modeling.overlap_grad_reduce && (!o.from.empty() || !o.only.empty()))
    throw ConfigError(std::string("model: --overlap-grad-reduce buckets the dry run's gradient all-reduce; ") +
                      (o.from.empty() ? "--only attention models no gradients" : "a recorded trace (--from) has one all-reduce, after the backward"));
  if (o.gbs > 0 && !o.from.empty()) throw ConfigError("model: --gbs models the step around a dry run, not around a recorded trace (--from)");
  if (o.gbs > 0 && !o.only.empty()) throw ConfigError("model: --gbs models the whole step; --only attention models the attention alone: give one");
  if (o.gbs > 0) {
    model::StepPlanOptions so = step_options(o);
    so.gpus = o.ranks * o.pp * o.dp;
    model::check_step_options(o.cfg, so);
  }
  model::Hardware hw = model::load_hardware(o.hw);
  const model::ModelOptions mo = o.modeling.checked({hw});
  if (dry) {
    RunPlan p = resolve(o.choices.applied_to(strategy_from(o.strategy, o.parallel, o.ranks)), o.cfg, o.ranks);
    if (plan) *plan = std::move(p);
  }
  if (modeling) *modeling = mo;
  return hw;
}

void run_model(const ModelCommandOptions& o, ModelRun& run, std::optional<trace::TraceData>* schedule_cache, ProgressReport* progress) {
  ProgressReport silent;
  ProgressReport& report = progress ? *progress : silent;
  using clock = std::chrono::steady_clock;
  run.hw = check_model_command(o, &run.plan, &run.modeling);  // before the dry run: a bad kernel or dtype costs nothing
  const model::ModelOptions& mo = run.modeling;
  if (!o.compare.empty()) run.measured = read_measured(o, *run.plan);  // before it too: a run of other ranks costs nothing

  trace::TraceData schedule;
  auto t0 = clock::now();
  if (schedule_cache && *schedule_cache && o.from.empty()) {
    schedule = **schedule_cache;
  } else if (o.from.empty()) {
    // Tensors cost nothing in a dry run, but each rank lists its tokens' global positions
    // (RoPE, dropout, the layout): 8 bytes a token, a few lists at once. And the schedule
    // itself: model_schedule_bytes.
    require_memory(32.0 * double(o.cfg.tokens()) + model::schedule_bytes(o.ranks, o.cfg, run.plan->requested_layout()),
                   detail::concat("the dry run on ", o.ranks, " ranks (its schedule and token positions)"),
                   "--ranks, --seq or --batch", 0, 2 * o.ranks);
    // The dry run: the strategy's own code, with tensors that hold no memory and no math.
    RankOptions rank;
    rank.overlap_grad_reduce = mo.overlap_grad_reduce;  // the buckets, posted where their gradients are ready
    report.phase(detail::concat("dry-running ", run.plan->name, " on ", o.ranks, " ranks (at most ",
                                std::llround(model::schedule_events_bound(o.ranks, o.cfg, run.plan->requested_layout())),
                                " events to record)"),
                 1, "dry runs");
    schedule = model::dry_run(*run.plan, run.tracker, &run.results, rank);
    report.advance();
  } else {
    report.phase("reading the recorded trace " + o.from, 1, "traces");
    schedule = trace::read_trace(o.from);
    report.advance();
    size_t recorded = 0;
    for (const trace::RankTrace& r : schedule.ranks) recorded += r.events.size();
    if (recorded == 0) throw ConfigError("--from " + o.from + ": the trace holds no events to model");
    for (const trace::RankTrace& r : schedule.ranks)  // the modeled trace is written in the same format
      if (!o.trace.empty() && r.rank >= trace::kMaxRanks)
        throw ConfigError(detail::concat("--from ", o.from, ": rank ", r.rank, r.strategy.empty() ? "" : " of " + r.strategy,
                                         " is beyond the ranks a ringside trace holds (0 to ", trace::kMaxRanks - 1,
                                         "), so --trace cannot write its model"));
  }
  if (schedule_cache && !*schedule_cache && o.from.empty()) *schedule_cache = schedule;
  if (o.only == "attention") schedule = model::attention_only(std::move(schedule));
  run.dry_s = std::chrono::duration<double>(clock::now() - t0).count();
  t0 = clock::now();
  run.modeled = model::model_trace(schedule, run.hw, mo, progress);
  run.model_s = std::chrono::duration<double>(clock::now() - t0).count();
  for (const trace::RankTrace& r : run.modeled.ranks) run.events += r.events.size();
  if (run.events == 0 && !o.from.empty())
    throw ConfigError("--from " + o.from + ": the trace holds only modeled twins (otherData.modeled_groups), no recorded run to model");
  if (o.only == "attention" &&
      std::none_of(run.modeled.ranks.begin(), run.modeled.ranks.end(), [](const trace::RankTrace& r) {
        return std::any_of(r.events.begin(), r.events.end(), [](const trace::Event& e) { return e.sublayer == "attention"; });
      }))
    throw ConfigError("--only attention: the schedule has no attention sublayer to model");
  report.phase("measuring the modeled timeline (time, overlap, memory per rank)", 1, "timelines");
  run.metrics = trace::compute_metrics(run.modeled);
  run.reports = model::report_of(run.modeled, run.metrics);
  report.advance();
  if (o.gbs > 0) {
    report.phase("modeling the step around the group (its dry run without the gradient sync, its replay, the pipeline)", 1, "steps");
    run.step = modeled_step(o, mo, *run.plan, run.hw);
    if (run.step->row.status == model::PlanStatus::ranked) {
      run.bubble = model::bubble_parts(run.step->config, run.step->layer, run.step->ends, model::memory_per_rank(run.hw, o.ranks * o.pp * o.dp), mo);
      run.step_sent = model::step_bytes_sent(*run.step, *run.plan, mo.dtype);
    }
    report.advance();
  }
  report.finish();
}

namespace {

// The layer's time on a GPU by class, the mean of its ranks (model/time_parts.h): its exposed
// communication by group (adding up to the sum's exposed over the ranks), then every class.
void print_time_parts(const model::TimeParts& p) {
  using model::TimeClass;
  std::printf("  exposed    per rank (mean) %s = CP %s + TP %s + grads %s\n", format_seconds(p.exposed()).c_str(),
              format_seconds(p[TimeClass::cp]).c_str(), format_seconds(p[TimeClass::tp]).c_str(),
              format_seconds(p[TimeClass::grads]).c_str());
  std::string all;
  for (int c = 0; c < model::kTimeClasses; ++c)
    if (p.seconds[c] > 0) all += (all.empty() ? "" : ", ") + std::string(model::to_string(TimeClass(c))) + " " + format_seconds(p.seconds[c]);
  std::printf("%s", lessons::wrap("by class, per rank (mean): " + all, 104, "             ").replace(0, 13, "  time       ").c_str());
}

// Prints one modeled strategy's block: each rank's time, compute, communication and peak memory
// (the first and last four of more than 12), their sums, the layer's and attention's times on
// the slowest rank, and whether the peaks fit the GPU's memory.
void print_strategy(const ModelCommandOptions& o, const ModelRun& run, const trace::StrategyMetrics& m,
                    const model::StrategyReport& report) {
  const model::Hardware& hw = run.hw;
  const std::optional<RunPlan>& st = run.plan;
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
                o.only == "attention" ? "-" : format_bytes(double(r.peak_memory_bytes)).c_str());
  }
  std::printf("  %5s %11s %11s %11s %8s %11s  imbalance %.2f\n", "sum", "", seconds(double(m.total.compute_ns)).c_str(),
              seconds(double(m.total.comm_ns)).c_str(), pct(m.total.overlap_pct()).c_str(),
              seconds(double(m.total.exposed_comm_ns)).c_str(), m.compute_imbalance);
  print_time_parts(model::layer_time_parts(run.modeled, m, hw, run.modeling));
  const model::RunKind kind = run_kind_of(o, run, m.strategy);
  const std::string trust = "  trust      " + model::band_text(model::error_band(kind), kind) + "\n";
  if (o.only == "attention") {
    std::printf("  attention  forward %s, backward %s (each on its slowest rank); both: %s on the slowest rank\n",
                format_seconds(report.slowest.layer.forward_s).c_str(), format_seconds(report.slowest.layer.backward_s).c_str(),
                seconds(double(span)).c_str());
    std::fputs(trust.c_str(), stdout);
    return;  // no layer around it: its memory is the layer's (model without --only)
  }
  std::printf("  layer      forward %s, backward %s (each on its slowest rank); both: %s on the slowest rank\n",
              format_seconds(report.slowest.layer.forward_s).c_str(), format_seconds(report.slowest.layer.backward_s).c_str(),
              seconds(double(span)).c_str());
  // Attention's own communication (K/V, all-to-alls, gathers) under compute: compare's "attn hidden".
  const std::optional<trace::Breakdown> attention_comm = trace::sublayer_comm(m, "attention");
  const std::string hidden = attention_comm ? "; its own communication " + pct(attention_comm->overlap_pct()) + " hidden (attn hidden)"
                                            : "; no communication of its own";
  std::printf("  attention  forward %s, backward %s of it%s\n", format_seconds(report.slowest.attention.forward_s).c_str(),
              format_seconds(report.slowest.attention.backward_s).c_str(), hidden.c_str());
  if (!run.step) std::fputs(trust.c_str(), stdout);
  if (st) {
    const double scale = run.modeling.dtype == "fp32" ? 1.0 : 0.5;
    int64_t saved = 0;
    for (const RunRecord& r : run.results) saved = std::max(saved, r.peak_saved);
    std::printf("  saved      activations per rank %s (formula %s)\n", format_bytes(scale * double(saved)).c_str(),
                format_bytes(scale * double(parallel_saved_bytes(*st, 0, DType::f32))).c_str());
    print_layer_bytes_sent(*st, run.modeling.dtype, run.results);
  }
  // A what-if that does not fit is an answer, not a failure: the exit status stays 0.
  if (hw.memory_shared) {  // this machine: the ranks share one memory
    std::printf("  memory     %s: the ranks' peaks add up to %s of this machine's %s\n",
                double(total_peak) > hw.memory_bytes ? "OUT OF MEMORY" : "fits", format_bytes(double(total_peak)).c_str(),
                capacity(hw.memory_bytes).c_str());
  } else if (run.step) {  // the step below gives the verdict: here one layer alone, without the optimizer or L - 1 more layers
    std::printf("  memory     one layer's peak (its weights, gradients, saved activations and working peak): rank %d's %s;\n"
                "             the step's memory, with all its layers and the optimizer state, is below\n",
                worst, format_bytes(double(peak)).c_str());
  } else if (double(peak) > hw.memory_bytes) {
    std::printf("  memory     OUT OF MEMORY: rank %d needs %s at its peak; a %s has %s\n", worst, format_bytes(double(peak)).c_str(),
                hw.name.c_str(), capacity(hw.memory_bytes).c_str());
  } else {
    std::printf("  memory     fits: one layer's largest peak, rank %d's %s, is %.0f%% of %s (a whole step, its layers and\n"
                "             optimizer state: --gbs, or plan --max-seq for the longest sequence that fits)\n",
                worst, format_bytes(double(peak)).c_str(), 100.0 * double(peak) / hw.memory_bytes, capacity(hw.memory_bytes).c_str());
  }
}

// The step around the group: its throughput, MFU, and where its time and memory go.
void print_step(const ModelCommandOptions& o, const ModelRun& run, const model::StepRow& r, const model::Hardware& hw) {
  const model::StepCandidate& c = r.candidate;
  const model::StepCost& s = r.cost;
  const int gpus = c.layer.par.tp * c.layer.par.cp * c.pp * c.dp;
  std::printf("\n  the step (modeled): %s on %d GPUs, GBS %d sequences, m = %d microbatches of %lld\n", c.name().c_str(), gpus, o.gbs,
              c.microbatches, (long long)o.cfg.b);
  if (hw.memory_shared)
    std::printf("    memory per rank: the %d ranks share this machine's %s, %s each\n", gpus, format_bytes(hw.memory_bytes).c_str(),
                format_bytes(model::memory_per_rank(hw, gpus).memory_bytes).c_str());
  const double capacity = model::memory_per_rank(hw, gpus).memory_bytes;
  const std::string memory = detail::concat("    memory of stage ", s.fullest_stage, ": ", model::memory_text(s, capacity), " of ",
                                            format_bytes(capacity), "\n      (", model::kMemoryTextLegend, ")\n");
  if (r.status != model::PlanStatus::ranked) {
    std::printf("    %s\n%s", r.reason.c_str(), r.status == model::PlanStatus::out_of_memory ? memory.c_str() : "");
    return;
  }
  std::printf("    step %s: pipeline %s (bubble %.1f%%), DP collectives %s of which %s exposed, optimizer %s\n",
              format_seconds(s.step_s).c_str(), format_seconds(s.pipeline_s).c_str(), 100 * s.bubble_fraction,
              format_seconds(s.dp_s).c_str(), format_seconds(s.dp_exposed_s).c_str(), format_seconds(s.optimizer_s).c_str());
  print_step_sent_and_bubble(run.bubble, run.step_sent);
  std::printf("    %.*f tokens/s per GPU; MFU %.1f%% (%s)\n", r.tokens_per_s_per_gpu >= 1 ? 1 : 4, r.tokens_per_s_per_gpu, 100 * r.mfu,
              model::attention_count_text(o.cfg).c_str());
  const model::RunKind kind = run_kind_of(o, run);
  const model::ErrorBand band = model::error_band(kind);
  std::printf("    trust: %s%s%s\n", model::band_text(band, kind).c_str(),
              band.found ? (": real GPUs would likely measure " + model::rate_range_text(r.tokens_per_s_per_gpu, band, "tokens/s per GPU")).c_str() : "",
              model::unvalidated_gpu_note(hw).c_str());
  std::printf("    exposed on the first stage: TP %s, CP %s, PP %s, DP %s\n", format_seconds(s.tp_exposed_s).c_str(),
              format_seconds(s.cp_exposed_s).c_str(), format_seconds(s.pp_exposed_s).c_str(), format_seconds(s.dp_exposed_s).c_str());
  std::fputs(memory.c_str(), stdout);
}

}  // namespace

ModelFiles model_files(const ModelCommandOptions& o) {
  ModelFiles f;
  f.outputs = {{"--trace", o.trace}, {"--json", o.json}};
  f.runs = {{"--from", o.from}};
  for (const std::string& c : trace::trace_input_files(o.compare)) f.runs.push_back({"--compare", c});  // a folder's files too
  const auto [stack_option, stack_file] = o.modeling.input();
  f.configuration = {{"--hw", output::is_regular(o.hw) ? o.hw : ""}, {stack_option, stack_file}};
  return f;
}

int model_command(const ModelCommandOptions& o) {
  // The outputs and the inputs: the recorded runs, and a profile or stack given as a file.
  const ModelFiles files = model_files(o);
  std::vector<output::Named> inputs = files.runs;
  inputs.insert(inputs.end(), files.configuration.begin(), files.configuration.end());
  output::check_distinct(files.outputs, inputs);
  if (!o.trace.empty()) output::check(o.trace, "--trace");
  if (!o.json.empty()) output::check(o.json, "--json");
  ModelRun run;
  ProgressLine progress("model");  // on stderr, every 2 s
  run_model(o, run, nullptr, &progress);
  if (!o.trace.empty() && run.step && run.step->row.status != model::PlanStatus::ranked)  // before any output
    throw ConfigError("model --trace: the step does not fit, so it has no timeline to draw: " + run.step->row.reason);
  const model::Hardware& hw = run.hw;
  const trace::TraceData& modeled = run.modeled;
  const std::optional<RunPlan>& st = run.plan;
  if (st) {
    std::printf("ringside model: %s%s on P = %d ranks, %s\n", o.only == "attention" ? "the attention of " : "", st->name.c_str(),
                o.ranks, o.cfg.summary(st->recompute()).c_str());
    std::printf("  weights    per layer %s\n", parameter_summary(o.cfg).c_str());
  } else
    std::printf("ringside model: the schedule recorded in %s%s\n", o.from.c_str(), o.only == "attention" ? ", its attention" : "");
  std::printf("  hardware   %s: %s\n", hw.name.c_str(), hw.description.c_str());
  const model::ModelOptions& mo = run.modeling;
  const double peak = hw.peak_flops(mo.dtype);
  std::printf("             %.4g TFLOP/s %s (peak), %.4g GB/s memory, %.4g GB; %s\n", peak / 1e12, mo.dtype.c_str(),
              hw.memory_bandwidth / 1e9, hw.memory_bytes / 1e9, model::tiers_words(hw.tiers).c_str());
  // How the job's GPUs fill the domains: the group's ranks, or with --gbs the whole step's.
  const int job = int(modeled.ranks.size()) * (o.gbs > 0 ? o.pp * o.dp : 1);
  if (job > 0 && hw.tiers.size() > 1) std::printf("             placed: %s\n", hw.topology(job).domain_words().c_str());
  std::printf("  schedule   %zu events on %zu ranks: %s %.2f s, model %.2f s (this machine, varying)\n", run.events,
              modeled.ranks.size(), o.from.empty() ? "dry run" : "read", run.dry_s, run.model_s);
  const std::string bytes = mo.dtype == "fp32" ? "fp32 bytes" : "bf16: half the fp32 run's bytes";
  const std::string kernel = model::attention_kernel_of(hw, mo);
  std::printf("  model      %s;\n             %s\n", model::rates_summary(hw, mo, "\n             ").c_str(), bytes.c_str());

  for (size_t g = 0; g < run.metrics.size(); ++g) print_strategy(o, run, run.metrics[g], run.reports[g]);
  if (run.step) print_step(o, run, run.step->row, hw);
  if (run.measured) print_comparison(o, run);
  if (!o.json.empty()) {
    nlohmann::json j = {{"producer", "ringside model"},
                        {"modeled", true},
                        {"hardware", hw.name},
                        {"efficiency", mo.efficiency},
                        {"dtype", mo.dtype},
                        {"ranks", int(modeled.ranks.size())}};
    if (!kernel.empty()) j["attention_kernel"] = kernel;
    if (!o.only.empty()) j["only"] = o.only;
    if (st) j["config"] = st->config_json(), j["strategy"] = st->name;
    if (st && o.only.empty()) j["bytes_sent"] = bytes_sent_json(model::layer_bytes_sent(*st, mo.dtype));
    j["strategies"] = nlohmann::json::array();
    for (const model::StrategyReport& r : run.reports) j["strategies"].push_back(model::report_json(r, o.only == "attention"));
    // The first strategy's figures at the top, for tools that read one run: /layer/forward_s, ...
    if (!run.reports.empty()) j.update(model::report_json(run.reports.front(), o.only == "attention"));
    j.erase("ranks"), j["ranks"] = j["strategies"].front()["ranks"];
    if (run.step) {
      j["step"] = step_row_json(run.step->row, hw, 1, mo);
      j["step"]["mfu_counts"] = model::mfu_counts_text(o.cfg, mo.dtype);
      if (run.step->row.status == model::PlanStatus::ranked)
        j["step"]["bubble_parts"] = bubble_json(run.bubble), j["step"]["bytes_sent"] = bytes_sent_json(run.step_sent);
    }
    const model::RunKind kind = run_kind_of(o, run, run.reports.empty() ? "" : run.reports.front().strategy);
    const trace::ModelingInfo modeling = model::modeling_info(hw, mo);
    j["modeling"] = modeling.to_json();
    j["software"] = software_json(modeling);
    j["band"] = model::band_json(model::error_band(kind), kind);
    output::write(o.json, j.dump(2) + "\n", "--json");
    std::printf("\n  json: %s\n", o.json.c_str());
  }
  if (!o.trace.empty() && run.step) {
    // The whole step, as plan --gbs --trace draws its winner: one row per pipeline stage.
    progress.phase("writing the modeled step to --trace", 1, "traces");
    trace::TraceData step = model::step_timeline(*run.step, model::memory_per_rank(hw, job), mo, run.step->row.candidate.name());
    step.run.config = o.cfg.to_json();
    trace::write_trace(o.trace, step);
    progress.finish();
    std::printf("\n  trace: %s (the step, modeled: one row per pipeline stage; ringside-viewer %s)\n", o.trace.c_str(), o.trace.c_str());
  } else if (!o.trace.empty()) {
    progress.phase("writing the modeled timeline to --trace", 1, "traces");
    trace::write_trace(o.trace, modeled);
    progress.finish();
    std::printf("\n  trace: %s (modeled; ringside-viewer %s)\n", o.trace.c_str(), o.trace.c_str());
  }
  return 0;
}

}  // namespace ringside::cli

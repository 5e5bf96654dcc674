// `ringside compare`: every strategy on the same input, each checked against the references.
// `ringside run`: one strategy, with its per-rank numbers and an optional dump.
//
// The path of a run: setup (where the ranks run, every check agreed before any communication),
// resolve (parallel/run_plan.h: the plan, validated once), run_job (run/runner.h: every rank's
// layer, traced), check_run (check/check.h: against the fp64 reference and the formulas), and
// the report (cli/compare_report.cpp, cli/load_balance.cpp).
#include "cli/compare.h"

#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <optional>
#include <sstream>

#include "cli/format.h"
#include "comm/trace_exchange.h"
#include "core/gpu.h"
#include "core/output.h"
#include "model/model.h"
#include "parallel/formulas.h"
#include "parallel/run_plan.h"
#include "run/phase_meter.h"
#include "trace/trace_file.h"

namespace ringside::cli {

std::pair<CLI::App*, CLI::App*> add_compare_and_run(CLI::App& app, CompareOptions& o) {
  std::string names;
  for (const ParallelConfig& s : strategies()) names += (names.empty() ? "" : ",") + s.name();
  auto common = [&](CLI::App* c) {
    add_config_flags(*c, o.cfg, o.choices);
    c->add_option("--ranks", o.ranks, "number of ranks P (with mpi: must equal mpirun's -np)")
        ->capture_default_str()
        ->check(CLI::Range(1, 256))
        ->each([&](const std::string&) { o.ranks_given = true; });
    c->add_option("--backend", o.backend,
                  "local: P ranks as threads of this process (default); mpi: one process per rank under mpirun "
                  "(the default when launched by mpirun); nccl: one GPU per rank (threads, or processes under mpirun)")
        ->check(CLI::IsMember({"local", "mpi", "nccl"}));
    c->add_option("--device", o.device,
                  "cpu (default) or cuda: GPU ranks; on the local backend P virtual ranks share GPU 0, each with its "
                  "own compute and comm streams")
        ->capture_default_str()
        ->check(CLI::IsMember({"cpu", "cuda"}));
    c->add_option("--timeout", o.timeout_s, "seconds a communication may wait before it fails")
        ->capture_default_str()
        ->check(CLI::Range(0.1, 3600.0))
        ->check([](const std::string& v) {
          return std::isfinite(std::strtod(v.c_str(), nullptr)) ? std::string() : std::string("must be a finite number");
        });
    c->add_option("--trace", o.trace, "write the timeline of every rank (Chrome trace JSON; opens in Perfetto)")
        ->option_text("FILE")
        ->check(non_empty("--trace needs a file name"));
    // Bounds keep every delay finite and shorter than the longest --timeout.
    auto zero_or_in = [](double lo, double hi, const char* zero_note) {
      return [=](const std::string& v) {
        char* end = nullptr;
        const double x = std::strtod(v.c_str(), &end);
        if (v.empty() || *end || !std::isfinite(x)) return std::string("must be a number");
        if (x == 0) return std::string();
        if (x < lo || x > hi) return detail::concat("must be 0 ", zero_note, " or in [", lo, ", ", hi, "]");
        return std::string();
      };
    };
    c->add_option("--link-bandwidth", o.link_gbps,
                  "local backend: make each transfer take bytes / this many GB/s, as a slower link would (0: memcpy speed)")
        ->check(zero_or_in(1e-3, 1e6, "(memcpy speed)"))
        ->option_text("GB/s");
    c->add_option("--link-latency", o.link_latency_us, "local backend: add this latency to each transfer")
        ->check(zero_or_in(1e-3, 1e8, "(none)"))
        ->option_text("us");
    std::string profiles;
    for (const std::string& n : model::hardware_names()) profiles += (profiles.empty() ? "" : ", ") + n;
    c->add_option("--hw", o.hw,
                  "the GPU profile of the modeled twin: the recorded schedule replayed there, in bf16, for time, "
                  "overlap and exposed comm that do not vary (" + profiles + ", or a profile JSON file)")
        ->capture_default_str()
        ->check(non_empty("--hw needs a profile"));
    add_modeling_flags(*c, o.modeling, ModelingScope::twin);  // the twin is one layer in bf16
    // Under mpirun every rank compares these with rank 0's before anything else (setup).
    c->parse_complete_callback([&o, c] { o.given = given_options(*c); });
  };
  CLI::App* cmp = app.add_subcommand("compare", "Run every strategy on the same input and compare them with the references");
  common(cmp);
  cmp->add_option("--strategies", o.strategies,
                  "comma-separated list of names or configurations such as tp2xring2, ulysses2xring2, tp2xall-gather2, "
                  "ring2xtp2, or tp (TP without sequence parallelism) (default: " + names + ", and TP 2 x ring and Ulysses 2 x ring when they fit P)")
      ->check(non_empty("--strategies needs a name"));
  add_parallel_flags(*cmp, o.parallel);
  cmp->add_option("--json", o.json, "also write the comparison, per tensor and per rank, as JSON")
      ->option_text("FILE")
      ->check(non_empty("--json needs a file name"));
  cmp->footer(
      "Examples:\n"
      "  ringside compare                                   # default layer, P = 4 local ranks\n"
      "  ringside compare --seq 8192 --ranks 8 --strategies ulysses --json out/u.json\n"
      "  ringside compare --ranks 8 --tp 2 --cp-comm a2a+p2p --cp-a2a 2   # one configuration (TP 2 x USP 2 x 2)\n"
      "  ringside compare --trace out/t.json && ringside trace-stats out/t.json   # the timeline\n"
      "  mpirun -np 4 ringside compare --backend mpi        # one process per rank\n"
      "  ringside compare --device cuda --ranks 4           # 4 virtual ranks on one GPU\n"
      "  ringside compare --device cuda --backend nccl --ranks 8   # one GPU per rank, NCCL");
  CLI::App* run = app.add_subcommand("run", "Run one strategy forward and backward and report each rank");
  common(run);
  run->add_option("--strategy", o.strategy, "one of: " + names + ", tp (TP without sequence parallelism), or a configuration such as tp2xring2 (or the degrees below)")
      ->check(non_empty("--strategy needs a name"));
  add_parallel_flags(*run, o.parallel);
  run->footer(
      "Examples:\n"
      "  ringside run --strategy ring --ranks 4 --seq 1024          # the ring's schedule, step by step\n"
      "  ringside run --strategy ring --link-bandwidth 1 --trace out/ring.json   # a 1 GB/s link, traced\n"
      "  ringside run --strategy ulysses --ranks 8 --heads 16 --dump out/u      # tensors as .npy\n"
      "  ringside run --tp 2 --cp 2 --cp-comm p2p --ranks 4                     # TP 2 x ring 2 (= --strategy tp2xring2)\n"
      "  ringside run --cp 4 --cp-comm a2a+p2p --cp-a2a 2 --ranks 4             # Ulysses 2 x ring 2 (USP)");
  run->add_option("--dump", o.dump, "write the gathered tensors as fp32 .npy with DIR/manifest.json (reference's names)")
      ->option_text("DIR");
  return {cmp, run};
}

JobRecord run_traced(const RunPlan& plan, const Setup& s, std::vector<trace::RankTrace>& traces, const std::string* live,
                     const trace::TraceData& head) {
  std::function<void(const std::vector<trace::RankTrace>&)> flush;
  if (live) {
    // The runs so far, and this one as far as it has got, every second.
    flush = [live, head, before = traces](const std::vector<trace::RankTrace>& now) {
      trace::TraceData partial = head;
      partial.ranks = before;
      partial.ranks.insert(partial.ranks.end(), now.begin(), now.end());
      trace::write_trace(*live, partial);
    };
  }
  return run_job(plan, s.where, traces, flush);
}

const trace::StrategyMetrics& Timelines::measured_of(const std::string& name) const {
  for (const trace::StrategyMetrics& m : measured)
    if (m.strategy == name) return m;
  throw Error("compare: no timeline for " + name);
}

namespace {

// The output files, proved writable before the work on the rank that writes them, and apart
// from each other: one would silently overwrite the other.
void check_outputs(const CompareOptions& o, const Setup& s) {
  if (!o.trace.empty() && o.dump) {
    const std::filesystem::path trace_dir = std::filesystem::absolute(o.trace).parent_path();
    if (output::same_file(trace_dir, *o.dump) || output::same_file(o.trace, *o.dump))
      throw ConfigError("--trace " + o.trace + " is inside the --dump directory " + *o.dump + ": write it elsewhere");
  }
  const std::string hw_file = output::is_regular(o.hw) ? o.hw : "";
  const auto [stack_option, stack_file] = o.modeling.input();
  output::check_distinct({{"--trace", o.trace}, {"--json", o.json}}, {{"--hw", hw_file}, {stack_option, stack_file}});
  if (o.dump && !hw_file.empty() &&
      output::same_file(std::filesystem::absolute(hw_file).parent_path().string(), *o.dump))
    throw ConfigError("--hw " + hw_file + " is inside the --dump directory " + *o.dump + ": the dump would replace it");
  if (!s.root) return;
  if (!o.json.empty()) output::check(o.json, "--json");
  if (!o.trace.empty()) output::check(o.trace, "--trace");
  if (o.dump) prepare_dump_dir(*o.dump, o.cfg);
}

// Where the running trace is rewritten every second and after each strategy (rank 0 of the
// local backend writes it): --trace, unless that is a device or a pipe, which takes the whole
// trace once, at the end.
const std::string* live_trace(const CompareOptions& o, const Setup& s) {
  return s.root && !o.trace.empty() && !output::written_through(o.trace) ? &o.trace : nullptr;
}

// The strategies compare runs: --strategies, or the one configuration the degrees give (each must
// fit P and the device), or all that fit; the others are listed in `skipped` with why.
std::vector<RunPlan> choose_strategies(const CompareOptions& o, int P, Device device,
                                       std::vector<std::pair<std::string, std::string>>& skipped) {
  std::vector<ParallelConfig> chosen;
  const bool listed = !o.strategies.empty() || o.parallel.given();
  if (o.parallel.given()) {  // the degrees name one configuration
    if (!o.strategies.empty())
      throw ConfigError("give --strategies NAMES or the degrees (--tp, --cp, --cp-comm, --cp-a2a, --order), not both");
    chosen.push_back(strategy_from("", o.parallel, P));
  } else if (!listed) {
    chosen = default_strategies(P);
  } else {
    if (o.strategies.ends_with(','))
      throw ConfigError("--strategies: empty name in '" + o.strategies + "' (use e.g. tp-sp,ring)");
    std::stringstream in(o.strategies);
    for (std::string n; std::getline(in, n, ',');) {
      if (n.empty()) throw ConfigError("--strategies: empty name in '" + o.strategies + "' (use e.g. tp-sp,ring)");
      chosen.push_back(parse_parallel_config(n));
    }
  }
  // Each configuration once, under its canonical name for P ("tp2xring" and "tp2xring2" are one).
  std::vector<RunPlan> plans;
  for (const ParallelConfig& par : chosen) {
    try {
      RunPlan plan = resolve(o.choices.applied_to(par), o.cfg, P, device);
      if (std::none_of(plans.begin(), plans.end(), [&](const RunPlan& p) { return p.name == plan.name; }))
        plans.push_back(std::move(plan));
    } catch (const ConfigError& e) {
      if (listed) throw;
      skipped.emplace_back(par.name(), e.what());
    }
  }
  if (plans.empty()) {
    std::string why;
    for (auto& [name, w] : skipped) why += (why.empty() ? "" : "; ") + w;
    throw ConfigError(detail::concat("no strategy runs with P = ", P, ": ", why));
  }
  return plans;
}


}  // namespace

// The timeline's metrics, measured and modeled (and the file, with --trace: both, the modeled
// twin of each strategy below it), on rank 0.
Timelines finish_trace(const CompareOptions& o, const char* producer, const Setup& s, std::vector<trace::RankTrace>&& ranks) {
  trace::TraceData td = trace_head(producer, o, s);
  td.ranks = std::move(ranks);
  const trace::TraceData both = model::with_modeled_twin(std::move(td), s.hw, s.modeling);
  if (!o.trace.empty()) trace::write_trace(o.trace, both);
  Timelines t;
  for (trace::StrategyMetrics& m : trace::compute_metrics(both)) {
    const trace::GroupInfo* twin = both.run.group(m.strategy);
    if (!twin) {
      t.measured.push_back(std::move(m));
      continue;
    }
    m.strategy = twin->of;
    t.modeled.push_back(std::move(m));
  }
  return t;
}

int compare_command(CompareOptions& o) {
  const LayerConfig& cfg = o.cfg;
  // Every rank checks everything before any communication: one clear error, no hang.
  std::vector<RunPlan> chosen;
  std::vector<std::pair<std::string, std::string>> skipped;
  Setup s = setup(o, "compare", [&](const Setup& s) {
    resolve_one_rank(cfg);  // the layer's own error, before any strategy is skipped for it
    chosen = choose_strategies(o, s.P, s.device, skipped);
    check_memory(cfg, s.P, s.mpi ? 1 : s.P, true);
    check_outputs(o, s);
  });
  const auto note = progress(s, "compare");

  std::vector<JobRecord> jobs;
  std::vector<trace::RankTrace> traces;
  const std::string* live = live_trace(o, s);
  const trace::TraceData head = trace_head("ringside compare", o, s);
  for (const RunPlan& plan : chosen) {
    note(plan.name + " on " + std::to_string(s.P) + " ranks ...");
    try {
      jobs.push_back(run_traced(plan, s, traces, live, head));
      // Each strategy's timeline is in the file as soon as it has run (ringside-viewer --live).
      if (live && &plan != &chosen.back()) {
        trace::TraceData partial = head;
        partial.ranks = traces;
        trace::write_trace(o.trace, partial);
      }
    } catch (const ConfigError&) {
      throw;
    } catch (const std::exception& e) {
      throw Error(plan.name + ": " + e.what());  // name the strategy that failed
    }
  }
  // The load-balance table: the first ring over every rank (the K/V ring, or the pass-Q ring
  // when it runs alone), run again in the other layouts.
  const JobRecord* whole_ring = nullptr;
  for (const JobRecord& job : jobs) {
    const ParallelConfig& par = job.plan.par;
    if (!whole_ring && par.tp == 1 && par.scheme().groups.ring && par.ring_size() == par.cp) whole_ring = &job;
  }
  std::map<Layout, JobRecord> other_layouts;
  if (whole_ring) other_layouts = run_other_layouts(whole_ring->plan, s, note);
  if (!s.root) return 0;  // rank 0 checks and prints; the others are done
  const Timelines timelines = finish_trace(o, "ringside compare", s, std::move(traces));

  note("reference, fp64 ...");
  const ReferenceRun fp64 = run_reference(cfg, DType::f64);
  note("reference, fp32 ...");
  // The yardstick's fp32 run recomputes as the strategies do (the same bits): its saved bytes and
  // time are the mode's. fp64 is the truth the errors are taken against, recomputing nothing.
  const ReferenceRun fp32 = run_reference(cfg, DType::f32, o.choices.recompute);
  const Yardstick y = yardstick(fp64, &fp32);
  std::vector<RunCheck> checks;
  for (const JobRecord& job : jobs) checks.push_back(check_run(job, y, &timelines.measured_of(job.plan.name)));

  std::printf("ringside compare: %s\n", cfg.summary(o.choices.recompute).c_str());
  std::printf("  backend    %s\n", make_backend(s.device)->describe().c_str());
  std::printf("  P = %d ranks on the %s backend%s; ring layout %s; fp32 runs, errors against the fp64 reference\n",
              s.P, s.backend.c_str(), ranks_are(s), to_string(o.choices.applied_to({}).requested_layout(cfg)));
  std::printf("\n  measured on this %s: the results, bytes and memory, exactly; wall-clock times, which vary\n",
              s.device == Device::cuda ? "GPU" : "CPU");
  nlohmann::json js;
  js["config"] = config_of(o);
  js["ranks"] = s.P;
  js["backend"] = s.backend;
  js["device"] = to_string(s.device);
  js["dtype"] = "float32";
  int failures = report_checks(jobs, checks, y, skipped, timelines, s, js);
  js["modeled"] = print_modeled(timelines, s.hw, s.modeling);
  if (whole_ring) failures += report_load_balance(*whole_ring, other_layouts, y, s, js);
  report_all_gather(jobs, checks, js);
  print_compare_footer(timelines, s);
  if (!o.trace.empty())
    std::printf("\n  trace: %s (ringside-viewer %s, or Perfetto: ui.perfetto.dev)\n", o.trace.c_str(), o.trace.c_str());
  if (!o.json.empty()) {
    output::write(o.json, js.dump(2) + "\n", "--json");
    std::printf("  json: %s\n", o.json.c_str());
  }
  return failures ? 1 : 0;
}

int run_command(CompareOptions& o) {
  const LayerConfig& cfg = o.cfg;
  std::optional<RunPlan> chosen;
  Setup s = setup(o, "run", [&](const Setup& s) {
    chosen = resolve(o.choices.applied_to(strategy_from(o.strategy, o.parallel, s.P)), cfg, s.P, s.device);
    check_memory(cfg, s.P, s.mpi ? 1 : s.P, false);
    check_outputs(o, s);
  });
  const RunPlan& plan = *chosen;
  std::vector<trace::RankTrace> traces;
  const JobRecord job = run_traced(plan, s, traces, live_trace(o, s), trace_head("ringside run", o, s));
  if (!s.root) return 0;
  const Timelines timelines = finish_trace(o, "ringside run", s, std::move(traces));
  std::printf("ringside run %s: %s\n", plan.name.c_str(), cfg.summary(plan.recompute()).c_str());
  std::printf("  %s; P = %d ranks on the %s backend%s\n", plan.summary.c_str(), s.P, s.backend.c_str(), ranks_are(s));
  if (const std::string groups = describe_groups(plan.par); !groups.empty())
    std::printf("  groups     %s (world ranks)\n", groups.c_str());
  std::printf("  backend    %s\n\n", make_backend(s.device)->describe().c_str());
  std::printf("  %4s  %-26s  %-44s  %s\n", "rank", "saved  measured | formula", "sent  forward + backward | formula", "time fwd + bwd");
  for (int r = 0; r < s.P; ++r) {
    const RankNumbers& n = job.ranks[size_t(r)];
    const CommBytes cb = parallel_comm_bytes(plan, r, DType::f32);
    const std::string saved = format_bytes(n.peak_saved) + " | " + format_bytes(double(parallel_saved_bytes(plan, r, DType::f32)));
    const std::string sent = format_bytes(n.fwd_sent) + " + " + format_bytes(n.bwd_sent) + " | " +
                             format_bytes(double(cb.forward)) + " + " + format_bytes(double(cb.backward));
    std::printf("  %4d  %-26s  %-44s  %s + %s\n", r, saved.c_str(), sent.c_str(), format_seconds(n.fwd_s).c_str(),
                format_seconds(n.bwd_s).c_str());
  }
  // The ring's schedule: what each rank computed at each step, and what it sent. The column
  // names the block the ring passes (the K/V ring's K/V block, the pass-Q ring's query block).
  for (size_t r = 0; r < job.steps.size(); ++r) {
    if (job.steps[r].empty()) continue;
    std::printf("\n  rank %zu, ring steps (layout %s; compute and wait measured here, they vary):\n"
                "  %-9s %4s %14s %10s %10s %10s %10s  %s\n", r,
                to_string(plan.requested_layout()), "phase", "step", (job.steps[r].front().block + " of").c_str(), "GFLOP",
                "sent", "compute", "wait", "computed (global query x key positions)");
    for (const StepRecord& st : job.steps[r])
      std::printf("  %-9s %4d %14s %10.3f %10s %10s %10s  %s\n", st.phase.c_str(), st.step,
                  ("rank " + std::to_string(st.block_of)).c_str(), st.flops / 1e9, format_bytes(double(st.bytes_sent)).c_str(),
                  format_seconds(st.compute_s).c_str(), format_seconds(st.wait_s).c_str(),
                  (st.computed + (st.skipped_pairs ? "; skipped, wholly masked: " + st.skipped : "")).c_str());
  }
  print_modeled(timelines, s.hw, s.modeling);
  print_timelines(timelines, s.hw);
  print_measured_note(s.P);
  if (!o.trace.empty()) std::printf("\n  trace: %s (ringside-viewer %s, or Perfetto: ui.perfetto.dev)\n", o.trace.c_str(), o.trace.c_str());
  if (o.dump) {
    write_dump(*o.dump, cfg, plan.config_json(), *plan.packing, job.root.out, job.root.dx, job.root.grads, plan.name);
    std::printf("\n  dump: %s/manifest.json and the tensors, gathered, with reference's names\n", o.dump->c_str());
  }
  return 0;
}

}  // namespace ringside::cli

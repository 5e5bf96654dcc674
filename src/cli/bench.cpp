// `ringside bench kernels`: attention throughput as a ratio to OpenBLAS sgemm, both measured in
// this run with Google Benchmark on one thread, so the ratio says how close the kernel comes
// to what this machine's GEMM can do, whatever the machine.
#include <algorithm>
#include <chrono>
#include <cstring>
#include <cmath>
#include <cstdio>
#include <map>
#include <sstream>
#include <vector>

#include <unistd.h>

#include <benchmark/benchmark.h>

#include "cli/commands.h"
#include "cli/format.h"
#include "comm/communicator.h"
#include "device/backend.h"
#include "kernels/cpu/attention.h"
#include "kernels/cpu/blas.h"
#include "kernels/cpu/blas_kernels.h"
#include "kernels/cpu/isa.h"
#include "kernels/philox.h"
#include "model/model.h"
#include "run/runner.h"
#include "parallel/run_plan.h"
#include "trace/metrics.h"
#include <thread>

namespace ringside::cli {

namespace kc = kernels::cpu;

std::tuple<CLI::App*, CLI::App*, CLI::App*, CLI::App*> add_bench(CLI::App& app, BenchKernelsOptions& o, BenchCommOptions& co,
                                                                 BenchTraceOptions& to, BenchModelOptions& mo) {
  CLI::App* bench = app.add_subcommand("bench", "Benchmarks, reported as ratios to a reference measured in the same run");
  bench->require_subcommand(1);
  CLI::App* k = bench->add_subcommand("kernels", "Attention forward/backward GFLOP/s against OpenBLAS sgemm, one thread");
  // Bounds keep every buffer allocatable and every run finite; they are checked before any work.
  k->add_option("--seq", o.s, "sequence length s")->capture_default_str()->check(CLI::Range(int64_t{1}, int64_t{1} << 20));
  k->add_option("--heads", o.H, "heads H (Hkv = H)")->capture_default_str()->check(CLI::Range(int64_t{1}, int64_t{256}));
  k->add_option("--head-dim", o.d, "head dim d")->capture_default_str()->check(CLI::Range(int64_t{1}, int64_t{1024}));
  k->add_flag_callback("--causal", [&o] { o.causal = true; }, "causal mask (the default)")
      ->excludes(k->add_flag_callback("--no-causal", [&o] { o.causal = false; }, "full attention"));
  k->add_option("--min-time", o.min_time, "seconds each benchmark runs at least, in each round")
      ->capture_default_str()
      ->check(number_in(0.001, 60.0));  // CLI::Range lets NaN through
  k->add_option("--repetitions", o.repetitions, "rounds of every benchmark, interleaved; the best of each counts")
      ->capture_default_str()
      ->check(CLI::Range(1, 100));
  k->add_option("--isa", o.isa, "kernel path: avx512, avx2, generic, or all this CPU runs (default: the active one)")
      ->check(CLI::IsMember({"avx512", "avx2", "generic", "all"}));
  k->add_flag_callback("--single-shape", [&o] { o.all_shapes = false; },
                       "only the shape given (default: also d 128 and the other mask)");

  CLI::App* c = bench->add_subcommand("comm", "Collectives and ring send/recv: algbw and busbw (nccl-tests) beside memcpy");
  c->add_option("--backend", co.backend, "local (threads, default) or mpi (default under mpirun)")
      ->check(CLI::IsMember({"local", "mpi"}));
  c->add_option("--ranks", co.ranks, "ranks P on the local backend (with mpi: must equal mpirun's -np)")
      ->capture_default_str()
      ->check(CLI::Range(1, 64))
      ->each([&co](const std::string&) { co.ranks_given = true; });
  c->add_option("--min-bytes", co.min_bytes, "smallest buffer")->capture_default_str()->check(CLI::Range(int64_t{64}, int64_t{1} << 30));
  c->add_option("--max-bytes", co.max_bytes, "largest buffer (sizes step x4)")
      ->capture_default_str()
      ->check(CLI::Range(int64_t{64}, int64_t{1} << 30));
  c->add_option("--timeout", co.timeout_s, "seconds a communication (under mpirun, MPI_Init too) may wait before it fails")
      ->capture_default_str()
      ->check(CLI::Range(0.1, 3600.0));

  CLI::App* t = bench->add_subcommand("trace", "What tracing costs: off (per hook, times hooks per run) and on, as ratios of the run");
  add_config_flags(*t, to.cfg, to.choices);
  t->add_option("--strategy", to.strategy, "the strategy to run")->capture_default_str();
  t->add_option("--ranks", to.ranks, "local ranks P")->capture_default_str()->check(CLI::Range(1, 64));
  t->add_option("--repetitions", to.repetitions, "runs each way; the best counts")->capture_default_str()->check(CLI::Range(1, 50));
  CLI::App* m = bench->add_subcommand("model", "The what-if model's speed: dry run + model of every strategy at 1M tokens on 64 ranks");
  add_config_flags(*m, mo.cfg, mo.choices);
  refuse_seed_without_random_docs(*m);
  m->add_option("--ranks", mo.ranks, "ranks P")->capture_default_str()->check(CLI::Range(1, 1024));
  m->add_option("--hw", mo.hw, "hardware profile")->capture_default_str();
  c->parse_complete_callback([&co, c] { co.given = given_options(*c); });
  return {k, c, t, m};
}

int bench_model(const BenchModelOptions& o) {
  using clock = std::chrono::steady_clock;
  // A bad layer or profile is the command's error (exit 2), not a table of skipped strategies.
  resolve_one_rank(o.cfg);
  const model::Hardware hw = model::load_hardware(o.hw);
  // The named strategies, then the hybrids with TP (or Ulysses) inside a node and the ring or
  // all-gather across nodes, and the ring inside with TP across (the wrong placement).
  std::vector<ParallelConfig> chosen = strategies();
  const int T = hw.domain_gpus();  // the topology's innermost domain: a node's NVLink
  if (T > 1 && T < o.ranks && o.ranks % T == 0)
    for (const std::string& name : {detail::concat("tp", T, "xring", o.ranks / T), detail::concat("ulysses", T, "xring", o.ranks / T),
                                     detail::concat("tp", T, "xall-gather", o.ranks / T), detail::concat("ring", o.ranks / T, "xtp", T)})
      chosen.push_back(parse_parallel_config(name));
  struct Candidate {
    std::string name;
    std::optional<RunPlan> plan;  // none: why, it cannot run here
    std::string why;
  };
  std::vector<Candidate> runs;
  std::string why_none;
  for (const ParallelConfig& par : chosen) {
    try {
      const RunPlan plan = resolve(o.choices.applied_to(par), o.cfg, o.ranks);
      runs.push_back({plan.name, plan, ""});
    } catch (const ConfigError& e) {
      runs.push_back({par.name(), std::nullopt, e.what()});
      why_none += (why_none.empty() ? "" : "; ") + std::string(e.what());
    }
  }
  if (std::all_of(runs.begin(), runs.end(), [](const Candidate& r) { return !r.plan; }))
    throw ConfigError(detail::concat("no strategy can split this layer ", o.ranks, " ways: ", why_none));
  require_memory(32.0 * double(o.cfg.tokens()) + model::schedule_bytes(o.ranks, o.cfg, o.choices.applied_to({}).requested_layout(o.cfg)),
                 detail::concat("the dry run on ", o.ranks, " ranks (its schedule and token positions)"),
                 "--ranks, --seq or --batch", 0, 2 * o.ranks);
  std::printf("ringside bench model: dry run + model of each strategy, P = %d, %s, on %s (target: under %.0f s each)\n",
              o.ranks, o.cfg.summary(o.choices.recompute).c_str(), hw.name.c_str(), o.target_s);
  std::printf("  %-16s %9s %8s %8s %9s %12s  %s\n", "strategy", "events", "dry run", "model", "total", "layer (mod.)",
              "verdict");
  for (const Candidate& c : runs) {
    if (!c.plan) {
      std::printf("  %-16s skipped: %s\n", c.name.c_str(), c.why.c_str());
      continue;
    }
    const auto t0 = clock::now();
    MemoryTracker tracker;
    const trace::TraceData schedule = model::dry_run(*c.plan, tracker);
    const auto t1 = clock::now();
    const trace::TraceData m = model::model_trace(schedule, hw);
    const auto t2 = clock::now();
    size_t events = 0;
    for (const trace::RankTrace& r : m.ranks) events += r.events.size();
    const double dry = std::chrono::duration<double>(t1 - t0).count(), mod = std::chrono::duration<double>(t2 - t1).count();
    int64_t layer_ns = 0;  // the modeled layer: the slowest rank's forward + backward, as `model` says it
    for (const trace::StrategyMetrics& sm : trace::compute_metrics(m)) layer_ns = std::max(layer_ns, trace::layer_ns(sm));
    std::printf("  %-16s %9zu %7.2fs %7.2fs %8.2fs %12s  %s\n", c.name.c_str(), events, dry, mod, dry + mod,
                format_seconds(double(layer_ns) / 1e9).c_str(), dry + mod < o.target_s ? "OK" : "SLOW");
    std::fflush(stdout);
  }
  return 0;
}

namespace {

// Keeps Google Benchmark's console output and records, per benchmark, the best seconds per
// iteration over the rounds. Best-of-N for both the kernel and sgemm: on a shared machine
// noise only ever adds time, so the minimum is the most repeatable estimate of each.
class Recorder : public benchmark::ConsoleReporter {
 public:
  // Colour only on a terminal (the library's "auto" looks at TERM, not at the stream).
  Recorder() : ConsoleReporter(isatty(STDOUT_FILENO) ? OO_Defaults : OO_Tabular) {}
  std::map<std::string, double> seconds;

  // One line of context instead of the library's banner on stderr (whose "built as DEBUG"
  // warning is about Debian's build of Google Benchmark itself, not the code measured here).
  bool ReportContext(const Context& c) override {
    std::printf("  machine: %d CPUs at %.0f MHz, load average %.2f\n", c.cpu_info.num_cpus,
                c.cpu_info.cycles_per_second / 1e6, c.cpu_info.load_avg.empty() ? 0.0 : c.cpu_info.load_avg[0]);
    std::ostringstream banner;
    std::ostream& err = GetErrorStream();
    SetErrorStream(&banner);
    const bool ok = ConsoleReporter::ReportContext(c);
    SetErrorStream(&err);
    return ok;
  }
  void ReportRuns(const std::vector<Run>& runs) override {
    ConsoleReporter::ReportRuns(runs);
    for (const Run& r : runs) {
      if (r.run_type != Run::RT_Iteration || r.iterations == 0) continue;
      const double t = r.real_accumulated_time / double(r.iterations);
      auto [it, fresh] = seconds.emplace(r.run_name.function_name, t);
      if (!fresh) it->second = std::min(it->second, t);
    }
  }
};

}  // namespace

std::vector<float> random_floats(int64_t n, uint32_t site) {
  std::vector<float> v(n);
  for (int64_t i = 0; i < n; ++i) v[i] = 2.0f * philox_uniform(42, site, uint64_t(i)) - 1.0f;
  return v;
}

std::string sgemm_reference_label() {
  const kc::BlasKernels k = kc::blas_kernels();
  if (k.how == kc::BlasChoice::not_openblas) return "sgemm 2048^3 (reference BLAS)";
  return "sgemm 2048^3, " + k.in_use + (k.below_best() ? " (fallback)" : k.best.empty() ? "" : " (best)");
}

std::string sgemm_verdict(double ratio, double target) {
  if (kc::blas_kernels().below_best()) return "vs fallback";
  return ratio >= target ? "ok" : "BELOW TARGET";
}

std::string sgemm_fallback_note() {
  const kc::BlasKernels k = kc::blas_kernels();
  if (!k.below_best()) return "";
  return detail::concat("  (sgemm ran on OpenBLAS's ", k.in_use, " kernels, narrower than this CPU's best, ", k.best,
                        ": each ratio is against a fallback and no target is judged; ",
                        k.how == kc::BlasChoice::forced ? "unset OPENBLAS_CORETYPE" : "OPENBLAS_CORETYPE=" + k.best,
                        " to measure against the best)");
}

namespace {

std::vector<kc::CpuIsa> chosen_paths(const std::string& isa) {
  if (isa.empty()) return {kc::active_cpu_isa()};
  if (isa != "all") {
    const kc::CpuIsa one = kc::parse_cpu_isa(isa.c_str());
    kc::set_cpu_isa(one);  // refuses a path this CPU lacks, before any work
    return {one};
  }
  std::vector<kc::CpuIsa> paths;
  for (kc::CpuIsa p : {kc::CpuIsa::avx512, kc::CpuIsa::avx2, kc::CpuIsa::generic})
    if (kc::cpu_supports(p)) paths.push_back(p);
  return paths;
}

}  // namespace

int bench_kernels(const BenchKernelsOptions& o) {
  kc::set_blas_single_threaded();
  const std::vector<kc::CpuIsa> paths = chosen_paths(o.isa);
  // The shape asked for, then the same at d 128 and without the causal mask (issue 20's three).
  struct Shape {
    int64_t d;
    bool causal;
  };
  std::vector<Shape> shapes{{o.d, o.causal}};
  if (o.all_shapes) {
    if (o.d != 128) shapes.push_back({128, o.causal});
    shapes.push_back({o.d, !o.causal});
  }
  constexpr int64_t kGemm = 2048;  // square sgemm, large enough to run at OpenBLAS's peak
  const double gemm_flops = 2.0 * kGemm * kGemm * kGemm;
  int64_t d_max = 0;
  for (const Shape& sh : shapes) d_max = std::max(d_max, sh.d);
  const int64_t n = o.s * o.H * d_max;
  // Nine [s, H, d] arrays and three 2048^2 matrices, in fp32: refuse what cannot be held.
  require_memory(4.0 * (9.0 * double(n) + 3.0 * double(kGemm * kGemm)), "bench kernels at this size",
                 "--seq, --heads or --head-dim");
  std::vector<float> q = random_floats(n, 1), k = random_floats(n, 2), v = random_floats(n, 3),
                     dout = random_floats(n, 4), out(n), lse(o.H * o.s), dq(n), dk(n), dv(n);
  std::vector<float> A = random_floats(kGemm * kGemm, 5), B = random_floats(kGemm * kGemm, 6), C(kGemm * kGemm);

  auto params = [&](const Shape& sh) {
    kc::AttentionParams p;
    p.sq = p.sk = o.s;
    p.H = p.Hkv = o.H;
    p.d = sh.d;
    p.causal = sh.causal;
    p.softmax_scale = 1.0 / std::sqrt(double(sh.d));
    return p;
  };
  auto shape_name = [&](const Shape& sh) { return detail::concat("d ", sh.d, sh.causal ? " causal" : " full"); };
  // Each benchmark runs once per round, the rounds one after another (sgemm, then every path's
  // forward and backward), and the best round of each counts: a slow spell of the machine (another
  // process, a lower clock) weighs on the kernels and on their sgemm alike.
  auto add = [&](const std::string& name, auto body) {
    benchmark::RegisterBenchmark(name.c_str(), body)->Unit(benchmark::kMillisecond)->UseRealTime()->MinTime(o.min_time);
  };
  for (int round = 0; round < o.repetitions; ++round) {
    add("sgemm_2048", [&](benchmark::State& st) {
      for (auto _ : st) kc::gemm(false, false, kGemm, kGemm, kGemm, 1.0f, A.data(), kGemm, B.data(), kGemm, 0.0f, C.data(), kGemm);
    });
    for (kc::CpuIsa isa : paths)
      for (const Shape& sh : shapes) {
        const kc::AttentionParams p = params(sh);
        const std::string tag = detail::concat(kc::to_string(isa), " ", shape_name(sh));
        add("forward " + tag, [&, p, isa](benchmark::State& st) {
          kc::set_cpu_isa(isa);
          for (auto _ : st) kc::attention_forward(p, q.data(), k.data(), v.data(), out.data(), lse.data());
        });
        add("backward " + tag, [&, p, isa](benchmark::State& st) {
          kc::set_cpu_isa(isa);
          kc::attention_forward(p, q.data(), k.data(), v.data(), out.data(), lse.data());
          for (auto _ : st)
            kc::attention_backward(p, q.data(), k.data(), v.data(), out.data(), dout.data(), lse.data(), dq.data(),
                                   dk.data(), dv.data());
        });
      }
  }

  std::printf("ringside bench kernels: attention (version 2) at b 1, s %lld, H %lld, one thread, best of %d interleaved rounds\n",
              (long long)o.s, (long long)o.H, o.repetitions);
  std::printf("  backend: %s\n", make_cpu_backend()->describe().c_str());
  std::string path_names;
  for (kc::CpuIsa isa : paths) path_names += (path_names.empty() ? "" : ", ") + std::string(kc::to_string(isa));
  std::printf("  paths: %s (this CPU's best: %s; RINGSIDE_CPU_ISA or --isa forces one)\n", path_names.c_str(),
              kc::to_string(kc::best_cpu_isa()));
  std::fflush(stdout);
  int argc = 1;
  char name[] = "ringside";
  char* argv[] = {name, nullptr};
  benchmark::Initialize(&argc, argv);
  Recorder rec;
  benchmark::RunSpecifiedBenchmarks(&rec);
  benchmark::ClearRegisteredBenchmarks();

  const double sgemm = gemm_flops / rec.seconds.at("sgemm_2048");
  std::printf("\n  %-34s %16s %10s %8s\n", "kernel", "throughput", "/ sgemm", "target");
  std::printf("  %-34s %16s %10s %8s\n", sgemm_reference_label().c_str(), format_flops(sgemm).c_str(), "1.00", "");
  for (kc::CpuIsa isa : paths)
    for (const Shape& sh : shapes) {
      // FlashAttention's convention: forward 4 s^2 d H, halved when causal; backward 2.5 x forward.
      const double fwd_flops = 4.0 * double(o.s) * double(o.s) * double(sh.d) * double(o.H) / (sh.causal ? 2.0 : 1.0);
      const std::string tag = detail::concat(kc::to_string(isa), " ", shape_name(sh));
      for (const auto& [dir, flops, target] : {std::tuple{"forward", fwd_flops, o.forward_target},
                                               std::tuple{"backward", 2.5 * fwd_flops, o.backward_target}}) {
        const double rate = flops / rec.seconds.at(std::string(dir) + " " + tag), ratio = rate / sgemm;
        // The work of one call beside its rate: what the shape flags asked for, the same on every run.
        std::printf("  %-34s %16s %10.2f    >= %.2f  %-12s %10.4g GFLOP a call\n", (std::string(dir) + " " + tag).c_str(),
                    format_flops(rate).c_str(), ratio, target, sgemm_verdict(ratio, target).c_str(), flops / 1e9);
      }
    }
  std::printf("  (FLOPs as FlashAttention counts them: forward 4 s^2 d H, / 2 when causal; backward 2.5 x forward)\n");
  if (const std::string note = sgemm_fallback_note(); !note.empty()) std::printf("%s\n", note.c_str());
  return 0;  // a benchmark reports; the tests are what pass or fail
}

}  // namespace ringside::cli

// ---- bench trace: what the timeline costs.
namespace ringside::cli {

int bench_trace(const BenchTraceOptions& o) {
  const RunPlan plan = resolve(o.choices.applied_to(parse_parallel_config(o.strategy)), o.cfg, o.ranks);
  check_memory(o.cfg, o.ranks, o.ranks, false);
  // 1. One hook with tracing off: the thread-local check every instrumented site makes (a
  //    Span, as around every copy and collective; the communicator and the memory tracker make
  //    the same check). Google Benchmark, best of 3.
  double off_ns = 0;
  {
    benchmark::RegisterBenchmark("hook_off", [](benchmark::State& state) {
      for (auto _ : state) {
        trace::Span s("x", trace::Kind::memory);
        benchmark::DoNotOptimize(s.event());
      }
    })->Repetitions(3)->MinTime(0.2);
    Recorder rec;
    int argc = 1;
    char arg0[] = "ringside";
    char* argv[] = {arg0, nullptr};
    benchmark::Initialize(&argc, argv);
    benchmark::RunSpecifiedBenchmarks(&rec);
    benchmark::ClearRegisteredBenchmarks();
    off_ns = rec.seconds.at("hook_off") * 1e9;
  }
  // 2. The run, untraced and traced, best of N each (interleaved, so drift hits both alike).
  double plain = 1e300, traced = 1e300;
  size_t hooks = 0;
  for (int i = 0; i < o.repetitions; ++i) {
    {
      MemoryTracker tracker;
      const auto t0 = std::chrono::steady_clock::now();
      run_local_ranks(plan, DType::f32, tracker);
      plain = std::min(plain, std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
    }
    {
      MemoryTracker tracker;
      std::vector<trace::RankTrace> ranks;
      const TraceSink sink{trace::Clock{trace::Clock::steady_now_ns()}, &ranks};
      const auto t0 = std::chrono::steady_clock::now();
      run_local_ranks(plan, DType::f32, tracker, {}, &sink);
      traced = std::min(traced, std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
      // Every recorded item passed at least one hook; a transfer passes two (post and wait).
      hooks = 0;
      for (const auto& r : ranks) {
        hooks += r.events.size() + r.memory.size();
        for (const auto& e : r.events) hooks += e.stream == trace::Stream::comm;
      }
    }
  }
  const double off_s = double(hooks) * off_ns * 1e-9;
  std::printf("ringside bench trace: %s on %d local ranks, %s\n", plan.name.c_str(), o.ranks, o.cfg.summary(plan.recompute()).c_str());
  std::printf("  run untraced (best of %d)   %s\n", o.repetitions, format_seconds(plain).c_str());
  std::printf("  hooks per run               %zu (events, memory samples and transfers, all ranks)\n", hooks);
  std::printf("  one hook, tracing off       %.2f ns (Google Benchmark, best of 3)\n", off_ns);
  std::printf("  tracing off                 %.5f%% of the run (hooks x cost / run; target < 2%%)   %s\n",
              100 * off_s / plain, off_s / plain < 0.02 ? "OK" : "ABOVE TARGET");
  std::printf("  tracing on                  %s, %+.1f%% (best traced / best untraced - 1)\n", format_seconds(traced).c_str(),
              100 * (traced / plain - 1));
  std::printf("  (ranks run as threads on %u cores: the on/off difference is within run-to-run noise at this size)\n",
              std::thread::hardware_concurrency());
  return 0;
}

}  // namespace ringside::cli

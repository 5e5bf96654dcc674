// `ringside compare`: every strategy on the same input, side by side with the references.
// `ringside run`: one strategy, with its per-rank numbers and an optional dump.
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <optional>
#include <sstream>
#include <thread>

#include <nlohmann/json.hpp>

#include "cli/commands.h"
#include "cli/format.h"
#include "comm/communicator.h"
#include "core/output.h"
#include "core/gpu.h"
#include "kernels/philox.h"
#include "layer/reference.h"
#include "model/model.h"
#include "parallel/formulas.h"
#include "comm/trace_exchange.h"
#include "device/traced_backend.h"
#include "parallel/allgather_attention.h"
#include "parallel/harness.h"
#include "trace/metrics.h"
#include "trace/trace_file.h"

namespace ringside::cli {

// Every result tensor by name, in the dump's order.
std::vector<std::pair<std::string, const Tensor*>> named_results(const Tensor& out, const Tensor& dx, const LayerWeights& g) {
  std::vector<std::pair<std::string, const Tensor*>> v{{"out", &out}, {"grad.x", &dx}};
  for (auto& [name, t] : g.named()) v.emplace_back("grad." + name, t);
  return v;
}

std::string nothing_to_compare_in(const std::vector<std::pair<std::string, const Tensor*>>& reference) {
  std::vector<std::string> zero;
  for (const auto& [name, t] : reference) {
    const Tensor d = t->dtype() == DType::f64 ? *t : t->to(DType::f64, {});
    const double* p = static_cast<const double*>(d.raw_data());
    if (std::all_of(p, p + d.numel(), [](double x) { return x == 0; })) zero.push_back(name);
  }
  if (zero.empty()) return "";
  return detail::concat("nothing to compare: ", zero[0],
                        zero.size() > 1 ? detail::concat(" and ", zero.size() - 1, " more tensors are") : " is",
                        " all zero in the fp64 reference (did dropout drop everything?)");
}

std::pair<CLI::App*, CLI::App*> add_compare_and_run(CLI::App& app, CompareOptions& o) {
  std::string names;
  for (const Strategy& s : strategies()) names += (names.empty() ? "" : ",") + s.name;
  auto common = [&](CLI::App* c) {
    add_config_flags(*c, o.cfg);
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
    // Under mpirun every rank compares these with rank 0's before anything else (setup).
    c->parse_complete_callback([&o, c] { o.given = given_options(*c); });
  };
  CLI::App* cmp = app.add_subcommand("compare", "Run every strategy on the same input and compare them with the references");
  common(cmp);
  cmp->add_option("--strategies", o.strategies,
                  "comma-separated list of names or configurations such as tp2xring2, ulysses2xring2, tp2xall-gather2, "
                  "ring2xtp2 (default: " + names + ", and TP 2 x ring and Ulysses 2 x ring when they fit P)")
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
  run->add_option("--strategy", o.strategy, "one of: " + names + ", or a configuration such as tp2xring2 (or the degrees below)")
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

namespace {

// What one rank measured, gathered to every rank.
struct RankNumbers {
  double peak_saved, fwd_sent, bwd_sent, fwd_recv, bwd_recv, fwd_s, bwd_s, attention_flops, peak_bytes, peak_comm;
};
constexpr int64_t kRankNumbers = 10;  // doubles in RankNumbers, for the all_gather

struct StrategyRun {
  const Strategy* st;
  // Declared before the result, so it outlives the tensors it counts.
  std::unique_ptr<MemoryTracker> tracker = std::make_unique<MemoryTracker>();
  RankResult result;  // rank 0's (gathered tensors are the same on every rank)
  std::vector<RankNumbers> ranks;
  std::vector<std::vector<StepRecord>> steps;  // per rank on the local backend; rank 0's under MPI
};

RankNumbers numbers_of(const RankResult& r) {
  return {double(r.peak_saved),         double(r.forward.bytes_sent),    double(r.backward.bytes_sent),
          double(r.forward.bytes_received), double(r.backward.bytes_received), r.forward_s, r.backward_s,
          r.attention_flops, double(r.peak_bytes), double(r.peak_comm_forward)};
}

struct Setup {
  bool mpi = false;                ///< one process per rank (mpirun)
  Communicator* world = nullptr;   ///< under mpirun: MPI, for the job's own messages (host memory)
  Communicator* run_world = nullptr;  ///< under mpirun: what the strategies run on (MPI, or NCCL)
  Device device = Device::cpu;
  std::string backend = "local";  ///< local, mpi or nccl
  int P = 1;
  bool root = true;
  trace::Clock clock;  ///< the timeline's shared clock
  LocalOptions local;
  model::Hardware hw;  ///< the modeled twin's profile (--hw)
};

// Where the ranks run, and every check before the job's first communication. Under mpirun the
// ranks first agree on the command line, then run every check (the backend's and the
// command's own, `checks`) and agree on the outcome: a bad configuration is one line and exit
// 2 on every rank, whichever rank found it (cli/agree.cpp). Then the clocks are aligned.
Setup setup(CompareOptions& o, const char* command, const std::function<void(const Setup&)>& checks) {
  Setup s;
  s.device = o.device == "cuda" ? Device::cuda : Device::cpu;
  const bool nccl = o.backend == "nccl";
  s.mpi = o.backend == "mpi" || ((o.backend.empty() || nccl) && launched_by_mpirun());
  s.backend = nccl ? "nccl" : s.mpi ? "mpi" : "local";
  if (o.backend == "local" && launched_by_mpirun())
    std::fprintf(stderr, "ringside: note: started by mpirun but --backend local: each process runs its own %d-rank job\n",
                 o.ranks);
  if (s.mpi) {
    if (!launched_by_mpirun())
      throw ConfigError("--backend mpi: this process was not started by mpirun (use: mpirun -np P ringside ...)");
    if (!mpi_available()) throw ConfigError("--backend mpi: this build has no MPI (configure with RINGSIDE_MPI=ON)");
    s.world = &mpi_world();
    s.world->timeout_s = o.timeout_s;
    s.P = s.world->size();
    s.root = s.world->rank() == 0;
    check_ranks_agree(*s.world, command, o.given);
  } else {
    s.P = o.ranks;
  }
  checked_on_every_rank(s.world, [&] {
    if (nccl && s.device != Device::cuda) throw ConfigError("--backend nccl needs --device cuda");
    if (s.device == Device::cuda) {
      if (!gpu::built()) throw ConfigError("--device cuda: this build has no CUDA backend (configure with nvcc present)");
      if (gpu::device_count() == 0)
        throw ConfigError("--device cuda: no CUDA device is visible on this machine (nvidia-smi lists the GPUs; "
                          "without --device cuda the ranks run on the CPU)");
      if (o.link_gbps > 0 || o.link_latency_us > 0)
        throw ConfigError("--link-bandwidth and --link-latency shape the CPU ranks' transfers; on a GPU the copy is real");
      if (nccl && !nccl_available()) throw ConfigError("--backend nccl: this build has no NCCL");
      if (s.mpi && !nccl) throw ConfigError("--device cuda under mpirun needs --backend nccl (MPI moves host memory here)");
    }
    if (s.mpi) {
      if (o.ranks_given && o.ranks != s.P)
        throw ConfigError(detail::concat("--ranks ", o.ranks, " but mpirun started ", s.P, " processes (use -np ", o.ranks, ")"));
      if (o.link_gbps > 0 || o.link_latency_us > 0)
        throw ConfigError("--link-bandwidth and --link-latency shape the local backend's transfers; under mpirun the link is real");
    }
    if (o.link_latency_us * 1e-6 >= o.timeout_s)
      throw ConfigError(detail::concat("--link-latency ", o.link_latency_us, " us is at least --timeout ", o.timeout_s,
                                       " s: every transfer would time out (raise --timeout or lower the latency)"));
    check_failure_injection(s.P);
    s.hw = model::load_hardware(o.hw);
    checks(s);
  });
  if (s.mpi) {
    s.clock = trace::align_clocks(*s.world);
    s.run_world = nccl ? &nccl_world() : s.world;
    s.run_world->timeout_s = o.timeout_s;
  } else {
    s.clock.origin_ns = trace::Clock::steady_now_ns();
    s.local.timeout_s = o.timeout_s;
    s.local.bandwidth_gbps = o.link_gbps;
    s.local.latency_us = o.link_latency_us;
    s.local.device = s.device;
    s.local.nccl = nccl;
  }
  return s;
}

bool progress_on() { return isatty(STDERR_FILENO); }

// What the ranks are, for the headers.
const char* ranks_are(const Setup& s) {
  if (s.mpi) return s.device == Device::cuda ? " (one process per GPU)" : " (one process per rank)";
  if (s.backend == "nccl") return " (one thread per GPU)";
  return s.device == Device::cuda ? " (virtual ranks on GPU 0: a compute and a comm stream each)"
                                  : " (threads, one comm thread each)";
}

// The run's description in the trace's otherData.
nlohmann::json trace_other(const char* producer, const LayerConfig& cfg, const Setup& s) {
  nlohmann::json o;
  o["producer"] = producer;
  o["config"] = cfg.to_json();
  o["layout"] = to_string(cfg.cp_layout());
  o["ranks"] = s.P;
  o["backend"] = s.backend;
  o["dtype"] = "float32";
  o["device"] = to_string(s.device);
  if (s.device == Device::cuda) {
    o["gpu"] = gpu::describe(0);
    o["gpu_clock"] = "ops, waits and transfers timed by CUDA events on each rank's streams, anchored to steady_clock";
  }
  o["clock"] = s.mpi ? "steady_clock per process, aligned to rank 0 by ping-pong (clock_offset_ns, clock_uncertainty_ns per process)"
                     : "steady_clock, one process";
  if (!s.mpi && (s.local.bandwidth_gbps > 0 || s.local.latency_us > 0))
    o["link"] = {{"bandwidth_GB_per_s", s.local.bandwidth_gbps}, {"latency_us", s.local.latency_us}};
  return o;
}

// Runs one strategy on every rank, traced; its timeline is appended to `traces` (on rank 0).
// With live_path (local backend), the file is rewritten every second while it runs.
StrategyRun run_one(const Strategy& st, const LayerConfig& cfg, const Setup& s, std::vector<trace::RankTrace>& traces,
                    const std::string* live_path = nullptr, const nlohmann::json& live_other = {}) {
  StrategyRun out;
  out.st = &st;
  MemoryTracker& tracker = *out.tracker;
  if (!s.mpi) {
    TraceSink sink{s.clock, &traces};
    if (live_path) {
      // The strategies run so far, and this one as far as it has got, every second.
      const std::vector<trace::RankTrace> before = traces;
      sink.flush = [&, before](const std::vector<trace::RankTrace>& now) {
        trace::TraceData partial;
        partial.other = live_other;
        partial.ranks = before;
        partial.ranks.insert(partial.ranks.end(), now.begin(), now.end());
        trace::write_trace(*live_path, partial);
      };
    }
    auto all = run_strategy_local(st, cfg, s.P, DType::f32, tracker, s.local, &sink);
    for (const RankResult& r : all) out.ranks.push_back(numbers_of(r)), out.steps.push_back(r.steps);
    out.result = std::move(all[0]);
    return out;
  }
  auto be = trace::make_traced_backend(make_backend(s.device));
  trace::Tracer tracer(st.name, s.world->rank(), s.clock);
  std::optional<gpu::Bind> bind;  // one process per GPU: this process's (as nccl_world takes it)
  if (s.device == Device::cuda) {
    bind.emplace(s.world->rank() % gpu::device_count(), 0);
    tracer.set_device_clock(trace::make_gpu_clock());
  }
  {
    trace::TraceScope scope(&tracer);
    out.result = st.run(cfg, *s.run_world, *be, tracker, DType::f32);
    if (s.device == Device::cuda) out.result = results_to_host(std::move(out.result));
  }
  for (trace::RankTrace& t : trace::gather_to_root(*s.world, tracer.take())) traces.push_back(std::move(t));
  out.steps.push_back(out.result.steps);
  RankNumbers mine = numbers_of(out.result);
  out.ranks.resize(s.P);
  s.world->all_gather(&mine, out.ranks.data(), std::vector<int64_t>(s.P, kRankNumbers), DType::f64);
  return out;
}

struct RefRun {
  std::unique_ptr<MemoryTracker> tracker = std::make_unique<MemoryTracker>();  // outlives the tensors
  Tensor out, dx;
  LayerWeights grads;
  double seconds = 0;
  int64_t peak_saved = 0;
};

template <class T> RefRun reference(const LayerConfig& cfg) {
  auto be = make_cpu_backend();
  RefRun r;
  MemoryTracker& tracker = *r.tracker;
  const AllocTag tag{0, MemCategory::workspace, &tracker};
  const LayerWeights w = init_weights(cfg, dtype_of<T>(), tag);
  const Tensor x = random_input(cfg, static_cast<uint32_t>(RngSite::input_x), dtype_of<T>(), tag);
  const Tensor dout = random_input(cfg, static_cast<uint32_t>(RngSite::input_dout), dtype_of<T>(), tag);
  const auto t0 = std::chrono::steady_clock::now();
  {
    ForwardResult f = reference_forward<T>(cfg, w, x, *be, tag);
    Gradients g = reference_backward<T>(cfg, w, f.saved, dout, *be, tag);
    r.out = f.out, r.dx = g.dx, r.grads = g.grads;
  }
  r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  r.peak_saved = tracker.peak(0, MemCategory::activations);
  return r;
}


std::string pad(const std::string& s, size_t n, bool right = false) {
  if (s.size() >= n) return s;
  return right ? std::string(n - s.size(), ' ') + s : s + std::string(n - s.size(), ' ');
}

std::string sci(double v) {
  char b[32];
  std::snprintf(b, sizeof b, "%.2e", v);
  return b;
}

}  // namespace

// The output files, proved writable before the work on the rank that writes them, and apart
// from each other: one would silently overwrite the other.
void check_outputs(const CompareOptions& o, const Setup& s) {
  if (!o.trace.empty() && o.dump) {
    const std::filesystem::path trace_dir = std::filesystem::absolute(o.trace).parent_path();
    if (output::same_file(trace_dir, *o.dump) || output::same_file(o.trace, *o.dump))
      throw ConfigError("--trace " + o.trace + " is inside the --dump directory " + *o.dump + ": write it elsewhere");
  }
  const std::string hw_file = output::is_regular(o.hw) ? o.hw : "";
  output::check_distinct({{"--trace", o.trace}, {"--json", o.json}}, {{"--hw", hw_file}});
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

// What the timeline says, on rank 0: measured on this machine, and modeled on --hw.
struct Timelines {
  std::vector<trace::StrategyMetrics> measured, modeled;  ///< modeled: in the measured order, named as measured
};

// The timeline's metrics, measured and modeled (and the file, with --trace: both, the modeled
// twin of each strategy below it), on rank 0.
Timelines finish_trace(const CompareOptions& o, const char* producer, const LayerConfig& cfg, const Setup& s,
                       std::vector<trace::RankTrace>&& ranks) {
  trace::TraceData td;
  td.other = trace_other(producer, cfg, s);
  td.ranks = std::move(ranks);
  const trace::TraceData both = model::with_modeled_twin(std::move(td), s.hw);
  if (!o.trace.empty()) trace::write_trace(o.trace, both);
  Timelines t;
  for (trace::StrategyMetrics& m : trace::compute_metrics(both)) {
    if (!model::is_modeled_twin(both.other, m.strategy)) {
      t.measured.push_back(std::move(m));
      continue;
    }
    m.strategy = both.other["modeled_groups"][m.strategy]["of"].get<std::string>();
    t.modeled.push_back(std::move(m));
  }
  return t;
}

// The modeled twin's table: each strategy's layer on the profile, from the same schedule. Returns
// it as JSON: {hardware, dtype, strategies: [metrics with layer_us], table: the printed table}.
nlohmann::json print_modeled(const Timelines& t, const model::Hardware& hw) {
  std::printf("\n  modeled on %s: the recorded schedule (its FLOPs, bytes and order) replayed in bf16 at\n"
              "  %s;\n  the same on every run and machine (ringside model --from the trace --hw %s gives it\n"
              "  too). Per rank: the mean over the ranks.\n",
              hw.name.c_str(), model::rates_summary(hw, {}, "\n  ").c_str(), hw.name.c_str());
  size_t w = 14;
  for (const trace::StrategyMetrics& m : t.modeled) w = std::max(w, m.strategy.size());
  auto line = [&](const char* format, auto... args) {
    char b[256];
    std::snprintf(b, sizeof b, format, int(w), args...);
    return std::string(b);
  };
  std::string table = line("  %-*s %10s %10s %10s %8s %10s %12s %10s\n", "strategy", "layer time", "compute", "comm",
                           "overlap", "exposed", "attn hidden", "imbalance");
  nlohmann::json j = nlohmann::json::array();
  for (const trace::StrategyMetrics& m : t.modeled) {
    const double n = double(std::max<size_t>(1, m.ranks.size()));
    const int64_t layer = trace::layer_ns(m);
    const std::optional<trace::Breakdown> att = trace::sublayer_comm(m, "attention");
    const double attention = att ? att->overlap_pct() : std::nan("");
    auto pct = [](double p) { return std::isnan(p) ? std::string("-") : std::to_string(int(std::lround(p))) + "%"; };
    table += line("  %-*s %10s %10s %10s %8s %10s %12s %10.2f\n", m.strategy.c_str(), format_seconds(layer / 1e9).c_str(),
                  format_seconds(m.total.compute_ns / n / 1e9).c_str(), format_seconds(m.total.comm_ns / n / 1e9).c_str(),
                  pct(m.total.overlap_pct()).c_str(), format_seconds(m.total.exposed_comm_ns / n / 1e9).c_str(),
                  pct(attention).c_str(), m.compute_imbalance);
    nlohmann::json mj = metrics_json(m);
    mj["layer_us"] = double(layer) / 1e3;
    mj["attention_comm_overlap_pct"] = std::isnan(attention) ? nlohmann::json(nullptr) : nlohmann::json(attention);
    j.push_back(std::move(mj));
  }
  std::printf("%s", table.c_str());
  return {{"hardware", hw.to_json()}, {"dtype", "bf16"}, {"strategies", std::move(j)}, {"table", table}};
}

// The timeline tables: the modeled twin's (with its ring steps), then the measured one's.
void print_timelines(const Timelines& t, const model::Hardware& hw) {
  std::printf("\n  timeline per rank, modeled on %s (forward + backward; compute and comm are unions of intervals):\n",
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

// The strategies compare runs: --strategies, or the one configuration the degrees give (each must
// fit P and the device), or all that fit; the others are listed in `skipped` with why.
std::vector<Strategy> choose_strategies(const CompareOptions& o, int P, Device device,
                                        std::vector<std::pair<std::string, std::string>>& skipped) {
  std::vector<Strategy> chosen;
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
      chosen.push_back(find_strategy(n));
    }
  }
  // Each configuration once, under its canonical name for P ("tp2xring" and "tp2xring2" are one).
  std::vector<Strategy> valid;
  for (const Strategy& st : chosen) {
    try {
      st.validate(o.cfg, P, device);
    } catch (const ConfigError& e) {
      if (listed) throw;
      skipped.emplace_back(st.name, e.what());
      continue;
    }
    Strategy r = resolve_strategy(st, P);
    if (std::none_of(valid.begin(), valid.end(), [&](const Strategy& v) { return v.name == r.name; }))
      valid.push_back(std::move(r));
  }
  chosen = std::move(valid);
  if (chosen.empty()) {
    std::string why;
    for (auto& [name, w] : skipped) why += (why.empty() ? "" : "; ") + w;
    throw ConfigError(detail::concat("no strategy runs with P = ", P, ": ", why));
  }
  return chosen;
}

int compare_command(CompareOptions& o) {
  const LayerConfig& cfg = o.cfg;
  // Every rank checks everything before any communication: one clear error, no hang.
  std::vector<Strategy> chosen;
  std::vector<std::pair<std::string, std::string>> skipped;
  Setup s = setup(o, "compare", [&](const Setup& s) {
    cfg.validate();
    chosen = choose_strategies(o, s.P, s.device, skipped);
    check_memory(cfg, s.P, s.mpi ? 1 : s.P, true);
    check_outputs(o, s);
  });
  const bool show = s.root && progress_on();
  auto note = [&](const std::string& m) {
    if (show) std::fprintf(stderr, "ringside compare: %s\n", m.c_str());
  };

  std::vector<StrategyRun> runs;
  std::vector<trace::RankTrace> traces;
  const std::string* live = live_trace(o, s);
  for (const Strategy& st : chosen) {
    note(st.name + " on " + std::to_string(s.P) + " ranks ...");
    try {
      runs.push_back(run_one(st, cfg, s, traces, live, trace_other("ringside compare", cfg, s)));
      // Each strategy's timeline is in the file as soon as it has run (ringside-viewer --live).
      if (live && &st != &chosen.back()) {
        trace::TraceData partial;
        partial.other = trace_other("ringside compare", cfg, s);
        partial.ranks = traces;
        trace::write_trace(o.trace, partial);
      }
    } catch (const ConfigError&) {
      throw;
    } catch (const std::exception& e) {
      throw Error(st.name + ": " + e.what());  // name the strategy that failed
    }
  }
  // With documents or a window the layouts' balance is the question: the ring runs again under
  // every other layout, each checked as a strategy is (the load-balance table's measured rows).
  std::map<Layout, StrategyRun> layout_runs;
  for (const Strategy& st : chosen) {
    if (st.name != "ring" || !cfg.masked()) continue;
    for (Layout l : kLayouts) {
      if (l == cfg.cp_layout()) continue;
      LayerConfig lc = cfg;
      lc.layout = l;
      note(std::string("ring, layout ") + to_string(l) + " ...");
      std::vector<trace::RankTrace> untraced;  // the trace holds the strategies, each once
      layout_runs.emplace(l, run_one(st, lc, s, untraced));
    }
  }
  if (!s.root) return 0;  // rank 0 compares and prints; the others are done
  const Timelines timelines = finish_trace(o, "ringside compare", cfg, s, std::move(traces));
  const std::vector<trace::StrategyMetrics>& timeline = timelines.measured;

  note("reference, fp64 ...");
  const RefRun ref64 = reference<double>(cfg);
  note("reference, fp32 ...");
  const RefRun ref32 = reference<float>(cfg);
  const auto theirs = named_results(ref64.out, ref64.dx, ref64.grads);
  const std::string nothing_to_compare = nothing_to_compare_in(theirs);
  auto errors = [&](const Tensor& out, const Tensor& dx, const LayerWeights& g) {
    std::vector<std::pair<std::string, double>> e;
    const auto mine = named_results(out, dx, g);
    for (size_t i = 0; i < mine.size(); ++i) e.emplace_back(mine[i].first, relative_error(*mine[i].second, *theirs[i].second));
    return e;
  };
  auto worst_of = [](const std::vector<std::pair<std::string, double>>& e) {
    auto w = e[0];
    for (auto& x : e)
      if (!(x.second <= w.second)) w = x;
    return w;
  };
  const auto err32 = errors(ref32.out, ref32.dx, ref32.grads);
  auto err32_of = [&](const std::string& n) {
    for (auto& [name, e] : err32)
      if (name == n) return e;
    return 0.0;
  };

  std::printf("ringside compare: %s\n", cfg.summary().c_str());
  std::printf("  backend    %s\n", make_backend(s.device)->describe().c_str());
  std::printf("  P = %d ranks on the %s backend%s; ring layout %s; fp32 runs, errors against the fp64 reference\n",
              s.P, s.backend.c_str(), ranks_are(s), to_string(cfg.cp_layout()));
  std::printf("\n  measured on this %s: the results, bytes and memory, exactly; wall-clock times, which vary\n",
              s.device == Device::cuda ? "GPU" : "CPU");
  const char* hdr[] = {"strategy", "P", "worst error vs fp64", "x fp32", "saved/rank (formula)", "sent/rank (formula)",
                       "time"};
  size_t name_width = 14;  // "reference fp32", or the longest configuration's name
  for (const StrategyRun& run : runs) name_width = std::max(name_width, run.st->name.size());
  for (const auto& [name, why] : skipped) name_width = std::max(name_width, name.size());
  const size_t wid[] = {name_width, 2, 25, 6, 23, 23, 9};
  std::string line;
  for (size_t i = 0; i < std::size(hdr); ++i) line += pad(hdr[i], wid[i], i == 1) + "  ";
  std::printf("  %sverdict\n", line.c_str());

  nlohmann::json js;
  js["config"] = cfg.to_json();
  js["ranks"] = s.P;
  js["backend"] = s.backend;
  js["device"] = to_string(s.device);
  js["dtype"] = "float32";
  int failures = 0;
  {
    const auto w = worst_of(err32);
    std::string row = pad("reference fp32", wid[0]) + "  " + pad("1", wid[1], true) + "  " +
                      pad(sci(w.second) + " " + w.first, wid[2]) + "  " + pad("1.00", wid[3]) + "  " +
                      pad(format_bytes(double(ref32.peak_saved)) + " (" +
                              format_bytes(double(saved_activation_bytes(cfg, DType::f32))) + ")",
                          wid[4]) +
                      "  " + pad("0 B", wid[5]) + "  " + pad(format_seconds(ref32.seconds), wid[6]) + "  ";
    const bool ok = w.second < 1e-5 && nothing_to_compare.empty();
    failures += !ok;
    std::printf("  %s%s\n", row.c_str(),
                ok ? "OK (the yardstick)" : w.second < 1e-5 ? ("FAIL: " + nothing_to_compare).c_str() : "FAIL: above 1e-5");
    nlohmann::json& j = js["reference_fp32"];
    for (auto& [n, e] : err32) j["errors"][n] = e;
    j["worst"] = {{"tensor", w.first}, {"error", w.second}};
    j["time_s"] = ref32.seconds;
    j["peak_saved_bytes"] = ref32.peak_saved;
    js["reference_fp64"]["time_s"] = ref64.seconds;
  }

  auto metrics_of = [&](const std::string& name) -> const trace::StrategyMetrics& {
    for (const trace::StrategyMetrics& m : timeline)
      if (m.strategy == name) return m;
    throw Error("compare: no timeline for " + name);
  };
  for (const StrategyRun& run : runs) {
    const Strategy& st = *run.st;
    const trace::StrategyMetrics& tm = metrics_of(st.name);
    const auto e = errors(run.result.out, run.result.dx, run.result.grads);
    const auto w = worst_of(e);
    const double ratio = err32_of(w.first) > 0 ? w.second / err32_of(w.first) : 0;
    double max_saved = 0, max_saved_formula = 0, max_sent = 0, max_sent_formula = 0, max_time = 0;
    bool memory_ok = true, bytes_ok = true, trace_ok = int(tm.ranks.size()) == s.P;
    nlohmann::json jr = nlohmann::json::array();
    nlohmann::json timeline_json = metrics_json(tm);  // once: each rank's row goes beside its counters
    for (int r = 0; r < s.P; ++r) {
      const RankNumbers& n = run.ranks[r];
      const double saved_f = double(st.saved_bytes(cfg, s.P, r, DType::f32));
      const CommBytes cb = st.comm_bytes(cfg, s.P, r, DType::f32);
      max_saved = std::max(max_saved, n.peak_saved);
      max_saved_formula = std::max(max_saved_formula, saved_f);
      max_sent = std::max(max_sent, n.fwd_sent + n.bwd_sent);
      max_sent_formula = std::max(max_sent_formula, double(cb.forward + cb.backward));
      max_time = std::max(max_time, n.fwd_s + n.bwd_s);
      memory_ok &= n.peak_saved == saved_f;
      bytes_ok &= n.fwd_sent == double(cb.forward) && n.bwd_sent == double(cb.backward);
      // The trace must agree with the counters: its memory peak with the tracker's, its sends
      // with the bytes the communicator counted.
      const trace::RankMetrics& rm = tm.ranks.at(r);
      trace_ok &= double(rm.peak_memory_bytes) == n.peak_bytes && double(rm.bytes_sent) == n.fwd_sent + n.bwd_sent;
      nlohmann::json tj = timeline_json["ranks"][r];
      jr.push_back({{"rank", r},
                    {"peak_saved_bytes", int64_t(n.peak_saved)},
                    {"formula_saved_bytes", int64_t(saved_f)},
                    {"bytes_sent", {{"forward", int64_t(n.fwd_sent)}, {"backward", int64_t(n.bwd_sent)}}},
                    {"formula_bytes_sent", {{"forward", cb.forward}, {"backward", cb.backward}}},
                    {"bytes_received", {{"forward", int64_t(n.fwd_recv)}, {"backward", int64_t(n.bwd_recv)}}},
                    {"forward_s", n.fwd_s},
                    {"backward_s", n.bwd_s},
                    {"attention_flops", n.attention_flops},
                    {"peak_bytes", int64_t(n.peak_bytes)},
                    {"timeline", tj}});
    }
    const bool accurate = w.second < 1e-5 && nothing_to_compare.empty();
    std::string verdict;
    if (accurate && memory_ok && bytes_ok && trace_ok) {
      verdict = "OK";
    } else {
      std::vector<std::string> why;
      if (w.second >= 1e-5) why.push_back("error above 1e-5");
      if (!nothing_to_compare.empty()) why.push_back(nothing_to_compare);
      if (!memory_ok) why.push_back("saved bytes differ from the formula");
      if (!bytes_ok) why.push_back("bytes sent differ from the formula");
      if (!trace_ok) why.push_back("the trace's memory or bytes differ from the counters");
      verdict = "FAIL:";
      for (size_t i = 0; i < why.size(); ++i) verdict += (i ? "; " : " ") + why[i];
      ++failures;
    }
    char ratio_s[32];
    std::snprintf(ratio_s, sizeof ratio_s, ratio < 1000 ? "%.2f" : "%.1e", ratio);
    std::string row = pad(st.name, wid[0]) + "  " + pad(std::to_string(s.P), wid[1], true) + "  " +
                      pad(sci(w.second) + " " + w.first, wid[2]) + "  " + pad(ratio_s, wid[3]) + "  " +
                      pad(format_bytes(max_saved) + " (" + format_bytes(max_saved_formula) + ")", wid[4]) + "  " +
                      pad(format_bytes(max_sent) + " (" + format_bytes(max_sent_formula) + ")", wid[5]) + "  " +
                      pad(format_seconds(max_time), wid[6]) + "  ";
    std::printf("  %s%s\n", row.c_str(), verdict.c_str());
    nlohmann::json j;
    j["name"] = st.name;
    const ParallelConfig& par = st.parallel;  // resolved: every degree given
    j["parallel"] = {{"tp_size", par.tp}, {"cp_size", par.cp}, {"cp_comm_type", to_string(par.cp_comm)},
                     {"a2a_size", par.a2a_size()}, {"ring_size", par.ring_size()}, {"order", to_string(par.order)}};
    for (auto& [n, x] : e) j["errors"][n] = x;
    j["worst"] = {{"tensor", w.first}, {"error", w.second}};
    j["ratio_to_fp32_reference"] = ratio;
    j["ok"] = accurate && memory_ok && bytes_ok && trace_ok;
    timeline_json.erase("ranks");  // per rank above, beside the counters
    j["timeline"] = std::move(timeline_json);
    j["verdict"] = verdict;
    j["per_rank"] = jr;
    js["strategies"].push_back(j);
  }
  for (auto& [name, why] : skipped) {
    std::printf("  %s%s\n", (pad(name, wid[0]) + "  " + pad(std::to_string(s.P), wid[1], true) + "  ").c_str(),
                ("skipped: " + why).c_str());
    js["skipped"][name] = why;
  }
  js["modeled"] = print_modeled(timelines, s.hw);
  for (const StrategyRun& run : runs) {
    if (run.st->name != "ring") continue;
    // The load-balance table: measured for the layouts that ran (every one with documents or a
    // window), analytic for the others (exact counts of the pairs the mask leaves visible).
    // S: the padded length each layout needs.
    struct Row {
      Layout layout;
      LayerConfig cfg;
      const StrategyRun* run;  // null: the formula alone
      int64_t S;
      std::vector<double> flops;  // per rank
    };
    std::vector<Row> rows;
    double most = 0;
    for (Layout l : kLayouts) {
      LayerConfig lc = cfg;
      lc.layout = l;
      const auto other = layout_runs.find(l);
      Row row{l, lc, l == cfg.cp_layout() ? &run : other != layout_runs.end() ? &other->second : nullptr,
              sequence_packing(run.st->parallel.resolved(s.P), lc).S, {}};
      for (int r = 0; r < s.P; ++r) {
        row.flops.push_back(row.run ? row.run->ranks[r].attention_flops : ring_attention_flops(lc, s.P, r));
        most = std::max(most, row.flops.back());
      }
      rows.push_back(std::move(row));
    }
    // A measured layout's verdict, as a strategy's: the error, and every rank's FLOPs, saved
    // bytes and bytes sent equal to the formulas of its layout.
    auto layout_check = [&](const Row& row) {
      const auto w = worst_of(errors(row.run->result.out, row.run->result.dx, row.run->result.grads));
      bool exact = true;
      for (int r = 0; r < s.P; ++r) {
        const RankNumbers& n = row.run->ranks[r];
        const CommBytes cb = run.st->comm_bytes(row.cfg, s.P, r, DType::f32);
        exact &= n.attention_flops == ring_attention_flops(row.cfg, s.P, r) &&
                 n.peak_saved == double(run.st->saved_bytes(row.cfg, s.P, r, DType::f32)) &&
                 n.fwd_sent == double(cb.forward) && n.bwd_sent == double(cb.backward);
      }
      const bool ok = w.second < 1e-5 && nothing_to_compare.empty() && exact;
      failures += !ok;
      return std::pair{w, std::string(ok ? "OK" : exact ? "FAIL: error above 1e-5" : "FAIL: FLOPs or bytes differ from the formulas")};
    };
    // One unit for the table, so that a small layer's work is not all 0.00.
    const auto [unit, scale] = most >= 1e9 ? std::pair{"GFLOP", 1e9} : most >= 1e6 ? std::pair{"MFLOP", 1e6}
                                                                               : std::pair{"kFLOP", 1e3};
    std::printf("\n  ring attention work per rank (forward %s%s%s%s):\n  %-26s %6s", unit, cfg.causal ? ", causal" : "",
                cfg.docs.size() > 1 ? detail::concat(", ", cfg.docs.size(), " documents").c_str() : "",
                cfg.window > 0 ? detail::concat(", window ", cfg.window).c_str() : "", "layout", "S");
    for (int r = 0; r < s.P; ++r) std::printf(" %7s", ("rank " + std::to_string(r)).c_str());
    std::printf("   max/min%s\n", layout_runs.empty() ? "" : "  worst error vs fp64        verdict");
    nlohmann::json& jl = js["ring_work_per_rank"];
    auto fixed2 = [](double v) {
      char b[32];
      std::snprintf(b, sizeof b, "%.2f", v);
      return std::string(b);
    };
    for (const Row& row : rows) {
      nlohmann::json& j = jl[to_string(row.layout)];
      std::string cells;
      for (double f : row.flops) {
        cells += detail::concat(" ", pad(fixed2(f / scale), 7, true));
        j["gflops"].push_back(f / 1e9);
      }
      const double lo = *std::min_element(row.flops.begin(), row.flops.end());
      const double hi = *std::max_element(row.flops.begin(), row.flops.end());
      // A rank with no work (it holds only padding, or keys nobody sees) has no ratio: inf.
      j["max_over_min"] = lo > 0 ? nlohmann::json(hi / lo) : nlohmann::json(nullptr);
      j["measured"] = row.run != nullptr;
      j["S"] = row.S;
      std::string checked;
      if (row.run && !layout_runs.empty()) {
        const auto [w, verdict] = layout_check(row);
        checked = "  " + pad(sci(w.second) + " " + w.first, 25) + "  " + verdict;
        j["worst"] = {{"tensor", w.first}, {"error", w.second}};
        j["verdict"] = verdict;
      }
      std::printf("  %-26s %6lld%s   %7s%s\n",
                  (std::string(to_string(row.layout)) + (row.run ? " (measured)" : " (formula)")).c_str(), (long long)row.S,
                  cells.c_str(), lo > 0 ? fixed2(hi / lo).c_str() : hi > 0 ? "inf" : "-", checked.c_str());
    }
  }
  for (const StrategyRun& run : runs) {
    if (run.st->parallel.cp_comm != CpComm::all_gather) continue;
    // The price of all_gather: every rank holds the whole sequence's K/V while it attends.
    const int T = run.st->parallel.resolved(s.P).tp;
    const int64_t S = sequence_packing(run.st->parallel.resolved(s.P), cfg).S;  // padded
    const int64_t kv = allgather_kv_bytes(cfg.b, S, cfg.Hkv / T, cfg.d(), DType::f32);
    const int64_t peak = parallel_forward_comm_peak(run.st->parallel, cfg, s.P, 0, DType::f32);  // alike on every rank
    bool all_equal = true;
    nlohmann::json measured = nlohmann::json::array();
    for (size_t r = 0; r < run.ranks.size(); ++r) {
      all_equal &= int64_t(run.ranks[r].peak_comm) == parallel_forward_comm_peak(run.st->parallel, cfg, s.P, int(r), DType::f32);
      measured.push_back(int64_t(run.ranks[r].peak_comm));
    }
    std::printf("\n  %s: each rank holds the whole sequence's K/V while it attends, 2 b S (Hkv/T) d x 4 B = %s;\n"
                "  with V's gather buffer its forward's communication buffers peak at %s (formula), %s (measured).\n",
                run.st->name.c_str(), format_bytes(double(kv)).c_str(), format_bytes(double(peak)).c_str(),
                all_equal ? "the same on every rank" : "NOT the formula on some rank");
    js["all_gather_kv_bytes"][run.st->name] = {
        {"formula", kv}, {"formula_forward_comm_peak", peak}, {"forward_comm_peak", measured}};
  }
  std::printf(
      "\n  worst error: the largest relative Frobenius error over out, dx and every weight gradient; x fp32:\n"
      "  that error over the single-device fp32 run's (near 1: as accurate as one device). saved/rank:\n"
      "  peak activations kept for backward, busiest rank; sent/rank: bytes sent forward + backward;\n"
      "  each beside its analytic formula. time: forward + backward, slowest rank, wall clock. OK: error\n"
      "  below 1e-5, memory and bytes equal to their formulas, and the timeline equal to the counters.\n"
      "  modeled: overlap is time computing while communicating / time communicating, all ranks; exposed\n"
      "  is communication nothing hides; attn hidden, the overlap of attention's own traffic.\n");
  print_measured_note(s.P);
  print_timelines(timelines, s.hw);
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
  std::optional<Strategy> chosen;
  Setup s = setup(o, "run", [&](const Setup& s) {
    cfg.validate();
    chosen = strategy_from(o.strategy, o.parallel, s.P);
    chosen->validate(cfg, s.P, s.device);
    chosen = resolve_strategy(*chosen, s.P);
    check_memory(cfg, s.P, s.mpi ? 1 : s.P, false);
    check_outputs(o, s);
  });
  const Strategy& st = *chosen;
  std::vector<trace::RankTrace> traces;
  const StrategyRun run = run_one(st, cfg, s, traces, live_trace(o, s), trace_other("ringside run", cfg, s));
  if (!s.root) return 0;
  const Timelines timelines = finish_trace(o, "ringside run", cfg, s, std::move(traces));
  std::printf("ringside run %s: %s\n", st.name.c_str(), cfg.summary().c_str());
  std::printf("  %s; P = %d ranks on the %s backend%s\n", st.summary.c_str(), s.P, s.backend.c_str(), ranks_are(s));
  if (const std::string groups = describe_groups(st.parallel); !groups.empty())
    std::printf("  groups     %s (world ranks)\n", groups.c_str());
  std::printf("  backend    %s\n\n", make_backend(s.device)->describe().c_str());
  std::printf("  %4s  %-26s  %-44s  %s\n", "rank", "saved  measured | formula", "sent  forward + backward | formula", "time fwd + bwd");
  for (int r = 0; r < s.P; ++r) {
    const RankNumbers& n = run.ranks[r];
    const CommBytes cb = st.comm_bytes(cfg, s.P, r, DType::f32);
    const std::string saved = format_bytes(n.peak_saved) + " | " + format_bytes(double(st.saved_bytes(cfg, s.P, r, DType::f32)));
    const std::string sent = format_bytes(n.fwd_sent) + " + " + format_bytes(n.bwd_sent) + " | " +
                             format_bytes(double(cb.forward)) + " + " + format_bytes(double(cb.backward));
    std::printf("  %4d  %-26s  %-44s  %s + %s\n", r, saved.c_str(), sent.c_str(), format_seconds(n.fwd_s).c_str(),
                format_seconds(n.bwd_s).c_str());
  }
  // The ring's schedule: what each rank computed at each step, and what it sent.
  for (size_t r = 0; r < run.steps.size(); ++r) {
    if (run.steps[r].empty()) continue;
    std::printf("\n  rank %zu, ring steps (layout %s; compute and wait measured here, they vary):\n"
                "  %-9s %4s %12s %10s %10s %10s %10s  %s\n", r,
                to_string(cfg.cp_layout()), "phase", "step", "K/V block of", "GFLOP", "sent", "compute", "wait",
                "computed (global query x key positions)");
    for (const StepRecord& st : run.steps[r])
      std::printf("  %-9s %4d %12s %10.3f %10s %10s %10s  %s\n", st.phase.c_str(), st.step,
                  ("rank " + std::to_string(st.block_of)).c_str(), st.flops / 1e9, format_bytes(double(st.bytes_sent)).c_str(),
                  format_seconds(st.compute_s).c_str(), format_seconds(st.wait_s).c_str(),
                  (st.computed + (st.skipped_pairs ? "; skipped, wholly masked: " + st.skipped : "")).c_str());
  }
  print_modeled(timelines, s.hw);
  print_timelines(timelines, s.hw);
  print_measured_note(s.P);
  if (!o.trace.empty()) std::printf("\n  trace: %s (ringside-viewer %s, or Perfetto: ui.perfetto.dev)\n", o.trace.c_str(), o.trace.c_str());
  if (o.dump) {
    write_dump(*o.dump, cfg, sequence_packing(st.parallel, cfg), run.result.out, run.result.dx, run.result.grads, st.name);
    std::printf("\n  dump: %s/manifest.json and the tensors, gathered, with reference's names\n", o.dump->c_str());
  }
  return 0;
}

}  // namespace ringside::cli

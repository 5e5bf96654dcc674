// The `ringside` command. Subcommands: reference, compare, run, bench, trace-stats, model, validate, plan, lesson. Each has --help.
#include <chrono>
#ifdef __GLIBC__
#include <malloc.h>
#endif
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <optional>

#include <unistd.h>

#include <CLI/CLI.hpp>

#include "cli/commands.h"
#include "core/strict_flags.h"
#include "cli/format.h"
#include "comm/communicator.h"
#include "core/error.h"
#include "core/npy.h"
#include "device/backend.h"
#include "core/memory_limits.h"
#include "kernels/cpu/isa.h"
#include "kernels/philox.h"
#include "layer/reference.h"

namespace ringside::cli {

namespace {

struct ReferenceRun {
  ForwardResult fwd;  ///< out; the saved activations are released after the backward
  Gradients grads;
  Tensor x, dout;
  double forward_s = 0, backward_s = 0;
  int64_t peak_saved = 0;
  Shape q_shape, k_shape, lse_shape, u_shape;
};

template <class T>
ReferenceRun run_reference(const LayerConfig& cfg, Backend& be, MemoryTracker& tracker, int rank) {
  const AllocTag tag{rank, MemCategory::workspace, &tracker};
  constexpr DType dt = dtype_of<T>();
  const LayerWeights w = init_weights(cfg, dt, tag);
  ReferenceRun r;
  r.x = random_input(cfg, static_cast<uint32_t>(RngSite::input_x), dt, tag);
  r.dout = random_input(cfg, static_cast<uint32_t>(RngSite::input_dout), dt, tag);
  using clock = std::chrono::steady_clock;
  auto t0 = clock::now();
  r.fwd = reference_forward<T>(cfg, w, r.x, be, tag);
  auto t1 = clock::now();
  r.grads = reference_backward<T>(cfg, w, r.fwd.saved, r.dout, be, tag);
  auto t2 = clock::now();
  r.forward_s = std::chrono::duration<double>(t1 - t0).count();
  r.backward_s = std::chrono::duration<double>(t2 - t1).count();
  r.peak_saved = tracker.peak(rank, MemCategory::activations);
  // Release the saved activations (a --check run of fp64 follows); keep what is printed.
  SavedActivations kept;
  kept.positions = r.fwd.saved.positions;
  r.q_shape = r.fwd.saved.q.shape(), r.k_shape = r.fwd.saved.k.shape();
  r.lse_shape = r.fwd.saved.lse.shape(), r.u_shape = r.fwd.saved.u.shape();
  r.fwd.saved = std::move(kept);
  return r;
}

std::vector<std::pair<std::string, const Tensor*>> results(const ReferenceRun& r) {
  return named_results(r.fwd.out, r.grads.dx, r.grads.grads);
}

int reference_command(LayerConfig cfg, const std::string& dtype, bool check, const std::optional<std::string>& dump_dir) {
  cfg.validate();
  if (cfg.dropout == 0) cfg.dropout = 0.0;  // print and save -0 as 0
  const bool f64 = dtype == "f64";
  const DType dt = f64 ? DType::f64 : DType::f32;
  if (check && f64) throw ConfigError("--check compares the fp32 run with fp64; it needs --dtype f32");
  if (dump_dir) prepare_dump_dir(*dump_dir, cfg);
  require_memory(reference_peak_bytes(cfg, dt) + (check ? reference_peak_bytes(cfg, DType::f64) : 0.0),
                 check ? "this layer (fp32 and fp64)" : "this layer", "--seq, --batch or --ffn");

  auto be = make_cpu_backend();
  MemoryTracker tracker;
  std::printf("ringside reference: the single-device layer, forward and backward (%s)\n", f64 ? "fp64" : "fp32");
  std::printf("  config     %s\n", cfg.summary().c_str());
  std::printf("  backend    %s\n", be->describe().c_str());
  std::fflush(stdout);

  const ReferenceRun r = f64 ? run_reference<double>(cfg, *be, tracker, 0) : run_reference<float>(cfg, *be, tracker, 0);
  std::printf("  shapes     x %s  q %s  k,v %s  lse %s  u,g %s\n", to_string(r.x.shape()).c_str(),
              to_string(r.q_shape).c_str(), to_string(r.k_shape).c_str(), to_string(r.lse_shape).c_str(),
              to_string(r.u_shape).c_str());
  int64_t params = 0;
  for (auto& [name, shape] : weight_shapes(cfg)) params += numel(shape);
  std::printf("  params     %.3f M (%s)\n", double(params) / 1e6, format_bytes(double(params * dtype_size(dt))).c_str());
  const int64_t formula = saved_activation_bytes(cfg, dt);
  std::printf("  saved      peak saved activations %s (%lld bytes); formula N(6h + 2Hkv d + 2f + 4 + H) %s: %s\n",
              format_bytes(double(r.peak_saved)).c_str(), static_cast<long long>(r.peak_saved),
              format_bytes(double(formula)).c_str(), r.peak_saved == formula ? "equal" : "DIFFERENT");
  const double flops = layer_forward_flops(cfg);
  std::printf("  time       forward %s (%s)   backward %s (%s, counting 2x forward)\n",
              format_seconds(r.forward_s).c_str(), format_flops(flops / r.forward_s).c_str(),
              format_seconds(r.backward_s).c_str(), format_flops(2 * flops / r.backward_s).c_str());

  int status = 0;
  if (check && !f64) {
    std::printf("  check      against the fp64 reference (relative Frobenius error):\n");
    std::fflush(stdout);
    MemoryTracker t64;
    const ReferenceRun ref = run_reference<double>(cfg, *be, t64, 0);
    const auto mine = results(r), theirs = results(ref);
    double worst = -1;
    std::string worst_name;
    for (size_t i = 0; i < mine.size(); ++i) {
      const double e = relative_error(*mine[i].second, *theirs[i].second);
      std::printf("    %-16s %.2e\n", mine[i].first.c_str(), e);
      if (!(e <= worst)) worst = e, worst_name = mine[i].first;
    }
    const std::string empty = nothing_to_compare_in(theirs);
    const bool ok = worst < 1e-5 && empty.empty();
    std::printf("  verdict    %s: worst %s at %.2e (bound 1e-5)%s\n", ok ? "OK" : "FAIL", worst_name.c_str(), worst,
                empty.empty() ? "" : ("; " + empty).c_str());
    status = ok ? 0 : 1;
  }
  if (dump_dir) {
    write_dump(*dump_dir, cfg, Packing(cfg), r.fwd.out, r.grads.dx, r.grads.grads, "reference");
    std::printf("  dump       %s/manifest.json and %zu .npy files\n", dump_dir->c_str(), 4 + 12 + results(r).size());
  }
  return status;
}

}  // namespace
}  // namespace ringside::cli

int main(int argc, char** argv) {
  using namespace ringside;
  restart_within_limits(argv);
#ifdef __GLIBC__
  // A layer's tensors are megabytes each and short-lived. glibc would map each one fresh from
  // the kernel and unmap it on free (a zeroed page fault every 4 KiB, each time); from the heap
  // they are reused instead, as PyTorch's caching allocators do (~10% of a CPU layer forward), and
  // the top of the heap is not handed back after every layer only to be faulted in again.
  mallopt(M_MMAP_THRESHOLD, 1 << 30);
  mallopt(M_TRIM_THRESHOLD, 1 << 30);
#endif
  CLI::App app{"ringside: sequence parallelism for one transformer layer, checked and made visible"};
  app.require_subcommand(1);
  app.set_version_flag("--version", std::string("ringside ") + RINGSIDE_VERSION +
#ifdef RINGSIDE_HAVE_CUDA
                                        " (CUDA backend built)"
#else
                                        " (CPU only)"
#endif
  );

  LayerConfig cfg;
  std::string dtype = "f32";
  std::optional<std::string> dump_dir;
  bool check = false;
  CLI::App* ref = app.add_subcommand("reference", "Run the single-device reference layer forward and backward once");
  cli::add_config_flags(*ref, cfg);
  ref->add_option("--dtype", dtype, "compute type")->check(CLI::IsMember({"f32", "f64"}))->capture_default_str();
  ref->add_flag("--check", check, "also run fp64 and print each tensor's relative error (exit 1 above 1e-5)");
  ref->add_option("--dump", dump_dir, "write every tensor as fp32 .npy and DIR/manifest.json")->option_text("DIR")->check(
      cli::non_empty("--dump needs a directory name"));
  ref->footer(
      "Examples:\n"
      "  ringside reference --check                       # default layer, fp32 checked against fp64\n"
      "  ringside reference --seq 1024 --kv-heads 1 --no-rope\n"
      "  ringside reference --seq 256 --dump out/ref      # .npy files + manifest.json");

  cli::CompareOptions cmp_opts;
  auto [compare_app, run_app] = cli::add_compare_and_run(app, cmp_opts);

  cli::BenchKernelsOptions bench_opts;
  cli::BenchCommOptions bench_comm_opts;
  cli::BenchTraceOptions bench_trace_opts;
  bench_trace_opts.cfg.s = 1024;  // a run of a few seconds on 2 cores
  cli::BenchModelOptions bench_model_opts;
  auto [bench_kernels, bench_comm, bench_trace, bench_model] =
      cli::add_bench(app, bench_opts, bench_comm_opts, bench_trace_opts, bench_model_opts);
  cli::BenchCudaOptions bench_cuda_opts;
  cli::add_bench_cuda(*app.get_subcommand("bench"), bench_cuda_opts);

  cli::TraceStatsOptions stats_opts;
  CLI::App* stats_app = cli::add_trace_stats(app, stats_opts);

  cli::ModelCommandOptions model_opts;
  CLI::App* model_app = cli::add_model(app, model_opts);

  cli::ValidateOptions validate_opts;
  CLI::App* validate_app = cli::add_validate(app, validate_opts);

  cli::PlanCommandOptions plan_opts;
  CLI::App* plan_app = cli::add_plan(app, plan_opts);
  cli::BenchPlanOptions bench_plan_opts;
  CLI::App* bench_plan = cli::add_bench_plan(*app.get_subcommand("bench"), bench_plan_opts);
  cli::BenchLayerOptions bench_layer_opts;
  CLI::App* bench_layer = cli::add_bench_layer(*app.get_subcommand("bench"), bench_layer_opts);

  cli::LessonOptions lesson_opts;
  CLI::App* lesson_app = cli::add_lesson(app, lesson_opts);
  cli::strict_values(app);

  try {
    // CLI11 answers a misspelt subcommand with "A subcommand is required"; name it instead.
    CLI::App* level = &app;
    for (int i = 1; i < argc && argv[i][0] != '-' && !level->get_subcommands({}).empty(); ++i) {
      CLI::App* next = nullptr;
      for (CLI::App* sub : level->get_subcommands({}))
        if (sub->get_name() == argv[i]) next = sub;
      if (!next) {
        std::string names;
        for (CLI::App* sub : level->get_subcommands({})) names += (names.empty() ? "" : ", ") + sub->get_name();
        std::fprintf(stderr, "ringside: unknown subcommand '%s' (expected one of: %s; see --help)\n", argv[i],
                     names.c_str());
        return 2;
      }
      level = next;
    }
    app.parse(argc, argv);
    kernels::cpu::active_cpu_isa();  // a bad RINGSIDE_CPU_ISA is refused here, before any work
    int rc = 0;
    if (ref->parsed()) rc = cli::reference_command(cfg, dtype, check, dump_dir);
    if (compare_app->parsed()) rc = cli::compare_command(cmp_opts);
    if (run_app->parsed()) rc = cli::run_command(cmp_opts);
    if (bench_kernels->parsed()) rc = cli::bench_kernels(bench_opts);
    if (bench_comm->parsed()) rc = cli::bench_comm(bench_comm_opts);
    if (bench_trace->parsed()) rc = cli::bench_trace(bench_trace_opts);
    if (bench_model->parsed()) rc = cli::bench_model(bench_model_opts);
    if (app.get_subcommand("bench")->get_subcommand("cuda")->parsed()) rc = cli::bench_cuda(bench_cuda_opts);
    if (stats_app->parsed()) rc = cli::trace_stats_command(stats_opts);
    if (model_app->parsed()) rc = cli::model_command(model_opts);
    if (validate_app->parsed()) rc = cli::validate_command(validate_opts);
    if (plan_app->parsed()) rc = cli::plan_command(plan_opts);
    if (bench_plan->parsed()) rc = cli::bench_plan(bench_plan_opts);
    if (bench_layer->parsed()) rc = cli::bench_layer(bench_layer_opts);
    if (lesson_app->parsed()) {
      // The viewer is built beside this command; say how to call it from here.
      const std::filesystem::path viewer = std::filesystem::path(argv[0]).parent_path() / "ringside-viewer";
      rc = cli::lesson_command(lesson_opts, std::filesystem::exists(viewer) ? viewer.string() : "ringside-viewer");
    }
    mpi_finalize();
    return rc;
  } catch (const CLI::ParseError& e) {
    // --help and --version exit 0; a flag the parser refuses is a usage error, exit 2.
    return app.exit(e) == 0 ? 0 : 2;
  } catch (const ConfigError& e) {
    // Every rank rejects a bad configuration alike, before any communication (cli/agree.cpp):
    // one rank says it, rank 0 unless another rank found it.
    if (!mpi_active() || mpi_world().rank() == e.reporting_rank) std::fprintf(stderr, "ringside: %s\n", e.what());
    mpi_finalize();
    return 2;
  } catch (const std::bad_alloc&) {
    const char* what = "out of memory (the machine's, or a limit on this process: ulimit -v)";
    if (mpi_active()) mpi_abort(what);
    std::fprintf(stderr, "ringside: error: %s\n", what);
    return 1;
  } catch (const std::exception& e) {
    // A rank failing mid-run under MPI brings the job down, naming itself.
    if (mpi_active()) mpi_abort(e.what());
    std::fprintf(stderr, "ringside: error: %s\n", e.what());
    return 1;
  }
}

// The `ringside` command. Subcommands: reference, compare, run, bench, trace-stats, model, validate, calibrate, plan, lesson. Each has --help.
#include <chrono>
#ifdef __GLIBC__
#include <malloc.h>
#endif
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <optional>
#include <tuple>

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
#include "kernels/cpu/blas_kernels.h"
#include "kernels/cpu/isa.h"
#include "kernels/philox.h"
#include "check/check.h"
#include "check/reference_run.h"
#include "layer/reference.h"
#include "parallel/run_plan.h"

namespace ringside::cli {

namespace {

int reference_command(LayerConfig cfg, const cli::RunChoices& choices, const std::string& dtype, bool check,
                      const std::optional<std::string>& dump_dir) {
  const RunPlan one = resolve_one_rank(cfg);  // the layer's rules, before any work; its unsplit packing
  if (cfg.dropout == 0) cfg.dropout = 0.0;  // print and save -0 as 0
  const bool f64 = dtype == "f64";
  const DType dt = f64 ? DType::f64 : DType::f32;
  if (check && f64) throw ConfigError("--check compares the fp32 run with fp64; it needs --dtype f32");
  if (dump_dir) prepare_dump_dir(*dump_dir, cfg);
  require_memory(reference_peak_bytes(cfg, dt) + (check ? reference_peak_bytes(cfg, DType::f64) : 0.0),
                 check ? "this layer (fp32 and fp64)" : "this layer", "--seq, --batch or --ffn");

  std::printf("ringside reference: the single-device layer, forward and backward (%s)\n", f64 ? "fp64" : "fp32");
  std::printf("  config     %s\n", cfg.summary(choices.recompute).c_str());
  std::printf("  backend    %s\n", make_cpu_backend()->describe().c_str());
  std::fflush(stdout);

  const Recompute recompute = choices.recompute;
  const ReferenceRun r = run_reference(cfg, dt, recompute);
  std::printf("  shapes     x %s  q %s  k,v %s  lse %s  u,g %s\n", to_string(Shape{cfg.b, cfg.s, cfg.h}).c_str(),
              to_string(r.q_shape).c_str(), to_string(r.k_shape).c_str(), to_string(r.lse_shape).c_str(),
              to_string(r.u_shape).c_str());
  std::printf("  params     %s (%s)\n", parameter_summary(cfg).c_str(),
              format_bytes(double(cfg.param_count() * dtype_size(dt))).c_str());
  const int64_t formula = saved_activation_bytes(cfg, dt, recompute);
  std::printf("  saved      peak saved activations %s (%lld bytes); formula %s %s: %s\n",
              format_bytes(double(r.peak_saved)).c_str(), static_cast<long long>(r.peak_saved),
              saved_activation_formula(cfg, recompute).c_str(), format_bytes(double(formula)).c_str(),
              r.peak_saved == formula ? "equal" : "DIFFERENT");
  // Full recomputation runs the forward again inside the backward (selective: elementwise passes only).
  const double flops = layer_forward_flops(cfg), backward_flops = (recompute == Recompute::full ? 3 : 2) * flops;
  std::printf("  time       forward %s (%s)   backward %s (%s, counting %s)\n", format_seconds(r.forward_s).c_str(),
              format_flops(flops / r.forward_s).c_str(), format_seconds(r.backward_s).c_str(),
              format_flops(backward_flops / r.backward_s).c_str(),
              recompute == Recompute::full ? "3x forward: the forward again and 2x" : "2x forward");

  int status = 0;
  if (check && !f64) {
    std::printf("  check      against the fp64 reference (relative Frobenius error):\n");
    std::fflush(stdout);
    const ReferenceRun ref = run_reference(cfg, DType::f64);
    const TensorErrors errors = errors_against(r.out, r.dx, r.grads, ref);
    for (const auto& [name, e] : errors.errors) std::printf("    %-16s %.2e\n", name.c_str(), e);
    const std::string empty = nothing_to_compare_in(named_results(ref.out, ref.dx, ref.grads));
    const bool ok = errors.worst.second < kTolerance && empty.empty();
    std::printf("  verdict    %s: worst %s at %.2e (bound %s)%s\n", ok ? "OK" : "FAIL", errors.worst.first.c_str(),
                errors.worst.second, kToleranceText, empty.empty() ? "" : ("; " + empty).c_str());
    status = ok ? 0 : 1;
  }
  if (dump_dir) {
    const size_t files =
        write_dump(*dump_dir, cfg, config_json(cfg, choices.applied_to({})), *one.packing, r.out, r.dx, r.grads, "reference");
    std::printf("  dump       %s/manifest.json and %zu .npy files\n", dump_dir->c_str(), files);
  }
  return status;
}

// The options of `ringside reference`.
struct ReferenceOptions {
  LayerConfig cfg;
  RunChoices choices;
  std::string dtype = "f32";
  std::optional<std::string> dump_dir;
  bool check = false;
};

CLI::App* add_reference(CLI::App& app, ReferenceOptions& o) {
  CLI::App* ref = app.add_subcommand("reference", "Run the single-device reference layer forward and backward once");
  add_config_flags(*ref, o.cfg, o.choices);
  refuse_flag(*ref, "--layout", "the reference runs the whole sequence on one device: there is no context-parallel layout "
                                "to choose (run, compare and model take one)");
  ref->add_option("--dtype", o.dtype, "compute type")->check(CLI::IsMember({"f32", "f64"}))->capture_default_str();
  ref->add_flag("--check", o.check, std::string("also run fp64 and print each tensor's relative error (exit 1 above ") + kToleranceText + ")");
  ref->add_option("--dump", o.dump_dir, "write every tensor as fp32 .npy and DIR/manifest.json")->option_text("DIR")->check(
      non_empty("--dump needs a directory name"));
  ref->footer(
      "Examples:\n"
      "  ringside reference --check                       # default layer, fp32 checked against fp64\n"
      "  ringside reference --seq 1024 --kv-heads 1 --no-rope\n"
      "  ringside reference --seq 256 --dump out/ref      # .npy files + manifest.json");
  return ref;
}

/// Every subcommand, and the options the parser fills in for it. The parser holds references
/// into these, so there is one, made in main and never copied.
struct Commands {
  Commands() = default;
  Commands(const Commands&) = delete;
  Commands& operator=(const Commands&) = delete;

  ReferenceOptions ref_opts;
  CompareOptions cmp_opts;  // compare and run
  BenchKernelsOptions bench_opts;
  BenchCommOptions bench_comm_opts;
  BenchTraceOptions bench_trace_opts;
  BenchModelOptions bench_model_opts;
  BenchCudaOptions bench_cuda_opts;
  TraceStatsOptions stats_opts;
  ModelCommandOptions model_opts;
  ValidateOptions validate_opts;
  CalibrateCommandOptions calibrate_opts;
  PlanCommandOptions plan_opts;
  BenchPlanOptions bench_plan_opts;
  BenchLayerOptions bench_layer_opts;
  LessonOptions lesson_opts;

  CLI::App *ref = nullptr, *compare_app = nullptr, *run_app = nullptr;
  CLI::App *bench_kernels = nullptr, *bench_comm = nullptr, *bench_trace = nullptr, *bench_model = nullptr;
  CLI::App *stats_app = nullptr, *model_app = nullptr, *validate_app = nullptr, *plan_app = nullptr, *calibrate_app = nullptr;
  CLI::App *bench_plan = nullptr, *bench_layer = nullptr, *lesson_app = nullptr;
};

// Adds the subcommands to `app`, in the order --help lists them.
void add_commands(CLI::App& app, Commands& c) {
  c.ref = add_reference(app, c.ref_opts);
  std::tie(c.compare_app, c.run_app) = add_compare_and_run(app, c.cmp_opts);

  c.bench_trace_opts.cfg.s = 1024;  // a run of a few seconds on 2 cores
  std::tie(c.bench_kernels, c.bench_comm, c.bench_trace, c.bench_model) =
      add_bench(app, c.bench_opts, c.bench_comm_opts, c.bench_trace_opts, c.bench_model_opts);
  add_bench_cuda(*app.get_subcommand("bench"), c.bench_cuda_opts);

  c.stats_app = add_trace_stats(app, c.stats_opts);
  c.model_app = add_model(app, c.model_opts);
  c.validate_app = add_validate(app, c.validate_opts);
  c.calibrate_app = add_calibrate(app, c.calibrate_opts);

  c.plan_app = add_plan(app, c.plan_opts);
  c.bench_plan = add_bench_plan(*app.get_subcommand("bench"), c.bench_plan_opts);
  c.bench_layer = add_bench_layer(*app.get_subcommand("bench"), c.bench_layer_opts);

  c.lesson_app = add_lesson(app, c.lesson_opts);
  strict_values(app);
}

// CLI11 answers a misspelt subcommand with "A subcommand is required"; this names it instead.
// True when argv names a subcommand that does not exist (it has said so on stderr).
bool refused_unknown_subcommand(CLI::App& app, int argc, char** argv) {
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
      return true;
    }
    level = next;
  }
  return false;
}

// The environment's configuration, refused here, before any work, as a flag's would be (exit 2):
// a bad RINGSIDE_CPU_ISA or RINGSIDE_OPENBLAS_FALLBACK. Under mpirun only some ranks may have it, and no rank has joined MPI
// yet to agree on who says it, so each says it naming itself ("rank 1: RINGSIDE_CPU_ISA: ...").
void check_environment() {
  try {
    kernels::cpu::active_cpu_isa();
    kernels::cpu::check_blas_environment();
  } catch (const ConfigError& e) {
    const int rank = mpirun_rank();
    if (rank < 0) throw;
    throw ConfigError(detail::concat("rank ", rank, ": ", e.what()));
  }
}

// Runs the subcommand the command line named (after parsing) and returns its exit status.
// `argv0` is how this command was called: the lesson looks for the viewer beside it.
int run_parsed(Commands& c, CLI::App& app, const char* argv0) {
  int rc = 0;
  if (c.ref->parsed()) {
    const ReferenceOptions& o = c.ref_opts;
    rc = reference_command(o.cfg, o.choices, o.dtype, o.check, o.dump_dir);
  }
  if (c.compare_app->parsed()) rc = compare_command(c.cmp_opts);
  if (c.run_app->parsed()) rc = run_command(c.cmp_opts);
  if (c.bench_kernels->parsed()) rc = bench_kernels(c.bench_opts);
  if (c.bench_comm->parsed()) rc = bench_comm(c.bench_comm_opts);
  if (c.bench_trace->parsed()) rc = bench_trace(c.bench_trace_opts);
  if (c.bench_model->parsed()) rc = bench_model(c.bench_model_opts);
  if (app.get_subcommand("bench")->get_subcommand("cuda")->parsed()) rc = bench_cuda(c.bench_cuda_opts);
  if (c.stats_app->parsed()) rc = trace_stats_command(c.stats_opts);
  if (c.model_app->parsed()) rc = model_command(c.model_opts);
  if (c.validate_app->parsed()) rc = validate_command(c.validate_opts);
  if (c.calibrate_app->parsed()) rc = calibrate_command(c.calibrate_opts);
  if (c.plan_app->parsed()) rc = plan_command(c.plan_opts);
  if (c.bench_plan->parsed()) rc = bench_plan(c.bench_plan_opts);
  if (c.bench_layer->parsed()) rc = bench_layer(c.bench_layer_opts);
  if (c.lesson_app->parsed()) {
    // The viewer is built beside this command; say how to call it from here.
    const std::filesystem::path viewer = std::filesystem::path(argv0).parent_path() / "ringside-viewer";
    rc = lesson_command(c.lesson_opts, std::filesystem::exists(viewer) ? viewer.string() : "ringside-viewer");
  }
  return rc;
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
  limit_malloc_arenas();
  CLI::App app{"ringside: sequence parallelism for one transformer layer, checked and made visible"};
  app.require_subcommand(1);
  app.set_version_flag("--version", std::string("ringside ") + RINGSIDE_VERSION +
#ifdef RINGSIDE_HAVE_CUDA
                                        " (CUDA backend built)"
#else
                                        " (CPU only)"
#endif
  );
  cli::Commands commands;
  cli::add_commands(app, commands);

  try {
    if (cli::refused_unknown_subcommand(app, argc, argv)) return 2;
    cli::refuse_flag_values(app, argc, argv);
    app.parse(argc, argv);
    cli::check_environment();
    const int rc = cli::run_parsed(commands, app, argv[0]);
    mpi_finalize();
    return rc;
  } catch (const CLI::ParseError& e) {
    // --help and --version exit 0; a flag the parser refuses is a usage error, exit 2.
    return app.exit(e) == 0 ? 0 : 2;
  } catch (const ConfigError& e) {
    // Every rank rejects a bad configuration alike, before any communication (cli/agree.cpp):
    // one rank says it, rank 0 unless another rank found it.
    std::fflush(stdout);  // what was printed first, so that the error starts a line of its own where both are one stream
    if (!mpi_active() || mpi_world().rank() == e.reporting_rank) std::fprintf(stderr, "ringside: %s\n", e.what());
    mpi_finalize();
    return 2;
  } catch (const std::bad_alloc&) {
    if (mpi_active()) mpi_abort(kOutOfMemory);
    std::fflush(stdout);
    std::fprintf(stderr, "ringside: error: %s\n", kOutOfMemory);
    return 1;
  } catch (const std::exception& e) {
    // A rank failing mid-run under MPI brings the job down, naming itself.
    if (mpi_active()) mpi_abort(e.what());
    std::fflush(stdout);
    std::fprintf(stderr, "ringside: error: %s\n", e.what());
    return 1;
  }
}

// Where a compare or run job's ranks run: local threads, or one process per rank under mpirun
// (MPI or NCCL), with every check agreed on by every rank before the job's first communication;
// and what its trace says about it.
#include <unistd.h>

#include <cstdio>

#include "cli/compare.h"
#include "comm/trace_exchange.h"
#include "core/gpu.h"
#include "run/phase_meter.h"

namespace ringside::cli {

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
    Communicator& world = mpi_world(o.timeout_s);
    s.where.world = &world;
    world.timeout_s = o.timeout_s;
    s.P = world.size();
    s.root = world.rank() == 0;
    check_ranks_agree(world, command, o.given);
  } else {
    s.P = o.ranks;
  }
  checked_on_every_rank(s.where.world, [&] {
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
    s.modeling = o.modeling.checked({s.hw});
    checks(s);
  });
  if (s.mpi) {
    s.where.clock = trace::align_clocks(*s.where.world);
    s.where.run_world = nccl ? &nccl_world() : s.where.world;
    s.where.run_world->timeout_s = o.timeout_s;
  } else {
    s.where.clock.origin_ns = trace::Clock::steady_now_ns();
    LocalOptions& local = s.where.local;
    local.timeout_s = o.timeout_s;
    local.bandwidth_gbps = o.link_gbps;
    local.latency_us = o.link_latency_us;
    local.nccl = nccl;
  }
  return s;
}

std::function<void(const std::string&)> progress(const Setup& s, const char* command) {
  const bool show = s.root && isatty(STDERR_FILENO);
  return [show, command](const std::string& m) {
    if (show) std::fprintf(stderr, "ringside %s: %s\n", command, m.c_str());
  };
}

// What the ranks are, for the headers.
const char* ranks_are(const Setup& s) {
  if (s.mpi) return s.device == Device::cuda ? " (one process per GPU)" : " (one process per rank)";
  if (s.backend == "nccl") return " (one thread per GPU)";
  return s.device == Device::cuda ? " (virtual ranks on GPU 0: a compute and a comm stream each)"
                                  : " (threads, one comm thread each)";
}

// The run's description in the trace's otherData.
nlohmann::json config_of(const CompareOptions& o) { return config_json(o.cfg, o.choices.applied_to({})); }

trace::TraceData trace_head(const char* producer, const CompareOptions& opts, const Setup& s) {
  trace::TraceData t;
  trace::RunInfo& run = t.run;
  run.producer = producer;
  run.config = config_of(opts);
  run.layout = to_string(opts.choices.applied_to({}).requested_layout(opts.cfg));
  run.ranks = s.P;
  run.backend = s.backend;
  run.dtype = "float32";
  run.device = to_string(s.device);
  run.clock = s.mpi ? "steady_clock per process, aligned to rank 0 by ping-pong (clock_offset_ns, clock_uncertainty_ns per process)"
                    : "steady_clock, one process";
  if (s.device == Device::cuda) {
    t.other["gpu"] = gpu::describe(0);
    t.other["gpu_clock"] = "ops, waits and transfers timed by CUDA events on each rank's streams, anchored to steady_clock";
  }
  if (!s.mpi && (s.where.local.bandwidth_gbps > 0 || s.where.local.latency_us > 0))
    t.other["link"] = {{"bandwidth_GB_per_s", s.where.local.bandwidth_gbps}, {"latency_us", s.where.local.latency_us}};
  return t;
}

}  // namespace ringside::cli

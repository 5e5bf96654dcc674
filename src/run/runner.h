// The runner: one rank's run of a plan (run_rank), and the ways to start every rank of it on
// local threads, on one GPU each through NCCL, under mpirun, or as the model's dry run. It draws
// each rank's inputs, measures the two phases (run/phase_meter.h), injects the tests' failures,
// traces, and gathers the results into the reference's layout for the checks (check/).
#pragma once
#include <functional>
#include <memory>
#include <vector>

#include "comm/communicator.h"
#include "core/memory_tracker.h"
#include "layer/weights.h"
#include "parallel/attention.h"
#include "parallel/run_plan.h"
#include "trace/trace.h"

namespace ringside {

/// One rank's run of a plan: the gathered results (identical on every rank) and what the rank
/// measured about itself.
struct RunRecord {
  double attention_flops = 0;     ///< forward attention FLOPs this rank computed
  std::vector<StepRecord> steps;  ///< per ring step, forward then backward (configurations with a ring)
  Tensor out, dx;      ///< [b, s, h], full
  LayerWeights grads;  ///< full shapes, as the reference's
  int64_t peak_saved = 0;  ///< peak bytes of MemCategory::activations on this rank
  int64_t peak_bytes = 0;  ///< peak bytes of all categories on this rank during forward + backward
  int64_t peak_comm_forward = 0;  ///< peak bytes of MemCategory::comm in the forward (transfer buffers: the
                                  ///< ring's blocks in flight, all_gather's whole K/V)
  CommStats forward, backward;  ///< bytes this rank moved in each phase
  double forward_s = 0, backward_s = 0;
  LayerWeights local_grads;  ///< this rank's own gradient shards, before any gathering
  /// With RankOptions::keep_partial_grads and TP (T > 1): the sequence-parallel parameters'
  /// gradients before their all-reduce over TP (parallel/parallel_layer.h).
  LayerWeights partial_grads;
};

/// What a rank's run keeps beyond the results.
struct RankOptions {
  bool keep_partial_grads = false;  ///< lesson 2's un-reduced gradients (RunRecord::partial_grads)
  bool grad_sync = true;            ///< LayerOptions::grad_sync
  bool overlap_grad_reduce = false; ///< LayerOptions::overlap_grad_reduce (the CP all-reduce in buckets)
};

/// Rank world.rank() of world.size() (= plan.P) of the plan, forward and backward, in dtype dt,
/// on inputs drawn from the layer's seed exactly as the reference draws them, with its
/// allocations counted in `tracker`. Traces to the current tracer, if any. Collective over world.
RunRecord run_rank(const RunPlan& plan, Communicator& world, Backend& be, MemoryTracker& tracker, DType dt,
                   const RankOptions& opts = {});

/// A GPU rank's record with every tensor copied to the host (same tags): call on the rank.
RunRecord results_to_host(RunRecord r);

/// Where a traced run puts its timeline: every rank records on `clock` and its trace is
/// appended to `out` (rank order).
struct TraceSink {
  TraceSink(trace::Clock c, std::vector<trace::RankTrace>* o) : clock(c), out(o) {}
  trace::Clock clock;
  std::vector<trace::RankTrace>* out = nullptr;
  /// Live: every flush_every_s seconds while the ranks run, called (from another thread) with
  /// every rank's trace so far, so that a viewer can follow the run.
  std::function<void(const std::vector<trace::RankTrace>&)> flush;
  double flush_every_s = 1.0;
};

/// Runs the plan on plan.P local ranks (threads, the local communicator), with every rank's
/// allocations counted in `tracker`. Returns every rank's record, in rank order.
/// With a sink, every rank is traced (ops, transfers, waits, memory) from its start to the end
/// of its backward. With opts.dry_run, a dry run: no math and no memory, only the schedule
/// (the trace) and the memory tracker's counts; the records' tensors hold no data.
/// On plan.device cuda, the ranks are GPU ranks (virtual ranks on GPU 0, or one GPU each
/// with opts.nccl), on the CUDA backend, f32 only (ConfigError otherwise); their results come
/// back to the host, and their traced ops and waits are timed by CUDA events on the ranks'
/// streams. A failing rank fails the whole run (ringside::Error naming the rank).
std::vector<RunRecord> run_local_ranks(const RunPlan& plan, DType dt, MemoryTracker& tracker, const LocalOptions& opts = {},
                                       const TraceSink* sink = nullptr, const RankOptions& rank_opts = {});

/// What every rank measured, as one row: the numbers a check compares with the formulas.
struct RankNumbers {
  double peak_saved, fwd_sent, bwd_sent, fwd_recv, bwd_recv, fwd_s, bwd_s, attention_flops, peak_bytes, peak_comm;
};
RankNumbers numbers_of(const RunRecord& r);

/// A whole job's run of one plan, as the root rank sees it.
struct JobRecord {
  RunPlan plan;
  std::unique_ptr<MemoryTracker> tracker = std::make_unique<MemoryTracker>();  ///< outlives the tensors it counts
  RunRecord root;                              ///< rank 0's (the gathered tensors are the same on every rank)
  std::vector<RankNumbers> ranks;              ///< every rank's
  std::vector<std::vector<StepRecord>> steps;  ///< per rank on local ranks; this process's rank's under mpirun
};

/// Where a job's ranks run: local threads (world null), or this process's rank under mpirun.
struct JobWorld {
  Communicator* world = nullptr;      ///< under mpirun: MPI, for the job's own messages (host memory)
  Communicator* run_world = nullptr;  ///< under mpirun: what the layer runs on (MPI, or NCCL)
  trace::Clock clock;                 ///< the timeline's shared clock
  LocalOptions local;                 ///< local threads: how they run
};

/// Runs the plan in f32 on every rank of `where`, traced: the ranks' timelines are appended to
/// `traces` (on the root, in rank order; `live` is the local ranks' live flush, if any). Under
/// mpirun this is collective over where.world: each process runs its rank, and the traces and
/// every rank's numbers are gathered.
JobRecord run_job(const RunPlan& plan, const JobWorld& where, std::vector<trace::RankTrace>& traces,
                  const std::function<void(const std::vector<trace::RankTrace>&)>& live = {});

}  // namespace ringside

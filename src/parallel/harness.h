// The P-rank harness: runs a strategy on P local ranks (threads), traced or not, measures its
// phases, and injects failures for the tests.
#pragma once
#include <chrono>
#include <functional>
#include <vector>

#include "parallel/strategy.h"
#include "trace/trace.h"

namespace ringside {

/// A GPU rank's result with every tensor copied to the host (same tags): call on the rank.
RankResult results_to_host(RankResult r);

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

/// Runs `st` forward and backward on P local ranks (threads, the local communicator), with
/// every rank's allocations counted in `tracker`. Returns every rank's result, in rank order.
/// With a sink, every rank is traced (ops, transfers, waits, memory) from its start to the end
/// of its backward. With opts.dry_run, a dry run: no math and no memory, only the schedule
/// (the trace) and the memory tracker's counts; the results' tensors hold no data.
/// With opts.device cuda, the ranks are GPU ranks (virtual ranks on GPU 0, or one GPU each
/// with opts.nccl), on the CUDA backend, f32 only; their results come back to the host, and
/// their traced ops and waits are timed by CUDA events on the ranks' streams.
/// A failing rank fails the whole run (ringside::Error naming the rank).
std::vector<RankResult> run_strategy_local(const Strategy& st, const LayerConfig& cfg, int P, DType dt,
                                           MemoryTracker& tracker, const LocalOptions& opts = {},
                                           const TraceSink* sink = nullptr);

/// Measures a strategy's two phases: construct it where the forward starts (it first waits at
/// a barrier for every rank, so that the ranks start the layer together), call
/// forward_done() and backward_done() at their ends; fill() writes the bytes, seconds, the
/// peak of saved activations and the peak of all memory into a RankResult. The memory peaks
/// are this rank's from construction on. When tracing, the phases are `phase` events on the
/// compute stream, and tracing stops at backward_done() (what follows is not the layer).
class PhaseMeter {
 public:
  PhaseMeter(Communicator& comm, MemoryTracker& tracker);
  void forward_done();
  void backward_done();
  void fill(RankResult& r) const;

 private:
  void end_phase(const char* name, int64_t start_ns, int64_t start_order, const char* next);
  Communicator& comm_;
  MemoryTracker& tracker_;
  CommStats s0_, s1_, s2_;
  std::chrono::steady_clock::time_point t0_, t1_, t2_;
  int64_t trace_t0_ = 0, trace_t1_ = 0;
  int64_t order0_ = -1, order1_ = -1;  // the phases' starts in the rank's program order
  int64_t peak_comm_forward_ = 0;
};

/// Test hook: when RINGSIDE_INJECT_FAILURE is "RANK:PHASE" (PHASE forward or backward), that
/// rank throws at the start of that phase, to show that a failure takes the job down.
void maybe_inject_failure(int rank, int P, const char* phase);
/// Throws ConfigError, before any work, when RINGSIDE_INJECT_FAILURE is set but malformed (or
/// names a rank outside [0, P)): a bad spec is the command's error, not a rank's failure.
void check_failure_injection(int P);

}  // namespace ringside

// A rank's two phases, measured: bytes moved, seconds, memory peaks, and the phase events of
// its timeline; and the tests' hook that makes a rank fail at the start of a phase.
#pragma once
#include <chrono>
#include <cstdint>

#include "comm/communicator.h"
#include "core/memory_tracker.h"

namespace ringside {

struct RunRecord;

/// Measures a rank's two phases: construct it where the forward starts (it first waits at a
/// barrier for every rank, so that the ranks start the layer together), call forward_done()
/// and backward_done() at their ends; fill() writes the bytes, seconds, the peak of saved
/// activations and the peak of all memory into a RunRecord. The memory peaks are this rank's
/// from construction on. When tracing, the phases are `phase` events on the compute stream,
/// and tracing stops at backward_done() (what follows is not the layer).
class PhaseMeter {
 public:
  PhaseMeter(Communicator& comm, MemoryTracker& tracker);
  void forward_done();
  void backward_done();
  void fill(RunRecord& r) const;

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

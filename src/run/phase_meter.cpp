#include "run/phase_meter.h"

#include <cstdlib>
#include <regex>

#include "core/error.h"
#include "core/gpu.h"
#include "run/runner.h"
#include "trace/trace.h"

namespace ringside {

// The ranks reach their forward at different times: each draws its inputs and weights, and
// threads share the cores. A barrier first lines them up, as the synchronising all-reduce of
// the previous training step would, so that times and the timeline show the layer, not the
// setup's skew. Its bytes fall before the forward's snapshot and are not the layer's.
static CommStats after_barrier(Communicator& comm) {
  gpu::synchronize();
  comm.barrier();
  return comm.stats();
}

// On a GPU rank the host runs ahead of its stream: phase boundaries wait for the stream, so
// that phase times are the GPU's and the timeline's phases enclose their kernels.
PhaseMeter::PhaseMeter(Communicator& comm, MemoryTracker& tracker)
    : comm_(comm), tracker_(tracker), s0_(after_barrier(comm)), t0_(std::chrono::steady_clock::now()) {
  tracker.reset_peaks(comm.rank());
  if (trace::Tracer* t = trace::current_tracer()) {
    t->phase = "forward";
    trace_t0_ = t->clock().now();
    order0_ = t->tick();
  }
}

void PhaseMeter::end_phase(const char* name, int64_t start_ns, int64_t start_order, const char* next) {
  trace::Tracer* t = trace::current_tracer();
  if (!t) return;
  t->begin_sublayer(nullptr);  // the phase's last sublayer ends with it
  trace::Event e;
  e.name = name, e.kind = trace::Kind::phase, e.phase = name;
  const int64_t end_ns = t->clock().now();
  e.ts_ns = start_ns;
  e.dur_ns = end_ns - start_ns;
  e.order = start_order, e.end_order = t->tick();
  t->record(std::move(e));
  t->phase = next;
  trace_t1_ = end_ns;
  order1_ = t->tick();  // the next phase begins
}

void PhaseMeter::forward_done() {
  gpu::synchronize();
  peak_comm_forward_ = tracker_.peak(comm_.rank(), MemCategory::comm);
  s1_ = comm_.stats(), t1_ = std::chrono::steady_clock::now();
  end_phase("forward", trace_t0_, order0_, "backward");
}

void PhaseMeter::backward_done() {
  gpu::synchronize();
  s2_ = comm_.stats(), t2_ = std::chrono::steady_clock::now();
  end_phase("backward", trace_t1_, order1_, "");
  if (trace::Tracer* t = trace::current_tracer()) t->stop();
}

void PhaseMeter::fill(RunRecord& r) const {
  const MemoryTracker& tracker = tracker_;
  auto diff = [](const CommStats& a, const CommStats& b) {
    return CommStats{b.bytes_sent - a.bytes_sent, b.bytes_received - a.bytes_received, b.messages_sent - a.messages_sent};
  };
  r.forward = diff(s0_, s1_);
  r.backward = diff(s1_, s2_);
  r.forward_s = std::chrono::duration<double>(t1_ - t0_).count();
  r.backward_s = std::chrono::duration<double>(t2_ - t1_).count();
  r.peak_saved = tracker.peak(comm_.rank(), MemCategory::activations);
  r.peak_bytes = tracker.stats(comm_.rank()).peak_total;
  r.peak_comm_forward = peak_comm_forward_;
}

namespace {

// RINGSIDE_INJECT_FAILURE as (rank, phase), or rank -1 when unset. A hook that silently never
// fires would make a failure test pass for the wrong reason: a malformed spec is a ConfigError.
std::pair<int, std::string> failure_injection(int P) {
  const char* spec = std::getenv("RINGSIDE_INJECT_FAILURE");
  if (!spec) return {-1, ""};
  static const std::regex form(R"(([0-9]{1,9}):(forward|backward))");
  std::cmatch m;
  if (!std::regex_match(spec, m, form) || std::stoi(m[1]) >= P)
    throw ConfigError(detail::concat("RINGSIDE_INJECT_FAILURE='", spec,
                                     "' must be RANK:forward or RANK:backward with 0 <= RANK < ", P));
  return {std::stoi(m[1]), m[2]};
}

}  // namespace

void check_failure_injection(int P) { failure_injection(P); }

void maybe_inject_failure(int rank, int P, const char* phase) {
  const auto [r, p] = failure_injection(P);
  if (r == rank && p == phase)
    throw Error(detail::concat("injected failure at the start of the ", phase, " (RINGSIDE_INJECT_FAILURE)"));
}

}  // namespace ringside

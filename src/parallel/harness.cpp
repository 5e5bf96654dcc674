#include "parallel/harness.h"

#include <condition_variable>
#include <cstdlib>
#include <mutex>
#include <optional>
#include <thread>
#include <cstring>
#include <regex>
#include <sstream>

#include "core/gpu.h"
#include "device/traced_backend.h"
#include "kernels/philox.h"

namespace ringside {

RankResult results_to_host(RankResult r) {
  auto host = [](Tensor& t) {
    if (t.defined() && t.device() == Device::cuda) t = t.copy_to(Device::cpu, t.tag());
  };
  host(r.out), host(r.dx);
  for (LayerWeights* w : {&r.grads, &r.local_grads, &r.partial_grads})
    for (auto& [name, t] : w->named()) host(*t);
  return r;
}

std::vector<RankResult> run_strategy_local(const Strategy& st, const LayerConfig& cfg, int P, DType dt,
                                           MemoryTracker& tracker, const LocalOptions& opts, const TraceSink* sink) {
  st.validate(cfg, P);  // one clear error before any thread starts
  check_failure_injection(P);
  std::vector<RankResult> results(P);
  std::vector<trace::RankTrace> traces(P);
  RS_CHECK(!(opts.dry_run && opts.device == Device::cuda), "a dry run runs on the CPU");
  RS_CHECK(opts.device == Device::cuda || !opts.nccl, "--backend nccl needs --device cuda");
  if (opts.device == Device::cuda && dt != DType::f32)
    throw ConfigError("--device cuda computes in f32 (the reference in f64 checks it)");
  auto be = opts.dry_run ? make_dry_backend() : make_backend(opts.device);
  if (sink) be = trace::make_traced_backend(std::move(be));
  // Live flushing: a thread that snapshots the ranks' tracers while they run.
  std::mutex live_mu;
  std::condition_variable live_cv;
  bool finished = false;
  std::vector<const trace::Tracer*> live(P, nullptr);
  std::vector<bool> done(P, false);  // the rank's whole trace is in traces[rank]
  std::thread flusher;
  if (sink && sink->flush)
    flusher = std::thread([&] {
      std::unique_lock lock(live_mu);
      while (!live_cv.wait_for(lock, std::chrono::duration<double>(sink->flush_every_s), [&] { return finished; })) {
        std::vector<trace::RankTrace> now;  // a rank that has finished stays in the copy, whole
        for (int r = 0; r < P; ++r)
          if (live[size_t(r)]) now.push_back(live[size_t(r)]->snapshot());
          else if (done[size_t(r)]) now.push_back(traces[size_t(r)]);
        try {
          sink->flush(now);
        } catch (const std::exception&) {
          // A live copy that cannot be written is not the run's failure; the final write reports it.
        }
      }
    });
  auto stop_flusher = [&] {
    if (!flusher.joinable()) return;
    {
      std::lock_guard lock(live_mu);
      finished = true;
    }
    live_cv.notify_all();
    flusher.join();
  };
  // On a GPU the results come back to the host, where the reference checks them.
  auto run_rank = [&](Communicator& comm) {
    RankResult res = st.run(cfg, comm, *be, tracker, dt);
    if (opts.device == Device::cuda) res = results_to_host(std::move(res));
    results[comm.rank()] = std::move(res);
  };
  try {
    (opts.nccl ? run_nccl : run_local)(
        P,
        [&](Communicator& comm) {
          std::optional<DryRun> dry;  // tensors without memory, data moved nowhere
          if (opts.dry_run) dry.emplace();
          if (!sink) {
            run_rank(comm);
            return;
          }
          trace::Tracer tracer(st.name, comm.rank(), sink->clock);
          if (opts.device == Device::cuda) tracer.set_device_clock(trace::make_gpu_clock());  // kernels' own times
          struct Registration {  // the flusher sees this rank's tracer only while it lives
            std::mutex& mu;
            const trace::Tracer*& slot;
            Registration(std::mutex& m, const trace::Tracer*& s, const trace::Tracer* t) : mu(m), slot(s) {
              std::lock_guard lock(mu);
              slot = t;
            }
            ~Registration() {
              std::lock_guard lock(mu);
              slot = nullptr;
            }
          } registration(live_mu, live[comm.rank()], &tracer);
          trace::TraceScope scope(&tracer);
          run_rank(comm);
          std::lock_guard lock(live_mu);  // from tracer to final trace at once: the live copy never shrinks
          traces[comm.rank()] = tracer.take();
          live[comm.rank()] = nullptr, done[size_t(comm.rank())] = true;
        },
        opts);
  } catch (...) {
    stop_flusher();
    throw;
  }
  stop_flusher();
  if (sink)
    for (auto& t : traces) sink->out->push_back(std::move(t));
  return results;
}

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
  e.name = name, e.cat = "phase", e.phase = name;
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

void PhaseMeter::fill(RankResult& r) const {
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

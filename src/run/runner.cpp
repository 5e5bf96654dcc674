#include "run/runner.h"

#include <condition_variable>
#include <mutex>
#include <optional>
#include <system_error>
#include <thread>

#include "comm/tensor_comm.h"
#include "comm/trace_exchange.h"
#include "core/error.h"
#include "core/gpu.h"
#include "device/traced_backend.h"
#include "kernels/philox.h"
#include "layer/tokenwise.h"
#include "parallel/parallel_layer.h"
#include "run/phase_meter.h"

namespace ringside {

namespace {

// This rank's inputs: its share of the weights, and the reference's inputs at its tokens, the
// slots of the padded sequence (layer/packing.h) whose mask, RoPE and dropout never see a local
// index (zero at padding, so that padding adds nothing to any gradient).
LayerInputs draw_inputs(const RunPlan& plan, const ProcessGroups& groups, const RankContext& ctx, int rank) {
  const LayerConfig& cfg = plan.layer;
  const Packing& packing = *plan.packing;
  const std::vector<int64_t> own_tokens = packing.real_of(plan.rank_positions(rank));
  std::vector<int64_t> dropout_keys = own_tokens;  // the global token index (padding: 0, its output is dropped)
  for (int64_t& key : dropout_keys) key = key < 0 ? 0 : key;
  LayerInputs in;
  in.pos = {dropout_keys, packing.rope_positions(plan.cp_positions(groups.at.c))};
  in.w = tp_shard_weights(cfg, plan.par.tp, groups.at.t, ctx.dt, {rank, MemCategory::weights, ctx.ws.tracker});
  in.x = random_input_tokens(cfg, static_cast<uint32_t>(RngSite::input_x), own_tokens, ctx.dt, ctx.act);
  in.dout = random_input_tokens(cfg, static_cast<uint32_t>(RngSite::input_dout), own_tokens, ctx.dt, ctx.ws);
  return in;
}

// Every rank's tokens [b, n, ...] gathered into the reference's layout [b, s, ...]: the slots
// in sequence order, padding dropped.
Tensor gather_real_tokens(const RunPlan& plan, Communicator& world, const Tensor& t, AllocTag tag) {
  const Tensor all = gather_tokens(world, t, [&](int r) { return plan.rank_positions(r); }, plan.packing->S, tag);
  return plan.packing->identity() ? all : take_tokens(all, plan.packing->real_slots(), tag);
}

}  // namespace

RunRecord run_rank(const RunPlan& plan, Communicator& world, Backend& be, MemoryTracker& tracker, DType dt,
                   const RankOptions& opts) {
  RS_CHECK(world.size() == plan.P, "run_rank: the plan is for ", plan.P, " ranks, the communicator has ", world.size());
  const int rank = world.rank();
  world.tracker = &tracker;
  const ProcessGroups groups(world, plan.par);
  const RankContext ctx{be, dt, {rank, MemCategory::workspace, &tracker}, {rank, MemCategory::activations, &tracker},
                        {rank, MemCategory::comm, &tracker}};
  const LayerInputs in = draw_inputs(plan, groups, ctx, rank);

  std::optional<PhaseMeter> meter;
  LayerOptions layer_opts;
  layer_opts.keep_partial_grads = opts.keep_partial_grads;
  layer_opts.grad_sync = opts.grad_sync;
  layer_opts.overlap_grad_reduce = opts.overlap_grad_reduce;
  layer_opts.forward_starts = [&] {
    meter.emplace(world, tracker);
    maybe_inject_failure(rank, plan.P, "forward");
  };
  layer_opts.forward_done = [&] {
    meter->forward_done();
    maybe_inject_failure(rank, plan.P, "backward");
  };
  LocalLayer local = parallel_layer(plan, groups, in, ctx, layer_opts);
  meter->backward_done();

  RunRecord rec;
  meter->fill(rec);
  rec.attention_flops = local.attention_flops;
  rec.steps = std::move(local.steps);
  // The results, gathered on every rank in the reference's layout (outside the timing).
  rec.out = gather_real_tokens(plan, world, local.out, ctx.ws);
  rec.dx = gather_real_tokens(plan, world, local.dx, ctx.ws);
  rec.grads = gather_tp_grads(plan.layer, *groups.tp, local.weight_grads, ctx.ws);
  rec.local_grads = std::move(local.weight_grads);
  rec.partial_grads = std::move(local.partial_grads);
  return rec;
}

RunRecord results_to_host(RunRecord r) {
  auto host = [](Tensor& t) {
    if (t.defined() && t.device() == Device::cuda) t = t.copy_to(Device::cpu, t.tag());
  };
  host(r.out), host(r.dx);
  for (LayerWeights* w : {&r.grads, &r.local_grads, &r.partial_grads})
    for (auto& [name, t] : w->named()) host(*t);
  return r;
}

std::vector<RunRecord> run_local_ranks(const RunPlan& plan, DType dt, MemoryTracker& tracker, const LocalOptions& given,
                                       const TraceSink* sink, const RankOptions& rank_opts) {
  const int P = plan.P;
  check_failure_injection(P);  // one clear error before any thread starts
  LocalOptions opts = given;
  opts.device = plan.device;
  std::vector<RunRecord> results(P);
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
  if (sink && sink->flush) {
    try {
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
    } catch (const std::system_error& e) {
      throw Error(detail::concat("could not start the trace's flusher thread: ", e.what(),
                                 " (a limit on threads or address space)"));
    }
  }
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
  auto run_one = [&](Communicator& comm) {
    RunRecord res = run_rank(plan, comm, *be, tracker, dt, rank_opts);
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
            run_one(comm);
            return;
          }
          trace::Tracer tracer(plan.name, comm.rank(), sink->clock);
          tracer.set_tile_map(plan.tile_map());
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
          run_one(comm);
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

RankNumbers numbers_of(const RunRecord& r) {
  return {double(r.peak_saved),         double(r.forward.bytes_sent),    double(r.backward.bytes_sent),
          double(r.forward.bytes_received), double(r.backward.bytes_received), r.forward_s, r.backward_s,
          r.attention_flops, double(r.peak_bytes), double(r.peak_comm_forward)};
}

JobRecord run_job(const RunPlan& plan, const JobWorld& where, std::vector<trace::RankTrace>& traces,
                  const std::function<void(const std::vector<trace::RankTrace>&)>& live) {
  JobRecord job;
  job.plan = plan;
  MemoryTracker& tracker = *job.tracker;
  if (!where.world) {
    TraceSink sink{where.clock, &traces};
    sink.flush = live;
    std::vector<RunRecord> all = run_local_ranks(plan, DType::f32, tracker, where.local, &sink);
    for (const RunRecord& r : all) job.ranks.push_back(numbers_of(r)), job.steps.push_back(r.steps);
    job.root = std::move(all[0]);
    return job;
  }
  Communicator& world = *where.world;
  auto be = trace::make_traced_backend(make_backend(plan.device));
  trace::Tracer tracer(plan.name, world.rank(), where.clock);
  tracer.set_tile_map(plan.tile_map());
  std::optional<gpu::Bind> bind;  // one process per GPU: this process's (as nccl_world takes it)
  if (plan.device == Device::cuda) {
    bind.emplace(world.rank() % gpu::device_count(), 0);
    tracer.set_device_clock(trace::make_gpu_clock());
  }
  {
    trace::TraceScope scope(&tracer);
    job.root = run_rank(plan, *where.run_world, *be, tracker, DType::f32);
    if (plan.device == Device::cuda) job.root = results_to_host(std::move(job.root));
  }
  for (trace::RankTrace& t : trace::gather_to_root(world, tracer.take())) traces.push_back(std::move(t));
  job.steps.push_back(job.root.steps);
  RankNumbers mine = numbers_of(job.root);
  job.ranks.resize(size_t(plan.P));
  constexpr int64_t kNumbers = sizeof(RankNumbers) / sizeof(double);
  world.all_gather(&mine, job.ranks.data(), std::vector<int64_t>(size_t(plan.P), kNumbers), DType::f64);
  return job;
}

}  // namespace ringside

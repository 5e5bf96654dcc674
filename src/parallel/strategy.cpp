#include "parallel/strategy.h"

#include <condition_variable>
#include <cstdlib>
#include <mutex>
#include <optional>
#include <thread>
#include <cstring>
#include <regex>
#include <sstream>

#include "device/gpu.h"
#include "kernels/philox.h"
#include "parallel/ring_attention.h"
#include "parallel/tp_sp.h"
#include "parallel/ulysses.h"

namespace ringside {

const std::vector<Strategy>& strategies() {
  static const std::vector<Strategy> all = {tp_sp_strategy(), ring_strategy(), ulysses_strategy()};
  return all;
}

const Strategy& find_strategy(const std::string& name) {
  std::string names;
  for (const Strategy& s : strategies()) {
    if (s.name == name) return s;
    names += (names.empty() ? "" : ", ") + s.name;
  }
  throw ConfigError("unknown strategy '" + name + "' (this build has: " + names + ")");
}

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
  std::thread flusher;
  if (sink && sink->flush)
    flusher = std::thread([&] {
      std::unique_lock lock(live_mu);
      while (!live_cv.wait_for(lock, std::chrono::duration<double>(sink->flush_every_s), [&] { return finished; })) {
        std::vector<trace::RankTrace> now;
        for (const trace::Tracer* t : live)
          if (t) now.push_back(t->snapshot());
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
          traces[comm.rank()] = tracer.take();
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

void qkv_forward(const LayerConfig& cfg, const LayerWeights& w, Backend& be, const Tensor& x,
                 const std::vector<int64_t>& pos, TokenwiseSaved& sv, Tensor& q, Tensor& k, Tensor& v, AllocTag act,
                 AllocTag qkv_tag, AllocTag ws) {
  const DType dt = x.dtype();
  const int64_t b = x.dim(0), n = x.dim(1), N = b * n;
  trace::sublayer("ln1");
  sv.x = x;
  sv.mean1 = be.empty({N}, dt, act), sv.rstd1 = be.empty({N}, dt, act), sv.h1 = be.empty({b, n, cfg.h}, dt, act);
  be.layernorm_forward(x, w.ln1_gamma, w.ln1_beta, cfg.eps, sv.h1, sv.mean1, sv.rstd1);
  trace::sublayer("qkv");
  q = be.empty({b, n, cfg.H, cfg.d()}, dt, qkv_tag);
  k = be.empty({b, n, cfg.Hkv, cfg.d()}, dt, qkv_tag);
  v = be.empty({b, n, cfg.Hkv, cfg.d()}, dt, qkv_tag);
  Tensor qkv = be.empty({b, n, cfg.qkv_width()}, dt, ws);
  be.matmul(sv.h1, false, w.qkv_weight, false, qkv);
  be.add_bias(qkv, w.qkv_bias);
  be.split_qkv(qkv, q, k, v);
  if (cfg.rope) {
    be.rope_forward(q, pos, cfg.rope_theta);
    be.rope_forward(k, pos, cfg.rope_theta);
  }
}

Tensor post_attention_forward(const LayerConfig& cfg, const LayerWeights& w, Backend& be, const Tensor& a,
                              const std::vector<int64_t>& pos, TokenwiseSaved& sv, AllocTag act, AllocTag ws) {
  const DType dt = a.dtype();
  const int64_t b = a.dim(0), n = a.dim(1), N = b * n, h = cfg.h;
  const uint32_t site1 = static_cast<uint32_t>(RngSite::dropout1), site2 = static_cast<uint32_t>(RngSite::dropout2);
  trace::sublayer("out_proj");
  Tensor y = be.empty({b, n, h}, dt, ws);
  be.matmul(a.reshape({b, n, cfg.H * cfg.d()}), false, w.o_weight, false, y);
  be.add_bias(y, w.o_bias);
  be.dropout_forward(y, y, pos, cfg.s, cfg.dropout, cfg.seed, site1);
  sv.x2 = be.empty({b, n, h}, dt, act);
  be.add(sv.x, y, sv.x2);
  trace::sublayer("ln2");
  sv.mean2 = be.empty({N}, dt, act), sv.rstd2 = be.empty({N}, dt, act), sv.h2 = be.empty({b, n, h}, dt, act);
  be.layernorm_forward(sv.x2, w.ln2_gamma, w.ln2_beta, cfg.eps, sv.h2, sv.mean2, sv.rstd2);
  trace::sublayer("mlp");
  sv.u = be.empty({b, n, cfg.f}, dt, act), sv.g = be.empty({b, n, cfg.f}, dt, act);
  be.matmul(sv.h2, false, w.fc1_weight, false, sv.u);
  be.add_bias(sv.u, w.fc1_bias);
  be.gelu_forward(sv.u, sv.g);
  Tensor z = y;
  be.matmul(sv.g, false, w.fc2_weight, false, z);
  be.add_bias(z, w.fc2_bias);
  be.dropout_forward(z, z, pos, cfg.s, cfg.dropout, cfg.seed, site2);
  Tensor out = be.empty({b, n, h}, dt, ws);
  be.add(sv.x2, z, out);
  return out;
}

Tensor post_attention_backward(const LayerConfig& cfg, const LayerWeights& w, Backend& be, const Tensor& a,
                               const Tensor& dout, const std::vector<int64_t>& pos, const TokenwiseSaved& sv,
                               LayerWeights& gw, Tensor& dx2, AllocTag ws) {
  const DType dt = dout.dtype();
  const int64_t b = dout.dim(0), n = dout.dim(1), h = cfg.h, Hd = cfg.H * cfg.d();
  const uint32_t site1 = static_cast<uint32_t>(RngSite::dropout1), site2 = static_cast<uint32_t>(RngSite::dropout2);
  trace::sublayer("mlp");
  Tensor dz = be.empty({b, n, h}, dt, ws);
  be.dropout_forward(dout, dz, pos, cfg.s, cfg.dropout, cfg.seed, site2);
  be.matmul(sv.g, true, dz, false, gw.fc2_weight, 1, 1);
  be.bias_grad(dz, gw.fc2_bias);
  Tensor du = be.empty({b, n, cfg.f}, dt, ws);
  be.matmul(dz, false, w.fc2_weight, true, du);
  be.gelu_backward(du, sv.u, du);
  be.matmul(sv.h2, true, du, false, gw.fc1_weight, 1, 1);
  be.bias_grad(du, gw.fc1_bias);
  Tensor dh2 = dz;
  be.matmul(du, false, w.fc1_weight, true, dh2);
  du = Tensor();
  trace::sublayer("ln2");
  dx2 = be.empty({b, n, h}, dt, ws);
  be.layernorm_backward(dh2, sv.x2, w.ln2_gamma, sv.mean2, sv.rstd2, dx2, gw.ln2_gamma, gw.ln2_beta);
  be.add(dx2, dout, dx2);
  trace::sublayer("out_proj");
  Tensor dy = dh2;
  be.dropout_forward(dx2, dy, pos, cfg.s, cfg.dropout, cfg.seed, site1);
  be.matmul(a.reshape({b, n, Hd}), true, dy, false, gw.o_weight, 1, 1);
  be.bias_grad(dy, gw.o_bias);
  Tensor da = be.empty({b, n, Hd}, dt, ws);
  be.matmul(dy, false, w.o_weight, true, da);
  return da.reshape({b, n, cfg.H, cfg.d()});
}

Tensor qkv_backward(const LayerConfig& cfg, const LayerWeights& w, Backend& be, Tensor& dq, Tensor& dk, const Tensor& dv,
                    const std::vector<int64_t>& pos, const TokenwiseSaved& sv, const Tensor& dx2, LayerWeights& gw,
                    AllocTag ws) {
  const DType dt = dq.dtype();
  const int64_t b = dq.dim(0), n = dq.dim(1);
  trace::sublayer("qkv");
  if (cfg.rope) {
    be.rope_backward(dq, pos, cfg.rope_theta);
    be.rope_backward(dk, pos, cfg.rope_theta);
  }
  Tensor dqkv = be.empty({b, n, cfg.qkv_width()}, dt, ws);
  be.merge_qkv(dq, dk, dv, dqkv);
  be.matmul(sv.h1, true, dqkv, false, gw.qkv_weight, 1, 1);
  be.bias_grad(dqkv, gw.qkv_bias);
  Tensor dh1 = be.empty({b, n, cfg.h}, dt, ws);
  be.matmul(dqkv, false, w.qkv_weight, true, dh1);
  trace::sublayer("ln1");
  Tensor dx = be.empty({b, n, cfg.h}, dt, ws);
  be.layernorm_backward(dh1, sv.x, w.ln1_gamma, sv.mean1, sv.rstd1, dx, gw.ln1_gamma, gw.ln1_beta);
  be.add(dx, dx2, dx);
  return dx;
}

void all_reduce_packed(Communicator& comm, const std::vector<Tensor*>& tensors, AllocTag tag) {
  int64_t n = 0;
  for (const Tensor* t : tensors) n += t->numel();
  Tensor packed = Tensor::empty({n}, tensors.at(0)->dtype(), tag);
  auto* p = static_cast<char*>(packed.raw_data());
  {
    trace::Span copy("all_reduce pack", "memory", 0, 2 * packed.nbytes());
    if (!packed.is_dry())  // a dry run (what-if model) records the copy but moves nothing
      for (const Tensor* t : tensors) copy_bytes(p, t->raw_data(), t->nbytes()), p += t->nbytes();
  }
  comm.all_reduce(packed);
  trace::Span copy("all_reduce unpack", "memory", 0, 2 * packed.nbytes());
  if (packed.is_dry()) return;
  p = static_cast<char*>(packed.raw_data());
  for (Tensor* t : tensors) copy_bytes(t->raw_data(), p, t->nbytes()), p += t->nbytes();
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
}

// Calls f(i, len, stride) for the arithmetic runs of pos: pos[i + k] = pos[i] + k stride for
// k < len. Every layout's positions are a few such runs (contiguous, zigzag: stride 1;
// striped: stride P), so token copies are a few strided copies, not one per token.
template <class F> static void for_each_stride_run(const std::vector<int64_t>& pos, F&& f) {
  const int64_t n = static_cast<int64_t>(pos.size());
  for (int64_t i = 0; i < n;) {
    const int64_t stride = i + 1 < n && pos[i + 1] > pos[i] ? pos[i + 1] - pos[i] : 1;
    int64_t len = 1;
    while (i + len < n && pos[i + len] == pos[i] + len * stride) ++len;
    f(i, len, stride);
    i += len;
  }
}

Tensor slice_seq(const Tensor& t, int64_t s0, int64_t n, AllocTag tag) {
  RS_CHECK(t.ndim() >= 2 && s0 >= 0 && s0 + n <= t.dim(1), "slice_seq: tokens [", s0, ", ", s0 + n, ") of ",
           to_string(t.shape()));
  Shape shape = t.shape();
  shape[1] = n;
  Tensor out = Tensor::empty(shape, t.dtype(), tag);
  trace::Span copy("slice_seq", "memory", 0, 2 * out.nbytes());
  if (out.is_dry()) return out;
  const int64_t row = t.numel() / (t.dim(0) * t.dim(1)) * dtype_size(t.dtype());  // bytes per token
  const auto* src = static_cast<const char*>(t.raw_data());
  auto* dst = static_cast<char*>(out.raw_data());
  copy_rows(dst, n * row, src + s0 * row, t.dim(1) * row, n * row, t.dim(0));
  return out;
}

Tensor gather_seq(Communicator& comm, const Tensor& shard, AllocTag tag) {
  const int P = comm.size();
  const Tensor all = comm.all_gather(shard, tag);  // [P][b][n][...]
  Shape shape = shard.shape();
  const int64_t b = shape[0], n = shape[1];
  shape[1] = n * P;
  Tensor out = Tensor::empty(shape, shard.dtype(), tag);
  trace::Span copy("gather_seq reorder", "memory", 0, 2 * out.nbytes());
  if (out.is_dry()) return out;
  const int64_t row = shard.numel() / (b * n) * dtype_size(shard.dtype());
  const auto* src = static_cast<const char*>(all.raw_data());
  auto* dst = static_cast<char*>(out.raw_data());
  for (int r = 0; r < P; ++r) copy_rows(dst + r * n * row, n * P * row, src + r * b * n * row, n * row, n * row, b);
  return out;
}

Tensor reduce_scatter_seq(Communicator& comm, const Tensor& t, AllocTag tag) {
  const int P = comm.size();
  const int64_t b = t.dim(0), s = t.dim(1), n = s / P;
  RS_CHECK(s % P == 0, "reduce_scatter_seq: sequence ", s, " does not split over ", P, " ranks");
  // Pack as [P][b][s/P][...] so that each rank's tokens are one contiguous chunk.
  Shape packed_shape = t.shape();
  packed_shape[1] = n;
  packed_shape.insert(packed_shape.begin(), P);
  Tensor packed = Tensor::empty(packed_shape, t.dtype(), tag);
  const int64_t row = t.numel() / (b * s) * dtype_size(t.dtype());
  const auto* src = static_cast<const char*>(t.raw_data());
  auto* dst = static_cast<char*>(packed.raw_data());
  {
    trace::Span copy("reduce_scatter_seq pack", "memory", 0, 2 * packed.nbytes());
    for (int r = 0; r < P && !packed.is_dry(); ++r)  // (a dry run: no data, no copy)
      copy_rows(dst + r * b * n * row, n * row, src + r * n * row, s * row, n * row, b);
  }
  Shape out_shape = t.shape();
  out_shape[1] = n;
  return comm.reduce_scatter(packed, tag).reshape(out_shape);
}

Tensor take_tokens(const Tensor& t, const std::vector<int64_t>& pos, AllocTag tag) {
  Shape shape = t.shape();
  shape[1] = static_cast<int64_t>(pos.size());
  Tensor out = Tensor::empty(shape, t.dtype(), tag);
  trace::Span copy("take_tokens", "memory", 0, 2 * out.nbytes());
  if (out.is_dry()) return out;
  const int64_t row = t.numel() / (t.dim(0) * t.dim(1)) * dtype_size(t.dtype());
  const auto* src = static_cast<const char*>(t.raw_data());
  auto* dst = static_cast<char*>(out.raw_data());
  for_each_stride_run(pos, [&](int64_t i, int64_t len, int64_t stride) {
    for (int64_t b = 0; b < t.dim(0); ++b)
      copy_rows(dst + (b * shape[1] + i) * row, row, src + (b * t.dim(1) + pos[i]) * row, stride * row, row, len);
  });
  return out;
}

Tensor gather_tokens(Communicator& comm, const Tensor& shard, const std::function<std::vector<int64_t>(int)>& positions_of,
                     int64_t s, AllocTag tag) {
  const int P = comm.size();
  const Tensor all = comm.all_gather(shard, tag);  // [P][b][n][...]
  Shape shape = shard.shape();
  const int64_t b = shape[0], n = shape[1];
  shape[1] = s;
  Tensor out = Tensor::empty(shape, shard.dtype(), tag);
  trace::Span copy("gather_tokens reorder", "memory", 0, 2 * out.nbytes());
  if (out.is_dry()) return out;
  const int64_t row = shard.numel() / (b * n) * dtype_size(shard.dtype());
  const auto* src = static_cast<const char*>(all.raw_data());
  auto* dst = static_cast<char*>(out.raw_data());
  for (int r = 0; r < P; ++r) {
    const auto pos = positions_of(r);
    for_each_stride_run(pos, [&](int64_t i, int64_t len, int64_t stride) {
      for (int64_t bi = 0; bi < b; ++bi)
        copy_rows(dst + (bi * s + pos[i]) * row, stride * row, src + ((r * b + bi) * n + i) * row, row, row, len);
    });
  }
  return out;
}

void put_seq(Tensor& dst, const Tensor& src, int64_t s0) {
  trace::Span copy("put_seq", "memory", 0, 2 * src.nbytes());
  if (dst.is_dry()) return;
  const int64_t b = src.dim(0), n = src.dim(1), row = src.numel() / (b * n) * dtype_size(src.dtype());
  copy_rows(static_cast<char*>(dst.raw_data()) + s0 * row, dst.dim(1) * row, src.raw_data(), n * row, n * row, b);
}

Tensor slice_cols(const Tensor& m, const std::vector<std::pair<int64_t, int64_t>>& segments, AllocTag tag) {
  const int64_t rows = m.ndim() == 1 ? 1 : m.dim(0), cols = m.dim(-1), es = dtype_size(m.dtype());
  int64_t width = 0;
  for (auto [a, e] : segments) width += e - a;
  Tensor out = Tensor::empty(m.ndim() == 1 ? Shape{width} : Shape{rows, width}, m.dtype(), tag);
  trace::Span copy("slice_cols", "memory", 0, 2 * out.nbytes());
  if (out.is_dry()) return out;
  const auto* src = static_cast<const char*>(m.raw_data());
  auto* dst = static_cast<char*>(out.raw_data());
  int64_t o = 0;
  for (auto [a, e] : segments) {
    copy_rows(dst + o * es, width * es, src + a * es, cols * es, (e - a) * es, rows);
    o += e - a;
  }
  return out;
}

Tensor gather_cols(Communicator& comm, const Tensor& local, int64_t cols,
                   const std::function<std::vector<std::pair<int64_t, int64_t>>(int)>& segments_of, AllocTag tag) {
  const int P = comm.size();
  const int64_t rows = local.ndim() == 1 ? 1 : local.dim(0), width = local.dim(-1), es = dtype_size(local.dtype());
  const Tensor all = comm.all_gather(local, tag);  // [P][rows][width]
  Tensor out = Tensor::empty(local.ndim() == 1 ? Shape{cols} : Shape{rows, cols}, local.dtype(), tag);
  trace::Span copy("gather_cols reorder", "memory", 0, 2 * out.nbytes());
  if (out.is_dry()) return out;
  const auto* src = static_cast<const char*>(all.raw_data());
  auto* dst = static_cast<char*>(out.raw_data());
  for (int r = 0; r < P; ++r) {
    int64_t o = 0;
    for (auto [a, e] : segments_of(r)) {
      copy_rows(dst + a * es, cols * es, src + (r * rows * width + o) * es, width * es, (e - a) * es, rows);
      o += e - a;
    }
  }
  return out;
}

Tensor slice_rows(const Tensor& m, int64_t r0, int64_t n, AllocTag tag) {
  const int64_t cols = m.ndim() == 1 ? 1 : m.dim(1), es = dtype_size(m.dtype());
  Tensor out = Tensor::empty(m.ndim() == 1 ? Shape{n} : Shape{n, cols}, m.dtype(), tag);
  trace::Span copy("slice_rows", "memory", 0, 2 * out.nbytes());
  if (out.is_dry()) return out;
  copy_bytes(out.raw_data(), static_cast<const char*>(m.raw_data()) + r0 * cols * es, n * cols * es);
  return out;
}

int64_t ring_all_gather_bytes(int64_t n, int P, int rank, DType dt) {
  if (P == 1) return 0;
  return (n - even_counts(n, P)[(rank + 1) % P]) * dtype_size(dt);  // every chunk but the right neighbour's
}

int64_t ring_reduce_scatter_bytes(int64_t n, int P, int rank, DType dt) {
  if (P == 1) return 0;
  return (n - even_counts(n, P)[rank]) * dtype_size(dt);  // every chunk but its own
}

int64_t ring_all_reduce_bytes(int64_t n, int P, int rank, DType dt) {
  return ring_reduce_scatter_bytes(n, P, rank, dt) + ring_all_gather_bytes(n, P, rank, dt);
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

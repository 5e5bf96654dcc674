// DeepSpeed-Ulysses, read top to bottom (Jacobs et al. 2023, "DeepSpeed Ulysses: System
// Optimizations for Enabling Training of Extreme Long Sequence Transformer Models"; lesson 5).
//
// Every rank holds s/P tokens and every weight. Everything but attention is token-wise, so it
// runs on the local tokens with no communication. Attention needs whole sequences, but only
// per head: an all-to-all turns q, k, v from [s/P tokens, all H heads] into [all s tokens,
// H/P heads]; attention runs on whole sequences for those heads; a second all-to-all turns
// the output back. Each all-to-all moves (P-1)/P of a rank's share, so the volume per link
// falls as P grows (4 N h / P per layer), unlike the ring's. The catch: P <= H.
// With grouped-query attention and Hkv < P, each K/V head is replicated P/Hkv times before the
// all-to-all, so every rank receives the one K/V head its query heads read.
#include "parallel/ulysses.h"

#include "device/gpu.h"

#include <chrono>
#include <cstring>
#include <numeric>

#include "kernels/philox.h"
#include "layer/reference.h"

namespace ringside {

void validate_ulysses(const LayerConfig& cfg, int P) {
  cfg.validate();
  if (P < 1 || cfg.s % P != 0)
    throw ConfigError(detail::concat("ulysses with P = ", P, ": sequence length s = ", cfg.s,
                                     " must be divisible by P (each rank holds s/P tokens)"));
  if (cfg.H % P != 0)
    throw ConfigError(detail::concat("ulysses with P = ", P, ": heads H = ", cfg.H,
                                     " must be divisible by P (the all-to-all gives each rank H/P heads)"));
  if (cfg.Hkv % P != 0 && P % cfg.Hkv != 0)
    throw ConfigError(detail::concat("ulysses with P = ", P, ": kv heads Hkv = ", cfg.Hkv,
                                     " neither divide among P ranks nor replicate evenly to P (P % Hkv != 0)"));
}

int64_t ulysses_kv_heads(const LayerConfig& cfg, int P) { return cfg.Hkv % P == 0 ? cfg.Hkv : P; }

int64_t ulysses_saved_bytes(const LayerConfig& c, int P, int /*rank*/, DType dt) {
  const int64_t N = c.tokens(), kv = ulysses_kv_heads(c, P);
  return dtype_size(dt) * (N / P * (7 * c.h + 2 * c.f + 4 + c.H) + 2 * N * (kv / P) * c.d());
}

CommBytes ulysses_comm_bytes(const LayerConfig& c, int P, int rank, DType dt) {
  // Each all-to-all sends P-1 of a rank's P equal blocks.
  const int64_t N = c.tokens(), es = dtype_size(dt), kv = ulysses_kv_heads(c, P);
  const int64_t q = N / P * c.H * c.d(), k = N / P * kv * c.d();  // a rank's share, elements
  const int64_t fwd = (q + 2 * k + q) / P * (P - 1) * es;
  int64_t params = 0;
  for (auto& [name, shape] : weight_shapes(c)) params += numel(shape);
  return {fwd, fwd + ring_all_reduce_bytes(params, P, rank, dt)};
}

namespace {

// [b, s/P, X, d] on each rank (our tokens, all X heads) -> [b, s, X/P, d] (all tokens, our heads).
Tensor seq_to_heads(Communicator& comm, const Tensor& t, AllocTag tag) {
  const int P = comm.size();
  const int64_t b = t.dim(0), n = t.dim(1), X = t.dim(2), d = t.dim(3), xp = X / P, es = dtype_size(t.dtype());
  const int64_t blk = b * n * xp * d;  // elements to each rank
  Tensor send = Tensor::empty({P * blk}, t.dtype(), tag), recv = Tensor::empty({P * blk}, t.dtype(), tag);
  const auto* src = static_cast<const char*>(t.raw_data());
  auto* sp = static_cast<char*>(send.raw_data());
  {
    trace::Span copy("all_to_all pack", "memory", 0, 2 * send.nbytes());
    for (int j = 0; j < P && !send.is_dry(); ++j)  // block j: heads [j X/P, (j+1) X/P) of our tokens (dry: none)
      copy_rows(sp + j * b * n * xp * d * es, xp * d * es, src + j * xp * d * es, X * d * es, xp * d * es, b * n);
  }
  comm.all_to_all(send.raw_data(), std::vector<int64_t>(P, blk), recv.raw_data(), std::vector<int64_t>(P, blk),
                  t.dtype());
  Tensor out = Tensor::empty({b, n * P, xp, d}, t.dtype(), tag);
  trace::Span copy("all_to_all unpack", "memory", 0, 2 * out.nbytes());
  if (out.is_dry()) return out;
  const auto* rp = static_cast<const char*>(recv.raw_data());
  auto* dst = static_cast<char*>(out.raw_data());
  for (int j = 0; j < P; ++j)  // from rank j: its tokens [j n, (j+1) n), our heads
    copy_rows(dst + j * n * xp * d * es, n * P * xp * d * es, rp + j * b * n * xp * d * es, n * xp * d * es,
              n * xp * d * es, b);
  return out;
}

// The inverse: [b, s, X/P, d] (all tokens, our heads) -> [b, s/P, X, d] (our tokens, all heads).
Tensor heads_to_seq(Communicator& comm, const Tensor& t, AllocTag tag) {
  const int P = comm.size();
  const int64_t b = t.dim(0), n = t.dim(1) / P, xp = t.dim(2), d = t.dim(3), X = xp * P, es = dtype_size(t.dtype());
  const int64_t blk = b * n * xp * d;
  Tensor send = Tensor::empty({P * blk}, t.dtype(), tag), recv = Tensor::empty({P * blk}, t.dtype(), tag);
  const auto* src = static_cast<const char*>(t.raw_data());
  auto* sp = static_cast<char*>(send.raw_data());
  {
    trace::Span copy("all_to_all pack", "memory", 0, 2 * send.nbytes());
    for (int j = 0; j < P && !send.is_dry(); ++j)  // block j: rank j's tokens, our heads (dry: none)
      copy_rows(sp + j * b * n * xp * d * es, n * xp * d * es, src + j * n * xp * d * es, n * P * xp * d * es,
                n * xp * d * es, b);
  }
  comm.all_to_all(send.raw_data(), std::vector<int64_t>(P, blk), recv.raw_data(), std::vector<int64_t>(P, blk),
                  t.dtype());
  Tensor out = Tensor::empty({b, n, X, d}, t.dtype(), tag);
  trace::Span copy("all_to_all unpack", "memory", 0, 2 * out.nbytes());
  if (out.is_dry()) return out;
  const auto* rp = static_cast<const char*>(recv.raw_data());
  auto* dst = static_cast<char*>(out.raw_data());
  for (int j = 0; j < P; ++j)  // from rank j: heads [j X/P, (j+1) X/P) of our tokens
    copy_rows(dst + j * xp * d * es, X * d * es, rp + j * b * n * xp * d * es, xp * d * es, xp * d * es, b * n);
  return out;
}

// K/V heads [b, n, Hkv, d] -> [b, n, R Hkv, d], each head repeated R times in place (head e
// of the result is head e / R), so that head e lands on the rank whose queries read it.
Tensor replicate_heads(const Tensor& t, int64_t R, AllocTag tag) {
  if (R == 1) return t;
  const int64_t bn = t.dim(0) * t.dim(1), Hkv = t.dim(2), d = t.dim(3), es = dtype_size(t.dtype());
  Tensor out = Tensor::empty({t.dim(0), t.dim(1), Hkv * R, d}, t.dtype(), tag);
  trace::Span copy("replicate kv heads", "memory", 0, t.nbytes() + out.nbytes());
  if (out.is_dry()) return out;
  const auto* src = static_cast<const char*>(t.raw_data());
  auto* dst = static_cast<char*>(out.raw_data());
  for (int64_t e = 0; e < Hkv * R; ++e)
    copy_rows(dst + e * d * es, Hkv * R * d * es, src + (e / R) * d * es, Hkv * d * es, d * es, bn);
  return out;
}

// The backward of replicate_heads: each head's gradient is the sum over its R copies.
template <class T>
void sum_copies(const T* rep, T* out, int64_t bn, int64_t Hkv, int64_t R, int64_t d) {
  for (int64_t i = 0; i < bn; ++i)
    for (int64_t e = 0; e < Hkv * R; ++e)
      for (int64_t c = 0; c < d; ++c) out[(i * Hkv + e / R) * d + c] += rep[(i * Hkv * R + e) * d + c];
}

void sum_replicas(const Tensor& rep, Tensor& out, int64_t R) {
  trace::Span sum("sum kv head replicas", "elementwise", 0, rep.nbytes() + 2 * out.nbytes());
  if (out.is_dry()) return;
  if (R == 1) {
    copy_bytes(out.raw_data(), rep.raw_data(), rep.nbytes());
    return;
  }
  const int64_t bn = out.dim(0) * out.dim(1), Hkv = out.dim(2), d = out.dim(3);
  if (out.device() == Device::cuda) {  // copy r of every head out of the interleaving, then add it
    const int64_t es = dtype_size(out.dtype());
    gpu::zero(out.raw_data(), out.nbytes());
    Tensor copy = Tensor::empty(out.shape(), out.dtype(), out.tag());
    for (int64_t r = 0; r < R; ++r) {
      copy_rows(copy.raw_data(), d * es, static_cast<const char*>(rep.raw_data()) + r * d * es, R * d * es, d * es, bn * Hkv);
      gpu::add(out.data<float>(), copy.data<float>(), out.data<float>(), out.numel());
    }
    return;
  }
  std::memset(out.raw_data(), 0, static_cast<size_t>(out.nbytes()));
  if (out.dtype() == DType::f32) sum_copies(rep.data<float>(), out.data<float>(), bn, Hkv, R, d);
  else sum_copies(rep.data<double>(), out.data<double>(), bn, Hkv, R, d);
}

}  // namespace

RankResult ulysses_run(const LayerConfig& cfg, Communicator& comm, Backend& be, MemoryTracker& tracker, DType dt) {
  const int P = comm.size(), r = comm.rank();
  validate_ulysses(cfg, P);  // every rank, before any communication
  const int64_t b = cfg.b, s = cfg.s, H = cfg.H, Hkv = cfg.Hkv, d = cfg.d(), sl = s / P;
  const int64_t Hkv_rep = ulysses_kv_heads(cfg, P), R = Hkv_rep / Hkv;  // replication factor
  const AllocTag ws{r, MemCategory::workspace, &tracker}, act{r, MemCategory::activations, &tracker},
      wt{r, MemCategory::weights, &tracker};
  comm.tracker = &tracker;

  // ---- Inputs: all the weights (replicated), our s/P tokens.
  const LayerWeights w = init_weights(cfg, dt, wt);
  const Tensor x = slice_seq(random_input(cfg, static_cast<uint32_t>(RngSite::input_x), dt, ws), r * sl, sl, act);
  const Tensor dout = slice_seq(random_input(cfg, static_cast<uint32_t>(RngSite::input_dout), dt, ws), r * sl, sl, ws);
  std::vector<int64_t> my_pos(sl);
  std::iota(my_pos.begin(), my_pos.end(), r * sl);
  AttentionParams ap;
  ap.b = b, ap.sq = ap.sk = s, ap.H = H / P, ap.Hkv = Hkv_rep / P, ap.d = d, ap.causal = cfg.causal;
  ap.softmax_scale = cfg.softmax_scale();

  RankResult res;
  PhaseMeter meter(comm, tracker);
  maybe_inject_failure(r, P, "forward");

  // ================================ forward ================================
  // LayerNorm 1, the QKV projection and RoPE: token-wise, on our s/P tokens (full weights).
  TokenwiseSaved sv;
  Tensor q_seq, k_seq, v_seq;
  qkv_forward(cfg, w, be, x, my_pos, sv, q_seq, k_seq, v_seq, act, ws, ws);
  trace::sublayer("attention");

  // All-to-all: [s/P tokens, all heads] -> [all s tokens, our heads].
  const Tensor q = seq_to_heads(comm, q_seq, act);
  const Tensor k = seq_to_heads(comm, replicate_heads(k_seq, R, ws), act);
  const Tensor v = seq_to_heads(comm, replicate_heads(v_seq, R, ws), act);
  q_seq = k_seq = v_seq = Tensor();

  // Attention over the whole sequence for our H/P heads.
  Tensor a_heads = be.empty({b, s, H / P, d}, dt, act), lse = be.empty({b, H / P, s}, dt, act);
  be.attention_forward(ap, q, k, v, a_heads, lse);
  res.attention_flops = kernels::cpu::attention_forward_flops(ap);

  // All-to-all back: our tokens, all heads. Then everything is token-wise again.
  const Tensor a = heads_to_seq(comm, a_heads, act);
  const Tensor out = post_attention_forward(cfg, w, be, a, my_pos, sv, act, ws);

  meter.forward_done();
  maybe_inject_failure(r, P, "backward");

  // ================================ backward ================================
  LayerWeights gw = zero_grads(cfg, dt, {r, MemCategory::grads, &tracker});
  Tensor dx2;
  const Tensor da = post_attention_backward(cfg, w, be, a, dout, my_pos, sv, gw, dx2, ws);
  trace::sublayer("attention");

  // The attention backward runs in head layout: all-to-all the output gradient there, and the
  // q, k, v gradients back.
  Tensor dq_h = be.zeros(q.shape(), dt, ws), dk_h = be.zeros(k.shape(), dt, ws), dv_h = be.zeros(v.shape(), dt, ws);
  {
    const Tensor da_heads = seq_to_heads(comm, da, ws);
    be.attention_backward(ap, q, k, v, a_heads, da_heads, lse, dq_h, dk_h, dv_h);
  }
  Tensor dq = heads_to_seq(comm, dq_h, ws), dk = be.empty({b, sl, Hkv, d}, dt, ws), dv = be.empty({b, sl, Hkv, d}, dt, ws);
  sum_replicas(heads_to_seq(comm, dk_h, ws), dk, R);  // a replicated head's gradient: the sum of its copies
  sum_replicas(heads_to_seq(comm, dv_h, ws), dv, R);
  dq_h = dk_h = dv_h = Tensor();
  const Tensor dx = qkv_backward(cfg, w, be, dq, dk, dv, my_pos, sv, dx2, gw, ws);

  // Every weight is replicated and every rank saw only its tokens: all-reduce all gradients
  // (as data parallelism does; DeepSpeed folds this into ZeRO's reduce-scatter).
  {
    std::vector<Tensor*> all;
    for (auto& [name, t] : gw.named()) all.push_back(t);
    trace::sublayer("grad_sync");
    all_reduce_packed(comm, all, {r, MemCategory::comm, &tracker});
  }

  meter.backward_done();
  meter.fill(res);

  res.out = gather_seq(comm, out, ws);
  res.dx = gather_seq(comm, dx, ws);
  res.grads = gw;
  res.local_grads = gw;
  return res;
}

Strategy ulysses_strategy() {
  return {"ulysses", "DeepSpeed-Ulysses: all-to-all from sequence to heads around attention", validate_ulysses,
          ulysses_run, ulysses_saved_bytes, ulysses_comm_bytes};
}

}  // namespace ringside

// DeepSpeed-Ulysses, read top to bottom (Jacobs et al. 2023, "DeepSpeed Ulysses: System
// Optimizations for Enabling Training of Extreme Long Sequence Transformer Models"; lesson 5).
//
// Each of U ranks holds n tokens and every head. Attention needs whole sequences, but only per
// head: an all-to-all turns q, k, v from [n tokens, all heads] into [all U n tokens, this rank's
// heads]; attention runs on the whole sequence for those heads (locally, or as a ring over
// another group: USP); a second all-to-all turns the output back. Each all-to-all moves
// (U-1)/U of a rank's share, so the volume per link falls as U grows, unlike the ring's. The
// catch: U <= H. With grouped-query attention each rank receives exactly the K/V heads its
// query heads read, a head read on two ranks going to both.
#include "parallel/ulysses_attention.h"

#include "comm/tensor_comm.h"

namespace ringside {

HeadShare ulysses_head_share(int64_t Hq, int64_t Hkv, int U, int u) {
  if (U < 1 || Hq % U != 0 || Hkv < 1 || Hq % Hkv != 0)
    throw ConfigError(detail::concat("ulysses: ", Hq, " query heads must split over U = ", U, " ranks and over ", Hkv,
                                     " kv heads"));
  HeadShare h;
  const int64_t G = Hq / Hkv;  // query heads per kv head
  h.q_count = Hq / U, h.q_first = u * h.q_count;
  h.kv_first = h.q_first / G, h.kv_count = (h.q_first + h.q_count - 1) / G - h.kv_first + 1;
  for (int64_t i = 0; i < h.q_count; ++i)  // the kernel reads kv head i / (q_count / kv_count)
    if (h.q_count % h.kv_count != 0 || i / (h.q_count / h.kv_count) != (h.q_first + i) / G - h.kv_first) h.expand = true;
  return h;
}

namespace {

using HeadRanges = std::vector<std::pair<int64_t, int64_t>>;  // per rank: (first head, count)

HeadRanges q_heads(int64_t Hq, int64_t Hkv, int U) {
  HeadRanges r;
  for (int j = 0; j < U; ++j) r.push_back({ulysses_head_share(Hq, Hkv, U, j).q_first, Hq / U});
  return r;
}

HeadRanges kv_heads(int64_t Hq, int64_t Hkv, int U) {
  HeadRanges r;
  for (int j = 0; j < U; ++j) {
    const HeadShare h = ulysses_head_share(Hq, Hkv, U, j);
    r.push_back({h.kv_first, h.kv_count});
  }
  return r;
}

std::vector<int64_t> offsets(const std::vector<int64_t>& counts) {
  std::vector<int64_t> off(counts.size() + 1, 0);
  for (size_t j = 0; j < counts.size(); ++j) off[j + 1] = off[j] + counts[j];
  return off;
}

// dst heads [at, at + c) += src [b, n, c, d] (through a contiguous copy, on any device).
void add_into_heads(Backend& be, Tensor& dst, int64_t at, const Tensor& src) {
  const int64_t rows = dst.dim(0) * dst.dim(1), X = dst.dim(2), c = src.dim(2), d = dst.dim(3);
  const int64_t es = dtype_size(dst.dtype());
  Tensor part = Tensor::empty(src.shape(), src.dtype(), src.tag(), src.device());
  auto* base = static_cast<char*>(dst.raw_data()) + at * d * es;
  if (!dst.is_dry()) copy_rows(part.raw_data(), c * d * es, base, X * d * es, c * d * es, rows);
  be.add(part, src, part);
  if (!dst.is_dry()) copy_rows(base, X * d * es, part.raw_data(), c * d * es, c * d * es, rows);
}

// [b, n, X, d] (our tokens, all X heads) -> [b, U n, count, d] (the group's tokens in rank
// order, our heads): rank j is sent heads[j] of our tokens.
Tensor seq_to_heads(Communicator& comm, const Tensor& t, const HeadRanges& heads, AllocTag tag) {
  const int U = comm.size(), me = comm.rank();
  const int64_t b = t.dim(0), n = t.dim(1), X = t.dim(2), d = t.dim(3), cm = heads[me].second, es = dtype_size(t.dtype());
  std::vector<int64_t> send_counts, recv_counts(U, b * n * cm * d);
  for (const auto& [first, count] : heads) send_counts.push_back(b * n * count * d);
  const std::vector<int64_t> soff = offsets(send_counts), roff = offsets(recv_counts);
  Tensor send = Tensor::empty({soff[U]}, t.dtype(), tag), recv = Tensor::empty({roff[U]}, t.dtype(), tag);
  {
    trace::Span copy("all_to_all pack", "memory", 0, 2 * send.nbytes());
    for (int j = 0; j < U && !send.is_dry(); ++j)
      copy_rows(static_cast<char*>(send.raw_data()) + soff[j] * es, heads[j].second * d * es,
                static_cast<const char*>(t.raw_data()) + heads[j].first * d * es, X * d * es, heads[j].second * d * es, b * n);
  }
  comm.all_to_all(send.raw_data(), send_counts, recv.raw_data(), recv_counts, t.dtype());
  Tensor out = Tensor::empty({b, n * U, cm, d}, t.dtype(), tag);
  trace::Span copy("all_to_all unpack", "memory", 0, 2 * out.nbytes());
  for (int j = 0; j < U && !out.is_dry(); ++j)  // from rank j: its tokens [j n, (j+1) n), our heads
    copy_rows(static_cast<char*>(out.raw_data()) + j * n * cm * d * es, n * U * cm * d * es,
              static_cast<const char*>(recv.raw_data()) + roff[j] * es, n * cm * d * es, n * cm * d * es, b);
  return out;
}

// The inverse: [b, U n, count, d] (the group's tokens, our heads) -> [b, n, X, d] (our tokens,
// all heads). A head that several ranks hold (a shared kv head's gradient) gets their sum.
Tensor heads_to_seq(Communicator& comm, Backend& be, const Tensor& t, int64_t X, const HeadRanges& heads, AllocTag tag) {
  const int U = comm.size();
  const int64_t b = t.dim(0), n = t.dim(1) / U, cm = t.dim(2), d = t.dim(3), es = dtype_size(t.dtype());
  std::vector<int64_t> send_counts(U, b * n * cm * d), recv_counts;
  for (const auto& [first, count] : heads) recv_counts.push_back(b * n * count * d);
  const std::vector<int64_t> roff = offsets(recv_counts);
  Tensor send = Tensor::empty({U * b * n * cm * d}, t.dtype(), tag), recv = Tensor::empty({roff[U]}, t.dtype(), tag);
  {
    trace::Span copy("all_to_all pack", "memory", 0, 2 * send.nbytes());
    for (int j = 0; j < U && !send.is_dry(); ++j)  // to rank j: its tokens, our heads
      copy_rows(static_cast<char*>(send.raw_data()) + j * b * n * cm * d * es, n * cm * d * es,
                static_cast<const char*>(t.raw_data()) + j * n * cm * d * es, n * U * cm * d * es, n * cm * d * es, b);
  }
  comm.all_to_all(send.raw_data(), send_counts, recv.raw_data(), recv_counts, t.dtype());
  bool shared = false;
  for (int j = 1; j < U; ++j) shared |= heads[j].first < heads[j - 1].first + heads[j - 1].second;
  Tensor out = shared ? be.zeros({b, n, X, d}, t.dtype(), tag) : Tensor::empty({b, n, X, d}, t.dtype(), tag);
  trace::Span copy("all_to_all unpack", "memory", 0, 2 * out.nbytes());
  for (int j = 0; j < U && !out.is_dry(); ++j) {  // from rank j: its heads of our tokens
    const auto* block = static_cast<const char*>(recv.raw_data()) + roff[j] * es;
    if (!shared) {
      copy_rows(static_cast<char*>(out.raw_data()) + heads[j].first * d * es, X * d * es, block,
                heads[j].second * d * es, heads[j].second * d * es, b * n);
      continue;
    }
    Tensor part = Tensor::empty({b, n, heads[j].second, d}, t.dtype(), tag);
    copy_bytes(part.raw_data(), block, part.nbytes());
    add_into_heads(be, out, heads[j].first, part);
  }
  return out;
}

// K/V heads [b, s, kv_count, d] -> [b, s, q_count, d], one per query head (HeadShare::expand),
// and the backward: each kv head's gradient is the sum over its copies.
Tensor expand_kv(const Tensor& t, const HeadShare& h, int64_t G, AllocTag tag) {
  const int64_t rows = t.dim(0) * t.dim(1), d = t.dim(3), es = dtype_size(t.dtype());
  Tensor out = Tensor::empty({t.dim(0), t.dim(1), h.q_count, d}, t.dtype(), tag, t.device());
  trace::Span copy("repeat kv heads", "memory", 0, t.nbytes() + out.nbytes());
  for (int64_t i = 0; i < h.q_count && !out.is_dry(); ++i)
    copy_rows(static_cast<char*>(out.raw_data()) + i * d * es, h.q_count * d * es,
              static_cast<const char*>(t.raw_data()) + ((h.q_first + i) / G - h.kv_first) * d * es, h.kv_count * d * es,
              d * es, rows);
  return out;
}

Tensor collapse_kv(Backend& be, const Tensor& t, const HeadShare& h, int64_t G, AllocTag tag) {
  const int64_t rows = t.dim(0) * t.dim(1), d = t.dim(3), es = dtype_size(t.dtype());
  Tensor out = be.zeros({t.dim(0), t.dim(1), h.kv_count, d}, t.dtype(), tag);
  for (int64_t i = 0; i < h.q_count; ++i) {
    Tensor head = Tensor::empty({t.dim(0), t.dim(1), 1, d}, t.dtype(), tag, t.device());
    if (!t.is_dry())
      copy_rows(head.raw_data(), d * es, static_cast<const char*>(t.raw_data()) + i * d * es, h.q_count * d * es, d * es, rows);
    add_into_heads(be, out, (h.q_first + i) / G - h.kv_first, head);
  }
  return out;
}

}  // namespace

Tensor ulysses_attention_forward(Communicator& a2a, SequenceAttention& inner, const RankContext& ctx, const Tensor& q,
                                 const Tensor& k, const Tensor& v, UlyssesSaved& saved) {
  const int U = a2a.size();
  const int64_t Hq = q.dim(2), Hkv = k.dim(2), G = Hq / Hkv;
  const HeadShare mine = ulysses_head_share(Hq, Hkv, U, a2a.rank());
  saved.Hkv = Hkv;
  // All-to-all: [n tokens, all heads] -> [U n tokens, our heads]; K/V as the inner attention reads them.
  saved.q = seq_to_heads(a2a, q, q_heads(Hq, Hkv, U), ctx.act);
  saved.k = seq_to_heads(a2a, k, kv_heads(Hq, Hkv, U), mine.expand ? ctx.ws : ctx.act);
  saved.v = seq_to_heads(a2a, v, kv_heads(Hq, Hkv, U), mine.expand ? ctx.ws : ctx.act);
  if (mine.expand) saved.k = expand_kv(saved.k, mine, G, ctx.act), saved.v = expand_kv(saved.v, mine, G, ctx.act);
  // Attention over the whole sequence for our heads.
  saved.inner = inner.forward(saved.q, saved.k, saved.v);
  // All-to-all back: our tokens, all heads.
  return heads_to_seq(a2a, ctx.be, saved.inner.out, Hq, q_heads(Hq, Hkv, U), ctx.act);
}

AttentionGrads ulysses_attention_backward(Communicator& a2a, SequenceAttention& inner, const RankContext& ctx,
                                          const UlyssesSaved& saved, const Tensor& dout) {
  const int U = a2a.size();
  const int64_t Hq = dout.dim(2), Hkv = saved.Hkv, G = Hq / Hkv;
  const HeadShare mine = ulysses_head_share(Hq, Hkv, U, a2a.rank());
  // The attention backward runs in head layout: dout there, and dq, dk, dv back.
  AttentionGrads g;
  {
    const Tensor dout_heads = seq_to_heads(a2a, dout, q_heads(Hq, Hkv, U), ctx.ws);
    g = inner.backward(saved.q, saved.k, saved.v, saved.inner, dout_heads);
  }
  if (mine.expand) g.dk = collapse_kv(ctx.be, g.dk, mine, G, ctx.ws), g.dv = collapse_kv(ctx.be, g.dv, mine, G, ctx.ws);
  return {heads_to_seq(a2a, ctx.be, g.dq, Hq, q_heads(Hq, Hkv, U), ctx.ws),
          heads_to_seq(a2a, ctx.be, g.dk, Hkv, kv_heads(Hq, Hkv, U), ctx.ws),  // a shared head: the sum of its readers'
          heads_to_seq(a2a, ctx.be, g.dv, Hkv, kv_heads(Hq, Hkv, U), ctx.ws)};
}

AttentionOut UlyssesAttention::forward(const Tensor& q, const Tensor& k, const Tensor& v) {
  AttentionOut out{ulysses_attention_forward(a2a_, *inner_, ctx_, q, k, v, saved_), Tensor()};
  flops = inner_->flops, steps = inner_->steps;
  return out;
}

AttentionOut UlyssesAttention::recompute(const Tensor& q, const Tensor& k, const Tensor& v) {
  const double inner_flops = inner_->flops;
  const std::vector<StepRecord> inner_steps = inner_->steps;
  AttentionOut out = forward(q, k, v);
  inner_->flops = flops = inner_flops;
  inner_->steps = steps = inner_steps;
  return out;
}

void UlyssesAttention::drop_saved() {
  saved_ = UlyssesSaved();
  inner_->drop_saved();
}

AttentionGrads UlyssesAttention::backward(const Tensor&, const Tensor&, const Tensor&, const AttentionOut&,
                                          const Tensor& dout) {
  AttentionGrads g = ulysses_attention_backward(a2a_, *inner_, ctx_, saved_, dout);
  steps = inner_->steps;
  saved_ = UlyssesSaved();
  return g;
}

}  // namespace ringside

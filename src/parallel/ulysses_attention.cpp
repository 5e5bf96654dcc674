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

// The head blocks of the group in rank order, (first head, count): the query heads each rank
// attends, and the kv heads they read (ulysses_head_share).
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

// Per local query head i (of h.q_count): the local kv head it reads, (q_first + i) / G - kv_first,
// G = Hq / Hkv. With HeadShare::expand the kv heads are repeated to these (repeat_kv_heads).
std::vector<int64_t> kv_read_by(const HeadShare& h, int64_t G) {
  std::vector<int64_t> kv_of;
  for (int64_t i = 0; i < h.q_count; ++i) kv_of.push_back((h.q_first + i) / G - h.kv_first);
  return kv_of;
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
  if (mine.expand) {
    const std::vector<int64_t> kv_of = kv_read_by(mine, G);
    saved.k = repeat_kv_heads(saved.k, kv_of, ctx.act);
    saved.v = repeat_kv_heads(saved.v, kv_of, ctx.act);
  }
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
  if (mine.expand) {  // a repeated kv head's gradient: the sum over its copies
    const std::vector<int64_t> kv_of = kv_read_by(mine, G);
    g.dk = sum_kv_heads(ctx.be, g.dk, kv_of, mine.kv_count, ctx.ws);
    g.dv = sum_kv_heads(ctx.be, g.dv, kv_of, mine.kv_count, ctx.ws);
  }
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

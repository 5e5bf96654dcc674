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

#include <algorithm>

#include "comm/tensor_comm.h"
#include "parallel/groups.h"
#include "parallel/ring_attention.h"
#include "parallel/shares.h"

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


// ---- the schemes: a2a (Ulysses) and a2a+p2p (Ulysses around a K/V ring, USP) (parallel/cp_scheme.h)

namespace {

// The all-to-alls' bytes over U (k and v blocks sized by the heads each rank reads: Jacobs et al.
// 2023's 4 N h / P per link when Hkv = H): (U-1) blocks of q, k, v and out forward; of dout, dq,
// dk and dv backward.
CommBytes all_to_all_bytes(const Shares& mine, DType dt) {
  const int U = mine.par.a2a_size();
  const int64_t tok = mine.b * mine.n_c * mine.d * dtype_size(dt);  // one head of our tokens
  int64_t kv_out = 0;                                               // K heads we send: each rank reads its own
  for (int j = 0; j < U; ++j)
    if (j != mine.at.u) kv_out += ulysses_head_share(mine.H_t, mine.Hkv_t, U, j).kv_count * tok;
  const int64_t q_blocks = (U - 1) * mine.heads.q_count * tok;
  return {2 * q_blocks + 2 * kv_out,                                 // q, k, v; out back
          2 * q_blocks + 2 * (U - 1) * mine.heads.kv_count * tok};   // dout; dq, dk, dv back
}

// What Ulysses keeps: out in sequence layout, N_c H_t d, and in head layout q, k, v, out and lse
// of U N_c tokens for its heads, U N_c (q_count (2 d + 1) + 2 kv d) (kv: the kv heads it reads).
int64_t head_layout_saved_elems(const Shares& mine) {
  return mine.b * mine.n_c * mine.H_t * mine.d +
         mine.par.a2a_size() * mine.b * mine.n_c * (mine.heads.q_count * (2 * mine.d + 1) + 2 * mine.heads.kv_attended() * mine.d);
}

// The all-to-all of q (and of the output back): its send and receive buffers, N_c H_t d each;
// k's and v's are no larger.
int64_t all_to_all_peak(const Shares& mine, DType dt) { return 2 * mine.b * mine.n_c * mine.H_t * mine.d * dtype_size(dt); }

// USP's ring block after the all-to-all: U N_c tokens of the kv heads this rank reads.
int64_t head_layout_kv_bytes(const Shares& mine, DType dt) {
  return mine.par.a2a_size() * mine.b * mine.n_c * mine.heads.kv_attended() * mine.d * dtype_size(dt);
}

std::unique_ptr<SequenceAttention> make_ulysses(const ProcessGroups& groups, const RingLayout&, const AttentionSpec& spec,
                                                const RankContext& ctx) {
  return std::make_unique<UlyssesAttention>(*groups.a2a, std::make_unique<LocalAttention>(spec, ctx), ctx);
}

std::unique_ptr<SequenceAttention> make_ulysses_ring(const ProcessGroups& groups, const RingLayout& layout,
                                                     const AttentionSpec& spec, const RankContext& ctx) {
  return std::make_unique<UlyssesAttention>(*groups.a2a, std::make_unique<RingAttention>(*groups.ring, layout, spec, ctx), ctx);
}

}  // namespace

const CpScheme& ulysses_cp_scheme() {
  static const CpScheme scheme{
      .name = "a2a",
      .te_name = "a2a",
      .strategy = {"ulysses"},
      .summary = "DeepSpeed-Ulysses: all-to-all from sequence to heads around attention",
      .group_words = "the Ulysses all-to-all",
      .collective_words = "all-to-all",
      .family = "ulysses",
      .groups = {.a2a = true},
      .tile_map = trace::kTileMapEveryRank,
      .record_cost = 2,
      .make = make_ulysses,
      .saved_elems = head_layout_saved_elems,
      .bytes_sent = all_to_all_bytes,
      .comm_peak = all_to_all_peak,
      .flops = whole_sequence_flops,  // whole sequences, our heads
      .hop_bytes = [](const Shares&, DType) { return int64_t(0); },
  };
  return scheme;
}

const CpScheme& ulysses_ring_cp_scheme() {
  static const CpScheme scheme{
      .name = "a2a+p2p",
      .te_name = "a2a+p2p",
      .strategy = {"ulysses", "ring"},
      .summary = "Ulysses x ring (USP): the all-to-all inside groups, the K/V ring across them",
      .group_words = "Ulysses x ring",
      .collective_words = "all-to-all and ring",
      .family = "ulysses x ring",
      .groups = {.a2a = true, .ring = true},
      .token_layout = true,
      .hop_carries = "K/V",
      .record_cost = 4,
      .when_a2a_is_one = "p2p",
      .when_ring_is_one = "a2a",
      .make = make_ulysses_ring,
      .saved_elems = head_layout_saved_elems,
      .bytes_sent = [](const Shares& mine, DType dt) {
        CommBytes sent = all_to_all_bytes(mine, dt);
        const CommBytes ring = ring_attention_bytes(head_layout_kv_bytes(mine, dt), mine.par.ring_size());
        sent.forward += ring.forward, sent.backward += ring.backward;
        return sent;
      },
      // The all-to-all, then the ring of head-layout K/V blocks: the larger.
      .comm_peak = [](const Shares& mine, DType dt) { return std::max(all_to_all_peak(mine, dt), 4 * head_layout_kv_bytes(mine, dt)); },
      .flops = [](const Shares& mine) {
        return ring_attention_flops(*mine.plan.ring, mine.spec(), mine.at.r, mine.b, mine.heads.q_count,
                                    mine.heads.kv_attended(), mine.d);
      },
      .hop_bytes = [](const Shares& mine, DType dt) { return 2 * head_layout_kv_bytes(mine, dt); },
  };
  return scheme;
}

}  // namespace ringside

// The pass-Q ring, the attention-level algorithm: ring attention turned around. K and V stay
// home while the query blocks travel around a ring of R ranks, each carrying its running
// (out, lse), into which every rank it visits merges its own keys' part; in the backward the
// query block travels with out, dout, lse and its dQ accumulator, while dK/dV accumulate at
// home. The file comment of ring_q_attention.cpp says why the results travel with the queries.
#pragma once
#include "parallel/attention.h"

namespace ringside {

/// The forward over `ring` (R ranks): returns this rank's out [b, n, Hq, d] and lse [b, Hq, n]
/// (allocated as ctx.act) over every key the mask lets its queries see, n = S / R (S the padded
/// length, layout.packing().S). q [b, n, Hq, d], k, v [b, n, Hkv, d] are the rank's tokens in
/// layout order (layout.positions(rank), R = layout.ranks()). At step i the rank computes the
/// queries of ring rank (r - i) mod R against its own keys; step records (optional `steps`)
/// name that rank as block_of, and the (query run x key run) pairs the mask (causal,
/// documents, window, padding) hides wholly as skipped. Each query hop is posted before the
/// step's compute and hides behind it; each running result's hop, posted after it, hides
/// behind the next rank's compute, all but the last one home. Throws CommError when a transfer
/// fails or times out.
AttentionOut ring_q_attention_forward(Communicator& ring, const RingLayout& layout, const AttentionSpec& spec,
                                      const RankContext& ctx, const Tensor& q, const Tensor& k, const Tensor& v,
                                      std::vector<StepRecord>* steps = nullptr);

/// The backward ring: each query block travels again with its out, dout and saved global lse
/// (the kernel recomputes the probabilities from lse, and D = rowsum(dout * out) from out),
/// and its dQ accumulator one hop behind, as the forward's running result; dK and dV of our
/// keys accumulate at home and never move. Returns dq [b, n, Hq, d], dk, dv [b, n, Hkv, d]
/// (ctx.ws). Throws CommError as the forward.
AttentionGrads ring_q_attention_backward(Communicator& ring, const RingLayout& layout, const AttentionSpec& spec,
                                         const RankContext& ctx, const Tensor& q, const Tensor& k, const Tensor& v,
                                         const AttentionOut& fwd, const Tensor& dout,
                                         std::vector<StepRecord>* steps = nullptr);

/// Forward attention FLOPs ring rank `rank` computes under `layout`: every rank's queries
/// against its own keys (visible query-key pairs, 4 d per pair per head, as
/// attention_forward_flops counts them) with b, Hq, Hkv, d. Over the ranks the same total as
/// ring_attention_flops, distributed by keys instead of by queries.
double ring_q_attention_flops(const RingLayout& layout, const AttentionSpec& spec, int rank, int64_t b, int64_t Hq,
                              int64_t Hkv, int64_t d);

/// What one rank of the pass-Q ring sends and holds in communication buffers (MemCategory::comm),
/// in bytes.
struct RingQBytes {
  int64_t forward = 0, backward = 0;            ///< sent in each phase
  int64_t forward_peak = 0, backward_peak = 0;  ///< held in communication buffers
};

/// ring_q_bytes for a rank holding n tokens of R, with a query block of q = b n Hq d elements
/// (out, dout and dQ are its size) and its lse of l = b Hq n, all of element type dt (lse is
/// stored in the run's type):
///   forward        (R - 1)(2 q + l)  q travels R - 1 hops (steps 0 to R - 2), its running
///                                    (out, lse) R - 1 (steps 1 to R - 1, the last one home)
///   backward       (R - 1)(4 q + l)  q, out, dout and lse R - 1 hops, dQ R - 1
///   forward peak   4 q + 2 l         two receive buffers of q, two running (out, lse)
///   backward peak  8 q + 2 l         two receive buffers of q, out, dout and lse, two dQ
/// times sizeof(dt). Against the K/V ring's 2 (R - 1) kv forward and 2 (2 R - 1) kv backward
/// (kv = b n Hkv d elements): with Hq = Hkv the forwards are equal to the lse, 2 d + 1 against
/// 2 d per head and token, and the backward is lighter when R - 1 < 2 d (the diagonal's dQ stays
/// home, where the K/V ring's dK/dV make R hops); under grouped-query attention the pass-Q ring
/// moves Hq / Hkv times more.
RingQBytes ring_q_bytes(int64_t b, int64_t n, int64_t Hq, int64_t d, int R, DType dt);

/// The pass-Q ring as a SequenceAttention over `ring`.
class RingQAttention : public SequenceAttention {
 public:
  RingQAttention(Communicator& ring, const RingLayout& layout, const AttentionSpec& spec, const RankContext& ctx)
      : ring_(ring), layout_(layout), spec_(spec), ctx_(ctx) {}
  AttentionOut forward(const Tensor& q, const Tensor& k, const Tensor& v) override;
  AttentionGrads backward(const Tensor& q, const Tensor& k, const Tensor& v, const AttentionOut& fwd,
                          const Tensor& dout) override;

 private:
  Communicator& ring_;
  RingLayout layout_;
  AttentionSpec spec_;
  RankContext ctx_;
};

}  // namespace ringside

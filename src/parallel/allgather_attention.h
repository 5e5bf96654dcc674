// All-gather context parallelism, as Llama 3 trained with it (Dubey et al. 2024, "The Llama 3
// Herd of Models", section 3.3.2): instead of passing K/V around a ring, every rank all-gathers
// them, attends its queries to the whole sequence, and reduce-scatters dK/dV in the backward.
// Simpler than the ring and easy to mask, at the price of a transient full-sequence K/V.
#pragma once
#include "parallel/ring_attention.h"

namespace ringside {

/// The forward over `group` (C = layout.ranks() ranks, rank j holding layout.positions(j)): all-
/// gathers k and v [b, n, Hkv, d] into sequence order ([b, S, Hkv, d], S the padded length,
/// ctx.comm: transient),
/// then attends each of the rank's query runs to every key at its global position. Returns out
/// [b, n, Hq, d] and lse [b, Hq, n] (ctx.act).
AttentionOut allgather_attention_forward(Communicator& group, const RingLayout& layout, const AttentionSpec& spec,
                                         const RankContext& ctx, const Tensor& q, const Tensor& k, const Tensor& v);

/// The backward: all-gathers k and v again (not kept: that is the memory the ring saves),
/// computes dq and the whole sequence's partial dK/dV, and reduce-scatters those by token
/// positions so that each rank gets the sum for its own tokens.
AttentionGrads allgather_attention_backward(Communicator& group, const RingLayout& layout, const AttentionSpec& spec,
                                            const RankContext& ctx, const Tensor& q, const Tensor& k, const Tensor& v,
                                            const AttentionOut& fwd, const Tensor& dout);

/// Forward attention FLOPs rank `rank` of C computes: each of its query runs against every key
/// the mask lets it see (4 d per visible pair per head, as attention_forward_flops counts them).
double allgather_attention_flops(const RingLayout& layout, const AttentionSpec& spec, int rank, int64_t b, int64_t Hq,
                                 int64_t Hkv, int64_t d);

/// The transient bytes of the gathered K/V on one rank: 2 b s Hkv d sizeof(T).
int64_t allgather_kv_bytes(int64_t b, int64_t s, int64_t Hkv, int64_t d, DType dt);

/// All-gather CP as a SequenceAttention over `group`.
class AllGatherAttention : public SequenceAttention {
 public:
  AllGatherAttention(Communicator& group, const RingLayout& layout, const AttentionSpec& spec, const RankContext& ctx)
      : group_(group), layout_(layout), spec_(spec), ctx_(ctx) {}
  AttentionOut forward(const Tensor& q, const Tensor& k, const Tensor& v) override {
    flops += allgather_attention_flops(layout_, spec_, group_.rank(), q.dim(0), q.dim(2), k.dim(2), q.dim(3));
    return allgather_attention_forward(group_, layout_, spec_, ctx_, q, k, v);
  }
  AttentionGrads backward(const Tensor& q, const Tensor& k, const Tensor& v, const AttentionOut& fwd,
                          const Tensor& dout) override {
    return allgather_attention_backward(group_, layout_, spec_, ctx_, q, k, v, fwd, dout);
  }

 private:
  Communicator& group_;
  RingLayout layout_;
  AttentionSpec spec_;
  RankContext ctx_;
};

}  // namespace ringside

// Ring attention (Liu, Zaharia & Abbeel 2023), the attention-level algorithm: the K/V blocks
// travel around a ring of R ranks while each rank computes its queries against the block it
// holds; in the backward the dK/dV accumulators travel with their block.
#pragma once
#include "parallel/attention.h"
#include "parallel/cp_scheme.h"

namespace ringside {

/// The forward ring over `ring` (R ranks): returns this rank's out [b, n, Hq, d] and lse
/// [b, Hq, n] (allocated as ctx.act) over every key the mask lets it see, n = S / R (S the
/// padded length, layout.packing().S). q [b, n, Hq, d], k, v [b, n, Hkv, d] are the rank's
/// tokens in layout order (layout.positions(rank), R = layout.ranks()). A (query run x key run)
/// pair the mask (causal, documents, window, padding) hides wholly is skipped, and the step
/// records name it. The next K/V
/// block is posted before each step's compute (double buffering), so the transfer hides
/// behind the compute when a block's compute outlasts it. Per step records go to `steps`
/// (optional). Throws CommError when a transfer fails or times out.
AttentionOut ring_attention_forward(Communicator& ring, const RingLayout& layout, const AttentionSpec& spec,
                                    const RankContext& ctx, const Tensor& q, const Tensor& k, const Tensor& v,
                                    std::vector<StepRecord>* steps = nullptr);

/// The backward ring: recomputes each block's probabilities from the saved global lse; dQ
/// accumulates at home while each block's dK/dV accumulators travel with it, one hop per step
/// (moving during the next step's compute), and come home after R hops (ring-flash-attention's
/// schedule). Returns dq [b, n, Hq, d], dk, dv [b, n, Hkv, d].
AttentionGrads ring_attention_backward(Communicator& ring, const RingLayout& layout, const AttentionSpec& spec,
                                       const RankContext& ctx, const Tensor& q, const Tensor& k, const Tensor& v,
                                       const AttentionOut& fwd, const Tensor& dout,
                                       std::vector<StepRecord>* steps = nullptr);

/// Forward attention FLOPs ring rank `rank` computes under `layout` (visible query-key pairs,
/// 4 d per pair per head, as attention_forward_flops counts them) with b, Hq, Hkv, d.
double ring_attention_flops(const RingLayout& layout, const AttentionSpec& spec, int rank, int64_t b, int64_t Hq,
                            int64_t Hkv, int64_t d);

/// Bytes one rank of a ring of R sends when each K and V block is `kv_bytes`: K and V pass R-1
/// hops forward, 2 kv; in the backward again, and the dK/dV accumulators all R hops home,
/// 2 kv (2R-1) (ring-flash-attention's schedule). Nothing when R = 1.
CommBytes ring_attention_bytes(int64_t kv_bytes, int R);

/// The ring as a SequenceAttention over `ring`.
class RingAttention : public SequenceAttention {
 public:
  RingAttention(Communicator& ring, const RingLayout& layout, const AttentionSpec& spec, const RankContext& ctx)
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

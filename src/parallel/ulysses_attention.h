// DeepSpeed-Ulysses (Jacobs et al. 2023), the attention-level algorithm: an all-to-all turns
// a group's sequence shards into head shards, an inner attention runs on the whole (group's)
// sequence for this rank's heads, and a second all-to-all turns the output back.
#pragma once
#include "parallel/attention.h"

namespace ringside {

/// The heads rank u of an all-to-all group of U attends: query heads [q_first, q_first +
/// q_count) of Hq, and the kv heads they read, [kv_first, kv_first + kv_count) of Hkv (head i
/// reads kv head i / (Hq / Hkv)). With grouped-query attention a kv head can be read by query
/// heads on two ranks (Hq 6, Hkv 3, U 2): it is sent to both. `expand`: the kernel's own
/// mapping (local head i reads local kv head i / (q_count / kv_count)) would be wrong for these
/// heads, so the kv heads are repeated to one per query head after they arrive.
struct HeadShare {
  int64_t q_first = 0, q_count = 0, kv_first = 0, kv_count = 0;
  bool expand = false;
  /// The kv heads the inner attention reads: q_count when expanded, else kv_count.
  int64_t kv_attended() const { return expand ? q_count : kv_count; }
};
/// Throws ConfigError unless U divides Hq and Hkv divides Hq.
HeadShare ulysses_head_share(int64_t Hq, int64_t Hkv, int U, int u);

/// What the all-to-all attention keeps for its backward: q, k, v in head layout (k and v as the
/// inner attention reads them) and the inner attention's out and lse.
struct UlyssesSaved {
  Tensor q, k, v;
  AttentionOut inner;
  int64_t Hkv = 0;  ///< kv heads in sequence layout
};

/// The forward over `a2a` (U ranks), each holding n tokens: all-to-all q [b, n, Hq, d], k and v
/// [b, n, Hkv, d] from sequence to heads ([b, U n, q_count, d], the group's U n tokens in rank
/// order), run `inner` on them (local attention, or a ring over another group), and all-to-all
/// its output back to out [b, n, Hq, d] (ctx.act). Fills `saved` (ctx.act).
Tensor ulysses_attention_forward(Communicator& a2a, SequenceAttention& inner, const RankContext& ctx, const Tensor& q,
                                 const Tensor& k, const Tensor& v, UlyssesSaved& saved);

/// The backward from dout [b, n, Hq, d]: dout to heads, the inner backward, and dq, dk, dv back
/// to sequence layout; a kv head's gradient sums the contributions of every rank that read it.
AttentionGrads ulysses_attention_backward(Communicator& a2a, SequenceAttention& inner, const RankContext& ctx,
                                          const UlyssesSaved& saved, const Tensor& dout);

/// Ulysses as a SequenceAttention (it keeps its own head-layout copies: keeps_inputs false).
class UlyssesAttention : public SequenceAttention {
 public:
  UlyssesAttention(Communicator& a2a, std::unique_ptr<SequenceAttention> inner, const RankContext& ctx)
      : a2a_(a2a), inner_(std::move(inner)), ctx_(ctx) {}
  AttentionOut forward(const Tensor& q, const Tensor& k, const Tensor& v) override;
  AttentionGrads backward(const Tensor& q, const Tensor& k, const Tensor& v, const AttentionOut& fwd,
                          const Tensor& dout) override;
  /// The forward again, leaving the inner attention's flops and steps (a ring's) the forward's.
  AttentionOut recompute(const Tensor& q, const Tensor& k, const Tensor& v) override;
  void drop_saved() override;
  bool keeps_inputs() const override { return false; }

 private:
  Communicator& a2a_;
  std::unique_ptr<SequenceAttention> inner_;
  RankContext ctx_;
  UlyssesSaved saved_;
};

}  // namespace ringside

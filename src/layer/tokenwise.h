// The token-wise parts of the layer, around attention, on one rank of a tensor-parallel group.
//
// With T = 1 (no TP) a rank holds whole tokens and every weight: every op outside attention is
// token-wise and runs on the rank's tokens alone, exactly as the reference does on all of them.
// With T > 1 (Megatron TP with sequence parallelism; Shoeybi et al. 2019, Korthikanti et al.
// 2022; lesson 2) the two matrix blocks are split: W_qkv by heads and W_1 by columns of f
// (column-parallel; SwiGLU's gate and up each by the same f/T columns, so a rank's fused W_1
// holds [its gate | its up], as Megatron-Core splits linear_fc1), W_o and W_2 by rows
// (row-parallel). The norm, dropout and residual
// region is split by sequence: each TP rank holds 1/T of the group's tokens there. Entering a
// column-parallel block an all-gather rebuilds the group's tokens (Megatron's g); leaving a
// row-parallel block a reduce-scatter sums the partial outputs and splits them by sequence
// again (g-bar). The backward of each is the other. Plain TP (no --sequence-parallel, the
// configuration "tp") keeps all n tokens on every TP rank there instead: entering a block is
// the identity and leaving it an all-reduce, and every rank computes the norms, dropout and
// residual on all n tokens, the same on each (Korthikanti et al.'s 10 s b h a rank keeps whole).
//
// Shapes: the TP group holds n tokens (a context-parallel shard, or the whole sequence), each TP
// rank n/T of them between the blocks (plain TP: n): x, dout, out, dx [b, n/T, h]; q [b, n, H/T, d]; k, v
// [b, n, Hkv/T, d]; the attention output a [b, n, H/T, d].
#pragma once
#include <functional>
#include <vector>

#include "comm/communicator.h"
#include "device/backend.h"
#include "layer/config.h"
#include "layer/norm_mlp.h"
#include "layer/weights.h"

namespace ringside {

/// Where a rank's tokens sit: `own`, the global token index of each of its n/T between the TP
/// blocks (dropout's key), and `group`, the RoPE position of each of the TP group's n, in local
/// order (layer/packing.h: in a packed sequence, by default, the index in the token's document).
struct TokenPositions {
  std::vector<int64_t> own, group;
};

/// What the token-wise parts keep for backward: tagged as saved activations, except what
/// the run's recomputation makes again in the backward (workspace until drop_recomputed releases it at
/// the forward's end): selective keeps x, x2 and u; full keeps only x.
struct TokenwiseSaved {
  Tensor x, x2, u, g;
  NormOutput n1, n2;  ///< the norms' outputs h1, h2 and statistics
};

/// TP rank t of T's share of the reference's weights (drawn from cfg.seed as the reference
/// draws them): the norms and the row-parallel biases whole, W_qkv and b_qkv by heads
/// (its q, k and v heads), W_1 and b_1 by columns (SwiGLU: its f/T of the gate's and of the
/// up's), W_o and W_2 by rows. T = 1: all of them.
LayerWeights tp_shard_weights(const LayerConfig& cfg, int T, int t, DType dt, AllocTag tag);
/// The whole gradients from every TP rank's shards (collective over `tp`): the inverse of
/// tp_shard_weights. The sequence-parallel ones must already be summed over the group.
LayerWeights gather_tp_grads(const LayerConfig& cfg, Communicator& tp, const LayerWeights& shard, AllocTag tag);
/// The parameters of the sequence-parallel region (both norms' gamma and beta, o.bias,
/// fc2.bias, those the layer has): whole on every TP rank, their gradients partial sums over
/// its tokens until all-reduced. Their count: 2 norm_params + (bias ? 2 h : 0).
int64_t sequence_parallel_param_count(const LayerConfig& cfg);
/// The tensors themselves (sequence_parallel_param_count elements in all).
std::vector<Tensor*> sequence_parallel_params(LayerWeights& w);
/// A copy of w's sequence-parallel tensors (tagged `tag`), the rest undefined.
LayerWeights sequence_parallel_copy(const LayerWeights& w, AllocTag tag);

/// One rank's view of the token-wise parts: the layer, the rank's weight shards (tp_shard_weights),
/// its TP group, where its tokens sit, what the run recomputes (LayerConfig's Recompute), and
/// the tag of its workspace.
struct TpRank {
  const LayerConfig& cfg;
  const LayerWeights& w;
  Backend& be;
  Communicator& tp;
  const TokenPositions& pos;
  Recompute recompute;
  AllocTag ws;
  /// Megatron's --sequence-parallel: n/T tokens a rank between the blocks; false: all n, and
  /// the blocks end in all-reduces (plain TP).
  bool sequence_parallel = true;
};

/// Norm 1 on the rank's tokens, all-gather over the TP group, the QKV projection for the
/// rank's heads and RoPE: fills q, k, v (tagged qkv_tag). Saves x and norm 1's output and
/// statistics (tagged `act` unless recomputed).
void qkv_forward(const TpRank& r, const Tensor& x, TokenwiseSaved& sv, Tensor& q, Tensor& k, Tensor& v, AllocTag act,
                 AllocTag qkv_tag);
/// From the attention output a to the layer's output [b, n/T, h]: W_o and a reduce-scatter,
/// dropout 1, residual, norm 2, an all-gather and the MLP, a reduce-scatter, dropout 2,
/// residual. Saves x2, norm 2's output and statistics, u and g.
Tensor post_attention_forward(const TpRank& r, const Tensor& a, TokenwiseSaved& sv, AllocTag act);
/// Its backward from dout: adds the o, ln2, fc1 and fc2 gradients into gw, sets dx2 (the
/// gradient reaching the first residual) and returns da [b, n, H/T, d]. `mlp_grads_done`, when
/// given, is called as soon as the fc1 and fc2 gradients are complete (before norm 2's
/// backward): where a bucketed gradient all-reduce posts the MLP's bucket.
Tensor post_attention_backward(const TpRank& r, const Tensor& a, const Tensor& dout, const TokenwiseSaved& sv,
                               LayerWeights& gw, Tensor& dx2, const std::function<void()>& mlp_grads_done = {});
/// At the forward's end, releases what `recompute` makes again in the backward (selective:
/// the norms' outputs and statistics and the activation g; full: everything but x).
void drop_recomputed(Recompute recompute, TokenwiseSaved& sv);
/// Selective recomputation, at the backward's start: both norms again from x and x2 and the
/// activation (GeLU, or SwiGLU's product) again from u, bit for bit the forward's (tagged
/// workspace; phase "recompute" on the trace). Extra work per rank: two norms of n/T tokens
/// and an activation of n f/T elements.
void recompute_tokenwise(const TpRank& r, TokenwiseSaved& sv);
/// The backward of qkv_forward from dq, dk, dv (RoPE undone in place): adds the qkv and ln1
/// gradients into gw and returns dx = norm 1's backward + dx2.
Tensor qkv_backward(const TpRank& r, Tensor& dq, Tensor& dk, const Tensor& dv, const TokenwiseSaved& sv, const Tensor& dx2,
                    LayerWeights& gw);

}  // namespace ringside

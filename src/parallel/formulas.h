// The analytic formulas of every configuration: what one rank saves for the backward, sends in
// each phase, holds in transfer buffers and computes in attention. TP's parts and the gradient
// all-reduce are here; each context-parallel scheme's attention part is its own (its
// CpScheme, at the end of its algorithm file), and these add it in. compare prints each beside the
// measured value, and the tests hold the two equal, byte for byte (docs/design.md's formulas and the
// papers each line cites).
#pragma once
#include "core/tensor.h"
#include "parallel/run_plan.h"

namespace ringside {

/// Every formula counts the padded sequence's S slots (plan.packing; S = s when s divides):
/// a padding token costs what a real one does.
///
/// Saved-activation bytes of world rank `rank`, with N_t = b S / (T C) tokens between the TP
/// blocks (b S / C under plain TP, which keeps every token there: Korthikanti et al.'s 10 s b h
/// whole on each rank, here 4 h + 2 z elements a token, the dropout masks being redrawn), N_c = b S / C in its CP shard, H_t = H/T, Hkv_t = Hkv/T, f_t = f/T, u_t = F/T (W_1's
/// output: F = f, or 2 f for SwiGLU's gate and up) and z the norm's statistics per token (2
/// LayerNorm, 1 RMSNorm):
///   token-wise   N_t (4 h + 2 z) + N_c (u_t + f_t)  (x, h1, x2, h2, the norms' statistics; u, g)
///                (GeLU and LayerNorm: N_t (4 h + 4) + 2 N_c f_t; SwiGLU and RMSNorm:
///                N_t (4 h + 2) + 3 N_c f_t, since SwiGLU's backward reads gate and up)
///   attention, when the algorithm keeps its inputs (none, p2p, all_gather, p2p-q):
///                N_c (2 H_t d + 2 Hkv_t d + H_t)    (q, k, v, out, lse)
///   attention, a2a and a2a+p2p, with U n = N_c U tokens after the all-to-all and this rank's
///   heads (HeadShare): N_c H_t d (out, sequence layout) + U N_c (q_count (2 d + 1) + 2 kv d),
///   kv = HeadShare::kv_attended() (q, k, v, out and lse in head layout).
/// times sizeof(T). T = P gives Korthikanti et al. 2022's 1/P of the reference; the ring and
/// Ulysses formulas of docs/design.md are the cases C = P. Under plan.recompute():
///   selective  token-wise N_t 2 h + N_c u_t (x, x2; u), attention as above
///   full       N_t h alone (x: Korthikanti et al.'s 2 s b h per layer in 16-bit, / (T C))
int64_t parallel_saved_bytes(const RunPlan& plan, int rank, DType dt);

/// Bytes world rank `rank` sends in each phase (ring collectives' bytes from tensor_comm.h):
///   TP, forward: 2 all-gathers + 2 reduce-scatters of N_c h over T (Korthikanti et al. 2022,
///     4.2.2); backward: 4 all-gathers (two re-gather the norm outputs) + 2 reduce-scatters,
///     and an all-reduce over T of the sequence-parallel parameter gradients (6 h: both
///     LayerNorms' gamma and beta, o.bias and fc2.bias; 2 h for two RMSNorms and no biases).
///     Plain TP (no SP): an all-reduce of N_c h over T leaving each block forward, and entering
///     each backward, 2 (T-1)/T N_c h each: 4 all-reduces in all, 8 half-collectives where TP+SP
///     has 10 (its backward's two re-gathers), and no parameter all-reduce (the norms'
///     gradients are whole on every rank).
///     The TP activations are h wide whatever the MLP: SwiGLU changes none of these volumes
///     but the gradient all-reduces below, which follow the parameter count.
///   p2p (R = C, or C/U under a2a+p2p): K and V pass R-1 hops forward, 2 kv, and in the
///     backward again plus dK/dV all R hops home, 2 kv (2R-1); kv = the block's K bytes.
///   p2p-q (the pass-Q ring, R = C): (R-1)(2 q + l) forward, the queries and their running (out,
///     lse); (R-1)(4 q + l) backward, q, out, dout and lse and the dQ accumulator; q = N_c H_t d,
///     l = N_c H_t (ring_q_bytes).
///   all_gather: 2 all-gathers of K/V over C forward; the same again and 2 reduce-scatters of
///     the whole sequence's dK/dV backward.
///   a2a: (U-1) blocks of q, k, v and out forward (k and v blocks sized by the heads each rank
///     reads: Jacobs et al. 2023's 4 N h / P per link when Hkv = H); the same four backward.
///   and an all-reduce over C of every gradient (weights are replicated over CP).
///   Full recomputation adds the forward's bytes to the backward's (the forward runs again).
CommBytes parallel_comm_bytes(const RunPlan& plan, int rank, DType dt);

/// The classes of parallel_comm_bytes' traffic: TP's all-gathers (g forward, and the backward's
/// re-gathers), its reduce-scatters (g-bar), its all-reduces (the sequence-parallel parameters'
/// gradients; plain TP's four all-reduces of N_c h), the attention's own (the CP scheme's
/// formula: the K/V ring, the all-gather and dK/dV reduce-scatter, the all-to-alls), and the
/// weight gradients' all-reduce over C.
enum class CommClass { tp_all_gather, tp_reduce_scatter, tp_all_reduce, cp_attention, grad_all_reduce };
/// The class's words: "TP all-gather", "CP attention", "gradient all-reduce over CP".
const char* to_string(CommClass k);

/// Bytes of one class a rank sends, forward and backward.
struct ClassBytes {
  CommClass what = CommClass::tp_all_gather;
  CommBytes bytes;
};

/// parallel_comm_bytes by class, every class in CommClass's order (those a configuration does
/// not use with 0 bytes): their sums over the classes are parallel_comm_bytes, byte for byte.
/// Full recomputation adds each class's forward to its backward.
std::vector<ClassBytes> parallel_comm_bytes_by_class(const RunPlan& plan, int rank, DType dt);

/// Peak bytes world rank `rank` holds in communication buffers (MemCategory::comm) during the
/// forward: the larger of TP's reduce-scatter, 3 N_c h / T (one chunk arriving, two partial sums;
/// plain TP's all-reduce starts with the same reduce-scatter),
/// and the attention's transfers:
///   p2p: two K and two V blocks, the one computed on and the one arriving, 4 N_c Hkv_t d
///     (a2a+p2p: 4 U N_c kv d, the ring's block after the all-to-all);
///   p2p-q: two receive buffers of q and two running (out, lse), 4 q + 2 l (as above);
///   all_gather: the whole sequence's K and V, 2 b S Hkv_t d (Llama 3's price, allgather_kv_bytes),
///     plus V's gather buffer before it is put in sequence order, b S Hkv_t d;
///   a2a: the all-to-all of q's send and receive buffers, 2 N_c H_t d (k's and v's are no
///     larger); a2a+p2p: the larger of that and the ring's.
/// times sizeof(T).
int64_t parallel_forward_comm_peak(const RunPlan& plan, int rank, DType dt);

/// Parameters one rank holds (and gradients it keeps), of its TP shard: W_qkv's and W_1's columns
/// and W_o's and W_2's rows divided by T, the norms and the row-parallel biases whole:
/// h (H + 2 Hkv) d / T + H d h / T + h F / T + f h / T (F = f, or 2 f for SwiGLU), with biases
/// + (H + 2 Hkv) d / T + F / T + 2 h, and the norms' 4 h (LayerNorm) or 2 h (RMSNorm). The GPT
/// layer: h (H + 2 Hkv) d / T + (H + 2 Hkv) d / T + H d h / T + h + 2 h f / T + f / T + h + 4 h.
/// Replicated over CP (the same on every rank of a configuration).
int64_t parallel_param_count(const RunPlan& plan);

/// Forward attention FLOPs world rank `rank` computes (visible query-key pairs under the mask:
/// causal, documents, window, padding; 4 d per pair per head): the per-rank work table.
double parallel_attention_flops(const RunPlan& plan, int rank);

/// The kv heads Ulysses gives each of P ranks, times P: Hkv when P divides it, else P (when
/// Hkv divides P each rank receives the one kv head its query heads read).
int64_t ulysses_kv_heads(const LayerConfig& cfg, int P);

}  // namespace ringside

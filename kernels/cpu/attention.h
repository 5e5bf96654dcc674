// Blockwise attention on the CPU (FlashAttention-2 style, Dao 2023): online softmax over key
// blocks, returning out and the row log-sum-exp (lse); the s x s score matrix is never stored.
// The call's contract (AttentionParams: layouts, the mask on global positions, documents and
// window; validate; the FLOP count) is the backends' common one, kernels/attention_params.h.
//
// Two versions of the kernels, in the spirit of llm.c's dev/cuda versions:
//   version 1 (attention_v1.cpp)  the algorithm as the paper writes it, each tile's products one
//                                 BLAS call; float and double (double is the layer's fp64 kernel)
//   version 2 (attention_v2.cpp)  float only: K and V packed once per head, one register-blocked
//                                 micro-kernel for every product, the online softmax fused into
//                                 the tile loop, one path per vector ISA (kernels/cpu/isa.h)
// attention_forward / attention_backward pick version 2 for float and version 1 for double.
#pragma once
#include <cstdint>

#include "kernels/attention_params.h"

namespace ringside::kernels::cpu {

// The contract, under the names the CPU kernels and their callers have always used.
using kernels::AttentionParams;
using kernels::attention_forward_flops;
using kernels::DocumentMask;
using kernels::KeyRange;
using kernels::validate;
using kernels::visible_key_range;

/// The smallest range holding both (an empty range adds nothing).
inline KeyRange hull(const KeyRange& a, const KeyRange& b) {
  if (a.empty()) return b;
  if (b.empty()) return a;
  return {a.begin < b.begin ? a.begin : b.begin, a.end > b.end ? a.end : b.end};
}

/// Forward: out = softmax(q k^T * softmax_scale + mask) v and lse = log sum exp of each row's
/// scaled scores. A row with no visible key gets out 0 and lse -inf (never NaN). Tiles that the
/// mask (causal, documents, window) hides entirely are skipped. FLOPs: attention_forward_flops.
template <class T>
void attention_forward(const AttentionParams& p, const T* q, const T* k, const T* v, T* out, T* lse);

/// Backward: *adds* dq, dk, dv for this (query block, key block) pair, recomputing the
/// probabilities from the saved lse: P = exp(q k^T * scale - lse), dV += P^T dout,
/// dP = dout v^T, dS = P (dP - D) with D = rowsum(dout * out), dq += scale dS k,
/// dk += scale dS^T q (Dao 2023, Algorithm 2). `out` and `lse` must be the final values over
/// *all* keys, so a ring step can call this with one key block at a time. Rows with lse = -inf
/// contribute nothing. FLOPs: 2.5 times the forward's.
template <class T>
void attention_backward(const AttentionParams& p, const T* q, const T* k, const T* v, const T* out,
                        const T* dout, const T* lse, T* dq, T* dk, T* dv);

/// The two versions behind attention_forward / attention_backward, with the same contract.
template <class T>
void attention_forward_v1(const AttentionParams& p, const T* q, const T* k, const T* v, T* out, T* lse);
template <class T>
void attention_backward_v1(const AttentionParams& p, const T* q, const T* k, const T* v, const T* out, const T* dout,
                           const T* lse, T* dq, T* dk, T* dv);
/// Version 2 runs the path of active_cpu_isa() (kernels/cpu/isa.h). Throws ringside::Error as
/// validate() does, or when RINGSIDE_CPU_ISA names a path this CPU cannot run.
void attention_forward_v2(const AttentionParams& p, const float* q, const float* k, const float* v, float* out,
                          float* lse);
void attention_backward_v2(const AttentionParams& p, const float* q, const float* k, const float* v, const float* out,
                           const float* dout, const float* lse, float* dq, float* dk, float* dv);

/// Merges a second partial result (out_b, lse_b) for the same query rows into (out, lse):
///   lse' = max + log1p(exp(min - max)),  out' = exp(lse - lse') out + exp(lse_b - lse') out_b.
/// (-inf, -inf) gives lse' = -inf and out' = 0, never NaN. out, out_b [b, sq, H, d];
/// lse, lse_b [b, H, sq].
template <class T>
void lse_merge(int64_t b, int64_t sq, int64_t H, int64_t d, T* out, T* lse, const T* out_b, const T* lse_b);

}  // namespace ringside::kernels::cpu

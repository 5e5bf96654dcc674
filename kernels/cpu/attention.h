// Blockwise attention on the CPU (FlashAttention-2 style, Dao 2023): online softmax over key
// blocks, returning out and the row log-sum-exp (lse); the s x s score matrix is never stored.
//
// Layouts (row-major, contiguous):
//   q, out, dq, dout  [b, sq, H, d]
//   k, v, dk, dv      [b, sk, Hkv, d]     query head i reads kv head i / (H / Hkv)   (GQA)
//   lse               [b, H, sq]          natural log; -inf for a row with no visible key
//
// The causal mask uses *global* positions, so that one block of a longer sequence (a ring
// step, a zigzag chunk, a striped shard) is computed exactly as the whole would be:
// query row i sits at q_offset + i * q_stride, key j at k_offset + j * k_stride, and the
// key is visible when its position <= the query's.
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

namespace ringside::kernels::cpu {

struct AttentionParams {
  int64_t b = 1, sq = 0, sk = 0, H = 1, Hkv = 1, d = 0;
  bool causal = true;
  double softmax_scale = 0;  ///< usually 1 / sqrt(d)
  int64_t q_offset = 0, q_stride = 1;
  int64_t k_offset = 0, k_stride = 1;
  int64_t block_q = 256;  ///< query rows per tile (version 2: an upper bound, rounded to its strips)
  int64_t block_k = 256;  ///< keys per tile (version 2: an upper bound, rounded to its panels)
};

/// Keys query row i sees: the count of j < sk with k_offset + j k_stride <= q_offset + i q_stride
/// (sk without the causal mask). Visible keys are always a prefix, 0 .. visible_keys - 1.
inline int64_t visible_keys(const AttentionParams& p, int64_t i) {
  if (!p.causal) return p.sk;
  const int64_t qpos = p.q_offset + i * p.q_stride;
  if (qpos < p.k_offset) return 0;
  const int64_t n = (qpos - p.k_offset) / p.k_stride + 1;
  return n < p.sk ? n : p.sk;
}

/// Throws ringside::Error unless the shapes are positive, H % Hkv == 0, strides >= 1, blocks >= 1.
void validate(const AttentionParams& p);

/// Forward: out = softmax(q k^T * softmax_scale + mask) v and lse = log sum exp of each row's
/// scaled scores. A row with no visible key gets out 0 and lse -inf (never NaN). Tiles that the
/// causal mask hides entirely are skipped. FLOPs: 4 b H sq sk d over the visible tiles.
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

/// Forward FLOPs of the visible tiles as FlashAttention counts them (4 sq sk d per head, causal
/// counted exactly over the visible (query, key) pairs, not halved approximately).
double attention_forward_flops(const AttentionParams& p);

}  // namespace ringside::kernels::cpu

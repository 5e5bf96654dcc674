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
// key is visible when its position <= the query's. An optional DocumentMask adds packed
// documents (a query sees only keys of its own document; positions in no document are padding,
// which sees nothing and is seen by nothing) and a sliding window.
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
#include <vector>

namespace ringside::kernels::cpu {

/// Packed documents and a sliding window, in global positions: FlashAttention's varlen
/// cu_seqlens semantics, with TransformerEngine's cu_seqlens_padded for where each document
/// starts (padding may sit between documents and after the last). Query position qp in
/// document [start, start + length) sees key position kp when start <= kp, kp <= qp (causal) or
/// kp < start + length (not causal), and, with a window W >= 1, qp - kp < W (not causal: also
/// kp - qp < W). A position in no document is padding. No documents (both lists empty): the
/// whole sequence is one document, and only the window applies.
struct DocumentMask {
  std::vector<int64_t> starts;   ///< first position of each document, ascending
  std::vector<int64_t> lengths;  ///< tokens of each document, >= 1; documents do not overlap
  int64_t window = 0;            ///< 0: no window
};

struct AttentionParams {
  int64_t b = 1, sq = 0, sk = 0, H = 1, Hkv = 1, d = 0;
  bool causal = true;
  double softmax_scale = 0;  ///< usually 1 / sqrt(d)
  int64_t q_offset = 0, q_stride = 1;
  int64_t k_offset = 0, k_stride = 1;
  int64_t block_q = 256;  ///< query rows per tile (version 2: an upper bound, rounded to its strips)
  int64_t block_k = 256;  ///< keys per tile (version 2: an upper bound, rounded to its panels)
  const DocumentMask* mask = nullptr;  ///< documents and window (global positions); null: none
};

/// The keys query row i sees, [begin, end) in key indices (begin == end: none). Every mask
/// here (causal, documents, window) leaves a row an interval of global positions, and keys sit
/// at an arithmetic progression of them, so a row's visible keys are always one interval;
/// over the rows that see any key, begin and end never decrease.
struct KeyRange {
  int64_t begin = 0, end = 0;
  bool empty() const { return end <= begin; }
  int64_t size() const { return end > begin ? end - begin : 0; }
  /// Whether any of keys [j0, j0 + n) is in the range.
  bool meets(int64_t j0, int64_t n) const { return !empty() && begin < j0 + n && end > j0; }
};
/// The smallest range holding both (an empty range adds nothing).
inline KeyRange hull(const KeyRange& a, const KeyRange& b) {
  if (a.empty()) return b;
  if (b.empty()) return a;
  return {a.begin < b.begin ? a.begin : b.begin, a.end > b.end ? a.end : b.end};
}
KeyRange visible_key_range(const AttentionParams& p, int64_t i);

/// Throws ringside::Error unless the shapes are positive, H % Hkv == 0, strides >= 1, blocks >= 1,
/// and the mask (if any) has ascending, non-overlapping documents of length >= 1 and a window >= 0.
void validate(const AttentionParams& p);

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

/// Forward FLOPs as FlashAttention counts them: 4 d per visible (query, key) pair per head, the
/// pairs counted exactly under the causal mask, documents and window (not halved approximately).
double attention_forward_flops(const AttentionParams& p);

}  // namespace ringside::kernels::cpu

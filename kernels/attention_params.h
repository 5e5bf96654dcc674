// The contract of one attention call, shared by every backend: kernels/cpu (attention.h) and
// kernels/cuda (kernels.h) take the same AttentionParams, and neither owns it. C++17, so that
// nvcc compiles it with the .cu files.
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
// Besides the structs, what the contract means without computing anything: which keys a row
// sees (visible_key_range), what a call must satisfy (validate) and what it costs
// (attention_forward_flops). They are defined in kernels/cpu/attention.cpp, in the library
// every build links; the CUDA backend checks its calls with the same validate.
#pragma once
#include <cstdint>
#include <vector>

namespace ringside::kernels {

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

/// One attention call: sq query rows against sk keys, in b batches and H query heads over
/// Hkv kv heads of d each, with the rows and keys placed at global positions (see above).
struct AttentionParams {
  int64_t b = 1, sq = 0, sk = 0, H = 1, Hkv = 1, d = 0;
  bool causal = true;
  double softmax_scale = 0;  ///< usually 1 / sqrt(d)
  int64_t q_offset = 0, q_stride = 1;
  int64_t k_offset = 0, k_stride = 1;
  /// Tile sizes of the CPU kernels (the CUDA kernels fix their own):
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
KeyRange visible_key_range(const AttentionParams& p, int64_t i);

/// Throws ringside::Error unless the shapes are positive, H % Hkv == 0, strides >= 1, blocks >= 1,
/// softmax_scale > 0, and the mask (if any) has ascending, non-overlapping documents of length
/// >= 1 and a window >= 0.
void validate(const AttentionParams& p);

/// Forward FLOPs as FlashAttention counts them: 4 d per visible (query, key) pair per head, the
/// pairs counted exactly under the causal mask, documents and window (not halved approximately).
/// The backward costs 2.5 times this.
double attention_forward_flops(const AttentionParams& p);

}  // namespace ringside::kernels

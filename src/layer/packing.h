// The padded sequence: how the s real tokens of a (possibly packed) sequence sit in the S >= s
// slots that the ranks split, and the attention mask over those slots.
//
// Context parallelism needs shards of equal size (the ring passes equal blocks; the
// collectives move equal chunks), so a length that does not divide is padded, as
// TransformerEngine pads a THD batch to cu_seqlens_padded: padding tokens sit in no document,
// so they see no key and no query sees them; their inputs and output gradients are zero, so
// every gradient they would add is exactly zero; and they are dropped when results are gathered.
// Their cost is real: every formula of memory and bytes counts S, not s (parallel/formulas.h).
//
// Two ways to pad, by layout (parallel/layout.h):
//   the whole sequence (contiguous, zigzag, striped): the documents keep their positions and S
//     is s rounded up to the multiple the layout needs, the padding at the end;
//   each document (zigzag-per-doc, greedy): every document is rounded up to a multiple of 2R, so
//     that it cuts into 2R equal chunks, then padding at the end to the multiple the shards need.
#pragma once
#include <cstdint>
#include <vector>

#include "kernels/cpu/attention.h"
#include "layer/config.h"

namespace ringside {

using kernels::cpu::DocumentMask;

/// Real tokens [real, real + len) of one document at slots [slot, slot + len), followed by
/// padded - len slots of padding. A segment of len 0 is padding alone.
struct Segment {
  int64_t slot = 0, real = 0, len = 0, padded = 0;
};

class Packing {
 public:
  /// cfg's sequence (its documents, or one document of s tokens) with each document padded to a
  /// multiple of doc_multiple, then padding at the end so that S is a multiple of `multiple`
  /// (as one more segment, of len 0, when doc_multiple > 1). Packing(cfg) pads nothing: the
  /// reference's sequence, slot t holding token t.
  explicit Packing(const LayerConfig& cfg, int64_t multiple = 1, int64_t doc_multiple = 1);

  int64_t s = 0;  ///< real tokens
  int64_t S = 0;  ///< slots, padding included
  std::vector<Segment> segments;

  /// The mask over slots (documents at their slots, padding in none, cfg's window), or null
  /// when attention needs none beyond causal: one document, no window, no padding.
  const DocumentMask* mask() const { return masked_ ? &mask_ : nullptr; }
  /// Whether slot t is token t for every t (no padding).
  bool identity() const { return S == s; }
  /// The real token at each slot, -1 for padding.
  std::vector<int64_t> real_of(const std::vector<int64_t>& slots) const;
  /// The slot of every real token, in token order: what gathering the results keeps.
  std::vector<int64_t> real_slots() const;
  /// RoPE's position of each slot: the token's index in its document (RopePositions::document)
  /// or in the sequence (global); 0 for padding.
  std::vector<int64_t> rope_positions(const std::vector<int64_t>& slots) const;
  /// The segment holding slot t (its padding included).
  const Segment& segment_of(int64_t slot) const;

 private:
  DocumentMask mask_;
  bool masked_ = false;
  RopePositions rope_ = RopePositions::document;
};

}  // namespace ringside

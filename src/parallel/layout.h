// Which global tokens a rank holds. Context parallelism cuts the sequence into shards; the
// layout decides which tokens make a shard, so that under a causal mask every shard has the
// same work (lessons 3 and 4). RoPE, dropout and the mask all use a token's global position,
// never its local index.
#pragma once
#include <array>
#include <cstdint>
#include <vector>

#include "layer/config.h"
#include "layer/packing.h"

namespace ringside {

/// The global positions rank `rank` of P holds, ascending, under `layout` (automatic must be
/// resolved first, see LayerConfig::cp_layout):
///   contiguous  [r s/P, (r+1) s/P)
///   zigzag      chunks r and 2P-1-r of 2P chunks of s/(2P) (Brandon et al. 2023; ring-flash-attention)
///   striped     r, r + P, r + 2P, ... (Brandon et al. 2023, "Striped Attention")
std::vector<int64_t> layout_positions(Layout layout, int64_t s, int P, int rank);

/// A maximal arithmetic run of a rank's sorted positions: local tokens [start, start + len) sit
/// at global positions first, first + stride, ... Contiguous and striped give one run, zigzag
/// two; the attention kernel takes one run per call.
struct Run {
  int64_t start, len, first, stride;
  int64_t last() const { return first + (len - 1) * stride; }
};

/// The runs of sorted positions, found by scanning them (O(n)).
std::vector<Run> runs_of(const std::vector<int64_t>& pos);

/// runs_of(layout_positions(layout, s, P, rank)) without listing the positions: O(1), so that a
/// ring step costs the same at any s (a dry run of a million tokens takes the same steps as one
/// of a thousand). A test checks the two agree for every layout, rank and small size.
std::vector<Run> layout_runs(Layout layout, int64_t s, int P, int rank);

/// Which slots of a padded sequence (layer/packing.h) each of `ranks` context-parallel ranks
/// holds. The whole-sequence layouts (contiguous, zigzag, striped) are layout_positions over the
/// S slots; the per-document ones cut every segment (each document, padded to a multiple of
/// 2 ranks, and the trailing padding) into 2 ranks chunks of equal size:
///   zigzag-per-doc  rank r holds chunks r and 2R-1-r of every segment (TransformerEngine's THD
///                   load balance): under a causal mask alone every document's work is then equal
///                   on every rank, but not under a window (every chunk past the first W keys
///                   costs the same, and the pair of early chunks costs less)
///   greedy          every rank holds two chunks of every segment (so shards stay equal), chosen
///                   by taking the chunks in descending order of work (visible query-key pairs,
///                   exact) and giving each to the least-loaded rank that has fewer than two of
///                   its segment's (ties: the lower rank).
/// A rank's positions are ascending.
class RingLayout {
 public:
  /// `packing` must outlive the layout; `causal` is the mask greedy weighs the chunks by.
  RingLayout(Layout layout, const Packing& packing, int ranks, bool causal = true);
  Layout layout() const { return layout_; }
  const Packing& packing() const { return *packing_; }
  int ranks() const { return ranks_; }
  /// Rank j's slots, ascending.
  std::vector<int64_t> positions(int j) const;
  /// Rank j's runs (found once: O(1) each for the whole-sequence layouts, two a document for
  /// the per-document ones).
  const std::vector<Run>& runs(int j) const { return runs_[size_t(j)]; }
  /// The indices into runs(j), ascending, of the runs that may hold keys some query of run `a`
  /// sees: those reaching into a's documents (with their padding), no later than a's last
  /// query when causal, and back no further than the window. A superset of the runs that meet
  /// a under the mask, found by binary search, so that a pack of N documents costs O(N log N)
  /// pairs a step, not N^2.
  std::vector<size_t> runs_meeting(const Run& a, int j) const;
  /// The layout's chunks that make up a run of a rank (a run may join adjacent chunks: zigzag's
  /// rank R-1 holds chunks R-1 and R, one run): pieces of S/(2R) slots for zigzag, of each
  /// segment's padded/(2R) for the per-document layouts, the run itself for contiguous and
  /// striped (a strided run of single tokens: each token). What the tile map draws as blocks.
  std::vector<Run> chunks_of(const Run& run) const;

 private:
  void assign_greedy();  // owner_, from the chunks' exact work
  Layout layout_;
  const Packing* packing_;
  int ranks_;
  bool causal_;
  std::vector<std::vector<int>> owner_;  // greedy: per segment, the rank of each of its 2 R chunks
  std::vector<std::vector<Run>> runs_;   // per rank
  // Per rank: its runs' indices in order of first position, and the largest last position
  // among that order's first i + 1 (non-decreasing, so a binary search finds where runs_meeting
  // starts looking).
  std::vector<std::vector<size_t>> by_first_;
  std::vector<std::vector<int64_t>> reach_;
};

/// Whether a layout cuts each document (zigzag-per-doc, greedy) rather than the whole sequence.
inline bool per_document(Layout l) { return l == Layout::zigzag_per_doc || l == Layout::greedy; }

/// layout_runs (or, by_scanning, runs_of) as {local start, length, first global position,
/// stride} each, for the tests.
std::vector<std::array<int64_t, 4>> layout_run_list(Layout layout, int64_t s, int P, int rank, bool by_scanning = false);

}  // namespace ringside

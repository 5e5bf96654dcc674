// Which global tokens a rank holds. Context parallelism cuts the sequence into shards; the
// layout decides which tokens make a shard, so that under a causal mask every shard has the
// same work (lessons 3 and 4). RoPE, dropout and the mask all use a token's global position,
// never its local index.
#pragma once
#include <array>
#include <cstdint>
#include <vector>

#include "layer/config.h"

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

/// layout_runs (or, by_scanning, runs_of) as {local start, length, first global position,
/// stride} each, for the tests.
std::vector<std::array<int64_t, 4>> layout_run_list(Layout layout, int64_t s, int P, int rank, bool by_scanning = false);

}  // namespace ringside

// The attention matrix of a run, in tiles, from its trace: which rank computes each (query
// block, key block) tile and at which ring step, for the viewer's picture and lesson 4's map.
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "trace/trace_file.h"

namespace ringside::trace {

/// The attention matrix of a ring or Ulysses run (the kind its ranks recorded,
/// RankTrace::tile_map), in blocks: tile (q, k) is query block q against key block k. For a
/// ring (either: the K/V or the pass-Q ring), what ran: the blocks are the runs of slots the ranks'
/// forward ring steps recorded (TilePair: the layout's chunks, P or 2P of them, or two per
/// document under the per-document layouts), in order; a tile is computed by the rank that
/// recorded the pair, at that ring step; a tile no step computed is masked. For Ulysses every
/// rank computes every tile for its H/P heads (rank -1, step 0).
struct Tile {
  int rank = -1;    ///< -1: all ranks (Ulysses), or none (masked: the ring never computed it)
  int step = 0;
  bool masked = false;   ///< wholly hidden by the causal mask: never computed
  bool partial = false;  ///< partly masked: the mask hides some of its pairs (the causal diagonal, a window, a document
                         ///< edge, padding)
};
struct TileMap {
  std::string strategy, layout;
  int blocks = 0;           ///< the matrix is blocks x blocks tiles
  std::vector<Tile> tiles;  ///< row-major, q-major
  bool every_rank = false;  ///< every rank computes every tile, for its heads (Ulysses): no ranks or steps to show
  /// The packed documents' lengths of the group's configuration (empty: one sequence).
  std::vector<int64_t> docs;
  /// Whether a partly masked tile on the diagonal is the causal triangle: the causal mask alone
  /// over one sequence (no documents, no window), in a layout that keeps a block's tokens in order
  /// (not striped). Otherwise a partial tile's shape is not drawn, only that it is partial.
  bool causal_diagonal = false;
  const Tile& at(int q, int k) const { return tiles[size_t(q) * blocks + k]; }
};
/// From the trace's ring steps (their recorded pairs) and the group's configuration
/// (RunInfo::config_of: its own, else the trace's); nullopt
/// for a run that recorded no tile map (RankTrace::tile_map: TP, all-gather, Ulysses x ring, a
/// foreign trace), a group without a config, a ring whose steps
/// recorded no pairs (or more than kMaxTilePairs in a step), more than 128 blocks, and Ulysses
/// over packed documents or a window. A label "ring zigzag" (a strategy and a layout, as
/// lesson 4 names its runs; "ring packed greedy") takes its layout's name from the label.
std::optional<TileMap> tile_map(const TraceData& t, const std::string& strategy);
/// Which tiles have been computed by time t (ns): those whose ring step has ended by then on
/// the computing rank (all of a step's tiles light up together).
std::vector<bool> tiles_done(const TraceData& t, const TileMap& m, int64_t t_ns);

}  // namespace ringside::trace

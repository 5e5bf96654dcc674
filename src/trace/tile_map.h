// The attention matrix of a run, in tiles, from its trace: which rank computes each (query
// block, key block) tile and at which ring step, for the viewer's picture and lesson 4's map.
#pragma once
#include <optional>
#include <string>
#include <vector>

#include "trace/trace_file.h"

namespace ringside::trace {

/// The attention matrix of a ring or Ulysses run, in blocks: tile (q, k) is query block q
/// against key block k. For the ring, blocks are the layout's chunks (P, or 2P for zigzag);
/// the tile is computed by the rank that holds query block q, at the ring step at which the
/// key block's owner's K/V arrives ((owner(q) - owner(k)) mod P). For Ulysses every rank
/// computes every tile for its H/P heads (rank -1, step 0).
struct Tile {
  int rank = -1;    ///< -1: all ranks (Ulysses)
  int step = 0;
  bool masked = false;   ///< wholly hidden by the causal mask: never computed
  bool diagonal = false; ///< partly masked (causal, the block against itself)
};
struct TileMap {
  std::string strategy, layout;
  int blocks = 0;           ///< the matrix is blocks x blocks tiles
  std::vector<Tile> tiles;  ///< row-major, q-major
  const Tile& at(int q, int k) const { return tiles[size_t(q) * blocks + k]; }
};
/// From the trace's otherData (config, layout) and its strategies; nullopt for a strategy
/// that is not ring or ulysses, a trace without a config, and a run with packed documents, a
/// window or a per-document layout (a label "ring packed ..." too), whose mask this block
/// picture cannot draw. A label "ring zigzag" (a strategy
/// and a layout, as lesson 4 names its runs) takes its layout from the label.
std::optional<TileMap> tile_map(const TraceData& t, const std::string& strategy);
/// Which tiles have been computed by time t (ns): those whose ring step has ended by then on
/// the computing rank (all of a step's tiles light up together).
std::vector<bool> tiles_done(const TraceData& t, const TileMap& m, int64_t t_ns);

}  // namespace ringside::trace

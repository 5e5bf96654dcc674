// A way to split attention over a context-parallel group, described once: a CpScheme.
//
// TransformerEngine names its context-parallel attentions by cp_comm_type (p2p, all_gather,
// a2a, a2a+p2p); ringside adds the ring that passes queries instead of K/V (p2p-q). Everything
// that differs between them, and that the rest of ringside asks about, is a field here: how the
// configuration is named and parsed, which groups it communicates over, whether its shards use a
// token layout (zigzag, striped), the attention it runs, and its four formulas (saved bytes,
// bytes sent, communication peak, FLOPs). Each algorithm file ends with its scheme, so the byte
// formula sits under the code that sends those bytes.
//
// Adding a scheme: write its algorithm file, end it with its CpScheme, list it in
// cp_schemes() (cp_scheme.cpp), and test it. Nothing else switches on a kind: configuration
// parsing, resolve, sharding, groups, the layer, the formulas, the planners and the CLI iterate
// the registry or ask a scheme's fields.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "core/tensor.h"

namespace ringside {

class SequenceAttention;
class RingLayout;
struct AttentionSpec;
struct RankContext;
struct ProcessGroups;
struct Shares;  // parallel/shares.h: the layer's shapes on one rank of a resolved configuration

/// Bytes one rank sends, per phase (a formula's prediction, or a part of it).
struct CommBytes {
  int64_t forward = 0, backward = 0;
};

/// The groups a scheme communicates over inside the CP group of C ranks (CP rank c = u + U r):
/// the whole CP group (an all-gather), the all-to-all of U ranks, the ring of R ranks. With both
/// an all-to-all and a ring, U x R = C and U is given (--cp-a2a); with one of them it spans C.
struct CpGroups {
  bool cp = false, a2a = false, ring = false;
};

/// A context-parallel attention scheme. Formulas take the rank's Shares and the element type and
/// count the attention's part alone (TP's and the gradient all-reduce are formulas.cpp's).
struct CpScheme {
  const char* name = "";      ///< --cp-comm: "p2p", "a2a+p2p"
  const char* te_name = "";   ///< TransformerEngine's cp_comm_type; "" where it has none
  /// The configuration name's groups, innermost first ("ring"; "ulysses", "ring" for a2a+p2p):
  /// each carries a degree, the first the all-to-all's U when the scheme has a ring too.
  std::vector<const char*> strategy{};
  const char* summary = "";      ///< one line of what it does, alone over the CP group
  const char* group_words = "";  ///< its name as one group of two: "the K/V ring"
  const char* collective_words = "";  ///< what moves, in a sentence: "ring", "all-to-all and ring"
  const char* family = "";       ///< the error bands' kind of CP (model/bands.h): "ring", "none"
  CpGroups groups{};
  /// Whether its shards hold tokens in a layout (zigzag, striped) over its ring, or over the CP
  /// group when it has no ring; else every shard is contiguous.
  bool token_layout = false;
  /// How the trace's tile map draws a run of it over every rank (trace/tile_map.h):
  /// trace::kTileMapRingSteps (each tile coloured by the rank and step that computed it, from the
  /// step records), kTileMapEveryRank (every rank computes every tile, for its heads); "" none.
  const char* tile_map = "";
  const char* hop_carries = "";  ///< what one ring hop carries ("K/V"); "" without a ring
  /// How costly its schedule is to record relative to the others (the step planner dry-runs the
  /// cheapest of a tie first): 0 none, 1 one collective each way, more for rings and nesting.
  int record_cost = 0;
  /// An all-to-all-and-ring scheme's forms when one of its groups is one rank (U = 1: the
  /// ring alone; U = C: the all-to-all alone), by name; "" otherwise.
  const char* when_a2a_is_one = "";
  const char* when_ring_is_one = "";

  /// Its attention over this rank's groups, on `layout`'s slots with `spec`'s mask.
  std::unique_ptr<SequenceAttention> (*make)(const ProcessGroups& groups, const RingLayout& layout,
                                             const AttentionSpec& spec, const RankContext& ctx) = nullptr;
  /// Elements the attention saves for the backward on the rank (times sizeof(T): bytes).
  int64_t (*saved_elems)(const Shares& mine) = nullptr;
  /// Bytes the attention sends from the rank, forward and backward.
  CommBytes (*bytes_sent)(const Shares& mine, DType dt) = nullptr;
  /// Peak bytes the attention holds in communication buffers during the forward.
  int64_t (*comm_peak)(const Shares& mine, DType dt) = nullptr;
  /// Forward attention FLOPs the rank computes (4 d per visible query-key pair per head).
  double (*flops)(const Shares& mine) = nullptr;
  /// Bytes one forward ring hop carries (0 without a ring): the planner's hiding threshold.
  int64_t (*hop_bytes)(const Shares& mine, DType dt) = nullptr;

  /// Whether the planners weigh it when not told which schemes to weigh: the schemes a framework
  /// runs (TransformerEngine's cp_comm_type), so that a plan's winner is one a user can run.
  bool planned_by_default() const { return *te_name != '\0'; }
  /// No context parallelism: no group, C = 1.
  bool none() const { return !groups.cp && !groups.a2a && !groups.ring; }
  /// Both an all-to-all and a ring: U is a degree of its own (--cp-a2a).
  bool nested() const { return groups.a2a && groups.ring; }
};

/// Every scheme, in the order the CLI lists them and the planners enumerate them: none, p2p,
/// all_gather, a2a, a2a+p2p, p2p-q.
const std::vector<const CpScheme*>& cp_schemes();
/// Its --cp-comm name.
inline const char* to_string(const CpScheme* scheme) { return scheme->name; }
/// The scheme's place in cp_schemes(): a key that sorts as the registry does.
int cp_scheme_index(const CpScheme& scheme);
/// The scheme called `name` (its --cp-comm name, TransformerEngine's, or "all-gather"). Throws
/// ConfigError naming the choices otherwise.
const CpScheme& cp_scheme(const std::string& name);
/// The --cp-comm choices as the CLI and its errors list them: "p2p, all_gather, a2a, a2a+p2p or
/// p2p-q" (`with_none`: "none" first).
std::string cp_comm_choices(bool with_none = false);
/// Every name cp_scheme accepts (none left out): the CLI's check.
std::vector<std::string> cp_comm_names();
/// The schemes named by `list`, comma-separated (--cp-comm of plan): names as cp_scheme takes
/// them, or "all" for every registered one; "" gives none (the planners' default then). Throws
/// ConfigError naming the choices for an unknown name or an empty item.
std::vector<const CpScheme*> cp_schemes_named(const std::string& list);
/// The scheme without context parallelism (C = 1), and the default one (the K/V ring, p2p:
/// TransformerEngine's default cp_comm_type).
const CpScheme& no_cp_scheme();
const CpScheme& default_cp_scheme();

}  // namespace ringside

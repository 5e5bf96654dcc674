// The longest sequence that fits (`ringside plan --max-seq`): for a model on P GPUs, the largest
// s, a multiple of a stated granularity and of what each split needs, whose whole training step
// fits in a GPU's memory, per recompute mode and ZeRO stage, with the split that reaches it.
//
// The memory is the step's count (step.h's step_memory, as plan --gbs and model --gbs print it)
// of a split: a TP x CP group (its degrees, CP scheme, layout, recompute mode), PP stages with VP
// chunks, DP replicas and a ZeRO stage. It grows with s (the saved activations, the working peak
// and the LM head's logits are linear in the tokens a rank holds; weights, gradients and the
// optimizer state do not change), so the longest s of a split is found by bisection:
//
//   1. bound    each split's longest s by the formulas alone (saved activations from
//               parallel/formulas.h, no working peak): an upper bound, no dry run;
//   2. confirm  the splits in order of their bound, best first, with the working peak that a dry
//               run of the group at s counts (the same count model --gbs prints), from an affine
//               estimate through two dry runs, confirmed at the edges (s fits, s + unit does not),
//               bisected by dry runs where the estimate misses; until no bound is above the best.
//
// The batch: with no --gbs each split runs the fewest microbatches that keep its pipeline full
// (full_pipeline_microbatches: as many in flight on the first stage as any larger batch), so a
// pipeline's memory is that of a real run, not of a single microbatch.
#pragma once
#include <functional>
#include <string>
#include <vector>

#include "model/step_plan.h"

namespace ringside::model {

struct MaxSeqOptions {
  /// The step: P, L, V, MBS, the fixed degrees (PP, VP, DP, ZeRO where > 0 or >= 0), the recompute
  /// modes, the modeling (its dtype), the layout, the CP schemes and the largest group. Its gbs: 0
  /// for each split's full pipeline (full_pipeline_microbatches), else fixed (DP MBS must divide it).
  StepPlanOptions step;
  /// The answer is a multiple of this and of each split's own unit (split_unit). >= 1.
  int64_t granularity = 1024;
};

/// The least s a split takes without padding: the padded length of a one-token sequence under
/// `par` (sequence_packing: T C, 2 R for zigzag over a ring of R, lcm of the two), and the
/// least common multiple of that and `granularity`. Throws ConfigError for a granularity below 1.
int64_t split_unit(const LayerConfig& cfg, const ParallelConfig& par, int64_t granularity);

/// The fewest microbatches a replica runs (a multiple of PP when VP > 1, Megatron's rule) for
/// which every stage of a PP x VP pipeline holds as many microbatch-chunks in flight as it would
/// with any larger batch: PP for 1F1B; more for the interleaved schedule, whose warm-up is longer.
int full_pipeline_microbatches(int pp, int vp);

/// The step's memory (step_memory) of candidate `c` at sequence length s, its fullest stage: the
/// group resolved at s; its parameters from the formulas; its saved activations and working peak
/// from a dry run of the group at s (`measured`), or without one from the formulas and no working
/// peak (a lower bound); the embedding and head for o.step.vocab; c.microbatches in flight. The
/// count model --gbs prints for the same flags at --seq s. Throws ConfigError where the group
/// does not resolve at s.
StepCost max_seq_memory(const LayerConfig& cfg, const StepCandidate& c, int64_t s, const MaxSeqOptions& o, bool measured);

/// The largest multiple k u (1 <= k <= k_max) of u for which `fits` holds, or 0 when it does not
/// hold at u; `fits` must hold up to some k and not beyond (monotone). Bisection: O(log k_max)
/// calls.
int64_t largest_fitting(int64_t u, int64_t k_max, const std::function<bool(int64_t)>& fits);

/// Every split the search weighs, without the recompute mode's and ZeRO stage's filter: each
/// valid TP x CP group (as plan --gbs enumerates them, the dominated contiguous layout left out,
/// tp-cp order: both orders hold the same memory) with each (PP, VP, DP, ZeRO) around it in the
/// pp-dp order, its microbatches as o says. For the tests' brute force, and the search's own.
std::vector<StepCandidate> max_seq_splits(const LayerConfig& cfg, const MaxSeqOptions& o);

/// The answer for one recompute mode and ZeRO stage on one profile.
struct MaxSeqCell {
  Recompute recompute = Recompute::none;
  int zero = 0;
  int64_t s = 0;        ///< the longest s that fits; 0: none at any length
  int64_t unit = 0;     ///< the split's granularity (split_unit): s + unit does not fit it
  StepCandidate split;  ///< the split reaching s (where none fits: the one needing the least)
  int64_t gbs = 0;      ///< its global batch, DP MBS m sequences
  StepCost memory;      ///< at s, by the dry run; where none fits, the least need at s = unit by the formulas
  std::string binding;  ///< the largest term of `memory` ("activations")
};

struct MaxSeqPlan {
  Hardware hw;
  std::vector<MaxSeqCell> cells;  ///< by recompute mode (none, selective, full), then ZeRO stage
};

struct MaxSeqStats {
  size_t splits = 0;          ///< configurations weighed (every cell's)
  size_t bounds = 0;          ///< memory counts by the formulas
  size_t confirmed = 0;       ///< splits searched with dry runs (their bound could still win)
  size_t dry_runs = 0;
  double seconds = 0;
};

/// The longest s on each profile, for each recompute mode of o.step.modes and each ZeRO stage
/// (0 .. 3, or o.step.zero alone). `cfg` gives the layer (its s is ignored; its b is the
/// microbatch, o.step.mbs). Throws ConfigError for bad options (check_step_options' rules at
/// s = one unit, packed documents, whose lengths fix s), when no split is valid, or when nothing
/// fits at any length on any profile (the least need named).
std::vector<MaxSeqPlan> max_seq_plan(const LayerConfig& cfg, const MaxSeqOptions& o, const std::vector<Hardware>& profiles,
                                     MaxSeqStats* stats = nullptr);

}  // namespace ringside::model

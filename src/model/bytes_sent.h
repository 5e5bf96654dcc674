// Bytes a GPU sends, by class of traffic, as `ringside model` prints them: one layer's (the
// formulas of parallel/formulas.h, which the dry run's counts equal byte for byte), and with
// --gbs a whole step's around the group (the pipeline's transfers and the gradient collectives
// over DP x CP in closed form, model/collectives.h's ring bytes).
#pragma once
#include <string>
#include <vector>

#include "model/step_plan.h"
#include "parallel/run_plan.h"

namespace ringside::model {

/// One class of traffic: the most any GPU sends of it, forward and backward (each its own
/// busiest GPU's) and in all (the busiest GPU's forward + backward), and the sum over the GPUs.
struct SentClass {
  std::string what;                   ///< "TP all-gather", "CP ring (p2p)", "PP send/recv", ...
  double forward = -1, backward = -1; ///< the most any GPU sends in the phase; -1: not given (a step's)
  double most = 0;                    ///< the most any GPU sends of it
  double all = -1;                    ///< summed over the group's GPUs; -1: not given (a step's)
};

/// The layer's classes with bytes (parallel_comm_bytes_by_class over the plan's P ranks, fp32
/// counts times element_bytes(dtype) / 4), in CommClass's order; the CP class named by its scheme
/// ("CP ring (p2p)", "CP all-to-all (a2a)"), the gradient all-reduce by C ("... over CP 4"), those
/// without bytes left out; then "all classes", the most any GPU sends in all and the sum. Empty for a plan that sends nothing (P = 1).
std::vector<SentClass> layer_bytes_sent(const RunPlan& plan, const std::string& dtype);

/// A step's classes, per GPU a step (forward and backward: -1), m microbatches of which a GPU of
/// the busiest stage runs its layers:
///   TP and CP      m x (the most layers of a stage) x the layer's TP and CP bytes (no gradient
///                  all-reduce: the step reduces over DP x CP instead)
///   PP send/recv   each chunk's activations to the next virtual stage and their gradient back,
///                  m x p2p bytes each: 2 VP m on a middle stage, (2 VP - 1) m on the first and
///                  last (PP = 2: both); all GPUs 2 (PP VP - 1) m of them per group position
///   gradients      over n = DP x CP of the busiest stage's S bytes: all-reduce 2 (n-1)/n S
///                  (ZeRO 0) or reduce-scatter (n-1)/n S
///   ZeRO gathers   ZeRO 1, 2: the updated weights all-gathered, (n-1)/n W; ZeRO 3: the
///                  stage's weights before each microbatch's forward and backward, 2 m (n-1)/n W
/// Each gives `most` alone (the gradients' and gathers' bytes are the busiest stage's, the
/// pipeline's a middle stage's: no one GPU need be the busiest of every class, so no total),
/// classes without bytes left out. `plan` is the group's layer (the step's
/// microbatch). Throws ConfigError where stage_layers does.
std::vector<SentClass> step_bytes_sent(const ModeledStep& step, const RunPlan& plan, const std::string& dtype);

}  // namespace ringside::model

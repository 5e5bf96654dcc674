// The layer split T x C ways: tensor parallelism with sequence parallelism over T ranks, and
// context parallelism over C, by any of the attention algorithms (parallel/config.h). Every
// strategy is a configuration of it: tp-sp = T P, ring = C P p2p, ulysses = C P a2a,
// all-gather = C P all_gather, and the hybrids (TP x CP, Ulysses x ring). What a rank of it
// saves, sends and computes is predicted by parallel/formulas.h; the tests hold the measured
// values to them. Drawing the inputs, measuring the phases and gathering the results is the
// runner's (run/runner.h).
#pragma once
#include <functional>
#include <vector>

#include "layer/tokenwise.h"
#include "layer/weights.h"
#include "parallel/attention.h"
#include "parallel/groups.h"
#include "parallel/run_plan.h"

namespace ringside {

/// One rank's inputs, prepared by the runner: its TP share of the weights, the reference's
/// inputs at its tokens x and dout [b, n/T, h] (zero at padding), and where its tokens sit.
struct LayerInputs {
  LayerWeights w;
  Tensor x, dout;
  TokenPositions pos;
};

/// What one rank's layer gives back: its own tensors, not gathered.
struct LocalLayer {
  Tensor out, dx;              ///< [b, n/T, h] at the rank's slots
  LayerWeights weight_grads;   ///< its shards' gradients, summed over the groups that share them
  /// With LayerOptions::keep_partial_grads and T > 1: the sequence-parallel parameters'
  /// gradients (LayerNorms, o.bias, fc2.bias) before their all-reduce over TP, i.e. over this
  /// rank's share of the tokens alone (lesson 2 shows what forgetting the all-reduce gives).
  LayerWeights partial_grads;
  double attention_flops = 0;     ///< forward attention FLOPs
  std::vector<StepRecord> steps;  ///< per ring step, forward then backward (configurations with a ring)
};

/// A bucket of the overlapped gradient all-reduce (LayerOptions::overlap_grad_reduce): the
/// gradients the backward finishes in one stretch, named by their parameters' prefixes
/// (LayerWeights::named: "fc1.", "ln2.").
struct GradBucket {
  const char* name;
  std::vector<const char*> prefixes;
};
/// The buckets in the order the backward posts them: mlp (fc1, fc2) after the MLP's backward,
/// out_proj (ln2, o) after the output projection's, qkv (qkv, ln1) at the end.
const std::vector<GradBucket>& grad_buckets();

struct LayerOptions {
  bool keep_partial_grads = false;
  /// false: the weight gradients stay unsummed over CP and TP (no grad_sync all-reduces): the
  /// whole-step planner's dry runs, which fold them into the DP x CP reduction (model/step.h).
  bool grad_sync = true;
  /// true: the CP all-reduce of the weight gradients in buckets, each posted where the backward
  /// has finished every gradient in it (Megatron's --overlap-grad-reduce, PyTorch DDP's buckets):
  /// mlp (fc1, fc2) after the MLP's backward, out_proj (ln2, o) after the output projection's,
  /// qkv (qkv, ln1) at the end. On these ranks each bucket's all-reduce blocks where it is posted,
  /// so the result is the same; the recorded schedule places each bucket in program order, and
  /// the model (ModelOptions::overlap_grad_reduce) runs them on the comm stream under the rest
  /// of the backward. false: one packed all-reduce after the backward.
  bool overlap_grad_reduce = false;
  /// Called where the forward starts (after the attention is set up) and where it ends: the
  /// runner's phase boundaries.
  std::function<void()> forward_starts, forward_done;
};

/// One rank of the layer under plan.par, forward and backward, on `groups` (this rank's
/// communicators over plan.par), in ctx's dtype, with ctx's tags. Collective over groups.world.
LocalLayer parallel_layer(const RunPlan& plan, const ProcessGroups& groups, const LayerInputs& in, const RankContext& ctx,
                          const LayerOptions& opts = {});

}  // namespace ringside

// One training step of L layers around a TP x CP group: pipeline parallelism over PP stages
// (model/pipeline.h), data parallelism over DP replicas with ZeRO (model/zero.h) and its
// gradient collectives (model/collectives.h), and the optimizer step. The layer's own cost
// comes from the model's replay of one TP x CP group (model.h); everything around it is
// simulated or in closed form from there, so that a step of 16,384 GPUs costs one small dry run.
//
//   pipeline    m microbatches (m = GBS / (DP MBS)) through PP stages of L / PP layers, each
//               chunk's forward and backward L / (PP VP) layers' times, the activations of
//               one microbatch sent between stages
//   DP          the gradients of the stage's parameters: an all-reduce (ZeRO 0) or a
//               reduce-scatter and, after the optimizer, an all-gather of the updated weights
//               (ZeRO 1, 2: Megatron's distributed optimizer); ZeRO 3 (FSDP) also all-gathers
//               the weights in each microbatch's forward and backward. With overlap_grad_reduce
//               the gradient collective runs under the last microbatch's backward, bucket by
//               bucket (Megatron's --overlap-grad-reduce), and only what outlasts it is exposed
//   optimizer   Adam over the GPU's shard, memory-bound: it reads and writes the fp32 master
//               weights, m and v (24 bytes), reads the bf16 gradient and writes the bf16 weight
//               (4 bytes): 28 bytes a parameter at the achievable HBM rate
#pragma once

#include "model/collectives.h"
#include "model/model.h"
#include "model/zero.h"

namespace ringside::model {

/// One layer on one microbatch, as a GPU of its TP x CP group sees it.
struct LayerCost {
  double forward_s = 0, backward_s = 0;  ///< the slowest rank's, from the model's replay
  double params = 0;       ///< parameters a GPU holds of the layer (its TP shard)
  double saved_bytes = 0;  ///< activations a GPU keeps of the layer for one microbatch
  double p2p_bytes = 0;    ///< one microbatch's activations a GPU sends to the next stage
};

/// The step around the layer.
struct StepConfig {
  int layers = 1;        ///< L
  int pp = 1, vp = 1;    ///< pipeline stages, model chunks a rank
  int dp = 1;            ///< data-parallel replicas
  int zero = 1;          ///< ZeRO stage, 0 .. 3
  int microbatches = 1;  ///< m per replica
  bool overlap_grad_reduce = true;
  int buckets = 4;       ///< gradient buckets (overlap: the last one's collective is always exposed)
  GroupSpan dp_span;     ///< where the DP group's members sit
  bool pp_across_nodes = true;  ///< whether neighbouring stages sit on different nodes
};

/// What the step costs one GPU of the worst (first) stage.
struct StepCost {
  double step_s = 0;             ///< pipeline + exposed DP + optimizer
  double pipeline_s = 0;         ///< the simulated pipeline's step
  double bubble_fraction = 0;    ///< the pipeline's, as Megatron counts it
  double dp_s = 0;               ///< the DP collectives' time, hidden or not
  double dp_exposed_s = 0;       ///< the part no backward hides
  double optimizer_s = 0;
  ZeroStateBytes state;          ///< weights, gradients, Adam state (L / PP layers)
  double activation_bytes = 0;   ///< saved activations of the microbatches in flight
  double total_bytes() const { return state.total() + activation_bytes; }
};

/// The step's cost. Throws ConfigError where the pipeline does (model/pipeline.h), for PP not
/// dividing L (uneven stages are not modeled), a ZeRO stage outside 0..3, DP or buckets < 1.
StepCost model_step(const StepConfig& c, const LayerCost& layer, const Hardware& hw, const ModelOptions& o);

}  // namespace ringside::model

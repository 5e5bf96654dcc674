// One training step of L layers around a TP x CP group: pipeline parallelism over PP stages
// (model/pipeline.h), data parallelism with ZeRO (model/zero.h) and its gradient collectives
// (model/collectives.h), the embedding, the LM head and loss, and the optimizer step. The
// layer's own cost comes from the model's replay of one TP x CP group (model.h); everything
// around it is simulated or in closed form from there, so that a step of 16,384 GPUs costs one
// small dry run.
//
//   stages      L / PP layers each; when PP does not divide L, the first and last stages hold
//               one layer fewer (Llama 3's rule, Dubey et al. 2024, 3.3.2: 126 layers on 16
//               stages), at most two layers short in all
//   pipeline    m microbatches (m = GBS / (DP MBS)) through PP stages, each chunk's forward and
//               backward its layers' times, the embedding on the first virtual stage and the LM
//               head and loss on the last, the activations of one microbatch sent between stages
//   gradients   the weights are replicated over DP x CP (Megatron's dp-cp group): their bf16
//               gradients are all-reduced over it (ZeRO 0) or reduce-scattered to their shard's
//               owner, and after the optimizer the updated bf16 weights all-gathered (ZeRO 1, 2:
//               Megatron's distributed optimizer); ZeRO 3 (FSDP) also all-gathers each chunk's
//               weights in each microbatch's forward and backward. With overlap_grad_reduce the
//               gradient collective runs under the last microbatch's backward, bucket by bucket
//               (Megatron's --overlap-grad-reduce), and only what outlasts it is exposed
//   optimizer   Adam over the GPU's shard, memory-bound: it reads and writes the fp32 master
//               weights, m and v (24 bytes), reads the bf16 gradient and writes the bf16 weight
//               (4 bytes): 28 bytes a parameter at the achievable HBM rate
#pragma once

#include "model/collectives.h"
#include "model/model.h"
#include "model/pipeline.h"
#include "model/zero.h"

namespace ringside::model {

/// One layer on one microbatch, as a GPU of its TP x CP group sees it.
struct LayerCost {
  double forward_s = 0, backward_s = 0;  ///< the slowest rank's, from the model's replay (no gradient sync)
  double tp_exposed_s = 0, cp_exposed_s = 0;  ///< of that, TP's and CP's communication no compute hides
  double params = 0;         ///< parameters a GPU holds of the layer (its TP shard)
  double saved_bytes = 0;    ///< activations a GPU keeps of the layer for one microbatch
  double working_bytes = 0;  ///< the layer's transient peak above its weights, gradients and saved activations
  double p2p_bytes = 0;      ///< one microbatch's activations a GPU sends to the next stage
  /// One microbatch's TP and CP traffic that leaves the innermost tier's domain (InfiniBand; on a
  /// one-tier system all of it), the most of any GPU (the replay's placement; 0 by the formulas or
  /// the bound).
  double beyond_domain_bytes = 0;
};

/// The embedding (first virtual stage) and the LM head with its loss (last), per microbatch.
struct EndsCost {
  double embedding_forward_s = 0, embedding_backward_s = 0;
  double head_forward_s = 0, head_backward_s = 0;
  double embedding_params = 0, head_params = 0;  ///< a GPU's shares (V h / T each)
  double head_saved_bytes = 0;                   ///< the head's input and its fp32 logits
};

/// The embedding and the untied LM head with its cross-entropy loss, over a vocabulary of V, on a
/// GPU of a TP x CP group holding n = b S / C tokens of the microbatch (Megatron's vocab-parallel
/// embedding and output layer, sequence parallel; Narayanan et al. 2021, 3.2):
///   embedding  forward: the lookup of n rows (a memory pass of 2 n h elements), then a
///              reduce-scatter over TP of n h; backward: an all-gather of n h, a scatter-add
///              (3 n h elements)
///   LM head    forward: an all-gather over TP of n h, the GEMM n x h x V/T, the loss over the
///              n V/T fp32 logits (12 bytes each: written, read for the max, the sum and the
///              target) and three all-reduces of n fp32 over TP; backward: the softmax's gradient
///              (6 bytes a logit), the GEMMs for the input's and the weight's gradients, a
///              reduce-scatter of n h
///   memory     V h / T parameters each; the head keeps its gathered input and its fp32 logits
/// Without sequence parallelism (plain TP) every TP rank holds all n tokens: the embedding
/// all-reduces n h where it reduce-scatters, and its backward and the head's forward gather
/// nothing; the head's backward all-reduces n h where it reduce-scatters.
/// Costed as the replay costs the layer's own ops (op_seconds) and collectives (collective_seconds
/// over `tp_span`). Throws ConfigError for n, V, h or T below 1.
EndsCost ends_cost(const LayerConfig& cfg, int64_t tokens, int64_t vocab, int tp, const Span& tp_span, const Hardware& hw,
                   const ModelOptions& o, bool sequence_parallel = true);

/// The embedding's and the LM head's memory alone (ends_cost's parameters and saved bytes, no
/// times): ceil(V / T) h parameters each (the last shard padded, as Megatron pads it), and the
/// head's gathered input, n h elements of `element` bytes, with its n ceil(V / T) fp32 logits. V
/// = 0: no ends (all zero). Throws ConfigError as ends_cost does for n, h or T below 1.
EndsCost ends_memory(const LayerConfig& cfg, int64_t tokens, int64_t vocab, int tp, double element);

/// The step around the layer.
struct StepConfig {
  int layers = 1;        ///< L
  int pp = 1, vp = 1;    ///< pipeline stages, model chunks a rank
  /// The ranks that hold the same weights, over which gradients are reduced and ZeRO shards:
  /// DP x CP (a CP group's ranks hold the same weights too).
  int dp = 1;
  int zero = 1;          ///< ZeRO stage, 0 .. 3
  int microbatches = 1;  ///< m per replica
  bool overlap_grad_reduce = true;
  int buckets = 4;       ///< gradient buckets (overlap: the last one's collective is always exposed)
  /// Bytes of a weight and of a gradient: 2 (bf16; fp8 runs only its GEMMs in FP8) or 4 (fp32,
  /// whose optimizer keeps no master copy): element_bytes of the modeled dtype.
  double weight_bytes = 2;
  /// Bytes a gradient is reduced in: 0, the weight's; 4 where the stack reduces them in fp32
  /// (Megatron-LM's default for bf16, --accumulate-allreduce-grads-in-fp32).
  double grad_reduce_bytes = 0;
  Span dp_span;          ///< where those dp ranks sit (Topology::span)
  /// The tier of the links between neighbouring stages (the outermost a stage's activations
  /// cross: Span::tier of a pipeline's stages); past the profile's tiers, its outermost.
  size_t pp_tier = SIZE_MAX;
  /// For a lower bound of the step (the planner's, from a layer's compute alone): the gradient
  /// collective exposed at its least, its last bucket, whatever backward could hide the rest.
  bool least_exposure = false;
};

/// Layers on each stage: L / PP, or with the first and last one short (the rule above).
/// Throws ConfigError when PP exceeds L or more than two layers would be missing.
std::vector<int> stage_layers(int layers, int pp);
/// The layers of a full stage, which VP chunks split evenly: the largest stage's, or one more
/// when two stages of F layers are read as both one short (L + 2 = 2 VP k, Llama 3's rule).
int full_stage_layers(const std::vector<int>& stages, int vp);
/// Throws ConfigError unless VP >= 1 chunks split a full stage evenly (full_stage_layers), the
/// first chunk of the first stage and the last of the last one layer short where they are.
void check_interleave(const std::vector<int>& stages, int vp);

/// What the step costs; times are the step's, memory the fullest stage's, per GPU.
struct StepCost {
  double step_s = 0;             ///< pipeline + exposed DP + optimizer
  double pipeline_s = 0;         ///< the simulated pipeline's step
  double bubble_fraction = 0;    ///< the pipeline's, as Megatron counts it (pipeline.h)
  double tp_exposed_s = 0, cp_exposed_s = 0;  ///< the first stage's layers' over all its microbatches
  double pp_exposed_s = 0;       ///< what the transfers between stages add to the pipeline
  double dp_s = 0;               ///< the DP collectives' time, hidden or not: the two below
  double grad_sync_s = 0;        ///< the gradients' all-reduce (ZeRO 0) or reduce-scatter
  double weight_gather_s = 0;    ///< ZeRO 1 and 2: the updated weights' all-gather after the optimizer
  double grad_bytes = 0;         ///< the bf16 gradients the collectives reduce (the busiest stage's)
  double gathered_bytes = 0;     ///< ZeRO 1 and 2: the updated weights all-gathered (the busiest stage's)
  double stage_weight_bytes = 0; ///< the busiest stage's weights (ZeRO 3 gathers them each microbatch)
  /// Bytes a GPU sends beyond the innermost tier's domain in a step (on a one-tier system, all it
  /// sends), by dimension: its TP x CP
  /// group's layers (the first stage's, every microbatch), the pipeline's activations and their
  /// gradients, and the DP x CP gradient collectives (and ZeRO's weight gathers).
  double group_beyond_bytes = 0, pp_beyond_bytes = 0, dp_beyond_bytes = 0;
  double dp_exposed_s = 0;       ///< the part no backward hides
  double optimizer_s = 0;
  int fullest_stage = 0;         ///< the stage whose memory is below
  ZeroStateBytes state;          ///< its weights, gradients and Adam state
  double activation_bytes = 0;   ///< its saved activations of the microbatches in flight, and one layer's working peak
  double total_bytes() const { return state.total() + activation_bytes; }
};

/// The largest of the step's four memory terms and its name: "weights", "gradients", "optimizer
/// state" or "activations" (the first of equal ones): what binds where it does not fit.
std::pair<std::string, double> binding_term(const StepCost& s);

/// The step's memory as every command prints it (plan, plan --gbs, plan --max-seq, model
/// --gbs): the total, its share of `capacity` and the four terms in the total's unit,
/// "79.97 GiB (107%) = w 14.96 + g 14.96 + opt 11.22 + act 38.84": weights, gradients, optimizer
/// state and activations (the microbatches in flight, one layer's working peak, the LM head's
/// input and logits). The parts are rounded alone, so they may miss the total by 0.01. The share
/// is whole percents, or tenths between 99.5 and 100.5 (truncated below the capacity, rounded up
/// above it: a total that does not fit never reads 100%, nor one that fits 100.0%).
std::string memory_text(const StepCost& s, double capacity);
/// The words that say what memory_text's terms are, for a table's footnote.
inline constexpr const char* kMemoryTextLegend =
    "w + g + opt + act: weights, gradients, Adam's state and activations (those in flight, one layer's working peak, the LM head's logits)";

/// The pipeline the step simulates: each virtual stage's forward and backward (its layers, the
/// ends on the first and last, the ZeRO 3 gathers) and the transfer between stages. Throws as
/// model_step does.
PipelineSpec pipeline_spec(const StepConfig& c, const LayerCost& layer, const EndsCost& ends, const Hardware& hw,
                           const ModelOptions& o);

/// The memory part of the step's cost alone (fullest_stage, state, activation_bytes), without
/// timing the pipeline: the microbatches in flight come from each stage's order (pipeline_order).
/// Throws as model_step does.
StepCost step_memory(const StepConfig& c, const LayerCost& layer, const EndsCost& ends);

/// The step's cost. Throws ConfigError where the pipeline does (model/pipeline.h), for stages
/// stage_layers refuses, VP not dividing a full stage's layers, a ZeRO stage outside 0..3, DP or
/// buckets < 1, or a DP span of another size. With `memo`, a pipeline it has simulated already is
/// not simulated again (the same cost, bit for bit).
StepCost model_step(const StepConfig& c, const LayerCost& layer, const EndsCost& ends, const Hardware& hw,
                    const ModelOptions& o, PipelineMemo* memo = nullptr);

}  // namespace ringside::model

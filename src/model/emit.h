// A planned split in a training framework's own words: the flags or configuration keys that run
// it in Megatron-LM, torchtitan or DeepSpeed (`ringside plan --emit`).
//
// Each framework is a registered descriptor (frameworks()) with one function that takes the
// split and returns its settings, each name checked against the framework's own argument
// definitions at a stated commit (the comment beside each emitter, and tests/test_emit.cpp's
// lists), and the sentences saying what the framework cannot express and the nearest split it
// runs instead. The settings are those of that nearest split: never an invented flag.
//
// What each framework does of ringside's choices:
//   layout   Megatron-LM deals each CP rank chunks r and 2C-1-r of 2C (its zigzag, per sequence
//            or per document: megatron/core/utils.py get_batch_on_this_cp_rank), no flag;
//            torchtitan's context_parallel_load_balancer "headtail" is zigzag, None contiguous;
//            DeepSpeed's Ulysses has no layout (every rank attends to whole heads).
//   order    Megatron-LM numbers ranks tp-cp-ep-dp-pp, or tp-cp-ep-pp-dp with
//            --use-tp-pp-dp-mapping; torchtitan's mesh is [pp, dp_replicate, dp_shard, cp, tp]
//            (tp-cp-dp-pp innermost first); TP is innermost in all three, so cp-tp has no
//            spelling.
#pragma once
#include <optional>
#include <string>
#include <vector>

#include "layer/config.h"
#include "model/step_plan.h"
#include "parallel/config.h"

namespace ringside::model {

/// The step around the TP x CP group (plan --gbs): pipeline, data parallelism, ZeRO and batch.
struct StepShape {
  int layers = 1;            ///< L
  int pp = 1, vp = 1, dp = 1, zero = 1;
  int mbs = 1, gbs = 1;      ///< sequences
  int microbatches = 1;      ///< m = GBS / (DP MBS), a replica's microbatches a step
  OuterOrder order = OuterOrder::pp_dp;
  bool overlap_grad_reduce = true;
};

/// What a framework needs to run a planned split.
struct FrameworkSplit {
  LayerConfig cfg;        ///< the layer (heads, s, mask); its b the microbatch
  ParallelConfig par;     ///< resolved: T, C, the CP scheme, U, order, layout, recompute
  std::string dtype = "bf16";  ///< ModelOptions::dtype: bf16, fp32 or fp8
  std::string fp8_recipe;      ///< under fp8: delayed, current, block or mxfp8 (fp8_recipe_of)
  bool tp_comm_overlap = false;  ///< TP's collectives chunked under its GEMMs (tp_comm_overlap_of)
  std::optional<StepShape> step;  ///< the whole step; none: the layer plan (TP x CP alone)
};

/// A framework's answer for one split.
struct FrameworkFlags {
  /// Each a flag with its value ("--context-parallel-size 8") or a key with its value
  /// ("config.parallelism.context_parallel_degree = 8"), in the framework's own spelling.
  std::vector<std::string> settings;
  /// "Megatron-LM cannot express X (why); nearest: Y": one a choice the framework lacks.
  std::vector<std::string> cannot;
  /// How the framework does what has no setting (its layout, its order), and what is left at
  /// its defaults.
  std::vector<std::string> notes;
};

/// A training framework whose settings ringside writes.
struct Framework {
  const char* name = "";    ///< --emit: "megatron", "torchtitan", "deepspeed"
  const char* title = "";   ///< "Megatron-LM"
  /// The repository, commit and file its names were checked against (each emitter's comment
  /// names every file).
  const char* source = "";
  FrameworkFlags (*emit)(const FrameworkSplit&) = nullptr;
};

/// Megatron-LM's command-line flags (NVIDIA/Megatron-LM d98e8a6, megatron/training/arguments.py
/// and the configuration dataclasses it turns into flags).
FrameworkFlags megatron_flags(const FrameworkSplit& s);
/// torchtitan's configuration keys, set on its Trainer.Config (pytorch/torchtitan b5bcd76,
/// torchtitan/config/configs.py, torchtitan/trainer.py).
FrameworkFlags torchtitan_flags(const FrameworkSplit& s);
/// DeepSpeed's ds_config keys and Megatron-DeepSpeed's flags for Ulysses (deepspeedai/DeepSpeed
/// edaa722, deepspeedai/Megatron-DeepSpeed 4efb479).
FrameworkFlags deepspeed_flags(const FrameworkSplit& s);

/// Every framework, in --emit's order.
const std::vector<Framework>& frameworks();
/// The framework called `name`. Throws ConfigError naming the choices.
const Framework& framework(const std::string& name);
/// "megatron, torchtitan, deepspeed", for help and messages.
std::string framework_names();

/// A layer plan's row (TP x CP on cfg), modeled with `o`.
FrameworkSplit framework_split(const PlanCandidate& c, const LayerConfig& cfg, const ModelOptions& o);
/// A whole-step plan's row, with the step's options (L, GBS, MBS, overlap, the modeling).
FrameworkSplit framework_split(const StepCandidate& c, const LayerConfig& cfg, const StepPlanOptions& o);

/// How the pipeline's L layers fall on PP stages of VP chunks (step.h's stage_layers, Llama 3's
/// rule): `short_layers` of PP VP chunks of `chunk_layers` each are one layer short, the last
/// chunk's first (1) or the first's and the last's (2).
struct PipelineChunks {
  int chunk_layers = 1;   ///< layers of a full chunk (a virtual stage)
  int short_layers = 0;   ///< 0, 1 (the last chunk one short) or 2 (the first and the last)
};
/// Throws ConfigError where stage_layers or check_interleave do.
PipelineChunks pipeline_chunks(int layers, int pp, int vp);

/// "<title> cannot express <what> (<why>); nearest: <nearest>", one sentence.
std::string cannot_express(const std::string& title, const std::string& what, const std::string& why,
                           const std::string& nearest);

}  // namespace ringside::model

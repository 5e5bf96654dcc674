// torchtitan's configuration for a planned split (emit.h): assignments on its Trainer.Config in
// a configuration function, as its README writes them ("config.parallelism.context_parallel_degree
// = 4"); each key also works as a --section.key command-line override.
//
// Every key below is a field at pytorch/torchtitan b5bcd76c1b2d55ec4bf0b0b21a00bc9d8b29f7bf (the
// commit's files; tests/test_emit.cpp holds the list):
//   torchtitan/config/configs.py   ParallelismConfig (config.parallelism), TrainingConfig
//                                  (config.training), CompileConfig (config.compile)
//   torchtitan/trainer.py          Trainer.Config.activation_checkpoint: SelectiveAC.Config,
//                                  FullAC.Config or None (activation_checkpoint.py)
// It has no TOML files and no context_parallel_rotate_method any more: its CP is torch's
// context parallelism, whose K/V rotation is torch's default, "allgather" (torch's
// set_rotate_method; "alltoall" passes K/V around the ring).
#include <string>

#include "core/error.h"
#include "model/emit.h"

namespace ringside::model {

namespace {

constexpr const char* kTitle = "torchtitan";

std::string key(const std::string& name, const std::string& value) { return "config." + name + " = " + value; }
std::string key(const std::string& name, int64_t value) { return key(name, std::to_string(value)); }

void tensor_and_context(const FrameworkSplit& s, FrameworkFlags& f) {
  const ParallelConfig& p = s.par;
  f.settings.push_back(key("parallelism.tensor_parallel_degree", p.tp));
  if (p.tp > 1 && !p.sequence_parallel) f.settings.push_back(key("parallelism.enable_sequence_parallel", "False"));
  if (p.cp > 1) {
    f.settings.push_back(key("parallelism.context_parallel_degree", p.cp));
    const std::string all_gather = "context parallelism of " + std::to_string(p.cp) + " that all-gathers K/V, its default";
    if (p.cp_comm->groups.a2a)
      f.cannot.push_back(cannot_express(kTitle, std::string("the ") + p.cp_comm->name + " scheme's all-to-all (Ulysses)",
                                        "its context parallelism is torch's, which rotates or gathers K/V and never heads",
                                        all_gather));
    else if (p.cp_comm->groups.ring)
      f.cannot.push_back(cannot_express(kTitle, "the K/V ring in its configuration",
                                        "it has no rotate-method key; torch's set_rotate_method(\"alltoall\") called in your "
                                        "own launcher passes K/V around the ring",
                                        all_gather));
  }
  if (p.order == RankOrder::cp_tp && p.tp > 1 && p.cp > 1)
    f.cannot.push_back(cannot_express(kTitle, "the cp-tp rank order", "its device mesh is [pp, dp_replicate, dp_shard, cp, tp], TP innermost",
                                      "tp-cp"));
  if (p.cp > 1 && p.layout_matters(s.cfg)) {
    if (p.layout == Layout::zigzag) {
      f.settings.push_back(key("parallelism.context_parallel_load_balancer", "\"headtail\""));
    } else if (p.layout == Layout::contiguous) {
      f.settings.push_back(key("parallelism.context_parallel_load_balancer", "None"));
    } else {
      f.settings.push_back(key("parallelism.context_parallel_load_balancer", "\"headtail\""));
      f.cannot.push_back(cannot_express(kTitle, std::string("the ") + to_string(p.layout) + " layout",
                                        "its load balancers are headtail (zigzag: chunks r and 2C-1-r) and ptrr (FlexAttention's, "
                                        "built from a block mask), or None (contiguous)",
                                        "zigzag, \"headtail\""));
    }
  }
}

void recompute(const FrameworkSplit& s, FrameworkFlags& f) {
  switch (s.par.recompute) {
    case Recompute::none: f.settings.push_back(key("activation_checkpoint", "None")); return;
    case Recompute::full: f.settings.push_back(key("activation_checkpoint", "FullAC.Config()")); return;
    case Recompute::selective:
      f.settings.push_back(key("activation_checkpoint", "SelectiveAC.Config()"));
      f.notes.push_back("SelectiveAC is torchtitan's per-op policy (it saves attention's and every second matmul's outputs "
                        "and recomputes the rest), not ringside's selective (the LayerNorms and the MLP's activation): "
                        "the nearest it has");
      return;
  }
}

void precision(const FrameworkSplit& s, FrameworkFlags& f) {
  f.settings.push_back(key("training.mixed_precision_param", s.dtype == "fp32" ? "\"float32\"" : "\"bfloat16\""));
  if (s.dtype == "fp8") f.notes.push_back("FP8 is not a torchtitan parallelism or training key: left out");
  if (s.tp_comm_overlap) {
    f.settings.push_back(key("compile.enable", "True"));
    f.settings.push_back(key("compile.enable_async_tensor_parallel", "True"));
  }
}

// Data parallelism and ZeRO: torchtitan's FSDP (fully_shard) shards the weights, gradients and
// optimizer state over dp_shard x cp (ZeRO 3); DDP replicates them (dp_replicate).
void data_parallel(const FrameworkSplit& s, FrameworkFlags& f) {
  const StepShape& st = *s.step;
  const bool sharded = st.zero >= 1;
  f.settings.push_back(key("parallelism.data_parallel_replicate_degree", sharded ? 1 : st.dp));
  f.settings.push_back(key("parallelism.data_parallel_shard_degree", sharded ? st.dp : 1));
  if (st.dp * s.par.cp == 1) return;
  if (st.zero == 1 || st.zero == 2) {
    f.settings.push_back(key("parallelism.fsdp_reshard_after_forward", "\"never\""));
    f.cannot.push_back(cannot_express(kTitle, detail::concat("ZeRO ", st.zero),
                                      "its sharding is FSDP's, which gathers the weights for each microbatch's forward",
                                      "FSDP that keeps them gathered from the forward to the backward, "
                                      "fsdp_reshard_after_forward = \"never\""));
  }
  if (st.zero == 0 && s.par.cp > 1)
    f.cannot.push_back(cannot_express(kTitle, "ZeRO 0 beside context parallelism",
                                      "it shards the weights over the CP ranks with FSDP whenever CP > 1", "FSDP over CP alone"));
}

void whole_step(const FrameworkSplit& s, FrameworkFlags& f) {
  const StepShape& st = *s.step;
  if (st.pp > 1) {
    const PipelineChunks chunks = pipeline_chunks(st.layers, st.pp, st.vp);
    f.settings.push_back(key("parallelism.pipeline_parallel_degree", st.pp));
    f.settings.push_back(key("parallelism.pipeline_parallel_schedule", st.vp > 1 ? "\"Interleaved1F1B\"" : "\"1F1B\""));
    f.settings.push_back(key("parallelism.pipeline_parallel_layers_per_stage", chunks.chunk_layers));
    f.settings.push_back(key("parallelism.pipeline_parallel_first_stage_less_layers", chunks.short_layers == 2 ? 1 : 0));
    f.settings.push_back(key("parallelism.pipeline_parallel_last_stage_less_layers", chunks.short_layers >= 1 ? 1 : 0));
    f.settings.push_back(key("parallelism.num_pp_microbatches", st.microbatches));
    if (st.dp > 1 && st.order == OuterOrder::pp_dp)
      f.cannot.push_back(cannot_express(kTitle, "the pp-dp order", "its mesh puts pp outermost: tp-cp-dp-pp", "dp-pp"));
  }
  data_parallel(s, f);
  f.settings.push_back(key("training.num_tokens_per_microbatch_per_dp_rank", int64_t(st.mbs) * s.cfg.s));
  f.settings.push_back(key("training.num_tokens_per_train_step", int64_t(st.gbs) * s.cfg.s));
}

}  // namespace

FrameworkFlags torchtitan_flags(const FrameworkSplit& s) {
  FrameworkFlags f;
  tensor_and_context(s, f);
  recompute(s, f);
  if (s.step) whole_step(s, f);
  else
    f.settings.push_back(key("training.num_tokens_per_microbatch_per_dp_rank", s.cfg.b * s.cfg.s));
  f.settings.push_back(key("training.max_context_length", s.cfg.s));
  precision(s, f);
  if (!s.step)
    f.notes.push_back("the layer plan is TP x CP alone: pipeline, data parallelism (data_parallel_shard_degree -1: the GPUs "
                      "left) and the step's tokens stay at torchtitan's defaults (plan --gbs plans them)");
  return f;
}

}  // namespace ringside::model

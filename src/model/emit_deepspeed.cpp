// DeepSpeed's settings for a planned split (emit.h): its ds_config keys and Megatron-DeepSpeed's
// flags, whose --ds-sequence-parallel-size runs DeepSpeed-Ulysses (deepspeed.sequence.layer.
// DistributedAttention over the sequence-parallel group).
//
// Names checked against (tests/test_emit.cpp holds the lists):
//   deepspeedai/DeepSpeed edaa7221267243c7be7fb49c5d5f5c4fb97b4641: deepspeed/runtime/constants.py
//     (train_batch_size, train_micro_batch_size_per_gpu, gradient_accumulation_steps, bf16 with
//     enabled), deepspeed/runtime/zero/config.py (zero_optimization, stage), deepspeed/__init__.py
//     (--deepspeed, --deepspeed_config); runtime/pipe/engine.py asserts ZeRO < 2 under its
//     pipeline, whose PipelineModule has no interleaved (virtual) stages
//   deepspeedai/Megatron-DeepSpeed 4efb479d5317ce9b86096b9d8e3e8030b0b5263b: megatron/arguments.py
//     (--ds-sequence-parallel-size: "Cannot be combined with --sequence-parallel"; its Ulysses
//     groups are consecutive ranks, megatron/core/parallel_state.py, as its TP groups are)
// DeepSpeed has Ulysses alone: no K/V ring, no all-gather CP and so no Ulysses x ring.
#include <string>

#include "core/error.h"
#include "model/emit.h"
#include "parallel/run_plan.h"

namespace ringside::model {

namespace {

constexpr const char* kTitle = "DeepSpeed";

std::string flag(const std::string& name, int64_t value) { return detail::concat(name, " ", value); }

// Whether Ulysses over `ranks` ranks splits this layer (its heads: the rule resolve names).
bool ulysses_fits(const LayerConfig& cfg, int ranks) {
  ParallelConfig u;
  u.cp = ranks;
  u.cp_comm = &cp_scheme("a2a");
  try {
    resolve(u, cfg, ranks);
    return true;
  } catch (const ConfigError&) {
    return false;
  }
}

// The Ulysses degree DeepSpeed runs for the group: C where the group is Ulysses alone; else the
// largest degree dividing T x C that splits the heads (TP folded in: DeepSpeed's Ulysses does not
// sit beside Megatron's TP with sequence parallelism), the rest of the group's GPUs left to data
// parallelism. 1 when no degree splits the heads.
int ulysses_degree(const FrameworkSplit& s, FrameworkFlags& f) {
  const ParallelConfig& p = s.par;
  const bool ulysses_alone = p.cp > 1 && p.cp_comm->groups.a2a && !p.cp_comm->groups.ring;
  if (p.cp == 1 || (ulysses_alone && p.tp == 1)) return p.cp;
  const int group = p.tp * p.cp;
  int u = group;
  while (u > 1 && (group % u != 0 || !ulysses_fits(s.cfg, u))) --u;
  std::string why;
  if (!ulysses_alone)
    why = std::string("it has Ulysses alone, DistributedAttention's all-to-all: no ") +
          (p.cp_comm->groups.ring ? "K/V ring" : "all-gather context parallelism");
  if (p.tp > 1)
    why += std::string(why.empty() ? "" : "; ") +
           "Megatron-DeepSpeed refuses --sequence-parallel beside --ds-sequence-parallel-size, and its Ulysses groups are "
           "consecutive ranks as its TP groups are";
  const std::string nearest =
      u == 1 ? "no sequence parallelism: no Ulysses degree dividing the group splits the heads"
      : u == group ? detail::concat("Ulysses over the group's ", group, " GPUs")
                   : detail::concat("Ulysses over ", u, " GPUs (the most that split the heads), the group's other ", group / u,
                                    " as more data parallelism");
  f.cannot.push_back(cannot_express(kTitle, p.name(), why, nearest));
  return u;
}

void recompute_flags(Recompute r, std::vector<std::string>& flags) {
  if (r == Recompute::selective) flags.push_back("--recompute-granularity selective");
  if (r == Recompute::full)
    flags.insert(flags.end(), {"--recompute-granularity full", "--recompute-method uniform", "--recompute-num-layers 1"});
}

}  // namespace

FrameworkFlags deepspeed_flags(const FrameworkSplit& s) {
  FrameworkFlags f;
  const ParallelConfig& p = s.par;
  const int ulysses = ulysses_degree(s, f);
  const int tp = p.cp > 1 ? 1 : p.tp;  // beside CP, TP is folded into Ulysses (ulysses_degree)
  // The ds_config file, then Megatron-DeepSpeed's command line naming it.
  int pp = 1;
  std::string config = "{";
  if (s.step) {
    const StepShape& st = *s.step;
    pp = st.pp;
    int zero = st.zero;
    if (st.vp > 1)
      f.cannot.push_back(cannot_express(kTitle, detail::concat("VP = ", st.vp, " model chunks a rank"),
                                        "its pipeline engine (PipelineModule) has no interleaved schedule", "VP 1"));
    if (st.pp > 1 && st.zero >= 2) {
      f.cannot.push_back(cannot_express(kTitle, detail::concat("ZeRO ", st.zero, " with a pipeline"),
                                        "runtime/pipe/engine.py asserts \"ZeRO-2 and ZeRO-3 are incompatible with pipeline parallelism\"",
                                        "ZeRO 1 with the same pipeline (the gradients not sharded: more memory)"));
      zero = 1;
    }
    const int replicas = st.dp * (p.tp * p.cp) / (tp * ulysses);  // more where the group's GPUs went to DP
    config += detail::concat("\"train_batch_size\": ", st.gbs, ", \"train_micro_batch_size_per_gpu\": ", st.mbs);
    if (st.gbs % (st.mbs * replicas) == 0)
      config += detail::concat(", \"gradient_accumulation_steps\": ", st.gbs / (st.mbs * replicas));
    else
      f.notes.push_back(detail::concat("GBS = ", st.gbs, " is not a multiple of MBS x its ", replicas,
                                       " replicas: gradient_accumulation_steps left out"));
    config += detail::concat(", \"zero_optimization\": {\"stage\": ", zero, "}");
  } else {
    config += detail::concat("\"train_micro_batch_size_per_gpu\": ", s.cfg.b);
    f.notes.push_back("the layer plan is TP x CP alone: the pipeline, data parallelism, ZeRO and the global batch stay at "
                      "DeepSpeed's defaults (plan --gbs plans them)");
  }
  if (s.dtype != "fp32") config += ", \"bf16\": {\"enabled\": true}";
  config += "}";
  f.settings.push_back("ds_config.json: " + config);

  std::vector<std::string>& flags = f.settings;
  flags.insert(flags.end(), {"--deepspeed", "--deepspeed_config ds_config.json", flag("--tensor-model-parallel-size", tp)});
  if (tp > 1 && p.sequence_parallel) flags.push_back("--sequence-parallel");
  if (ulysses > 1) flags.push_back(flag("--ds-sequence-parallel-size", ulysses));
  flags.push_back(flag("--pipeline-model-parallel-size", pp));
  if (s.step)
    flags.insert(flags.end(), {flag("--num-layers", s.step->layers), flag("--micro-batch-size", s.step->mbs),
                               flag("--global-batch-size", s.step->gbs)});
  else
    flags.push_back(flag("--micro-batch-size", s.cfg.b));
  flags.push_back(flag("--seq-length", s.cfg.s));
  if (s.dtype != "fp32") flags.push_back("--bf16");
  recompute_flags(p.recompute, flags);
  if (s.dtype == "fp8") f.notes.push_back("FP8: not emitted (bf16 here)");
  if (ulysses > 1)
    f.notes.push_back(detail::concat("outside Megatron-DeepSpeed: deepspeed.sequence.layer.DistributedAttention(local_attention, "
                                     "sequence_process_group) over groups of ", ulysses, " ranks"));
  f.notes.push_back("DP: DeepSpeed's data parallelism is the GPUs left, world size / (TP PP Ulysses)");
  return f;
}

}  // namespace ringside::model

// The frameworks' registry and what every emitter shares (emit.h): the split of a plan's row and
// how a pipeline's layers fall into chunks.
#include "model/emit.h"

#include <algorithm>

#include "core/error.h"
#include "model/step.h"

namespace ringside::model {

const std::vector<Framework>& frameworks() {
  static const std::vector<Framework> all{
      {"megatron", "Megatron-LM", "NVIDIA/Megatron-LM d98e8a64, megatron/training/arguments.py", &megatron_flags},
      {"torchtitan", "torchtitan", "pytorch/torchtitan b5bcd76c, torchtitan/config/configs.py and trainer.py", &torchtitan_flags},
      {"deepspeed", "DeepSpeed", "deepspeedai/DeepSpeed edaa7221 and deepspeedai/Megatron-DeepSpeed 4efb479d, megatron/arguments.py",
       &deepspeed_flags},
  };
  return all;
}

std::string framework_names() {
  std::string names;
  for (const Framework& f : frameworks()) names += (names.empty() ? "" : ", ") + std::string(f.name);
  return names;
}

const Framework& framework(const std::string& name) {
  for (const Framework& f : frameworks())
    if (name == f.name) return f;
  throw ConfigError("--emit " + detail::shown_input(name) + ": not a framework (" + framework_names() + ")");
}

namespace {

// The split's own parts, whichever planner named it: the layout resolved (automatic: what
// balances the work on this layer), the modeled precision and TP overlap.
FrameworkSplit split_of(const ParallelConfig& par, const LayerConfig& cfg, const ModelOptions& o) {
  FrameworkSplit s;
  s.cfg = cfg;
  s.par = par;
  s.par.layout = par.requested_layout(cfg);
  s.dtype = o.dtype;
  if (o.dtype == "fp8") s.fp8_recipe = fp8_recipe_of(o);
  s.tp_comm_overlap = par.tp > 1 && par.sequence_parallel && tp_comm_overlap_of(o);
  return s;
}

}  // namespace

FrameworkSplit framework_split(const PlanCandidate& c, const LayerConfig& cfg, const ModelOptions& o) {
  return split_of(c.par, cfg, o);
}

FrameworkSplit framework_split(const StepCandidate& c, const LayerConfig& cfg, const StepPlanOptions& o) {
  FrameworkSplit s = split_of(c.layer.par, cfg, o.modeling);
  StepShape step;
  step.layers = o.layers, step.pp = c.pp, step.vp = c.vp, step.dp = c.dp, step.zero = c.zero;
  step.mbs = o.mbs, step.gbs = o.gbs, step.microbatches = c.microbatches;
  step.order = c.order, step.overlap_grad_reduce = o.overlap_grad_reduce;
  s.step = step;
  return s;
}

PipelineChunks pipeline_chunks(int layers, int pp, int vp) {
  const std::vector<int> stages = stage_layers(layers, pp);
  check_interleave(stages, vp);
  const int full = full_stage_layers(stages, vp);
  return {full / vp, full * pp - layers};
}

std::string cannot_express(const std::string& title, const std::string& what, const std::string& why,
                           const std::string& nearest) {
  return title + " cannot express " + what + " (" + why + "); nearest: " + nearest;
}

}  // namespace ringside::model

#include "model/step.h"

#include <algorithm>

#include "core/error.h"
#include "model/pipeline.h"

namespace ringside::model {

namespace {

void check(const StepConfig& c) {
  if (c.layers < 1 || c.pp < 1 || c.layers % c.pp != 0)
    throw ConfigError(detail::concat("PP = ", c.pp, " must divide the L = ", c.layers,
                                     " layers (uneven stages are not modeled)"));
  if ((c.layers / c.pp) % c.vp != 0)
    throw ConfigError(detail::concat("VP = ", c.vp, " must divide the ", c.layers / c.pp, " layers of a stage"));
  if (c.zero < 0 || c.zero > 3) throw ConfigError(detail::concat("ZeRO stage ", c.zero, " is not 0, 1, 2 or 3"));
  if (c.dp < 1 || c.buckets < 1)
    throw ConfigError(detail::concat("DP = ", c.dp, " and the buckets, ", c.buckets, ", must each be >= 1"));
  if (c.dp_span.size != c.dp)
    throw ConfigError(detail::concat("the DP span has ", c.dp_span.size, " ranks for DP = ", c.dp));
}

// A memory-bound kernel over `bytes`, costed as the replay costs any elementwise op (op_seconds).
double memory_pass_seconds(double bytes, const Hardware& hw, const ModelOptions& o) {
  trace::Event pass;
  pass.stream = trace::Stream::compute, pass.kind = trace::Kind::elementwise, pass.name = "adam";
  return op_seconds(pass, bytes, hw, o);
}

}  // namespace

StepCost model_step(const StepConfig& c, const LayerCost& layer, const Hardware& hw, const ModelOptions& o) {
  check(c);
  const int stage_layers = c.layers / c.pp;
  const double chunk_layers = double(stage_layers) / c.vp;
  const double stage_params = stage_layers * layer.params;
  const bool sharded = c.dp > 1;
  auto dp_collective = [&](Collective kind, double bytes) {
    return sharded ? collective_seconds(kind, bytes, c.dp_span, hw, o) : 0.0;
  };

  PipelineSpec p;
  p.pp = c.pp, p.vp = c.vp, p.microbatches = c.microbatches;
  p.forward_s = chunk_layers * layer.forward_s;
  p.backward_s = chunk_layers * layer.backward_s;
  if (c.pp > 1) p.p2p_s = transfer_seconds(layer.p2p_bytes, !c.pp_across_nodes, hw, o);
  if (c.zero == 3) {  // FSDP: the chunk's bf16 weights gathered before its forward and its backward
    const double gather = dp_collective(Collective::all_gather, 2 * chunk_layers * layer.params);
    p.forward_s += gather, p.backward_s += gather;
  }
  const PipelineRun run = simulate_pipeline(p);

  StepCost cost;
  cost.pipeline_s = run.step_s;
  cost.bubble_fraction = run.bubble_fraction();
  // The bf16 gradients: all-reduced (ZeRO 0) or reduce-scattered to their shard's owner; ZeRO 1
  // and 2 then all-gather the updated bf16 weights, before the next step's forward.
  const double grads = 2 * stage_params;
  const double grad_sync = dp_collective(c.zero == 0 ? Collective::all_reduce : Collective::reduce_scatter, grads);
  const double weight_gather = c.zero == 1 || c.zero == 2 ? dp_collective(Collective::all_gather, 2 * stage_params) : 0;
  cost.dp_s = grad_sync + weight_gather;
  // Overlapped, bucket by bucket, under the last microbatch's backward on this stage: what
  // outlasts it is exposed, and the last bucket, ready only at the backward's end, always is.
  const double window = stage_layers * layer.backward_s;
  const double grad_exposed = c.overlap_grad_reduce ? std::max(grad_sync - window, grad_sync / c.buckets) : grad_sync;
  cost.dp_exposed_s = grad_exposed + weight_gather;
  // Adam over this GPU's shard: 28 bytes a parameter (fp32 master, m, v read and written; the
  // bf16 gradient read, the bf16 weight written).
  const double shard = c.zero >= 1 ? stage_params / c.dp : stage_params;
  cost.optimizer_s = memory_pass_seconds(28 * shard, hw, o);
  cost.step_s = cost.pipeline_s + cost.dp_exposed_s + cost.optimizer_s;

  cost.state = zero_state_bytes(stage_params, c.dp, c.zero);
  cost.activation_bytes = run.peak_in_flight[0] * chunk_layers * layer.saved_bytes;
  return cost;
}

}  // namespace ringside::model

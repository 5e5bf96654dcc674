#include "model/step.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <string>
#include <utility>
#include <vector>

#include "core/error.h"
#include "model/pipeline.h"

namespace ringside::model {

namespace {

void check(const StepConfig& c, const std::vector<int>& layers) {
  if (layers.front() == 0 && c.pp > 1)
    throw ConfigError(detail::concat("PP = ", c.pp, " leaves the first stage without a layer (L = ", c.layers, ")"));
  check_interleave(layers, c.vp);
  if (c.zero < 0 || c.zero > 3) throw ConfigError(detail::concat("ZeRO stage ", c.zero, " is not 0, 1, 2 or 3"));
  if (c.dp < 1 || c.buckets < 1)
    throw ConfigError(detail::concat("DP = ", c.dp, " and the buckets, ", c.buckets, ", must each be >= 1"));
  if (c.dp_span.size != c.dp)
    throw ConfigError(detail::concat("the DP span has ", c.dp_span.size, " ranks for DP = ", c.dp));
}

// A memory-bound kernel `name` over `bytes`, costed as the replay costs any elementwise op (op_seconds).
double memory_pass_seconds(const char* name, double bytes, const Hardware& hw, const ModelOptions& o) {
  trace::Event pass;
  pass.stream = trace::Stream::compute, pass.kind = trace::Kind::elementwise, pass.name = name;
  return op_seconds(pass, bytes, hw, o);
}

// A GEMM of m x n x k, costed by its shape as the replay costs the layer's (op_seconds).
double gemm_seconds(int64_t m, int64_t n, int64_t k, double element, const Hardware& hw, const ModelOptions& o) {
  trace::Event gemm;
  gemm.stream = trace::Stream::compute, gemm.kind = trace::Kind::gemm, gemm.name = "matmul";
  gemm.flops = 2.0 * double(m) * double(n) * double(k);
  gemm.detail = detail::concat("m=", m, " n=", n, " k=", k);
  return op_seconds(gemm, element * (double(m) * double(k) + double(k) * double(n) + double(m) * double(n)), hw, o);
}

void check_ends(const LayerConfig& cfg, int64_t tokens, int64_t vocab, int tp) {
  if (tokens < 1 || vocab < 1 || cfg.h < 1 || tp < 1)
    throw ConfigError(detail::concat("the embedding and head need n, V, h and T >= 1 (n = ", tokens, ", V = ", vocab, ", h = ",
                                     cfg.h, ", T = ", tp, ")"));
}

double stage_params(const std::vector<int>& layers, int rank, const LayerCost& layer, const EndsCost& ends) {
  double params = layers[size_t(rank)] * layer.params;
  if (rank == 0) params += ends.embedding_params;
  if (rank + 1 == int(layers.size())) params += ends.head_params;
  return params;
}

// Each stage's parameters and what it holds at its fullest: the fullest stage's into `cost`.
void fill_memory(const StepConfig& c, const std::vector<int>& layers, const LayerCost& layer, const EndsCost& ends,
                 const std::vector<int>& in_flight, StepCost& cost) {
  const int chunk_layers = full_stage_layers(layers, c.vp) / c.vp;
  for (int r = 0; r < c.pp; ++r) {
    const ZeroStateBytes state = zero_state_bytes(stage_params(layers, r, layer, ends), c.dp, c.zero, c.weight_bytes);
    double activations = in_flight[size_t(r)] * chunk_layers * layer.saved_bytes + layer.working_bytes;
    if (r == c.pp - 1) activations += ends.head_saved_bytes;
    if (r == 0 || state.total() + activations > cost.total_bytes())
      cost.fullest_stage = r, cost.state = state, cost.activation_bytes = activations;
  }
}

}  // namespace

StepCost step_memory(const StepConfig& c, const LayerCost& layer, const EndsCost& ends) {
  const std::vector<int> layers = stage_layers(c.layers, c.pp);
  check(c, layers);
  PipelineSpec p;
  p.pp = c.pp, p.vp = c.vp, p.microbatches = c.microbatches;
  StepCost cost;
  fill_memory(c, layers, layer, ends, *pipeline_in_flight(p), cost);
  return cost;
}

EndsCost ends_memory(const LayerConfig& cfg, int64_t tokens, int64_t vocab, int tp, double element) {
  EndsCost e;
  if (vocab == 0) return e;
  check_ends(cfg, tokens, vocab, tp);
  const double n = double(tokens), shard = double((vocab + tp - 1) / tp);  // V / T, the last shard padded
  e.embedding_params = e.head_params = shard * double(cfg.h);
  e.head_saved_bytes = n * double(cfg.h) * element + 4 * n * shard;
  return e;
}

std::pair<std::string, double> binding_term(const StepCost& s) {
  const std::vector<std::pair<std::string, double>> terms{
      {"weights", s.state.weights}, {"gradients", s.state.grads}, {"optimizer state", s.state.optimizer}, {"activations", s.activation_bytes}};
  return *std::max_element(terms.begin(), terms.end(), [](const auto& a, const auto& b) { return a.second < b.second; });
}

std::string memory_text(const StepCost& s, double capacity) {
  // The total's unit for every term: GiB from 1 GiB up, else MiB (KiB below 1 MiB).
  const double total = s.total_bytes();
  const double unit = total >= double(1ull << 30) ? double(1ull << 30) : total >= double(1ull << 20) ? double(1ull << 20) : 1024.0;
  const char* name = unit == double(1ull << 30) ? "GiB" : unit == double(1ull << 20) ? "MiB" : "KiB";
  // The share to a tenth where whole percents would round to 100 a total that is under or over.
  double share = 100 * total / capacity;
  const int decimals = share >= 99.5 && share < 100.5 && total != capacity ? 1 : 0;
  if (decimals) share = (total < capacity ? std::floor(share * 10) : std::ceil(share * 10)) / 10;  // never 100.0 under or over
  char buf[200];
  std::snprintf(buf, sizeof buf, "%.2f %s (%.*f%%) = w %.2f + g %.2f + opt %.2f + act %.2f", total / unit, name, decimals, share,
                s.state.weights / unit, s.state.grads / unit, s.state.optimizer / unit, s.activation_bytes / unit);
  return buf;
}

EndsCost ends_cost(const LayerConfig& cfg, int64_t tokens, int64_t vocab, int tp, const Span& tp_span, const Hardware& hw,
                   const ModelOptions& o, bool sequence_parallel) {
  check_ends(cfg, tokens, vocab, tp);
  const double element = element_bytes(o.dtype), n = double(tokens), h = double(cfg.h);
  EndsCost e = ends_memory(cfg, tokens, vocab, tp, element);
  const int64_t shard = (vocab + tp - 1) / tp;  // V / T, the last shard padded as Megatron pads it
  const double logits = n * double(shard);
  auto tp_collective = [&](Collective kind, double bytes) { return tp > 1 ? collective_seconds(kind, bytes, tp_span, hw, o) : 0.0; };
  // Leaving a vocab-parallel op: a reduce-scatter to n/T tokens (SP) or an all-reduce; entering
  // one: an all-gather of the n/T tokens (SP), or nothing (every rank holds all n).
  const double leave = tp_collective(sequence_parallel ? Collective::reduce_scatter : Collective::all_reduce, n * h * element);
  const double enter = sequence_parallel ? tp_collective(Collective::all_gather, n * h * element) : 0.0;
  e.embedding_forward_s = memory_pass_seconds("embedding", 2 * n * h * element, hw, o) + leave;
  e.embedding_backward_s = enter + memory_pass_seconds("embedding_backward", 3 * n * h * element, hw, o);
  e.head_forward_s = enter + gemm_seconds(tokens, shard, cfg.h, element, hw, o) +
                     memory_pass_seconds("cross_entropy", 12 * logits, hw, o) + 3 * tp_collective(Collective::all_reduce, 4 * n);
  e.head_backward_s = memory_pass_seconds("cross_entropy_backward", 6 * logits, hw, o) + gemm_seconds(tokens, cfg.h, shard, element, hw, o) +
                      gemm_seconds(cfg.h, shard, tokens, element, hw, o) + leave;
  return e;
}

int full_stage_layers(const std::vector<int>& stages, int vp) {
  const int full = *std::max_element(stages.begin(), stages.end());
  // Two stages of F layers each are also both one short of F + 1: L + 2 = 2 VP k, Llama 3's
  // rule, where VP divides F + 1 (30 layers, VP 2: chunks of 7 + 8 and 8 + 7).
  if (full % vp != 0 && stages.size() == 2 && stages[0] == full && stages[1] == full && (full + 1) % vp == 0)
    return full + 1;
  return full;
}

void check_interleave(const std::vector<int>& stages, int vp) {
  if (vp < 1) throw ConfigError(detail::concat("VP = ", vp, " must be >= 1"));
  const int full = full_stage_layers(stages, vp);
  if (full % vp != 0)
    throw ConfigError(detail::concat("VP = ", vp, " must divide the ", full, " layers of a full stage (L + 2 = PP VP k where the ",
                                     "first and last stage are one layer short, Llama 3's rule)"));
}

std::vector<int> stage_layers(int layers, int pp) {
  if (layers < 1 || pp < 1 || pp > layers)
    throw ConfigError(detail::concat("PP = ", pp, " stages for L = ", layers, " layers: PP must be between 1 and L"));
  const int full = (layers + pp - 1) / pp, missing = full * pp - layers;
  if (missing > 2 || (missing > 0 && pp < 2))
    throw ConfigError(detail::concat("PP = ", pp, " must divide the L = ", layers,
                                     " layers, or leave at most the first and last stage one layer short (Llama 3's "
                                     "rule); ", layers, " layers on ", pp, " stages would leave ", missing, " short"));
  std::vector<int> per(size_t(pp), full);
  if (missing >= 1) --per.back();   // the last stage also holds the LM head
  if (missing == 2) --per.front();  // the first, the embedding
  return per;
}

PipelineSpec pipeline_spec(const StepConfig& c, const LayerCost& layer, const EndsCost& ends, const Hardware& hw,
                           const ModelOptions& o) {
  const std::vector<int> layers = stage_layers(c.layers, c.pp);
  check(c, layers);
  const int full = full_stage_layers(layers, c.vp), chunk_layers = full / c.vp;
  // Each virtual stage's forward and backward: its layers (a short stage's short chunk is its
  // first on the first stage, its last on the last), the ends, and under ZeRO 3 the gathers.
  PipelineSpec p;
  p.pp = c.pp, p.vp = c.vp, p.microbatches = c.microbatches;
  const int virtual_stages = c.pp * c.vp;
  for (int v = 0; v < virtual_stages; ++v) {
    const int rank = v % c.pp, chunk = v / c.pp;
    int n = chunk_layers;
    if (layers[size_t(rank)] < full && ((rank == 0 && chunk == 0 && c.pp > 1) || (rank == c.pp - 1 && chunk == c.vp - 1))) --n;
    double forward = n * layer.forward_s, backward = n * layer.backward_s, params = n * layer.params;
    if (v == 0) forward += ends.embedding_forward_s, backward += ends.embedding_backward_s, params += ends.embedding_params;
    if (v == virtual_stages - 1) forward += ends.head_forward_s, backward += ends.head_backward_s, params += ends.head_params;
    if (c.zero == 3) {
      // FSDP: the chunk's weights gathered before its forward and again before its backward,
      // a layer ahead (FSDP2's prefetch, Megatron's --overlap-param-gather): each layer's
      // gather runs under the previous layer's compute, so the first is exposed and then what
      // outlasts a layer's compute.
      const double gather = collective_seconds(Collective::all_gather, c.weight_bytes * params, c.dp_span, hw, o);  // 0 for DP 1
      const double per_layer = gather / std::max(1, n);
      forward += per_layer + (n - 1) * std::max(0.0, per_layer - layer.forward_s);
      backward += per_layer + (n - 1) * std::max(0.0, per_layer - layer.backward_s);
    }
    p.stage_forward_s.push_back(forward), p.stage_backward_s.push_back(backward);
  }
  if (c.pp > 1) p.p2p_s = transfer_seconds(layer.p2p_bytes, hw.tiers[std::min(c.pp_tier, hw.tiers.size() - 1)], hw, o);
  return p;
}

StepCost model_step(const StepConfig& c, const LayerCost& layer, const EndsCost& ends, const Hardware& hw,
                    const ModelOptions& o, PipelineMemo* memo) {
  const std::vector<int> layers = stage_layers(c.layers, c.pp);
  const PipelineSpec p = pipeline_spec(c, layer, ends, hw, o);  // checks c
  auto simulated = [memo](const PipelineSpec& spec) { return memo ? memo->times(spec) : pipeline_times(spec); };
  const PipelineTimes run = simulated(p);
  StepCost cost;
  cost.pipeline_s = run.step_s;
  cost.bubble_fraction = run.bubble_fraction();
  if (p.p2p_s > 0 && !c.least_exposure) {  // a bound needs no breakdown
    PipelineSpec free_links = p;
    free_links.p2p_s = 0;
    cost.pp_exposed_s = run.step_s - simulated(free_links).step_s;
  }
  cost.tp_exposed_s = double(c.microbatches) * layers[0] * layer.tp_exposed_s;
  cost.cp_exposed_s = double(c.microbatches) * layers[0] * layer.cp_exposed_s;

  // The stage with the most parameters sets the gradient collectives and the optimizer step.
  double most_params = 0, busiest_backward = 0;
  for (int r = 0; r < c.pp; ++r) {
    const double params = stage_params(layers, r, layer, ends);
    if (params > most_params) most_params = params, busiest_backward = layers[size_t(r)] * layer.backward_s;
  }
  fill_memory(c, layers, layer, ends, *pipeline_in_flight(p), cost);
  // The gradients (bf16, or fp32 where the stack reduces them so): all-reduced (ZeRO 0) or reduce-scattered to their shard's
  // owner; ZeRO 1 and 2 then all-gather the updated weights, before the next step's forward.
  const double grads = (c.grad_reduce_bytes > 0 ? c.grad_reduce_bytes : c.weight_bytes) * most_params;
  // (A group of one, DP x CP = 1, takes no time: collective_seconds.)
  const double grad_sync = collective_seconds(c.zero == 0 ? Collective::all_reduce : Collective::reduce_scatter, grads, c.dp_span, hw, o);
  const double weight_gather = c.zero == 1 || c.zero == 2 ? collective_seconds(Collective::all_gather, c.weight_bytes * most_params, c.dp_span, hw, o) : 0;
  cost.dp_s = grad_sync + weight_gather;
  cost.grad_sync_s = grad_sync, cost.weight_gather_s = weight_gather, cost.grad_bytes = grads;
  if (c.zero == 1 || c.zero == 2) cost.gathered_bytes = c.weight_bytes * most_params;
  cost.stage_weight_bytes = c.weight_bytes * most_params;
  // Overlapped, bucket by bucket, under the last microbatch's backward on this stage: what
  // outlasts it is exposed, and the last bucket, ready only at the backward's end, always is.
  const double window = busiest_backward;
  const double least = grad_sync / c.buckets;
  const double grad_exposed = !c.overlap_grad_reduce ? grad_sync : c.least_exposure ? least : std::max(grad_sync - window, least);
  cost.dp_exposed_s = grad_exposed + weight_gather;
  // Adam over this GPU's shard: 28 bytes a parameter (fp32 master, m, v read and written; the
  // bf16 gradient read, the bf16 weight written).
  const double shard = c.zero >= 1 ? most_params / c.dp : most_params;
  cost.optimizer_s = memory_pass_seconds("adam", 28 * shard, hw, o);
  cost.step_s = cost.pipeline_s + cost.dp_exposed_s + cost.optimizer_s;
  return cost;
}

}  // namespace ringside::model

// The parts of the whole-step planner (step_parts.h): placement, a group's layer three ways,
// the outer configurations, and one group's rows.
#include "model/step_parts.h"

#include <algorithm>
#include <cmath>

#include "core/error.h"
#include "core/units.h"
#include "parallel/formulas.h"

namespace ringside::model::step_parts {



// ---- where the groups sit -------------------------------------------------------------

// Whether every group along `dims` sits alike on `topology`: each dimension's stride and extent
// (size x stride) divides each tier's domain or is a multiple of it, and every domain is full.
static bool alike(const RankGrid& grid, const std::vector<Dim>& dims, const Topology& topology) {
  if (topology.uneven()) return false;
  for (size_t t = 0; t + 1 < topology.tiers().size(); ++t) {
    const int domain = topology.domain_gpus(t);
    for (Dim d : dims) {
      if (grid.size(d) == 1) continue;
      for (const int64_t step : {int64_t(grid.stride(d)), int64_t(grid.stride(d)) * grid.size(d)})
        if (domain % step != 0 && step % domain != 0) return false;
    }
  }
  return true;
}

// The members of the group along `dims` holding GPU 0, in group order (innermost dimension fastest).
static std::vector<int> first_group(const RankGrid& grid, const std::vector<Dim>& dims) {
  std::vector<int> members{0};
  for (Dim d : dims) {  // each dimension's members repeat the inner ones at its stride
    std::vector<int> next;
    next.reserve(members.size() * size_t(grid.size(d)));
    for (int i = 0; i < grid.size(d); ++i)
      for (int m : members) next.push_back(m + i * grid.stride(d));
    members = std::move(next);
  }
  return members;
}

// The widest group along `dims` (by Span's tier, then its outermost hops) and its span.
static std::pair<std::vector<int>, Span> widest_group(const RankGrid& grid, const std::vector<Dim>& dims, const Topology& topology) {
  if (alike(grid, dims, topology)) {
    std::vector<int> g = first_group(grid, dims);
    Span s = topology.span(g);
    return {std::move(g), s};
  }
  std::pair<std::vector<int>, Span> widest;
  bool uneven = false;
  for (std::vector<int>& g : grid.groups(dims)) {
    const Span s = topology.span(g);
    uneven |= s.uneven;
    if (widest.first.empty() || s.wider_than(widest.second)) widest = {std::move(g), s};
  }
  widest.second.uneven = uneven;
  return widest;
}

Replayed Evaluator::replay(const RecordedSchedule& rec, const Group& g, size_t profile) const {
  StepCandidate c;
  c.layer = g.layer, c.pp = 1, c.dp = o.gpus / g.G;  // the group's placement: innermost, whatever is around it
  return replay_layer(rec, g.layer, profiles[profile], o.modeling, o.gpus, spans(c, profile).group_gpus);
}

Spans spans_of(const StepCandidate& c, const Topology& topology) {
  const RankGrid grid = c.grid();
  // The group's dimensions in its own order: a member's index is its rank in the layer's grid.
  const std::vector<Dim> group_dims = c.layer.par.order == RankOrder::tp_cp ? std::vector<Dim>{Dim::tp, Dim::cp}
                                                                            : std::vector<Dim>{Dim::cp, Dim::tp};
  Spans s;
  auto [gpus, group] = widest_group(grid, group_dims, topology);
  s.group = group, s.group_gpus = std::move(gpus);
  s.tp = widest_group(grid, {Dim::tp}, topology).second;
  s.weights = widest_group(grid, {Dim::cp, Dim::dp}, topology).second;
  s.pp = widest_group(grid, {Dim::pp}, topology).second;
  return s;
}

const Spans& Evaluator::spans(const StepCandidate& c, size_t profile) const {
  const RankGrid grid = c.grid();
  const ParallelConfig& par = c.layer.par;
  const std::string key = detail::concat(grid.order(), " ", par.tp, " ", par.a2a_size(), " ", par.ring_size(), " ", c.pp, " ", c.dp);
  auto it = spans_memo.find({profile, key});
  if (it == spans_memo.end()) it = spans_memo.emplace(std::pair{profile, key}, spans_of(c, profiles[profile].topology(o.gpus))).first;
  return it->second;
}

// ---- the layer, by formula and by replay ----------------------------------------------

// The layer by the formulas alone (no working peak): what a GPU holds, for the floor.
LayerCost formula_layer(const RunPlan& plan, const std::string& dtype) {
  LayerCost l;
  l.params = double(parallel_param_count(plan));
  int64_t saved = 0;
  for (int r = 0; r < plan.P; ++r) saved = std::max(saved, parallel_saved_bytes(plan, r, DType::f32));
  l.saved_bytes = double(saved) * element_bytes(dtype) / 4;
  const LayerConfig& cfg = plan.layer;
  l.p2p_bytes = double(cfg.b * plan.packing->S) / plan.par.cp * double(cfg.h) / plan.par.tp * element_bytes(dtype);
  return l;
}

void measured_memory(const RecordedSchedule& rec, const std::string& dtype, LayerCost& layer) {
  // The working peak: above the layer's weights, gradients and saved activations, the most of any rank.
  const double scale = element_bytes(dtype) / 4, weights_and_grads = 2 * layer.params * element_bytes(dtype);
  double saved = 0, working = 0;
  for (const RunRecord& r : rec.results) {
    saved = std::max(saved, double(r.peak_saved) * scale);
    working = std::max(working, double(r.peak_bytes) * scale - double(r.peak_saved) * scale - weights_and_grads);
  }
  layer.saved_bytes = saved, layer.working_bytes = std::max(0.0, working);
}

// The duration of a rank's phase events of `name`, less its gradient sync (which the step
// folds into the DP x CP collectives).
static int64_t phase_ns(const trace::RankTrace& r, const std::string& name) {
  int64_t t = 0, sync_begin = INT64_MAX, sync_end = INT64_MIN;
  for (const trace::Event& e : r.events) {
    if (e.kind == trace::Kind::phase && e.name == name) t += e.dur_ns;
    if (name == "backward" && e.sublayer == "grad_sync" && e.kind != trace::Kind::phase)
      sync_begin = std::min(sync_begin, e.ts_ns), sync_end = std::max(sync_end, e.end_ns());
  }
  return sync_end > sync_begin ? t - (sync_end - sync_begin) : t;
}

Replayed replay_layer(const RecordedSchedule& rec, const PlanCandidate& c, const Hardware& hw, const ModelOptions& modeling,
                      int world, const std::vector<int>& gpus) {
  const int G = c.par.tp * c.par.cp;
  const std::string& dtype = modeling.dtype;
  ModelOptions mo = modeling;
  mo.gpu_of = schedule_gpus(c.par, G);
  if (!gpus.empty())
    for (int& gpu : mo.gpu_of) gpu = gpus[size_t(gpu)];
  mo.job_gpus = std::max(world, G);
  const trace::TraceData modeled = model_trace(rec.schedule, hw, mo);
  const std::vector<trace::StrategyMetrics> metrics = trace::compute_metrics(modeled);
  RS_CHECK(metrics.size() == 1, "step plan: one group per schedule, got ", metrics.size());
  const trace::StrategyMetrics& m = metrics.front();
  Replayed out;
  out.layer = formula_layer(rec.plan, dtype);
  int64_t forward = 0, backward = 0;
  for (const trace::RankTrace& r : modeled.ranks)
    forward = std::max(forward, phase_ns(r, "forward")), backward = std::max(backward, phase_ns(r, "backward"));
  out.layer.forward_s = double(forward) / 1e9, out.layer.backward_s = double(backward) / 1e9;
  const double ranks = double(m.ranks.size());
  for (const auto& [sublayer, b] : m.comm_by_sublayer) {
    if (sublayer == "grad_sync") continue;
    (sublayer == "attention" ? out.layer.cp_exposed_s : out.layer.tp_exposed_s) += double(b.exposed_comm_ns) / ranks / 1e9;
  }
  measured_memory(rec, dtype, out.layer);
  const std::vector<double> tiers = link_traffic(rec.schedule, mo.gpu_of, hw.topology(mo.job_gpus), element_bytes(dtype) / 4);
  for (size_t t = tiers.size() > 1 ? 1 : 0; t < tiers.size(); ++t) out.layer.beyond_domain_bytes += tiers[t];
  out.reason = layer_reason(c, rec.plan, hw, mo, m);
  out.parts = layer_time_parts(modeled, m, hw, mo);
  return out;
}

// ---- enumeration -----------------------------------------------------------------------

// Every (PP, VP, DP, ZeRO, order) around a group, `rest` = P / G GPUs of groups; the dp-pp order
// only where it can place them differently (`orders_differ`: the groups are smaller than a node).
std::vector<Outer> outer_configs(int rest, int layers, const StepPlanOptions& o, bool orders_differ) {
  std::vector<Outer> all;
  for (int pp = 1; pp <= rest && pp <= layers; ++pp) {
    if (rest % pp != 0 || (o.pp > 0 && pp != o.pp)) continue;
    const int dp = rest / pp;
    if ((o.dp > 0 && dp != o.dp) || o.gbs % (dp * o.mbs) != 0) continue;
    std::vector<int> stages;
    try {
      stages = stage_layers(layers, pp);
    } catch (const ConfigError&) {
      continue;
    }
    const int full = *std::max_element(stages.begin(), stages.end()), m = o.gbs / (dp * o.mbs);
    if (pp > 1 && stages.front() == 0) continue;
    for (int vp = 1; vp <= full + 1; ++vp) {
      // VP dividing the largest stage; or, given with --vp, Llama 3's reading of two stages
      // (full_stage_layers), which the search leaves out.
      const bool divides = full % vp == 0 || (vp == o.vp && full_stage_layers(stages, vp) % vp == 0);
      if (!divides || (o.vp > 0 && vp != o.vp) || (vp > 1 && (pp == 1 || m % pp != 0))) continue;
      if (int64_t(pp) * vp * m > kMaxPipelineChunks) continue;
      for (int zero = 0; zero <= 3; ++zero) {
        if (o.zero >= 0 && zero != o.zero) continue;
        all.push_back({pp, vp, dp, zero, m, OuterOrder::pp_dp});
        if (pp > 1 && dp > 1 && orders_differ) all.push_back({pp, vp, dp, zero, m, OuterOrder::dp_pp});
      }
    }
  }
  return all;
}


static std::string pct_text(double f) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.1f%%", 100 * f);
  return buf;
}

std::string step_reason(const StepRow& row, const std::string& layer_reason) {
  const StepCandidate& c = row.candidate;
  const StepCost& s = row.cost;
  std::string why = layer_reason;
  if (c.pp > 1) {
    char buf[200];
    std::snprintf(buf, sizeof buf, "; pipeline %d stages, m = %d%s: bubble %s ((PP-1)/(m VP) = %s)", c.pp, c.microbatches,
                  c.vp > 1 ? (", VP = " + std::to_string(c.vp)).c_str() : "", pct_text(s.bubble_fraction).c_str(),
                  pct_text(double(c.pp - 1) / (double(c.microbatches) * c.vp)).c_str());
    why += buf;
  }
  if (c.dp * c.layer.par.cp > 1)
    why += "; grads over DP x CP " + std::to_string(c.dp * c.layer.par.cp) + " (ZeRO " + std::to_string(c.zero) + "): " +
           format_ns(s.dp_s * 1e9) + ", " + format_ns(s.dp_exposed_s * 1e9) + " exposed";
  return why;
}

TimeParts step_time_parts(const TimeParts& layer, const StepRow& row, int layers) {
  const StepCandidate& c = row.candidate;
  const StepCost& s = row.cost;
  TimeParts p = layer.scaled(double(c.microbatches) * stage_layers(layers, c.pp).front());
  const double ideal = s.pipeline_s / (1 + s.bubble_fraction);  // the pipeline without its bubble
  p[TimeClass::stage_rest] = std::max(0.0, ideal - p.total());
  p[TimeClass::pp] = s.pp_exposed_s;
  p[TimeClass::bubble] = std::max(0.0, s.pipeline_s - ideal - s.pp_exposed_s);
  p[TimeClass::dp] = s.dp_exposed_s;
  p[TimeClass::optimizer] = s.optimizer_s;
  p.bubble_fraction = s.bubble_fraction;
  return p;
}

// A lower bound of a group's layer: each rank's GEMMs at the profile's best GEMM rate (MAMF,
// which no shape exceeds: gemm_rate) and the most attention FLOPs of any rank at the best rate
// of the attention kernel's curves; everything else (memory-bound ops, exposed communication)
// left out. The backward's GEMMs are twice the forward's, its attention 2.5 times; full
// recomputation runs the forward once more in it.
double max_attention_flops(const RunPlan& plan) {
  double most = 0;
  for (int r = 0; r < plan.P; ++r) most = std::max(most, parallel_attention_flops(plan, r));
  return most;
}

LayerCost bound_layer(const RunPlan& plan, const Hardware& hw, const ModelOptions& modeling, double attention) {
  const std::string& dtype = modeling.dtype;
  LayerCost l = formula_layer(plan, dtype);
  const LayerConfig& cfg = plan.layer;
  const ParallelConfig& par = plan.par;
  const double tokens = double(cfg.b * plan.packing->S) / par.cp;
  const double F = cfg.mlp == Mlp::swiglu ? 2.0 * double(cfg.f) : double(cfg.f);
  const double h = double(cfg.h), d = double(cfg.d());
  const double weights = h * double(cfg.H + 2 * cfg.Hkv) * d + double(cfg.H) * d * h + h * F + double(cfg.f) * h;
  const double gemm_flops = 2 * tokens * weights / par.tp;
  const Efficiency& e = hw.efficiency;
  const std::string gemm_dtype = dtype;
  const bool achieved = !at_roofline(hw, modeling);
  const double peak = hw.peak_flops(gemm_dtype);
  const double gemm_rate_best = achieved ? peak * e.gemm.of(gemm_dtype) : peak;
  double attention_rate_best = hw.peak_flops(dtype == "fp8" ? "bf16" : dtype);
  if (achieved) {
    const AttentionKernel& k = e.attention.at(attention_kernel_of(hw, modeling));
    const double head_dim = std::max(1.0, (d / (d + k.d_half)) / (128.0 / (128.0 + k.d_half)));
    attention_rate_best = std::min(attention_rate_best, std::max({k.forward.rate, k.forward_causal.rate, k.backward.rate,
                                                                  k.backward_causal.rate}) * head_dim *
                                                            (dtype == "fp32" ? hw.peak_flops_fp32 / hw.peak_flops_bf16 : 1.0));
  }
  const double forward = gemm_flops / gemm_rate_best + attention / attention_rate_best;
  l.forward_s = forward;
  l.backward_s = 2 * gemm_flops / gemm_rate_best + 2.5 * attention / attention_rate_best;
  if (par.recompute == Recompute::full) l.backward_s += forward;
  return l;
}


std::string binding_reason(const StepCost& s, const Hardware& hw) {
  const auto [term, bytes] = binding_term(s);
  return "out of memory: needs " + format_bytes(s.total_bytes()) + " of " + format_bytes(hw.memory_bytes) + " on stage " +
         std::to_string(s.fullest_stage) + "; binding: " + term + " " + format_bytes(bytes);
}


// What a step of c sends beyond the innermost domain, per GPU, by dimension (StepCost's):
// the group's layers on the first stage for every microbatch, each chunk's activations out and
// their gradients back, and the gradient collectives with ZeRO's weight gathers (ZeRO 3: the
// stage's weights twice a microbatch, before its forward and its backward).
static void crossing_bytes(StepRow& r, const Spans& spans, const LayerCost& layer, int layers, const Hardware& hw) {
  const StepCandidate& c = r.candidate;
  StepCost& s = r.cost;
  const double m = c.microbatches;
  const size_t first = hw.tiers.size() > 1 ? 1 : 0;  // one tier: every GPU a domain of its own, all of it
  s.group_beyond_bytes = m * stage_layers(layers, c.pp).front() * layer.beyond_domain_bytes;
  if (c.pp > 1 && (spans.pp.tier > 0 || first == 0)) s.pp_beyond_bytes = 2 * m * c.vp * layer.p2p_bytes;
  const Collective sync = c.zero == 0 ? Collective::all_reduce : Collective::reduce_scatter;
  for (size_t t = first; t < hw.tiers.size(); ++t) {
    s.dp_beyond_bytes += tier_bytes(sync, s.grad_bytes, spans.weights, t) + tier_bytes(Collective::all_gather, s.gathered_bytes, spans.weights, t);
    if (c.zero == 3) s.dp_beyond_bytes += 2 * m * tier_bytes(Collective::all_gather, s.stage_weight_bytes, spans.weights, t);
  }
}

std::vector<StepRow> Evaluator::rows(const Group& g, size_t profile, const LayerCost& layer, const std::string* layer_reason,
                                     PipelineMemo& memo, const TimeParts* parts) const {
  const Hardware& hw = profiles[profile];
  const ModelOptions& mo = o.modeling;
  const bool exact = layer_reason != nullptr;
  const double tokens = double(o.gbs) * double(cfg.s), peak = hw.peak_flops(o.modeling.dtype);
  std::vector<StepRow> out;
  std::optional<EndsCost> ends;
  for (const Outer& outer : *g.outers) {
    StepRow r;
    StepCandidate& c = r.candidate;
    c.layer = g.layer;
    c.pp = outer.pp, c.vp = outer.vp, c.dp = outer.dp, c.zero = outer.zero, c.order = outer.order;
    c.microbatches = outer.microbatches;
    const Spans& placed = spans(c, profile);
    if (!ends) ends = ends_of(g, hw, placed.tp);
    StepConfig sc = step_config(g, outer, placed);
    sc.least_exposure = !exact;
    r.cost = step_memory(sc, exact ? layer : g.floor, *ends);
    if (r.cost.total_bytes() > hw.memory_bytes) {
      r.status = PlanStatus::out_of_memory, r.reason = binding_reason(r.cost, hw);
      out.push_back(std::move(r));
      continue;
    }
    r.cost = model_step(sc, layer, *ends, hw, mo, &memo);
    crossing_bytes(r, placed, layer, o.layers, hw);
    r.status = exact ? PlanStatus::ranked : PlanStatus::bounded;
    r.tokens_per_s_per_gpu = tokens / r.cost.step_s / o.gpus;
    r.mfu = mfu(r.tokens_per_s_per_gpu, flops_per_token, peak);
    check_step_row(r, hw);
    if (exact) r.reason = step_reason(r, *layer_reason);
    if (exact && parts) r.parts = step_time_parts(*parts, r, o.layers);
    out.push_back(std::move(r));
  }
  return out;
}

void check_step_row(const StepRow& r, const Hardware& hw) {
  const StepCost& s = r.cost;
  auto fail = [&](const std::string& what) {
    throw Error(detail::concat("the model's step does not add up (a bug in the model or its profile, not a result): ",
                               r.candidate.name(), " on ", hw.name, ": ", what));
  };
  if (!(r.mfu <= 1 + 1e-9)) fail(detail::concat("MFU ", 100 * r.mfu, "% passes the peak (", r.tokens_per_s_per_gpu, " tokens/s per GPU)"));
  const std::vector<std::pair<const char*, double>> times{
      {"step", s.step_s}, {"pipeline", s.pipeline_s}, {"TP exposed", s.tp_exposed_s}, {"CP exposed", s.cp_exposed_s},
      {"PP exposed", s.pp_exposed_s}, {"DP", s.dp_s}, {"DP exposed", s.dp_exposed_s}, {"optimizer", s.optimizer_s}};
  for (const auto& [name, t] : times)
    if (!(t >= 0 && std::isfinite(t))) fail(detail::concat(name, " time ", t, " s"));
  if (s.step_s < s.pipeline_s * (1 - 1e-12)) fail(detail::concat("the step, ", s.step_s, " s, is shorter than its pipeline, ", s.pipeline_s, " s"));
  const std::vector<std::pair<const char*, double>> bytes{
      {"weights", s.state.weights}, {"gradients", s.state.grads}, {"optimizer state", s.state.optimizer}, {"activations", s.activation_bytes}};
  double sum = 0;
  for (const auto& [name, b] : bytes) {
    if (!(b >= 0 && std::isfinite(b))) fail(detail::concat(name, " ", b, " bytes"));
    sum += b;
  }
  if (std::abs(sum - s.total_bytes()) > 1e-9 * sum) fail(detail::concat("memory parts sum to ", sum, " bytes, the total says ", s.total_bytes()));
}

StepConfig Evaluator::step_config(const Group& g, const Outer& outer, const Spans& spans) const {
  StepConfig sc;
  sc.layers = o.layers, sc.pp = outer.pp, sc.vp = outer.vp, sc.dp = outer.dp * g.layer.par.cp, sc.zero = outer.zero;
  sc.microbatches = outer.microbatches, sc.overlap_grad_reduce = o.overlap_grad_reduce;
  sc.dp_span = spans.weights, sc.pp_tier = spans.pp.tier;
  sc.weight_bytes = element_bytes(o.modeling.dtype);
  sc.grad_reduce_bytes = o.modeling.stack.grad_reduce_fp32 ? 4 : 0;
  return sc;
}

EndsCost Evaluator::ends_of(const Group& g, const Hardware& hw, const Span& tp_span) const {
  if (o.vocab == 0) return EndsCost{};
  const ModelOptions& mo = o.modeling;
  const int64_t tokens = cfg.b * g.plan->packing->S / g.layer.par.cp;
  return ends_cost(cfg, tokens, o.vocab, g.layer.par.tp, tp_span, hw, mo, g.layer.par.sequence_parallel);
}

}  // namespace ringside::model::step_parts

// The whole-step planner of step_plan.h: enumerate, reject by the formulas, dry-run each group
// shape once, replay it per profile, simulate the step around it for every outer configuration.
#include "model/step_plan.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <map>
#include <optional>
#include <set>

#include "core/error.h"
#include "core/units.h"
#include "model/flops.h"
#include "parallel/formulas.h"

namespace ringside::model {

namespace {

double element_bytes(const std::string& dtype) { return dtype == "fp32" ? 4.0 : 2.0; }

// How close to the best verified step a shape's estimate must come to be dry-run itself.
constexpr double kMargin = 0.05;

// ---- where the groups sit -------------------------------------------------------------

// Members of a dimension of `size` ranks `stride` apart that share a node of G consecutive
// ranks: G / stride of them (at most size) when stride divides G, one when G divides stride.
std::optional<int> per_node(int size, int stride, int gpus_per_node) {
  if (gpus_per_node % stride == 0) return std::min(size, gpus_per_node / stride);
  if (stride % gpus_per_node == 0) return 1;
  return std::nullopt;  // the groups would straddle nodes unevenly
}

// The span of a group of nested dimensions (size, stride), each stride a multiple of the
// previous dimensions' extent: its members per node multiply.
std::optional<GroupSpan> span_of(const std::vector<std::pair<int, int>>& dims, int gpus_per_node) {
  GroupSpan span{1, 1};
  for (const auto& [size, stride] : dims) {
    const std::optional<int> k = per_node(size, stride, gpus_per_node);
    if (!k) return std::nullopt;
    span.size *= size, span.per_node *= *k;
  }
  if (span.size % span.per_node != 0) return std::nullopt;
  return span;
}

struct Spans {
  GroupSpan tp, weights;  // the TP group; DP x CP, the ranks that hold the same weights
  bool pp_across_nodes = false;
};

// Strides: the group's T C ranks innermost (TP at stride 1 in tp-cp order, C in cp-tp), then PP
// and DP in the candidate's outer order.
std::optional<Spans> spans_of(const StepCandidate& c, int gpus_per_node) {
  const ParallelConfig& par = c.layer.par;
  const int G = par.tp * par.cp;
  const bool tp_inner = par.order == RankOrder::tp_cp;
  const int tp_stride = tp_inner ? 1 : par.cp, cp_stride = tp_inner ? par.tp : 1;
  const int pp_stride = c.order == OuterOrder::pp_dp ? G : G * c.dp;
  const int dp_stride = c.order == OuterOrder::pp_dp ? G * c.pp : G;
  if (!per_node(G, 1, gpus_per_node)) return std::nullopt;  // a group straddling two nodes
  const auto tp = span_of({{par.tp, tp_stride}}, gpus_per_node);
  const auto weights = span_of({{par.cp, cp_stride}, {c.dp, dp_stride}}, gpus_per_node);
  const auto pp = span_of({{c.pp, pp_stride}}, gpus_per_node);
  if (!tp || !weights || !pp) return std::nullopt;
  return Spans{*tp, *weights, pp->nodes() > 1};
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

// The duration of a rank's phase events of `name`, less its gradient sync (which the step
// folds into the DP x CP collectives).
int64_t phase_ns(const trace::RankTrace& r, const std::string& name) {
  int64_t t = 0, sync_begin = INT64_MAX, sync_end = INT64_MIN;
  for (const trace::Event& e : r.events) {
    if (e.kind == trace::Kind::phase && e.name == name) t += e.dur_ns;
    if (name == "backward" && e.sublayer == "grad_sync" && e.kind != trace::Kind::phase)
      sync_begin = std::min(sync_begin, e.ts_ns), sync_end = std::max(sync_end, e.end_ns());
  }
  return sync_end > sync_begin ? t - (sync_end - sync_begin) : t;
}

struct Replayed {
  LayerCost layer;
  std::string reason;
};

Replayed replay_layer(const RecordedSchedule& rec, const PlanCandidate& c, const Hardware& hw, const ModelOptions& modeling) {
  const int G = c.par.tp * c.par.cp;
  const std::string& dtype = modeling.dtype;
  ModelOptions mo = modeling;
  mo.node_of = schedule_nodes(c.par, G, hw.gpus_per_node);
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
  // The working peak: above the layer's weights, gradients and saved activations, the most of any rank.
  const double scale = element_bytes(dtype) / 4, weights_and_grads = 2 * out.layer.params * element_bytes(dtype);
  double saved = 0, working = 0;
  for (const RunRecord& r : rec.results) {
    saved = std::max(saved, double(r.peak_saved) * scale);
    working = std::max(working, double(r.peak_bytes) * scale - double(r.peak_saved) * scale - weights_and_grads);
  }
  out.layer.saved_bytes = saved, out.layer.working_bytes = std::max(0.0, working);
  out.reason = layer_reason(c, rec.plan, hw, dtype, m);
  return out;
}

// ---- enumeration -----------------------------------------------------------------------

struct Outer {
  int pp, vp, dp, zero, microbatches;
  OuterOrder order;
};

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
    for (int vp = 1; vp <= full; ++vp) {
      if (full % vp != 0 || (o.vp > 0 && vp != o.vp) || (vp > 1 && (pp == 1 || m % pp != 0))) continue;
      for (int zero = 0; zero <= 3; ++zero) {
        if (o.zero >= 0 && zero != o.zero) continue;
        all.push_back({pp, vp, dp, zero, m, OuterOrder::pp_dp});
        if (pp > 1 && dp > 1 && orders_differ) all.push_back({pp, vp, dp, zero, m, OuterOrder::dp_pp});
      }
    }
  }
  return all;
}

}  // namespace

void check_step_options(const LayerConfig& cfg, const StepPlanOptions& o) {
  const int P = o.gpus;
  if (o.layers < 1) throw ConfigError("plan: --layers must be >= 1");
  if (o.gbs < 1 || o.mbs < 1) throw ConfigError(detail::concat("plan: --gbs and --mbs must be >= 1 (GBS = ", o.gbs, ", MBS = ", o.mbs, ")"));
  if (o.gbs % o.mbs != 0) throw ConfigError(detail::concat("plan: GBS = ", o.gbs, " is not a multiple of MBS = ", o.mbs));
  if (o.vp > 1 && o.pp == 1) throw ConfigError(detail::concat("plan: --vp ", o.vp, " needs --pp > 1 (model chunks interleave pipeline stages)"));
  if (o.vp > 1 && o.pp == 0) throw ConfigError(detail::concat("plan: --vp ", o.vp, " needs --pp (the stages to interleave)"));
  if (o.pp > 0) stage_layers(o.layers, o.pp);  // throws its rule
  if (o.pp > 0 && P % o.pp != 0) throw ConfigError(detail::concat("plan: PP = ", o.pp, " does not divide the ", P, " GPUs"));
  if (o.dp > 0 && P % o.dp != 0) throw ConfigError(detail::concat("plan: DP = ", o.dp, " does not divide the ", P, " GPUs"));
  if (o.pp > 0 && o.dp > 0 && P % (o.pp * o.dp) != 0)
    throw ConfigError(detail::concat("plan: PP x DP = ", o.pp * o.dp, " does not divide the ", P, " GPUs"));
  if (o.dp > 0 && o.gbs % (o.dp * o.mbs) != 0)
    throw ConfigError(detail::concat("plan: GBS = ", o.gbs, " is not divisible by DP x MBS = ", o.dp, " x ", o.mbs, " = ", o.dp * o.mbs,
                                     " (each replica runs GBS / (DP MBS) whole microbatches)"));
  if (o.vp > 0 && o.pp > 0) {
    const std::vector<int> stages = stage_layers(o.layers, o.pp);
    const int full = *std::max_element(stages.begin(), stages.end());
    if (full % o.vp != 0) throw ConfigError(detail::concat("plan: VP = ", o.vp, " must divide the ", full, " layers of a stage"));
  }
  if (o.zero > 3) throw ConfigError(detail::concat("plan: ZeRO stage ", o.zero, " is not 0, 1, 2 or 3"));
  if (cfg.b != o.mbs) throw ConfigError(detail::concat("plan: the layer's batch b = ", cfg.b, " must be the microbatch, MBS = ", o.mbs));
}

namespace {

std::string pct_text(double f) {
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

}  // namespace

std::string StepCandidate::order_name() const {
  const std::string inner = layer.par.order == RankOrder::tp_cp ? "tp-cp" : "cp-tp";
  return inner + (order == OuterOrder::pp_dp ? "-pp-dp" : "-dp-pp");
}

std::string StepCandidate::name() const {
  // The group's degrees in full (ring8, not ring: the group is not all P GPUs), then its layout
  // where layouts differ and its recompute mode, as the layer plan names them.
  const ParallelConfig& par = layer.par;
  std::string n = par.name();
  if (par.cp_comm == CpComm::p2p || par.cp_comm == CpComm::all_gather || par.cp_comm == CpComm::a2a_p2p)
    n += std::string(" ") + to_string(par.layout);
  n += std::string(" ") + to_string(par.recompute);
  if (pp == 0) return n;  // a group no step can use: the group alone
  n += " pp" + std::to_string(pp);
  if (vp > 1) n += " vp" + std::to_string(vp);
  n += " dp" + std::to_string(dp) + " zero" + std::to_string(zero);
  if (pp > 1 && dp > 1) n += order == OuterOrder::pp_dp ? " pp-dp" : " dp-pp";
  return n;
}

size_t StepPlan::ranked() const {
  return size_t(std::count_if(rows.begin(), rows.end(), [](const StepRow& r) { return r.status == PlanStatus::ranked; }));
}

const StepRow* step_runner_up(const StepPlan& plan) {
  const size_t n = plan.ranked();
  auto degrees = [](const StepCandidate& c) {
    return std::make_tuple(c.layer.par.name(), c.pp, c.dp, int(c.order));
  };
  for (size_t i = 1; i < n; ++i)
    if (degrees(plan.rows[i].candidate) != degrees(plan.rows[0].candidate)) return &plan.rows[i];
  return nullptr;
}

namespace {

// One TP x CP group configuration and the outer configurations around it.
struct Group {
  PlanCandidate layer;
  int G = 1;
  std::optional<RunPlan> plan;  // resolved, or refused (invalid)
  std::string invalid;
  const std::vector<Outer>* outers = nullptr;
  LayerCost floor;  // by the formulas
};

std::string binding_reason(const StepCost& s, const Hardware& hw);

// The order of the table: the ranked, then those bounded out, then the invalid, then those
// that do not fit.
int status_place(PlanStatus s) {
  switch (s) {
    case PlanStatus::ranked: return 0;
    case PlanStatus::bounded: return 1;
    case PlanStatus::invalid: return 2;
    case PlanStatus::out_of_memory: return 3;
  }
  return 4;
}

// Under a causal mask the contiguous layout sends the same bytes and holds the same memory as
// zigzag and striped, and gives its last rank the most work of any (lesson 4): never faster,
// so not weighed unless asked for (--layout contiguous).
bool dominated(const PlanCandidate& c, const LayerConfig& cfg, Layout given) {
  const CpComm comm = c.par.cp_comm;
  const bool layouts_differ = cfg.causal && (comm == CpComm::p2p || comm == CpComm::all_gather || comm == CpComm::a2a_p2p);
  return given == Layout::automatic && layouts_differ && c.par.layout == Layout::contiguous;
}

// A lower bound of a group's layer: each rank's GEMMs at the profile's best GEMM rate (MAMF,
// which no shape exceeds: gemm_rate) and the most attention FLOPs of any rank at the best rate
// of the attention kernel's curves; everything else (memory-bound ops, exposed communication)
// left out. The backward's GEMMs are twice the forward's, its attention 2.5 times; full
// recomputation runs the forward once more in it.
LayerCost bound_layer(const RunPlan& plan, const Hardware& hw, const ModelOptions& modeling) {
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
  const bool achieved = e.present && modeling.efficiency != "ideal";
  const double peak = hw.peak_flops(gemm_dtype);
  const double gemm_rate_best = achieved ? peak * e.gemm.of(gemm_dtype) : peak;
  double attention = 0;
  for (int r = 0; r < plan.P; ++r) attention = std::max(attention, parallel_attention_flops(plan, r));
  double attention_rate_best = hw.peak_flops(dtype == "fp8" ? "bf16" : dtype);
  if (achieved) {
    const AttentionKernel& k = e.attention.at(attention_kernel_of(hw, modeling));
    const double head_dim = std::max(1.0, (d / (d + k.d_half)) / (128.0 / (128.0 + k.d_half)));
    attention_rate_best = std::max({k.forward.rate, k.forward_causal.rate, k.backward.rate, k.backward_causal.rate}) * head_dim *
                          (dtype == "fp32" ? hw.peak_flops_fp32 / hw.peak_flops_bf16 : 1.0);
  }
  const double forward = gemm_flops / gemm_rate_best + attention / attention_rate_best;
  l.forward_s = forward;
  l.backward_s = 2 * gemm_flops / gemm_rate_best + 2.5 * attention / attention_rate_best;
  if (par.recompute == Recompute::full) l.backward_s += forward;
  return l;
}

// The rows of one group on one profile, one per outer configuration: by the layer's lower bound
// (reason null: memory by the formulas, status bounded where it fits) or by its replay.
struct Evaluator {
  const LayerConfig& cfg;
  const StepPlanOptions& o;
  const std::vector<Hardware>& profiles;

  std::vector<StepRow> rows(const Group& g, size_t profile, const LayerCost& layer, const std::string* layer_reason) const {
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
      const std::optional<Spans> spans = spans_of(c, hw.gpus_per_node);
      if (!spans) {
        r.status = PlanStatus::invalid;
        r.reason = detail::concat(c.name(), ": its groups straddle nodes of ", hw.gpus_per_node, " GPUs unevenly");
        out.push_back(std::move(r));
        continue;
      }
      if (!ends) ends = ends_of(g, hw, spans->tp);
      StepConfig sc = step_config(g, outer, *spans);
      sc.least_exposure = !exact;
      r.cost = step_memory(sc, exact ? layer : g.floor, *ends);
      if (r.cost.total_bytes() > hw.memory_bytes) {
        r.status = PlanStatus::out_of_memory, r.reason = binding_reason(r.cost, hw);
        out.push_back(std::move(r));
        continue;
      }
      r.cost = model_step(sc, layer, *ends, hw, mo);
      r.status = exact ? PlanStatus::ranked : PlanStatus::bounded;
      r.tokens_per_s_per_gpu = tokens / r.cost.step_s / o.gpus;
      r.mfu = mfu(r.tokens_per_s_per_gpu, flops_whole, peak);
      r.mfu_causal = mfu(r.tokens_per_s_per_gpu, flops_causal, peak);
      if (exact) r.reason = step_reason(r, *layer_reason);
      out.push_back(std::move(r));
    }
    return out;
  }

  StepConfig step_config(const Group& g, const Outer& outer, const Spans& spans) const {
    StepConfig sc;
    sc.layers = o.layers, sc.pp = outer.pp, sc.vp = outer.vp, sc.dp = outer.dp * g.layer.par.cp, sc.zero = outer.zero;
    sc.microbatches = outer.microbatches, sc.overlap_grad_reduce = o.overlap_grad_reduce;
    sc.dp_span = spans.weights, sc.pp_across_nodes = spans.pp_across_nodes;
    return sc;
  }

  EndsCost ends_of(const Group& g, const Hardware& hw, const GroupSpan& tp_span) const {
    if (o.vocab == 0) return EndsCost{};
    const ModelOptions& mo = o.modeling;
    const int64_t tokens = cfg.b * g.plan->packing->S / g.layer.par.cp;
    return ends_cost(cfg, tokens, o.vocab, g.layer.par.tp, tp_span, hw, mo);
  }

  double flops_whole = model_flops_per_token(cfg, o.layers, o.vocab, false);
  double flops_causal = model_flops_per_token(cfg, o.layers, o.vocab, true);
};

std::string binding_reason(const StepCost& s, const Hardware& hw) {
  const std::vector<std::pair<std::string, double>> terms{{"weights", s.state.weights},
                                                          {"gradients", s.state.grads},
                                                          {"optimizer state", s.state.optimizer},
                                                          {"activations", s.activation_bytes}};
  const auto most = std::max_element(terms.begin(), terms.end(), [](const auto& a, const auto& b) { return a.second < b.second; });
  return "out of memory: needs " + format_bytes(s.total_bytes()) + " of " + format_bytes(hw.memory_bytes) + " on stage " +
         std::to_string(s.fullest_stage) + "; binding: " + most->first + " " + format_bytes(most->second);
}

std::string where(const StepCandidate& c, const Spans& spans, const Hardware& hw) {
  const ParallelConfig& par = c.layer.par;
  const int G = par.tp * par.cp;
  std::vector<std::string> parts;
  auto nodes = [](const GroupSpan& s) { return s.nodes() == 1 ? std::string("inside a node") : "across " + std::to_string(s.nodes()) + " nodes"; };
  if (par.tp > 1) parts.push_back("TP " + std::to_string(par.tp) + " " + nodes(spans.tp));
  if (par.cp > 1) parts.push_back("the TP x CP group of " + std::to_string(G) + " " + (G <= hw.gpus_per_node ? "inside a node" : "across " + std::to_string(G / hw.gpus_per_node) + " nodes"));
  if (c.pp > 1) parts.push_back(std::to_string(c.pp) + " stages " + (spans.pp_across_nodes ? "on different nodes" : "inside a node"));
  if (spans.weights.size > 1) parts.push_back("gradients over DP x CP = " + std::to_string(spans.weights.size) + " " + nodes(spans.weights));
  std::string s;
  for (size_t i = 0; i < parts.size(); ++i) s += (i == 0 ? "" : i + 1 == parts.size() ? " and " : ", ") + parts[i];
  return s.empty() ? "a single GPU" : s;
}

std::string step_verdict(const StepPlan& plan, const StepPlanOptions& o) {
  if (plan.ranked() == 0) return "nothing fits on " + plan.hw.name + ".";
  const StepRow& win = plan.rows[0];
  char head[400];
  std::snprintf(head, sizeof head,
                "%s wins on %s: %.0f tokens/s per GPU, MFU %.1f%% (attention causally halved) or %.1f%% (attention whole), a step of "
                "%s for %d sequences (modeled). ",
                win.candidate.name().c_str(), plan.hw.name.c_str(), win.tokens_per_s_per_gpu, 100 * win.mfu_causal, 100 * win.mfu,
                format_ns(win.cost.step_s * 1e9).c_str(), o.gbs);
  std::string v = head;
  if (const std::optional<Spans> spans = spans_of(win.candidate, plan.hw.gpus_per_node))
    v += "Placement (" + win.candidate.order_name() + "): " + where(win.candidate, *spans, plan.hw) + ". ";
  v += "Why: " + win.reason + ".";
  if (const StepRow* second = step_runner_up(plan)) {
    char tail[200];
    std::snprintf(tail, sizeof tail, " The runner-up (the best of other degrees or placement), %s, is %.1f%% slower: ",
                  second->candidate.name().c_str(), 100.0 * (second->cost.step_s / win.cost.step_s - 1));
    v += tail + second->reason + ".";
  }
  return v;
}

}  // namespace

ModeledStep model_step_of(const LayerConfig& cfg, const StepCandidate& c, const StepPlanOptions& options, const Hardware& hw) {
  StepPlanOptions o = options;
  o.pp = c.pp, o.vp = c.vp, o.dp = c.dp, o.zero = c.zero;
  const int G = c.layer.par.tp * c.layer.par.cp;
  o.gpus = G * c.pp * c.dp;
  check_step_options(cfg, o);
  Group g;
  g.layer = c.layer, g.G = G;
  g.plan = resolve(c.layer.par, cfg, G);
  g.floor = formula_layer(*g.plan, o.modeling.dtype);
  std::vector<Outer> outer;
  for (const Outer& out : outer_configs(c.pp * c.dp, o.layers, o, true))
    if (out.order == c.order) outer.push_back(out);
  if (outer.size() != 1)
    throw ConfigError(detail::concat("model: PP = ", c.pp, ", VP = ", c.vp, " and DP = ", c.dp, " with GBS = ", o.gbs,
                                     " sequences do not make one pipeline of whole microbatches (m = GBS / (DP MBS))"));
  g.outers = &outer;
  const RecordedSchedule rec = record_schedule(*g.plan, false);
  const Replayed replayed = replay_layer(rec, g.layer, hw, o.modeling);
  const std::vector<Hardware> profiles{hw};
  const Evaluator eval{cfg, o, profiles};
  ModeledStep m;
  m.row = eval.rows(g, 0, replayed.layer, &replayed.reason).front();
  if (m.row.status == PlanStatus::invalid) throw ConfigError("model: " + m.row.reason);
  const std::optional<Spans> spans = spans_of(m.row.candidate, hw.gpus_per_node);
  m.layer = replayed.layer;
  m.ends = eval.ends_of(g, hw, spans->tp);
  m.config = eval.step_config(g, outer.front(), *spans);
  return m;
}

std::vector<StepPlan> make_step_plan(const LayerConfig& cfg, const StepPlanOptions& o, const std::vector<Hardware>& profiles,
                                     StepPlanStats* stats) {
  const auto t0 = std::chrono::steady_clock::now();
  auto elapsed = [&] { return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(); };
  if (profiles.empty()) throw ConfigError("plan: give at least one hardware profile (--hw)");
  if (o.modes.empty()) throw ConfigError("plan: give at least one recompute mode");
  check_step_options(cfg, o);
  const int P = o.gpus;
  StepPlanStats st;

  // The TP x CP groups of every size G that leaves a PP x DP around it, each resolved once.
  std::map<int, std::vector<Outer>> outers;  // by G
  std::vector<Group> groups;
  for (int G = 1; G <= std::min(P, o.max_group); ++G) {
    if (P % G != 0) continue;
    int node = 1;
    for (const Hardware& hw : profiles) node = std::max(node, hw.gpus_per_node);
    std::vector<Outer> around = outer_configs(P / G, o.layers, o, G < node);
    if (around.empty()) continue;
    const std::vector<Outer>* kept = &(outers[G] = std::move(around));
    for (const PlanCandidate& c : plan_candidates(cfg, o.layout, G, o.modes)) {
      if (dominated(c, cfg, o.layout)) continue;
      Group g;
      g.layer = c, g.G = G, g.outers = kept;
      try {
        g.plan = resolve(c.par, cfg, G);
        g.floor = formula_layer(*g.plan, o.modeling.dtype);
      } catch (const ConfigError& e) {
        g.invalid = e.what();
      }
      groups.push_back(std::move(g));
    }
  }
  if (groups.empty())
    throw ConfigError(detail::concat("plan: no TP x CP group of at most ", o.max_group, " GPUs leaves PP x DP around it on ", P,
                                     " GPUs with GBS = ", o.gbs, " and MBS = ", o.mbs,
                                     " (DP x MBS must divide GBS, PP must fit the ", o.layers, " layers)"));
  st.groups = groups.size();

  const Evaluator eval{cfg, o, profiles};
  const size_t profile_count = profiles.size();
  // Each valid group's rows on each profile by its lower bound: memory by the formulas, time by
  // compute alone at the best rates (every configuration's own time is at least that).
  std::vector<std::vector<std::vector<StepRow>>> rows(groups.size(), std::vector<std::vector<StepRow>>(profile_count));
  for (size_t i = 0; i < groups.size(); ++i)
    if (groups[i].plan)
      for (size_t p = 0; p < profile_count; ++p)
        rows[i][p] = eval.rows(groups[i], p, bound_layer(*groups[i].plan, profiles[p], o.modeling), nullptr);
  // The same group with less recomputation: where one of those fits, recomputing more is never
  // faster (it adds compute and changes no communication), so that row needs no dry run.
  std::map<std::tuple<int, int, int, int, int, int, int>, std::vector<size_t>> siblings;  // G, T, cp_comm, U, layout, order
  for (size_t i = 0; i < groups.size(); ++i) {
    const ParallelConfig& par = groups[i].layer.par;
    if (groups[i].plan) siblings[{groups[i].G, par.tp, int(par.cp_comm), par.a2a_size(), int(par.layout), int(par.order), 0}].push_back(i);
  }
  auto lighter_fits = [&](size_t i, size_t p, size_t k) -> const StepRow* {
    const ParallelConfig& par = groups[i].layer.par;
    for (size_t j : siblings[{groups[i].G, par.tp, int(par.cp_comm), par.a2a_size(), int(par.layout), int(par.order), 0}]) {
      const StepRow& r = rows[j][p][k];
      if (int(groups[j].layer.par.recompute) < int(par.recompute) && (r.status == PlanStatus::ranked || r.status == PlanStatus::bounded) &&
          r.reason.empty())
        return &r;
    }
    return nullptr;
  };

  // Recompute level by level (none, selective, full), and within a level the schedule shapes by
  // their best bound: dry-run one only while some configuration of it could still beat the best
  // verified on some profile.
  std::vector<double> best(profile_count, INFINITY);
  for (Recompute level : {Recompute::none, Recompute::selective, Recompute::full}) {
    std::map<std::tuple<int, int, int, int, int>, std::vector<size_t>> shapes;  // T, C, cp_comm, U, layout
    std::map<size_t, std::vector<double>> best_bound;                          // by group
    for (size_t i = 0; i < groups.size(); ++i) {
      const ParallelConfig& par = groups[i].layer.par;
      if (!groups[i].plan || par.recompute != level) continue;
      std::vector<double>& bound = best_bound[i] = std::vector<double>(profile_count, INFINITY);
      for (size_t p = 0; p < profile_count; ++p)
        for (size_t k = 0; k < rows[i][p].size(); ++k) {
          StepRow& r = rows[i][p][k];
          if (r.status != PlanStatus::bounded) continue;
          if (const StepRow* lighter = o.exhaustive ? nullptr : lighter_fits(i, p, k))
            r.reason = "not dry-run: " + lighter->candidate.name() + " fits, and recomputing more is never faster";
          else
            bound[p] = std::min(bound[p], r.cost.step_s);
        }
      shapes[{par.tp, par.cp, int(par.cp_comm), par.a2a_size(), int(par.layout)}].push_back(i);
    }
    // A shape's members (its orders) verified: replayed on every profile, their rows exact.
    auto verify = [&](const std::vector<size_t>& members) {
      const RecordedSchedule rec = record_schedule(*groups[members.front()].plan, false);
      ++st.dry_runs;
      for (size_t i : members)
        for (size_t p = 0; p < profile_count; ++p) {
          const Replayed replayed = replay_layer(rec, groups[i].layer, profiles[p], o.modeling);
          rows[i][p] = eval.rows(groups[i], p, replayed.layer, &replayed.reason);
          for (const StepRow& r : rows[i][p])
            if (r.status == PlanStatus::ranked) best[p] = std::min(best[p], r.cost.step_s);
        }
      if (o.progress) o.progress(st.dry_runs, st.dry_runs + shapes.size(), elapsed());
    };
    auto shape_bound = [&](const std::vector<size_t>& members, size_t p) {
      double b = INFINITY;
      for (size_t i : members) b = std::min(b, best_bound[i][p]);
      return b;
    };
    auto open = [&](const std::vector<size_t>& members, double scale) {
      for (size_t p = 0; p < profile_count; ++p)
        if (o.exhaustive && shape_bound(members, p) < INFINITY) return true;
      for (size_t p = 0; p < profile_count; ++p)
        if (shape_bound(members, p) * scale < best[p] * (1 + kMargin)) return true;
      return false;
    };
    // Families: the shapes of one group size and T (the same TP part and tokens a rank), which
    // differ in context parallelism alone. Each family's representative, its cheapest schedule
    // to record (all-gather, then Ulysses, the ring, the hybrid), is verified first while its
    // bound could still win; the ratio of its verified time to its bound then estimates its
    // siblings', and a sibling is verified while that estimate is within kMargin of the best.
    std::map<std::pair<int, int>, std::vector<const std::vector<size_t>*>> families;  // T, C
    for (const auto& [key, members] : shapes) families[{std::get<0>(key), std::get<1>(key)}].push_back(&members);
    auto cost_rank = [&](const std::vector<size_t>* members) {
      static const std::map<CpComm, int> order{{CpComm::none, 0}, {CpComm::all_gather, 1}, {CpComm::a2a, 2}, {CpComm::p2p, 3}, {CpComm::a2a_p2p, 4}};
      return order.at(groups[members->front()].layer.par.cp_comm);
    };
    std::vector<std::pair<double, std::pair<int, int>>> family_queue;
    for (auto& [key, list] : families) {
      std::stable_sort(list.begin(), list.end(), [&](auto* a, auto* b) { return cost_rank(a) < cost_rank(b); });
      double b = INFINITY;
      for (const auto* members : list) b = std::min(b, shape_bound(*members, 0));
      family_queue.push_back({b, key});
    }
    std::stable_sort(family_queue.begin(), family_queue.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
    std::map<std::pair<int, int>, std::vector<double>> ratio;  // by family, per profile: verified / bound
    std::set<const std::vector<size_t>*> verified;
    for (const auto& [bound, key] : family_queue) {
      const std::vector<size_t>* representative = families[key].front();
      if (!open(*representative, 1.0)) continue;
      std::vector<double> before(profile_count);
      for (size_t p = 0; p < profile_count; ++p) before[p] = shape_bound(*representative, p);
      verify(*representative);
      verified.insert(representative);
      std::vector<double>& r = ratio[key] = std::vector<double>(profile_count, 1.0);
      for (size_t p = 0; p < profile_count; ++p) {
        double exact = INFINITY;
        for (size_t i : *representative)
          for (const StepRow& row : rows[i][p])
            if (row.status == PlanStatus::ranked) exact = std::min(exact, row.cost.step_s);
        if (exact < INFINITY && before[p] < INFINITY) r[p] = std::max(1.0, exact / before[p]);
      }
    }
    std::vector<std::tuple<double, const std::vector<size_t>*, double>> estimates;  // estimate, shape, its family's ratio
    for (const auto& [key, list] : families) {
      const auto it = ratio.find(key);
      const double scale = it == ratio.end() ? 1.0 : it->second[0];
      for (const auto* members : list)
        if (!verified.count(members)) estimates.push_back({shape_bound(*members, 0) * scale, members, scale});
    }
    std::stable_sort(estimates.begin(), estimates.end(), [](const auto& a, const auto& b) { return std::get<0>(a) < std::get<0>(b); });
    for (const auto& [estimate, members, scale] : estimates) {
      if (open(*members, scale)) {
        verify(*members);
        continue;
      }
      for (size_t i : *members)  // say why it was not dry-run
        for (size_t p = 0; p < profile_count; ++p)
          for (StepRow& row : rows[i][p])
            if (row.status == PlanStatus::bounded && row.reason.empty())
              row.reason = "not dry-run: at least " + format_ns(row.cost.step_s * 1e9) + " a step (compute alone at the best rates)" +
                           (scale > 1 ? detail::concat(", about ", format_ns(row.cost.step_s * scale * 1e9), " by its family's verified ratio ",
                                                       std::round(scale * 1000) / 1000)
                                      : std::string()) +
                           ", against " + format_ns(best[p] * 1e9) + " verified";
    }
  }

  std::vector<StepPlan> plans(profile_count);
  for (size_t p = 0; p < profile_count; ++p) {
    plans[p].hw = profiles[p];
    for (size_t i = 0; i < groups.size(); ++i) {
      if (!groups[i].plan) {
        StepRow row;
        row.candidate.layer = groups[i].layer, row.candidate.pp = 0;
        row.status = PlanStatus::invalid, row.reason = groups[i].invalid;
        plans[p].rows.push_back(std::move(row));
        continue;
      }
      for (StepRow& r : rows[i][p]) {
        if (r.status == PlanStatus::bounded && r.reason.empty())
          r.reason = "not dry-run: at least " + format_ns(r.cost.step_s * 1e9) + " a step (compute alone at the best rates), slower than " +
                     format_ns(best[p] * 1e9) + ", the best verified";
        plans[p].rows.push_back(std::move(r));
      }
    }
    std::stable_sort(plans[p].rows.begin(), plans[p].rows.end(), [](const StepRow& a, const StepRow& b) {
      if (a.status != b.status) return status_place(a.status) < status_place(b.status);
      if (a.status == PlanStatus::ranked || a.status == PlanStatus::bounded) return a.cost.step_s < b.cost.step_s;
      if (a.status == PlanStatus::out_of_memory) return a.cost.total_bytes() < b.cost.total_bytes();
      return false;
    });
    plans[p].verdict = step_verdict(plans[p], o);
    for (const StepRow& r : plans[p].rows) {
      st.invalid += p == 0 && r.status == PlanStatus::invalid;
      st.memory_rejects += p == 0 && r.status == PlanStatus::out_of_memory;
      st.bounded += p == 0 && r.status == PlanStatus::bounded;
    }
  }
  st.candidates = plans.front().rows.size();
  bool any = false;
  for (const StepPlan& plan : plans) any |= plan.ranked() > 0;
  if (!any) {
    const StepRow* least = nullptr;
    for (const StepRow& r : plans.front().rows)
      if (r.status == PlanStatus::out_of_memory && (!least || r.cost.total_bytes() < least->cost.total_bytes())) least = &r;
    if (!least) throw ConfigError(detail::concat("plan: no configuration of ", P, " GPUs is valid: ", plans.front().rows.front().reason));
    throw ConfigError(detail::concat("plan: nothing fits in ", format_bytes(plans.front().hw.memory_bytes), " per GPU on ", P,
                                     " GPUs: the least is ", least->candidate.name(), ", which ", least->reason.substr(least->reason.find("needs")),
                                     ". Give more GPUs, a shorter --seq, a smaller --mbs, or --recompute any"));
  }
  st.seconds = elapsed();
  if (stats) *stats = st;
  return plans;
}

}  // namespace ringside::model

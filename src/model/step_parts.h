// The parts the whole-step planner (step_plan.h) is built from: where a configuration's groups
// sit, a TP x CP group's layer by the formulas, by a lower bound and by its replay, the outer
// configurations around a group, and the rows of one group on one profile. Internal to the
// planner: its tests go through step_plan.h.
#pragma once
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "model/flops.h"
#include "model/plan.h"
#include "model/step_plan.h"

namespace ringside::model::step_parts {

/// Where a configuration's groups sit on the job's topology, each its widest group's span.
struct Spans {
  Span group;    ///< the TP x CP group (its layer's replay is placed on it)
  Span tp;       ///< the TP group
  Span weights;  ///< DP x CP: the ranks that hold the same weights
  Span pp;       ///< a pipeline's stages, in stage order
  std::vector<int> group_gpus;  ///< the GPUs of the widest TP x CP group, by its rank in the layer's order
};

/// The spans of c on `topology` (P = T C PP DP GPUs), from c's rank grid: the group's T C ranks
/// innermost (TP at stride 1 in tp-cp order, C in cp-tp), then PP and DP in c's outer order.
/// Where every group of a dimension sits alike (each stride and extent a divisor or multiple of
/// each domain, every domain full) the group holding GPU 0; else the widest of them all.
Spans spans_of(const StepCandidate& c, const Topology& topology);

/// The most microbatch-chunks a simulated pipeline may hold, PP VP m: each is an op to simulate,
/// twice. Past it a configuration is not weighed (make_step_plan) or is refused (model).
inline constexpr int64_t kMaxPipelineChunks = int64_t{1} << 20;

/// One (PP, VP, DP, ZeRO, order) around a group, with its m = GBS / (DP MBS) microbatches.
struct Outer {
  int pp, vp, dp, zero, microbatches;
  OuterOrder order;
};

/// Every Outer of `rest` = P / G GPUs of groups that o allows (the fixed degrees, GBS divisible
/// by DP MBS, stage_layers' rule, VP dividing a stage's layers and m divisible by PP when > 1,
/// PP VP m at most kMaxPipelineChunks);
/// the dp-pp order only where it can place the groups differently (`orders_differ`).
std::vector<Outer> outer_configs(int rest, int layers, const StepPlanOptions& o, bool orders_differ);

/// One TP x CP group configuration and the outer configurations around it.
struct Group {
  PlanCandidate layer;
  int G = 1;
  std::optional<RunPlan> plan;  ///< resolved, or refused (then `invalid` says why)
  std::string invalid;
  const std::vector<Outer>* outers = nullptr;
  LayerCost floor;  ///< by the formulas
};

/// The group's layer by the formulas alone: its parameters, saved activations (the most of any
/// rank) and the activations sent between stages, b S / C h / T elements; no times.
LayerCost formula_layer(const RunPlan& plan, const std::string& dtype);

/// A lower bound of the group's layer: each rank's GEMMs at the profile's best GEMM rate (MAMF,
/// which no shape exceeds) and the most attention FLOPs of any rank at the best rate of the
/// attention kernel's curves; memory-bound ops and exposed communication left out. The
/// backward's GEMMs are twice the forward's, its attention 2.5 times; full recomputation adds
/// the forward.
/// `attention_flops` is max_attention_flops(plan), which costs O(s) and is the same for every
/// recompute mode and order of a shape: the caller keeps it.
LayerCost bound_layer(const RunPlan& plan, const Hardware& hw, const ModelOptions& modeling, double attention_flops);
/// The most forward attention FLOPs of any rank of the plan (parallel_attention_flops).
double max_attention_flops(const RunPlan& plan);

/// The layer's memory as its dry run counted it, into `layer` (whose params, the formula's, it
/// reads): the most saved activations of any rank, and the working peak, the most of any rank's
/// peak above its weights, gradients (2 params, in `dtype`) and saved activations (0 at least).
/// The dry run's fp32 bytes scaled to `dtype`.
void measured_memory(const RecordedSchedule& rec, const std::string& dtype, LayerCost& layer);

/// The group's layer by its replay, and the reason that sets its time (layer_reason).
struct Replayed {
  LayerCost layer;
  std::string reason;
  TimeParts parts;  ///< one microbatch's layer by class, per GPU (layer_time_parts)
};
/// The recorded schedule replayed on hw in c's placement, its ranks on `gpus` of a job of
/// `world` GPUs (Spans::group_gpus; empty: the first G): the slowest rank's forward and its
/// backward less its gradient sync (the step folds that into DP x CP), TP's and CP's exposed
/// communication per GPU, the measured saved bytes and working peak.
Replayed replay_layer(const RecordedSchedule& rec, const PlanCandidate& c, const Hardware& hw, const ModelOptions& modeling,
                      int world = 0, const std::vector<int>& gpus = {});

/// "out of memory: needs X of Y on stage r; binding: <the largest term> Z" (binding_term).
std::string binding_reason(const StepCost& s, const Hardware& hw);
/// A ranked row's reason: the layer's, then the pipeline's bubble beside its formula and the
/// gradient collectives' time.
std::string step_reason(const StepRow& row, const std::string& layer_reason);
/// A ranked row's step by class from its layer's (one microbatch, `layer`): the layer's classes
/// times the first stage's layers and the microbatches (as StepCost counts TP's and CP's exposed
/// time), the rest of the pipeline's busy time (embedding, head, ZeRO 3 gathers: stage_rest), its
/// bubble less the transfers between stages (bubble), those (pp), the exposed DP collectives (dp)
/// and the optimizer.
TimeParts step_time_parts(const TimeParts& layer, const StepRow& row, int layers);

/// The rows of one group on one profile, one per outer configuration.
/// The guard on a modeled step row: throws Error (a bug, never a result to print) naming the
/// candidate and the numbers when its MFU passes 100%, a time is negative or not finite, the step
/// is shorter than its pipeline, or the memory's parts are negative or do not add up to the total.
void check_step_row(const StepRow& r, const Hardware& hw);

struct Evaluator {
  const LayerConfig& cfg;
  const StepPlanOptions& o;
  const std::vector<Hardware>& profiles;

  /// With `layer_reason` null, by the layer's lower bound: memory by the formulas, status
  /// bounded where it fits (else out_of_memory). Otherwise by its replay: ranked or
  /// out_of_memory. A configuration whose groups straddle nodes is invalid. `memo` keeps the
  /// pipelines simulated, for this call's other rows and the caller's next calls.
  /// `parts`: the replayed layer's by class (Replayed::parts), for each ranked row's (StepRow::parts).
  std::vector<StepRow> rows(const Group& g, size_t profile, const LayerCost& layer, const std::string* layer_reason,
                            PipelineMemo& memo, const TimeParts* parts = nullptr) const;
  StepConfig step_config(const Group& g, const Outer& outer, const Spans& spans) const;
  EndsCost ends_of(const Group& g, const Hardware& hw, const Span& tp_span) const;
  /// The spans of c on profile `profile`, memoized by its grid (every ZeRO stage and VP of one
  /// placement shares them).
  const Spans& spans(const StepCandidate& c, size_t profile) const;
  /// The group's layer replayed on profile `profile`, placed on its widest group's GPUs of the
  /// o.gpus (replay_layer).
  Replayed replay(const RecordedSchedule& rec, const Group& g, size_t profile) const;
  mutable std::map<std::pair<size_t, std::string>, Spans> spans_memo{};

  double flops_per_token = model_flops_per_token(cfg, o.layers, o.vocab, true);  ///< MFU's: attention as masked
};

}  // namespace ringside::model::step_parts

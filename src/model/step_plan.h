// The planner of a whole training step: which TP x CP group, pipeline and data parallelism for
// this model, this sequence length and these GPUs, up to 131,072 of them (today's largest clusters).
//
// Every configuration of P GPUs is a TP x CP group of G = T C ranks (the layer's split, as the
// layer planner weighs it: plan.h) inside PP pipeline stages and DP data-parallel replicas, P =
// T C PP DP, with VP model chunks a rank, a ZeRO stage, a recompute mode, a token layout and a
// rank order. Only the group is dry-run, once per schedule shape (at most G ranks, whatever P
// is); each stage, microbatch and replica reuses its replay, and the pipeline, the gradient
// collectives and the optimizer are simulated around it (model/step.h). Ranked by the modeled
// step time of GBS sequences, that is by tokens per second per GPU.
//
// Rank orders: the group innermost (its tp-cp or cp-tp order), then tp-cp-pp-dp (Llama 3's
// [TP, CP, PP, DP], Dubey et al. 2024, 3.3.2) or tp-cp-dp-pp (Megatron-LM's default
// tp-cp-ep-dp-pp); nodes of gpus_per_node consecutive ranks. The numbers are the model's
// (deterministic replay on a named profile), not measurements.
#pragma once
#include <functional>
#include <string>
#include <vector>

#include "core/progress.h"
#include "model/plan.h"
#include "model/step.h"
#include "parallel/rank_grid.h"

namespace ringside::model {

/// The order of the dimensions outside the TP x CP group, innermost first.
enum class OuterOrder { pp_dp, dp_pp };

/// One configuration of the whole step.
struct StepCandidate {
  PlanCandidate layer;  ///< the TP x CP group of G ranks: degrees, CP kind, inner order, layout, recompute
  int pp = 1, vp = 1, dp = 1, zero = 1;
  OuterOrder order = OuterOrder::pp_dp;
  int microbatches = 1;  ///< m = GBS / (DP MBS)
  /// The rank order, innermost first: "tp-cp-pp-dp", "cp-tp-dp-pp" and the like.
  std::string order_name() const;
  /// The rank grid of its P = T C PP DP GPUs in that order (T, U, R, PP, DP): every group's
  /// members and stride. Throws ConfigError for a degree below 1 (pp 0: a group alone).
  RankGrid grid() const { return RankGrid(GridSizes::of(layer.par, pp, dp), order_name()); }
  /// "tp8xring16 zigzag none pp16 dp8 zero1 pp-dp": the group with its degrees (ring8 when T is
  /// 1), layout and recompute mode, then PP, VP when > 1, DP, the ZeRO stage, and the outer
  /// order when PP and DP are both > 1.
  std::string name() const;
};

struct StepPlanOptions {
  int gpus = 8;            ///< P
  int layers = 1;          ///< L
  int64_t vocab = 0;       ///< V (0: no embedding or LM head)
  int gbs = 1;             ///< global batch, sequences
  int mbs = 1;             ///< microbatch, sequences
  int pp = 0, vp = 0, dp = 0;  ///< fixed when > 0, else weighed
  int zero = -1;               ///< fixed when >= 0, else 0 .. 3 weighed
  bool overlap_grad_reduce = true;
  std::vector<Recompute> modes{Recompute::none, Recompute::selective, Recompute::full};
  /// The replay's options: the element type, the efficiency, the attention kernel and merge
  /// (its node_of is the planner's own, from each candidate's placement).
  ModelOptions modeling;
  Layout layout = Layout::automatic;
  std::vector<const CpScheme*> schemes;  ///< PlanOptions::schemes
  int max_group = 256;  ///< the most ranks a TP x CP group (a dry run) may have
  /// Dry-run every schedule shape that fits, whatever its bound or estimate, and weigh more
  /// recomputation where less fits (the search below, without its shortcuts): for tests and
  /// for users who want every row verified.
  bool exhaustive = false;
  /// Told each phase of the search and its work as it goes (core/progress.h); null: nobody.
  ProgressReport* progress = nullptr;
};

/// The rank order that order_name() spells, "tp-cp-pp-dp", "cp-tp-dp-pp" and the like: the
/// group's inner order and the outer one. Throws ConfigError naming the four spellings for any
/// other text.
std::pair<RankOrder, OuterOrder> parse_order_name(const std::string& name);

/// A candidate on one profile; times per step, bytes per GPU of its fullest stage.
struct StepRow {
  StepCandidate candidate;
  PlanStatus status = PlanStatus::invalid;
  std::string reason;  ///< ranked: what sets its time; invalid: the rule; out_of_memory: the binding term
  StepCost cost;
  double tokens_per_s_per_gpu = 0;
  double mfu = 0;  ///< model FLOPs over the peak, attention as its mask leaves it (flops.h: attention_pairs)
  /// ranked: its step by class (time_parts.h), per GPU of the first stage: its layers' classes
  /// over all its microbatches, the bubble, PP, DP, the optimizer and the rest of the stage.
  TimeParts parts;
  /// ranked: the class in which it loses most time to the winner, in words with the numbers
  /// (the winner's: where it wins most over the runner-up); empty when alone.
  std::string versus;
};

struct StepPlan {
  Hardware hw;
  std::vector<StepRow> rows;  ///< ranked by step time, then the invalid, then those out of memory
  std::string verdict;
  size_t ranked() const;
};

struct StepPlanStats {
  size_t candidates = 0, invalid = 0, memory_rejects = 0;
  size_t bounded = 0;   ///< configurations whose lower bound lost to a verified one: not dry-run
  size_t groups = 0;    ///< TP x CP group configurations weighed
  size_t dry_runs = 0;  ///< schedules recorded
  /// Pipelines simulated (each configuration that fits needs one, two when it is dry-run), those
  /// answered by one simulated already (the same spec: model/pipeline.h's PipelineMemo), and
  /// the ops simulated, 2 PP VP m a pipeline: the search's main cost.
  size_t pipelines = 0, pipelines_reused = 0;
  double pipeline_ops = 0;
  double seconds = 0;
};

/// The checks make_step_plan makes of its options before any work (each message above).
void check_step_options(const LayerConfig& cfg, const StepPlanOptions& o);

/// The whole-step plan of `cfg` (a valid layer, its b the microbatch) for each profile. Throws
/// ConfigError for bad options, each named (GBS not divisible by DP x MBS, VP without PP, PP and
/// DP not dividing P, a PP that model_step refuses), when no configuration is valid, or when none
/// fits on any profile (the least need named).
std::vector<StepPlan> make_step_plan(const LayerConfig& cfg, const StepPlanOptions& o, const std::vector<Hardware>& profiles,
                                     StepPlanStats* stats = nullptr);

/// One configuration's step, with what it was simulated from.
struct ModeledStep {
  StepRow row;
  StepConfig config;  ///< the step around the group (its spans on the profile)
  LayerCost layer;    ///< the group's replayed layer
  EndsCost ends;
};

/// One configuration's step on `hw`, verified: its group dry-run and replayed, the step
/// simulated around it (o gives L, V, GBS, MBS, the modeling options and overlap; c the degrees
/// and order, its outer order pp-dp wherever PP or DP is 1: one placement). Its row is ranked, or out_of_memory with the binding term. Throws ConfigError as
/// make_step_plan does for bad options, or when the degrees do not make a pipeline of whole
/// microbatches or straddle nodes unevenly.
ModeledStep model_step_of(const LayerConfig& cfg, const StepCandidate& c, const StepPlanOptions& o, const Hardware& hw);

/// The modeled step as a timeline for the viewer, one row per pipeline stage: each row is one
/// GPU of the stage standing for all T C DP of them (they run the same schedule: TP's and CP's
/// ranks in lockstep, DP's replicas on their own microbatches). Its compute stream holds each
/// microbatch's forward and backward of each chunk (names "F3" and "B3 chunk 1", phase forward
/// or backward), the bubbles between them as waits ("bubble"), and after the last backward the
/// optimizer ("adam"); its comm stream the transfers between stages (p2p) and the gradient
/// collectives over DP x CP with their bytes. Every row's strategy is `label`; the run is
/// marked modeled on `hw`.
trace::TraceData step_timeline(const ModeledStep& step, const Hardware& hw, const ModelOptions& o, const std::string& label);

/// The runner-up: the fastest ranked row whose degrees or placement differ from the winner's.
const StepRow* step_runner_up(const StepPlan& plan);

}  // namespace ringside::model

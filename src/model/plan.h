// The planner: which parallel layout for this model, this sequence length and these GPUs.
//
// It enumerates every configuration of P GPUs (plan_candidates), rejects those the layer cannot
// split that way (the rule resolve names, parallel/run_plan.h) and those that do not fit in a GPU's
// memory (the binding term), dry-runs the strategy code of the rest and replays each schedule
// on the hardware profiles (model.h), and ranks them by the modeled step time of L layers.
//
// What a step of L layers is here: L copies of the one layer, forward and backward, one after
// another (L x the slowest rank's layer time). Its memory is the whole step's count (step.h's
// step_memory, which plan --gbs, plan --max-seq and model --gbs print too) for the TP x CP group
// alone: PP 1, DP 1, one microbatch, the weights, gradients and Adam state of the L layers and
// of the embedding and LM head (V = PlanOptions::vocab) sharded by ZeRO 3 over the C ranks of
// CP (which hold the same weights: the least memory the group alone can train in), the saved
// activations of L layers, one layer's working peak and the head's input and logits. Not
// modeled in its time: pipeline parallelism, data parallelism, ZeRO's collectives, the
// optimizer step, the embedding and the output head, and overlap between layers (a layer's
// gradient all-reduce under the next one's backward). The numbers are the model's
// (deterministic replay on a named profile), not measurements.
#pragma once
#include <functional>
#include <string>
#include <vector>

#include "core/progress.h"
#include "model/model.h"
#include "model/step.h"
#include "model/time_parts.h"
#include "parallel/groups.h"
#include "trace/metrics.h"

namespace ringside::model {

/// One configuration the planner weighs: degrees and rank order (placement), the token layout
/// and the recompute mode.
struct PlanCandidate {
  ParallelConfig par;  ///< resolved for P, with its layout and recompute mode
  /// The configuration's name, its layout where layouts differ, its order when it has two, and
  /// its recompute mode: "tp8xring8 zigzag full", "ring8xtp8 zigzag none" (cp-tp), "ulysses none".
  std::string name() const;
};

/// Every candidate for P GPUs, valid or not, in this order: T over the divisors of P, ascending
/// (C = P / T); for C = 1 TP alone; for C > 1 cp_comm p2p, all_gather, a2a, then a2a+p2p for each
/// U dividing C with 1 < U < C; under a causal mask the layouts contiguous, zigzag and striped
/// for p2p, all_gather and a2a+p2p, or the `given` layout alone when it is not auto (for a2a, TP alone, or without a mask, contiguous alone: every
/// layout does the same work); the orders tp-cp and cp-tp when T > 1 and C > 1; each of `modes`.
std::vector<PlanCandidate> plan_candidates(const LayerConfig& cfg, Layout given, int P, const std::vector<Recompute>& modes,
                                           const std::vector<const CpScheme*>& schemes = {});

struct PlanOptions {
  int gpus = 8;     ///< P
  int layers = 1;   ///< L
  int64_t vocab = 0;  ///< V, the embedding's and the LM head's (memory alone); 0: none
  std::vector<Recompute> modes{Recompute::none, Recompute::selective, Recompute::full};
  /// How each candidate is modeled: the element type, efficiency, stack and its overrides (its
  /// gpu_of is the planner's own, from each candidate's placement).
  ModelOptions modeling;
  Layout layout = Layout::automatic;  ///< --layout: automatic weighs every layout that differs
  /// --cp-comm: the context-parallel schemes to weigh; empty: those a framework runs
  /// (CpScheme::planned_by_default: every one but ringside's own pass-Q ring).
  std::vector<const CpScheme*> schemes;
  /// Told each phase (the rules, the dry runs, the ranking) and its work as it goes
  /// (core/progress.h): what the command shows while a long plan runs. Null: nobody.
  ProgressReport* progress = nullptr;
};

/// ranked: modeled and fits; invalid: breaks a rule; out_of_memory: does not fit; bounded (the
/// whole-step plan): fits, but its lower bound is slower than a verified configuration, so it
/// was not dry-run.
enum class PlanStatus { ranked, invalid, out_of_memory, bounded };
/// "ranked", "invalid", "out_of_memory", "bounded" (the --json files' status).
const char* to_string(PlanStatus s);

/// A candidate on one profile. Times and bytes are for L layers, per GPU.
struct PlanRow {
  PlanCandidate candidate;
  PlanStatus status = PlanStatus::invalid;
  /// ranked: one line on what sets its time (the formula of its chattiest group); invalid: the
  /// rule it breaks; out_of_memory: the binding term.
  std::string reason;
  double step_s = 0;         ///< L x the slowest rank's forward + backward
  double exposed_s = 0;      ///< communication no compute hides, mean over the GPUs
  /// Its time by class (time_parts.h), L layers per GPU: parts.exposed() is exposed_s split into
  /// CP, TP and the gradient all-reduce.
  TimeParts parts;
  /// ranked: the class in which it loses most time to the winner, in words with the numbers
  /// (the winner's: the class in which it wins most over the runner-up); empty when alone.
  std::string versus;
  double overlap_pct = 0;    ///< of all communication, time under compute
  double attention_hidden_pct = 0;  ///< of attention's own communication (K/V, all-to-alls), time under compute; NaN: none
  double peak_bytes = 0;     ///< memory.total_bytes(): what a GPU needs (out_of_memory: more than it has)
  /// The step's count of the group alone (group_memory): by the formulas where they alone
  /// reject it (no working peak), else with the dry run's saved activations and working peak.
  StepCost memory;
  /// Bytes sent on each tier's links (the profile's tiers, innermost first: NVLink, then
  /// InfiniBand), the most of any GPU.
  std::vector<double> tier_bytes;
  /// Of those, the bytes that leave the innermost tier's domain (all of them on a one-tier system).
  double beyond_domain_bytes() const {
    double b = 0;
    for (size_t t = tier_bytes.size() > 1 ? 1 : 0; t < tier_bytes.size(); ++t) b += tier_bytes[t];
    return b;
  }
};

/// The plan on one profile: the ranked rows by step time, then the rejected ones.
struct Plan {
  Hardware hw;
  int P = 1;  ///< the GPUs planned for
  std::vector<PlanRow> rows;
  std::string verdict;  ///< why the winner wins: where its groups sit, and the runner-up
  size_t ranked() const;
};

/// The ZeRO stage of the layer plan's memory count: 3, over the C ranks of CP.
inline constexpr int kGroupZero = 3;
/// The step the layer plan counts memory for: the group of `par` alone, L = `layers`, PP 1,
/// VP 1, one microbatch, its weights shared by its C CP ranks (DP x CP = C) under ZeRO
/// kGroupZero, weights in `dtype`.
StepConfig group_step(const ParallelConfig& par, int layers, const std::string& dtype);
/// The layer plan's memory of a candidate (`plan`, resolved): step_memory of group_step with
/// `layer` (its params and saved activations, and its working peak where measured) and the
/// embedding's and head's memory for o.vocab over the b S / C tokens of a CP rank.
StepCost group_memory(const RunPlan& plan, const LayerCost& layer, const PlanOptions& o);

/// The runner-up: the fastest ranked row whose degrees or placement differ from the winner's
/// (not the winner again in another layout or recompute mode, nor in the other rank order when
/// its group fits one node, where both orders place every group alike), or nullptr.
const PlanRow* runner_up(const Plan& plan);

struct PlanStats {
  size_t candidates = 0, invalid = 0;
  size_t dry_runs = 0;         ///< schedules recorded
  size_t reused = 0;           ///< replays of a schedule recorded for another order or profile
  size_t memory_rejects = 0;   ///< rejected by the formulas before any dry run
  double seconds = 0;
};

/// The plan of `cfg` (a valid layer: resolve_one_rank) on o.gpus GPUs for each profile. One
/// dry run serves every order and profile of a schedule shape (the cp-tp order is the tp-cp
/// schedule placed differently: ModelOptions::gpu_of), and a candidate whose memory by the
/// formulas alone (group_memory without the working peak) exceeds a profile's is rejected there
/// without one. Throws ConfigError when no candidate is valid (each rule named) or none fits on any
/// profile (the smallest need named).
std::vector<Plan> make_plan(const LayerConfig& cfg, const PlanOptions& o, const std::vector<Hardware>& profiles,
                            PlanStats* stats = nullptr);

/// A candidate's schedule, recorded once by a dry run in tp-cp order: every order places the
/// same coordinates, so one schedule serves both orders and every profile (schedule_gpus).
struct RecordedSchedule {
  RunPlan plan;                            ///< the candidate's, in tp-cp order
  std::unique_ptr<MemoryTracker> tracker;  ///< before the results: it outlives their tensors
  trace::TraceData schedule;
  std::vector<RunRecord> results;          ///< each rank's peaks, counted by the dry run
};

/// The dry run of `plan` (resolved), in tp-cp order; without the layer's gradient all-reduces
/// when !grad_sync (LayerOptions::grad_sync).
RecordedSchedule record_schedule(const RunPlan& plan, bool grad_sync = true);

/// While one lives, recorded_schedule keeps each schedule it records and returns it again for the
/// same configuration (`ringside validate`'s fits model a case many times over one dry run).
class ScheduleCacheScope {
 public:
  ScheduleCacheScope();
  ~ScheduleCacheScope();
  ScheduleCacheScope(const ScheduleCacheScope&) = delete;
  ScheduleCacheScope& operator=(const ScheduleCacheScope&) = delete;
};
/// record_schedule, from the cache while a ScheduleCacheScope lives.
std::shared_ptr<const RecordedSchedule> recorded_schedule(const RunPlan& plan, bool grad_sync);

/// The GPU of each rank of a tp-cp dry run when the same coordinates are placed in `par`'s order
/// (ModelOptions::gpu_of): a cp-tp candidate replayed from the tp-cp schedule.
std::vector<int> schedule_gpus(const ParallelConfig& par, int P);
/// Bytes each rank of `schedule` sends on each tier's links (the most of any rank, per tier),
/// its ranks on the GPUs `gpu_of` of `topology`, fp32 bytes times `scale`.
std::vector<double> link_traffic(const trace::TraceData& schedule, const std::vector<int>& gpu_of, const Topology& topology,
                                 double scale);
/// The widest span of `par`'s groups of `kind` on `topology` (its ranks the job's first GPUs):
/// the one whose links reach the outermost tier, the most of its ring's hops on it; uneven when
/// any group is. Every consumer of the planners asks this, or Topology::span, for placement.
Span widest_span(const ParallelConfig& par, GroupKind kind, const Topology& topology);
/// The tier a span uses, in words: "inside one NVLink domain", "across InfiniBand", "over
/// InfiniBand" (a one-tier system).
std::string link_words(const Span& span, const Hardware& hw);
/// Where a group sits, for a verdict: "sits inside one NVLink domain (450 GB/s)", "crosses
/// InfiniBand on 2 of its 16 hops (50 GB/s)" (hops for a ring), and how unevenly.
std::string placement_words(const Span& span, const Hardware& hw, bool ring);

/// One line on what sets a candidate's time: the formula of its most exposed group, then each
/// group's (TP's, then context parallelism's), on `hw` as `o` models it; m is its replay's metrics.
std::string layer_reason(const PlanCandidate& c, const RunPlan& plan, const Hardware& hw, const ModelOptions& o,
                         const trace::StrategyMetrics& m);

/// A candidate's modeled timeline on `hw` (a dry run in its own order), labelled `label`, for
/// the viewer: the planner's winner beside its runner-up.
std::vector<trace::RankTrace> candidate_timeline(const PlanCandidate& c, const LayerConfig& cfg, int P,
                                                 const Hardware& hw, const ModelOptions& o, const std::string& label);

}  // namespace ringside::model

// Where a modeled configuration's time goes, by class, and the class that sets two
// configurations apart: what `plan` says of each row against the winner, and of the runner-up
// in its verdict (issue 61: reasons that cover time, not only bytes).
//
// A layer's window on every GPU is its compute, its exposed communication and its idle time
// (trace/metrics.h). Here each is split by class, as a mean over the group's GPUs (so that the
// classes add up to the window, the layer time the plan ranks by):
//
//   compute    attention kernels, GEMMs, memory-bound ops (norms, elementwise, copies, the ring's
//              merges), kernel launches (each kernel's fixed cost, the profile's launch_s), and
//              the forward run again in the backward (recompute: what the memory saved costs)
//   exposed    communication no compute hides, by the group whose transfers are in flight:
//              CP (the attention sublayer's K/V, all-to-alls or gathers), TP (the all-gathers
//              and reduce-scatters around the GEMMs) and the gradient all-reduce (grads); a
//              moment when two groups are exposed at once counts half to each, so the classes
//              add up to the exposed time exactly
//   host       the GPU waiting, nothing in flight, for the host to issue its next kernel or
//              NCCL call (the stack's host costs: the gaps in its compute stream), counted with
//              the launches: "launches and host issue"
//   waits      the GPU waiting for a transfer another GPU has not posted yet, nothing in
//              flight: a ring collective's hop waiting for its neighbour, a ring step's K/V
//              whose sender is still computing; by the group waited for (CP, TP, grads)
//   idle       the rest of the window: finished before the slowest GPU
//
// A whole step adds the pipeline's bubble, the transfers between stages (PP), the gradient
// collectives no backward hides (DP), the optimizer and the rest of a stage (embedding, LM head,
// ZeRO 3's gathers).
#pragma once
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "model/model.h"
#include "trace/metrics.h"

namespace ringside::model {

/// The classes of a configuration's time, in the order a tie is broken (the first wins).
enum class TimeClass {
  attention,     ///< attention kernels (without their launches)
  gemms,         ///< GEMMs (without their launches)
  memory_bound,  ///< norms, elementwise ops, copies, merges
  launches,      ///< each kernel's launch, and the host's issue where the GPU waits for it
  recompute,     ///< the forward again in the backward (every op of the recompute phase)
  idle,          ///< finished before the slowest GPU (the rest of the window)
  cp,            ///< exposed CP communication
  tp,            ///< exposed TP communication
  grads,         ///< the exposed gradient all-reduce (a layer's, over CP)
  cp_waits,      ///< waiting, nothing in flight, for a CP peer to post (a ring step's K/V)
  tp_waits,      ///< the same in TP's collectives
  grads_waits,   ///< the same in the gradient all-reduce (each ring hop waits for its neighbour)
  bubble,        ///< the pipeline's bubble (a step)
  pp,            ///< what the transfers between stages add (a step)
  dp,            ///< the gradient collectives over DP x CP no backward hides (a step)
  optimizer,     ///< the optimizer step (a step)
  stage_rest,    ///< a stage's embedding, LM head and ZeRO 3 gathers, beyond its layers (a step)
};
inline constexpr int kTimeClasses = int(TimeClass::stage_rest) + 1;

/// "attention kernels", "GEMMs", "memory-bound ops", "launches and host issue", "recompute", "idle",
/// "exposed CP", "exposed TP", "exposed grads", "waiting on CP peers", "waiting on TP peers", "waiting in the
/// gradient all-reduce", "pipeline bubble", "exposed PP", "exposed DP",
/// "optimizer", "embedding, head and gathers".
const char* to_string(TimeClass c);
/// The --json key of a class: "attention_s", "gemms_s", "memory_bound_s", "launches_host_s",
/// "recompute_s", "idle_s", "exposed_cp_s", "exposed_tp_s", "exposed_grads_s", "cp_waits_s",
/// "tp_waits_s", "grads_waits_s", "bubble_s", "exposed_pp_s", "exposed_dp_s", "optimizer_s", "stage_rest_s".
const char* json_key(TimeClass c);

/// A configuration's time by class, seconds per GPU (the mean over its group's GPUs), for one
/// layer or a whole step, with what the words of a difference need.
struct TimeParts {
  double seconds[kTimeClasses] = {};
  double& operator[](TimeClass c) { return seconds[int(c)]; }
  double operator[](TimeClass c) const { return seconds[int(c)]; }
  double total() const;
  /// Exposed communication: CP + TP + grads (+ PP + DP for a step).
  double exposed() const;
  /// Every class times `k` (L layers, m microbatches); the counts below stay per layer.
  TimeParts scaled(double k) const;

  // Per layer, on one GPU (the mean): what the words of a difference say.
  double attention_kernels = 0;  ///< attention kernels launched a layer (forward and backward)
  double attention_tokens = 0;   ///< query tokens a kernel computes, mean
  double attention_of_peak = 0;  ///< the attention kernels' FLOPs over their time (launches apart) over the peak, 0..1
  double gemm_kernels = 0;       ///< GEMMs a layer
  double gemm_of_peak = 0;       ///< the GEMMs' FLOPs over their time over the peak
  double kernels = 0;            ///< every kernel launched a layer
  double bubble_fraction = 0;    ///< a step's pipeline bubble (pipeline.h)
};

/// The parts of strategy `m` of `modeled` (a modeled trace, model_trace's under `o` on `hw`;
/// m = its compute_metrics entry) over m's window: each GPU's compute ops by class (their modeled
/// durations, each kernel's launch, hw.efficiency.launch_s, apart except in recompute), its
/// exposed communication by class (above), its waits for the host and for other GPUs' posts and
/// its idle time, averaged
/// over the GPUs. Exact:
/// total() is the window (trace::layer_ns) and exposed() the mean exposed communication, up to
/// rounding.
TimeParts layer_time_parts(const trace::TraceData& modeled, const trace::StrategyMetrics& m, const Hardware& hw,
                           const ModelOptions& o);

/// How far two configurations are apart in one class: `loser`'s seconds less `winner`'s.
struct TimeDifference {
  TimeClass cls = TimeClass::attention;
  double seconds = 0;        ///< the loser's excess in that class (may be <= 0 when it wins every class)
  double total_seconds = 0;  ///< the loser's whole excess (total() less total())
};

/// The class in which `loser` loses most time to `winner`: the largest loser - winner over the
/// classes (ties: the first in TimeClass order). A pure function of the two rows' parts.
TimeDifference largest_difference(const TimeParts& loser, const TimeParts& winner);

/// The difference in words, with its numbers: "loses 12.5 ms of attention kernels to
/// tp2xring8 zigzag selective (32 kernels a layer of 16384 tokens each, at 61% against 72% of
/// peak)"; for a winner against its runner-up (`winning`) "wins by 12.5 ms of attention kernels
/// over ...". Where another class goes the other way by at least a tenth of it, the net and that
/// class follow: "; 33.50 ms slower in all, 44.00 ms of memory-bound ops the other way". Seconds
/// as format_ns prints them.
std::string difference_words(const TimeDifference& d, const TimeParts& loser, const TimeParts& winner, const std::string& other,
                             bool winning = false);

/// Row `loser`'s difference_words against `winner` (rows with TimeParts `parts`: PlanRow, StepRow),
/// its largest class named: "loses ... to `other`", or with `winning` "wins by ... over `other`".
template <class Row>
std::string versus_words(const Row& loser, const Row& winner, const std::string& other, bool winning = false) {
  return difference_words(largest_difference(loser.parts, winner.parts), loser.parts, winner.parts, other, winning);
}

/// Each ranked row's `versus`: its largest difference from the winner, rows[0] ("#1"), and the
/// winner's from `runner_up` (when there is one). Rows are a plan's (PlanRow, StepRow: parts,
/// versus, candidate), ranked first; nothing when fewer than two are ranked.
template <class Row>
void say_versus(std::vector<Row>& rows, size_t ranked, const Row* runner_up) {
  if (ranked < 2) return;
  const Row& win = rows[0];
  for (size_t i = 1; i < ranked; ++i) rows[i].versus = versus_words(rows[i], win, "#1");
  if (runner_up) rows[0].versus = versus_words(*runner_up, win, "the runner-up " + runner_up->candidate.name(), true);
}

/// The parts as JSON: each class by json_key, seconds, and "exposed_s" (their exposed sum).
nlohmann::json time_parts_json(const TimeParts& p);

}  // namespace ringside::model

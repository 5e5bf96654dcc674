// Pipeline parallelism, simulated: PP stages (ranks) run the forward and backward of m
// microbatches in Megatron's order, 1F1B (Narayanan et al. 2021, "Efficient Large-Scale Language
// Model Training on GPU Clusters Using Megatron-LM", 2.2.1, after PipeDream-Flush) or interleaved
// 1F1B with VP model chunks a rank (2.2.2). Each op starts when its rank is free and the op it
// needs has ended on its neighbour, plus the transfer between them: the bubbles come out of the
// schedule, not out of a formula. With equal stages and no transfer time they are the paper's,
// (PP - 1) / m of the ideal time for 1F1B and (PP - 1) / (m VP) interleaved (tests/test_pipeline.cpp).
//
// Virtual stage v = chunk c x PP + rank r holds layers [v L / (PP VP), (v + 1) L / (PP VP)):
// a rank's chunks are PP virtual stages apart, so a microbatch goes round the ranks VP times.
#pragma once
#include <cstddef>
#include <map>
#include <memory>
#include <tuple>
#include <vector>

namespace ringside::model {

/// The work of one microbatch on one model chunk (L / (PP VP) layers), in seconds.
struct PipelineSpec {
  int pp = 1;             ///< PP, the pipeline stages (ranks)
  int vp = 1;             ///< VP, model chunks a rank (interleaved 1F1B when > 1)
  int microbatches = 1;   ///< m
  double forward_s = 0;   ///< one chunk's forward of one microbatch
  double backward_s = 0;  ///< one chunk's backward of one microbatch
  double p2p_s = 0;       ///< one microbatch's activations (or their gradient) to the next stage
  /// Optional, per virtual stage v = chunk x PP + rank (PP VP entries): that chunk's forward and
  /// backward in place of forward_s and backward_s, for stages that differ (uneven layers, the
  /// embedding on the first, the LM head and loss on the last).
  std::vector<double> stage_forward_s, stage_backward_s;
  double forward_of(int v) const { return stage_forward_s.empty() ? forward_s : stage_forward_s[size_t(v)]; }
  double backward_of(int v) const { return stage_backward_s.empty() ? backward_s : stage_backward_s[size_t(v)]; }
};

/// One op of a rank's schedule as it ran.
struct PipelineOp {
  bool forward = true;
  int microbatch = 0;
  int chunk = 0;  ///< the rank's model chunk, 0 .. VP - 1
  double start_s = 0, end_s = 0;
};

/// The simulated step.
struct PipelineRun {
  std::vector<std::vector<PipelineOp>> ranks;  ///< each rank's ops, in the order it runs them
  double step_s = 0;   ///< the last op's end: forward and backward of every microbatch
  double ideal_s = 0;  ///< the busiest rank's work alone: m VP (forward_s + backward_s) when stages are equal
  /// Per rank, the most microbatch-chunks whose forward has run and whose backward has not: the
  /// activations it holds at once, in chunks of L / (PP VP) layers (1F1B: PP - r, at most m).
  std::vector<int> peak_in_flight;

  /// The bubble as Megatron counts it: time no rank's work fills, over the ideal time,
  /// (step_s - ideal_s) / ideal_s.
  double bubble_fraction() const { return (step_s - ideal_s) / ideal_s; }
};

/// The order in which rank `rank` runs its ops, before any timing (Megatron-LM's
/// forward_backward_pipelining_without_interleaving / with_interleaving): 1F1B runs
/// min(PP - r - 1, m) warm-up forwards, then one forward and one backward in turn, then the
/// remaining backwards. Interleaved warms up with min(2 (PP - r - 1) + (VP - 1) PP, m VP)
/// forwards; its k-th forward is chunk (k mod PP VP) / PP of microbatch (k / PP VP) PP + k mod PP,
/// its k-th backward the same microbatch's chunk VP - 1 - (k mod PP VP) / PP. Times are zero.
std::vector<PipelineOp> pipeline_order(const PipelineSpec& spec, int rank);

/// Per rank, the most microbatch-chunks whose forward has run and whose backward has not, from
/// the orders alone (PipelineRun::peak_in_flight, which timing does not change). Each (PP, VP,
/// m) is put in order once and kept for the next call, its ops as the simulation runs them
/// (thread-safe; the memo is bounded, and what it returns stays valid while held).
std::shared_ptr<const std::vector<int>> pipeline_in_flight(const PipelineSpec& spec);

/// Runs the schedule. Throws ConfigError for PP, VP or m below 1, VP > 1 with PP = 1 (nothing to
/// interleave), an interleaved m that PP does not divide (Megatron's rule), a negative time, or
/// per-stage times that are not PP VP long.
PipelineRun simulate_pipeline(const PipelineSpec& spec);

/// What a step needs of the simulated pipeline: PipelineRun's step_s and ideal_s.
struct PipelineTimes {
  double step_s = 0, ideal_s = 0;
  double bubble_fraction() const { return (step_s - ideal_s) / ideal_s; }  ///< as PipelineRun's
};

/// simulate_pipeline's step_s and ideal_s, bit for bit (the same ops in the same order), without
/// keeping the ops: the planner simulates some hundred thousand pipelines of up to a million
/// ops. Throws as simulate_pipeline does.
PipelineTimes pipeline_times(const PipelineSpec& spec);

/// Pipelines already simulated, by their spec: a caller that models many steps whose pipelines
/// repeat (the planner, where ZeRO 0, 1 and 2 run the same pipeline, and so do recompute none and
/// selective under a lower bound) simulates each once. Exact: the key is the whole spec.
class PipelineMemo {
 public:
  /// pipeline_times(spec), simulated the first time this memo sees the spec.
  PipelineTimes times(const PipelineSpec& spec);
  size_t simulated = 0;  ///< pipelines simulated
  size_t reused = 0;     ///< answered from the memo
  double ops = 0;        ///< ops simulated, 2 PP VP m a pipeline
  /// Forgets the pipelines (the counts stay).
  void clear() { kept_.clear(); }

 private:
  using Key = std::tuple<int, int, int, double, double, double, std::vector<double>, std::vector<double>>;
  std::map<Key, PipelineTimes> kept_;
};

}  // namespace ringside::model

// The check of a run: every result tensor against the fp64 reference, and every measured
// quantity of every rank against its analytic formula (parallel/formulas.h), with the verdict.
// compare, run, reference, the lessons and the tests judge a run by it.
#pragma once
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "check/reference_run.h"
#include "parallel/formulas.h"
#include "run/runner.h"
#include "trace/metrics.h"

namespace ringside {

/// The one tolerance: a run is correct when every result's relative Frobenius error against the
/// fp64 reference is below it (fp32 arithmetic in a different order gives about 1e-7 to 1e-6).
inline constexpr double kTolerance = 1e-5;
inline constexpr const char* kToleranceText = "1e-5";  ///< kTolerance as the tables print it

/// A run's result tensors by name, in the dump's order: out, grad.x, grad.<param>.
using NamedTensors = std::vector<std::pair<std::string, const Tensor*>>;
NamedTensors named_results(const Tensor& out, const Tensor& dx, const LayerWeights& grads);

/// "" or, when tensors of the fp64 reference are all zero, "nothing to compare: grad.X and N
/// more tensors are all zero ...": an error of 0 against such a tensor is no evidence (a
/// dropout near 1 can drop every element of a small layer), so a check over it is not OK.
std::string nothing_to_compare_in(const NamedTensors& reference);

/// Each result's relative Frobenius error against the reference's, by name, and the worst (NaN
/// counts as worst).
struct TensorErrors {
  std::vector<std::pair<std::string, double>> errors;
  std::pair<std::string, double> worst;
  double of(const std::string& name) const;  ///< 0 for a name not there
};
TensorErrors errors_against(const Tensor& out, const Tensor& dx, const LayerWeights& grads, const ReferenceRun& ref);

/// One rank's measurements beside their formulas.
struct RankCheck {
  RankNumbers measured;
  int64_t saved_formula = 0;        ///< parallel_saved_bytes
  CommBytes sent_formula;           ///< parallel_comm_bytes
  int64_t comm_peak_formula = 0;    ///< parallel_forward_comm_peak
  double flops_formula = 0;         ///< parallel_attention_flops
  std::optional<trace::RankMetrics> timeline;  ///< the rank's row of the run's timeline, when traced
  bool saved_ok() const { return measured.peak_saved == double(saved_formula); }
  bool sent_ok() const {
    return measured.fwd_sent == double(sent_formula.forward) && measured.bwd_sent == double(sent_formula.backward);
  }
  bool comm_peak_ok() const { return measured.peak_comm == double(comm_peak_formula); }
  bool flops_ok() const { return measured.attention_flops == flops_formula; }
  /// The trace agrees with the counters: its memory peak with the tracker's, its sends with the
  /// bytes the communicator counted.
  bool trace_ok() const;
};

struct RunCheck {
  std::string name;
  TensorErrors errors;
  double ratio_to_fp32 = 0;        ///< the worst error over the fp32 reference's of that tensor (0 without it)
  std::string nothing_to_compare;  ///< nothing_to_compare_in(the fp64 reference)
  std::vector<RankCheck> ranks;
  bool traced = false;  ///< a timeline was given: trace_ok checks every rank's row
  bool accurate() const { return errors.worst.second < kTolerance && nothing_to_compare.empty(); }
  bool saved_ok() const;
  bool sent_ok() const;
  bool flops_ok() const;
  bool trace_ok() const;
  /// A run is OK when it is accurate, its saved bytes and bytes sent equal their formulas on
  /// every rank, and (traced) its timeline equals the counters.
  bool ok() const { return accurate() && saved_ok() && sent_ok() && (!traced || trace_ok()); }
  /// "OK", or "FAIL: " and every reason, "; "-joined.
  std::string verdict() const;
};

/// The references every run of a command is held against, and what is derived from them once
/// for all the checks: the fp32 reference's own errors against fp64 (its ratio's denominator)
/// and whether fp64 has anything to compare.
struct Yardstick {
  const ReferenceRun& fp64;
  const ReferenceRun* fp32 = nullptr;  ///< null: no ratio to the fp32 reference
  TensorErrors fp32_errors;            ///< fp32's errors against fp64 (empty without fp32)
  std::string nothing_to_compare;      ///< nothing_to_compare_in(fp64's results)
};
Yardstick yardstick(const ReferenceRun& fp64, const ReferenceRun* fp32 = nullptr);

/// The check of `job` (its root's gathered tensors, every rank's numbers) against the
/// yardstick, the formulas of job.plan in f32, and, when given, the run's timeline metrics (one
/// row per rank).
RunCheck check_run(const JobRecord& job, const Yardstick& y, const trace::StrategyMetrics* timeline = nullptr);

}  // namespace ringside

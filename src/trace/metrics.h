// Metrics of a timeline, as Holistic Trace Analysis defines them (HTA's temporal breakdown and
// comm/comp overlap, github.com/facebookresearch/HolisticTraceAnalysis):
//
//   compute   time some compute op runs (attention, gemm, norm, elementwise, memory), with
//             nested and overlapping intervals merged: a union, never a sum
//   comm      time some transfer is in flight on the rank (its comm lanes, merged)
//   overlap   |compute ∩ comm|; overlap % = overlap / comm (100%: every transfer hidden)
//   exposed   comm - overlap: communication nothing hides
//   idle      window - |compute ∪ comm|: waiting with nothing in flight, or finished early
//   imbalance max over ranks / mean over ranks of compute time (1.00: balanced)
//
// The window of a strategy is its ranks' forward + backward (from the first `phase` event to
// the last), so setup and result gathering do not count; a trace without phases uses the
// extent of all its events. The same breakdown is given per ring step: the window of rank r's
// step i runs from the start of its `ring step` span until the transfers posted in that step
// finish (the ring backward's dK/dV move during the next step), with the compute inside it.
#pragma once
#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "trace/comm_stats.h"
#include "trace/trace_file.h"

namespace ringside::trace {

struct Interval {
  int64_t begin = 0, end = 0;  ///< ns, end > begin
};
/// The union of `v` as sorted, disjoint intervals (empty ones dropped).
std::vector<Interval> merge_intervals(std::vector<Interval> v);
/// Total length of merged intervals, ns.
int64_t length(const std::vector<Interval>& merged);
/// Length of the intersection of two merged lists, ns (a linear sweep).
int64_t intersection_length(const std::vector<Interval>& a, const std::vector<Interval>& b);

/// The imbalance of per-rank values (work, compute time): max / mean, the one definition
/// ringside prints (HTA's); 1 for none, or when every value is 0.
double max_over_mean(const std::vector<double>& v);

/// Where one rank's time went over a window, ns.
struct Breakdown {
  int64_t window_ns = 0, compute_ns = 0, comm_ns = 0, overlap_ns = 0, exposed_comm_ns = 0, idle_ns = 0;
  /// 100 overlap / comm, or NaN when there is no communication.
  double overlap_pct() const;
  Breakdown& operator+=(const Breakdown& o);
};

struct RankMetrics {
  int rank = 0;
  Breakdown time;
  // These four over the rank's own forward + backward (or the selection):
  int64_t peak_memory_bytes = 0;                              ///< highest total live bytes
  bool has_memory = false;                                    ///< whether the trace has its memory counters
  int64_t peak_memory_ts_ns = 0;                              ///< when it was first reached
  std::array<int64_t, kNumMemCategories> peak_by_category{};  ///< each category's own highest
  int64_t bytes_sent = 0;                                     ///< payload of sends starting in it
  double flops = 0;                                           ///< FLOPs of compute ops starting in it
};

struct StepMetrics {
  std::string phase;  ///< "forward" or "backward"
  int step = 0;
  std::vector<Breakdown> ranks;  ///< per rank (window: its ring step span, until the step's transfers end)
  std::vector<int64_t> span_ns;  ///< per rank: the ring step span's duration (compute and waits)
  Breakdown total;               ///< summed over ranks
  double imbalance = 1;          ///< max / mean of span_ns over the ranks
  int64_t bytes_sent = 0;        ///< over all ranks
};

struct StrategyMetrics {
  std::string strategy;
  int64_t begin_ns = 0, end_ns = 0;  ///< the window
  std::vector<RankMetrics> ranks;    ///< in rank order
  Breakdown total;                   ///< summed over ranks
  double compute_imbalance = 1;      ///< max / mean of the ranks' compute time
  std::vector<StepMetrics> steps;    ///< ring steps, forward then backward; empty for other strategies
  /// Communication per sublayer (attention's K/V or all-to-alls apart from the gradient
  /// all-reduce), summed over ranks: comm, overlap and exposed of the transfers posted in it
  /// (window_ns, compute_ns and idle_ns unused). In first-seen order.
  std::vector<std::pair<std::string, Breakdown>> comm_by_sublayer;
  /// Communication per collective kind in nccl-tests' terms (calls, size, algbw, busbw) of the
  /// calls starting in the window: trace/comm_stats.h.
  std::vector<CollectiveStats> comm_by_kind;
};

/// A strategy's layer time: its slowest rank's forward + backward window, ns.
int64_t layer_ns(const StrategyMetrics& m);

/// The rank the others wait for, and why: every rank shares the strategy's window, so the one
/// busy longest (compute + exposed communication = window - idle) is the slowest, and the part of
/// its busy time that is furthest above the other ranks' mean says what made it so.
struct SlowestRank {
  int rank = -1;       ///< -1: fewer than two ranks
  Breakdown mine;      ///< its time
  Breakdown others;    ///< the other ranks' mean (window: the same)
  /// "compute" or "exposed communication": the larger of its two excesses over the others' mean
  /// (ns; may be negative when it is busier on the other).
  std::string cause;
  int64_t compute_excess_ns = 0, exposed_excess_ns = 0;
  int64_t busy_ns() const { return mine.compute_ns + mine.exposed_comm_ns; }
  int64_t others_busy_ns() const { return others.compute_ns + others.exposed_comm_ns; }
};
/// The slowest rank of `m` (ties: the lowest rank).
SlowestRank slowest_rank(const StrategyMetrics& m);
/// One sublayer's communication ("attention": the ring's K/V, Ulysses' all-to-alls), or nullopt
/// when nothing was posted in it.
std::optional<Breakdown> sublayer_comm(const StrategyMetrics& m, const std::string& sublayer);

/// A rank's own forward + backward: from the start of its first `phase` event to the end of
/// its last; nullopt for a trace without phases.
std::optional<Interval> phase_window(const RankTrace& r);

/// The peak of a rank's memory over [begin, end] ns: the sample live when the window opens
/// (counted at `begin`), then every sample up to `end`. Each category's own highest beside it.
struct MemoryPeak {
  int64_t bytes = 0, ts_ns = 0;
  std::array<int64_t, kNumMemCategories> by_category{};
};
MemoryPeak memory_peak(const RankTrace& r, int64_t begin, int64_t end);

/// One phase of a strategy (Event::phase: "forward", "backward", "recompute", a PyTorch run's
/// outermost record_function range such as "grad_all_reduce", or "" outside every phase), per
/// rank: window_ns is the span of the rank's events stamped with the phase (from the first
/// start to the last end of its ops, waits and transfers and of the `phase` span of that name;
/// not of the spans that only enclose others, sublayers and ring steps, nor of other `phase`
/// spans, such as a PyTorch run's ProfilerStep, the strategy's window); compute_ns and
/// comm_ns the unions of the compute and of the comm intervals of those events, everything
/// clipped to the strategy's window; overlap, exposed and idle as in Breakdown. The phases'
/// unions may add up to more than the whole's where events of two phases run at once.
struct PhaseMetrics {
  std::string phase;
  std::vector<Breakdown> ranks;  ///< in the StrategyMetrics' rank order; zero where a rank has none of it
};

/// The phases of strategy `m` of `t` (m from compute_metrics(t) without a selection), in the
/// order of their earliest start on any rank.
std::vector<PhaseMetrics> phase_metrics(const TraceData& t, const StrategyMetrics& m);

/// The metrics of every strategy in the trace, in file order. With `window` [begin, end) ns,
/// every interval is clipped to it (a selection) instead of each strategy's phases.
std::vector<StrategyMetrics> compute_metrics(const TraceData& t, std::optional<Interval> window = std::nullopt);

}  // namespace ringside::trace

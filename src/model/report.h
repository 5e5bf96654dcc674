// A modeled run in numbers: per rank and for the slowest rank, the layer's forward and backward,
// attention's share of each, compute, communication, exposed communication and peak memory, in
// seconds and bytes; what `ringside model --json` writes and `ringside validate` compares.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "trace/metrics.h"
#include "trace/trace_file.h"

namespace ringside::model {

struct PhaseSeconds {
  double forward_s = 0, backward_s = 0;
};

struct RankReport {
  int rank = 0;
  PhaseSeconds layer;      ///< the rank's `phase` spans (forward, backward)
  PhaseSeconds attention;  ///< its `attention` sublayer spans inside each phase
  double total_s = 0;      ///< the rank's window: first forward to last backward
  double compute_s = 0, comm_s = 0, exposed_s = 0;  ///< over the window (trace::compute_metrics)
  int64_t peak_memory_bytes = 0;
};

/// One strategy of a modeled trace: its ranks, and each figure's slowest rank (`slowest`: the
/// largest forward of any rank, which a forward alone takes, the largest window, which forward
/// and backward together take, and so on; its `rank` is the one with the largest window). So
/// slowest forward + slowest backward may exceed the slowest window when two ranks are each the
/// slowest in one phase.
struct StrategyReport {
  std::string strategy;
  std::vector<RankReport> ranks;
  RankReport slowest;
};

/// The report of every strategy in `modeled` (a modeled trace: model_trace's) from its metrics
/// (trace::compute_metrics(modeled), which the caller has already), in their order.
std::vector<StrategyReport> report_of(const trace::TraceData& modeled, const std::vector<trace::StrategyMetrics>& metrics);

/// As JSON: {strategy, layer: {forward_s, backward_s, total_s}, attention: {forward_s,
/// backward_s, total_s}, compute_s, comm_s, exposed_s, peak_memory_bytes, ranks: [...]}, each
/// rank the same fields and its rank. `only_attention` leaves "layer" out (an attention-only
/// model has no layer around it).
nlohmann::json report_json(const StrategyReport& r, bool only_attention);

/// `schedule` cut to its attention: the `attention` sublayer's ops, transfers and waits and the
/// phases around them (`ringside model --only attention`: the strategy's attention with its
/// communication, on the layer's q, k and v shapes).
trace::TraceData attention_only(trace::TraceData schedule);

}  // namespace ringside::model

#include "model/pipeline.h"

#include <algorithm>
#include <limits>
#include <map>
#include <memory>
#include <mutex>
#include <tuple>

#include "core/error.h"

namespace ringside::model {

namespace {

void check(const PipelineSpec& s) {
  if (s.pp < 1 || s.vp < 1 || s.microbatches < 1)
    throw ConfigError(detail::concat("pipeline: PP = ", s.pp, ", VP = ", s.vp, " and m = ", s.microbatches,
                                     " must each be >= 1"));
  if (s.vp > 1 && s.pp == 1)
    throw ConfigError(detail::concat("pipeline: VP = ", s.vp, " model chunks need PP > 1 to interleave (--vp goes with --pp)"));
  if (s.vp > 1 && s.microbatches % s.pp != 0)
    throw ConfigError(detail::concat("pipeline: the interleaved schedule needs m divisible by PP, but m = ", s.microbatches,
                                     " and PP = ", s.pp));
  if (!(s.forward_s >= 0 && s.backward_s >= 0 && s.p2p_s >= 0))
    throw ConfigError("pipeline: the forward, backward and transfer times must be >= 0");
  for (const std::vector<double>* times : {&s.stage_forward_s, &s.stage_backward_s}) {
    if (!times->empty() && times->size() != size_t(s.pp) * size_t(s.vp))
      throw ConfigError(detail::concat("pipeline: ", times->size(), " per-stage times for PP VP = ", s.pp * s.vp, " virtual stages"));
    for (double t : *times)
      if (!(t >= 0)) throw ConfigError("pipeline: the forward, backward and transfer times must be >= 0");
  }
}

// The k-th forward (or backward) of a rank, as microbatch and chunk.
PipelineOp nth(const PipelineSpec& s, bool forward, int k) {
  PipelineOp op;
  op.forward = forward;
  const int group = s.pp * s.vp;  // a round: PP microbatches through each of the VP chunks
  const int chunk = (k % group) / s.pp;
  op.chunk = forward ? chunk : s.vp - 1 - chunk;
  op.microbatch = (k / group) * s.pp + k % s.pp;
  return op;
}

}  // namespace

std::shared_ptr<const std::vector<std::vector<PipelineOp>>> pipeline_orders(const PipelineSpec& s) {
  check(s);
  // Memoized: a plan asks for the same few (PP, VP, m) hundreds of thousands of times. At most
  // about 4M ops are kept (some 100 MB); past that the memo starts again.
  using Orders = std::vector<std::vector<PipelineOp>>;
  static std::mutex mu;
  static std::map<std::tuple<int, int, int>, std::shared_ptr<const Orders>> memo;
  static int64_t kept = 0;
  std::lock_guard lock(mu);
  const auto key = std::make_tuple(s.pp, s.vp, s.microbatches);
  if (const auto it = memo.find(key); it != memo.end()) return it->second;
  auto orders = std::make_shared<Orders>();
  for (int r = 0; r < s.pp; ++r) orders->push_back(pipeline_order(s, r));
  const int64_t ops = 2 * int64_t(s.pp) * s.vp * s.microbatches;
  if (kept + ops > (int64_t{1} << 22)) memo.clear(), kept = 0;
  kept += ops;
  return memo[key] = std::move(orders);
}

std::vector<PipelineOp> pipeline_order(const PipelineSpec& s, int rank) {
  check(s);
  const int total = s.microbatches * s.vp;
  const int warmup = s.vp == 1 ? std::min(s.pp - rank - 1, total)
                               : std::min(2 * (s.pp - rank - 1) + (s.vp - 1) * s.pp, total);
  std::vector<PipelineOp> order;
  int forwards = 0, backwards = 0;
  for (; forwards < warmup; ++forwards) order.push_back(nth(s, true, forwards));
  while (forwards < total) {  // the steady state: one forward, one backward
    order.push_back(nth(s, true, forwards++));
    order.push_back(nth(s, false, backwards++));
  }
  while (backwards < total) order.push_back(nth(s, false, backwards++));
  return order;
}

PipelineRun simulate_pipeline(const PipelineSpec& s) {
  check(s);
  const int stages = s.pp * s.vp;  // virtual stages
  constexpr double kNotYet = std::numeric_limits<double>::infinity();
  // When each microbatch's forward and backward ended on each virtual stage.
  std::vector<std::vector<double>> forward_end(stages, std::vector<double>(s.microbatches, kNotYet));
  std::vector<std::vector<double>> backward_end = forward_end;

  PipelineRun run;
  run.ranks.resize(s.pp);
  const auto orders = pipeline_orders(s);  // kept alive while it runs
  const std::vector<std::vector<PipelineOp>>& todo = *orders;
  std::vector<size_t> next(s.pp, 0);
  std::vector<double> free_at(s.pp, 0.0);
  // List scheduling: a rank runs its next op once what it needs has ended; with a valid order
  // some rank can always go on, and every pass over the ranks runs at least one op.
  for (size_t done = 0, all = size_t(s.pp) * 2 * s.microbatches * s.vp; done < all;) {
    bool progressed = false;
    for (int r = 0; r < s.pp; ++r) {
      while (next[r] < todo[r].size()) {
        PipelineOp op = todo[r][next[r]];
        const int v = op.chunk * s.pp + r, mb = op.microbatch;
        // A forward needs the previous virtual stage's forward; a backward the next one's
        // backward (the last stage: its own forward, which this rank ran before).
        double ready = 0;
        if (op.forward && v > 0) ready = forward_end[v - 1][mb] + s.p2p_s;
        if (!op.forward) ready = v + 1 < stages ? backward_end[v + 1][mb] + s.p2p_s : forward_end[v][mb];
        if (ready == kNotYet) break;
        op.start_s = std::max(free_at[r], ready);
        op.end_s = op.start_s + (op.forward ? s.forward_of(v) : s.backward_of(v));
        (op.forward ? forward_end : backward_end)[v][mb] = op.end_s;
        free_at[r] = op.end_s;
        run.ranks[r].push_back(op);
        ++next[r], ++done, progressed = true;
      }
    }
    RS_CHECK(progressed, "simulate_pipeline: the schedule deadlocked (PP = ", s.pp, ", VP = ", s.vp, ", m = ",
             s.microbatches, ")");
  }
  for (int r = 0; r < s.pp; ++r) {
    int held = 0, peak = 0;
    double work = 0;
    for (const PipelineOp& op : run.ranks[r]) {
      peak = std::max(peak, held += op.forward ? 1 : -1);
      work += op.end_s - op.start_s;
    }
    run.peak_in_flight.push_back(peak);
    run.step_s = std::max(run.step_s, run.ranks[r].back().end_s);
    run.ideal_s = std::max(run.ideal_s, work);
  }
  return run;
}

}  // namespace ringside::model

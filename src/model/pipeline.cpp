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

namespace {

// One op of the schedule as the simulation runs it: the slots of `ends` (each virtual stage's
// forward and backward of each microbatch) it writes and waits for, and its duration's index.
struct Step {
  int32_t slot;      // forward of (v, mb): v m + mb; backward: (PP VP + v) m + mb
  int32_t needs;     // the slot it waits for, or -1 (the first stage's forward)
  int32_t duration;  // forward of v: v; backward: PP VP + v
  int16_t rank;
  bool after_transfer;  // it waits for the neighbouring stage's op, plus p2p_s
};

// A schedule before any timing: every op in an order in which each one's dependence has run
// before it and each rank's ops come in that rank's order (the order the list scheduling below
// found them ready in, which depends on the dependences alone), and each rank's most chunks in
// flight. Any such order gives every op the same start and end, bit for bit: each is
// max(its rank free, its dependence's end (+ p2p)) + its duration, whenever it is computed.
struct Schedule {
  std::vector<Step> program;
  std::vector<int> in_flight;
};

// List scheduling, on dependences alone: a rank runs its next op once what it needs has run;
// with a valid order some rank can always go on, and every pass over the ranks runs at least one.
Schedule compile(const PipelineSpec& s) {
  Schedule schedule;
  const int stages = s.pp * s.vp;
  const int32_t m = s.microbatches, backwards = stages * m;
  std::vector<std::vector<PipelineOp>> orders;
  for (int r = 0; r < s.pp; ++r) {
    orders.push_back(pipeline_order(s, r));
    int held = 0, peak = 0;
    for (const PipelineOp& op : orders.back()) peak = std::max(peak, held += op.forward ? 1 : -1);
    schedule.in_flight.push_back(peak);
  }
  std::vector<char> ran(size_t(2) * size_t(backwards), 0);
  std::vector<size_t> next(s.pp, 0);
  schedule.program.reserve(size_t(2) * size_t(backwards));
  for (size_t done = 0, all = size_t(2) * size_t(backwards); done < all;) {
    bool progressed = false;
    for (int r = 0; r < s.pp; ++r) {
      const std::vector<PipelineOp>& order = orders[size_t(r)];
      while (next[r] < order.size()) {
        const PipelineOp& op = order[next[r]];
        const int32_t v = op.chunk * s.pp + r, mb = op.microbatch;
        Step step{op.forward ? v * m + mb : backwards + v * m + mb, -1, op.forward ? v : stages + v, int16_t(r), false};
        // A forward needs the previous virtual stage's forward; a backward the next one's
        // backward (the last stage: its own forward, which this rank ran before).
        if (op.forward && v > 0) step.needs = (v - 1) * m + mb, step.after_transfer = true;
        if (!op.forward && v + 1 < stages) step.needs = backwards + (v + 1) * m + mb, step.after_transfer = true;
        if (!op.forward && v + 1 == stages) step.needs = v * m + mb;
        if (step.needs >= 0 && !ran[size_t(step.needs)]) break;
        ran[size_t(step.slot)] = 1;
        schedule.program.push_back(step);
        ++next[r], ++done, progressed = true;
      }
    }
    RS_CHECK(progressed, "simulate_pipeline: the schedule deadlocked (PP = ", s.pp, ", VP = ", s.vp, ", m = ", s.microbatches, ")");
  }
  return schedule;
}

std::shared_ptr<const Schedule> schedule_of(const PipelineSpec& s) {
  check(s);
  // Memoized: a plan asks for the same few (PP, VP, m) hundreds of thousands of times. At most
  // 8M ops are kept (16 bytes each, 128 MiB: every pipeline of one group size of a plan); past
  // that the memo starts again.
  static std::mutex mu;
  static std::map<std::tuple<int, int, int>, std::shared_ptr<const Schedule>> memo;
  static int64_t kept = 0;
  const auto key = std::make_tuple(s.pp, s.vp, s.microbatches);
  {
    std::lock_guard lock(mu);
    if (const auto it = memo.find(key); it != memo.end()) return it->second;
  }
  auto schedule = std::make_shared<const Schedule>(compile(s));
  std::lock_guard lock(mu);
  const int64_t ops = int64_t(schedule->program.size());
  if (kept + ops > (int64_t{1} << 23)) memo.clear(), kept = 0;
  kept += ops;
  return memo[key] = std::move(schedule);
}

}  // namespace

std::shared_ptr<const std::vector<int>> pipeline_in_flight(const PipelineSpec& s) {
  std::shared_ptr<const Schedule> schedule = schedule_of(s);
  return {schedule, &schedule->in_flight};  // sharing the schedule's ownership
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
  std::vector<std::vector<PipelineOp>> todo;
  for (int r = 0; r < s.pp; ++r) todo.push_back(pipeline_order(s, r));
  std::vector<size_t> next(s.pp, 0);
  std::vector<double> free_at(s.pp, 0.0);
  // List scheduling: a rank runs its next op once what it needs has ended; with a valid order
  // some rank can always go on, and every pass over the ranks runs at least one op. (The
  // planner's pipeline_times runs the same ops from a program compiled once: the tests hold the
  // two equal, bit for bit.)
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

PipelineTimes pipeline_times(const PipelineSpec& s) {
  const std::shared_ptr<const Schedule> schedule = schedule_of(s);  // checks s
  const int stages = s.pp * s.vp;
  std::vector<double> duration(size_t(2) * size_t(stages));
  for (int v = 0; v < stages; ++v) duration[size_t(v)] = s.forward_of(v), duration[size_t(stages + v)] = s.backward_of(v);
  std::vector<double> ends(size_t(2) * size_t(stages) * size_t(s.microbatches));
  std::vector<double> free_at(s.pp, 0.0), work(s.pp, 0.0);
  // Each op as simulate_pipeline computes it: it starts when its rank is free and its dependence
  // has ended (plus the transfer from the neighbouring stage), and its rank's work adds its
  // length, in the rank's order.
  for (const Step& step : schedule->program) {
    double ready = 0;
    if (step.needs >= 0) ready = step.after_transfer ? ends[size_t(step.needs)] + s.p2p_s : ends[size_t(step.needs)];
    const double start = std::max(free_at[size_t(step.rank)], ready);
    const double end = start + duration[size_t(step.duration)];
    ends[size_t(step.slot)] = end;
    free_at[size_t(step.rank)] = end;
    work[size_t(step.rank)] += end - start;
  }
  PipelineTimes t;
  for (int r = 0; r < s.pp; ++r) t.step_s = std::max(t.step_s, free_at[r]), t.ideal_s = std::max(t.ideal_s, work[r]);
  return t;
}

PipelineTimes PipelineMemo::times(const PipelineSpec& s) {
  check(s);  // before the lookup: a NaN would compare equal to any key
  Key key{s.pp, s.vp, s.microbatches, s.forward_s, s.backward_s, s.p2p_s, s.stage_forward_s, s.stage_backward_s};
  if (const auto it = kept_.find(key); it != kept_.end()) {
    ++reused;
    return it->second;
  }
  const PipelineTimes t = pipeline_times(s);
  ++simulated, ops += 2.0 * s.pp * s.vp * s.microbatches;
  kept_.emplace(std::move(key), t);
  return t;
}

}  // namespace ringside::model

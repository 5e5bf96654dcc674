// The modeled step as a timeline (step_plan.h, step_timeline): one row per pipeline stage.
#include <algorithm>
#include <cmath>

#include "core/error.h"
#include "model/step_plan.h"

namespace ringside::model {

namespace {

// A time on the trace's clock: the nearest ns. An event's start and end are each rounded, so
// that one ending where the next starts ends at its ns, never a ns into it (which would nest
// the next one under it).
int64_t ns_of(double s) { return std::llround(s * 1e9); }

trace::Event event(const std::string& name, trace::Kind kind, trace::Stream stream, double start_s, double dur_s) {
  trace::Event e;
  e.name = name, e.kind = kind, e.stream = stream;
  e.ts_ns = ns_of(start_s), e.dur_ns = std::max<int64_t>(1, ns_of(start_s + dur_s) - e.ts_ns);
  return e;
}

// The idle time from `free_at` to `until` as a "bubble" wait, when it lasts a ns or more.
void add_bubble(trace::RankTrace& rank, double free_at, double until) {
  if (ns_of(until) > ns_of(free_at)) rank.events.push_back(event("bubble", trace::Kind::wait, trace::Stream::compute, free_at, until - free_at));
}

}  // namespace

trace::TraceData step_timeline(const ModeledStep& step, const Hardware& hw, const ModelOptions& o, const std::string& label) {
  RS_CHECK(step.row.status == PlanStatus::ranked, "step_timeline: the step does not fit (", step.row.reason, ")");
  const StepConfig& c = step.config;
  const StepCost& cost = step.row.cost;
  const PipelineSpec spec = pipeline_spec(c, step.layer, step.ends, hw, o);
  const PipelineRun run = simulate_pipeline(spec);
  trace::TraceData t;
  t.run.producer = "ringside plan (the whole step, modeled)";
  t.run.ranks = c.pp;
  t.run.backend = trace::kPipelineStages;  // the viewer and the trace's process names call the rows stages
  mark_modeled(t.run, hw, o);
  t.run.clock = "modeled: one row per pipeline stage, each one GPU standing for its stage's TP x CP x DP";
  // The gradient collective runs under the last backward, bucket by bucket: it starts so that
  // what is exposed of it (dp_exposed_s less the weights' all-gather) follows the pipeline.
  const double grad_exposed = cost.dp_exposed_s - cost.weight_gather_s;
  const double grad_start = run.step_s + grad_exposed - cost.grad_sync_s;
  const double optimizer_start = run.step_s + grad_exposed;
  for (int r = 0; r < c.pp; ++r) {
    trace::RankTrace rank;
    rank.rank = r, rank.strategy = label;
    double free_at = 0;
    for (const PipelineOp& op : run.ranks[size_t(r)]) {
      add_bubble(rank, free_at, op.start_s);
      std::string name(op.forward ? "F" : "B");
      name += std::to_string(op.microbatch);
      if (c.vp > 1) name += " chunk " + std::to_string(op.chunk);
      trace::Event e = event(name, trace::Kind::other, trace::Stream::compute, op.start_s, op.end_s - op.start_s);
      e.phase = op.forward ? "forward" : "backward";
      rank.events.push_back(e);
      const int v = op.chunk * c.pp + r;
      const bool sends = op.forward ? v + 1 < c.pp * c.vp : v > 0;  // its activations on, or their gradient back
      if (spec.p2p_s > 0 && sends) {
        std::string what(op.forward ? "send activations " : "send gradient ");
        what += std::to_string(op.microbatch);
        trace::Event send = event(what,
                                  trace::Kind::p2p, trace::Stream::comm, op.end_s, spec.p2p_s);
        send.direction = trace::Direction::send, send.bytes = int64_t(step.layer.p2p_bytes);
        send.peer = op.forward ? (r + 1) % c.pp : (r + c.pp - 1) % c.pp;
        rank.events.push_back(send);
      }
      free_at = op.end_s;
    }
    add_bubble(rank, free_at, optimizer_start);
    if (cost.grad_sync_s > 0) {
      trace::Event grads = event(c.zero == 0 ? "all_reduce grads" : "reduce_scatter grads",
                                 c.zero == 0 ? trace::Kind::all_reduce : trace::Kind::reduce_scatter, trace::Stream::comm,
                                 std::max(grad_start, 0.0), cost.grad_sync_s);
      grads.bytes = int64_t(cost.grad_bytes);  // a collective's payload: a GPU sends (n-1)/n of it (bytes_sent.h)
      rank.events.push_back(grads);
    }
    rank.events.push_back(event("adam", trace::Kind::memory, trace::Stream::compute, optimizer_start, cost.optimizer_s));
    if (cost.weight_gather_s > 0) {
      trace::Event gather = event("all_gather weights", trace::Kind::all_gather, trace::Stream::comm,
                                  optimizer_start + cost.optimizer_s, cost.weight_gather_s);
      gather.bytes = int64_t(cost.gathered_bytes);  // the updated weights, not the gradients
      rank.events.push_back(gather);
    }
    std::stable_sort(rank.events.begin(), rank.events.end(), [](const trace::Event& a, const trace::Event& b) { return a.ts_ns < b.ts_ns; });
    t.ranks.push_back(std::move(rank));
  }
  return t;
}

}  // namespace ringside::model

// The model's runs beside the recorded ones: the dry run of a plan, and the modeled twins a
// trace carries next to its recorded groups (otherData.modeled_groups, trace/run_info.h).
#include "model/model.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <deque>
#include <functional>
#include <map>
#include <optional>
#include <tuple>

#include <unistd.h>

#include "comm/communicator.h"
#include "core/error.h"
#include "core/json_input.h"
#include "core/output.h"
#include "kernels/cpu/blas.h"

namespace ringside::model {

// ---- the dry run ------------------------------------------------------------------------------

trace::TraceData dry_run(const RunPlan& plan, MemoryTracker& tracker, std::vector<RunRecord>* results, const RankOptions& rank_opts) {
  trace::TraceData t;
  trace::Clock clock;
  clock.origin_ns = trace::Clock::steady_now_ns();
  TraceSink sink{clock, &t.ranks};
  LocalOptions lo;
  lo.dry_run = true;
  lo.timeout_s = 600;  // 2P threads on a few cores: a dry run is quick, but waits may be long
  std::vector<RunRecord> r = run_local_ranks(plan, DType::f32, tracker, lo, &sink, rank_opts);
  if (results) *results = std::move(r);
  t.run.producer = "ringside model (dry run)";
  t.run.config = plan.config_json();
  t.run.layout = to_string(plan.requested_layout());
  t.run.ranks = plan.P;
  t.run.backend = "dry run";
  t.run.dtype = "float32";
  t.run.clock = "dry run: program order only";
  return t;
}


std::string modeled_label(const std::string& strategy, const std::string& hw_name) {
  return strategy + " (modeled, " + hw_name + ")";
}

namespace {

// Where a group's layer starts: its first `phase` event (its forward), or its first event.
std::optional<int64_t> layer_start(const std::vector<trace::RankTrace>& ranks, const std::string& strategy) {
  std::optional<int64_t> phase, any;
  for (const trace::RankTrace& r : ranks) {
    if (r.strategy != strategy) continue;
    for (const trace::Event& e : r.events) {
      any = std::min(any.value_or(e.ts_ns), e.ts_ns);
      if (e.kind == trace::Kind::phase) phase = std::min(phase.value_or(e.ts_ns), e.ts_ns);
    }
  }
  return phase ? phase : any;
}

}  // namespace

void mark_modeled(trace::RunInfo& run, const Hardware& hw, const ModelOptions& o) {
  run.modeled = true;
  run.hardware = hw.to_json();
  run.model_dtype = o.dtype;
  run.model_efficiency = o.efficiency;
  run.model_attention_kernel = attention_kernel_of(hw, o);
  run.modeling = modeling_info(hw, o);
}

trace::GroupInfo& insert_modeled_group(trace::TraceData& t, std::vector<trace::RankTrace> ranks, const std::string& of,
                                       const Hardware& hw, const ModelOptions& o, size_t at) {
  const std::string label = modeled_label(of, hw.name);
  for (trace::RankTrace& r : ranks) r.strategy = label;
  at = std::min(at, t.ranks.size());
  t.ranks.insert(t.ranks.begin() + std::ptrdiff_t(at), std::make_move_iterator(ranks.begin()), std::make_move_iterator(ranks.end()));
  t.flows.clear();  // the writer derives them again
  trace::GroupInfo& group = t.run.groups[label];
  group = {of, hw.name, o.dtype, std::nullopt, o.efficiency, 0, modeling_info(hw, o)};
  return group;
}

void add_modeled_twins(trace::TraceData& t, const Hardware& hw, const ModelOptions& o, const std::string& only) {
  const trace::RunInfo info = t.run;  // the groups before this call's twins
  // The recorded groups, in file order, that have no twin on this profile yet.
  std::vector<std::string> todo;
  for (const trace::RankTrace& r : t.ranks) {
    if (info.group(r.strategy) || (!only.empty() && r.strategy != only)) continue;
    if (std::find(todo.begin(), todo.end(), r.strategy) != todo.end()) continue;
    if (!info.group(modeled_label(r.strategy, hw.name))) todo.push_back(r.strategy);
  }
  for (const std::string& strategy : todo) {
    trace::TraceData one;
    one.run = t.run, one.other = t.other;
    for (const trace::RankTrace& r : t.ranks)
      if (r.strategy == strategy) one.ranks.push_back(r);
    trace::TraceData modeled = model_trace(one, hw, o);
    const int64_t shift = layer_start(one.ranks, strategy).value_or(0) - layer_start(modeled.ranks, strategy).value_or(0);
    // The twin goes right after its recorded group and the twins it has already.
    size_t at = 0;
    for (size_t i = 0; i < t.ranks.size(); ++i) {
      const std::string& s = t.ranks[i].strategy;
      const trace::GroupInfo* g = info.group(s);
      if (s == strategy || (g && g->of == strategy)) at = i + 1;
    }
    for (trace::RankTrace& r : modeled.ranks) {
      for (trace::Event& e : r.events) e.ts_ns += shift;
      for (trace::MemorySample& m : r.memory) m.ts_ns += shift;
    }
    insert_modeled_group(t, std::move(modeled.ranks), strategy, hw, o, at);
  }
  // otherData.modeled_hardware names the twins' profile: only when there are twins on it (a trace
  // of modeled groups alone, lesson 8's, must not name a profile none of them is on).
  if (!todo.empty()) t.run.twins_hardware = hw.to_json();
}

trace::TraceData with_modeled_twin(trace::TraceData measured, const Hardware& hw, const ModelOptions& o) {
  add_modeled_twins(measured, hw, o);
  return measured;
}

}  // namespace ringside::model

// Issue 61: one memory count (step_memory) for plan, plan --gbs, plan --max-seq and model --gbs,
// and plan --max-seq's longest sequence (model/max_seq.h) against a brute-force search.
#include <catch2/catch.hpp>

#include <map>

#include "core/error.h"
#include "model/model.h"
#include "model/pipeline.h"
#include "model/max_seq.h"
#include "model/plan.h"
#include "model/step_plan.h"
#include "parallel/formulas.h"
#include "parallel/run_plan.h"

using namespace ringside;
using namespace ringside::model;

namespace {

LayerConfig tiny_layer() {
  LayerConfig c;
  c.h = 64, c.H = 4, c.Hkv = 2, c.f = 128, c.dropout = 0;
  return c;
}

// An H100 of `mib` MiB: small enough that a tiny layer's longest s is a few thousand tokens.
Hardware small_gpu(double mib) {
  Hardware hw = load_hardware("h100-nvlink");
  hw.memory_bytes = mib * double(1 << 20);
  return hw;
}

// The split's longest s by stepping s up by its unit until the memory count stops fitting.
int64_t brute_force(const LayerConfig& cfg, const StepCandidate& c, const MaxSeqOptions& o, double capacity) {
  const int64_t u = split_unit(cfg, c.layer.par, o.granularity);
  int64_t s = 0;
  while (max_seq_memory(cfg, c, s + u, o, true).total_bytes() <= capacity) s += u;
  return s;
}

}  // namespace

TEST_CASE("max-seq: a split's unit is the granularity and its padding-free multiple", "[max-seq]") {
  const LayerConfig c = tiny_layer();
  ParallelConfig ring{1, 8, &cp_scheme("p2p")};
  ring.layout = Layout::zigzag;
  CHECK(split_unit(c, ring, 1024) == 1024);  // zigzag over 8: 16 divides 1024
  CHECK(split_unit(c, ring, 1000) == 2000);  // lcm(1000, 16)
  ring.layout = Layout::contiguous;
  CHECK(split_unit(c, ring, 1000) == 1000);  // 8 divides 1000
  ParallelConfig tp{4, 1, &no_cp_scheme()};
  CHECK(split_unit(c, tp, 6) == 12);  // sequence parallelism: T = 4 divides s
  CHECK_THROWS_WITH(split_unit(c, tp, 0), Catch::Contains("granularity") && Catch::Contains(">= 1"));
}

TEST_CASE("max-seq: largest_fitting bisects to the last multiple that fits", "[max-seq]") {
  int calls = 0;
  auto below = [&](int64_t limit) {
    return [&calls, limit](int64_t s) { return ++calls, s <= limit; };
  };
  CHECK(largest_fitting(1024, 1000, below(75 * 1024 + 5)) == 75 * 1024);
  CHECK(calls <= 2 + 10);  // log2(1000) + the two ends
  CHECK(largest_fitting(1024, 1000, below(1000)) == 0);          // not even one unit
  CHECK(largest_fitting(1024, 1000, below(1 << 30)) == 1024000);  // up to k_max
}

TEST_CASE("max-seq: the default batch fills the pipeline: as many in flight as any larger batch", "[max-seq][pipeline]") {
  CHECK(full_pipeline_microbatches(1, 1) == 1);
  CHECK(full_pipeline_microbatches(4, 1) == 4);  // 1F1B: PP in flight on the first stage
  for (auto [pp, vp] : {std::pair{2, 1}, {4, 1}, {4, 2}, {4, 4}, {8, 2}}) {
    const int m = full_pipeline_microbatches(pp, vp);
    INFO("PP " << pp << ", VP " << vp << ": m = " << m);
    CHECK(m % pp == 0);
    PipelineSpec p;
    p.pp = pp, p.vp = vp, p.microbatches = m;
    const std::vector<int> full = *pipeline_in_flight(p);
    p.microbatches = 8 * m;
    CHECK(*pipeline_in_flight(p) == full);
    if (m > pp) {  // fewer would hold fewer: m is the least
      p.microbatches = m - pp;
      CHECK(*pipeline_in_flight(p) != full);
    }
  }
}

TEST_CASE("one memory count: max-seq's, model --gbs's and the layer plan's are the step's", "[max-seq][plan]") {
  LayerConfig c = tiny_layer();
  c.s = 2048;
  const Hardware hw = load_hardware("h100-nvlink");
  MaxSeqOptions o;
  o.step.gpus = 4, o.step.layers = 4, o.step.vocab = 1000;
  // The same configuration through model_step_of (what model --gbs prints) and max_seq_memory.
  for (int pp : {1, 2}) {
    StepCandidate sc;
    sc.layer.par = ParallelConfig{1, 4 / pp, &cp_scheme("p2p")};
    sc.layer.par.layout = Layout::zigzag, sc.layer.par.recompute = Recompute::selective;
    sc.pp = pp, sc.dp = 1, sc.zero = 1, sc.microbatches = full_pipeline_microbatches(pp, 1);
    StepPlanOptions so = o.step;
    so.gbs = sc.microbatches;
    const StepCost step = model_step_of(c, sc, so, hw).row.cost;
    const StepCost mine = max_seq_memory(c, sc, c.s, o, true);
    INFO(sc.name() << ": " << memory_text(step, hw.memory_bytes) << " against " << memory_text(mine, hw.memory_bytes));
    CHECK(mine.total_bytes() == Approx(step.total_bytes()).epsilon(1e-12));
    CHECK(mine.state.optimizer == Approx(step.state.optimizer).epsilon(1e-12));
    CHECK(mine.activation_bytes == Approx(step.activation_bytes).epsilon(1e-12));
    // Without the dry run: less by the working peak alone.
    CHECK(max_seq_memory(c, sc, c.s, o, false).total_bytes() < mine.total_bytes());
  }
  // The layer plan's rows count the same step at PP 1, DP 1, ZeRO 3 over CP, the optimizer
  // included (before issue 61 they held L layers' weights, gradients and activations alone).
  PlanOptions po;
  po.gpus = 4, po.layers = 4, po.vocab = 1000, po.modes = {Recompute::none};
  const Plan plan = make_plan(c, po, {hw}).front();
  size_t checked = 0;
  for (const PlanRow& r : plan.rows) {
    if (r.status != PlanStatus::ranked || r.candidate.par.order != RankOrder::tp_cp) continue;
    StepCandidate sc;
    sc.layer = r.candidate, sc.pp = 1, sc.dp = 1, sc.zero = kGroupZero, sc.microbatches = 1;
    StepPlanOptions so = o.step;
    so.gbs = 1;
    const StepCost step = model_step_of(c, sc, so, hw).row.cost;
    INFO(r.candidate.name() << ": " << memory_text(r.memory, hw.memory_bytes) << " against " << memory_text(step, hw.memory_bytes));
    CHECK(r.peak_bytes == Approx(step.total_bytes()).epsilon(1e-12));
    CHECK(r.memory.state.optimizer > 0);
    ++checked;
  }
  CHECK(checked > 3);
}

TEST_CASE("memory_text: the total, its share and the four terms in the total's unit", "[max-seq]") {
  StepCost s;
  s.state.weights = s.state.grads = 0.5 * double(1ull << 30), s.state.optimizer = 3 * double(1ull << 30);
  s.activation_bytes = 60 * double(1ull << 30);
  CHECK(memory_text(s, 80 * double(1ull << 30)) == "64.00 GiB (80%) = w 0.50 + g 0.50 + opt 3.00 + act 60.00");
  s.state = {}, s.activation_bytes = 512 * double(1 << 20);
  CHECK(memory_text(s, 1024 * double(1 << 20)) == "512.00 MiB (50%) = w 0.00 + g 0.00 + opt 0.00 + act 512.00");
  CHECK(binding_term(s).first == "activations");
  // At the edge, tenths that never say 100% of a total over or under the capacity.
  s.activation_bytes = 1000.9 * double(1 << 20);
  CHECK(memory_text(s, 1001 * double(1 << 20)).starts_with("1000.90 MiB (99.9%)"));
  s.activation_bytes = 1001.1 * double(1 << 20);
  CHECK(memory_text(s, 1001 * double(1 << 20)).starts_with("1001.10 MiB (100.1%)"));
}

TEST_CASE("max-seq against a brute-force search: every split stepped up by its unit", "[max-seq]") {
  // Two GPUs, two layers, recompute none: every split (the groups of 1 and 2 GPUs, PP 1 or 2,
  // each ZeRO stage) stepped s by its unit with the dry run's count; the longest of each cell's
  // splits is the cell's answer, and its split fits there and not a unit further.
  const LayerConfig c = tiny_layer();
  const Hardware hw = small_gpu(8);
  MaxSeqOptions o;
  o.step.gpus = 2, o.step.layers = 2, o.step.vocab = 500, o.step.modes = {Recompute::none};
  o.granularity = 128;
  const MaxSeqPlan plan = max_seq_plan(c, o, {hw}).front();
  REQUIRE(plan.cells.size() == 4);
  std::map<int, int64_t> longest;  // by ZeRO stage
  const std::vector<StepCandidate> splits = max_seq_splits(c, o);
  CHECK(splits.size() > 20);
  for (const StepCandidate& sc : splits) longest[sc.zero] = std::max(longest[sc.zero], brute_force(c, sc, o, hw.memory_bytes));
  for (const MaxSeqCell& cell : plan.cells) {
    INFO("ZeRO " << cell.zero << ": " << cell.s << " by " << cell.split.name());
    CHECK(cell.s == longest[cell.zero]);
    CHECK(cell.s > 0);
    CHECK(cell.s % 128 == 0);
    CHECK(cell.memory.total_bytes() <= hw.memory_bytes);
    CHECK(max_seq_memory(c, cell.split, cell.s, o, true).total_bytes() == Approx(cell.memory.total_bytes()));
    CHECK(max_seq_memory(c, cell.split, cell.s + cell.unit, o, true).total_bytes() > hw.memory_bytes);
  }
  // ZeRO 3 shards what ZeRO 0 keeps whole: it reaches at least as far.
  CHECK(plan.cells[3].s >= plan.cells[0].s);
}

TEST_CASE("max-seq against a brute-force search: full recomputation, PP fixed, a given batch and granularity", "[max-seq]") {
  // Four GPUs, four layers, --pp 2 --zero 3 --gbs 8: the winner's split stepped by its unit, and
  // every split's own answer no further than the cell's.
  // Long enough (past 4096, the second of the two short lengths whose dry runs give the working
  // peak's secant) that the search's tighter bound, not the formulas' alone, picks what to confirm.
  const LayerConfig c = tiny_layer();
  const Hardware hw = small_gpu(12);
  MaxSeqOptions o;
  o.step.gpus = 4, o.step.layers = 4, o.step.modes = {Recompute::full}, o.step.pp = 2, o.step.zero = 3, o.step.gbs = 8;
  o.granularity = 96;  // zigzag over 2 needs 4: units of lcm(96, 4) = 96
  const MaxSeqPlan plan = max_seq_plan(c, o, {hw}).front();
  REQUIRE(plan.cells.size() == 1);
  const MaxSeqCell& cell = plan.cells.front();
  INFO(cell.s << " by " << cell.split.name() << ": " << memory_text(cell.memory, hw.memory_bytes));
  CHECK(cell.split.pp == 2);
  CHECK(cell.gbs == 8);
  CHECK(cell.s > 4096);
  CHECK(cell.s == brute_force(c, cell.split, o, hw.memory_bytes));
  for (const StepCandidate& sc : max_seq_splits(c, o)) CHECK(brute_force(c, sc, o, hw.memory_bytes) <= cell.s);
}

TEST_CASE("max-seq refuses what has no answer, naming why", "[max-seq]") {
  const LayerConfig c = tiny_layer();
  MaxSeqOptions o;
  o.step.gpus = 2, o.step.layers = 2;
  // A GPU smaller than the weights: nothing fits at any length.
  REQUIRE_THROWS_WITH(max_seq_plan(c, o, {small_gpu(0.01)}),
                      Catch::Contains("nothing fits") && Catch::Contains("at any length") && Catch::Contains("binding: "));
  o.granularity = 0;
  REQUIRE_THROWS_WITH(max_seq_plan(c, o, {small_gpu(64)}), Catch::Contains("--granularity 0"));
  o.granularity = 1024;
  LayerConfig docs = c;
  docs.s = 100, docs.docs = {60, 40};
  REQUIRE_THROWS_WITH(max_seq_plan(docs, o, {small_gpu(64)}), Catch::Contains("packed documents"));
  o.step.pp = 3;  // does not divide 2 GPUs
  REQUIRE_THROWS_WITH(max_seq_plan(c, o, {small_gpu(64)}), Catch::Contains("PP = 3"));
}

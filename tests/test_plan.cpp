// The planner (model/plan.h): its enumeration against an independent list, its rejections and
// their reasons, and facts the field knows reproduced on idealised profiles.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <set>

#include "layer/presets.h"
#include "model/plan.h"
#include "parallel/formulas.h"
#include "parallel/groups.h"
#include "parallel/run_plan.h"
#include "trace/metrics.h"

using namespace ringside;

namespace {

// A machine with one link speed inside a node and another across, and no latency: the facts
// below are about bandwidth and FLOPs alone.
model::Hardware ideal(double flops, double intra, double inter, int gpus_per_node, double memory = 1e15) {
  model::Hardware h;
  h.name = "ideal", h.description = "idealised", h.source = "test";
  h.peak_flops_bf16 = h.peak_flops_fp32 = flops;
  h.memory_bandwidth = 1e15;
  h.memory_bytes = memory;
  model::Tier inside, across;
  inside.name = "NVLink", inside.gpus = gpus_per_node, inside.bandwidth = intra;
  across.name = "InfiniBand", across.bandwidth = inter;
  h.tiers = {inside, across};
  return h;
}

const model::PlanRow& row_named(const model::Plan& plan, const std::string& name) {
  for (const model::PlanRow& r : plan.rows)
    if (r.candidate.name() == name) return r;
  FAIL("no candidate " << name);
  return plan.rows.front();
}

LayerConfig small_layer() {
  LayerConfig c;
  c.s = 1024, c.h = 256, c.H = 8, c.Hkv = 4, c.f = 512, c.dropout = 0;
  return c;
}

}  // namespace

TEST_CASE("the planner enumerates every configuration of 8 GPUs, listed independently", "[plan]") {
  // By hand: each way to split 8 GPUs, named as compare and the viewer name them, with the
  // three layouts where a causal mask makes them differ and both orders where there are two groups.
  const std::vector<std::pair<std::string, bool>> configurations = {  // name, has layouts
      {"ring", true},          {"all-gather", true},      {"ulysses", false},         {"ulysses2xring4", true},
      {"ulysses4xring2", true},                                                                             // T 1, C 8
      {"tp2xring4", true},     {"tp2xall-gather4", true}, {"tp2xulysses4", false},    {"tp2xulysses2xring2", true},
      {"ring4xtp2", true},     {"all-gather4xtp2", true}, {"ulysses4xtp2", false},    {"ulysses2xring2xtp2", true},  // T 2, C 4
      {"tp4xring2", true},     {"tp4xall-gather2", true}, {"tp4xulysses2", false},
      {"ring2xtp4", true},     {"all-gather2xtp4", true}, {"ulysses2xtp4", false},                          // T 4, C 2
      {"tp-sp", false}};                                                                                    // T 8
  std::multiset<std::string> expected;
  for (const auto& [name, layouts] : configurations)
    for (const char* rc : {"none", "selective", "full"}) {
      if (!layouts) expected.insert(name + " " + rc);
      else
        for (const char* layout : {"contiguous", "zigzag", "striped"}) expected.insert(name + " " + layout + " " + rc);
    }
  REQUIRE(expected.size() == 144);  // (13 + 20 + 14 + 1) x 3

  std::multiset<std::string> listed;
  for (const model::PlanCandidate& c : model::plan_candidates(small_layer(), Layout::automatic, 8, {Recompute::none, Recompute::selective, Recompute::full}))
    listed.insert(c.name());
  CHECK(listed == expected);

  // Without a causal mask every layout does the same work: one each.
  LayerConfig full = small_layer();
  full.causal = false;
  CHECK(model::plan_candidates(full, Layout::automatic, 8, {Recompute::none}).size() == configurations.size());
}

TEST_CASE("the planner rejects the invalid with their rule and the oversized with the binding term", "[plan]") {
  LayerConfig c = small_layer();
  c.H = 4, c.Hkv = 2;  // Ulysses at most 4; TP at most 2
  model::PlanOptions o;
  o.gpus = 8, o.modes = {Recompute::none};
  const model::Hardware roomy = ideal(1e14, 1e11, 1e10, 8);
  // The progress the command prints while a long plan runs: its phases in order, each counting
  // up to its total, never past it; the dry runs' phase a schedule shape at a time.
  struct Recorder : ProgressReport {
    std::vector<std::pair<std::string, size_t>> phases;  // what, total
    std::vector<size_t> done;
    void phase(const std::string& what, size_t total, const std::string&, bool) override {
      phases.push_back({what, total}), done.push_back(0);
    }
    void advance(size_t units) override { done.back() += units; }
  } recorder;
  o.progress = &recorder;
  model::PlanStats stats;
  const model::Plan plan = model::make_plan(c, o, {roomy}, &stats).front();
  REQUIRE(recorder.phases.size() == 3);
  CHECK(recorder.phases[0].first == "checking every candidate against the rules");
  CHECK(recorder.phases[0].second == stats.candidates);
  CHECK(recorder.phases[1].first == "dry-running each schedule shape that fits and replaying it");
  CHECK(recorder.phases[1].second >= stats.dry_runs);
  CHECK(recorder.phases[2].first == "ranking the rows");
  for (size_t i = 0; i < 3; ++i) CHECK(recorder.done[i] == recorder.phases[i].second);
  CHECK(stats.dry_runs > 1);
  for (const model::PlanRow& r : plan.rows) {
    INFO(r.candidate.name() << ": " << r.reason);
    const int U = r.candidate.par.a2a_size(), T = r.candidate.par.tp;
    const bool heads_ok = c.H % (T * U) == 0, kv_ok = c.Hkv % T == 0;
    CHECK((r.status == model::PlanStatus::invalid) == !(heads_ok && kv_ok));
    if (!heads_ok) CHECK(r.reason.find("heads H = 4 must be divisible by") != std::string::npos);
    else if (!kv_ok) CHECK(r.reason.find("kv heads Hkv = 2 must be divisible by T") != std::string::npos);
  }
  // Ulysses' largest degree is the head limit: U <= H / T.
  int most = 0;
  for (const model::PlanRow& r : plan.rows)
    if (r.status == model::PlanStatus::ranked && r.candidate.par.tp == 1) most = std::max(most, r.candidate.par.a2a_size());
  CHECK(most == c.H);

  // A GPU of less memory than the smallest weights and gradients: every candidate is refused,
  // with the binding term, and the plan says what the least would need.
  model::Hardware tiny = roomy;
  tiny.memory_bytes = 1e5;
  REQUIRE_THROWS_WITH(model::make_plan(c, o, {tiny}), Catch::Contains("nothing fits") && Catch::Contains("binding"));
  // Memory for saved activations alone: with --layers 1000 the activations bind.
  model::Hardware some = roomy;
  some.memory_bytes = 2e9;
  o.layers = 1000;
  c.s = 16384;  // 2048 tokens a GPU: their activations outweigh the weights
  const model::Plan deep = model::make_plan(c, o, {some, roomy}).front();
  const model::PlanRow& ring = row_named(deep, "ring zigzag none");
  CHECK(ring.status == model::PlanStatus::out_of_memory);
  CHECK(ring.reason.find("binding: activations") != std::string::npos);
  // ... exactly L x the formula, in bf16, with the step's state beside it (issue 61: the step's
  // count, not L layers' weights and gradients alone): bf16 weights and gradients and Adam's 12
  // bytes a parameter, sharded by ZeRO 3 over the ring's 8 ranks.
  const RunPlan ring_plan = resolve(ring.candidate.par, c, 8);
  const double saved = 1000.0 * parallel_saved_bytes(ring_plan, 0, DType::f32) / 2;
  const double state = 1000.0 * (2 + 2 + 12) * double(parallel_param_count(ring_plan)) / 8;
  CHECK(ring.peak_bytes == Approx(saved + state).epsilon(1e-12));
  CHECK(ring.memory.state.optimizer == Approx(1000.0 * 12 * double(parallel_param_count(ring_plan)) / 8).epsilon(1e-12));

  // 7 GPUs split s = 1024 by padding it with masked tokens (T = 7 splits no head count here,
  // so only context parallelism is left): the ring's zigzag to lcm(2 x 7, 7) = 1036 tokens.
  o.gpus = 7, o.layers = 1, c.s = 1024;
  const model::Plan seven = model::make_plan(c, o, {roomy}).front();
  const model::PlanRow& ring7 = row_named(seven, "ring zigzag none");
  CHECK(ring7.status != model::PlanStatus::invalid);
  CHECK(resolve(ring7.candidate.par, c, 7).packing->S == 1036);
  CHECK(ring7.reason.find("c = 148 ") != std::string::npos);  // the padded block, 1036 / 7
  // Only a sequence that cannot be padded leaves none: 2^31 - 1 tokens padded past BLAS's int.
  c.s = 2147483647;
  REQUIRE_THROWS_WITH(model::make_plan(c, o, {roomy}), Catch::Contains("no configuration of 7 GPUs") &&
                                                         Catch::Contains("padded from s = 2147483647"));
}

TEST_CASE("planner facts: the ring hides its K/V once c >= (Hkv/H) F/B, and the reason says so", "[plan]") {
  // F/B = 1e14 / 1e11 = 1000 tokens, times Hkv/H = 1/2: c* = 500 tokens. Eight ranks, no mask:
  // of attention's 2 x 7 K/V transfers and 8 dK/dV hops only the last hop home has nothing to
  // hide under once c >= c*; below it every transfer outlasts its step's compute.
  for (int64_t c_tokens : {125, 2000}) {
    LayerConfig c = small_layer();
    c.causal = false, c.s = 8 * c_tokens;
    model::PlanOptions o;
    o.gpus = 8, o.modes = {Recompute::none};
    const model::Plan plan = model::make_plan(c, o, {ideal(1e14, 1e11, 1e11, 8)}).front();
    const model::PlanRow& ring = row_named(plan, "ring contiguous none");
    INFO("c = " << c_tokens << ": " << ring.reason << ", attention comm hidden " << ring.attention_hidden_pct << "%");
    CHECK(ring.reason.find(c_tokens < 500 ? "c = 125 < (Hkv/H) F/B = 500, K/V exposed" : "c = 2000 >= (Hkv/H) F/B = 500, K/V hidden") !=
          std::string::npos);
    if (c_tokens < 500) CHECK(ring.attention_hidden_pct < 50);
    else CHECK(ring.attention_hidden_pct > 90);
  }
}

TEST_CASE("planner facts: with a slow link across nodes, TP inside the node beats TP across", "[plan]") {
  LayerConfig c = small_layer();
  model::PlanOptions o;
  o.gpus = 4, o.modes = {Recompute::none};
  const model::Hardware two_per_node = ideal(1e14, 1e11, 1e9, 2);  // 100x slower across
  const model::Plan plan = model::make_plan(c, o, {two_per_node}).front();
  const model::PlanRow& inside = row_named(plan, "tp2xring2 zigzag none"), &across = row_named(plan, "ring2xtp2 zigzag none");
  CHECK(inside.step_s < across.step_s);
  CHECK(inside.reason.find("TP 2 inside one NVLink domain") != std::string::npos);
  CHECK(across.reason.find("TP 2 across InfiniBand") != std::string::npos);
  // Their traffic by link kind swaps: TP's bytes inside the node in one, across in the other.
  CHECK(inside.tier_bytes[0] == across.tier_bytes[1]);
  CHECK(inside.tier_bytes[1] == across.tier_bytes[0]);
}

TEST_CASE("planner facts: all_gather's exposed gather is K/V bytes over the link, small beside GQA attention at length", "[plan]") {
  // Llama 3 70B's heads (64 query, 8 kv, d 128) at 128K tokens on 8 GPUs of one link speed.
  LayerConfig c;
  apply_preset(find_preset("llama3-70b"), c);
  c.s = 131072, c.dropout = 0;
  const double B = 4.5e11;  // NVLink 4's 450 GB/s
  const model::Hardware gpu = ideal(1e15, B, B, 8);
  model::PlanOptions o;
  o.gpus = 8, o.modes = {Recompute::none};
  ParallelConfig all_gather{1, 8, &cp_scheme("all_gather")};
  all_gather.layout = Layout::zigzag, all_gather.recompute = Recompute::none;
  const model::PlanCandidate ag{all_gather.resolved(8)};
  const std::vector<trace::RankTrace> ranks = model::candidate_timeline(ag, c, 8, gpu, model::ModelOptions{}, "all-gather");
  trace::TraceData t;
  t.ranks = ranks;
  const trace::StrategyMetrics m = trace::compute_metrics(t).front();
  const trace::Breakdown attention = *trace::sublayer_comm(m, "attention");
  // Six ring collectives of the whole sequence's K (or V) in bf16, kv bytes, 7/8 of it each:
  // 2 all-gathers forward, 2 again and 2 reduce-scatters of dK/dV backward, nothing under them.
  const double kv = double(c.s) * c.Hkv * c.d() * 2;
  const double formula_ns = 6 * kv * 7 / 8 / B * 1e9;
  CHECK(double(attention.exposed_comm_ns) / 8 == Approx(formula_ns).epsilon(1e-3));
  // And a small part of the layer: K/V are Hkv/H = 1/8 of the queries', attention is O(s^2).
  CHECK(double(attention.exposed_comm_ns) / 8 < 0.05 * double(trace::layer_ns(m)));
}

TEST_CASE("planner facts: full recompute wins only when nothing else fits", "[plan]") {
  LayerConfig c = small_layer();
  model::PlanOptions o;
  o.gpus = 4, o.layers = 64;
  const model::Hardware roomy = ideal(1e14, 1e11, 1e10, 8);
  const model::Plan free_plan = model::make_plan(c, o, {roomy}).front();
  CHECK(free_plan.rows.front().candidate.par.recompute == Recompute::none);
  // Memory between what full recompute needs and what anything else needs.
  double need_full = 1e30, need_other = 1e30;
  for (const model::PlanRow& r : free_plan.rows)
    if (r.status == model::PlanStatus::ranked)
      (r.candidate.par.recompute == Recompute::full ? need_full : need_other) =
          std::min(r.candidate.par.recompute == Recompute::full ? need_full : need_other, r.peak_bytes);
  REQUIRE(need_full < need_other);
  model::Hardware tight = roomy;
  tight.memory_bytes = (need_full + need_other) / 2;
  const model::Plan tight_plan = model::make_plan(c, o, {tight}).front();
  CHECK(tight_plan.rows.front().candidate.par.recompute == Recompute::full);
  CHECK(tight_plan.verdict.find("because nothing with less recomputation fits") != std::string::npos);
}

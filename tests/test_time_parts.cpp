// Issue 61, reasons that cover time: a configuration's time by class (model/time_parts.h) and the
// class that sets two configurations apart, named with its numbers.
#include <catch2/catch.hpp>

#include <string>

#include "model/model.h"
#include "model/time_parts.h"
#include "parallel/run_plan.h"
#include "trace/metrics.h"

using namespace ringside;
using model::TimeClass;
using model::TimeParts;

namespace {

// Two rows alike in every class, 100 ms each.
TimeParts base() {
  TimeParts p;
  for (double& s : p.seconds) s = 0.1;
  return p;
}

}  // namespace

TEST_CASE("largest_difference names each class when it is the largest", "[time_parts]") {
  for (int c = 0; c < model::kTimeClasses; ++c) {
    const TimeClass cls = TimeClass(c);
    TimeParts loser = base(), winner = base();
    loser[cls] += 0.0125;                         // 12.5 ms more here
    loser[TimeClass((c + 1) % model::kTimeClasses)] += 0.004;  // less elsewhere
    winner[TimeClass((c + 2) % model::kTimeClasses)] += 0.003;  // the winner slower in a third
    const model::TimeDifference d = model::largest_difference(loser, winner);
    INFO(model::to_string(cls));
    CHECK(d.cls == cls);
    CHECK(d.seconds == Approx(0.0125));
    CHECK(d.total_seconds == Approx(0.0125 + 0.004 - 0.003));
    const std::string words = model::difference_words(d, loser, winner, "#1");
    CHECK(words.starts_with("loses 12.50 ms of " + std::string(model::to_string(cls)) + " to #1 ("));
    CHECK(words.find("112.50 ms against 100.00 ms") != std::string::npos);
  }
}

TEST_CASE("largest_difference: a tie goes to the first class in order, and equal rows name no class", "[time_parts]") {
  TimeParts loser = base(), winner = base();
  loser[TimeClass::grads] += 0.002;
  loser[TimeClass::attention] += 0.002;  // the same excess, earlier in order
  CHECK(model::largest_difference(loser, winner).cls == TimeClass::attention);
  loser[TimeClass::cp] += 0.002;
  loser[TimeClass::attention] -= 0.002;  // now exposed CP and grads tie: CP comes first
  CHECK(model::largest_difference(loser, winner).cls == TimeClass::cp);
  const model::TimeDifference same = model::largest_difference(base(), base());
  CHECK(same.seconds == 0);
  CHECK(model::difference_words(same, base(), base(), "#1") == "the same time as #1 in every class");
}

TEST_CASE("difference_words: attention's kernels, tokens and fractions of peak, and the winner's words", "[time_parts]") {
  TimeParts ring = base(), hybrid = base();
  ring[TimeClass::attention] = 0.2765, hybrid[TimeClass::attention] = 0.264;
  ring.attention_kernels = 32, ring.attention_tokens = 16384, ring.attention_of_peak = 0.61;
  hybrid.attention_kernels = 4, hybrid.attention_tokens = 131072, hybrid.attention_of_peak = 0.72;
  const model::TimeDifference d = model::largest_difference(ring, hybrid);
  REQUIRE(d.cls == TimeClass::attention);
  CHECK(model::difference_words(d, ring, hybrid, "ulysses8xring2") ==
        "loses 12.50 ms of attention kernels to ulysses8xring2 (32 kernels a layer of 16384 query tokens on average at 61% of peak, "
        "against 4 of 131072 at 72%; 276.50 ms against 264.00 ms)");
  CHECK(model::difference_words(d, ring, hybrid, "the runner-up ring", true) ==
        "wins by 12.50 ms of attention kernels over the runner-up ring (4 kernels a layer of 131072 query tokens on average at 72% of "
        "peak, against 32 of 16384 at 61%; 264.00 ms against 276.50 ms)");
  // A class the other way, a tenth of the largest or more: the net and that class are said.
  TimeParts slow = ring, fast = hybrid;
  slow[TimeClass::memory_bound] = 0.010, fast[TimeClass::memory_bound] = 0.012;  // 2 ms back: 16% of 12.5
  const model::TimeDifference dn = model::largest_difference(slow, fast);
  CHECK(dn.total_seconds == Approx(0.0105));
  CHECK_THAT(model::difference_words(dn, slow, fast, "#1"),
             Catch::EndsWith("; 276.50 ms against 264.00 ms); 10.50 ms slower in all, 2.00 ms of memory-bound ops the other way"));
  CHECK_THAT(model::difference_words(dn, slow, fast, "the runner-up", true),
             Catch::EndsWith("; 10.50 ms faster in all, 2.00 ms of memory-bound ops the other way"));
  fast[TimeClass::memory_bound] = 0.011;  // 1 ms back: under a tenth, not said
  CHECK_THAT(model::difference_words(model::largest_difference(slow, fast), slow, fast, "#1"), Catch::EndsWith("264.00 ms)"));
  // Fractions that round alike get a decimal, so that the words tell them apart.
  ring.attention_of_peak = 0.553, hybrid.attention_of_peak = 0.549;
  CHECK(model::difference_words(d, ring, hybrid, "#1").find("at 55.3% of peak, against 4 of 131072 at 54.9%") != std::string::npos);
}

TEST_CASE("layer_time_parts adds up to the layer's window, its exposed classes to the exposed time", "[time_parts]") {
  // A TP 2 x ring 2 layer (TP's collectives, the ring's K/V, the gradient all-reduce over CP) on
  // two nodes of 2 (the ring across InfiniBand), and the ring of 4 alone.
  for (const char* name : {"tp2xring2", "ring4"}) {
    LayerConfig cfg;
    cfg.b = 1, cfg.s = 4096, cfg.h = 256, cfg.H = 4, cfg.Hkv = 2, cfg.f = 1024;
    ParallelConfig par = std::string(name) == "ring4" ? ParallelConfig{1, 4, &cp_scheme("p2p"), 1} : ParallelConfig{2, 2, &cp_scheme("p2p"), 1};
    par.layout = Layout::zigzag;
    const RunPlan plan = resolve(par, cfg, 4);
    MemoryTracker tracker;
    const trace::TraceData schedule = model::dry_run(plan, tracker);
    model::Hardware hw = model::load_hardware("h100-nvlink");
    hw.tiers.front().gpus = 2;
    const model::ModelOptions o;
    const trace::TraceData modeled = model::model_trace(schedule, hw, o);
    const trace::StrategyMetrics m = trace::compute_metrics(modeled).front();
    const TimeParts p = model::layer_time_parts(modeled, m, hw, o);
    INFO(name);
    CHECK(p.total() == Approx(double(trace::layer_ns(m)) / 1e9).epsilon(1e-9));
    CHECK(p.exposed() == Approx(double(m.total.exposed_comm_ns) / double(m.ranks.size()) / 1e9).epsilon(1e-9));
    double compute = 0;
    for (const trace::RankMetrics& r : m.ranks) compute += double(r.time.compute_ns) / 1e9 / double(m.ranks.size());
    const double classes = p[TimeClass::attention] + p[TimeClass::gemms] + p[TimeClass::memory_bound] + p[TimeClass::recompute];
    CHECK(classes < compute);  // launches (and the host) apart
    CHECK(p[TimeClass::attention] > 0);
    CHECK(p.attention_kernels > 0);
    CHECK(p.attention_of_peak > 0);
    CHECK(p.attention_of_peak < 1);
    CHECK(p.gemm_of_peak > 0);
    CHECK(p.gemm_of_peak < 1);
    CHECK(p[TimeClass::bubble] == 0);
    if (std::string(name) == "ring4") CHECK(p[TimeClass::tp] == 0);
  }
}

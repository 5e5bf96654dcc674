// The what-if model: the dry run records the real run's schedule; the model reproduces the
// closed forms (ring overlap at c = F/B, Ulysses' volume, memory per rank).
#include <catch2/catch.hpp>

#include "parallel/strategy.h"
#include "trace/trace.h"

using namespace ringside;

namespace {

LayerConfig small() {
  LayerConfig c;
  c.b = 2, c.s = 64, c.h = 64, c.H = 8, c.Hkv = 4, c.f = 64;
  return c;
}

std::vector<trace::RankTrace> traced(const Strategy& st, const LayerConfig& c, int P, bool dry, MemoryTracker& tracker,
                                     std::vector<RankResult>* results = nullptr) {
  std::vector<trace::RankTrace> out;
  trace::Clock clock;
  clock.origin_ns = trace::Clock::steady_now_ns();
  TraceSink sink{clock, &out};
  LocalOptions o;
  o.dry_run = dry;
  auto r = run_strategy_local(st, c, P, DType::f32, tracker, o, &sink);
  if (results) *results = std::move(r);
  return out;
}

}  // namespace

TEST_CASE("a dry run records the real run's schedule: the same events in the same order, and memory", "[model]") {
  for (const char* name : {"tp-sp", "ring", "ulysses"})
    for (int P : {2, 4}) {
      INFO(name << " P = " << P);
      const Strategy& st = find_strategy(name);
      MemoryTracker real_t, dry_t;
      std::vector<RankResult> real_r, dry_r;
      const auto real = traced(st, small(), P, false, real_t, &real_r);
      const auto dry = traced(st, small(), P, true, dry_t, &dry_r);
      REQUIRE(real.size() == dry.size());
      for (size_t p = 0; p < real.size(); ++p) {
        // Program order is the schedule; the vector order (completion) may differ with timing.
        auto by_order = [](std::vector<trace::Event> v) {
          std::stable_sort(v.begin(), v.end(), [](const trace::Event& a, const trace::Event& b) { return a.order < b.order; });
          return v;
        };
        const auto a = by_order(real[p].events), b = by_order(dry[p].events);
        REQUIRE(a.size() == b.size());
        for (size_t i = 0; i < a.size(); ++i) {
          INFO("rank " << p << " event " << i << ": " << a[i].name << " / " << b[i].name);
          REQUIRE(a[i].name == b[i].name);
          REQUIRE(a[i].cat == b[i].cat);
          REQUIRE(a[i].order == b[i].order);
          REQUIRE(a[i].end_order == b[i].end_order);
          REQUIRE(a[i].flops == b[i].flops);
          REQUIRE(a[i].bytes == b[i].bytes);
          REQUIRE(a[i].peer == b[i].peer);
          REQUIRE(a[i].seq == b[i].seq);
          REQUIRE(a[i].phase == b[i].phase);
          REQUIRE(a[i].sublayer == b[i].sublayer);
        }
        REQUIRE(real_r[p].peak_bytes == dry_r[p].peak_bytes);
        REQUIRE(real_r[p].peak_saved == dry_r[p].peak_saved);
        REQUIRE(real_r[p].forward.bytes_sent == dry_r[p].forward.bytes_sent);
        REQUIRE(real_r[p].backward.bytes_sent == dry_r[p].backward.bytes_sent);
        REQUIRE(dry_r[p].out.is_dry());
      }
    }
}

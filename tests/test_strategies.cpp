// TP+SP, Ulysses and the ring on the local backend against the fp64 reference, over the matrix;
// measured memory and bytes against the analytic formulas; invalid configs; failures.
#include <catch2/catch.hpp>

#include <chrono>
#include <cmath>
#include <map>

#include "check/check.h"
#include "comm/tensor_comm.h"
#include "reference64.h"
#include "parallel/formulas.h"
#include "parallel/groups.h"
#include "parallel/run_plan.h"
#include "run/runner.h"

using namespace ringside;

namespace {

LayerConfig base() {
  LayerConfig c;
  c.b = 2, c.s = 24, c.h = 48, c.H = 12, c.f = 96, c.seed = 99;
  return c;
}

// The plan of the configuration `name` for c on P ranks, in `layout`.
RunPlan plan_of(const std::string& name, const LayerConfig& c, int P, Layout layout = Layout::automatic) {
  ParallelConfig par = parse_parallel_config(name);
  par.layout = layout;
  return resolve(par, c, P);
}

}  // namespace

TEST_CASE("tp-sp and ulysses match the fp64 reference over P, causal, rope, dropout and Hkv", "[strategies]") {
  int runs = 0;
  for (int64_t Hkv : {12, 6, 1})
    for (bool causal : {true, false})
      for (bool rope : {true, false})
        for (double p : {0.0, 0.1}) {
          LayerConfig c = base();
          c.Hkv = Hkv, c.causal = causal, c.rope = rope, c.dropout = p;
          const ReferenceRun ref = reference64(c);
          for (const char* name : {"tp-sp", "ulysses"})
            for (int P : {1, 2, 3, 4}) {
              RunPlan plan;
              bool valid = true;
              try {
                plan = plan_of(name, c, P);
              } catch (const ConfigError&) {
                valid = false;
              }
              if (!valid) continue;
              INFO(name << " P=" << P << " Hkv=" << Hkv << " causal=" << causal << " rope=" << rope << " p=" << p);
              MemoryTracker tracker;
              const auto res = run_local_ranks(plan, DType::f32, tracker);
              const auto [err, which] = worst_error(res[0], ref);
              INFO("worst " << which << " " << err);
              CHECK(err < kTolerance);
              // In fp64 the strategy must agree with the reference to rounding.
              MemoryTracker t64;
              const auto res64 = run_local_ranks(plan, DType::f64, t64);
              const auto [err64, which64] = worst_error(res64[0], ref);
              INFO("fp64: worst " << which64 << " " << err64);
              CHECK(err64 < 1e-12);
              ++runs;
            }
        }
  // tp-sp: Hkv 12 -> P 1,2,3,4; 6 -> 1,2,3; 1 -> 1. ulysses: 12 -> 4; 6 -> 4 (P 4 shares kv heads
  // 1 and 4 between two ranks each); 1 -> 4.
  REQUIRE(runs == 8 * (4 + 3 + 1 + 4 + 4 + 4));
}

TEST_CASE("measured saved activations and bytes sent equal the analytic formulas", "[strategies][memory]") {
  for (const char* name : {"tp-sp", "ulysses"})
    for (int P : {1, 2, 3, 4})
      for (int64_t Hkv : {12, 1}) {
        LayerConfig c = base();
        c.Hkv = Hkv;
        RunPlan plan;
        try {
          plan = plan_of(name, c, P);
        } catch (const ConfigError&) {
          continue;
        }
        MemoryTracker tracker;
        const auto res = run_local_ranks(plan, DType::f32, tracker);
        for (int r = 0; r < P; ++r) {
          INFO(name << " P=" << P << " Hkv=" << Hkv << " rank " << r);
          REQUIRE(res[r].peak_saved == parallel_saved_bytes(plan, r, DType::f32));
          const CommBytes expect = parallel_comm_bytes(plan, r, DType::f32);
          REQUIRE(res[r].forward.bytes_sent == expect.forward);
          REQUIRE(res[r].backward.bytes_sent == expect.backward);
        }
      }
}

TEST_CASE("tp-sp saves 1/P of the reference's activations and moves what plain TP's all-reduces move",
          "[strategies][memory]") {
  LayerConfig c = base();
  c.Hkv = 12;
  for (int P : {2, 3, 4}) {
    MemoryTracker tracker;
    const auto res = run_local_ranks(plan_of("tp-sp", c, P), DType::f32, tracker);
    REQUIRE(res[0].peak_saved * P == saved_activation_bytes(c, DType::f32));
    // Plain TP: 2 all-reduces of N h per forward, 2 (P-1)/P N h elements each (ring).
    const int64_t allreduce = ring_all_reduce_bytes(c.tokens() * c.h, P, 0, DType::f32);
    REQUIRE(res[0].forward.bytes_sent == 2 * allreduce);
    REQUIRE(res[0].forward.bytes_sent == 4 * (P - 1) * c.tokens() * c.h / P * 4);
  }
}

TEST_CASE("ulysses forward volume is (2 + 2 Hkv/H) N h (P-1)/P^2 per rank", "[strategies]") {
  LayerConfig c = base();
  for (int64_t Hkv : {12, 6}) {
    c.Hkv = Hkv;
    const int P = 2;
    MemoryTracker tracker;
    const auto res = run_local_ranks(plan_of("ulysses", c, P), DType::f32, tracker);
    const double expect = (2.0 + 2.0 * double(Hkv) / double(c.H)) * double(c.tokens() * c.h) * (P - 1) / (P * P) * 4;
    REQUIRE(double(res[1].forward.bytes_sent) == expect);
  }
}

// A bug fixed with the lessons: tp-sp and ulysses reported 0 attention FLOPs.
TEST_CASE("every strategy reports its attention FLOPs: over the ranks, the layer's", "[strategies]") {
  LayerConfig c = base();
  for (bool causal : {true, false}) {
    c.causal = causal;
    // 4 d per visible (query, key) pair per head (FlashAttention's count).
    const double pairs = causal ? double(c.s) * double(c.s + 1) / 2 : double(c.s) * double(c.s);
    const double layer = 4.0 * double(c.d()) * double(c.H) * double(c.b) * pairs;
    for (const char* name : {"tp-sp", "ring", "ulysses"}) {
      INFO(name << (causal ? " causal" : " full"));
      MemoryTracker tracker;
      const auto res = run_local_ranks(plan_of(name, c, 2), DType::f32, tracker);
      REQUIRE(res[0].attention_flops + res[1].attention_flops == Approx(layer).epsilon(1e-12));
      if (std::string(name) != "ring" || !causal) REQUIRE(res[0].attention_flops == res[1].attention_flops);
    }
  }
}

TEST_CASE("after backward the LayerNorm gradients are identical on every tp-sp rank", "[strategies]") {
  const LayerConfig c = base();
  MemoryTracker tracker;
  const auto res = run_local_ranks(plan_of("tp-sp", c, 4), DType::f32, tracker);
  for (int r = 1; r < 4; ++r)
    for (const char* n : {"ln1.gamma", "ln1.beta", "ln2.gamma", "ln2.beta", "o.bias", "fc2.bias"}) {
      INFO("rank " << r << " " << n);
      const Tensor* a = nullptr;
      const Tensor* b = nullptr;
      for (auto& [name, t] : res[0].local_grads.named())
        if (name == n) a = t;
      for (auto& [name, t] : res[r].local_grads.named())
        if (name == n) b = t;
      REQUIRE(relative_error(*b, *a) == 0);  // bit for bit
    }
}

TEST_CASE("invalid configs fail with the same message on every rank before any communication", "[strategies]") {
  LayerConfig c = base();
  auto message = [&](const char* name, int P) {
    try {
      resolve(parse_parallel_config(name), c, P);
    } catch (const ConfigError& e) {
      return std::string(e.what());
    }
    return std::string();
  };
  c.H = 12;
  REQUIRE_THAT(message("tp-sp", 5), Catch::Contains("heads H = 12 must be divisible by T = 5 (TP splits the heads)"));
  REQUIRE_THAT(message("ulysses", 5), Catch::Contains("heads H = 12 must be divisible by U = 5"));
  // No length is refused for not dividing: the sequence is padded with masked tokens to the
  // multiple the strategy's shards need (T x C, and 2R or 2C for zigzag's two chunks a rank).
  auto padded = [&](const char* name, int P) { return plan_of(name, c, P).packing->S; };
  c.s = 25;
  REQUIRE(message("ulysses", 2).empty());
  REQUIRE(padded("ulysses", 2) == 26);
  REQUIRE(message("tp2xring2", 4).empty());
  REQUIRE(padded("tp2xring2", 4) == 28);  // lcm(2R = 4, T x C = 4)
  c.s = 24;
  REQUIRE_THAT(message("tp2xring2", 6), Catch::Contains("T x C must equal P, but T 2 x C 2 = 4 and P = 6"));
  REQUIRE_THAT(message("ulysses4xring", 6), Catch::Contains("the all-to-all size U = 4 must divide C = 6"));
  REQUIRE_THAT(message("tp2xulysses4xring1", 8), Catch::Contains("heads H = 12 must be divisible by T x U = 8"));
  c.s = 16;
  REQUIRE(message("ring", 16).empty());
  REQUIRE(padded("ring", 16) == 32);  // zigzag: two chunks on each of 16 ranks
  REQUIRE(padded("all-gather", 16) == 32);
  c.s = 18;
  REQUIRE(message("ulysses3xring2", 6).empty());
  REQUIRE(padded("ulysses3xring2", 6) == 24);  // lcm(2R = 4, C = 6) = 12
  // Where the padded sequence cannot exist, the message says the padding is why.
  c.s = 2147483647, c.b = 1;
  REQUIRE_THAT(message("ring", 3), Catch::Contains("padded from s = 2147483647 to S = 2147483652") &&
                                       Catch::Contains("exceeds 2^31 - 1 (BLAS's int)"));
  c = base();
  c.H = 12;
  c.s = 24;
  c.Hkv = 6;
  REQUIRE_THAT(message("tp-sp", 4), Catch::Contains("kv heads Hkv = 6 must be divisible by T = 4"));
  // Run on 4 ranks: each rank validates and throws before sending a byte; the error is one line.
  MemoryTracker tracker;
  std::vector<std::string> seen(4);
  run_local(4, [&](Communicator& comm) {
    try {
      run_rank(resolve(parse_parallel_config("tp-sp"), c, comm.size()), comm, *make_cpu_backend(), tracker, DType::f32);
    } catch (const ConfigError& e) {
      seen[comm.rank()] = e.what();
    }
    REQUIRE(comm.stats().bytes_sent == 0);
  });
  for (int r = 1; r < 4; ++r) REQUIRE(seen[r] == seen[0]);
  REQUIRE_THAT(seen[0], Catch::Contains("kv heads Hkv = 6"));
}

TEST_CASE("a rank that fails mid-run takes the strategy down with its message", "[strategies]") {
  setenv("RINGSIDE_INJECT_FAILURE", "2:backward", 1);
  MemoryTracker tracker;
  REQUIRE_THROWS_WITH(run_local_ranks(plan_of("tp-sp", base(), 4), DType::f32, tracker),
                      Catch::Contains("rank 2 failed: injected failure at the start of the backward"));
  unsetenv("RINGSIDE_INJECT_FAILURE");
}

// ---- ring attention ----------------------------------------------------------------------

TEST_CASE("ring matches the fp64 reference over P, layout, causal, rope, Hkv, dropout and b", "[strategies][ring]") {
  int runs = 0;
  for (int64_t b : {1, 2})
    for (int64_t Hkv : {4, 1})
      for (bool causal : {true, false})
        for (bool rope : {true, false})
          for (double p : {0.0, 0.1}) {
            LayerConfig c;
            c.b = b, c.s = 48, c.h = 32, c.H = 4, c.Hkv = Hkv, c.f = 64, c.seed = 11;
            c.causal = causal, c.rope = rope, c.dropout = p;
            const ReferenceRun ref = reference64(c);
            for (Layout l : {Layout::contiguous, Layout::zigzag, Layout::striped})
              for (int P : {1, 2, 3, 4, 8}) {
                if (l == Layout::zigzag && c.s % (2 * P) != 0) continue;  // 48 % 16 == 0: all run
                INFO("ring P=" << P << " " << to_string(l) << " b=" << b << " Hkv=" << Hkv << " causal=" << causal
                               << " rope=" << rope << " p=" << p);
                const RunPlan plan = plan_of("ring", c, P, l);
                MemoryTracker tracker;
                const auto res = run_local_ranks(plan, DType::f32, tracker);
                const auto [err, which] = worst_error(res[0], ref);
                INFO("worst " << which << " " << err);
                CHECK(err < kTolerance);
                for (int r = 0; r < P; ++r) {
                  CHECK(res[r].peak_saved == parallel_saved_bytes(plan, r, DType::f32));
                  const CommBytes cb = parallel_comm_bytes(plan, r, DType::f32);
                  CHECK(res[r].forward.bytes_sent == cb.forward);
                  CHECK(res[r].backward.bytes_sent == cb.backward);
                  CHECK(res[r].attention_flops == parallel_attention_flops(plan, r));
                }
                ++runs;
              }
          }
  REQUIRE(runs == 2 * 2 * 2 * 2 * 2 * 3 * 5);
}

TEST_CASE("ring in fp64 agrees with the reference to rounding", "[strategies][ring]") {
  LayerConfig c;
  c.b = 2, c.s = 32, c.h = 32, c.H = 4, c.Hkv = 2, c.f = 64, c.seed = 3;
  const ReferenceRun ref = reference64(c);
  for (Layout l : {Layout::contiguous, Layout::zigzag, Layout::striped}) {
    MemoryTracker tracker;
    const auto res = run_local_ranks(plan_of("ring", c, 4, l), DType::f64, tracker);
    INFO(to_string(l));
    CHECK(worst_error(res[0], ref).first < 1e-12);
  }
}

TEST_CASE("causal work per rank: zigzag and striped balanced, contiguous 2P-1 times lopsided", "[strategies][ring]") {
  for (int P = 2; P <= 8; ++P) {
    LayerConfig c;
    c.s = 2 * P * 64, c.h = 64, c.H = 1, c.Hkv = 1;  // FLOPs scale with H: one head suffices
    auto ratio = [&](Layout l) {
      const RunPlan plan = plan_of("ring", c, P, l);
      double lo = 1e300, hi = 0;
      for (int r = 0; r < P; ++r) {
        const double f = parallel_attention_flops(plan, r);
        lo = std::min(lo, f), hi = std::max(hi, f);
      }
      return std::pair{hi / lo, lo};
    };
    INFO("P = " << P);
    CHECK(ratio(Layout::zigzag).first <= 1.1);
    CHECK(ratio(Layout::striped).first <= 1.1);
    // Contiguous: rank 0 sees only its own diagonal block, n(n+1)/2 pairs; rank P-1 sees
    // P-1 full blocks and the diagonal: (P-1) n^2 + n(n+1)/2. With n = s/P = 128 that is
    // 1 + 2(P-1) n/(n+1), i.e. 2P-1 to within 1%.
    const RunPlan contiguous = plan_of("ring", c, P, Layout::contiguous);
    const double n = double(c.s / P);
    const double first = parallel_attention_flops(contiguous, 0), last = parallel_attention_flops(contiguous, P - 1);
    CHECK(first == 4.0 * c.d() * n * (n + 1) / 2);
    CHECK(last / first == Approx(1 + 2.0 * (P - 1) * n / (n + 1)).epsilon(1e-12));
    CHECK(last / first == Approx(2.0 * P - 1).epsilon(0.01));
    // The total is the same whatever the layout: s(s+1)/2 pairs.
    double total = 0;
    for (int r = 0; r < P; ++r) total += parallel_attention_flops(contiguous, r);
    CHECK(total == 4.0 * c.d() * double(c.s) * double(c.s + 1) / 2);
  }
}

TEST_CASE("the measured per-rank FLOPs follow the layout, and wholly masked steps are skipped", "[strategies][ring]") {
  LayerConfig c;
  c.s = 64, c.h = 32, c.H = 4, c.Hkv = 4, c.f = 64;
  MemoryTracker tracker;
  const auto res = run_local_ranks(plan_of("ring", c, 4, Layout::contiguous), DType::f32, tracker);
  // Contiguous causal: rank r computes at forward steps 0..r only (blocks of ranks r, r-1, ..., 0).
  for (int r = 0; r < 4; ++r) {
    int computed = 0;
    for (const StepRecord& st : res[r].steps)
      if (st.phase == "forward") {
        computed += st.flops > 0;
        CHECK((st.flops > 0) == (st.step <= r));
        if (st.step > r) CHECK(st.computed == "none");  // and the skipped pairs name what it left out
      }
    CHECK(computed == r + 1);
  }
}

TEST_CASE("ring: the O(1) runs of each layout equal those found by scanning its positions", "[strategies][ring]") {
  for (Layout l : {Layout::contiguous, Layout::zigzag, Layout::striped})
    for (int P : {1, 2, 3, 4, 8})
      for (int64_t s : {int64_t(2 * P), int64_t(4 * P), int64_t(6 * P), int64_t(64 * P)})
        for (int r = 0; r < P; ++r) {
          INFO(to_string(l) << " s = " << s << " P = " << P << " rank " << r);
          REQUIRE(layout_run_list(l, s, P, r) == layout_run_list(l, s, P, r, true));
        }
}

TEST_CASE("ring: every length fits every layout by padding, and only a padded length past the limits is refused", "[strategies][ring]") {
  LayerConfig c = base();
  ParallelConfig ring = parse_parallel_config("ring");
  c.s = 24;
  ring.layout = Layout::zigzag;
  REQUIRE_NOTHROW(resolve(ring, c, 8));  // padded to 32: two chunks of 2 on each of 8 ranks
  ring.layout = Layout::contiguous;
  c.s = 25;
  REQUIRE_NOTHROW(resolve(ring, c, 2));  // padded to 26
  c.s = 2147483647, c.b = 1;
  REQUIRE_THROWS_WITH(resolve(ring, c, 2), Catch::Contains("padded from s = 2147483647 to S = 2147483648"));
  c.s = 25, c.b = 2;
  // Automatic: zigzag when causal, striped over packed documents (issue 42: zigzag was 6.44
  // max / min on lesson 4's pack), contiguous otherwise.
  ring.layout = Layout::automatic;
  REQUIRE(ring.requested_layout(c) == Layout::zigzag);
  c.docs = {10, 15};
  REQUIRE(ring.requested_layout(c) == Layout::striped);
  c.causal = false;
  REQUIRE(ring.requested_layout(c) == Layout::contiguous);
  c.docs.clear();
}

TEST_CASE("a query whose keys all sit on later ranks gets no NaN, forward or backward", "[strategies][ring]") {
  // Striped with P = 4: rank 0's first query (position 0) sees only key 0; with P = 8 and
  // s = 16 the first query of every rank r > 0 sees no key of the blocks of ranks > r at all.
  LayerConfig c;
  c.s = 16, c.h = 32, c.H = 4, c.Hkv = 1, c.f = 64;
  const ReferenceRun ref = reference64(c);
  MemoryTracker tracker;
  const auto res = run_local_ranks(plan_of("ring", c, 8, Layout::striped), DType::f32, tracker);
  for (const Tensor* t : {&res[0].out, &res[0].dx})
    for (int64_t i = 0; i < t->numel(); ++i) REQUIRE_FALSE(std::isnan(t->data<float>()[i]));
  CHECK(worst_error(res[0], ref).first < kTolerance);
}

TEST_CASE("a rank that times out while a slow transfer is in flight fails cleanly, and the run ends", "[strategies][comm]") {
  // The link holds each message 2 s; the ranks wait 0.2 s. The failing rank releases its
  // buffers while the transfers are still queued or on the wire: they must be cancelled, not
  // copied into freed memory, and the comm threads must not sit out the 2 s.
  LayerConfig c;
  c.s = 32, c.h = 32, c.H = 4, c.Hkv = 2, c.f = 32;
  LocalOptions o;
  o.latency_us = 2e6;
  o.timeout_s = 0.2;
  for (const char* name : {"ring", "ulysses", "tp-sp"}) {
    MemoryTracker tracker;
    CHECK_THROWS_WITH(run_local_ranks(plan_of(name, c, 2), DType::f32, tracker, o),
                      Catch::Contains("did not complete within 0.2 s"));
  }
}

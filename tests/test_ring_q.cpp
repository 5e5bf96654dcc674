// The pass-Q ring (parallel/ring_q_attention.h) at the attention level, its ranks as threads of
// the local backend: out, lse, dq, dk and dv against the whole sequence's attention in fp64 and
// against the K/V ring in fp32, over every layout, causal or not, GQA, packed documents, a
// window and a padded length; the bytes each rank sends and holds against ring_q_bytes; the
// FLOPs of each rank against ring_q_attention_flops; the step records of skipped pairs.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <limits>
#include <memory>
#include <optional>
#include <random>

#include "comm/tensor_comm.h"
#include "parallel/ring_attention.h"
#include "parallel/ring_q_attention.h"
#include "parallel/run_plan.h"

using namespace ringside;

namespace {

// The attention of a layer of b = 2, H = 4 heads of d = 8 on R ranks in `layout`: its plan
// gives the padded sequence and the shards' layout (the rules every run uses).
struct Setup {
  RunPlan plan;
  AttentionSpec spec;
  const RingLayout& layout() const { return *plan.ring; }
  int64_t S() const { return plan.packing->S; }
};

Setup setup(int R, Layout layout, bool causal, int64_t Hkv, int64_t s, std::vector<int64_t> docs = {},
            int64_t window = 0) {
  LayerConfig c;
  c.b = 2, c.s = s, c.h = 32, c.H = 4, c.Hkv = Hkv, c.f = 64, c.seed = 7;
  c.causal = causal, c.docs = std::move(docs), c.window = window;
  ParallelConfig ring = parse_parallel_config("ring");
  ring.layout = layout;
  Setup st{resolve(ring, c, R), {}};
  st.spec = AttentionSpec{causal, c.softmax_scale(), st.plan.packing->mask()};
  return st;
}

// The whole padded sequence's q, dout [b, S, H, d] and k, v [b, S, Hkv, d], uniform in [-1, 1].
struct Inputs {
  Tensor q, k, v, dout;
};

Tensor uniform(const Shape& shape, unsigned seed) {
  Tensor t = Tensor::empty(shape, DType::f64, {});
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<double> u(-1.0, 1.0);
  for (int64_t i = 0; i < t.numel(); ++i) t.data<double>()[i] = u(rng);
  return t;
}

Inputs inputs(const Setup& st) {
  const LayerConfig& c = st.plan.layer;
  const int64_t S = st.S(), d = c.d();
  return {uniform({c.b, S, c.H, d}, 1), uniform({c.b, S, c.Hkv, d}, 2), uniform({c.b, S, c.Hkv, d}, 3),
          uniform({c.b, S, c.H, d}, 4)};
}

// What one rank (or the whole sequence, on one) computed, sent and held.
struct Result {
  Tensor out, lse, dq, dk, dv;
  double flops = 0;
  std::vector<StepRecord> steps;
  int64_t forward_bytes = 0, backward_bytes = 0, forward_peak = 0, backward_peak = 0;
};

// The whole sequence's attention on one rank, in fp64: what every ring must reproduce.
Result whole(const Setup& st, const Inputs& in) {
  auto be = make_cpu_backend();
  const int64_t S = st.S();
  const AttentionParams p = params_for(st.spec, in.q, in.k, whole_sequence(S), whole_sequence(S));
  Result r;
  r.out = Tensor::empty(in.q.shape(), DType::f64, {}), r.lse = Tensor::empty({p.b, p.H, S}, DType::f64, {});
  r.dq = Tensor::zeros(in.q.shape(), DType::f64, {});
  r.dk = Tensor::zeros(in.k.shape(), DType::f64, {}), r.dv = Tensor::zeros(in.v.shape(), DType::f64, {});
  be->attention_forward(p, in.q, in.k, in.v, r.out, r.lse);
  be->attention_backward(p, in.q, in.k, in.v, r.out, in.dout, r.lse, r.dq, r.dk, r.dv);
  return r;
}

enum class Ring { kv, pass_q };

// Forward and backward of the K/V ring or the pass-Q ring on the setup's R ranks, in `dt`:
// each rank's results, bytes sent per phase and peak communication buffers per phase.
std::vector<Result> run_ring(Ring which, const Setup& st, const Inputs& in, DType dt, MemoryTracker& tracker,
                             bool dry = false) {
  const int R = st.layout().ranks();
  std::vector<Result> res(static_cast<size_t>(R));
  LocalOptions opts;
  opts.dry_run = dry;
  auto be = dry ? make_dry_backend() : make_cpu_backend();
  run_local(
      R,
      [&](Communicator& comm) {
        const int r = comm.rank();
        std::optional<DryRun> dry_run;
        if (dry) dry_run.emplace();
        const RankContext ctx{*be, dt, {r, MemCategory::workspace, &tracker}, {r, MemCategory::activations, &tracker},
                              {r, MemCategory::comm, &tracker}};
        const std::vector<int64_t> pos = st.layout().positions(r);
        auto shard = [&](const Tensor& t) {
          if (dry) return be->empty({t.dim(0), int64_t(pos.size()), t.dim(2), t.dim(3)}, dt, ctx.act);
          return take_tokens(t, pos, ctx.act).to(dt, ctx.act);
        };
        const Tensor q = shard(in.q), k = shard(in.k), v = shard(in.v), dout = shard(in.dout);
        std::unique_ptr<SequenceAttention> algo;
        if (which == Ring::kv) algo = std::make_unique<RingAttention>(comm, st.layout(), st.spec, ctx);
        else algo = std::make_unique<RingQAttention>(comm, st.layout(), st.spec, ctx);
        // Per phase: the bytes sent, and the communication buffers held at most beyond what
        // was held before (another run's results may hold some).
        Result& mine = res[size_t(r)];
        auto measure = [&](auto&& phase, int64_t& bytes, int64_t& peak) {
          tracker.reset_peaks(r);
          const int64_t sent = comm.stats().bytes_sent, held = tracker.live(r, MemCategory::comm);
          phase();
          bytes = comm.stats().bytes_sent - sent;
          peak = tracker.peak(r, MemCategory::comm) - held;
        };
        AttentionOut fwd;
        AttentionGrads g;
        measure([&] { fwd = algo->forward(q, k, v); }, mine.forward_bytes, mine.forward_peak);
        measure([&] { g = algo->backward(q, k, v, fwd, dout); }, mine.backward_bytes, mine.backward_peak);
        mine.out = fwd.out, mine.lse = fwd.lse, mine.dq = g.dq, mine.dk = g.dk, mine.dv = g.dv;
        mine.flops = algo->flops, mine.steps = algo->steps;
      },
      opts);
  return res;
}

// ||got - want|| / ||want|| over rank r's tokens of a whole-sequence result [b, S, ., d].
double token_error(const Tensor& got, const Tensor& whole_seq, const std::vector<int64_t>& pos) {
  return relative_error(got, take_tokens(whole_seq, pos, {}));
}

// The largest difference between got [b, H, n] and the columns `pos` of want [b, H, S], relative
// past 1; a row -inf in one (no visible key) and not in the other is infinitely far.
double lse_error(const Tensor& got, const Tensor& want, const std::vector<int64_t>& pos) {
  constexpr double kInf = std::numeric_limits<double>::infinity();
  const Tensor g = got.to(DType::f64, {});
  const int64_t rows = g.dim(0) * g.dim(1), n = g.dim(2), S = want.dim(2);
  double worst = 0;
  for (int64_t row = 0; row < rows; ++row)
    for (int64_t j = 0; j < n; ++j) {
      const double a = g.data<double>()[row * n + j], b = want.data<double>()[row * S + pos[size_t(j)]];
      if (std::isinf(a) || std::isinf(b)) worst = std::max(worst, a == b ? 0.0 : kInf);
      else worst = std::max(worst, std::abs(a - b) / std::max(1.0, std::abs(b)));
    }
  return worst;
}

// Columns 0 to n - 1: lse_error between two rings' results on the same rank.
std::vector<int64_t> identity(int64_t n) {
  std::vector<int64_t> all(static_cast<size_t>(n));
  for (int64_t j = 0; j < n; ++j) all[size_t(j)] = j;
  return all;
}

// The configurations swept: the mask and heads of each, run in every layout on 1 to 4 ranks.
struct Variant {
  const char* name;
  bool causal;
  int64_t Hkv, s;
  std::vector<int64_t> docs;
  int64_t window;
};

const std::vector<Variant>& variants() {
  static const std::vector<Variant> all = {
      {"causal, Hkv = H", true, 4, 48, {}, 0},
      {"full attention, GQA Hkv 2", false, 2, 48, {}, 0},
      {"causal, MQA Hkv 1", true, 1, 48, {}, 0},
      {"causal, packed documents and a window", true, 2, 48, {5, 19, 11, 13}, 7},
      {"causal, a length no layout divides (padded)", true, 2, 45, {}, 0},
      {"full attention, documents, window and padding, Hkv 1", false, 1, 45, {1, 2, 17, 25}, 6},
  };
  return all;
}

}  // namespace

TEST_CASE("the pass-Q ring equals the whole sequence's attention in fp64 and the K/V ring in fp32, with its formulas",
          "[ring_q]") {
  int runs = 0;
  for (const Variant& va : variants())
    for (Layout l : kLayouts)
      for (int R : {1, 2, 3, 4}) {
        const Setup st = setup(R, l, va.causal, va.Hkv, va.s, va.docs, va.window);
        const LayerConfig& c = st.plan.layer;
        INFO(va.name << ", " << to_string(l) << ", R = " << R << ", S = " << st.S());
        const Inputs in = inputs(st);
        const Result ref = whole(st, in);
        MemoryTracker tracker;
        const auto q64 = run_ring(Ring::pass_q, st, in, DType::f64, tracker);
        const auto q32 = run_ring(Ring::pass_q, st, in, DType::f32, tracker);
        const auto kv32 = run_ring(Ring::kv, st, in, DType::f32, tracker);
        double flops = 0, ring_flops = 0;
        for (int r = 0; r < R; ++r) {
          INFO("rank " << r);
          const std::vector<int64_t> pos = st.layout().positions(r);
          const Result &got = q64[size_t(r)], &f32 = q32[size_t(r)], &kv = kv32[size_t(r)];
          // fp64: the same kernels on the same pairs, merged in another order: rounding apart.
          CHECK(token_error(got.out, ref.out, pos) < 1e-12);
          CHECK(lse_error(got.lse, ref.lse, pos) < 1e-12);
          CHECK(token_error(got.dq, ref.dq, pos) < 1e-12);
          CHECK(token_error(got.dk, ref.dk, pos) < 1e-12);
          CHECK(token_error(got.dv, ref.dv, pos) < 1e-12);
          // fp32: the K/V ring's results on the same rank.
          const std::vector<int64_t> own = identity(int64_t(pos.size()));
          CHECK(relative_error(f32.out, kv.out) < 1e-5);
          CHECK(lse_error(f32.lse, kv.lse.to(DType::f64, {}), own) < 1e-5);
          CHECK(relative_error(f32.dq, kv.dq) < 1e-5);
          CHECK(relative_error(f32.dk, kv.dk) < 1e-5);
          CHECK(relative_error(f32.dv, kv.dv) < 1e-5);
          // The formulas: bytes sent and held, in either precision, and the FLOPs.
          const int64_t n = int64_t(pos.size());
          for (const auto& [res, dt] : {std::pair{&got, DType::f64}, std::pair{&f32, DType::f32}}) {
            const RingQBytes want = ring_q_bytes(c.b, n, c.H, c.d(), R, dt);
            CHECK(res->forward_bytes == want.forward);
            CHECK(res->backward_bytes == want.backward);
            CHECK(res->forward_peak == want.forward_peak);
            CHECK(res->backward_peak == want.backward_peak);
          }
          const double expect = ring_q_attention_flops(st.layout(), st.spec, r, c.b, c.H, c.Hkv, c.d());
          CHECK(got.flops == expect);
          CHECK(f32.flops == expect);
          flops += expect;
          ring_flops += ring_attention_flops(st.layout(), st.spec, r, c.b, c.H, c.Hkv, c.d());
        }
        // The same visible pairs in all, distributed by keys instead of by queries.
        CHECK(flops == ring_flops);
        const Run all = whole_sequence(st.S());
        CHECK(flops == kernels::attention_forward_flops(params_for(st.spec, c.b, c.H, c.Hkv, c.d(), all, all)));
        ++runs;
      }
  REQUIRE(runs == 6 * 5 * 4);
}

TEST_CASE("the pass-Q ring's bytes: q then q, out and lse then out and lse home, step by step", "[ring_q]") {
  // R = 4, contiguous, causal: rank r holds n = 16 tokens; q = b n H d, l = b H n elements.
  const Setup st = setup(4, Layout::contiguous, true, 4, 64);
  const Inputs in = inputs(st);
  MemoryTracker tracker;
  const auto res = run_ring(Ring::pass_q, st, in, DType::f32, tracker);
  const int64_t q = 2 * 16 * 4 * 8 * 4, l = 2 * 4 * 16 * 4;
  for (int r = 0; r < 4; ++r) {
    INFO("rank " << r);
    std::vector<int64_t> forward, backward;
    for (const StepRecord& step : res[size_t(r)].steps)
      (step.phase == "forward" ? forward : backward).push_back(step.bytes_sent);
    CHECK(forward == std::vector<int64_t>{q, q + q + l, q + q + l, q + l});
    // The backward: q, out, dout and lse ahead, dQ behind.
    CHECK(backward == std::vector<int64_t>{3 * q + l, 4 * q + l, 4 * q + l, q});
    CHECK(res[size_t(r)].forward_bytes == 3 * (2 * q + l));
    CHECK(res[size_t(r)].backward_bytes == 3 * (4 * q + l));
  }
}

TEST_CASE("the rings' bytes: equal to the lse with Hkv = H, Hq / Hkv times the K/V ring's under GQA", "[ring_q]") {
  for (int64_t Hkv : {4, 2, 1}) {
    const Setup st = setup(4, Layout::zigzag, true, Hkv, 64);
    const Inputs in = inputs(st);
    MemoryTracker tracker;
    const auto pass_q = run_ring(Ring::pass_q, st, in, DType::f32, tracker);
    const auto kv = run_ring(Ring::kv, st, in, DType::f32, tracker);
    const int64_t n = 16, b = 2, H = 4, d = 8, e = 4, R = 4;
    INFO("Hkv = " << Hkv);
    for (int r = 0; r < 4; ++r) {
      // The K/V ring: 2 (R - 1) kv forward, 2 (2 R - 1) kv backward, kv = b n Hkv d; its
      // forward holds two K and two V blocks (the refactor into TravellingBlock kept them).
      const int64_t kv_block = b * n * Hkv * d * e;
      CHECK(kv[size_t(r)].forward_bytes == 2 * (R - 1) * kv_block);
      CHECK(kv[size_t(r)].backward_bytes == 2 * (2 * R - 1) * kv_block);
      CHECK(kv[size_t(r)].forward_peak == 4 * kv_block);
      // The pass-Q ring: (R - 1) b n H (2 d + 1) forward: with Hkv = H the lse more, per head
      // and token 2 d + 1 elements against 2 d.
      CHECK(pass_q[size_t(r)].forward_bytes - kv[size_t(r)].forward_bytes ==
            (R - 1) * b * n * (H * (2 * d + 1) - 2 * Hkv * d) * e);
      if (Hkv == H) CHECK(pass_q[size_t(r)].forward_bytes - kv[size_t(r)].forward_bytes == (R - 1) * b * H * n * e);
      // Backward: (R - 1) b n H (4 d + 1) against 2 (2 R - 1) b n Hkv d: lighter with Hkv = H
      // while R - 1 < 2 d (the diagonal's dQ stays home; the K/V ring's dK/dV make R hops).
      if (Hkv == H) CHECK(pass_q[size_t(r)].backward_bytes < kv[size_t(r)].backward_bytes);
      else CHECK(pass_q[size_t(r)].backward_bytes > kv[size_t(r)].backward_bytes);
    }
  }
}

TEST_CASE("the pass-Q ring's work goes by keys: contiguous causal is the K/V ring's reversed", "[ring_q]") {
  // Rank r holds keys [r n, (r + 1) n): every later rank's queries see all of them. So rank 0
  // computes the most, n(n+1)/2 + (R-1) n^2 pairs, and rank R - 1 only its diagonal: the K/V
  // ring's distribution, whose rank r computes its queries against the r blocks before it,
  // mirrored.
  for (int R = 2; R <= 6; ++R) {
    const Setup st = setup(R, Layout::contiguous, true, 1, 16 * R);
    const LayerConfig& c = st.plan.layer;
    const double n = 16, per_pair = 4.0 * c.b * c.H * c.d();
    INFO("R = " << R);
    for (int r = 0; r < R; ++r) {
      const double passq = ring_q_attention_flops(st.layout(), st.spec, r, c.b, c.H, c.Hkv, c.d());
      CHECK(passq == per_pair * (n * (n + 1) / 2 + (R - 1 - r) * n * n));
      CHECK(passq == ring_attention_flops(st.layout(), st.spec, R - 1 - r, c.b, c.H, c.Hkv, c.d()));
    }
  }
}

TEST_CASE("the pass-Q ring's step records name whose queries it computed and the pairs the mask hid", "[ring_q]") {
  const Setup st = setup(4, Layout::contiguous, true, 2, 64);
  const Inputs in = inputs(st);
  MemoryTracker tracker;
  const auto res = run_ring(Ring::pass_q, st, in, DType::f32, tracker);
  for (int r = 0; r < 4; ++r) {
    INFO("rank " << r);
    REQUIRE(res[size_t(r)].steps.size() == 8);
    for (const StepRecord& step : res[size_t(r)].steps) {
      INFO(step.phase << " step " << step.step);
      const int src = (r - step.step + 4) % 4;
      CHECK(step.block_of == src);  // the queries of ring rank (r - i) mod R, against our keys
      // Causal over contiguous shards: the queries of a rank before ours see none of our keys.
      const bool sees = src >= r;
      CHECK((step.flops > 0) == sees);
      CHECK(step.computed_pairs == (sees ? 1 : 0));
      CHECK(step.skipped_pairs == (sees ? 0 : 1));
      const std::string pair = "q[" + std::to_string(16 * src) + ":" + std::to_string(16 * src + 16) + "] x k[" +
                               std::to_string(16 * r) + ":" + std::to_string(16 * r + 16) + "]";
      CHECK((sees ? step.computed : step.skipped) == pair);
      if (!sees) CHECK(step.computed == "none");
    }
  }
  // A document boundary hides a pair too (test_packed's K/V case, turned around): two documents
  // of 8 on 2 ranks. Rank 0 at step 1 holds rank 1's queries (document 2) against its keys
  // (document 1): after them, so not causality but the boundary hides the pair.
  const Setup docs = setup(2, Layout::contiguous, true, 2, 16, {8, 8});
  const auto two = run_ring(Ring::pass_q, docs, inputs(docs), DType::f32, tracker);
  const StepRecord& step = two[0].steps[1];
  CHECK(step.phase == "forward");
  CHECK(step.block_of == 1);
  CHECK(step.flops == 0);
  CHECK(step.skipped == "q[8:16] x k[0:8]");
  CHECK(two[0].steps[0].flops == 4.0 * 8 * 4 * 2 * 36);  // the diagonal: 8 x 9 / 2 causal pairs, d 8, H 4, b 2
}

TEST_CASE("a dry run of the pass-Q ring sends and holds what a real one does, at any length", "[ring_q]") {
  // The what-if model runs the algorithms without data: the same transfers, the formula's bytes.
  // A million tokens: the inputs are shapes alone.
  const Setup st = setup(4, Layout::zigzag, true, 2, int64_t(1) << 20);
  const LayerConfig& c = st.plan.layer;
  Inputs in;
  {
    DryRun shapes_only;
    in.q = in.dout = Tensor::empty({c.b, st.S(), c.H, c.d()}, DType::f64, {});
    in.k = in.v = Tensor::empty({c.b, st.S(), c.Hkv, c.d()}, DType::f64, {});
  }
  MemoryTracker tracker;
  const auto res = run_ring(Ring::pass_q, st, in, DType::f32, tracker, true);
  const RingQBytes want = ring_q_bytes(c.b, st.S() / 4, c.H, c.d(), 4, DType::f32);
  CHECK(want.forward == 3 * (2 * 2 * 262144 * 4 * 8 + 2 * 4 * 262144) * 4);
  for (int r = 0; r < 4; ++r) {
    INFO("rank " << r);
    CHECK(res[size_t(r)].forward_bytes == want.forward);
    CHECK(res[size_t(r)].backward_bytes == want.backward);
    CHECK(res[size_t(r)].forward_peak == want.forward_peak);
    CHECK(res[size_t(r)].backward_peak == want.backward_peak);
    CHECK(res[size_t(r)].flops == ring_q_attention_flops(st.layout(), st.spec, r, c.b, c.H, c.Hkv, c.d()));
  }
}

TEST_CASE("each ring's step records say which block travelled: the pass-Q ring's query block, the K/V ring's K/V block",
          "[ring_q]") {
  // `ringside run` heads its step table with it ("query block of" / "K/V block of"); the table
  // named every ring's block "K/V block" (issue 59's try).
  for (Layout layout : {Layout::contiguous, Layout::zigzag, Layout::striped}) {
    const Setup st = setup(3, layout, true, 2, 36);
    const Inputs in = inputs(st);
    MemoryTracker tracker;
    for (Ring which : {Ring::pass_q, Ring::kv}) {
      const char* block = which == Ring::pass_q ? "query block" : "K/V block";
      const auto res = run_ring(which, st, in, DType::f32, tracker);
      for (const Result& rank : res) {
        REQUIRE(rank.steps.size() == 6);  // 3 forward and 3 backward steps
        for (const StepRecord& step : rank.steps) CHECK(step.block == block);
      }
    }
  }
}

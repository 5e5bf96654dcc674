// Real sequences (issue 21): packed documents, sliding windows and lengths the ranks do not
// divide, in every configuration and layout, against the fp64 reference; the public reports of
// context-parallel bugs as tests, each asserting the right value.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cstring>
#include <map>

#include "check/check.h"
#include "comm/tensor_comm.h"
#include "parallel/formulas.h"
#include "parallel/groups.h"
#include "parallel/run_plan.h"
#include "run/runner.h"
#include "configurations.h"
#include "reference64.h"

using namespace ringside;

namespace {

// The keys real token q sees, counted from the configuration alone (not from Packing or the
// kernels' mask): its document's, causal or not, within the window.
int64_t visible_keys(const LayerConfig& c, int64_t q) {
  const std::vector<int64_t> docs = c.docs.empty() ? std::vector<int64_t>{c.s} : c.docs;
  int64_t start = 0;
  for (int64_t len : docs) {
    if (q < start + len) {
      int64_t lo = start, hi = c.causal ? q : start + len - 1;
      if (c.window > 0) lo = std::max(lo, q - c.window + 1);
      if (c.window > 0 && !c.causal) hi = std::min(hi, q + c.window - 1);
      return hi - lo + 1;
    }
    start += len;
  }
  FAIL("token " << q << " in no document");
  return 0;
}

// The real queries that see real key k (visible_keys turned around): its document's, at or
// after it when causal, within the window. The pass-Q ring's work is counted by the keys a rank
// holds.
int64_t visible_queries(const LayerConfig& c, int64_t k) {
  const std::vector<int64_t> docs = c.docs.empty() ? std::vector<int64_t>{c.s} : c.docs;
  int64_t start = 0;
  for (int64_t len : docs) {
    if (k < start + len) {
      int64_t lo = c.causal ? k : start, hi = start + len - 1;
      if (c.window > 0) hi = std::min(hi, k + c.window - 1);
      if (c.window > 0 && !c.causal) lo = std::max(lo, k - c.window + 1);
      return hi - lo + 1;
    }
    start += len;
  }
  FAIL("token " << k << " in no document");
  return 0;
}

// The forward attention FLOPs world rank `rank` must compute: 4 d per visible (query, key) pair
// per head, over the real queries it attends for and the heads it holds.
double exact_rank_flops(const RunPlan& plan, int rank) {
  const ParallelConfig& par = plan.par;
  const LayerConfig& c = plan.layer;
  const GroupCoords at = coords_of(par, rank);
  const int U = par.a2a_size();
  std::vector<int64_t> slots;  // the queries this rank attends for, as slots of the padded sequence
  if (!par.scheme().token_layout) {  // heads split (or none): every query, our heads
    slots = plan.cp_positions(0);
    for (int j = 1; j < par.cp; ++j) {
      const auto more = plan.cp_positions(j);
      slots.insert(slots.end(), more.begin(), more.end());
    }
  } else if (par.scheme().nested()) {  // the ring's shard, gathered by the all-to-all
    for (int u = 0; u < U; ++u) {
      const auto more = plan.cp_positions(u + U * at.r);
      slots.insert(slots.end(), more.begin(), more.end());
    }
  } else {
    slots = plan.cp_positions(at.c);
  }
  const int64_t heads = c.H / par.tp / U;
  const bool by_keys = par.cp_comm == &cp_scheme("p2p-q");  // every query against this rank's keys
  double pairs = 0;
  for (int64_t t : plan.packing->real_of(slots))
    if (t >= 0) pairs += double(by_keys ? visible_queries(c, t) : visible_keys(c, t));
  return 4.0 * double(c.d()) * double(heads) * double(c.b) * pairs;
}

// The configurations swept (tests/configurations.h).
std::vector<ParallelConfig> configurations() { return testing::configurations({{2, 2}, {1, 4}, {4, 1}, {1, 3}}); }

// The plan of the configuration `name` for c on P ranks, in `layout`.
RunPlan plan_of(const std::string& name, const LayerConfig& c, int P, Layout layout = Layout::automatic) {
  ParallelConfig par = parse_parallel_config(name);
  par.layout = layout;
  return resolve(par, c, P);
}


LayerConfig small_layer() {
  LayerConfig c;
  c.b = 2, c.h = 32, c.H = 8, c.Hkv = 4, c.f = 64, c.seed = 11, c.dropout = 0.1;
  return c;
}

// The relative error of tokens [t0, t0 + n) of a [b, s, h] result against ref [b, n, h].
double token_error(const Tensor& got, int64_t t0, int64_t n, const Tensor& ref) {
  return relative_error(slice_seq(got, t0, n, {}), ref);
}

bool bit_equal(const Tensor& a, const Tensor& b) {
  return a.nbytes() == b.nbytes() && std::memcmp(a.raw_data(), b.raw_data(), size_t(a.nbytes())) == 0;
}

}  // namespace

TEST_CASE("every configuration and layout matches the fp64 reference with documents, windows and uneven s",
          "[packed]") {
  struct Variant {
    const char* name;
    int64_t s;
    std::vector<int64_t> docs;
    int64_t window;
    bool causal;
  };
  const Variant variants[] = {
      {"documents of 1, 2, 13 and 29 tokens", 45, {1, 2, 13, 29}, 0, true},
      {"window 3 alone, s = 45", 45, {}, 3, true},
      {"documents 20, 1, 24 and window 5", 45, {20, 1, 24}, 5, true},
      {"s = 2 P 4 + 1 = 33, no documents", 33, {}, 0, true},
      {"s = 2 P 16 + 1 = 129, window 1", 129, {}, 1, true},
      {"not causal: documents 10 and 35, window 4", 45, {10, 35}, 4, false},
  };
  int runs = 0;
  for (const Variant& v : variants) {
    LayerConfig c = small_layer();
    c.s = v.s, c.docs = v.docs, c.window = v.window, c.causal = v.causal;
    const ReferenceRun ref = reference64(c);
    for (const ParallelConfig& config : configurations())
      for (Layout layout : kLayouts) {
        const bool has_layout = config.scheme().token_layout;
        if (!has_layout && layout != Layout::contiguous) continue;
        ParallelConfig par = config;
        par.layout = layout;
        const int P = par.tp * par.cp;
        if (const auto why = testing::refusal(par, c, P)) {
          INFO(par.name() << ": " << *why);
          REQUIRE(c.H % (par.tp * par.resolved(P).a2a_size()) != 0);  // only the heads may not split
          continue;
        }
        const RunPlan plan = resolve(par, c, P);
        INFO(v.name << ": " << par.name() << " (" << to_string(par.cp_comm) << ") P=" << P << " " << to_string(layout)
                    << ", S = " << plan.packing->S);
        MemoryTracker tracker;
        const auto res = testing::run_and_check(plan, ref, tracker);
        CHECK(res[0].out.dim(1) == c.s);  // padding dropped, every real token kept
        for (int r = 0; r < P; ++r) CHECK(res[r].attention_flops == exact_rank_flops(plan, r));
        ++runs;
      }
  }
  // 14 configurations run (Ulysses cannot split 8 heads over 3 ranks): the 10 with a ring (K/V
  // or pass-Q) or an all-gather in 5 layouts each, tp-sp, plain TP and the two Ulysses in one;
  // in each of 6 variants.
  CHECK(runs == 6 * (10 * 5 + 4));
}

TEST_CASE("the padding each layout needs is the least that splits the sequence", "[packed]") {
  LayerConfig c = small_layer();
  c.s = 2999, c.docs = {700, 2000, 299};
  auto S = [&](const char* name, int P, Layout l) { return plan_of(name, c, P, l).packing->S; };
  CHECK(S("ring", 4, Layout::contiguous) == 3000);  // a multiple of P
  CHECK(S("ring", 4, Layout::zigzag) == 3000);      // of 2P: 3000 = 8 x 375
  CHECK(S("ring", 4, Layout::striped) == 3000);
  CHECK(S("ring", 4, Layout::zigzag_per_doc) == 704 + 2000 + 304);  // each document to a multiple of 2P = 8
  CHECK(S("tp-sp", 4, Layout::contiguous) == 3000);
  CHECK(S("ring", 3, Layout::zigzag) == 3000);  // 2999 -> a multiple of 6
  c.s = 2 * 4 * 16 + 1, c.docs.clear();
  CHECK(S("ring", 4, Layout::zigzag) == 136);
  CHECK(S("tp2xring2", 4, Layout::zigzag) == 132);  // lcm(T C, 2R) = 4
  c.s = 2 * 4 * 16;
  CHECK(S("ring", 4, Layout::zigzag) == 128);  // nothing to pad
}

TEST_CASE("zigzag-per-doc and greedy cut every document into 2R chunks, two per rank", "[packed]") {
  LayerConfig c = small_layer();
  c.s = 16, c.docs = {4, 12};
  const Packing packing(c, 4, 4);
  const RingLayout per_doc(Layout::zigzag_per_doc, packing, 2), greedy(Layout::greedy, packing, 2);
  // Documents [0, 4) and [4, 16) in chunks of 1 and 3: rank 0 holds chunks 0 and 3 of each.
  CHECK(per_doc.positions(0) == std::vector<int64_t>{0, 3, 4, 5, 6, 13, 14, 15});
  CHECK(per_doc.positions(1) == std::vector<int64_t>{1, 2, 7, 8, 9, 10, 11, 12});
  // Greedy by work (causal): the long document's chunks cost 33, 24, 15, 6 pairs, the short one's
  // 4, 3, 2, 1; taken in that order by the least-loaded rank with room, they fall as zigzag's.
  CHECK(greedy.positions(0) == per_doc.positions(0));
  CHECK(greedy.positions(1) == per_doc.positions(1));
  // A document shorter than 2R = 4 is padded to 4: one token a chunk.
  c.s = 7, c.docs = {2, 5};
  const Packing short_docs(c, 4, 4);
  CHECK(short_docs.S == 12);
  CHECK(short_docs.real_of({0, 1, 2, 3, 4, 8, 9, 11}) == std::vector<int64_t>{0, 1, -1, -1, 2, 6, -1, -1});
  CHECK(short_docs.rope_positions({0, 1, 4, 8, 9}) == std::vector<int64_t>{0, 1, 0, 4, 0});
  // Rank 1: chunks 1 and 2 of each, one slot each of the first document, two of the second.
  CHECK(RingLayout(Layout::zigzag_per_doc, short_docs, 2).positions(1) == std::vector<int64_t>{1, 2, 6, 7, 8, 9});
}

TEST_CASE("TE 1930: a 7-token document padded to 8 on CP 2 is exact, no token dropped", "[packed]") {
  LayerConfig c = small_layer();
  c.s = 7, c.docs = {7};
  const ReferenceRun ref = reference64(c);
  for (Layout layout : {Layout::zigzag, Layout::zigzag_per_doc, Layout::contiguous}) {
    INFO(to_string(layout));
    const RunPlan plan = plan_of("ring", c, 2, layout);
    CHECK(plan.packing->S == 8);
    MemoryTracker tracker;
    const auto res = run_local_ranks(plan, DType::f32, tracker);
    REQUIRE(res[0].out.dim(1) == 7);
    CHECK(worst_error(res[0], ref).first < kTolerance);
    // The seventh token, which a 6-token split would lose: its output and gradient too.
    CHECK(token_error(res[0].out, 6, 1, slice_seq(ref.out, 6, 1, {})) < kTolerance);
    CHECK(token_error(res[0].dx, 6, 1, slice_seq(ref.dx, 6, 1, {})) < kTolerance);
  }
}

TEST_CASE("a 698-token document padded to 704 on CP 4: deterministic gradients, equal to the reference",
          "[packed]") {
  LayerConfig c = small_layer();
  c.b = 1, c.s = 698, c.h = 16, c.H = 4, c.Hkv = 2, c.f = 32;
  const RunPlan plan = plan_of("ring", c, 4);
  REQUIRE(plan.packing->S == 704);
  const ReferenceRun ref = reference64(c);
  MemoryTracker t1, t2;
  const auto a = run_local_ranks(plan, DType::f32, t1);
  const auto b = run_local_ranks(plan, DType::f32, t2);
  const auto [err, which] = worst_error(a[0], ref);
  INFO(which << " " << err);
  CHECK(err < kTolerance);
  CHECK(bit_equal(a[0].dx, b[0].dx));
  for (size_t i = 0; i < a[0].grads.named().size(); ++i) {
    INFO(a[0].grads.named()[i].first);
    CHECK(bit_equal(*a[0].grads.named()[i].second, *b[0].grads.named()[i].second));
  }
}

TEST_CASE("axolotl 3608: a 5-document pack on cp 2 equals each document alone, no leakage", "[packed]") {
  LayerConfig c = small_layer();
  c.dropout = 0;  // dropout is keyed by the global token index: a document alone would draw others
  c.s = 60, c.docs = {9, 17, 3, 20, 11};
  auto be = make_cpu_backend();
  const LayerWeights w = init_weights(c, DType::f64, {});
  const Tensor x = random_input(c, static_cast<uint32_t>(RngSite::input_x), DType::f64, {});
  const Tensor dout = random_input(c, static_cast<uint32_t>(RngSite::input_dout), DType::f64, {});
  for (Layout layout : {Layout::zigzag, Layout::zigzag_per_doc, Layout::greedy}) {
    MemoryTracker tracker;
    const auto res = run_local_ranks(plan_of("ring", c, 2, layout), DType::f32, tracker);
    int64_t start = 0;
    for (size_t i = 0; i < c.docs.size(); ++i) {
      // The document alone, from its own inputs: one document of its length, RoPE from 0.
      LayerConfig alone = c;
      alone.s = c.docs[i], alone.docs.clear();
      const Tensor xi = slice_seq(x, start, alone.s, {}), douti = slice_seq(dout, start, alone.s, {});
      ForwardResult f = reference_forward<double>(alone, w, xi, *be);
      Gradients g = reference_backward<double>(alone, w, f.saved, douti, *be);
      INFO(to_string(layout) << ": document " << i << " at " << start);
      CHECK(token_error(res[0].out, start, alone.s, f.out) < kTolerance);
      CHECK(token_error(res[0].dx, start, alone.s, g.dx) < kTolerance);
      start += alone.s;
    }
  }
  // And in the reference itself: perturbing document 1's input changes every output of document 1
  // and no bit of document 2's.
  Tensor x2 = x.clone({});
  for (int64_t bi = 0; bi < c.b; ++bi)
    for (int64_t t = 9; t < 26; ++t) x2.data<double>()[(bi * c.s + t) * c.h] += 1.0;
  const ForwardResult f1 = reference_forward<double>(c, w, x, *be), f2 = reference_forward<double>(c, w, x2, *be);
  for (int64_t bi = 0; bi < c.b; ++bi)
    for (int64_t t = 0; t < c.s; ++t) {
      const bool changed = std::memcmp(f1.out.data<double>() + (bi * c.s + t) * c.h,
                                       f2.out.data<double>() + (bi * c.s + t) * c.h, sizeof(double) * size_t(c.h)) != 0;
      INFO("token " << t);
      CHECK(changed == (t >= 9 && t < 26));
    }
}

TEST_CASE("PyTorch 189902: documents of 4 and 12 tokens on 2 ranks, balanced by zigzag-per-doc and greedy",
          "[packed]") {
  LayerConfig c = small_layer();
  c.s = 16, c.docs = {4, 12};
  const ReferenceRun ref = reference64(c);
  std::map<Layout, double> max_over_min;
  for (Layout layout : kLayouts) {
    MemoryTracker tracker;
    const auto res = run_local_ranks(plan_of("ring", c, 2, layout), DType::f32, tracker);
    INFO(to_string(layout));
    CHECK(worst_error(res[0], ref).first < kTolerance);
    const double f0 = res[0].attention_flops, f1 = res[1].attention_flops;
    max_over_min[layout] = std::max(f0, f1) / std::min(f0, f1);
  }
  // Causal pairs per rank: zigzag over the whole pack gives rank 0 the short document and the
  // long one's last chunk (10 + 42 = 52 pairs), rank 1 the long one's first 8 tokens (36): 13/9.
  CHECK(max_over_min[Layout::zigzag] == Approx(52.0 / 36.0).epsilon(1e-12));
  // The bound: each document's 2R chunks pair up to equal work, so the per-document layouts are
  // exact, 44 pairs each.
  CHECK(max_over_min[Layout::zigzag_per_doc] == 1.0);
  CHECK(max_over_min[Layout::greedy] == 1.0);
  CHECK(max_over_min[Layout::contiguous] > 1.4);
}

TEST_CASE("with a window, greedy balances ragged documents that zigzag-per-doc does not", "[packed]") {
  // The example: 7 random documents over 2999 tokens, window 512, 4 ranks (formulas, exact).
  LayerConfig c = small_layer();
  c.b = 1, c.h = 512, c.H = 8, c.Hkv = 4, c.f = 2048, c.seed = 1234;
  c.s = 2999, c.docs = parse_docs("random:7", c.s, c.seed), c.window = 512;
  auto ratio = [&](Layout l) {
    const RunPlan plan = plan_of("ring", c, 4, l);
    double lo = 1e300, hi = 0, total = 0;
    for (int r = 0; r < 4; ++r) {
      const double f = parallel_attention_flops(plan, r);
      lo = std::min(lo, f), hi = std::max(hi, f), total += f;
    }
    return std::pair{hi / lo, total};
  };
  const auto [greedy, greedy_total] = ratio(Layout::greedy);
  const auto [per_doc, per_doc_total] = ratio(Layout::zigzag_per_doc);
  const auto [zigzag, zigzag_total] = ratio(Layout::zigzag);
  INFO("max/min: greedy " << greedy << ", zigzag-per-doc " << per_doc << ", zigzag " << zigzag);
  CHECK(greedy < 1.05);  // the bound greedy meets here
  CHECK(per_doc > greedy);
  CHECK(zigzag > greedy);
  // Padding adds no work: every layout computes the same pairs in all.
  CHECK(greedy_total == per_doc_total);
  CHECK(greedy_total == zigzag_total);
}

TEST_CASE("the ring's step records name the pairs a document boundary hides", "[packed]") {
  LayerConfig c = small_layer();
  c.s = 16, c.docs = {8, 8};
  MemoryTracker tracker;
  const auto res = run_local_ranks(plan_of("ring", c, 2, Layout::contiguous), DType::f32, tracker);
  // Rank 1 holds document 2 (tokens 8..15); at step 1 it holds rank 0's block, document 1: not
  // hidden by causality (its keys come first) but by the document boundary.
  const StepRecord& step = res[1].steps[1];
  CHECK(step.phase == "forward");
  CHECK(step.block_of == 0);
  CHECK(step.flops == 0);
  CHECK(step.skipped_pairs == 1);
  CHECK(step.skipped == "q[8:16] x k[0:8]");
  CHECK(res[1].steps[0].skipped_pairs == 0);
  CHECK(res[1].steps[0].flops == 4.0 * c.d() * c.H * c.b * 36);  // 8 x 9 / 2 causal pairs
}

TEST_CASE("the docs option: lists and random lengths, and the rules of a packed sequence", "[packed]") {
  CHECK(parse_docs("700,2000,299", 2999, 1) == std::vector<int64_t>{700, 2000, 299});
  const std::vector<int64_t> a = parse_docs("random:7", 2999, 1234), b = parse_docs("random:7", 2999, 1234);
  CHECK(a == b);
  CHECK(a.size() == 7);
  int64_t sum = 0;
  for (int64_t len : a) {
    CHECK(len >= 1);
    sum += len;
  }
  CHECK(sum == 2999);
  CHECK(parse_docs("random:7", 2999, 99) != a);
  CHECK(parse_docs("random:5", 5, 3) == std::vector<int64_t>{1, 1, 1, 1, 1});
  CHECK(parse_docs("random:1", 40, 3) == std::vector<int64_t>{40});
  CHECK_THROWS_WITH(parse_docs("random:6", 5, 3), Catch::Contains("6 documents of at least one token each do not fit in s = 5"));
  CHECK_THROWS_WITH(parse_docs("random:0", 5, 3), Catch::Contains("must be a positive integer, got '0'"));
  CHECK_THROWS_WITH(parse_docs("3,,4", 7, 3), Catch::Contains("each length must be a positive integer, got ''"));
  // Past s, whatever the size: never "not a positive integer" for a number too large to read.
  CHECK_THROWS_WITH(parse_docs("9223372036854775807,1", 64, 3),
                    Catch::Contains("9223372036854775807 tokens is longer than the sequence, s = 64"));
  CHECK_THROWS_WITH(parse_docs("random:99999999999999999999", 64, 3),
                    Catch::Contains("99999999999999999999 documents of at least one token each do not fit in s = 64"));
  CHECK(parse_docs("032,032", 64, 3) == std::vector<int64_t>{32, 32});
  CHECK_THROWS_WITH(parse_docs("3,-4", 7, 3), Catch::Contains("got '-4'"));
  LayerConfig c = small_layer();
  c.s = 48, c.docs = {20, 20};
  CHECK_THROWS_WITH(c.validate(), Catch::Contains("the 2 documents sum to 40 tokens, not s = 48"));
  c.docs = {20, 0, 28};
  CHECK_THROWS_WITH(c.validate(), Catch::Contains("document 1 has length 0"));
  c.docs = {40, 20};
  CHECK_THROWS_WITH(c.validate(), Catch::Contains("the documents sum past s = 48"));
  c.docs.clear(), c.window = -1;
  CHECK_THROWS_WITH(c.validate(), Catch::Contains("the sliding window must be >= 1"));
}

TEST_CASE("on --device cuda a run that needs a mask is refused up front, naming --device cpu", "[packed]") {
  LayerConfig c = small_layer();
  c.s = 48;
  const ParallelConfig ring = parse_parallel_config("ring");
  REQUIRE_NOTHROW(resolve(ring, c, 4, Device::cuda));  // 48 splits into 8 zigzag chunks: no mask
  c.s = 45;
  REQUIRE_NOTHROW(resolve(ring, c, 4, Device::cpu));
  REQUIRE_THROWS_WITH(resolve(ring, c, 4, Device::cuda),
                      Catch::Contains("ring with P = 4 on --device cuda needs s = 45 padded to S = 48 for its shards") &&
                          Catch::Contains("(run with --device cpu)"));
  c.s = 48, c.docs = {40, 8};
  REQUIRE_THROWS_WITH(resolve(ring, c, 4, Device::cuda), Catch::Contains("needs packed documents"));
  c.docs.clear(), c.window = 16;
  REQUIRE_THROWS_WITH(resolve(parse_parallel_config("tp-sp"), c, 4, Device::cuda), Catch::Contains("needs a sliding window"));
}

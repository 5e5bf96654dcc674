// The hybrids (issue 16): every parallel configuration against the fp64 reference, its measured
// bytes against the formulas, Ulysses with kv heads shared across ranks, USP's token reorder and
// balance, and the all-gather's transient K/V.
#include <catch2/catch.hpp>

#include <algorithm>
#include <map>

#include "parallel/allgather_attention.h"
#include "check/check.h"
#include "parallel/formulas.h"
#include "parallel/run_plan.h"
#include "parallel/ulysses_attention.h"
#include "run/runner.h"
#include "configurations.h"
#include "reference64.h"

using namespace ringside;

namespace {

// The configurations swept (tests/configurations.h).
std::vector<ParallelConfig> configurations() { return testing::configurations({{2, 2}, {1, 4}, {4, 1}, {2, 4}}); }

bool has_layout(const ParallelConfig& p) { return p.scheme().token_layout; }

}  // namespace

TEST_CASE("every configuration matches the fp64 reference, and its bytes and memory the formulas", "[hybrid]") {
  int runs = 0;
  std::map<std::string, int> names;
  for (int64_t Hkv : {8, 4, 1})
    for (int variant = 0; variant < 3; ++variant) {  // causal, rope, dropout 0.1; full attention with both; neither
      LayerConfig c;
      c.b = 2, c.s = 32, c.h = 64, c.H = 8, c.Hkv = Hkv, c.f = 64, c.seed = 7;
      c.causal = variant == 0, c.rope = variant < 2, c.dropout = variant < 2 ? 0.1 : 0.0;
      const ReferenceRun ref = reference64(c);
      for (const ParallelConfig& config : configurations())
        for (Layout layout : {Layout::contiguous, Layout::zigzag, Layout::striped}) {
          if (!has_layout(config) && layout != Layout::contiguous) continue;
          ParallelConfig par = config;
          par.layout = layout;
          const int P = par.tp * par.cp;
          if (const auto why = testing::refusal(par, c, P)) {
            INFO(par.name() << " Hkv=" << Hkv << ": " << *why);
            REQUIRE(Hkv % par.tp != 0);  // the only rule these shapes may break: TP splits the kv heads
            continue;
          }
          INFO(par.name() << " (" << to_string(par.cp_comm) << ") P=" << P << " " << to_string(layout) << " Hkv=" << Hkv
                          << " causal=" << c.causal << " rope=" << c.rope << " p=" << c.dropout);
          const RunPlan plan = resolve(par, c, P);
          MemoryTracker tracker;
          const auto res = testing::run_and_check(plan, ref, tracker);
          double flops = 0;
          for (int r = 0; r < P; ++r) flops += res[r].attention_flops;
          // Over the ranks, the whole layer's attention (a head split or a sequence split of it).
          AttentionParams whole;
          whole.b = c.b, whole.sq = whole.sk = c.s, whole.H = c.H, whole.Hkv = c.Hkv, whole.d = c.d(), whole.causal = c.causal;
          CHECK(flops == Approx(kernels::cpu::attention_forward_flops(whole)).epsilon(1e-12));
          ++runs, ++names[par.name()];
        }
    }
  // 16 configurations (plain TP among them; the pass-Q ring at (2, 2), (1, 4) and (2, 4)), 38
  // with their layouts, per layer; with Hkv 1 only the 13 without TP.
  REQUIRE(names.size() == 16);
  REQUIRE(runs == 3 * (38 + 38 + 13));  // three variants each
}

TEST_CASE("ulysses sends a kv head read on two ranks to both, and matches the reference", "[hybrid][ulysses]") {
  // H 6, Hkv 3, P 2: rank 0's query heads 0-2 read kv heads 0, 0, 1; rank 1's 3-5 read 1, 2, 2.
  const HeadShare r0 = ulysses_head_share(6, 3, 2, 0), r1 = ulysses_head_share(6, 3, 2, 1);
  REQUIRE((r0.kv_first == 0 && r0.kv_count == 2 && r0.expand));
  REQUIRE((r1.kv_first == 1 && r1.kv_count == 2 && r1.expand));
  // H 12, Hkv 4, P 6: two query heads per rank; ranks 1 and 4 straddle two kv heads, whose
  // kernel mapping (head i reads kv i / 1) is right as received.
  const HeadShare s1 = ulysses_head_share(12, 4, 6, 1);
  REQUIRE((s1.kv_first == 0 && s1.kv_count == 2 && !s1.expand));
  for (auto [H, Hkv, P] : {std::tuple{6, 3, 2}, {12, 4, 6}, {12, 6, 4}})
    for (bool causal : {true, false}) {
      LayerConfig c;
      c.b = 2, c.s = 24, c.h = 8 * H, c.H = H, c.Hkv = Hkv, c.f = 64, c.seed = 11, c.causal = causal;
      INFO("H " << H << " Hkv " << Hkv << " P " << P << " causal " << causal);
      const RunPlan plan = resolve(parse_parallel_config("ulysses"), c, P);
      MemoryTracker tracker;
      const auto res = run_local_ranks(plan, DType::f32, tracker);
      const auto [err, which] = worst_error(res[0], reference64(c));
      INFO("worst " << which << " " << err);
      CHECK(err < kTolerance);
      for (int r = 0; r < P; ++r) {
        CHECK(res[r].peak_saved == parallel_saved_bytes(plan, r, DType::f32));
        CHECK(res[r].forward.bytes_sent == parallel_comm_bytes(plan, r, DType::f32).forward);
        CHECK(res[r].backward.bytes_sent == parallel_comm_bytes(plan, r, DType::f32).backward);
      }
      // In fp64, to rounding: the shared heads' gradients are summed, not overwritten.
      MemoryTracker t64;
      const auto res64 = run_local_ranks(plan, DType::f64, t64);
      CHECK(worst_error(res64[0], reference64(c)).first < 1e-12);
    }
}

TEST_CASE("USP reorders the tokens by both degrees, so the ring sees zigzag shards, balanced", "[hybrid][usp]") {
  LayerConfig c;
  c.b = 1, c.s = 64, c.h = 64, c.H = 8, c.Hkv = 8, c.f = 64, c.causal = true;  // auto layout: zigzag
  for (auto [U, R] : {std::pair{2, 2}, {4, 2}}) {
    INFO("U " << U << " x R " << R);
    const ParallelConfig par = parse_parallel_config(detail::concat("ulysses", U, "xring", R)).resolved(U * R);
    REQUIRE(par.cp_comm == &cp_scheme("a2a+p2p"));
    // What the all-to-all gathers on a2a group r (the u shards in rank order) is ring rank r's
    // zigzag shard. Split in order instead (rank c holding the c-th of C pieces, the input
    // long-context-attention's issue 53 fed its hybrid), it gathers a contiguous piece.
    const RunPlan plan = resolve(par, c, U * R);
    ParallelConfig in_order_par = par;
    in_order_par.layout = Layout::contiguous;
    const RunPlan in_order = resolve(in_order_par, c, U * R);
    for (int r = 0; r < R; ++r) {
      std::vector<int64_t> gathered, naive;
      for (int u = 0; u < U; ++u) {
        const auto mine = plan.cp_positions(u + U * r);
        gathered.insert(gathered.end(), mine.begin(), mine.end());
        const auto wrong = in_order.cp_positions(u + U * r);
        CHECK(wrong == layout_positions(Layout::contiguous, c.s, U * R, u + U * r));
        naive.insert(naive.end(), wrong.begin(), wrong.end());
      }
      CHECK(gathered == layout_positions(Layout::zigzag, c.s, R, r));
      CHECK(naive != gathered);
    }
    // ... and the ring's causal work would be lopsided: about 3 times for R = 2.
    double lo_in_order = 1e300, hi_in_order = 0;
    for (int rank = 0; rank < U * R; ++rank) {
      const double f = parallel_attention_flops(in_order, rank);
      lo_in_order = std::min(lo_in_order, f), hi_in_order = std::max(hi_in_order, f);
    }
    CHECK(hi_in_order / lo_in_order > 2.5);
    // Correct against the reference, and each rank's attention work within 1.05 of every other's.
    MemoryTracker tracker;
    const auto res = run_local_ranks(plan, DType::f32, tracker);
    CHECK(worst_error(res[0], reference64(c)).first < kTolerance);
    double lo = 1e300, hi = 0;
    for (const RunRecord& r : res) lo = std::min(lo, r.attention_flops), hi = std::max(hi, r.attention_flops);
    INFO("attention FLOPs per rank: " << lo << " to " << hi);
    CHECK(hi / lo <= 1.05);
    REQUIRE(res[0].steps.size() == size_t(2 * R));  // the inner ring's steps, forward and backward
  }
}

TEST_CASE("all-gather CP holds the whole sequence's K/V for a while: the tracker sees it", "[hybrid][all-gather]") {
  LayerConfig c;
  c.b = 2, c.s = 64, c.h = 64, c.H = 8, c.Hkv = 2, c.f = 64;
  const int P = 4;
  for (const char* name : {"all-gather", "tp2xall-gather2", "ring"}) {
    const RunPlan plan = resolve(parse_parallel_config(name), c, P);
    MemoryTracker tracker;
    const auto res = run_local_ranks(plan, DType::f32, tracker);
    const ParallelConfig par = plan.par;
    const int64_t kv = allgather_kv_bytes(c.b, c.s, c.Hkv / par.tp, c.d(), DType::f32);
    for (int r = 0; r < P; ++r) {
      INFO(name << " rank " << r);
      if (par.cp_comm == &cp_scheme("all_gather")) {
        // The gathered K and V at once, and V's gather buffer before it is put in sequence order
        // (under TP 2 here, TP's reduce-scatter buffers, 3 b (s/P) h, are larger still).
        CHECK(res[r].peak_comm_forward == (par.tp == 1 ? kv + kv / 2 : 3 * c.b * (c.s / P) * c.h * 4));
        CHECK(res[r].peak_comm_forward == parallel_forward_comm_peak(plan, r, DType::f32));
      } else {
        // The ring's forward holds two blocks of K and two of V in flight: 4 b (s/C) Hkv d, half of it at C 4.
        CHECK(res[r].peak_comm_forward == 2 * kv / par.cp);
      }
    }
  }
}

TEST_CASE("configuration names and flags describe the same thing", "[hybrid]") {
  CHECK(parse_parallel_config("tp-sp").cp_comm == &no_cp_scheme());
  CHECK(parse_parallel_config("tp2xring2").resolved(4).tp == 2);
  CHECK(parse_parallel_config("ring2xtp2").order == RankOrder::cp_tp);
  // Plain TP is "tp" alone: Megatron without --sequence-parallel, over every rank; "tpN" and
  // "tp-sp" keep sequence parallelism, as every combination does.
  CHECK_FALSE(parse_parallel_config("tp").sequence_parallel);
  CHECK(parse_parallel_config("tp").resolved(4).tp == 4);
  CHECK(parse_parallel_config("tp").resolved(4).canonical_name() == "tp");
  CHECK(parse_parallel_config("tp4").sequence_parallel);
  CHECK(parse_parallel_config("tp2xring2").sequence_parallel);
  {
    ParallelConfig plain_with_cp = parse_parallel_config("tp");
    plain_with_cp.tp = 2, plain_with_cp.cp = 2, plain_with_cp.cp_comm = &cp_scheme("p2p");
    CHECK_THROWS_WITH(plain_with_cp.resolved(4), Catch::Contains("plain TP (no sequence parallelism) runs alone"));
  }
  for (const char* name : {"tp", "tp-sp", "ring", "ulysses", "all-gather", "tp2xring2", "ulysses2xring2", "tp2xulysses2xring2",
                           "ring2xtp2", "tp2xall-gather", "ulysses4xring"})
    CHECK(parse_parallel_config(name).name() == name);
  for (const char* bad : {"", "x", "tp2x", "ringxtp2xtp2", "ringxulysses2", "warp4", "ring0", "tp-sp2", "ulyssesxring2"})
    CHECK_THROWS_AS(parse_parallel_config(bad), ConfigError);
  // Tables print one name per configuration: the short name of one kind of context parallelism
  // over every rank, the degrees otherwise.
  CHECK(parse_parallel_config("ring4").resolved(4).canonical_name() == "ring");
  CHECK(parse_parallel_config("tp1xulysses").resolved(4).canonical_name() == "ulysses");
  CHECK(parse_parallel_config("tp4").resolved(4).canonical_name() == "tp-sp");
  CHECK(parse_parallel_config("tp2xring").resolved(4).canonical_name() == "tp2xring2");
  CHECK(parse_parallel_config("ulysses2xring").resolved(8).canonical_name() == "ulysses2xring4");
  CHECK(parse_parallel_config("ulysses2xring").resolved(8).cp == 8);
  CHECK_THROWS_AS(parse_parallel_config("tp2xring").resolved(3), ConfigError);
  CHECK_THROWS_AS(parse_parallel_config("ulysses2xring524289"), ConfigError);  // U x R above kMaxRanks, not wrapped
  CHECK_THROWS_AS(parse_parallel_config("ring2000000"), ConfigError);
  CHECK_THROWS_WITH(parse_parallel_config("ring99999999999999999999"), Catch::Contains("is above 1048576 ranks"));
  CHECK_THROWS_WITH(parse_parallel_config("ring4x"), Catch::Contains("cannot end with 'x'"));
  // USP with a group of one is the other algorithm alone, run and named as it.
  CHECK(parse_parallel_config("ulysses1xring4").resolved(4).canonical_name() == "ring");
  CHECK(parse_parallel_config("ulysses1xring4").resolved(4).cp_comm == &cp_scheme("p2p"));
  CHECK(parse_parallel_config("tp2xulysses2xring1").resolved(4).canonical_name() == "tp2xulysses2");
  CHECK(parse_parallel_config("ulysses4xring1").resolved(4).cp_comm == &cp_scheme("a2a"));
  // The groups by world rank, as run prints them.
  CHECK(describe_groups(parse_parallel_config("tp2xring2").resolved(4)) == "TP {0 1} {2 3}; ring {0 2} {1 3}");
  CHECK(describe_groups(parse_parallel_config("ring2xtp2").resolved(4)) == "TP {0 2} {1 3}; ring {0 1} {2 3}");
  CHECK(describe_groups(parse_parallel_config("ulysses2xring2").resolved(4)) == "all-to-all {0 1} {2 3}; ring {0 2} {1 3}");
  CHECK(describe_groups(parse_parallel_config("tp2xall-gather2").resolved(4)) == "TP {0 1} {2 3}; all-gather {0 2} {1 3}");
  CHECK(describe_groups(parse_parallel_config("tp8xring8").resolved(64), 2) ==
        "TP {0 1 2 3 4 5 6 7} {8 9 10 11 12 13 14 15} ... (8 groups); ring {0 8 16 24 32 40 48 56} "
        "{1 9 17 25 33 41 49 57} ... (8 groups)");
  CHECK(describe_groups(parse_parallel_config("tp-sp").resolved(1)).empty());
  // Placement: tp-cp puts a TP group on neighbouring ranks, cp-tp a CP group.
  const ParallelConfig tpcp = parse_parallel_config("tp2xring4").resolved(8), cptp = parse_parallel_config("ring4xtp2").resolved(8);
  CHECK(world_rank_of(tpcp, 1, 0) == 1);
  CHECK(world_rank_of(cptp, 0, 1) == 1);
  CHECK(coords_of(cptp, 5).t == 1);
  CHECK(coords_of(cptp, 5).c == 1);
}

TEST_CASE("a ring step names its K/V block by the world rank that owns it", "[hybrid]") {
  // In tp2xring2 the rings are {0 2} and {1 3}: at step 1 rank 2 holds rank 0's block, not
  // "ring rank 0"'s, which would read as world rank 0 only by chance (and as rank 1 for rank 3).
  LayerConfig c;
  c.b = 1, c.s = 32, c.h = 32, c.H = 4, c.Hkv = 2, c.f = 32;
  for (const char* name : {"tp2xring2", "ring2xtp2", "ulysses2xring2"}) {
    const RunPlan plan = resolve(parse_parallel_config(name), c, 4);
    const ParallelConfig par = plan.par;
    MemoryTracker tracker;
    const auto res = run_local_ranks(plan, DType::f32, tracker);
    for (int rank = 0; rank < 4; ++rank) {
      const GroupCoords at = coords_of(par, rank);
      const int R = par.ring_size(), U = par.a2a_size();
      REQUIRE(res[rank].steps.size() == size_t(2 * R));
      for (const StepRecord& step : res[rank].steps) {
        INFO(name << " rank " << rank << " " << step.phase << " step " << step.step);
        const int ring_rank = (at.r - step.step + R) % R;  // the block held at this step, by ring rank
        CHECK(step.block_of == world_rank_of(par, at.t, at.u + U * ring_rank));
      }
    }
  }
}

// The registry of context-parallel schemes (parallel/cp_scheme.h, issue 59): every scheme's
// fields coherent, its names and configuration names parsing back to it, the --cp-comm choices
// and lists, each scheme's run on a small layer (GQA, a padded length) against its formulas and
// against hand-counted bytes, and the pass-Q ring's trace: the tile-map kind each rank records
// and the map it draws (the key owner computes each tile).
#include <catch2/catch.hpp>

#include <algorithm>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "core/error.h"
#include "parallel/config.h"
#include "parallel/cp_scheme.h"
#include "parallel/formulas.h"
#include "parallel/run_plan.h"
#include "run/runner.h"
#include "trace/tile_map.h"
#include "trace/trace_file.h"
#include "configurations.h"
#include "reference64.h"

using namespace ringside;

namespace {

const CpScheme& pass_q() { return cp_scheme("p2p-q"); }

// The schemes of context parallelism (all but none).
std::vector<const CpScheme*> cp_kinds() {
  std::vector<const CpScheme*> kinds;
  for (const CpScheme* s : cp_schemes())
    if (!s->none()) kinds.push_back(s);
  return kinds;
}

// A name as configuration names spell it (all-gather for all_gather).
std::string dashed(std::string name) {
  std::replace(name.begin(), name.end(), '_', '-');
  return name;
}

// The ConfigError message of f(), or "" when it throws none.
template <class F>
std::string config_error(F&& f) {
  try {
    f();
  } catch (const ConfigError& e) {
    return e.what();
  }
  return "";
}

// b 2, s 45 (a length no shard divides: padded), h 32, H 4 heads of d 8, Hkv kv heads, causal.
LayerConfig small_layer(int64_t Hkv, int64_t s = 45) {
  LayerConfig c;
  c.b = 2, c.s = s, c.h = 32, c.H = 4, c.Hkv = Hkv, c.f = 64, c.seed = 5;
  return c;
}

// The degrees' forms of a scheme a test runs at P = 4: C 4 (U 2 when nested) and T 2 x C 2 (none
// for a nested scheme, which is one of its parts at C 2).
std::vector<ParallelConfig> forms_at_four(const CpScheme* s) {
  if (s->none()) return {{2, 1, s}};  // TP alone: T 2 (Hkv 2 splits over it)
  if (s->nested()) return {{1, 4, s, 2}};
  return {{1, 4, s}, {2, 2, s}};
}

// The plan run on local ranks, traced, as a reader of its trace file sees it.
trace::TraceData traced(const RunPlan& plan, MemoryTracker& tracker) {
  trace::TraceData t;
  const TraceSink sink{trace::Clock{trace::Clock::steady_now_ns()}, &t.ranks};
  run_local_ranks(plan, DType::f32, tracker, {}, &sink);
  t.run.config = plan.config_json();
  t.run.layout = to_string(plan.requested_layout());
  return trace::parse_trace(trace::to_chrome_json(t).dump());
}

// The pass-Q ring over 4 ranks of a b 1, s 64, H 4, Hkv 2 layer in `layout`.
RunPlan ring_q_plan(Layout layout, bool causal = true) {
  LayerConfig c;
  c.b = 1, c.s = 64, c.h = 32, c.H = 4, c.Hkv = 2, c.f = 32, c.causal = causal;
  ParallelConfig par = parse_parallel_config("ring-q");
  par.layout = layout;
  return resolve(par, c, 4);
}

}  // namespace

TEST_CASE("every registered scheme's names are its own and find it", "[cp_scheme]") {
  const std::vector<const CpScheme*>& all = cp_schemes();
  REQUIRE(all.size() == 6);
  CHECK(all.front() == &no_cp_scheme());
  CHECK(&default_cp_scheme() == &cp_scheme("p2p"));
  std::set<std::string> names, spellings;
  std::set<std::vector<std::string>> strategies;
  for (size_t i = 0; i < all.size(); ++i) {
    const CpScheme& s = *all[i];
    INFO("scheme " << s.name);
    CHECK(cp_scheme_index(s) == int(i));
    CHECK(names.insert(s.name).second);  // each name once
    CHECK(&cp_scheme(s.name) == &s);
    CHECK(&cp_scheme(dashed(s.name)) == &s);
    CHECK(std::string(to_string(&s)) == s.name);
    if (*s.te_name) CHECK(&cp_scheme(s.te_name) == &s);
    // No spelling of one scheme is another's.
    for (const std::string& n : {std::string(s.name), dashed(s.name), std::string(s.te_name)})
      if (!n.empty() && n != s.name) CHECK(spellings.insert(n).second);
    // Every field a consumer reads is there: the attention and its formulas.
    CHECK(s.make != nullptr);
    CHECK(s.saved_elems != nullptr);
    CHECK(s.bytes_sent != nullptr);
    CHECK(s.comm_peak != nullptr);
    CHECK(s.flops != nullptr);
    CHECK(s.hop_bytes != nullptr);
    CHECK(*s.summary);
    CHECK(*s.group_words);
    CHECK(*s.family);
    // The planners weigh by default what TransformerEngine runs: all but ringside's pass-Q ring
    // (none has no name there: TP alone is weighed wherever C = 1, asked or not).
    if (!s.none()) CHECK(s.planned_by_default() == (&s != &pass_q()));
    // none: no group, and no configuration name of its own.
    CHECK(s.none() == (&s == &no_cp_scheme()));
    CHECK(s.strategy.size() == (s.none() ? 0u : s.nested() ? 2u : 1u));
    if (!s.none()) {
      std::vector<std::string> tokens(s.strategy.begin(), s.strategy.end());
      CHECK(strategies.insert(tokens).second);  // each scheme's groups spell only it
    }
    // A ring carries something each hop; a scheme without one carries nothing.
    CHECK(bool(*s.hop_carries) == s.groups.ring);
    // The tile map kind is one the trace reader takes.
    const std::string map = s.tile_map;
    CHECK((map.empty() || map == trace::kTileMapRingSteps || map == trace::kTileMapEveryRank));
    // A nested scheme names the non-nested schemes it becomes with a group of one.
    if (s.nested()) {
      const CpScheme &a2a_one = cp_scheme(s.when_a2a_is_one), &ring_one = cp_scheme(s.when_ring_is_one);
      CHECK((!a2a_one.nested() && a2a_one.groups.ring && !a2a_one.groups.a2a));
      CHECK((!ring_one.nested() && ring_one.groups.a2a && !ring_one.groups.ring));
    } else {
      CHECK(std::string(s.when_a2a_is_one).empty());
      CHECK(std::string(s.when_ring_is_one).empty());
    }
  }
  // The pass-Q ring: its own name, its configuration token, its tile map.
  CHECK(std::string(pass_q().name) == "p2p-q");
  CHECK(std::string(pass_q().te_name).empty());
  REQUIRE(pass_q().strategy.size() == 1);
  CHECK(std::string(pass_q().strategy[0]) == "ring-q");
  CHECK(std::string(pass_q().tile_map) == trace::kTileMapRingSteps);
  CHECK(pass_q().groups.ring);
  CHECK(pass_q().token_layout);
  // Names no scheme has are refused with the choices, the pass-Q ring among them.
  for (const char* bad : {"bogus", "", "ring-q", "P2P", "p2p ", "all gather"})
    CHECK_THAT(config_error([&] { cp_scheme(bad); }),
               Catch::Contains("unknown --cp-comm") && Catch::Contains("p2p, all_gather, a2a, a2a+p2p or p2p-q"));
}

TEST_CASE("the --cp-comm choices list every scheme of context parallelism, and lists of them parse", "[cp_scheme]") {
  CHECK(cp_comm_choices() == "p2p, all_gather, a2a, a2a+p2p or p2p-q");
  CHECK(cp_comm_choices(true) == "none, p2p, all_gather, a2a, a2a+p2p or p2p-q");
  const std::string choices = cp_comm_choices();
  const std::vector<std::string> names = cp_comm_names();
  for (const CpScheme* s : cp_kinds()) {
    INFO(s->name);
    CHECK(choices.find(s->name) != std::string::npos);
    CHECK(std::count(names.begin(), names.end(), s->name) == 1);
    CHECK(std::count(names.begin(), names.end(), dashed(s->name)) == 1);
  }
  CHECK(std::count(names.begin(), names.end(), "none") == 0);
  CHECK(names.size() == cp_kinds().size() + 1);  // all-gather beside all_gather
  // Lists: in the order given; "all" every scheme of context parallelism; "" none (the default).
  CHECK(cp_schemes_named("p2p,a2a") == std::vector<const CpScheme*>{&cp_scheme("p2p"), &cp_scheme("a2a")});
  CHECK(cp_schemes_named("p2p-q,all-gather") == std::vector<const CpScheme*>{&pass_q(), &cp_scheme("all_gather")});
  CHECK(cp_schemes_named("all") == cp_kinds());
  CHECK(cp_schemes_named("").empty());
  // An empty item, an unknown name and none are refused, naming the choices.
  for (const char* bad : {"p2p,,a2a", "p2p,", ",p2p", ","})
    CHECK_THAT(config_error([&] { cp_schemes_named(bad); }), Catch::Contains("an empty item") && Catch::Contains("p2p-q, or all"));
  CHECK_THAT(config_error([] { cp_schemes_named("p2p,bogus"); }),
             Catch::Contains("unknown --cp-comm 'bogus'") && Catch::Contains("p2p-q"));
  // plan's list takes "all", so its unknown name lists it too, as its empty item does (it did not).
  for (const char* bad : {"p2p,bogus", "P2P-Q", "p2p-q ", "all,ring-q"})
    CHECK_THAT(config_error([&] { cp_schemes_named(bad); }), Catch::Contains("' (p2p, all_gather, a2a, a2a+p2p or p2p-q, or all)"));
  // One scheme alone is not offered "all": its choices are the schemes'.
  CHECK_THAT(config_error([] { cp_scheme("all"); }), Catch::EndsWith("(p2p, all_gather, a2a, a2a+p2p or p2p-q)"));
  CHECK_THAT(config_error([] { cp_schemes_named("none"); }), Catch::Contains("--cp-comm none"));
  CHECK_THAT(config_error([] { cp_schemes_named("p2p,none"); }), Catch::Contains("--cp-comm none"));
}

TEST_CASE("every scheme's configuration names parse back to it, with its degrees", "[cp_scheme]") {
  int checked = 0;
  for (const CpScheme* s : cp_kinds())
    for (auto [T, C, P] : {std::tuple{1, 4, 4}, {2, 2, 4}, {1, 2, 2}, {2, 4, 8}, {0, 2, 4}, {2, 0, 4}, {1, 0, 4}}) {
      ParallelConfig par{T, C, s};
      if (s->nested()) {
        if (C == 0 || C < 4) continue;  // U 2 inside C 4: the others are one of its parts
        par.cp_a2a = 2;
      }
      for (RankOrder order : {RankOrder::tp_cp, RankOrder::cp_tp}) {
        if (order == RankOrder::cp_tp && (T < 2 || C < 2)) continue;
        par.order = order;
        const std::string name = par.name();
        INFO(s->name << " T " << T << " C " << C << " P " << P << ": " << name);
        const ParallelConfig parsed = parse_parallel_config(name);
        const ParallelConfig want = par.resolved(P), got = parsed.resolved(P);
        CHECK(got.cp_comm == want.cp_comm);
        CHECK(got.cp_comm == s);
        CHECK(got.tp == want.tp);
        CHECK(got.cp == want.cp);
        CHECK(got.a2a_size() == want.a2a_size());
        CHECK(got.ring_size() == want.ring_size());
        CHECK(got.order == want.order);
        CHECK(got.canonical_name() == want.canonical_name());
        // The canonical name parses back too.
        CHECK(parse_parallel_config(want.canonical_name()).resolved(P).canonical_name() == want.canonical_name());
        ++checked;
      }
    }
  // Four schemes in 7 forms and 2 of them in the cp-tp order; the nested one in 2 forms (C 4, U 2),
  // one of them in the cp-tp order.
  CHECK(checked == 4 * (7 + 2) + (2 + 1));
  // The short names over every rank, and the degrees otherwise.
  auto canonical = [](const std::string& name, int P) { return parse_parallel_config(name).resolved(P).canonical_name(); };
  CHECK(canonical("ring", 4) == "ring");
  CHECK(canonical("ring4", 4) == "ring");
  CHECK(canonical("ring-q", 4) == "ring-q");
  CHECK(canonical("ring-q4", 4) == "ring-q");
  CHECK(canonical("tp2xring-q2", 4) == "tp2xring-q2");
  CHECK(canonical("tp2xring-q", 4) == "tp2xring-q2");
  CHECK(canonical("ring-q2xtp2", 4) == "ring-q2xtp2");
  CHECK(canonical("ulysses2xring2", 4) == "ulysses2xring2");
  CHECK(canonical("tp2xall-gather2", 4) == "tp2xall-gather2");
  CHECK(ParallelConfig{1, 4, &pass_q()}.resolved(4).canonical_name() == "ring-q");
  CHECK(parse_parallel_config("ring-q").cp_comm == &pass_q());
  CHECK(parse_parallel_config("ring").cp_comm == &cp_scheme("p2p"));
  // A nested scheme with a group of one is its other part, by the scheme's own fields.
  CHECK(parse_parallel_config("ulysses1xring4").resolved(4).cp_comm == &cp_scheme("p2p"));
  CHECK(parse_parallel_config("ulysses1xring4").resolved(4).canonical_name() == "ring");
  CHECK(parse_parallel_config("ulysses4xring1").resolved(4).cp_comm == &cp_scheme("a2a"));
  CHECK(parse_parallel_config("ulysses4xring1").resolved(4).canonical_name() == "ulysses");
  CHECK(ParallelConfig{2, 1, &pass_q()}.resolved(2).cp_comm == &no_cp_scheme());  // C 1 under TP: TP alone
  // The pass-Q ring nests in nothing: Ulysses around it is no configuration.
  CHECK_THAT(config_error([] { parse_parallel_config("ulysses2xring-q2"); }), Catch::Contains("groups out of order or repeated"));
  // Two CP groups that no scheme combines say so and name the combination that exists (the
  // message said only "out of order or repeated", which ulysses2xring-q2 is neither).
  for (const char* uncombined : {"ulysses2xring-q2", "ring2xring-q2", "all-gather2xring2", "ring2xulysses2", "tp2xulysses2xring-q2"})
    CHECK_THAT(config_error([&] { parse_parallel_config(uncombined); }),
               Catch::Contains("context-parallel groups that no scheme combines; only ulysses2xring2 does"));
  // TP twice is out of order, nothing about combining.
  CHECK_THAT(config_error([] { parse_parallel_config("tp2xring-q2xtp2"); }),
             Catch::Contains("groups out of order or repeated (names:"));
  CHECK_THAT(config_error([] { parse_parallel_config("ring-qq"); }), Catch::Contains("is not a group"));
  // The grammar's error lists the short names from the registry (it listed "ring, ulysses,
  // all-gather" by hand, without ring-q).
  const std::string grammar = config_error([] { parse_parallel_config("bogus4"); });
  CHECK_THAT(grammar, Catch::Contains("(names: tp, tp-sp, ring, all-gather, ulysses, ring-q, or degrees"));
  for (const CpScheme* s : cp_kinds())
    if (!s->nested()) CHECK_THAT(grammar, Catch::Contains(std::string(", ") + s->strategy[0] + ","));
}

TEST_CASE("each scheme's run on a small layer sends, saves, holds and computes what its formulas say", "[cp_scheme]") {
  // GQA (Hkv 2 < H 4) and s 45, which every shard count here pads (to 48): the formulas count
  // the padded slots, the pass-Q ring's bytes follow H, not Hkv.
  int runs = 0;
  std::set<const CpScheme*> seen;
  for (int64_t Hkv : {2, 4}) {
    const LayerConfig c = small_layer(Hkv);
    const ReferenceRun ref = reference64(c);
    for (const CpScheme* s : cp_schemes())
      for (const ParallelConfig& par : forms_at_four(s)) {
        const int P = par.tp * par.cp;
        const RunPlan plan = resolve(par, c, P);
        INFO(plan.name << " (" << s->name << ") Hkv " << Hkv << " S " << plan.packing->S);
        REQUIRE(plan.par.cp_comm == s);
        CHECK(plan.packing->S == (s->none() ? 46 : 48));  // T 2 alone pads to 2, the rest to 8
        MemoryTracker tracker;
        const std::vector<RunRecord> res = testing::run_and_check(plan, ref, tracker);
        // The formulas are the scheme's own: its part of the bytes is what it says.
        if (s == &pass_q() && par.tp == 1) {
          // Counted by hand: R - 1 hops forward each of q, then q, out and lse, then out and
          // lse home: (R - 1)(2 q + l), q = b n H d, l = b H n elements of 4 bytes, n = S / R.
          const int64_t R = 4, n = 48 / R, q = c.b * n * c.H * c.d() * 4, l = c.b * c.H * n * 4;
          for (int r = 0; r < P; ++r) CHECK(res[size_t(r)].forward.bytes_sent == (R - 1) * (2 * q + l));
        }
        seen.insert(s);
        ++runs;
      }
  }
  CHECK(seen.size() == cp_schemes().size());
  CHECK(runs == 2 * (1 + 2 + 2 + 2 + 1 + 2));
}

TEST_CASE("the pass-Q ring's forward sends the K/V ring's bytes and the lse's at Hq = Hkv, from the runs", "[cp_scheme]") {
  // With Hkv = H a hop of the pass-Q ring carries q and, coming back, out and lse: 2 H d + H
  // elements a token where the K/V ring's carries K and V, 2 Hkv d. The layer's other forward
  // bytes (TP's collectives at T 2) are alike: the difference is the lse's, (R - 1) b H_t n.
  for (auto [T, C] : {std::pair{1, 4}, {2, 2}, {1, 2}}) {
    const LayerConfig c = small_layer(4, 48);
    const int P = T * C;
    const RunPlan kv = resolve({T, C, &cp_scheme("p2p")}, c, P), q = resolve({T, C, &pass_q()}, c, P);
    REQUIRE(kv.packing->S == q.packing->S);
    MemoryTracker tracker;
    const std::vector<RunRecord> kv_runs = run_local_ranks(kv, DType::f32, tracker);
    const std::vector<RunRecord> q_runs = run_local_ranks(q, DType::f32, tracker);
    const int64_t n = q.packing->S / C, H_t = c.H / T, lse = (C - 1) * c.b * H_t * n * 4;
    for (int r = 0; r < P; ++r) {
      INFO("T " << T << " C " << C << " rank " << r);
      CHECK(q_runs[size_t(r)].forward.bytes_sent - kv_runs[size_t(r)].forward.bytes_sent == lse);
      CHECK(parallel_comm_bytes(q, r, DType::f32).forward - parallel_comm_bytes(kv, r, DType::f32).forward == lse);
      CHECK(q_runs[size_t(r)].forward.bytes_sent == parallel_comm_bytes(q, r, DType::f32).forward);
    }
  }
}

TEST_CASE("each rank's trace records its scheme's tile-map kind, carried through the file", "[cp_scheme]") {
  const LayerConfig c = small_layer(2, 48);
  const std::map<std::string, std::string> want = {{"ring-q", trace::kTileMapRingSteps}, {"ring", trace::kTileMapRingSteps},
                                                   {"ulysses", trace::kTileMapEveryRank}, {"all-gather", ""},
                                                   {"tp2xring-q2", ""}, {"ulysses2xring2", ""}};
  for (const auto& [name, kind] : want) {
    INFO(name);
    MemoryTracker tracker;
    const RunPlan plan = resolve(parse_parallel_config(name), c, 4);
    const trace::TraceData t = traced(plan, tracker);
    REQUIRE(t.ranks.size() == 4);
    for (const trace::RankTrace& r : t.ranks) CHECK(r.tile_map == kind);
    // Written beside each process in otherData, and only where there is one.
    const nlohmann::json file = trace::to_chrome_json(t);
    for (const nlohmann::json& p : file["otherData"]["processes"]) {
      if (kind.empty()) CHECK_FALSE(p.contains("tile_map"));
      else CHECK(p.value("tile_map", "") == kind);
    }
  }
}

TEST_CASE("the pass-Q ring's tile map: every visible tile once, by its key block's owner, at (key - query) mod R",
          "[cp_scheme]") {
  // Ring step i on rank r holds the queries of rank (r - i) mod R against its own keys
  // (ring_q_attention.h): the owner of the key block computes the tile, at step
  // (owner(k) - owner(q)) mod R; the K/V ring's map (test_viewer) has the query owner instead.
  for (Layout layout : {Layout::contiguous, Layout::zigzag, Layout::striped}) {
    INFO(to_string(layout));
    const RunPlan plan = ring_q_plan(layout);
    MemoryTracker tracker;
    const trace::TraceData t = traced(plan, tracker);
    const auto m = trace::tile_map(t, "ring-q");
    REQUIRE(m);
    CHECK_FALSE(m->every_rank);
    CHECK(m->layout == to_string(layout));
    const int P = 4;
    REQUIRE(m->blocks == (layout == Layout::zigzag ? 2 * P : P));
    // The blocks (the layout's chunks: zigzag's two a rank, which may touch) by first slot, each
    // with the rank that holds it: from the layout.
    std::map<int64_t, int> owner_of_first;
    for (int r = 0; r < P; ++r)
      for (const Run& run : plan.ring->runs(r))
        for (const Run& chunk : plan.ring->chunks_of(run)) owner_of_first[chunk.first] = r;
    REQUIRE(int(owner_of_first.size()) == m->blocks);
    std::vector<int> owner;
    for (const auto& [first, r] : owner_of_first) owner.push_back(r);
    int computed = 0;
    for (int q = 0; q < m->blocks; ++q)
      for (int k = 0; k < m->blocks; ++k) {
        INFO("tile q " << q << " k " << k);
        const trace::Tile& tile = m->at(q, k);
        // Causal: a key block after the query block is hidden, but in striped, where every
        // block spans the whole sequence.
        CHECK(tile.masked == (layout != Layout::striped && k > q));
        CHECK(tile.rank == (tile.masked ? -1 : owner[size_t(k)]));
        CHECK(tile.step == (tile.masked ? 0 : (owner[size_t(k)] - owner[size_t(q)] + P) % P));
        computed += !tile.masked;
      }
    // Each computed tile was recorded by exactly one step of one rank: count the pairs.
    int recorded = 0;
    for (const trace::RankTrace& r : t.ranks)
      for (const trace::Event& e : r.events)
        if (e.kind == trace::Kind::ring_step && e.phase == "forward") recorded += int(e.tiles.size());
    CHECK(recorded == computed);
    const auto all = trace::tiles_done(t, *m, INT64_MAX);
    CHECK(std::count(all.begin(), all.end(), true) == computed);
  }
}

TEST_CASE("a trace's tile_map is checked: an unknown kind is refused naming the field, none gives no map", "[cp_scheme]") {
  MemoryTracker tracker;
  const trace::TraceData t = traced(ring_q_plan(Layout::zigzag), tracker);
  const nlohmann::json file = trace::to_chrome_json(t);
  REQUIRE(trace::tile_map(trace::parse_trace(file.dump()), "ring-q"));
  {  // An unknown kind: the reader names the process and the field.
    nlohmann::json bad = file;
    bad["otherData"]["processes"][2]["tile_map"] = "bogus";
    CHECK_THROWS_WITH(trace::parse_trace(bad.dump(), "hand.json"),
                      Catch::Contains("hand.json: otherData.processes[2]") &&
                          Catch::Contains("tile_map must be \"ring_steps\" or \"every_rank\", got \"bogus\""));
    bad["otherData"]["processes"][2]["tile_map"] = 3;
    CHECK_THROWS_WITH(trace::parse_trace(bad.dump(), "hand.json"), Catch::Contains("tile_map"));
  }
  {  // A process without one (a trace of before, or another tool's): no map, as before.
    nlohmann::json old = file;
    for (nlohmann::json& p : old["otherData"]["processes"]) p.erase("tile_map");
    const trace::TraceData read = trace::parse_trace(old.dump());
    for (const trace::RankTrace& r : read.ranks) CHECK(r.tile_map.empty());
    CHECK_FALSE(trace::tile_map(read, "ring-q"));
  }
  {  // The kind, not the label, decides: a ring-q run labelled "ulysses" still draws its ring steps.
    trace::TraceData relabelled = t;
    for (trace::RankTrace& r : relabelled.ranks) r.strategy = "ulysses";
    const auto m = trace::tile_map(trace::parse_trace(trace::to_chrome_json(relabelled).dump()), "ulysses");
    REQUIRE(m);
    CHECK_FALSE(m->every_rank);
    CHECK(m->blocks == 8);
  }
}

// The MPI communicator: the same collective checks as the local one (tests/comm_checks.h).
#include <catch2/catch.hpp>

#include "comm_checks.h"

TEST_CASE("MPI collectives match the serial computation", "[mpi]") { comm_checks::all(ringside::mpi_world()); }

TEST_CASE("MPI point-to-point and split", "[mpi]") { comm_checks::p2p_and_split(ringside::mpi_world()); }

#include <map>

#include "check/check.h"
#include "comm/trace_exchange.h"
#include "parallel/formulas.h"
#include "parallel/run_plan.h"
#include "reference64.h"
#include "run/runner.h"

namespace {

// This rank's run of the plan against the fp64 reference, with its saved bytes, bytes sent and
// attention FLOPs equal to the formulas.
void run_and_check(const ringside::RunPlan& plan, ringside::Communicator& world, ringside::Backend& be,
                   const ringside::ReferenceRun& ref) {
  using namespace ringside;
  MemoryTracker tracker;
  const RunRecord r = run_rank(plan, world, be, tracker, DType::f32);
  const auto [err, which] = worst_error(r, ref);
  INFO("worst " << which << " " << err);
  CHECK(err < kTolerance);
  CHECK(r.peak_saved == parallel_saved_bytes(plan, world.rank(), DType::f32));
  const CommBytes cb = parallel_comm_bytes(plan, world.rank(), DType::f32);
  CHECK(r.forward.bytes_sent == cb.forward);
  CHECK(r.backward.bytes_sent == cb.backward);
  CHECK(r.attention_flops == parallel_attention_flops(plan, world.rank()));
}

}  // namespace

TEST_CASE("MPI: every strategy and hybrid matches the fp64 reference, with its formulas", "[mpi]") {
  using namespace ringside;
  Communicator& world = mpi_world();
  const int P = world.size();
  std::map<std::string, int> ran;  // runs per strategy: every one of them must run
  for (int64_t Hkv : {8, 4, 1})
    for (int variant = 0; variant < 4; ++variant) {
      const bool causal = variant & 1, rope = variant & 2;
      LayerConfig c;
      c.b = 2, c.s = 48, c.h = 32, c.H = 8, c.Hkv = Hkv, c.f = 64, c.seed = 5;  // s: every P of 2 to 4
      c.causal = causal, c.rope = rope, c.dropout = variant == 3 ? 0.0 : 0.1;
      // The fp64 reference, on every rank (no communication).
      auto be = make_cpu_backend();
      const ReferenceRun ref = reference64(c);
      std::vector<ParallelConfig> all = default_strategies(P);  // at P 4: the hybrids tp2xring2, ulysses2xring2
      if (P == 4)
        for (const char* name : {"tp2xall-gather2", "tp2xulysses2", "ring2xtp2"}) all.push_back(parse_parallel_config(name));
      for (const ParallelConfig& named : all)
        for (Layout layout : {Layout::contiguous, Layout::zigzag, Layout::striped}) {
          const CpScheme* comm = named.cp_comm;  // layouts are for the ring and the all-gather
          if (!comm->token_layout && layout != Layout::contiguous) continue;
          ParallelConfig par = named;
          par.layout = layout;
          RunPlan plan;
          try {
            plan = resolve(par, c, P);
          } catch (const ConfigError&) {
            continue;  // the same on every rank
          }
          INFO(to_string(layout) << " " << par.name() << " P=" << P << " Hkv=" << Hkv << " causal=" << causal
                                 << " rope=" << rope << " p=" << c.dropout);
          run_and_check(plan, world, *be, ref);
          ++ran[par.name()];
        }
    }
  // P 2: tp-sp, ring, ulysses, all-gather; P 3: ring and all-gather (3 divides no head count); P 4: and 5 hybrids.
  CHECK(ran.size() == (P == 4 ? 9u : P == 3 ? 2u : 4u));
}

TEST_CASE("MPI: packed documents, a window and an s no P divides, every strategy and layout", "[mpi]") {
  using namespace ringside;
  Communicator& world = mpi_world();
  const int P = world.size();
  LayerConfig c;
  c.b = 2, c.s = 45, c.h = 32, c.H = 8, c.Hkv = 4, c.f = 64, c.seed = 5, c.dropout = 0.1;
  c.docs = {1, 2, 17, 25}, c.window = 6;
  auto be = make_cpu_backend();
  const ReferenceRun ref = reference64(c);
  int ran = 0;
  std::vector<ParallelConfig> all = default_strategies(P);
  if (P == 4) all.push_back(parse_parallel_config("tp2xall-gather2"));
  for (const ParallelConfig& named : all)
    for (Layout layout : kLayouts) {
      const CpScheme* comm = named.cp_comm;
      if (!comm->token_layout && layout != Layout::contiguous) continue;
      ParallelConfig par = named;
      par.layout = layout;
      RunPlan plan;
      try {
        plan = resolve(par, c, P);
      } catch (const ConfigError&) {
        continue;  // heads that do not split: the same on every rank
      }
      INFO(to_string(layout) << " " << par.name() << " P=" << P);
      run_and_check(plan, world, *be, ref);
      ++ran;
    }
  CHECK(ran >= (P == 1 ? 4 : 6));
}

TEST_CASE("MPI: the Llama layer (RMSNorm, SwiGLU, no bias) in every strategy, layout and recompute mode", "[mpi]") {
  using namespace ringside;
  Communicator& world = mpi_world();
  const int P = world.size();
  int ran = 0;
  for (int variant = 0; variant < 3; ++variant) {
    LayerConfig c;
    c.b = 2, c.s = 48, c.h = 32, c.H = 8, c.Hkv = 4, c.f = 48, c.seed = 9;
    c.norm = Norm::rmsnorm, c.mlp = Mlp::swiglu, c.bias = false;
    c.causal = variant != 1;
    if (variant == 2) c.docs = {5, 30, 13}, c.window = 7;
    const Recompute rc = variant == 0 ? Recompute::none : variant == 1 ? Recompute::selective : Recompute::full;
    auto be = make_cpu_backend();
    const ReferenceRun ref = reference64(c);
    std::vector<ParallelConfig> all = default_strategies(P);
    if (P == 4)
      for (const char* name : {"tp2xall-gather2", "tp2xulysses2", "ring2xtp2"}) all.push_back(parse_parallel_config(name));
    for (const ParallelConfig& named : all)
      for (Layout layout : kLayouts) {
        const CpScheme* comm = named.cp_comm;
        if (!comm->token_layout && layout != Layout::contiguous) continue;
        ParallelConfig par = named;
        par.layout = layout, par.recompute = rc;
        RunPlan plan;
        try {
          plan = resolve(par, c, P);
        } catch (const ConfigError&) {
          continue;  // the same on every rank
        }
        INFO(to_string(layout) << " " << par.name() << " P=" << P << " variant " << variant);
        run_and_check(plan, world, *be, ref);
        ++ran;
      }
  }
  CHECK(ran >= (P == 1 ? 3 : 3 * 4));
}

namespace {

// Rank r's trace for the gather test: every field of an event set to a value of r's own.
ringside::trace::RankTrace trace_of_rank(int r) {
  using namespace ringside::trace;
  RankTrace t;
  t.strategy = "ring", t.rank = r, t.clock_offset_ns = 11 * r, t.clock_uncertainty_ns = 3 + r;
  Event step;
  step.name = "ring step", step.kind = Kind::ring_step, step.ts_ns = 100 + r, step.dur_ns = 50, step.step = r;
  step.phase = "forward", step.sublayer = "attention", step.order = 4, step.end_order = 9;
  step.tiles = {{r, 8, 2, 0, 8, 1, false}, {8, 8, 1, 8 * r, 8, 3, true}};
  Event big = step;
  big.tiles.clear(), big.tiles_complete = false;  // a step of more pairs than kMaxTilePairs
  Event send;
  send.name = "send k", send.kind = Kind::p2p, send.stream = Stream::comm, send.direction = Direction::send;
  send.peer = (r + 1) % 4, send.bytes = 4096 + r, send.tag = 2, send.seq = r, send.flops = 0.5, send.detail = "k";
  Event wait = send;
  wait.name = "wait recv k", wait.kind = Kind::wait, wait.stream = Stream::compute, wait.direction = Direction::recv;
  Event gather;
  gather.name = "all_gather", gather.kind = Kind::all_gather, gather.collective = 7, gather.stream = Stream::comm;
  t.events = {step, big, send, wait, gather};
  t.memory = {{5, {1, 2, 3, 4, r}}};
  return t;
}

}  // namespace

TEST_CASE("MPI: rank 0 gathers every rank's trace whole: kinds, directions and the ring steps' tiles", "[mpi]") {
  using namespace ringside::trace;
  ringside::Communicator& world = ringside::mpi_world();
  const std::vector<RankTrace> all = gather_to_root(world, trace_of_rank(world.rank()));
  if (world.rank() != 0) {
    CHECK(all.empty());
    return;
  }
  REQUIRE(all.size() == size_t(world.size()));
  for (int r = 0; r < world.size(); ++r) {
    const RankTrace want = trace_of_rank(r), &got = all[r];
    CHECK(got.rank == r);
    CHECK(got.clock_offset_ns == want.clock_offset_ns);
    CHECK(got.clock_uncertainty_ns == want.clock_uncertainty_ns);
    REQUIRE(got.events.size() == want.events.size());
    for (size_t i = 0; i < want.events.size(); ++i) {
      const Event &a = want.events[i], &b = got.events[i];
      INFO("rank " << r << " event " << a.name);
      CHECK(b.kind == a.kind);
      CHECK(b.direction == a.direction);
      CHECK(b.stream == a.stream);
      CHECK(b.tiles == a.tiles);
      CHECK(b.tiles_complete == a.tiles_complete);
      CHECK(b.peer == a.peer);
      CHECK(b.bytes == a.bytes);
      CHECK(b.seq == a.seq);
      CHECK(b.collective == a.collective);
      CHECK(b.order == a.order);
      CHECK(b.detail == a.detail);
    }
    REQUIRE(got.memory.size() == 1);
    CHECK(got.memory[0].bytes == want.memory[0].bytes);
  }
}

// The MPI communicator: the same collective checks as the local one (tests/comm_checks.h).
#include <catch2/catch.hpp>

#include "comm_checks.h"

TEST_CASE("MPI collectives match the serial computation", "[mpi]") { comm_checks::all(ringside::mpi_world()); }

TEST_CASE("MPI point-to-point and split", "[mpi]") { comm_checks::p2p_and_split(ringside::mpi_world()); }

#include <map>

#include "check/check.h"
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
          const CpComm comm = named.cp_comm;  // layouts are for the ring and the all-gather
          if ((comm == CpComm::none || comm == CpComm::a2a) && layout != Layout::contiguous) continue;
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
      const CpComm comm = named.cp_comm;
      if ((comm == CpComm::none || comm == CpComm::a2a) && layout != Layout::contiguous) continue;
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

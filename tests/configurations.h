// The parallel configurations the tests sweep (for each (T, C), every cp_comm that fits), and
// the checks of a run of one against the fp64 reference and its formulas.
#pragma once
#include <catch2/catch.hpp>

#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "core/error.h"
#include "parallel/formulas.h"
#include "parallel/groups.h"
#include "parallel/run_plan.h"
#include "run/runner.h"
#include "reference64.h"

namespace ringside::testing {

/// For each (T, C) of `degrees`: TP alone when C = 1 (with SP, and for T > 1 plain TP too);
/// otherwise p2p, all_gather and a2a, and a2a+p2p with every all-to-all size U that divides C
/// (1 < U < C).
inline std::vector<ParallelConfig> configurations(const std::vector<std::pair<int, int>>& degrees) {
  std::vector<ParallelConfig> all;
  for (auto [T, C] : degrees) {
    if (C == 1) {
      all.push_back({T, 1, &no_cp_scheme()});
      if (T > 1) {
        ParallelConfig plain{T, 1, &no_cp_scheme()};
        plain.sequence_parallel = false;
        all.push_back(plain);
      }
      continue;
    }
    for (const CpScheme* scheme : cp_schemes()) {  // every registered scheme
      if (scheme->none()) continue;
      if (!scheme->nested()) all.push_back({T, C, scheme});
      else
        for (int U = 2; U < C; ++U)
          if (C % U == 0) all.push_back({T, C, scheme, U});
    }
  }
  return all;
}

/// Why the configuration refuses the layer on P ranks (resolve's ConfigError), or nothing when
/// it runs it.
inline std::optional<std::string> refusal(const ParallelConfig& par, const LayerConfig& c, int P) {
  try {
    resolve(par, c, P);
  } catch (const ConfigError& e) {
    return e.what();
  }
  return std::nullopt;
}

/// Every rank's saved bytes, bytes sent, forward transfer-buffer peak and attention FLOPs
/// equal to the formulas of the plan (Catch CHECKs, each naming the rank).
inline void check_rank_formulas(const RunPlan& plan, const std::vector<RunRecord>& res) {
  for (int r = 0; r < plan.P; ++r) {
    INFO("rank " << r);
    CHECK(res[size_t(r)].peak_saved == parallel_saved_bytes(plan, r, DType::f32));
    const CommBytes cb = parallel_comm_bytes(plan, r, DType::f32);
    CHECK(res[size_t(r)].forward.bytes_sent == cb.forward);
    CHECK(res[size_t(r)].backward.bytes_sent == cb.backward);
    CHECK(res[size_t(r)].peak_comm_forward == parallel_forward_comm_peak(plan, r, DType::f32));
    CHECK(res[size_t(r)].attention_flops == parallel_attention_flops(plan, r));
  }
}

/// The plan run on local ranks in fp32: rank 0's gathered results against the fp64 reference
/// under kTolerance, and every rank against its formulas (Catch CHECKs). `tracker` must outlive
/// the records it returns.
inline std::vector<RunRecord> run_and_check(const RunPlan& plan, const ReferenceRun& ref, MemoryTracker& tracker) {
  std::vector<RunRecord> res = run_local_ranks(plan, DType::f32, tracker);
  const auto [err, which] = worst_error(res[0], ref);
  INFO("worst " << which << " " << err);
  CHECK(err < kTolerance);
  check_rank_formulas(plan, res);
  return res;
}

}  // namespace ringside::testing

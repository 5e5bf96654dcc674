// The parallel configurations the tests sweep: for each (T, C), every cp_comm that fits.
#pragma once
#include <utility>
#include <vector>

#include "parallel/groups.h"

namespace ringside::testing {

/// For each (T, C) of `degrees`: TP alone when C = 1; otherwise p2p, all_gather and a2a, and
/// a2a+p2p with every all-to-all size U that divides C (1 < U < C).
inline std::vector<ParallelConfig> configurations(const std::vector<std::pair<int, int>>& degrees) {
  std::vector<ParallelConfig> all;
  for (auto [T, C] : degrees) {
    if (C == 1) {
      all.push_back({T, 1, CpComm::none});
      continue;
    }
    for (CpComm comm : {CpComm::p2p, CpComm::all_gather, CpComm::a2a}) all.push_back({T, C, comm});
    for (int U = 2; U < C; ++U)
      if (C % U == 0) all.push_back({T, C, CpComm::a2a_p2p, U});
  }
  return all;
}

}  // namespace ringside::testing

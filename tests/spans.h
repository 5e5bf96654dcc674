// Spans for tests: a group of GPUs strided from GPU 0 on a profile's topology.
#pragma once
#include <algorithm>
#include <vector>

#include "model/model.h"

namespace ringside::testing {

/// The span of `size` GPUs `stride` apart from GPU 0, on hw's tiers filled by a job of `world`
/// GPUs (at least the group's extent).
inline model::Span strided(const model::Hardware& hw, int size, int stride, int world = 0) {
  std::vector<int> members;
  for (int i = 0; i < size; ++i) members.push_back(i * stride);
  return hw.topology(std::max(world, (size - 1) * stride + 1)).span(members);
}

}  // namespace ringside::testing

// The fp64 reference run every strategy test compares against, and the worst error of a
// strategy's gathered results.
#pragma once
#include <string>
#include <utility>

#include "check/check.h"
#include "check/reference_run.h"
#include "kernels/philox.h"
#include "layer/reference.h"
#include "run/runner.h"

namespace ringside {

/// Forward and backward of the fp64 reference on cfg's seeded inputs.
inline ReferenceRun reference64(const LayerConfig& c) { return run_reference(c, DType::f64); }

/// The largest relative error over out, dx and every gradient, with the tensor's name.
inline std::pair<double, std::string> worst_error(const RunRecord& r, const ReferenceRun& ref) {
  const auto worst = errors_against(r.out, r.dx, r.grads, ref).worst;
  return {worst.second, worst.first};
}

}  // namespace ringside

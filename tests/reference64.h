// The fp64 reference run every strategy test compares against, and the worst error of a
// strategy's gathered results.
#pragma once
#include <string>
#include <utility>

#include "kernels/philox.h"
#include "layer/reference.h"
#include "parallel/harness.h"

namespace ringside {

struct Reference {
  Tensor out, dx;
  LayerWeights grads;
};

/// Forward and backward of the fp64 reference on cfg's seeded inputs.
inline Reference reference64(const LayerConfig& c) {
  auto be = make_cpu_backend();
  const LayerWeights w = init_weights(c, DType::f64, {});
  const Tensor x = random_input(c, static_cast<uint32_t>(RngSite::input_x), DType::f64, {});
  const Tensor dout = random_input(c, static_cast<uint32_t>(RngSite::input_dout), DType::f64, {});
  ForwardResult f = reference_forward<double>(c, w, x, *be);
  Gradients g = reference_backward<double>(c, w, f.saved, dout, *be);
  return {f.out, g.dx, g.grads};
}

/// The largest relative error over out, dx and every gradient, with the tensor's name.
inline std::pair<double, std::string> worst_error(const RankResult& r, const Reference& ref) {
  std::pair<double, std::string> worst{relative_error(r.out, ref.out), "out"};
  auto consider = [&](double e, const std::string& n) {
    if (!(e <= worst.first)) worst = {e, n};
  };
  consider(relative_error(r.dx, ref.dx), "dx");
  auto mine = r.grads.named();
  auto theirs = ref.grads.named();
  for (size_t i = 0; i < mine.size(); ++i) consider(relative_error(*mine[i].second, *theirs[i].second), mine[i].first);
  return worst;
}

}  // namespace ringside

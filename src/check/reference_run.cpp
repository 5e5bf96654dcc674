#include "check/reference_run.h"

#include <chrono>

#include "device/backend.h"
#include "kernels/philox.h"
#include "layer/reference.h"

namespace ringside {

namespace {

template <class T> ReferenceRun run(const LayerConfig& cfg, Recompute recompute) {
  ReferenceRun r;
  r.tracker = std::make_shared<MemoryTracker>();
  auto be = make_cpu_backend();
  const AllocTag tag{0, MemCategory::workspace, r.tracker.get()};
  constexpr DType dt = dtype_of<T>();
  const LayerWeights w = init_weights(cfg, dt, tag);
  const Tensor x = random_input(cfg, static_cast<uint32_t>(RngSite::input_x), dt, tag);
  const Tensor dout = random_input(cfg, static_cast<uint32_t>(RngSite::input_dout), dt, tag);
  using clock = std::chrono::steady_clock;
  const auto t0 = clock::now();
  ForwardResult f = reference_forward<T>(cfg, w, x, *be, tag, recompute);
  const auto t1 = clock::now();
  reference_recompute<T>(cfg, w, f.saved, *be, tag, recompute);
  Gradients g = reference_backward<T>(cfg, w, f.saved, dout, *be, tag);
  const auto t2 = clock::now();
  r.forward_s = std::chrono::duration<double>(t1 - t0).count();
  r.backward_s = std::chrono::duration<double>(t2 - t1).count();
  r.peak_saved = r.tracker->peak(0, MemCategory::activations);
  r.q_shape = f.saved.q.shape(), r.k_shape = f.saved.k.shape(), r.lse_shape = f.saved.lse.shape(), r.u_shape = f.saved.u.shape();
  r.out = std::move(f.out), r.dx = std::move(g.dx), r.grads = std::move(g.grads);
  return r;
}

}  // namespace

ReferenceRun run_reference(const LayerConfig& cfg, DType dt, Recompute recompute) {
  return dt == DType::f64 ? run<double>(cfg, recompute) : run<float>(cfg, recompute);
}

}  // namespace ringside

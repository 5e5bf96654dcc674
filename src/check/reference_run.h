// The single-device reference layer, forward and backward, as every check runs it: the yardstick
// that compare, run, the reference command, the lessons and the tests hold each run against.
#pragma once
#include <memory>

#include "core/memory_tracker.h"
#include "core/tensor.h"
#include "layer/config.h"
#include "layer/weights.h"

namespace ringside {

struct ReferenceRun {
  std::shared_ptr<MemoryTracker> tracker;  ///< counts the tensors below (and outlives them)
  Tensor out, dx;      ///< [b, s, h]
  LayerWeights grads;  ///< every parameter's gradient, full shapes
  double forward_s = 0, backward_s = 0;  ///< wall clock (they vary)
  int64_t peak_saved = 0;  ///< peak bytes of the activations saved for the backward (layer/reference.h's formula)
  Shape q_shape, k_shape, lse_shape, u_shape;  ///< of the saved activations, released after the backward
};

/// The reference (layer/reference.h) on the inputs and weights drawn from cfg.seed, in dt (f64
/// or f32), on the CPU backend, recomputing as `recompute` says (the results are the same bits
/// in every mode; peak_saved is saved_activation_bytes of the mode, and backward_s includes the
/// recomputation). Throws ConfigError for an invalid cfg.
ReferenceRun run_reference(const LayerConfig& cfg, DType dt, Recompute recompute = Recompute::none);

}  // namespace ringside

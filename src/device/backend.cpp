#include "device/backend.h"

#include <memory>

#include "core/cuda_module.h"

namespace ringside {

std::unique_ptr<Backend> make_cuda_backend() {
#if RINGSIDE_HAVE_CUDA
  return std::unique_ptr<Backend>(cuda_module::entry<Backend*()>("ringside_make_cuda_backend")());
#else
  throw Error("--device cuda: this build has no CUDA backend (configure with nvcc present, RINGSIDE_CUDA=ON)");
#endif
}

std::unique_ptr<Backend> make_backend(Device device) {
  return device == Device::cuda ? make_cuda_backend() : make_cpu_backend();
}

namespace {

// The dry run's backend: every op is accepted and does nothing. A traced backend around it
// still records each op's kind, FLOPs and bytes from the shapes: the schedule without the math.
class DryBackend final : public Backend {
 public:
  Device device() const override { return Device::cpu; }
  std::string describe() const override { return "dry run (no math: ops record their FLOPs and bytes)"; }
  Tensor zeros(const Shape& shape, DType dtype, AllocTag tag) const override { return Tensor::zeros(shape, dtype, tag); }
  void matmul(const Tensor&, bool, const Tensor&, bool, Tensor&, double, double) override {}
  void add_bias(Tensor&, const Tensor&) override {}
  void bias_grad(const Tensor&, Tensor&) override {}
  void add(const Tensor&, const Tensor&, Tensor&) override {}
  void layernorm_forward(const Tensor&, const Tensor&, const Tensor&, double, Tensor&, Tensor&, Tensor&) override {}
  void layernorm_backward(const Tensor&, const Tensor&, const Tensor&, const Tensor&, const Tensor&, Tensor&, Tensor&,
                          Tensor&) override {}
  void rmsnorm_forward(const Tensor&, const Tensor&, double, Tensor&, Tensor&) override {}
  void rmsnorm_backward(const Tensor&, const Tensor&, const Tensor&, const Tensor&, Tensor&, Tensor&) override {}
  void swiglu_forward(const Tensor&, Tensor&) override {}
  void swiglu_backward(const Tensor&, const Tensor&, Tensor&) override {}
  void gelu_forward(const Tensor&, Tensor&) override {}
  void gelu_backward(const Tensor&, const Tensor&, Tensor&) override {}
  void rope_forward(Tensor&, const std::vector<int64_t>&, double) override {}
  void rope_backward(Tensor&, const std::vector<int64_t>&, double) override {}
  void dropout_forward(const Tensor&, Tensor&, const std::vector<int64_t>&, int64_t, double, uint64_t, uint32_t) override {}
  void dropout_mask(Tensor&, const std::vector<int64_t>&, int64_t, double, uint64_t, uint32_t) override {}
  void split_qkv(const Tensor&, Tensor&, Tensor&, Tensor&) override {}
  void merge_qkv(const Tensor&, const Tensor&, const Tensor&, Tensor&) override {}
  void attention_forward(const AttentionParams&, const Tensor&, const Tensor&, const Tensor&, Tensor&, Tensor&) override {}
  void attention_backward(const AttentionParams&, const Tensor&, const Tensor&, const Tensor&, const Tensor&, const Tensor&,
                          const Tensor&, Tensor&, Tensor&, Tensor&) override {}
  void lse_merge(Tensor&, Tensor&, const Tensor&, const Tensor&) override {}
};

}  // namespace

std::unique_ptr<Backend> make_dry_backend() { return std::make_unique<DryBackend>(); }

}  // namespace ringside

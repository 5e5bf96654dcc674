// The CUDA kernels run through the CPU emulation of kernels/cuda/compat.h against the CPU
// kernels: their indexing, tiling, masking and reductions are checked on every machine, GPU
// or not. (tests/test_cuda.cpp runs the same cases on a GPU.)
#include <memory>

#include "cuda_kernel_cases.h"
#include "kernels/cuda/kernels.cu"  // compiled here as C++, against the emulation

namespace {

// Host memory stands in for device memory; launches complete before they return.
struct HostMem {
  std::vector<std::unique_ptr<float[]>> floats;
  std::vector<std::unique_ptr<int64_t[]>> ints;
  float* put(const std::vector<float>& v) {
    floats.emplace_back(new float[v.size() + 1]);
    std::copy(v.begin(), v.end(), floats.back().get());
    return floats.back().get();
  }
  int64_t* put(const std::vector<int64_t>& v) {
    ints.emplace_back(new int64_t[v.size() + 1]);
    std::copy(v.begin(), v.end(), ints.back().get());
    return ints.back().get();
  }
  std::vector<float> get(const float* p, size_t n) { return std::vector<float>(p, p + n); }
  void* stream() { return nullptr; }
};

}  // namespace

// The kernel cases of cuda_kernel_cases.h, on host memory.
template <class Case> void on_host(Case run_case) {
  HostMem m;
  run_case(m);
}

TEST_CASE("cuda kernels (emulated): elementwise, bias, GeLU, fill", "[cuda-emulated]") {
  on_host(cuda_cases::elementwise<HostMem>);
}
TEST_CASE("cuda kernels (emulated): LayerNorm forward and backward", "[cuda-emulated]") {
  on_host(cuda_cases::layernorm<HostMem>);
}
TEST_CASE("cuda kernels (emulated): RMSNorm and SwiGLU forward and backward", "[cuda-emulated]") {
  on_host(cuda_cases::rmsnorm_swiglu<HostMem>);
}
TEST_CASE("cuda kernels (emulated): RoPE, dropout bit for bit, fused QKV", "[cuda-emulated]") {
  on_host(cuda_cases::rope_dropout_qkv<HostMem>);
}
TEST_CASE("cuda kernels (emulated): FlashAttention-2 forward and backward", "[cuda-emulated]") {
  on_host(cuda_cases::attention<HostMem>);
}
TEST_CASE("cuda kernels (emulated): LSE merge", "[cuda-emulated]") { on_host(cuda_cases::lse_merge<HostMem>); }

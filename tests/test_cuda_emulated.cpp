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

TEST_CASE("cuda kernels (emulated): elementwise, bias, GeLU, fill", "[cuda-emulated]") {
  HostMem m;
  cuda_cases::elementwise(m);
}
TEST_CASE("cuda kernels (emulated): LayerNorm forward and backward", "[cuda-emulated]") {
  HostMem m;
  cuda_cases::layernorm(m);
}
TEST_CASE("cuda kernels (emulated): RoPE, dropout bit for bit, fused QKV", "[cuda-emulated]") {
  HostMem m;
  cuda_cases::rope_dropout_qkv(m);
}
TEST_CASE("cuda kernels (emulated): FlashAttention-2 forward and backward", "[cuda-emulated]") {
  HostMem m;
  cuda_cases::attention(m);
}
TEST_CASE("cuda kernels (emulated): LSE merge", "[cuda-emulated]") {
  HostMem m;
  cuda_cases::lse_merge(m);
}

// What kernels/cuda/kernels.cu needs from CUDA, twice: the real thing under nvcc, and a small
// CPU emulation of the execution model under a C++ compiler, so that the kernels' indexing,
// tiling and masking are tested against the CPU kernels on machines without a GPU (CI).
//
// The emulation runs a launch's blocks one after another, and a block's threads as real
// threads that meet at __syncthreads() (a std::barrier). __shared__ variables become function
// statics: one copy, which is right while one block runs at a time. It covers what the kernels
// use and no more: no warp intrinsics (the kernels reduce through shared memory), atomicAdd on
// float, and the math functions below. It checks logic, not speed or races between blocks.
#pragma once
#include <cstdint>

#if defined(__CUDACC__)

#include <cuda_runtime.h>
#include <stdexcept>
#include <string>
// A launch that cannot start (a bad configuration, too much shared memory) fails at once and
// quietly: it is only reported by the next cudaGetLastError. Every launch asks at once.
inline void rs_check_launch(const char* kernel) {
  const cudaError_t e = cudaGetLastError();
  if (e != cudaSuccess) throw std::runtime_error(std::string("CUDA: launching ") + kernel + " failed: " + cudaGetErrorString(e));
}
#define RS_LAUNCH(kernel, grid, block, smem, stream, ...)                                  \
  do {                                                                                     \
    kernel<<<(grid), (block), (smem), static_cast<cudaStream_t>(stream)>>>(__VA_ARGS__);  \
    rs_check_launch(#kernel);                                                              \
  } while (0)
#define RS_DYNAMIC_SMEM(T, name)               \
  extern __shared__ unsigned char rs_smem[];   \
  T* name = reinterpret_cast<T*>(rs_smem)
/// Lets `kernel` use more than the default 48 KiB of dynamic shared memory.
#define RS_ALLOW_SMEM(kernel, bytes) \
  cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(bytes))
#define RS_UNROLL _Pragma("unroll")

#else  // ---------------------------------------------------------------- CPU emulation

#include <algorithm>
#include <atomic>
#include <barrier>
#include <cmath>
#include <limits>
#include <math.h>
#include <thread>
#include <vector>

struct dim3 {
  unsigned x = 1, y = 1, z = 1;
  constexpr dim3(unsigned x_ = 1, unsigned y_ = 1, unsigned z_ = 1) : x(x_), y(y_), z(z_) {}
};

namespace rs_emu {
inline thread_local dim3 thread_idx, block_idx, block_dim, grid_dim;
inline thread_local unsigned char* dynamic_smem = nullptr;
inline thread_local std::barrier<>* block_barrier = nullptr;

// Runs kernel(args...) over grid x block, a block at a time, its threads concurrently.
template <class Kernel, class... Args>
void launch(Kernel kernel, dim3 grid, dim3 block, size_t smem_bytes, const Args&... args) {
  const unsigned nthreads = block.x * block.y * block.z;
  std::vector<unsigned char> smem(smem_bytes + 16);
  for (unsigned bz = 0; bz < grid.z; ++bz)
    for (unsigned by = 0; by < grid.y; ++by)
      for (unsigned bx = 0; bx < grid.x; ++bx) {
        std::barrier<> sync(static_cast<std::ptrdiff_t>(nthreads));
        std::vector<std::thread> threads;
        threads.reserve(nthreads);
        for (unsigned t = 0; t < nthreads; ++t)
          threads.emplace_back([&, t] {
            thread_idx = dim3(t % block.x, (t / block.x) % block.y, t / (block.x * block.y));
            block_idx = dim3(bx, by, bz), block_dim = block, grid_dim = grid;
            dynamic_smem = smem.data(), block_barrier = &sync;
            kernel(args...);
          });
        for (auto& th : threads) th.join();
      }
}
}  // namespace rs_emu

#define __global__
#define __device__
#define __host__
#define __forceinline__ inline
#define __shared__ static
#define threadIdx (::rs_emu::thread_idx)
#define blockIdx (::rs_emu::block_idx)
#define blockDim (::rs_emu::block_dim)
#define gridDim (::rs_emu::grid_dim)
inline void __syncthreads() { ::rs_emu::block_barrier->arrive_and_wait(); }
inline float atomicAdd(float* p, float v) { return std::atomic_ref<float>(*p).fetch_add(v); }
// erff, exp2f, expf, fmaxf, fminf, log1pf, sqrtf: the C library's, from <math.h>.
inline float rsqrtf(float x) { return 1.0f / std::sqrt(x); }
#ifndef INFINITY
#define INFINITY (std::numeric_limits<float>::infinity())
#endif
#define RS_LAUNCH(kernel, grid, block, smem, stream, ...) ::rs_emu::launch(kernel, grid, block, smem, __VA_ARGS__)
#define RS_DYNAMIC_SMEM(T, name) T* name = reinterpret_cast<T*>(::rs_emu::dynamic_smem)
#define RS_ALLOW_SMEM(kernel, bytes) ((void)(bytes))
#define RS_UNROLL

#endif

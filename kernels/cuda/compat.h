// What kernels/cuda/kernels.cu needs from CUDA, twice: the real thing under nvcc, and a small
// CPU emulation of the execution model under a C++ compiler, so that the kernels' indexing,
// tiling and masking are tested against the CPU kernels on machines without a GPU (CI).
//
// The emulation runs a launch's blocks one after another, and a block's threads as coroutines
// (ucontext) that all reach each __syncthreads() before any passes it. __shared__ variables
// become function statics: one copy, which is right while one block runs at a time. It covers what the kernels
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
  if (e != cudaSuccess)
    throw std::runtime_error(std::string("CUDA: launching ") + kernel + " failed: " + cudaGetErrorString(e));
}
#define RS_LAUNCH(kernel, grid, block, smem, stream, ...)                                  \
  do {                                                                                     \
    cudaGetLastError(); /* drop a stale non-error, e.g. an event query's "not ready" */    \
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

#include <ucontext.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <functional>
#include <limits>
#include <math.h>
#include <memory>
#include <mutex>
#include <vector>

struct dim3 {
  unsigned x = 1, y = 1, z = 1;
  constexpr dim3(unsigned x_ = 1, unsigned y_ = 1, unsigned z_ = 1) : x(x_), y(y_), z(z_) {}
};

namespace rs_emu {

// A block's threads are coroutines on the launching thread, run in rounds: each runs until its
// next __syncthreads (or its end) before any goes past it, which is the barrier's meaning.
struct Block {
  ucontext_t scheduler;
  std::vector<ucontext_t> threads;
  std::vector<char> finished;
  unsigned current = 0;
  const std::function<void()>* body = nullptr;
};
inline thread_local Block* block = nullptr;
inline thread_local dim3 thread_idx, block_idx, block_dim, grid_dim;
inline thread_local unsigned char* dynamic_smem = nullptr;

inline void sync() { swapcontext(&block->threads[block->current], &block->scheduler); }
inline void run_thread() {
  (*block->body)();
  block->finished[block->current] = 1;  // uc_link returns to the scheduler
}

// Runs the block's n threads to their end from fresh contexts on `stacks`. (getcontext is
// setjmp-like, so GCC fears for locals here; it returns once, so they are safe.)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wclobbered"
inline void run_block(Block& b, unsigned n, char* stacks, size_t stack_bytes) {
  b.finished.assign(n, 0);
  for (unsigned t = 0; t < n; ++t) {
    getcontext(&b.threads[t]);
    b.threads[t].uc_stack.ss_sp = stacks + t * stack_bytes;
    b.threads[t].uc_stack.ss_size = stack_bytes;
    b.threads[t].uc_link = &b.scheduler;
    makecontext(&b.threads[t], run_thread, 0);
  }
  for (unsigned left = n; left > 0;) {
    left = 0;
    for (unsigned t = 0; t < n; ++t) {
      if (b.finished[t]) continue;
      b.current = t;
      thread_idx = dim3(t % block_dim.x, (t / block_dim.x) % block_dim.y, t / (block_dim.x * block_dim.y));
      swapcontext(&b.scheduler, &b.threads[t]);
      left += !b.finished[t];
    }
  }
}
#pragma GCC diagnostic pop

template <class Kernel, class... Args>
void launch(Kernel kernel, dim3 grid, dim3 blk, size_t smem_bytes, const Args&... args) {
  // __shared__ variables are function statics, one copy: one launch at a time in the process.
  static std::mutex one_at_a_time;
  std::lock_guard lock(one_at_a_time);
  constexpr size_t kStack = 64 * 1024;
  const unsigned n = blk.x * blk.y * blk.z;
  std::vector<unsigned char> smem(smem_bytes + 16);
  std::unique_ptr<char[]> stacks(new char[kStack * n]);
  const std::function<void()> body = [&] { kernel(args...); };
  Block b;
  b.threads.resize(n);
  b.body = &body;
  Block* const outer = block;
  block = &b;
  for (unsigned bz = 0; bz < grid.z; ++bz)
    for (unsigned by = 0; by < grid.y; ++by)
      for (unsigned bx = 0; bx < grid.x; ++bx) {
        block_idx = dim3(bx, by, bz), block_dim = blk, grid_dim = grid, dynamic_smem = smem.data();
        run_block(b, n, stacks.get(), kStack);
      }
  block = outer;
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
inline void __syncthreads() { ::rs_emu::sync(); }
inline float atomicAdd(float* p, float v) { return std::atomic_ref<float>(*p).fetch_add(v); }
// erff, exp2f, expf, fmaxf, fminf, log1pf, sqrtf: the C library's, from <math.h>.
inline float rsqrtf(float x) { return 1.0f / std::sqrt(x); }
#ifndef INFINITY
#define INFINITY (std::numeric_limits<float>::infinity())
#endif
#if defined(RS_EMU_STREAM_ENQUEUE)
// A runtime with streams of its own (tests/fake_cuda) runs the launch when the stream gets there.
#define RS_LAUNCH(kernel, grid, block, smem, stream, ...) \
  RS_EMU_STREAM_ENQUEUE(stream, [=] { ::rs_emu::launch(kernel, grid, block, smem, __VA_ARGS__); })
#else
#define RS_LAUNCH(kernel, grid, block, smem, stream, ...) ::rs_emu::launch(kernel, grid, block, smem, __VA_ARGS__)
#endif
#define RS_DYNAMIC_SMEM(T, name) T* name = reinterpret_cast<T*>(::rs_emu::dynamic_smem)
#define RS_ALLOW_SMEM(kernel, bytes) ((void)(bytes))
#define RS_UNROLL

#endif

// A fake CUDA runtime on the host: the subset of the runtime API that ringside's GPU code calls
// (src/device/gpu.cpp, the CUDA backend, the local communicator's device path, the CUDA-event
// timeline), so that code runs and is tested on machines without a GPU, CI among them. With the
// kernels run by the CPU emulation of kernels/cuda/compat.h, a "GPU rank" computes the whole
// layer through the same code paths as on a GPU.
//
// It is synchronous: every call has done its work when it returns (an event is nonetheless
// "not ready" at its first query, leaving that as the thread's last error, as CUDA does), so it checks the glue's
// logic (which memory is the device's, what is copied where, cuBLAS's column-major operands, how
// events become times), not the ordering of streams, which only a GPU can. "Device" memory is
// host memory that the fake remembers handing out (for cudaPointerGetAttributes).
#pragma once
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <iterator>
#include <map>
#include <mutex>

enum cudaError_t {
  cudaSuccess = 0,
  cudaErrorInvalidValue = 1,
  cudaErrorMemoryAllocation = 2,
  cudaErrorInvalidDevice = 101,
  cudaErrorNotReady = 600,
};
struct CUstream_st {};
struct CUevent_st {
  int64_t ns = 0;
  bool queried = false;  // a real event is usually "not ready" when first queried: so is this one
};
struct CUmemPool_st {};
typedef CUstream_st* cudaStream_t;
typedef CUevent_st* cudaEvent_t;
typedef CUmemPool_st* cudaMemPool_t;
enum cudaMemcpyKind { cudaMemcpyDefault = 4 };
enum cudaMemPoolAttr { cudaMemPoolReuseAllowInternalDependencies = 3, cudaMemPoolAttrReleaseThreshold = 4 };
enum cudaMemoryType { cudaMemoryTypeUnregistered = 0, cudaMemoryTypeHost = 1, cudaMemoryTypeDevice = 2, cudaMemoryTypeManaged = 3 };
struct cudaPointerAttributes {
  cudaMemoryType type;
  int device;
  void* devicePointer;
  void* hostPointer;
};
struct cudaDeviceProp {
  char name[256];
  int major, minor, multiProcessorCount;
  size_t totalGlobalMem;
};
enum cudaDeviceAttr { cudaDevAttrMaxPitch = 11, cudaDevAttrMaxSharedMemoryPerBlockOptin = 97 };
#define cudaStreamNonBlocking 0x01

namespace fake_cuda {
struct Registry {  // the "device" allocations: start -> bytes
  std::mutex mu;
  std::map<uintptr_t, size_t> blocks;
};
inline Registry& registry() {
  static Registry r;
  return r;
}
inline bool on_device(const void* p) {
  Registry& r = registry();
  std::lock_guard lock(r.mu);
  const uintptr_t a = reinterpret_cast<uintptr_t>(p);
  auto it = r.blocks.upper_bound(a);
  if (it == r.blocks.begin()) return false;
  --it;
  return a < it->first + it->second;
}
// The thread's last error, as the runtime keeps it: set by calls that fail, and by a query's
// "not ready"; cudaGetLastError returns and clears it.
inline thread_local cudaError_t last_error = cudaSuccess;
inline cudaError_t fail(cudaError_t e) {
  if (e != cudaSuccess) last_error = e;
  return e;
}
inline int64_t now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
}
}  // namespace fake_cuda

inline const char* cudaGetErrorString(cudaError_t e) { return e == cudaSuccess ? "no error" : "fake CUDA error"; }
inline cudaError_t cudaGetLastError() {
  const cudaError_t e = fake_cuda::last_error;
  fake_cuda::last_error = cudaSuccess;
  return e;
}
inline cudaError_t cudaGetDeviceCount(int* n) {
  *n = 1;
  return cudaSuccess;
}
inline cudaError_t cudaSetDevice(int d) { return fake_cuda::fail(d == 0 ? cudaSuccess : cudaErrorInvalidDevice); }
inline cudaError_t cudaGetDevice(int* d) {
  *d = 0;
  return cudaSuccess;
}
inline cudaError_t cudaDriverGetVersion(int* v) {
  *v = 13000;
  return cudaSuccess;
}
inline cudaError_t cudaGetDeviceProperties(cudaDeviceProp* p, int) {
  std::strcpy(p->name, "fake GPU (tests/fake_cuda: the host, kernels emulated)");
  p->major = 9, p->minor = 0, p->multiProcessorCount = 1, p->totalGlobalMem = size_t(16) << 30;
  return cudaSuccess;
}
inline cudaError_t cudaDeviceGetAttribute(int* v, cudaDeviceAttr a, int) {
  *v = a == cudaDevAttrMaxPitch ? 2147483647 : 232448;  // an H100's max pitch and opt-in shared memory per block
  return cudaSuccess;
}
inline cudaError_t cudaDeviceSynchronize() { return cudaSuccess; }
inline cudaError_t cudaMemPoolTrimTo(cudaMemPool_t, size_t) { return cudaSuccess; }
inline cudaError_t cudaDeviceGetDefaultMemPool(cudaMemPool_t* p, int) {
  static CUmemPool_st pool;
  *p = &pool;
  return cudaSuccess;
}
inline cudaError_t cudaMemPoolSetAttribute(cudaMemPool_t, cudaMemPoolAttr, void*) { return cudaSuccess; }
inline cudaError_t cudaMemGetInfo(size_t* free_b, size_t* total) {
  *free_b = *total = size_t(16) << 30;
  return cudaSuccess;
}
inline cudaError_t cudaStreamCreateWithFlags(cudaStream_t* s, unsigned) {
  *s = new CUstream_st;
  return cudaSuccess;
}
inline cudaError_t cudaStreamSynchronize(cudaStream_t) { return cudaSuccess; }
inline cudaError_t cudaStreamWaitEvent(cudaStream_t, cudaEvent_t, unsigned) { return cudaSuccess; }
inline cudaError_t cudaEventCreate(cudaEvent_t* e) {
  *e = new CUevent_st;
  return cudaSuccess;
}
inline cudaError_t cudaEventDestroy(cudaEvent_t e) {
  delete e;
  return cudaSuccess;
}
inline cudaError_t cudaEventRecord(cudaEvent_t e, cudaStream_t) {
  e->ns = fake_cuda::now_ns();  // the stream has done everything queued: it is here now
  return cudaSuccess;
}
inline cudaError_t cudaEventSynchronize(cudaEvent_t) { return cudaSuccess; }
inline cudaError_t cudaEventQuery(cudaEvent_t e) {
  if (!e->queried) {
    e->queried = true;
    return fake_cuda::fail(cudaErrorNotReady);
  }
  return cudaSuccess;
}
inline cudaError_t cudaEventElapsedTime(float* ms, cudaEvent_t a, cudaEvent_t b) {
  *ms = static_cast<float>(double(b->ns - a->ns) * 1e-6);
  return cudaSuccess;
}
inline cudaError_t cudaMallocAsync(void** p, size_t bytes, cudaStream_t) {
  *p = std::malloc(bytes);
  if (!*p) return fake_cuda::fail(cudaErrorMemoryAllocation);
  fake_cuda::Registry& r = fake_cuda::registry();
  std::lock_guard lock(r.mu);
  r.blocks[reinterpret_cast<uintptr_t>(*p)] = bytes;
  return cudaSuccess;
}
inline cudaError_t cudaFreeAsync(void* p, cudaStream_t) {
  fake_cuda::Registry& r = fake_cuda::registry();
  {
    std::lock_guard lock(r.mu);
    if (r.blocks.erase(reinterpret_cast<uintptr_t>(p)) == 0) return fake_cuda::fail(cudaErrorInvalidValue);
  }
  std::free(p);
  return cudaSuccess;
}
inline cudaError_t cudaPointerGetAttributes(cudaPointerAttributes* a, const void* p) {
  a->type = fake_cuda::on_device(p) ? cudaMemoryTypeDevice : cudaMemoryTypeUnregistered;
  return cudaSuccess;
}
inline cudaError_t cudaMemcpyAsync(void* dst, const void* src, size_t bytes, cudaMemcpyKind, cudaStream_t) {
  std::memmove(dst, src, bytes);
  return cudaSuccess;
}
inline cudaError_t cudaMemcpy2DAsync(void* dst, size_t dpitch, const void* src, size_t spitch, size_t width,
                                     size_t height, cudaMemcpyKind, cudaStream_t) {
  if (dpitch < width || spitch < width) return fake_cuda::fail(cudaErrorInvalidValue);  // as CUDA checks
  for (size_t r = 0; r < height; ++r)
    std::memmove(static_cast<char*>(dst) + r * dpitch, static_cast<const char*>(src) + r * spitch, width);
  return cudaSuccess;
}
inline cudaError_t cudaMemsetAsync(void* p, int v, size_t bytes, cudaStream_t) {
  std::memset(p, v, bytes);
  return cudaSuccess;
}

// A fake CUDA runtime on the host: the subset of the runtime API that ringside's GPU code calls
// (src/core/gpu.cpp, the CUDA backend, the local communicator's device path, the CUDA-event
// timeline), so that code runs and is tested on machines without a GPU, CI among them. With the
// kernels run by the CPU emulation of kernels/cuda/compat.h, a "GPU rank" computes the whole
// layer through the same code paths as on a GPU.
//
// Streams are lazy, to find missing orderings. Work queued on a stream (kernels, cuBLAS,
// device copies, memsets, frees, event records) runs only when something needs it: a host
// synchronisation (stream, event, a copy to or from host memory), or another stream's wait on
// one of its events. So each stream runs as late as CUDA would allow: work that reads data
// another stream writes, without an event between them, reads it stale, and the results are
// wrong. Streams run on whichever host thread forces them, one at a time.
//
// Also as CUDA: an event is "not ready" at its first query, which leaves that as the thread's
// last error; a copy from pageable host memory takes the data when it is called; a copy to it
// is complete when it returns. "Device" memory is host memory the fake remembers handing out
// (for cudaPointerGetAttributes).
#pragma once
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <vector>

enum cudaError_t {
  cudaSuccess = 0,
  cudaErrorInvalidValue = 1,
  cudaErrorMemoryAllocation = 2,
  cudaErrorInvalidDevice = 101,
  cudaErrorNotReady = 600,
};
struct CUstream_st {
  std::deque<std::function<void()>> queue;  // work not yet run, in order
  uint64_t enqueued = 0, executed = 0;      // work items so far, and how many have run
};
struct CUevent_st {
  CUstream_st* stream = nullptr;
  uint64_t at = 0;  // complete once `stream` has run this many items
  std::shared_ptr<int64_t> ns = std::make_shared<int64_t>(0);  // when it ran (shared with its queued record)
  bool queried = false;
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

// The engine: every stream, and one lock under which streams are queued to and run.
struct Engine {
  std::recursive_mutex mu;
  std::set<CUstream_st*> streams;
  CUstream_st legacy;  // the null stream
  std::map<uintptr_t, size_t> blocks;  // "device" allocations: start -> bytes
};
inline Engine& engine() {
  static Engine e;
  return e;
}
inline bool on_device(const void* p) {
  Engine& g = engine();
  std::lock_guard lock(g.mu);
  const uintptr_t a = reinterpret_cast<uintptr_t>(p);
  auto it = g.blocks.upper_bound(a);
  if (it == g.blocks.begin()) return false;
  --it;
  return a < it->first + it->second;
}
inline int64_t now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
}
inline CUstream_st* stream_or_legacy(cudaStream_t s) { return s ? s : &engine().legacy; }

/// Queues fn on stream s.
inline void enqueue(cudaStream_t s, std::function<void()> fn) {
  Engine& g = engine();
  std::lock_guard lock(g.mu);
  s = stream_or_legacy(s);
  s->queue.push_back(std::move(fn));
  ++s->enqueued;
}
/// Runs stream s until `upto` of its items have run (a wait inside runs the other stream first).
inline void run(CUstream_st* s, uint64_t upto) {
  Engine& g = engine();
  std::lock_guard lock(g.mu);
  while (s->executed < upto) {
    std::function<void()> fn = std::move(s->queue.front());
    s->queue.pop_front();
    fn();
    ++s->executed;
  }
}
inline void run_all(CUstream_st* s) {
  std::lock_guard lock(engine().mu);
  run(s, s->enqueued);
}

// The thread's last error, as the runtime keeps it: set by calls that fail, and by a query's
// "not ready"; cudaGetLastError returns and clears it.
inline thread_local cudaError_t last_error = cudaSuccess;
inline cudaError_t fail(cudaError_t e) {
  if (e != cudaSuccess) last_error = e;
  return e;
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
inline cudaError_t cudaDeviceSynchronize() {
  fake_cuda::Engine& g = fake_cuda::engine();
  std::lock_guard lock(g.mu);
  for (CUstream_st* s : g.streams) fake_cuda::run_all(s);
  fake_cuda::run_all(&g.legacy);
  return cudaSuccess;
}
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
  fake_cuda::Engine& g = fake_cuda::engine();
  std::lock_guard lock(g.mu);
  g.streams.insert(*s);
  return cudaSuccess;
}
inline cudaError_t cudaStreamSynchronize(cudaStream_t s) {
  fake_cuda::run_all(fake_cuda::stream_or_legacy(s));
  return cudaSuccess;
}
inline cudaError_t cudaEventCreate(cudaEvent_t* e) {
  *e = new CUevent_st;
  return cudaSuccess;
}
inline cudaError_t cudaEventDestroy(cudaEvent_t e) {
  // As CUDA: destroying a pending event is allowed; its queued record keeps only its time.
  std::lock_guard lock(fake_cuda::engine().mu);
  delete e;
  return cudaSuccess;
}
inline cudaError_t cudaEventRecord(cudaEvent_t e, cudaStream_t s) {
  std::lock_guard lock(fake_cuda::engine().mu);
  s = fake_cuda::stream_or_legacy(s);
  e->ns = std::make_shared<int64_t>(0);
  fake_cuda::enqueue(s, [ns = e->ns] { *ns = fake_cuda::now_ns(); });
  e->stream = s, e->at = s->enqueued, e->queried = false;
  return cudaSuccess;
}
inline cudaError_t cudaStreamWaitEvent(cudaStream_t s, cudaEvent_t e, unsigned) {
  std::lock_guard lock(fake_cuda::engine().mu);
  CUstream_st* const t = e->stream;
  const uint64_t at = e->at;  // the event as recorded now, as CUDA reads it
  if (t) fake_cuda::enqueue(s, [t, at] { fake_cuda::run(t, at); });
  return cudaSuccess;
}
inline cudaError_t cudaEventSynchronize(cudaEvent_t e) {
  std::lock_guard lock(fake_cuda::engine().mu);
  if (e->stream) fake_cuda::run(e->stream, e->at);
  return cudaSuccess;
}
inline cudaError_t cudaEventQuery(cudaEvent_t e) {
  std::lock_guard lock(fake_cuda::engine().mu);
  if (!e->queried) {  // a real event is usually still pending when first asked
    e->queried = true;
    return fake_cuda::fail(cudaErrorNotReady);
  }
  return cudaEventSynchronize(e);
}
inline cudaError_t cudaEventElapsedTime(float* ms, cudaEvent_t a, cudaEvent_t b) {
  cudaEventSynchronize(a), cudaEventSynchronize(b);
  *ms = static_cast<float>(double(*b->ns - *a->ns) * 1e-6);
  return cudaSuccess;
}
inline cudaError_t cudaMallocAsync(void** p, size_t bytes, cudaStream_t) {
  *p = std::malloc(bytes);
  if (!*p) return fake_cuda::fail(cudaErrorMemoryAllocation);
  fake_cuda::Engine& g = fake_cuda::engine();
  std::lock_guard lock(g.mu);
  g.blocks[reinterpret_cast<uintptr_t>(*p)] = bytes;
  return cudaSuccess;
}
inline cudaError_t cudaFreeAsync(void* p, cudaStream_t s) {
  if (!fake_cuda::on_device(p)) return fake_cuda::fail(cudaErrorInvalidValue);
  fake_cuda::enqueue(s, [p] {  // freed when the stream gets there
    {
      std::lock_guard lock(fake_cuda::engine().mu);
      fake_cuda::engine().blocks.erase(reinterpret_cast<uintptr_t>(p));
    }
    std::free(p);
  });
  return cudaSuccess;
}
inline cudaError_t cudaPointerGetAttributes(cudaPointerAttributes* a, const void* p) {
  a->type = fake_cuda::on_device(p) ? cudaMemoryTypeDevice : cudaMemoryTypeUnregistered;
  return cudaSuccess;
}
inline cudaError_t cudaMemcpy2DAsync(void* dst, size_t dpitch, const void* src, size_t spitch, size_t width,
                                     size_t height, cudaMemcpyKind, cudaStream_t s) {
  if (dpitch < width || spitch < width) return fake_cuda::fail(cudaErrorInvalidValue);  // as CUDA checks
  auto copy = [=](const char* from) {
    for (size_t r = 0; r < height; ++r) std::memmove(static_cast<char*>(dst) + r * dpitch, from + r * spitch, width);
  };
  if (!fake_cuda::on_device(src)) {  // from pageable host memory: the data is taken now
    auto staged = std::make_shared<std::vector<char>>(static_cast<const char*>(src),
                                                      static_cast<const char*>(src) + (height - 1) * spitch + width);
    if (!fake_cuda::on_device(dst)) copy(staged->data());
    else fake_cuda::enqueue(s, [copy, staged] { copy(staged->data()); });
    return cudaSuccess;
  }
  if (!fake_cuda::on_device(dst)) {  // to pageable host memory: complete on return
    cudaStreamSynchronize(s);
    copy(static_cast<const char*>(src));
    return cudaSuccess;
  }
  fake_cuda::enqueue(s, [copy, src] { copy(static_cast<const char*>(src)); });
  return cudaSuccess;
}
inline cudaError_t cudaMemcpyAsync(void* dst, const void* src, size_t bytes, cudaMemcpyKind k, cudaStream_t s) {
  return bytes ? cudaMemcpy2DAsync(dst, bytes, src, bytes, bytes, 1, k, s) : cudaSuccess;
}
inline cudaError_t cudaMemsetAsync(void* p, int v, size_t bytes, cudaStream_t s) {
  fake_cuda::enqueue(s, [=] { std::memset(p, v, bytes); });
  return cudaSuccess;
}

// The CUDA runtime behind core/gpu.h (gpu::Runtime, core/gpu_runtime.h), part of the CUDA
// module libringside_cuda.so (core/cuda_module.h): streams, memory from the stream-ordered
// allocator, copies, events anchored to the steady clock, and the transfers between ranks.
#include <cuda_runtime_api.h>

#include <chrono>
#include <cstring>
#include <map>
#include <mutex>
#include <set>
#include <thread>

#include "core/error.h"
#include "core/gpu_runtime.h"
#include "kernels/cuda/kernels.h"

namespace ringside::gpu {

namespace {

int64_t steady_now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

}  // namespace

// The implementation, in a namespace of its own: the names of gpu.h are the core's forwarders.
namespace cuda {

namespace {

void check(cudaError_t e, const char* call) {
  if (e == cudaSuccess) return;
  cudaGetLastError();  // clear a non-sticky error so that the next call does not report it again
  throw Error(detail::concat("CUDA: ", call, " failed: ", cudaGetErrorString(e)));
}
#define RS_CUDA(call) check((call), #call)

cudaStream_t stream_of(void* s) { return static_cast<cudaStream_t>(s); }

// The per-device anchor that turns event times into steady-clock ns: an event recorded and
// waited for at a known instant. cudaEventElapsedTime is float milliseconds, so it is renewed
// when it is a second old (at the next binding): times within a run stay sub-microsecond.
struct Anchor {
  cudaEvent_t event = nullptr;
  int64_t ns = 0;
  int64_t chain_start_ns = 0;  // when the host clock was last read for the chain it belongs to
  ~Anchor() {
    if (event) cudaEventDestroy(event);
  }
};

std::mutex g_mu;
std::map<std::pair<int, int>, std::unique_ptr<RankStreams>> g_streams;  // kept for the process's life
std::map<int, std::shared_ptr<Anchor>> g_anchors;
std::set<int> g_pools;  // devices whose memory pool is configured

// Whether event e has happened, without waiting. cudaEventQuery's "not ready" is also left as
// the thread's last error, which the next launch check would take for its own: clear it.
bool query(cudaEvent_t e) {
  const cudaError_t q = cudaEventQuery(e);
  if (q == cudaErrorNotReady) {
    cudaGetLastError();
    return false;
  }
  check(q, "cudaEventQuery");
  return true;
}

// The calling thread's current device, restored when the scope ends: helpers that must act on
// another device (a release from another thread, a transfer) leave the caller's as it was.
struct OnDevice {
  int previous = -1;  // -1: unknown, nothing to restore
  explicit OnDevice(int device) {
    if (cudaGetDevice(&previous) != cudaSuccess) cudaGetLastError(), previous = -1;
    if (previous != device) check(cudaSetDevice(device), "cudaSetDevice");
  }
  ~OnDevice() {
    int now = -1;
    if (previous >= 0 && cudaGetDevice(&now) == cudaSuccess && now != previous) cudaSetDevice(previous);
  }
};

// The device's anchor, renewed once it is a second old, so that the float milliseconds of
// cudaEventElapsedTime stay sub-microsecond (events keep the anchor they were taken against).
// A renewal is chained to the anchor it replaces (its time is the old one's plus the GPU's
// elapsed time between them), so that two events read against neighbouring anchors agree; the
// host clock is read afresh for the first anchor, and after a minute or a gap of 10 s, to
// follow any drift between the clocks.
std::shared_ptr<Anchor> anchor_of(int device) {
  std::lock_guard lock(g_mu);
  std::shared_ptr<Anchor>& a = g_anchors[device];
  const int64_t now = steady_now_ns();
  if (a && now - a->ns <= 1'000'000'000) return a;
  auto fresh = std::make_shared<Anchor>();
  OnDevice on(device);
  RS_CUDA(cudaEventCreate(&fresh->event));
  // Polled, not waited for: the host sees it complete within a microsecond or so. (The legacy
  // stream does not wait for the ranks' non-blocking streams: it is empty.) It completed after
  // the host's read before the last query that found it pending (or before its record) and
  // before the read after the query that found it done. A thread preempted in between widens
  // that bracket by the preemption, which would shift every event read against the anchor: it
  // is recorded again (up to 8 times) until the bracket is within 10 us, and the middle of the
  // last one is the anchor's time.
  int64_t bracket = INT64_MAX, host_ns = 0;
  for (int attempt = 0; attempt < 8 && bracket > 10'000; ++attempt) {
    int64_t lo = steady_now_ns();
    RS_CUDA(cudaEventRecord(fresh->event, nullptr));
    for (int64_t before = lo;; before = steady_now_ns()) {
      if (query(fresh->event)) {
        const int64_t hi = steady_now_ns();
        bracket = hi - lo, host_ns = lo + bracket / 2;
        break;
      }
      lo = before;
    }
  }
  float ms = 0;
  if (a && now - a->ns < 10'000'000'000 && now - a->chain_start_ns < 60'000'000'000 &&
      cudaEventElapsedTime(&ms, a->event, fresh->event) == cudaSuccess) {
    fresh->ns = a->ns + static_cast<int64_t>(static_cast<double>(ms) * 1e6);
    fresh->chain_start_ns = a->chain_start_ns;
  } else {
    cudaGetLastError();
    fresh->ns = fresh->chain_start_ns = host_ns;
  }
  a = std::move(fresh);
  return a;
}

// steady-clock ns of a completed event.
int64_t event_ns(cudaEvent_t e, const Anchor& a) {
  RS_CUDA(cudaEventSynchronize(e));
  float ms = 0;
  RS_CUDA(cudaEventElapsedTime(&ms, a.event, e));
  return a.ns + static_cast<int64_t>(static_cast<double>(ms) * 1e6);
}

const RankStreams& streams_for(int device, int slot) {
  std::lock_guard lock(g_mu);
  std::unique_ptr<RankStreams>& s = g_streams[{device, slot}];
  if (!s) {
    RS_CUDA(cudaSetDevice(device));
    if (g_pools.insert(device).second) {
      // The pool keeps freed memory for reuse instead of returning it at every synchronisation.
      cudaMemPool_t pool;
      RS_CUDA(cudaDeviceGetDefaultMemPool(&pool, device));
      uint64_t keep = UINT64_MAX;
      RS_CUDA(cudaMemPoolSetAttribute(pool, cudaMemPoolAttrReleaseThreshold, &keep));
      // Memory one rank freed is not handed to another by making the second wait for the
      // first's stream: that hidden wait between virtual ranks would distort their overlap.
      int no = 0;
      RS_CUDA(cudaMemPoolSetAttribute(pool, cudaMemPoolReuseAllowInternalDependencies, &no));
    }
    auto fresh = std::make_unique<RankStreams>();
    fresh->device = device, fresh->slot = slot;
    cudaStream_t compute, comm;
    // Non-blocking: neither waits for the legacy default stream, so ranks overlap freely.
    RS_CUDA(cudaStreamCreateWithFlags(&compute, cudaStreamNonBlocking));
    RS_CUDA(cudaStreamCreateWithFlags(&comm, cudaStreamNonBlocking));
    fresh->compute = compute, fresh->comm = comm;
    s = std::move(fresh);
  }
  return *s;
}

}  // namespace

int device_count() {
  int n = 0;
  // No driver or no device is not an error here: it means zero GPUs.
  if (cudaGetDeviceCount(&n) != cudaSuccess) {
    cudaGetLastError();
    return 0;
  }
  return n;
}

std::string describe(int device) {
  cudaDeviceProp p{};
  RS_CUDA(cudaGetDeviceProperties(&p, device));
  int driver = 0;
  cudaDriverGetVersion(&driver);
  char mem[32];
  std::snprintf(mem, sizeof mem, "%.1f GiB", double(p.totalGlobalMem) / double(1ull << 30));
  return detail::concat(p.name, ", sm_", p.major, p.minor, ", ", p.multiProcessorCount, " SMs, ", mem, ", driver ",
                        driver / 1000, ".", (driver % 1000) / 10);
}

const RankStreams& bind(int device, int slot) {
  const int n = device_count();
  RS_CHECK(device >= 0 && device < n, "GPU ", device, " does not exist (", n, " CUDA device", n == 1 ? "" : "s",
           " visible)");
  const RankStreams& s = streams_for(device, slot);
  RS_CUDA(cudaSetDevice(device));
  anchor_of(device);
  return s;
}

void* allocate(int64_t bytes, const RankStreams& s) {
  void* p = nullptr;
  OnDevice on(s.device);
  const size_t n = static_cast<size_t>(bytes > 0 ? bytes : 1);
  cudaError_t e = cudaMallocAsync(&p, n, stream_of(s.compute));
  if (e == cudaErrorMemoryAllocation) {
    // The pool keeps what was freed; memory others need (NCCL, cuBLAS) may be in it. Give the
    // unused part back to the device once, then try again. (This rank's stream only: waiting
    // for the whole device would wait for every other rank.)
    cudaGetLastError();
    cudaMemPool_t pool;
    if (cudaStreamSynchronize(stream_of(s.compute)) == cudaSuccess &&
        cudaDeviceGetDefaultMemPool(&pool, s.device) == cudaSuccess)
      cudaMemPoolTrimTo(pool, 0);
    e = cudaMallocAsync(&p, n, stream_of(s.compute));
  }
  if (e != cudaSuccess) {
    cudaGetLastError();
    size_t free_b = 0, total = 0;
    cudaMemGetInfo(&free_b, &total);
    throw Error(detail::concat("out of GPU memory: allocating ", bytes, " bytes on GPU ", s.device, " (", free_b >> 20,
                               " MiB free of ", total >> 20, " MiB): ", cudaGetErrorString(e)));
  }
  return p;
}

void release(void* p, const RankStreams& s) {
  // From a destructor, maybe at exit after the runtime is gone: errors are dropped, not thrown.
  int previous = 0;
  cudaGetDevice(&previous);
  if (cudaSetDevice(s.device) != cudaSuccess || cudaFreeAsync(p, stream_of(s.compute)) != cudaSuccess)
    cudaGetLastError();
  cudaSetDevice(previous);
}

void copy(void* dst, const void* src, int64_t bytes) {
  if (bytes <= 0) return;
  const RankStreams& s = require_bound("copy");
  const bool dst_device = is_device_pointer(dst), src_device = is_device_pointer(src);
  if (!dst_device && !src_device) {
    std::memmove(dst, src, static_cast<size_t>(bytes));
    return;
  }
  RS_CUDA(cudaMemcpyAsync(dst, src, static_cast<size_t>(bytes), cudaMemcpyDefault, stream_of(s.compute)));
  if (!dst_device || !src_device) RS_CUDA(cudaStreamSynchronize(stream_of(s.compute)));  // host memory: done now
}

void copy_2d(void* dst, int64_t dst_pitch, const void* src, int64_t src_pitch, int64_t width, int64_t rows) {
  if (width <= 0 || rows <= 0) return;
  const RankStreams& s = require_bound("copy_2d");
  const bool dst_device = is_device_pointer(dst), src_device = is_device_pointer(src);
  if (!dst_device && !src_device) {  // host memory of a GPU rank
    for (int64_t r = 0; r < rows; ++r)
      std::memcpy(static_cast<char*>(dst) + r * dst_pitch, static_cast<const char*>(src) + r * src_pitch,
                  static_cast<size_t>(width));
    return;
  }
  static const int64_t max_pitch = [] {  // cudaMemcpy2D refuses pitches above this
    int dev = 0, v = 0;
    cudaGetDevice(&dev);
    return cudaDeviceGetAttribute(&v, cudaDevAttrMaxPitch, dev) == cudaSuccess ? int64_t(v) : int64_t(INT32_MAX);
  }();
  if (rows == 1 || (dst_pitch == width && src_pitch == width)) {  // contiguous: one plain copy
    RS_CUDA(cudaMemcpyAsync(dst, src, static_cast<size_t>(width * rows), cudaMemcpyDefault, stream_of(s.compute)));
  } else if (dst_pitch > max_pitch || src_pitch > max_pitch) {  // very long rows: a copy per row
    for (int64_t r = 0; r < rows; ++r)
      RS_CUDA(cudaMemcpyAsync(static_cast<char*>(dst) + r * dst_pitch, static_cast<const char*>(src) + r * src_pitch,
                              static_cast<size_t>(width), cudaMemcpyDefault, stream_of(s.compute)));
  } else {
    RS_CUDA(cudaMemcpy2DAsync(dst, static_cast<size_t>(dst_pitch), src, static_cast<size_t>(src_pitch),
                              static_cast<size_t>(width), static_cast<size_t>(rows), cudaMemcpyDefault,
                              stream_of(s.compute)));
  }
  if (!dst_device || !src_device) RS_CUDA(cudaStreamSynchronize(stream_of(s.compute)));  // host memory: done now
}

void zero(void* p, int64_t bytes) {
  if (bytes > 0) RS_CUDA(cudaMemsetAsync(p, 0, static_cast<size_t>(bytes), stream_of(require_bound("zero").compute)));
}

void fill(float* p, int64_t n, float value) { kernels::cuda::fill(p, n, value, require_bound("fill").compute); }

void add(const float* a, const float* b, float* out, int64_t n) {
  kernels::cuda::add(a, b, out, n, require_bound("add").compute);
}

void synchronize() {
  if (const RankStreams* s = bound()) RS_CUDA(cudaStreamSynchronize(stream_of(s->compute)));
}

bool is_device_pointer(const void* p) {
  cudaPointerAttributes a{};
  if (cudaPointerGetAttributes(&a, p) != cudaSuccess) {
    cudaGetLastError();
    return false;
  }
  return a.type == cudaMemoryTypeDevice || a.type == cudaMemoryTypeManaged;
}

// gpu::Event on a cudaEvent_t, read against the device's anchor when it was recorded.
class CudaEvent final : public Event {
 public:
  CudaEvent(cudaEvent_t event, int device, std::shared_ptr<Anchor> anchor)
      : event_(event), device_(device), anchor_(std::move(anchor)) {}
  ~CudaEvent() override {
    if (cudaEventDestroy(event_) != cudaSuccess) cudaGetLastError();
  }
  int64_t steady_ns() const override {
    OnDevice on(device_);
    return event_ns(event_, *anchor_);
  }
  bool done() const override { return query(event_); }
  void* handle() const override { return event_; }
  int device() const override { return device_; }

 private:
  cudaEvent_t event_;
  int device_;
  std::shared_ptr<Anchor> anchor_;
};

std::shared_ptr<Event> record(bool comm) {
  const RankStreams& s = require_bound("Event::record");
  cudaEvent_t ev;
  RS_CUDA(cudaEventCreate(&ev));
  auto e = std::make_shared<CudaEvent>(ev, s.device, anchor_of(s.device));
  RS_CUDA(cudaEventRecord(ev, stream_of(comm ? s.comm : s.compute)));
  return e;
}

void comm_wait(const Event& e) {
  RS_CUDA(cudaStreamWaitEvent(stream_of(require_bound("comm_wait").comm), static_cast<cudaEvent_t>(e.handle()), 0));
}

void transfer(const RankStreams& sender, void* to, const void* from, int64_t bytes,
              const std::vector<const Event*>& after, double timeout_s, int64_t& start_ns, int64_t& end_ns) {
  OnDevice on(sender.device);
  const std::shared_ptr<Anchor> a = anchor_of(sender.device);  // before the events read against it
  const cudaStream_t comm = stream_of(sender.comm);
  // Both sides' streams must reach their events before the copy may run. Waited for here,
  // against the deadline, before the copy is queued: a stuck stream fails the transfer and
  // leaves no copy behind to write into buffers its owners free.
  const int64_t deadline = steady_now_ns() + static_cast<int64_t>(timeout_s * 1e9);
  auto too_late = [&](const char* what) {
    if (steady_now_ns() > deadline)
      throw Error(detail::concat("the device copy of ", bytes, " bytes ", what, " within ", timeout_s,
                                 " s (a rank's stream is stuck?)"));
  };
  for (const Event* e : after)
    if (e) {
      while (!query(static_cast<cudaEvent_t>(e->handle()))) {
        too_late("could not start");
        std::this_thread::yield();
      }
      RS_CUDA(cudaStreamWaitEvent(comm, static_cast<cudaEvent_t>(e->handle()), 0));
    }
  cudaEvent_t start, end;
  RS_CUDA(cudaEventCreate(&start));
  RS_CUDA(cudaEventCreate(&end));
  struct Destroy {
    cudaEvent_t a, b;
    ~Destroy() { cudaEventDestroy(a), cudaEventDestroy(b); }
  } destroy{start, end};
  RS_CUDA(cudaEventRecord(start, comm));
  if (bytes > 0) RS_CUDA(cudaMemcpyAsync(to, from, static_cast<size_t>(bytes), cudaMemcpyDefault, comm));
  RS_CUDA(cudaEventRecord(end, comm));
  while (!query(end)) {
    too_late("did not finish");
    std::this_thread::yield();
  }
  end_ns = event_ns(end, *a);
  start_ns = event_ns(start, *a);
}

class CudaRuntime final : public Runtime {
 public:
  int device_count() override { return cuda::device_count(); }
  std::string describe(int device) override { return cuda::describe(device); }
  const RankStreams& bind(int device, int slot) override { return cuda::bind(device, slot); }
  void* allocate(int64_t bytes, const RankStreams& s) override { return cuda::allocate(bytes, s); }
  void release(void* p, const RankStreams& s) override { cuda::release(p, s); }
  void copy(void* dst, const void* src, int64_t bytes) override { cuda::copy(dst, src, bytes); }
  void copy_2d(void* dst, int64_t dst_pitch, const void* src, int64_t src_pitch, int64_t width,
               int64_t rows) override {
    cuda::copy_2d(dst, dst_pitch, src, src_pitch, width, rows);
  }
  void zero(void* p, int64_t bytes) override { cuda::zero(p, bytes); }
  void fill(float* p, int64_t n, float value) override { cuda::fill(p, n, value); }
  void add(const float* a, const float* b, float* out, int64_t n) override { cuda::add(a, b, out, n); }
  void synchronize() override { cuda::synchronize(); }
  bool is_device_pointer(const void* p) override { return cuda::is_device_pointer(p); }
  std::shared_ptr<Event> record(bool comm) override { return cuda::record(comm); }
  void comm_wait(const Event& e) override { cuda::comm_wait(e); }
  void transfer(const RankStreams& sender, void* to, const void* from, int64_t bytes,
                const std::vector<const Event*>& after, double timeout_s, int64_t& start_ns,
                int64_t& end_ns) override {
    cuda::transfer(sender, to, from, bytes, after, timeout_s, start_ns, end_ns);
  }
};

}  // namespace cuda
}  // namespace ringside::gpu

/// The module's entry point for core/gpu.cpp (core/cuda_module.h).
extern "C" ringside::gpu::Runtime* ringside_cuda_runtime() {
  static ringside::gpu::cuda::CudaRuntime runtime;
  return &runtime;
}

// gpu.h: the calling thread's binding, and every call that touches CUDA forwarded to the CUDA
// module (core/gpu_runtime.h, loaded on first use: core/cuda_module.h). A CPU run never loads
// it: without a bound thread or a loaded module there is no device memory to meet.
#include "core/gpu.h"

#include <atomic>
#include <cstring>

#include "core/cuda_module.h"
#include "core/error.h"
#include "core/gpu_runtime.h"

namespace ringside::gpu {

namespace {

thread_local const RankStreams* t_bound = nullptr;
std::atomic<Runtime*> g_runtime{nullptr};

// The module's runtime, loaded now if it is not yet. `what` names the caller in the error of
// a build without CUDA.
Runtime& runtime(const char* what) {
#if RINGSIDE_HAVE_CUDA
  if (Runtime* r = g_runtime.load()) return *r;
  Runtime* r = cuda_module::entry<Runtime*()>("ringside_cuda_runtime")();
  g_runtime = r;
  return *r;
#else
  throw Error(detail::concat(what, ": this build has no CUDA backend (configure with nvcc present, RINGSIDE_CUDA=ON)"));
#endif
}

// The runtime when the module is loaded; nullptr otherwise (then no device memory exists).
Runtime* loaded() { return g_runtime.load(); }

}  // namespace

bool built() {
#if RINGSIDE_HAVE_CUDA
  return true;
#else
  return false;
#endif
}

int device_count() { return built() ? runtime("gpu::device_count").device_count() : 0; }
std::string describe(int device) { return runtime("gpu::describe").describe(device); }

const RankStreams* bound() { return t_bound; }

const RankStreams& require_bound(const char* what) {
  RS_CHECK(t_bound != nullptr, what, ": needs a GPU rank (a thread bound to a GPU, as --device cuda runs them)");
  return *t_bound;
}

Bind::Bind(int device, int slot) : previous_(t_bound) { t_bound = &runtime("--device cuda").bind(device, slot); }
Bind::~Bind() { t_bound = previous_; }

void* allocate(int64_t bytes, const RankStreams& s) { return runtime("GPU memory").allocate(bytes, s); }

void release(void* p, const RankStreams& s) {
  if (Runtime* r = loaded()) r->release(p, s);
}

void copy(void* dst, const void* src, int64_t bytes) {
  if (Runtime* r = loaded()) r->copy(dst, src, bytes);
  else if (bytes > 0) std::memmove(dst, src, static_cast<size_t>(bytes));
}

void copy_2d(void* dst, int64_t dst_pitch, const void* src, int64_t src_pitch, int64_t width, int64_t rows) {
  runtime("gpu::copy_2d").copy_2d(dst, dst_pitch, src, src_pitch, width, rows);
}

void zero(void* p, int64_t bytes) { runtime("gpu::zero").zero(p, bytes); }
void fill(float* p, int64_t n, float value) { runtime("gpu::fill").fill(p, n, value); }
void add(const float* a, const float* b, float* out, int64_t n) { runtime("gpu::add").add(a, b, out, n); }

void synchronize() {
  if (t_bound) runtime("gpu::synchronize").synchronize();
}

bool is_device_pointer(const void* p) {
  Runtime* r = loaded();
  return r && r->is_device_pointer(p);
}

std::shared_ptr<Event> Event::record(bool comm) { return runtime("gpu::Event").record(comm); }

void comm_wait(const Event& e) { runtime("gpu::comm_wait").comm_wait(e); }

void transfer(const RankStreams& sender, void* to, const void* from, int64_t bytes,
              const std::vector<const Event*>& after, double timeout_s, int64_t& start_ns, int64_t& end_ns) {
  runtime("gpu::transfer").transfer(sender, to, from, bytes, after, timeout_s, start_ns, end_ns);
}

}  // namespace ringside::gpu

// The CUDA runtime as ringside uses it: which GPU a rank thread runs on, its streams, its
// memory, copies and events. Plain C++ (no CUDA headers), so that core code (tensors, the
// local communicator, the tracer) can run on GPU ranks in a build with CUDA and compile
// unchanged in one without: there every call below that needs a GPU throws ringside::Error.
//
// A GPU rank is a thread bound to a device with gpu::Bind. It has two streams, as the design
// has two per rank: `compute` (kernels, cuBLAS, the rank's own copies) and `comm` (transfers
// between ranks). Memory comes from CUDA's stream-ordered allocator (cudaMallocAsync on the
// rank's compute stream, a pool that keeps freed memory for reuse), and every allocation is
// counted by the MemoryTracker as on the CPU (core/tensor.h): the tracking allocator.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace ringside::gpu {

/// Whether this build has the CUDA backend (libringside_cuda.so, loaded on first use:
/// core/cuda_module.h). The calls below load it when they need a GPU; on a CPU run it is
/// never loaded, and those that cannot meet device memory there (copy, synchronize,
/// is_device_pointer, release) answer as for the CPU.
bool built();
/// CUDA devices visible (0 in a build without CUDA, or with no driver or device). Loads the
/// CUDA module: throws ConfigError when it cannot be loaded (core/cuda_module.h).
int device_count();
/// "NVIDIA H200, sm_90, 132 SMs, 140.4 GiB, driver 13.0".
std::string describe(int device);

/// The streams of one GPU rank. Created once per (device, slot) and kept for the life of the
/// process, so that memory released late (after the rank's thread ended) has a live stream.
struct RankStreams {
  int device = 0;
  int slot = 0;
  void* compute = nullptr;  ///< cudaStream_t
  void* comm = nullptr;     ///< cudaStream_t
};

/// Binds the calling thread to GPU `device` as rank slot `slot` (virtual ranks on one GPU
/// take slots 0..P-1) for the scope's lifetime: tensors it allocates without naming a device
/// live on that GPU, and its ops and copies run on the slot's compute stream. Throws
/// ringside::Error when the device does not exist or the build has no CUDA.
class Bind {
 public:
  Bind(int device, int slot);
  ~Bind();
  Bind(const Bind&) = delete;
  Bind& operator=(const Bind&) = delete;

 private:
  const RankStreams* previous_;
};
/// The calling thread's streams, or nullptr when it is not a GPU rank.
const RankStreams* bound();
/// The bound thread's streams; throws ringside::Error naming `what` when it is not a GPU rank.
const RankStreams& require_bound(const char* what);

// ---- memory and copies ---------------------------------------------------------------------

/// `bytes` bytes of device memory, ordered on s.compute. Throws ringside::Error (with the
/// device's free memory) when the GPU is out of memory.
void* allocate(int64_t bytes, const RankStreams& s);
/// Returns memory from allocate(), ordered on s.compute after the work queued there.
void release(void* p, const RankStreams& s);
/// Copies `bytes` bytes between any two of host and device memory, on the bound thread's
/// compute stream (in order with its kernels). A copy that touches host memory is complete
/// when this returns; device-to-device copies are queued.
void copy(void* dst, const void* src, int64_t bytes);
/// `rows` rows of `width` bytes, rows `src_pitch` and `dst_pitch` bytes apart (a strided copy
/// in one call), as copy().
void copy_2d(void* dst, int64_t dst_pitch, const void* src, int64_t src_pitch, int64_t width, int64_t rows);
/// Zeroes `bytes` bytes of device memory on the compute stream.
void zero(void* p, int64_t bytes);
/// Sets n floats of device memory to `value` on the compute stream.
void fill(float* p, int64_t n, float value);
/// out = a + b over n floats of device memory, on the compute stream.
void add(const float* a, const float* b, float* out, int64_t n);
/// Blocks until the bound thread's compute stream has finished its work (no-op off GPU ranks).
void synchronize();
/// Whether p points into device memory (false for host memory and in builds without CUDA).
bool is_device_pointer(const void* p);

// ---- events: ordering between streams, and time ---------------------------------------------

/// A CUDA event with timing, recorded on a stream. Its time can be read as steady-clock ns of
/// this process (the clock the tracer uses): each device's events are anchored once to the
/// steady clock by an event recorded and waited for at a known instant.
class Event {
 public:
  /// Records a new event on the bound thread's compute stream (comm = false) or comm stream.
  static std::shared_ptr<Event> record(bool comm = false);
  virtual ~Event() = default;
  /// Waits for the event, then returns when it happened, in steady-clock ns.
  virtual int64_t steady_ns() const = 0;
  /// Whether the stream has passed it (does not wait).
  virtual bool done() const = 0;
  virtual void* handle() const = 0;  ///< cudaEvent_t
  virtual int device() const = 0;
};

/// Makes the bound thread's comm stream wait for `e` (recorded on its compute stream: the
/// data a transfer sends is written) before what is queued on it next.
void comm_wait(const Event& e);

/// A transfer between two GPU ranks' buffers, as the local communicator runs it: on
/// `sender.comm`, after the `after` events (each side's compute stream at posting: the data is
/// written, the destination no longer read), timed with events; returns when the copy has
/// finished, with its start and end in steady-clock ns. Any of to/from may be host memory.
/// Throws ringside::Error if it has not finished after timeout_s seconds.
void transfer(const RankStreams& sender, void* to, const void* from, int64_t bytes,
              const std::vector<const Event*>& after, double timeout_s, int64_t& start_ns, int64_t& end_ns);

}  // namespace ringside::gpu

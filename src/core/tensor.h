// Tensor: a shape, an element type (fp32 or fp64), a device, and tracked storage.
//
// Storage is row-major and contiguous. Every allocation is tagged with the rank that owns it
// and a MemCategory, and is reported to a MemoryTracker on allocation and release, so memory
// per rank and per category is measured, not estimated.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "core/memory_tracker.h"

namespace ringside {

enum class DType { f32, f64 };
enum class Device { cpu, cuda };

/// Bytes per element: 4 for f32, 8 for f64.
int64_t dtype_size(DType t);
/// "f32" or "f64".
const char* to_string(DType t);
/// "cpu" or "cuda".
const char* to_string(Device d);

template <class T> constexpr DType dtype_of();
template <> constexpr DType dtype_of<float>() { return DType::f32; }
template <> constexpr DType dtype_of<double>() { return DType::f64; }

using Shape = std::vector<int64_t>;
/// "[2, 4096, 512]".
std::string to_string(const Shape& s);
/// Product of the dimensions (1 for a scalar shape []).
int64_t numel(const Shape& s);

/// Who owns an allocation: the rank, what it is for, and the tracker to report to. The tracker
/// must outlive every tensor allocated with it (storage reports its release there).
struct AllocTag {
  int rank = 0;
  MemCategory category = MemCategory::workspace;
  MemoryTracker* tracker = &default_memory_tracker();
};

/// Where tensors go when no device is named: cuda on a GPU rank (a thread bound with
/// gpu::Bind, core/gpu.h), else cpu. Strategies allocate without naming a device, so the
/// same code runs on either.
Device default_device();

class Tensor {
 public:
  /// An undefined tensor (no storage). defined() is false.
  Tensor() = default;

  /// Uninitialised storage for `shape`. Throws ringside::Error for a negative dimension, and for
  /// Device::cuda in a build without the CUDA backend, off a GPU rank, or when the GPU is full.
  static Tensor empty(const Shape& shape, DType dtype, AllocTag tag, Device device = default_device());
  /// Zero-filled storage for `shape`.
  static Tensor zeros(const Shape& shape, DType dtype, AllocTag tag, Device device = default_device());

  bool defined() const { return storage_ != nullptr; }
  /// Allocated during a dry run: counted by its tracker, but holding no memory (data is null).
  bool is_dry() const;
  const Shape& shape() const { return shape_; }
  int ndim() const { return static_cast<int>(shape_.size()); }
  /// Size of dimension i; negative i counts from the end.
  int64_t dim(int i) const;
  int64_t numel() const { return ringside::numel(shape_); }
  int64_t nbytes() const { return numel() * dtype_size(dtype_); }
  DType dtype() const { return dtype_; }
  Device device() const;
  const AllocTag& tag() const;

  /// Typed pointer to the first element. Throws ringside::Error if T does not match dtype().
  template <class T> T* data();
  template <class T> const T* data() const;
  void* raw_data();
  const void* raw_data() const;

  /// The same storage seen with another shape of equal numel. Throws on a numel mismatch.
  Tensor reshape(const Shape& shape) const;
  /// A deep copy in new storage on the same device, tagged `tag`.
  Tensor clone(AllocTag tag) const;
  /// A copy on `device` (host <-> GPU: on a GPU rank), tagged `tag`.
  Tensor copy_to(Device device, AllocTag tag) const;
  /// A copy converted to `dtype` (f32 <-> f64; CPU only), tagged `tag`.
  Tensor to(DType dtype, AllocTag tag) const;

 private:
  struct Storage;
  std::shared_ptr<Storage> storage_;
  Shape shape_;
  DType dtype_ = DType::f32;
};

/// The dry run of the what-if model: while a DryRun lives on a thread, the tensors that thread
/// allocates are counted (rank, category, bytes) but hold no memory, and code that moves data
/// skips it; a dry backend does no math. The strategies run unchanged and their schedule (ops,
/// FLOPs, bytes, transfers, memory) comes out at any size. Scopes nest.
class DryRun {
 public:
  DryRun();
  ~DryRun();
  DryRun(const DryRun&) = delete;
  DryRun& operator=(const DryRun&) = delete;
};
/// True on a thread inside a DryRun.
bool dry_run_active();

// Moving bytes inside a rank's memory, the same code on CPU and GPU ranks: memcpy on a CPU
// rank; on a GPU rank a copy on its compute stream (core/gpu.h). Nothing in a dry run.

/// Copies `bytes` bytes from src to dst.
void copy_bytes(void* dst, const void* src, int64_t bytes);
/// Copies `rows` rows of `width` bytes; rows are dst_pitch and src_pitch bytes apart.
void copy_rows(void* dst, int64_t dst_pitch, const void* src, int64_t src_pitch, int64_t width, int64_t rows);
/// Sets every element of t to `value` (CUDA tensors: f32).
void fill(Tensor& t, double value);

/// ||t - ref||_F / ||ref||_F, accumulated in double (t and ref may differ in dtype; CPU tensors).
/// Returns ||t||_F when ref is all zeros, so that 0 vs 0 is 0. Throws on a shape mismatch.
double relative_error(const Tensor& t, const Tensor& ref);

/// Throws ringside::Error naming `what` unless t has exactly `shape` and `dtype`.
void check_tensor(const Tensor& t, const Shape& shape, DType dtype, const char* what);

}  // namespace ringside

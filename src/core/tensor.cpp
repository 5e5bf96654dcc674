#include "core/tensor.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <sstream>

#include "core/error.h"
#include "core/gpu.h"

namespace ringside {

int64_t dtype_size(DType t) { return t == DType::f32 ? 4 : 8; }
const char* to_string(DType t) { return t == DType::f32 ? "f32" : "f64"; }
const char* to_string(Device d) { return d == Device::cpu ? "cpu" : "cuda"; }

std::string to_string(const Shape& s) {
  std::ostringstream os;
  os << '[';
  for (size_t i = 0; i < s.size(); ++i) os << (i ? ", " : "") << s[i];
  os << ']';
  return os.str();
}

int64_t numel(const Shape& s) {
  int64_t n = 1;
  for (int64_t d : s) n *= d;
  return n;
}

// Storage owns the bytes and reports them to the tracker for as long as it lives. Device
// memory comes from the rank's stream-ordered pool (core/gpu.h) and goes back to it.
struct Tensor::Storage {
  void* ptr = nullptr;
  int64_t bytes = 0;
  Device device = Device::cpu;
  AllocTag tag;
  const gpu::RankStreams* streams = nullptr;  // the GPU rank that allocated it

  Storage(int64_t nbytes, Device dev, AllocTag t) : bytes(nbytes), device(dev), tag(t) {
    if (dev == Device::cuda) {
      RS_CHECK(gpu::built(), "Tensor: device cuda storage needs the CUDA backend, which this build does not have");
      streams = gpu::bound();
      RS_CHECK(streams != nullptr, "Tensor: CUDA storage is allocated by a GPU rank (a thread bound with gpu::Bind)");
    }
    if (!dry_run_active()) {  // a dry run counts the bytes but allocates nothing
      if (dev == Device::cuda) {
        ptr = gpu::allocate(bytes, *streams);
      } else {
        // 64-byte alignment: a cache line, and what AVX-512 loads like.
        const size_t rounded = (static_cast<size_t>(bytes) + 63) / 64 * 64;
        ptr = std::aligned_alloc(64, rounded ? rounded : 64);
        RS_CHECK(ptr != nullptr, "Tensor: out of host memory allocating ", bytes,
                 " bytes (the machine's, or a limit on this process: ulimit -v; the check before the job estimated less)");
      }
    }
    tag.tracker->on_alloc(tag.rank, tag.category, bytes);
  }
  ~Storage() {
    if (device == Device::cuda) {
      if (ptr) gpu::release(ptr, *streams);
    } else {
      std::free(ptr);
    }
    tag.tracker->on_free(tag.rank, tag.category, bytes);
  }
  Storage(const Storage&) = delete;
  Storage& operator=(const Storage&) = delete;
};

Device default_device() { return gpu::bound() ? Device::cuda : Device::cpu; }

void copy_bytes(void* dst, const void* src, int64_t bytes) {
  if (dry_run_active() || bytes <= 0) return;
  if (gpu::bound()) gpu::copy(dst, src, bytes);
  else std::memcpy(dst, src, static_cast<size_t>(bytes));
}

void copy_rows(void* dst, int64_t dst_pitch, const void* src, int64_t src_pitch, int64_t width, int64_t rows) {
  if (dry_run_active() || width <= 0 || rows <= 0) return;
  if (gpu::bound()) {
    gpu::copy_2d(dst, dst_pitch, src, src_pitch, width, rows);
    return;
  }
  for (int64_t r = 0; r < rows; ++r)
    std::memcpy(static_cast<char*>(dst) + r * dst_pitch, static_cast<const char*>(src) + r * src_pitch,
                static_cast<size_t>(width));
}

void fill(Tensor& t, double value) {
  if (t.is_dry()) return;
  if (t.device() == Device::cuda) {
    RS_CHECK(t.dtype() == DType::f32, "fill: CUDA tensors are f32");
    gpu::fill(t.data<float>(), t.numel(), static_cast<float>(value));
  } else if (t.dtype() == DType::f32) {
    std::fill_n(t.data<float>(), t.numel(), static_cast<float>(value));
  } else {
    std::fill_n(t.data<double>(), t.numel(), value);
  }
}

namespace {
thread_local int g_dry_run = 0;
}
DryRun::DryRun() { ++g_dry_run; }
DryRun::~DryRun() { --g_dry_run; }
bool dry_run_active() { return g_dry_run > 0; }

bool Tensor::is_dry() const { return defined() && storage_->ptr == nullptr; }

Tensor Tensor::empty(const Shape& shape, DType dtype, AllocTag tag, Device device) {
  for (int64_t d : shape) RS_CHECK(d >= 0, "Tensor: negative dimension in shape ", to_string(shape));
  Tensor t;
  t.shape_ = shape;
  t.dtype_ = dtype;
  t.storage_ = std::make_shared<Storage>(ringside::numel(shape) * dtype_size(dtype), device, tag);
  return t;
}

Tensor Tensor::zeros(const Shape& shape, DType dtype, AllocTag tag, Device device) {
  Tensor t = empty(shape, dtype, tag, device);
  if (t.is_dry()) return t;
  if (device == Device::cuda) gpu::zero(t.raw_data(), t.nbytes());
  else std::memset(t.raw_data(), 0, static_cast<size_t>(t.nbytes()));
  return t;
}

int64_t Tensor::dim(int i) const {
  const int n = ndim();
  const int j = i < 0 ? i + n : i;
  RS_CHECK(j >= 0 && j < n, "Tensor: dim ", i, " out of range for shape ", to_string(shape_));
  return shape_[j];
}

Device Tensor::device() const {
  RS_CHECK(defined(), "Tensor: device() of an undefined tensor");
  return storage_->device;
}

const AllocTag& Tensor::tag() const {
  RS_CHECK(defined(), "Tensor: tag() of an undefined tensor");
  return storage_->tag;
}

void* Tensor::raw_data() {
  RS_CHECK(defined(), "Tensor: data of an undefined tensor");
  return storage_->ptr;
}
const void* Tensor::raw_data() const {
  RS_CHECK(defined(), "Tensor: data of an undefined tensor");
  return storage_->ptr;
}

template <class T> T* Tensor::data() {
  RS_CHECK(dtype_ == dtype_of<T>(), "Tensor: asked for ", to_string(dtype_of<T>()),
           " data of a ", to_string(dtype_), " tensor");
  return static_cast<T*>(raw_data());
}
template <class T> const T* Tensor::data() const {
  return const_cast<Tensor*>(this)->data<T>();
}
template float* Tensor::data<float>();
template double* Tensor::data<double>();
template const float* Tensor::data<float>() const;
template const double* Tensor::data<double>() const;

Tensor Tensor::reshape(const Shape& shape) const {
  RS_CHECK(ringside::numel(shape) == numel(), "Tensor: cannot reshape ", to_string(shape_), " to ",
           to_string(shape));
  Tensor t = *this;
  t.shape_ = shape;
  return t;
}

Tensor Tensor::clone(AllocTag tag) const { return copy_to(device(), tag); }

Tensor Tensor::copy_to(Device device, AllocTag tag) const {
  Tensor t = empty(shape_, dtype_, tag, device);
  if (t.is_dry() || is_dry()) return t;
  if (device == Device::cpu && this->device() == Device::cpu) std::memcpy(t.raw_data(), raw_data(), static_cast<size_t>(nbytes()));
  else gpu::copy(t.raw_data(), raw_data(), nbytes());
  return t;
}

Tensor Tensor::to(DType dtype, AllocTag tag) const {
  if (dtype == dtype_) return clone(tag);
  RS_CHECK(device() == Device::cpu, "Tensor: dtype conversion is for CPU tensors");
  Tensor t = empty(shape_, dtype, tag, device());
  if (t.is_dry() || is_dry()) return t;
  const int64_t n = numel();
  if (dtype_ == DType::f32) {
    const float* src = data<float>();
    double* dst = t.data<double>();
    for (int64_t i = 0; i < n; ++i) dst[i] = src[i];
  } else {
    const double* src = data<double>();
    float* dst = t.data<float>();
    for (int64_t i = 0; i < n; ++i) dst[i] = static_cast<float>(src[i]);
  }
  return t;
}

namespace {
double element(const Tensor& t, int64_t i) {
  return t.dtype() == DType::f32 ? double(t.data<float>()[i]) : t.data<double>()[i];
}
}  // namespace

double relative_error(const Tensor& t, const Tensor& ref) {
  RS_CHECK(t.device() == Device::cpu && ref.device() == Device::cpu, "relative_error: compares CPU tensors (copy_to(Device::cpu) first)");
  RS_CHECK(t.shape() == ref.shape(), "relative_error: shape mismatch ", to_string(t.shape()), " vs ",
           to_string(ref.shape()));
  double num = 0, den = 0;
  for (int64_t i = 0, n = t.numel(); i < n; ++i) {
    const double r = element(ref, i), e = element(t, i) - r;
    num += e * e;
    den += r * r;
  }
  return den > 0 ? std::sqrt(num / den) : std::sqrt(num);
}

void check_tensor(const Tensor& t, const Shape& shape, DType dtype, const char* what) {
  RS_CHECK(t.defined(), what, ": tensor is undefined");
  RS_CHECK(t.shape() == shape, what, ": expected shape ", to_string(shape), ", got ",
           to_string(t.shape()));
  RS_CHECK(t.dtype() == dtype, what, ": expected ", to_string(dtype), ", got ", to_string(t.dtype()));
}

}  // namespace ringside

#include "core/tensor.h"

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <sstream>

#include "core/error.h"

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

// Storage owns the bytes and reports them to the tracker for as long as it lives.
struct Tensor::Storage {
  void* ptr = nullptr;
  int64_t bytes = 0;
  Device device = Device::cpu;
  AllocTag tag;

  Storage(int64_t nbytes, Device dev, AllocTag t) : bytes(nbytes), device(dev), tag(t) {
    RS_CHECK(dev == Device::cpu, "Tensor: device ", to_string(dev),
             " storage needs the CUDA backend, which this build does not have");
    if (!dry_run_active()) {  // a dry run counts the bytes but allocates nothing
      // 64-byte alignment: a cache line, and what AVX-512 loads like.
      const size_t rounded = (static_cast<size_t>(bytes) + 63) / 64 * 64;
      ptr = std::aligned_alloc(64, rounded ? rounded : 64);
      RS_CHECK(ptr != nullptr, "Tensor: out of host memory allocating ", bytes, " bytes");
    }
    tag.tracker->on_alloc(tag.rank, tag.category, bytes);
  }
  ~Storage() {
    std::free(ptr);
    tag.tracker->on_free(tag.rank, tag.category, bytes);
  }
  Storage(const Storage&) = delete;
  Storage& operator=(const Storage&) = delete;
};

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
  if (!t.is_dry()) std::memset(t.raw_data(), 0, static_cast<size_t>(t.nbytes()));
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

Tensor Tensor::clone(AllocTag tag) const {
  Tensor t = empty(shape_, dtype_, tag, device());
  if (!t.is_dry() && !is_dry()) std::memcpy(t.raw_data(), raw_data(), static_cast<size_t>(nbytes()));
  return t;
}

Tensor Tensor::to(DType dtype, AllocTag tag) const {
  if (dtype == dtype_) return clone(tag);
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

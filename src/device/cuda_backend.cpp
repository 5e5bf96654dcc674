// The CUDA backend: the same shape checks as the CPU backend (device/checks.h) in front of
// kernels/cuda and cuBLAS, on the calling GPU rank's compute stream. fp32 only. Part of the
// CUDA module (core/cuda_module.h): make_cuda_backend() reaches it through
// ringside_make_cuda_backend.
#include <map>
#include <mutex>

#include "device/backend.h"
#include "device/checks.h"
#include "core/gpu.h"

#include <cublas_v2.h>

#include "kernels/cuda/kernels.h"

namespace ringside {

namespace {

namespace kg = kernels::cuda;
constexpr Device kCuda = Device::cuda;
using checks::cols;
using checks::rows;

void f32(const Tensor& t, const char* op) {
  RS_CHECK(t.dtype() == DType::f32, op, ": the CUDA backend computes in f32 (got ", to_string(t.dtype()), ")");
}
// The CUDA kernels know the causal mask only; packed documents and windows run on the CPU.
void no_document_mask(const AttentionParams& p, const char* op) {
  RS_CHECK(p.mask == nullptr, op, ": the CUDA kernels do not take packed documents or a sliding window yet",
           " (run with --device cpu)");
}
void same(const Tensor& a, const Tensor& b, const char* op) {
  checks::same(a, b, op, kCuda);
  f32(a, op);
}
void same_shape(const Tensor& a, const Tensor& b, const char* op) {
  checks::same_shape(a, b, op, kCuda);
  f32(a, op);
}
float* fp(Tensor& t) { return t.data<float>(); }
const float* fp(const Tensor& t) { return t.data<float>(); }

void check_cublas(cublasStatus_t st, const char* call) {
  RS_CHECK(st == CUBLAS_STATUS_SUCCESS, "cuBLAS: ", call, " failed: ", cublasGetStatusString(st));
}

class CudaBackend final : public Backend {
 public:
  ~CudaBackend() override {
    for (auto& [streams, h] : handles_) {
      int previous = 0;  // a handle is destroyed on its own device
      cudaGetDevice(&previous);
      cudaSetDevice(streams->device);
      cublasDestroy(h);
      cudaSetDevice(previous);
    }
    for (auto& [streams, cache] : positions_)
      for (auto& entry : cache) gpu::release(entry.device, *streams);
  }

  Device device() const override { return kCuda; }
  std::string describe() const override {
    const gpu::RankStreams* s = gpu::bound();
    int version = 0;
    cublasGetProperty(MAJOR_VERSION, &version);
    int minor = 0;
    cublasGetProperty(MINOR_VERSION, &minor);
    return detail::concat("cuda, ", gpu::describe(s ? s->device : 0), ", cuBLAS ", version, ".", minor,
                          " (fp32, no TF32), FlashAttention-2 kernels of kernels/cuda");
  }
  Tensor zeros(const Shape& shape, DType dtype, AllocTag tag) const override {
    return Tensor::zeros(shape, dtype, tag, kCuda);
  }

  // Row-major c = op(a) op(b) is column-major c^T = op(b)^T op(a)^T: cuBLAS gets b first.
  void matmul(const Tensor& a, bool ta, const Tensor& b, bool tb, Tensor& c, double alpha, double beta) override {
    const auto [m, n, k] = checks::gemm_shape(a, ta, b, tb, c, kCuda);
    f32(a, "matmul");
    const float al = static_cast<float>(alpha), be = static_cast<float>(beta);
    check_cublas(cublasSgemm(handle(), tb ? CUBLAS_OP_T : CUBLAS_OP_N, ta ? CUBLAS_OP_T : CUBLAS_OP_N,
                             static_cast<int>(n), static_cast<int>(m), static_cast<int>(k), &al, fp(b),
                             static_cast<int>(cols(b)), fp(a), static_cast<int>(cols(a)), &be, fp(c),
                             static_cast<int>(cols(c))),
                 "cublasSgemm");
  }

  void add_bias(Tensor& y, const Tensor& bias) override {
    same(y, bias, "add_bias");
    RS_CHECK(bias.numel() == cols(y), "add_bias: bias ", to_string(bias.shape()), " for rows of ", cols(y));
    kg::add_bias(fp(y), fp(bias), rows(y), cols(y), stream());
  }
  void bias_grad(const Tensor& dy, Tensor& dbias) override {
    same(dy, dbias, "bias_grad");
    RS_CHECK(dbias.numel() == cols(dy), "bias_grad: dbias ", to_string(dbias.shape()), " for rows of ", cols(dy));
    kg::bias_grad(fp(dy), rows(dy), cols(dy), fp(dbias), stream());
  }
  void add(const Tensor& a, const Tensor& b, Tensor& out) override {
    same_shape(a, b, "add");
    same_shape(a, out, "add");
    kg::add(fp(a), fp(b), fp(out), a.numel(), stream());
  }

  void layernorm_forward(const Tensor& x, const Tensor& gamma, const Tensor& beta, double eps, Tensor& y, Tensor& mean,
                         Tensor& rstd) override {
    checks::layernorm_forward(x, gamma, beta, y, mean, rstd, kCuda);
    f32(x, "layernorm_forward");
    kg::layernorm_forward(fp(x), fp(gamma), fp(beta), rows(x), cols(x), eps, fp(y), fp(mean), fp(rstd), stream());
  }
  void layernorm_backward(const Tensor& dy, const Tensor& x, const Tensor& gamma, const Tensor& mean,
                          const Tensor& rstd, Tensor& dx, Tensor& dgamma, Tensor& dbeta) override {
    checks::layernorm_backward(dy, x, gamma, mean, rstd, dx, dgamma, dbeta, kCuda);
    f32(x, "layernorm_backward");
    kg::layernorm_backward(fp(dy), fp(x), fp(gamma), fp(mean), fp(rstd), rows(x), cols(x), fp(dx), fp(dgamma),
                           fp(dbeta), stream());
  }

  void rmsnorm_forward(const Tensor& x, const Tensor& gamma, double eps, Tensor& y, Tensor& rstd) override {
    checks::rmsnorm_forward(x, gamma, y, rstd, kCuda);
    f32(x, "rmsnorm_forward");
    kg::rmsnorm_forward(fp(x), fp(gamma), rows(x), cols(x), eps, fp(y), fp(rstd), stream());
  }
  void rmsnorm_backward(const Tensor& dy, const Tensor& x, const Tensor& gamma, const Tensor& rstd, Tensor& dx,
                        Tensor& dgamma) override {
    checks::rmsnorm_backward(dy, x, gamma, rstd, dx, dgamma, kCuda);
    f32(x, "rmsnorm_backward");
    kg::rmsnorm_backward(fp(dy), fp(x), fp(gamma), fp(rstd), rows(x), cols(x), fp(dx), fp(dgamma), stream());
  }
  void swiglu_forward(const Tensor& u, Tensor& g) override {
    const int64_t F = checks::swiglu_width(u, g, "swiglu_forward", kCuda);
    f32(u, "swiglu_forward");
    kg::swiglu_forward(fp(u), rows(g), F, fp(g), stream());
  }
  void swiglu_backward(const Tensor& dg, const Tensor& u, Tensor& du) override {
    const int64_t F = checks::swiglu_width(u, dg, "swiglu_backward", kCuda);
    same_shape(u, du, "swiglu_backward");
    f32(u, "swiglu_backward");
    kg::swiglu_backward(fp(dg), fp(u), rows(dg), F, fp(du), stream());
  }
  void gelu_forward(const Tensor& x, Tensor& y) override {
    same_shape(x, y, "gelu_forward");
    kg::gelu_forward(fp(x), x.numel(), fp(y), stream());
  }
  void gelu_backward(const Tensor& dy, const Tensor& x, Tensor& dx) override {
    same_shape(dy, x, "gelu_backward");
    same_shape(dy, dx, "gelu_backward");
    kg::gelu_backward(fp(dy), fp(x), x.numel(), fp(dx), stream());
  }

  void rope_forward(Tensor& x, const std::vector<int64_t>& positions, double theta) override {
    rope(x, positions, theta, 1.0);
  }
  void rope_backward(Tensor& dx, const std::vector<int64_t>& positions, double theta) override {
    rope(dx, positions, theta, -1.0);
  }

  void dropout_forward(const Tensor& x, Tensor& y, const std::vector<int64_t>& positions, int64_t s_global, double p,
                       uint64_t seed, uint32_t site) override {
    same_shape(x, y, "dropout_forward");
    RS_CHECK(x.ndim() == 3, "dropout_forward: x must be [b, s, h], got ", to_string(x.shape()));
    RS_CHECK(p >= 0 && p < 1, "dropout: p must be in [0, 1), got ", p);
    checks::positions(x, positions, "dropout_forward");
    if (p == 0) {  // as the CPU kernel: a copy
      if (fp(y) != fp(x)) copy_bytes(y.raw_data(), x.raw_data(), x.nbytes());
      return;
    }
    kg::dropout(fp(x), fp(y), x.dim(0), x.dim(1), x.dim(2), device_positions(positions), s_global, p, seed, site, false,
                stream());
  }
  void dropout_mask(Tensor& mask, const std::vector<int64_t>& positions, int64_t s_global, double p, uint64_t seed,
                    uint32_t site) override {
    RS_CHECK(mask.ndim() == 3, "dropout_mask: mask must be [b, s, h], got ", to_string(mask.shape()));
    RS_CHECK(p >= 0 && p < 1, "dropout: p must be in [0, 1), got ", p);
    same(mask, mask, "dropout_mask");
    checks::positions(mask, positions, "dropout_mask");
    kg::dropout(nullptr, fp(mask), mask.dim(0), mask.dim(1), mask.dim(2), device_positions(positions), s_global, p,
                seed, site, true, stream());
  }

  void split_qkv(const Tensor& qkv, Tensor& q, Tensor& k, Tensor& v) override {
    const checks::QkvLayout L = checks::qkv_layout(qkv, q, k, v, kCuda);
    f32(qkv, "split_qkv");
    kg::split_qkv(fp(qkv), fp(q), fp(k), fp(v), L.rows, L.width[0] / 4, L.width[1] / 4, stream());
  }
  void merge_qkv(const Tensor& dq, const Tensor& dk, const Tensor& dv, Tensor& dqkv) override {
    const checks::QkvLayout L = checks::qkv_layout(dqkv, dq, dk, dv, kCuda);
    f32(dqkv, "merge_qkv");
    kg::merge_qkv(fp(dq), fp(dk), fp(dv), fp(dqkv), L.rows, L.width[0] / 4, L.width[1] / 4, stream());
  }

  void attention_forward(const AttentionParams& p, const Tensor& q, const Tensor& k, const Tensor& v, Tensor& out,
                         Tensor& lse) override {
    checks::attention(p, q, k, v, "attention_forward", kCuda);
    no_document_mask(p, "attention_forward");
    f32(q, "attention_forward");
    check_tensor(out, q.shape(), q.dtype(), "attention_forward: out");
    check_tensor(lse, {p.b, p.H, p.sq}, q.dtype(), "attention_forward: lse");
    check_smem(p.d, false);
    kg::attention_forward(p, fp(q), fp(k), fp(v), fp(out), fp(lse), stream());
  }
  void attention_backward(const AttentionParams& p, const Tensor& q, const Tensor& k, const Tensor& v,
                          const Tensor& out, const Tensor& dout, const Tensor& lse, Tensor& dq, Tensor& dk,
                          Tensor& dv) override {
    checks::attention_backward(p, q, k, v, out, dout, lse, dq, dk, dv, kCuda);
    no_document_mask(p, "attention_backward");
    f32(q, "attention_backward");
    check_smem(p.d, true);
    AllocTag scratch = q.tag();
    scratch.category = MemCategory::workspace;
    Tensor D = Tensor::empty({p.b, p.H, p.sq}, DType::f32, scratch, kCuda);  // rowsum(dout * out)
    kg::attention_backward(p, fp(q), fp(k), fp(v), fp(out), fp(dout), fp(lse), fp(dq), fp(dk), fp(dv), fp(D), stream());
  }
  void lse_merge(Tensor& out, Tensor& lse, const Tensor& out_b, const Tensor& lse_b) override {
    checks::lse_merge(out, lse, out_b, lse_b, kCuda);
    f32(out, "lse_merge");
    kg::lse_merge(out.dim(0), out.dim(1), out.dim(2), out.dim(3), fp(out), fp(lse), fp(out_b), fp(lse_b), stream());
  }

 private:
  static void* stream() { return gpu::require_bound("the CUDA backend").compute; }

  // One cuBLAS handle per GPU rank, on its compute stream. Default math: true fp32 GEMMs
  // (no TF32), so that results are checked against the fp64 reference at fp32 precision.
  cublasHandle_t handle() {
    const gpu::RankStreams& s = gpu::require_bound("matmul");
    std::lock_guard lock(mu_);
    cublasHandle_t& h = handles_[&s];
    if (!h) {
      check_cublas(cublasCreate(&h), "cublasCreate");
      check_cublas(cublasSetStream(h, static_cast<cudaStream_t>(s.compute)), "cublasSetStream");
      check_cublas(cublasSetMathMode(h, CUBLAS_DEFAULT_MATH), "cublasSetMathMode");
    }
    return h;
  }

  static void check_smem(int64_t d, bool backward) {
    static const int64_t limit = [] {
      int bytes = 0, dev = 0;
      cudaGetDevice(&dev);
      cudaDeviceGetAttribute(&bytes, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev);
      return static_cast<int64_t>(bytes);
    }();
    const int64_t need = kg::attention_smem_bytes(d, backward);
    RS_CHECK(need <= limit, "attention: head dim d = ", d, " needs ", need, " bytes of shared memory per block in the ",
             backward ? "backward" : "forward", "; this GPU has ", limit);
  }

  void rope(Tensor& x, const std::vector<int64_t>& positions, double theta, double sign) {
    RS_CHECK(x.ndim() == 4, "rope: x must be [b, s, heads, d], got ", to_string(x.shape()));
    RS_CHECK(x.dim(3) % 2 == 0, "rope: head dim d must be even, got ", x.dim(3));
    same(x, x, "rope");
    checks::positions(x, positions, "rope");
    kg::rope(fp(x), x.dim(0), x.dim(1), x.dim(2), x.dim(3), device_positions(positions), theta, sign, stream());
  }

  // The global positions a kernel needs, on the device. A rank passes the same few lists over
  // and over (its tokens'), and an upload from host memory stalls the stream, so each rank
  // keeps its recent lists (8 bytes a token; outside the tracker, freed with the backend).
  struct CachedPositions {
    std::vector<int64_t> host;
    void* device;
  };
  const int64_t* device_positions(const std::vector<int64_t>& positions) {
    const gpu::RankStreams& s = gpu::require_bound("positions");
    {
      std::lock_guard lock(mu_);
      for (const CachedPositions& c : positions_[&s])
        if (c.host == positions) return static_cast<const int64_t*>(c.device);
    }
    // Uploaded outside the lock: the copy waits for this rank's stream, not the others'.
    // (Only this rank's thread touches its own list, so nothing can slip in meanwhile.)
    const int64_t bytes = static_cast<int64_t>(positions.size() * sizeof(int64_t));
    void* dev = gpu::allocate(bytes, s);
    gpu::copy(dev, positions.data(), bytes);
    std::lock_guard lock(mu_);
    auto& cache = positions_[&s];
    if (cache.size() >= 8) {
      gpu::release(cache.front().device, s);
      cache.erase(cache.begin());
    }
    cache.push_back({positions, dev});
    return static_cast<const int64_t*>(dev);
  }

  std::mutex mu_;
  std::map<const gpu::RankStreams*, cublasHandle_t> handles_;
  std::map<const gpu::RankStreams*, std::vector<CachedPositions>> positions_;
};

}  // namespace

}  // namespace ringside

/// The module's entry point for make_cuda_backend() (core/cuda_module.h).
extern "C" ringside::Backend* ringside_make_cuda_backend() { return new ringside::CudaBackend(); }

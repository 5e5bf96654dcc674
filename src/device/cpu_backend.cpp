// The CPU backend: shape checks and dtype dispatch in front of kernels/cpu.
#include <cstring>

#include "core/error.h"
#include "device/backend.h"
#include "device/checks.h"
#include "kernels/cpu/blas.h"
#include "kernels/cpu/blas_kernels.h"
#include "kernels/cpu/isa.h"
#include "kernels/cpu/ops.h"

#if RINGSIDE_OPENBLAS
extern "C" char* openblas_get_config(void);
#endif

namespace ringside {

namespace kc = kernels::cpu;

namespace {

// Calls f.template operator()<T>() with T the element type of t.
template <class F>
void dispatch(const Tensor& t, F&& f) {
  if (t.dtype() == DType::f32) f.template operator()<float>();
  else f.template operator()<double>();
}

constexpr Device kCpu = Device::cpu;
using checks::cols;
using checks::rows;
void same(const Tensor& a, const Tensor& b, const char* op) { checks::same(a, b, op, kCpu); }
void same_shape(const Tensor& a, const Tensor& b, const char* op) { checks::same_shape(a, b, op, kCpu); }

class CpuBackend final : public Backend {
 public:
  CpuBackend() { kc::set_blas_single_threaded(); }

  Device device() const override { return Device::cpu; }
  std::string describe() const override {
#if RINGSIDE_OPENBLAS
    // openblas_get_config() starts "OpenBLAS 0.3.21 DYNAMIC_ARCH ...": keep name and version.
    const std::string config = openblas_get_config();
    const std::string version = config.substr(0, config.find(' ', config.find(' ') + 1));
    return "cpu, " + version + ", " + kc::blas_kernels().describe() + "; 1 thread per GEMM call; attention version 2 on the " +
           kc::to_string(kc::active_cpu_isa()) + " path";
#else
    return std::string("cpu, the reference BLAS (netlib; no OpenBLAS in this build), 1 thread per GEMM call; attention "
                       "version 2 on the ") + kc::to_string(kc::active_cpu_isa()) + " path";
#endif
  }
  Tensor zeros(const Shape& shape, DType dtype, AllocTag tag) const override {
    return Tensor::zeros(shape, dtype, tag, Device::cpu);
  }

  void matmul(const Tensor& a, bool ta, const Tensor& b, bool tb, Tensor& c, double alpha, double beta) override {
    const auto [m, n, k] = checks::gemm_shape(a, ta, b, tb, c, kCpu);
    dispatch(a, [&]<class T>() {
      kc::gemm(ta, tb, m, n, k, static_cast<T>(alpha), a.data<T>(), cols(a), b.data<T>(), cols(b),
               static_cast<T>(beta), c.data<T>(), cols(c));
    });
  }

  void add_bias(Tensor& y, const Tensor& bias) override {
    same(y, bias, "add_bias");
    RS_CHECK(bias.numel() == cols(y), "add_bias: bias ", to_string(bias.shape()), " for rows of ", cols(y));
    dispatch(y, [&]<class T>() { kc::add_bias(y.data<T>(), bias.data<T>(), rows(y), cols(y)); });
  }

  void bias_grad(const Tensor& dy, Tensor& dbias) override {
    same(dy, dbias, "bias_grad");
    RS_CHECK(dbias.numel() == cols(dy), "bias_grad: dbias ", to_string(dbias.shape()), " for rows of ", cols(dy));
    dispatch(dy, [&]<class T>() { kc::bias_grad(dy.data<T>(), rows(dy), cols(dy), dbias.data<T>()); });
  }

  void add(const Tensor& a, const Tensor& b, Tensor& out) override {
    same_shape(a, b, "add");
    same_shape(a, out, "add");
    dispatch(a, [&]<class T>() {
      const T *pa = a.data<T>(), *pb = b.data<T>();
      T* po = out.data<T>();
      for (int64_t i = 0, n = a.numel(); i < n; ++i) po[i] = pa[i] + pb[i];
    });
  }

  void layernorm_forward(const Tensor& x, const Tensor& gamma, const Tensor& beta, double eps, Tensor& y,
                         Tensor& mean, Tensor& rstd) override {
    checks::layernorm_forward(x, gamma, beta, y, mean, rstd, kCpu);
    dispatch(x, [&]<class T>() {
      kc::layernorm_forward(x.data<T>(), gamma.data<T>(), beta.data<T>(), rows(x), cols(x), eps, y.data<T>(),
                            mean.data<T>(), rstd.data<T>());
    });
  }

  void layernorm_backward(const Tensor& dy, const Tensor& x, const Tensor& gamma, const Tensor& mean,
                          const Tensor& rstd, Tensor& dx, Tensor& dgamma, Tensor& dbeta) override {
    checks::layernorm_backward(dy, x, gamma, mean, rstd, dx, dgamma, dbeta, kCpu);
    dispatch(x, [&]<class T>() {
      kc::layernorm_backward(dy.data<T>(), x.data<T>(), gamma.data<T>(), mean.data<T>(), rstd.data<T>(), rows(x),
                             cols(x), dx.data<T>(), dgamma.data<T>(), dbeta.data<T>());
    });
  }

  void rmsnorm_forward(const Tensor& x, const Tensor& gamma, double eps, Tensor& y, Tensor& rstd) override {
    checks::rmsnorm_forward(x, gamma, y, rstd, kCpu);
    dispatch(x, [&]<class T>() {
      kc::rmsnorm_forward(x.data<T>(), gamma.data<T>(), rows(x), cols(x), eps, y.data<T>(), rstd.data<T>());
    });
  }

  void rmsnorm_backward(const Tensor& dy, const Tensor& x, const Tensor& gamma, const Tensor& rstd, Tensor& dx,
                        Tensor& dgamma) override {
    checks::rmsnorm_backward(dy, x, gamma, rstd, dx, dgamma, kCpu);
    dispatch(x, [&]<class T>() {
      kc::rmsnorm_backward(dy.data<T>(), x.data<T>(), gamma.data<T>(), rstd.data<T>(), rows(x), cols(x), dx.data<T>(),
                           dgamma.data<T>());
    });
  }

  void swiglu_forward(const Tensor& u, Tensor& g) override {
    const int64_t F = checks::swiglu_width(u, g, "swiglu_forward", kCpu);
    dispatch(u, [&]<class T>() { kc::swiglu_forward(u.data<T>(), rows(g), F, g.data<T>()); });
  }

  void swiglu_backward(const Tensor& dg, const Tensor& u, Tensor& du) override {
    const int64_t F = checks::swiglu_width(u, dg, "swiglu_backward", kCpu);
    same_shape(u, du, "swiglu_backward");
    dispatch(u, [&]<class T>() { kc::swiglu_backward(dg.data<T>(), u.data<T>(), rows(dg), F, du.data<T>()); });
  }

  void gelu_forward(const Tensor& x, Tensor& y) override {
    same_shape(x, y, "gelu_forward");
    dispatch(x, [&]<class T>() { kc::gelu_forward(x.data<T>(), x.numel(), y.data<T>()); });
  }

  void gelu_backward(const Tensor& dy, const Tensor& x, Tensor& dx) override {
    same_shape(dy, x, "gelu_backward");
    same_shape(dy, dx, "gelu_backward");
    dispatch(x, [&]<class T>() { kc::gelu_backward(dy.data<T>(), x.data<T>(), x.numel(), dx.data<T>()); });
  }

  void rope_forward(Tensor& x, const std::vector<int64_t>& positions, double theta) override { rope(x, positions, theta, false); }
  void rope_backward(Tensor& dx, const std::vector<int64_t>& positions, double theta) override { rope(dx, positions, theta, true); }

  void dropout_forward(const Tensor& x, Tensor& y, const std::vector<int64_t>& positions, int64_t s_global, double p,
                       uint64_t seed, uint32_t site) override {
    same_shape(x, y, "dropout_forward");
    RS_CHECK(x.ndim() == 3, "dropout_forward: x must be [b, s, h], got ", to_string(x.shape()));
    checks::positions(x, positions, "dropout_forward");
    dispatch(x, [&]<class T>() {
      kc::dropout_forward(x.data<T>(), y.data<T>(), x.dim(0), x.dim(1), x.dim(2), positions.data(), s_global, p, seed,
                          site);
    });
  }

  void bias_dropout_add(Tensor& y, const Tensor& bias, const std::vector<int64_t>& positions, int64_t s_global, double p,
                        uint64_t seed, uint32_t site, const Tensor& residual, Tensor& out) override {
    same_shape(y, residual, "bias_dropout_add");
    same_shape(y, out, "bias_dropout_add");
    RS_CHECK(y.ndim() == 3, "bias_dropout_add: y must be [b, s, h], got ", to_string(y.shape()));
    checks::positions(y, positions, "bias_dropout_add");
    if (bias.defined()) {
      same(y, bias, "bias_dropout_add");
      RS_CHECK(bias.numel() == y.dim(2), "bias_dropout_add: bias ", to_string(bias.shape()), " for rows of ", y.dim(2));
    }
    dispatch(y, [&]<class T>() {
      kc::bias_dropout_add(y.data<T>(), bias.defined() ? bias.data<T>() : nullptr, residual.data<T>(), out.data<T>(),
                           y.dim(0), y.dim(1), y.dim(2), positions.data(), s_global, p, seed, site);
    });
  }

  void dropout_mask(Tensor& mask, const std::vector<int64_t>& positions, int64_t s_global, double p, uint64_t seed,
                    uint32_t site) override {
    RS_CHECK(mask.ndim() == 3, "dropout_mask: mask must be [b, s, h], got ", to_string(mask.shape()));
    checks::positions(mask, positions, "dropout_mask");
    dispatch(mask, [&]<class T>() {
      kc::dropout_mask(mask.data<T>(), mask.dim(0), mask.dim(1), mask.dim(2), positions.data(), s_global, p, seed,
                       site);
    });
  }

  void split_qkv(const Tensor& qkv, Tensor& q, Tensor& k, Tensor& v) override {
    const checks::QkvLayout L = checks::qkv_layout(qkv, q, k, v, kCpu);
    const auto* fused = static_cast<const char*>(qkv.raw_data());
    char* parts[3] = {static_cast<char*>(q.raw_data()), static_cast<char*>(k.raw_data()), static_cast<char*>(v.raw_data())};
    for (int64_t r = 0; r < L.rows; ++r)
      for (int i = 0; i < 3; ++i)
        std::memcpy(parts[i] + r * L.width[i], fused + r * L.row + L.offset[i], static_cast<size_t>(L.width[i]));
  }

  void merge_qkv(const Tensor& dq, const Tensor& dk, const Tensor& dv, Tensor& dqkv) override {
    const checks::QkvLayout L = checks::qkv_layout(dqkv, dq, dk, dv, kCpu);
    auto* fused = static_cast<char*>(dqkv.raw_data());
    const char* parts[3] = {static_cast<const char*>(dq.raw_data()), static_cast<const char*>(dk.raw_data()),
                            static_cast<const char*>(dv.raw_data())};
    for (int64_t r = 0; r < L.rows; ++r)
      for (int i = 0; i < 3; ++i)
        std::memcpy(fused + r * L.row + L.offset[i], parts[i] + r * L.width[i], static_cast<size_t>(L.width[i]));
  }

  void attention_forward(const AttentionParams& p, const Tensor& q, const Tensor& k, const Tensor& v, Tensor& out,
                         Tensor& lse) override {
    checks::attention(p, q, k, v, "attention_forward", kCpu);
    check_tensor(out, q.shape(), q.dtype(), "attention_forward: out");
    check_tensor(lse, {p.b, p.H, p.sq}, q.dtype(), "attention_forward: lse");
    dispatch(q, [&]<class T>() {
      kc::attention_forward(p, q.data<T>(), k.data<T>(), v.data<T>(), out.data<T>(), lse.data<T>());
    });
  }

  void attention_backward(const AttentionParams& p, const Tensor& q, const Tensor& k, const Tensor& v,
                          const Tensor& out, const Tensor& dout, const Tensor& lse, Tensor& dq, Tensor& dk,
                          Tensor& dv) override {
    checks::attention_backward(p, q, k, v, out, dout, lse, dq, dk, dv, kCpu);
    dispatch(q, [&]<class T>() {
      kc::attention_backward(p, q.data<T>(), k.data<T>(), v.data<T>(), out.data<T>(), dout.data<T>(), lse.data<T>(),
                             dq.data<T>(), dk.data<T>(), dv.data<T>());
    });
  }

  void lse_merge(Tensor& out, Tensor& lse, const Tensor& out_b, const Tensor& lse_b) override {
    checks::lse_merge(out, lse, out_b, lse_b, kCpu);
    dispatch(out, [&]<class T>() {
      kc::lse_merge(out.dim(0), out.dim(1), out.dim(2), out.dim(3), out.data<T>(), lse.data<T>(), out_b.data<T>(),
                    lse_b.data<T>());
    });
  }

 private:
  void rope(Tensor& x, const std::vector<int64_t>& positions, double theta, bool backward) {
    RS_CHECK(x.ndim() == 4, "rope: x must be [b, s, heads, d], got ", to_string(x.shape()));
    checks::positions(x, positions, "rope");
    dispatch(x, [&]<class T>() {
      (backward ? kc::rope_backward<T> : kc::rope_forward<T>)(x.data<T>(), x.dim(0), x.dim(1), x.dim(2), x.dim(3),
                                                               positions.data(), theta);
    });
  }
};

}  // namespace

std::unique_ptr<Backend> make_cpu_backend() { return std::make_unique<CpuBackend>(); }

}  // namespace ringside

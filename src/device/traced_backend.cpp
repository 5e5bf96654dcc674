// The traced backend: every op of the wrapped backend becomes a compute-stream event with its
// kind, its FLOPs (GEMM 2mnk; attention as FlashAttention counts it, backward 2.5x forward)
// and the bytes it reads and writes, so the viewer can show achieved GFLOP/s or GB/s.
// Elementwise, norm and copy ops report bytes only: their FLOPs are not what limits them.
#include <cstdio>

#include "device/traced_backend.h"

#include "core/gpu.h"

namespace ringside::trace {

namespace {

int64_t bytes_of(std::initializer_list<const Tensor*> ts) {
  int64_t b = 0;
  for (const Tensor* t : ts) b += t->nbytes();
  return b;
}

class TracedBackend final : public Backend {
 public:
  explicit TracedBackend(std::unique_ptr<Backend> inner) : in_(std::move(inner)) {}
  Device device() const override { return in_->device(); }
  std::string describe() const override { return in_->describe(); }
  Tensor zeros(const Shape& shape, DType dtype, AllocTag tag) const override {
    Span s("zeros", trace::Kind::memory, 0, numel(shape) * dtype_size(dtype));
    return in_->zeros(shape, dtype, tag);
  }

  void matmul(const Tensor& a, bool ta, const Tensor& b, bool tb, Tensor& c, double alpha, double beta) override {
    // As the backend sees them: a [numel / last, last], op(a) [m, k], op(b) [k, n].
    const int64_t a_rows = a.numel() / a.dim(-1), m = ta ? a.dim(-1) : a_rows, k = ta ? a_rows : a.dim(-1);
    const int64_t n = c.dim(-1);
    Span s("matmul", trace::Kind::gemm, 2.0 * double(m) * double(n) * double(k), bytes_of({&a, &b, &c}) + (beta != 0 ? c.nbytes() : 0));
    if (Event* e = s.event()) {
      char buf[96];
      std::snprintf(buf, sizeof buf, "m=%lld n=%lld k=%lld%s%s", (long long)m, (long long)n, (long long)k,
                    ta ? " a^T" : "", tb ? " b^T" : "");
      e->detail = buf;
    }
    in_->matmul(a, ta, b, tb, c, alpha, beta);
  }
  void add_bias(Tensor& y, const Tensor& bias) override {
    Span s("add_bias", trace::Kind::elementwise, 0, 2 * y.nbytes() + bias.nbytes());
    in_->add_bias(y, bias);
  }
  void bias_grad(const Tensor& dy, Tensor& dbias) override {
    Span s("bias_grad", trace::Kind::elementwise, 0, dy.nbytes() + 2 * dbias.nbytes());
    in_->bias_grad(dy, dbias);
  }
  void add(const Tensor& a, const Tensor& b, Tensor& out) override {
    Span s("add", trace::Kind::elementwise, 0, bytes_of({&a, &b, &out}));
    in_->add(a, b, out);
  }
  void layernorm_forward(const Tensor& x, const Tensor& gamma, const Tensor& beta, double eps, Tensor& y, Tensor& mean,
                         Tensor& rstd) override {
    Span s("layernorm_forward", trace::Kind::norm, 0, bytes_of({&x, &gamma, &beta, &y, &mean, &rstd}));
    in_->layernorm_forward(x, gamma, beta, eps, y, mean, rstd);
  }
  void layernorm_backward(const Tensor& dy, const Tensor& x, const Tensor& gamma, const Tensor& mean, const Tensor& rstd,
                          Tensor& dx, Tensor& dgamma, Tensor& dbeta) override {
    Span s("layernorm_backward", trace::Kind::norm, 0, bytes_of({&dy, &x, &gamma, &mean, &rstd, &dx, &dgamma, &dbeta}));
    in_->layernorm_backward(dy, x, gamma, mean, rstd, dx, dgamma, dbeta);
  }
  void rmsnorm_forward(const Tensor& x, const Tensor& gamma, double eps, Tensor& y, Tensor& rstd) override {
    Span s("rmsnorm_forward", trace::Kind::norm, 0, bytes_of({&x, &gamma, &y, &rstd}));
    in_->rmsnorm_forward(x, gamma, eps, y, rstd);
  }
  void rmsnorm_backward(const Tensor& dy, const Tensor& x, const Tensor& gamma, const Tensor& rstd, Tensor& dx,
                        Tensor& dgamma) override {
    Span s("rmsnorm_backward", trace::Kind::norm, 0, bytes_of({&dy, &x, &gamma, &rstd, &dx, &dgamma}));
    in_->rmsnorm_backward(dy, x, gamma, rstd, dx, dgamma);
  }
  void swiglu_forward(const Tensor& u, Tensor& g) override {
    Span s("swiglu_forward", trace::Kind::elementwise, 0, bytes_of({&u, &g}));
    in_->swiglu_forward(u, g);
  }
  void swiglu_backward(const Tensor& dg, const Tensor& u, Tensor& du) override {
    Span s("swiglu_backward", trace::Kind::elementwise, 0, bytes_of({&dg, &u, &du}));
    in_->swiglu_backward(dg, u, du);
  }
  void gelu_forward(const Tensor& x, Tensor& y) override {
    Span s("gelu_forward", trace::Kind::elementwise, 0, bytes_of({&x, &y}));
    in_->gelu_forward(x, y);
  }
  void gelu_backward(const Tensor& dy, const Tensor& x, Tensor& dx) override {
    Span s("gelu_backward", trace::Kind::elementwise, 0, bytes_of({&dy, &x, &dx}));
    in_->gelu_backward(dy, x, dx);
  }
  void rope_forward(Tensor& x, const std::vector<int64_t>& positions, double theta) override {
    Span s("rope_forward", trace::Kind::elementwise, 0, 2 * x.nbytes());
    in_->rope_forward(x, positions, theta);
  }
  void rope_backward(Tensor& dx, const std::vector<int64_t>& positions, double theta) override {
    Span s("rope_backward", trace::Kind::elementwise, 0, 2 * dx.nbytes());
    in_->rope_backward(dx, positions, theta);
  }
  void dropout_forward(const Tensor& x, Tensor& y, const std::vector<int64_t>& positions, int64_t s_global, double p,
                       uint64_t seed, uint32_t site) override {
    Span s("dropout", trace::Kind::elementwise, 0, bytes_of({&x, &y}));
    in_->dropout_forward(x, y, positions, s_global, p, seed, site);
  }
  void dropout_mask(Tensor& mask, const std::vector<int64_t>& positions, int64_t s_global, double p, uint64_t seed,
                    uint32_t site) override {
    Span s("dropout_mask", trace::Kind::elementwise, 0, mask.nbytes());
    in_->dropout_mask(mask, positions, s_global, p, seed, site);
  }
  void split_qkv(const Tensor& qkv, Tensor& q, Tensor& k, Tensor& v) override {
    Span s("split_qkv", trace::Kind::memory, 0, 2 * qkv.nbytes());
    in_->split_qkv(qkv, q, k, v);
  }
  void merge_qkv(const Tensor& dq, const Tensor& dk, const Tensor& dv, Tensor& dqkv) override {
    Span s("merge_qkv", trace::Kind::memory, 0, 2 * dqkv.nbytes());
    in_->merge_qkv(dq, dk, dv, dqkv);
  }
  void attention_forward(const AttentionParams& p, const Tensor& q, const Tensor& k, const Tensor& v, Tensor& out,
                         Tensor& lse) override {
    Span s("attention_forward", trace::Kind::attention, kernels::cpu::attention_forward_flops(p), bytes_of({&q, &k, &v, &out, &lse}));
    describe_attention(s, p);
    in_->attention_forward(p, q, k, v, out, lse);
  }
  void attention_backward(const AttentionParams& p, const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& out,
                          const Tensor& dout, const Tensor& lse, Tensor& dq, Tensor& dk, Tensor& dv) override {
    Span s("attention_backward", trace::Kind::attention, 2.5 * kernels::cpu::attention_forward_flops(p),
           bytes_of({&q, &k, &v, &out, &dout, &lse, &dq, &dk, &dv}) + dq.nbytes() + dk.nbytes() + dv.nbytes());
    describe_attention(s, p);
    in_->attention_backward(p, q, k, v, out, dout, lse, dq, dk, dv);
  }
  void lse_merge(Tensor& out, Tensor& lse, const Tensor& out_b, const Tensor& lse_b) override {
    Span s("lse_merge", trace::Kind::elementwise, 0, 2 * (out.nbytes() + lse.nbytes()) + out_b.nbytes() + lse_b.nbytes());
    in_->lse_merge(out, lse, out_b, lse_b);
  }

 private:
  static void describe_attention(Span& s, const AttentionParams& p) {
    Event* e = s.event();
    if (!e) return;
    char buf[160];
    std::snprintf(buf, sizeof buf, "b=%lld sq=%lld sk=%lld H=%lld Hkv=%lld d=%lld%s q_offset=%lld k_offset=%lld",
                  (long long)p.b, (long long)p.sq, (long long)p.sk, (long long)p.H, (long long)p.Hkv, (long long)p.d,
                  p.causal ? " causal" : "", (long long)p.q_offset, (long long)p.k_offset);
    e->detail = buf;
  }
  std::unique_ptr<Backend> in_;
};

}  // namespace

std::unique_ptr<Backend> make_traced_backend(std::unique_ptr<Backend> inner) {
  return std::make_unique<TracedBackend>(std::move(inner));
}

namespace {
class GpuClock final : public DeviceClock {
 public:
  GpuClock() { gpu::require_bound("the GPU trace clock"); }
  int64_t mark() override {
    marks_.push_back(gpu::Event::record());
    return static_cast<int64_t>(marks_.size()) - 1;
  }
  int64_t steady_ns(int64_t id) override { return marks_.at(static_cast<size_t>(id))->steady_ns(); }

 private:
  std::vector<std::shared_ptr<gpu::Event>> marks_;
};
}  // namespace

std::unique_ptr<DeviceClock> make_gpu_clock() { return std::make_unique<GpuClock>(); }

}  // namespace ringside::trace

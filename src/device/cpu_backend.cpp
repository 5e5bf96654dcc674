// The CPU backend: shape checks and dtype dispatch in front of kernels/cpu.
#include <cstring>

#include "core/error.h"
#include "device/backend.h"
#include "kernels/cpu/blas.h"
#include "kernels/cpu/ops.h"

extern "C" char* openblas_get_config(void);
extern "C" char* openblas_get_corename(void);

namespace ringside {

namespace kc = kernels::cpu;

namespace {

// Calls f.template operator()<T>() with T the element type of t.
template <class F>
void dispatch(const Tensor& t, F&& f) {
  if (t.dtype() == DType::f32) f.template operator()<float>();
  else f.template operator()<double>();
}

void same(const Tensor& a, const Tensor& b, const char* op) {
  RS_CHECK(a.defined() && b.defined(), op, ": undefined tensor");
  RS_CHECK(a.dtype() == b.dtype(), op, ": dtype mismatch (", to_string(a.dtype()), " vs ", to_string(b.dtype()), ")");
  RS_CHECK(a.device() == Device::cpu && b.device() == Device::cpu, op, ": the CPU backend needs CPU tensors");
}

void same_shape(const Tensor& a, const Tensor& b, const char* op) {
  same(a, b, op);
  RS_CHECK(a.shape() == b.shape(), op, ": shape mismatch ", to_string(a.shape()), " vs ", to_string(b.shape()));
}

// Rows and columns of t seen as a matrix [numel / last, last].
int64_t rows(const Tensor& t) { return t.ndim() == 0 ? 1 : t.numel() / t.dim(-1); }
int64_t cols(const Tensor& t) { return t.ndim() == 0 ? 1 : t.dim(-1); }

void check_positions(const Tensor& x, const std::vector<int64_t>& positions, const char* op) {
  RS_CHECK(x.ndim() >= 2 && static_cast<int64_t>(positions.size()) == x.dim(1), op, ": ", positions.size(),
           " positions for a tensor of shape ", to_string(x.shape()), " (need one per token of dim 1)");
}

class CpuBackend final : public Backend {
 public:
  CpuBackend() { kc::set_blas_single_threaded(); }

  Device device() const override { return Device::cpu; }
  std::string describe() const override {
    // openblas_get_config() starts "OpenBLAS 0.3.21 DYNAMIC_ARCH ...": keep name and version.
    const std::string config = openblas_get_config();
    const std::string version = config.substr(0, config.find(' ', config.find(' ') + 1));
    std::string d = "cpu, " + version + " (" + openblas_get_corename() + " kernels), 1 thread per GEMM call";
#if defined(__x86_64__) && defined(__GNUC__)
    // Debian 12's OpenBLAS (0.3.21) falls back to its generic kernels on CPUs newer than it
    // knows; say so, since GEMM then runs several times below the machine's peak.
    if (std::string(openblas_get_corename()) == "Prescott" && __builtin_cpu_supports("avx2"))
      d += "\n             note: OpenBLAS did not recognise this CPU and uses generic kernels; "
           "OPENBLAS_CORETYPE=Haswell (AVX2) or SkylakeX (AVX-512) is often 3-5x faster";
#endif
    return d;
  }
  Tensor zeros(const Shape& shape, DType dtype, AllocTag tag) const override {
    return Tensor::zeros(shape, dtype, tag, Device::cpu);
  }

  void matmul(const Tensor& a, bool ta, const Tensor& b, bool tb, Tensor& c, double alpha, double beta) override {
    same(a, b, "matmul");
    same(a, c, "matmul");
    const int64_t m = ta ? cols(a) : rows(a), k = ta ? rows(a) : cols(a);
    const int64_t kb = tb ? cols(b) : rows(b), n = tb ? rows(b) : cols(b);
    RS_CHECK(k == kb && rows(c) == m && cols(c) == n, "matmul: cannot multiply ", to_string(a.shape()),
             ta ? "^T" : "", " by ", to_string(b.shape()), tb ? "^T" : "", " into ", to_string(c.shape()));
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
    same_shape(x, y, "layernorm_forward");
    same_shape(gamma, beta, "layernorm_forward");
    same(x, gamma, "layernorm_forward");
    RS_CHECK(gamma.numel() == cols(x) && mean.numel() == rows(x) && rstd.numel() == rows(x),
             "layernorm_forward: gamma/mean/rstd sizes do not fit x ", to_string(x.shape()));
    dispatch(x, [&]<class T>() {
      kc::layernorm_forward(x.data<T>(), gamma.data<T>(), beta.data<T>(), rows(x), cols(x), eps, y.data<T>(),
                            mean.data<T>(), rstd.data<T>());
    });
  }

  void layernorm_backward(const Tensor& dy, const Tensor& x, const Tensor& gamma, const Tensor& mean,
                          const Tensor& rstd, Tensor& dx, Tensor& dgamma, Tensor& dbeta) override {
    same_shape(dy, x, "layernorm_backward");
    same_shape(dy, dx, "layernorm_backward");
    same_shape(gamma, dgamma, "layernorm_backward");
    same_shape(gamma, dbeta, "layernorm_backward");
    RS_CHECK(gamma.numel() == cols(x) && mean.numel() == rows(x) && rstd.numel() == rows(x),
             "layernorm_backward: gamma/mean/rstd sizes do not fit x ", to_string(x.shape()));
    dispatch(x, [&]<class T>() {
      kc::layernorm_backward(dy.data<T>(), x.data<T>(), gamma.data<T>(), mean.data<T>(), rstd.data<T>(), rows(x),
                             cols(x), dx.data<T>(), dgamma.data<T>(), dbeta.data<T>());
    });
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
    check_positions(x, positions, "dropout_forward");
    dispatch(x, [&]<class T>() {
      kc::dropout_forward(x.data<T>(), y.data<T>(), x.dim(0), x.dim(1), x.dim(2), positions.data(), s_global, p, seed,
                          site);
    });
  }

  void dropout_mask(Tensor& mask, const std::vector<int64_t>& positions, int64_t s_global, double p, uint64_t seed,
                    uint32_t site) override {
    RS_CHECK(mask.ndim() == 3, "dropout_mask: mask must be [b, s, h], got ", to_string(mask.shape()));
    check_positions(mask, positions, "dropout_mask");
    dispatch(mask, [&]<class T>() {
      kc::dropout_mask(mask.data<T>(), mask.dim(0), mask.dim(1), mask.dim(2), positions.data(), s_global, p, seed,
                       site);
    });
  }

  void split_qkv(const Tensor& qkv, Tensor& q, Tensor& k, Tensor& v) override {
    const QkvLayout L = qkv_layout(qkv, q, k, v);
    const auto* fused = static_cast<const char*>(qkv.raw_data());
    char* parts[3] = {static_cast<char*>(q.raw_data()), static_cast<char*>(k.raw_data()), static_cast<char*>(v.raw_data())};
    for (int64_t r = 0; r < L.rows; ++r)
      for (int i = 0; i < 3; ++i)
        std::memcpy(parts[i] + r * L.width[i], fused + r * L.row + L.offset[i], static_cast<size_t>(L.width[i]));
  }

  void merge_qkv(const Tensor& dq, const Tensor& dk, const Tensor& dv, Tensor& dqkv) override {
    const QkvLayout L = qkv_layout(dqkv, dq, dk, dv);
    auto* fused = static_cast<char*>(dqkv.raw_data());
    const char* parts[3] = {static_cast<const char*>(dq.raw_data()), static_cast<const char*>(dk.raw_data()),
                            static_cast<const char*>(dv.raw_data())};
    for (int64_t r = 0; r < L.rows; ++r)
      for (int i = 0; i < 3; ++i)
        std::memcpy(fused + r * L.row + L.offset[i], parts[i] + r * L.width[i], static_cast<size_t>(L.width[i]));
  }

  void attention_forward(const AttentionParams& p, const Tensor& q, const Tensor& k, const Tensor& v, Tensor& out,
                         Tensor& lse) override {
    check_attention(p, q, k, v, "attention_forward");
    check_tensor(out, q.shape(), q.dtype(), "attention_forward: out");
    check_tensor(lse, {p.b, p.H, p.sq}, q.dtype(), "attention_forward: lse");
    dispatch(q, [&]<class T>() {
      kc::attention_forward(p, q.data<T>(), k.data<T>(), v.data<T>(), out.data<T>(), lse.data<T>());
    });
  }

  void attention_backward(const AttentionParams& p, const Tensor& q, const Tensor& k, const Tensor& v,
                          const Tensor& out, const Tensor& dout, const Tensor& lse, Tensor& dq, Tensor& dk,
                          Tensor& dv) override {
    check_attention(p, q, k, v, "attention_backward");
    check_tensor(out, q.shape(), q.dtype(), "attention_backward: out");
    check_tensor(dout, q.shape(), q.dtype(), "attention_backward: dout");
    check_tensor(dq, q.shape(), q.dtype(), "attention_backward: dq");
    check_tensor(dk, k.shape(), q.dtype(), "attention_backward: dk");
    check_tensor(dv, k.shape(), q.dtype(), "attention_backward: dv");
    check_tensor(lse, {p.b, p.H, p.sq}, q.dtype(), "attention_backward: lse");
    dispatch(q, [&]<class T>() {
      kc::attention_backward(p, q.data<T>(), k.data<T>(), v.data<T>(), out.data<T>(), dout.data<T>(), lse.data<T>(),
                             dq.data<T>(), dk.data<T>(), dv.data<T>());
    });
  }

  void lse_merge(Tensor& out, Tensor& lse, const Tensor& out_b, const Tensor& lse_b) override {
    same_shape(out, out_b, "lse_merge");
    same_shape(lse, lse_b, "lse_merge");
    RS_CHECK(out.ndim() == 4 && lse.ndim() == 3 && lse.dim(0) == out.dim(0) && lse.dim(1) == out.dim(2) &&
                 lse.dim(2) == out.dim(1),
             "lse_merge: out must be [b, sq, H, d] and lse [b, H, sq], got ", to_string(out.shape()), " and ",
             to_string(lse.shape()));
    dispatch(out, [&]<class T>() {
      kc::lse_merge(out.dim(0), out.dim(1), out.dim(2), out.dim(3), out.data<T>(), lse.data<T>(), out_b.data<T>(),
                    lse_b.data<T>());
    });
  }

 private:
  void rope(Tensor& x, const std::vector<int64_t>& positions, double theta, bool backward) {
    RS_CHECK(x.ndim() == 4, "rope: x must be [b, s, heads, d], got ", to_string(x.shape()));
    check_positions(x, positions, "rope");
    dispatch(x, [&]<class T>() {
      (backward ? kc::rope_backward<T> : kc::rope_forward<T>)(x.data<T>(), x.dim(0), x.dim(1), x.dim(2), x.dim(3),
                                                               positions.data(), theta);
    });
  }

  // Where q, k and v sit in each row of the fused qkv [b, s, (H + 2 Hkv) d], in bytes.
  struct QkvLayout {
    int64_t rows, row, width[3], offset[3];
  };
  static QkvLayout qkv_layout(const Tensor& qkv, const Tensor& q, const Tensor& k, const Tensor& v) {
    same(qkv, q, "split_qkv/merge_qkv");
    same(q, k, "split_qkv/merge_qkv");
    same(q, v, "split_qkv/merge_qkv");
    RS_CHECK(q.ndim() == 4 && k.ndim() == 4 && k.shape() == v.shape() && qkv.ndim() == 3 && q.dim(0) == qkv.dim(0) &&
                 q.dim(1) == qkv.dim(1) && k.dim(0) == q.dim(0) && k.dim(1) == q.dim(1) && q.dim(3) == k.dim(3) &&
                 qkv.dim(2) == (q.dim(2) + 2 * k.dim(2)) * q.dim(3),
             "split_qkv/merge_qkv: shapes do not fit: qkv ", to_string(qkv.shape()), ", q ", to_string(q.shape()),
             ", k ", to_string(k.shape()), ", v ", to_string(v.shape()));
    const int64_t es = dtype_size(qkv.dtype()), wq = q.dim(2) * q.dim(3) * es, wk = k.dim(2) * k.dim(3) * es;
    return {rows(qkv), cols(qkv) * es, {wq, wk, wk}, {0, wq, wq + wk}};
  }

  static void check_attention(const AttentionParams& p, const Tensor& q, const Tensor& k, const Tensor& v, const char* op) {
    kc::validate(p);
    same(q, k, op);
    same(q, v, op);
    check_tensor(q, {p.b, p.sq, p.H, p.d}, q.dtype(), op);
    check_tensor(k, {p.b, p.sk, p.Hkv, p.d}, q.dtype(), op);
    check_tensor(v, {p.b, p.sk, p.Hkv, p.d}, q.dtype(), op);
  }
};

}  // namespace

std::unique_ptr<Backend> make_cpu_backend() { return std::make_unique<CpuBackend>(); }

}  // namespace ringside

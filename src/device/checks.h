// The argument checks every backend makes before it runs an op, shared so that the CPU and
// CUDA backends reject exactly the same calls with the same messages.
#pragma once
#include <initializer_list>
#include <vector>

#include "core/error.h"
#include "core/tensor.h"
#include "kernels/cpu/attention.h"

namespace ringside::checks {

/// Both defined, the same dtype, and on `device`.
inline void same(const Tensor& a, const Tensor& b, const char* op, Device device) {
  RS_CHECK(a.defined() && b.defined(), op, ": undefined tensor");
  RS_CHECK(a.dtype() == b.dtype(), op, ": dtype mismatch (", to_string(a.dtype()), " vs ", to_string(b.dtype()), ")");
  RS_CHECK(a.device() == device && b.device() == device, op, ": the ", to_string(device), " backend needs ",
           to_string(device), " tensors, got ", to_string(a.device()), " and ", to_string(b.device()));
}

inline void same_shape(const Tensor& a, const Tensor& b, const char* op, Device device) {
  same(a, b, op, device);
  RS_CHECK(a.shape() == b.shape(), op, ": shape mismatch ", to_string(a.shape()), " vs ", to_string(b.shape()));
}

/// Rows and columns of t seen as a matrix [numel / last, last].
inline int64_t rows(const Tensor& t) { return t.ndim() == 0 ? 1 : t.numel() / t.dim(-1); }
inline int64_t cols(const Tensor& t) { return t.ndim() == 0 ? 1 : t.dim(-1); }

/// matmul's m, n, k for c = op(a) op(b), after checking that the shapes fit.
struct GemmShape {
  int64_t m, n, k;
};
inline GemmShape gemm_shape(const Tensor& a, bool ta, const Tensor& b, bool tb, const Tensor& c, Device device) {
  same(a, b, "matmul", device);
  same(a, c, "matmul", device);
  const int64_t m = ta ? cols(a) : rows(a), k = ta ? rows(a) : cols(a);
  const int64_t kb = tb ? cols(b) : rows(b), n = tb ? rows(b) : cols(b);
  RS_CHECK(k == kb && rows(c) == m && cols(c) == n, "matmul: cannot multiply ", to_string(a.shape()), ta ? "^T" : "",
           " by ", to_string(b.shape()), tb ? "^T" : "", " into ", to_string(c.shape()));
  return {m, n, k};
}

inline void positions(const Tensor& x, const std::vector<int64_t>& pos, const char* op) {
  RS_CHECK(x.ndim() >= 2 && static_cast<int64_t>(pos.size()) == x.dim(1), op, ": ", pos.size(),
           " positions for a tensor of shape ", to_string(x.shape()), " (need one per token of dim 1)");
}

/// A norm's tensors: `rows_like` (x, y; dy, x, dx) all of x's shape, gamma [h] on x's device
/// and dtype with `gamma_like` (beta, the gradients) of its shape, each statistic [N].
inline void norm_shapes(const char* op, Device device, const Tensor& x, std::initializer_list<const Tensor*> rows_like,
                        const Tensor& gamma, std::initializer_list<const Tensor*> gamma_like,
                        std::initializer_list<const Tensor*> stats) {
  for (const Tensor* t : rows_like) same_shape(x, *t, op, device);
  for (const Tensor* t : gamma_like) same_shape(gamma, *t, op, device);
  same(x, gamma, op, device);
  bool fits = gamma.numel() == cols(x);
  for (const Tensor* t : stats) fits = fits && t->numel() == rows(x);
  RS_CHECK(fits, op, ": gamma/mean/rstd sizes do not fit x ", to_string(x.shape()));
}
inline void layernorm_forward(const Tensor& x, const Tensor& gamma, const Tensor& beta, const Tensor& y,
                              const Tensor& mean, const Tensor& rstd, Device device) {
  norm_shapes("layernorm_forward", device, x, {&y}, gamma, {&beta}, {&mean, &rstd});
}
inline void layernorm_backward(const Tensor& dy, const Tensor& x, const Tensor& gamma, const Tensor& mean,
                               const Tensor& rstd, const Tensor& dx, const Tensor& dgamma, const Tensor& dbeta,
                               Device device) {
  norm_shapes("layernorm_backward", device, dy, {&x, &dx}, gamma, {&dgamma, &dbeta}, {&mean, &rstd});
}
inline void rmsnorm_forward(const Tensor& x, const Tensor& gamma, const Tensor& y, const Tensor& rstd, Device device) {
  norm_shapes("rmsnorm_forward", device, x, {&y}, gamma, {}, {&rstd});
}
inline void rmsnorm_backward(const Tensor& dy, const Tensor& x, const Tensor& gamma, const Tensor& rstd,
                             const Tensor& dx, const Tensor& dgamma, Device device) {
  norm_shapes("rmsnorm_backward", device, dy, {&x, &dx}, gamma, {&dgamma}, {&rstd});
}
/// u [.., 2F] and g [.., F] with the same rows; returns F.
inline int64_t swiglu_width(const Tensor& u, const Tensor& g, const char* op, Device device) {
  same(u, g, op, device);
  RS_CHECK(rows(u) == rows(g) && cols(u) == 2 * cols(g), op, ": u ", to_string(u.shape()), " must be g ",
           to_string(g.shape()), " with twice the columns (gate | up)");
  return cols(g);
}

/// Where q, k and v sit in each row of the fused qkv [b, s, (H + 2 Hkv) d], in bytes.
struct QkvLayout {
  int64_t rows, row, width[3], offset[3];
};
inline QkvLayout qkv_layout(const Tensor& qkv, const Tensor& q, const Tensor& k, const Tensor& v, Device device) {
  same(qkv, q, "split_qkv/merge_qkv", device);
  same(q, k, "split_qkv/merge_qkv", device);
  same(q, v, "split_qkv/merge_qkv", device);
  RS_CHECK(q.ndim() == 4 && k.ndim() == 4 && k.shape() == v.shape() && qkv.ndim() == 3 && q.dim(0) == qkv.dim(0) &&
               q.dim(1) == qkv.dim(1) && k.dim(0) == q.dim(0) && k.dim(1) == q.dim(1) && q.dim(3) == k.dim(3) &&
               qkv.dim(2) == (q.dim(2) + 2 * k.dim(2)) * q.dim(3),
           "split_qkv/merge_qkv: shapes do not fit: qkv ", to_string(qkv.shape()), ", q ", to_string(q.shape()), ", k ",
           to_string(k.shape()), ", v ", to_string(v.shape()));
  const int64_t es = dtype_size(qkv.dtype()), wq = q.dim(2) * q.dim(3) * es, wk = k.dim(2) * k.dim(3) * es;
  return {rows(qkv), cols(qkv) * es, {wq, wk, wk}, {0, wq, wq + wk}};
}

inline void attention(const kernels::cpu::AttentionParams& p, const Tensor& q, const Tensor& k, const Tensor& v,
                      const char* op, Device device) {
  kernels::cpu::validate(p);
  same(q, k, op, device);
  same(q, v, op, device);
  check_tensor(q, {p.b, p.sq, p.H, p.d}, q.dtype(), op);
  check_tensor(k, {p.b, p.sk, p.Hkv, p.d}, q.dtype(), op);
  check_tensor(v, {p.b, p.sk, p.Hkv, p.d}, q.dtype(), op);
}

inline void attention_backward(const kernels::cpu::AttentionParams& p, const Tensor& q, const Tensor& k, const Tensor& v,
                               const Tensor& out, const Tensor& dout, const Tensor& lse, const Tensor& dq,
                               const Tensor& dk, const Tensor& dv, Device device) {
  attention(p, q, k, v, "attention_backward", device);
  check_tensor(out, q.shape(), q.dtype(), "attention_backward: out");
  check_tensor(dout, q.shape(), q.dtype(), "attention_backward: dout");
  check_tensor(dq, q.shape(), q.dtype(), "attention_backward: dq");
  check_tensor(dk, k.shape(), q.dtype(), "attention_backward: dk");
  check_tensor(dv, k.shape(), q.dtype(), "attention_backward: dv");
  check_tensor(lse, {p.b, p.H, p.sq}, q.dtype(), "attention_backward: lse");
}

inline void lse_merge(const Tensor& out, const Tensor& lse, const Tensor& out_b, const Tensor& lse_b, Device device) {
  same_shape(out, out_b, "lse_merge", device);
  same_shape(lse, lse_b, "lse_merge", device);
  RS_CHECK(out.ndim() == 4 && lse.ndim() == 3 && lse.dim(0) == out.dim(0) && lse.dim(1) == out.dim(2) &&
               lse.dim(2) == out.dim(1),
           "lse_merge: out must be [b, sq, H, d] and lse [b, H, sq], got ", to_string(out.shape()), " and ",
           to_string(lse.shape()));
}

}  // namespace ringside::checks

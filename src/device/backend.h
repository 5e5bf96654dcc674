// Backend: the math a rank can run, on Tensors, for one device. Strategies and the reference
// layer only orchestrate; every FLOP goes through here. The CPU backend (cpu_backend.cpp)
// calls kernels/cpu and OpenBLAS; the CUDA backend will call kernels/cuda and cuBLAS.
//
// Shapes use: n rows (tokens, b*s flattened), h hidden, b batch, s local sequence length,
// heads and d per head. Every op checks its shapes and dtypes and throws ringside::Error
// naming the op on a mismatch. Ops that "accumulate" add into their output (so partial
// gradients from several blocks or ranks sum); the others overwrite.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "core/tensor.h"
#include "kernels/cpu/attention.h"

namespace ringside {

using kernels::cpu::AttentionParams;

class Backend {
 public:
  virtual ~Backend() = default;
  virtual Device device() const = 0;
  /// "cpu (OpenBLAS 0.3.21, 1 thread per call)" and the like.
  virtual std::string describe() const = 0;

  /// New storage on this backend's device.
  Tensor empty(const Shape& shape, DType dtype, AllocTag tag) const { return Tensor::empty(shape, dtype, tag, device()); }
  virtual Tensor zeros(const Shape& shape, DType dtype, AllocTag tag) const = 0;

  /// c = alpha op(a) op(b) + beta c. Each tensor is seen as a matrix [numel / last, last]
  /// (so activations [b, s, h] are [b*s, h]); op(x) is x or x^T. FLOPs: 2 m n k.
  virtual void matmul(const Tensor& a, bool trans_a, const Tensor& b, bool trans_b, Tensor& c, double alpha = 1,
                      double beta = 0) = 0;
  /// y[r, :] += bias[:] over rows r of y [n, h]; bias [h].
  virtual void add_bias(Tensor& y, const Tensor& bias) = 0;
  /// dbias [h] += column sums of dy [n, h] (accumulates).
  virtual void bias_grad(const Tensor& dy, Tensor& dbias) = 0;
  /// out = a + b, elementwise, equal shapes (out may alias a or b).
  virtual void add(const Tensor& a, const Tensor& b, Tensor& out) = 0;

  /// LayerNorm over the last dim: x, y [n, h]; gamma, beta [h]; mean, rstd [n] (written).
  virtual void layernorm_forward(const Tensor& x, const Tensor& gamma, const Tensor& beta, double eps, Tensor& y,
                                 Tensor& mean, Tensor& rstd) = 0;
  /// dx written; dgamma and dbeta accumulate.
  virtual void layernorm_backward(const Tensor& dy, const Tensor& x, const Tensor& gamma, const Tensor& mean,
                                  const Tensor& rstd, Tensor& dx, Tensor& dgamma, Tensor& dbeta) = 0;
  /// RMSNorm over the last dim: x, y [n, h]; gamma [h]; rstd [n] (written).
  virtual void rmsnorm_forward(const Tensor& x, const Tensor& gamma, double eps, Tensor& y, Tensor& rstd) = 0;
  /// dx written; dgamma accumulates.
  virtual void rmsnorm_backward(const Tensor& dy, const Tensor& x, const Tensor& gamma, const Tensor& rstd, Tensor& dx,
                                Tensor& dgamma) = 0;
  /// SwiGLU's product g = SiLU(gate) * up: u [.., 2F] (each row's gate columns, then up's), g [.., F].
  virtual void swiglu_forward(const Tensor& u, Tensor& g) = 0;
  /// From dg [.., F]: du [.., 2F] (gate and up gradients, u's layout), written.
  virtual void swiglu_backward(const Tensor& dg, const Tensor& u, Tensor& du) = 0;
  /// Exact-erf GeLU, elementwise.
  virtual void gelu_forward(const Tensor& x, Tensor& y) = 0;
  virtual void gelu_backward(const Tensor& dy, const Tensor& x, Tensor& dx) = 0;

  /// RoPE in place on x [b, s, heads, d] at the global positions [s] of the local tokens.
  virtual void rope_forward(Tensor& x, const std::vector<int64_t>& positions, double theta) = 0;
  virtual void rope_backward(Tensor& dx, const std::vector<int64_t>& positions, double theta) = 0;

  /// Dropout on x [b, s, h] -> y (may alias): see kernels/cpu/ops.h. positions [s] are global;
  /// s_global is the full sequence length (global token index = batch * s_global + position).
  virtual void dropout_forward(const Tensor& x, Tensor& y, const std::vector<int64_t>& positions, int64_t s_global,
                               double p, uint64_t seed, uint32_t site) = 0;
  /// out = residual + dropout(y + bias), the end of each sublayer (Megatron's fused
  /// bias_dropout_add): y, residual, out [b, s, h]; bias [h] or undefined (no bias); dropout as
  /// dropout_forward's. y's values are left unspecified. Bit for bit add_bias, dropout_forward
  /// and add in turn, which is what this default does (so a traced run shows the three); the
  /// CPU backend makes one pass over memory instead of three.
  virtual void bias_dropout_add(Tensor& y, const Tensor& bias, const std::vector<int64_t>& positions, int64_t s_global,
                                double p, uint64_t seed, uint32_t site, const Tensor& residual, Tensor& out) {
    if (bias.defined()) add_bias(y, bias);
    dropout_forward(y, y, positions, s_global, p, seed, site);
    add(residual, y, out);
  }
  /// The 0/1 keep mask of dropout_forward, [b, s, h].
  virtual void dropout_mask(Tensor& mask, const std::vector<int64_t>& positions, int64_t s_global, double p,
                            uint64_t seed, uint32_t site) = 0;

  /// Splits qkv [b, s, (H + 2 Hkv) d] (columns: q heads | k heads | v heads) into
  /// q [b, s, H, d], k and v [b, s, Hkv, d].
  virtual void split_qkv(const Tensor& qkv, Tensor& q, Tensor& k, Tensor& v) = 0;
  /// The inverse of split_qkv: dqkv [b, s, (H + 2 Hkv) d] from dq, dk, dv.
  virtual void merge_qkv(const Tensor& dq, const Tensor& dk, const Tensor& dv, Tensor& dqkv) = 0;

  /// Blockwise attention (kernels/cpu/attention.h for layouts and semantics).
  virtual void attention_forward(const AttentionParams& p, const Tensor& q, const Tensor& k, const Tensor& v,
                                 Tensor& out, Tensor& lse) = 0;
  /// Accumulates into dq, dk, dv.
  virtual void attention_backward(const AttentionParams& p, const Tensor& q, const Tensor& k, const Tensor& v,
                                  const Tensor& out, const Tensor& dout, const Tensor& lse, Tensor& dq, Tensor& dk,
                                  Tensor& dv) = 0;
  /// Merges (out_b, lse_b) into (out, lse): see kernels/cpu/attention.h.
  virtual void lse_merge(Tensor& out, Tensor& lse, const Tensor& out_b, const Tensor& lse_b) = 0;
};

/// The CPU backend: OpenBLAS GEMM, run single-threaded per call since ranks run concurrently.
std::unique_ptr<Backend> make_cpu_backend();
/// The dry run's backend (what-if model): every op does nothing; wrapped in a traced backend it
/// records each op's FLOPs and bytes. Use with tensors allocated inside a DryRun.
std::unique_ptr<Backend> make_dry_backend();

/// The CUDA backend: kernels/cuda and cuBLAS (fp32) on the calling GPU rank's compute stream
/// (core/gpu.h); ops return once launched. Throws ringside::Error in a build without CUDA.
std::unique_ptr<Backend> make_cuda_backend();
/// The backend for `device`: make_cpu_backend() or make_cuda_backend().
std::unique_ptr<Backend> make_backend(Device device);

}  // namespace ringside

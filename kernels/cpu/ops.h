// The CPU kernels of the layer other than attention: LayerNorm and RMSNorm, GeLU and SwiGLU,
// RoPE, dropout and the bias helpers. Raw pointers, row-major, templated on float and double; the shapes below use
// n for a number of rows (tokens) and h for the row width.
#pragma once
#include <cstdint>

namespace ringside::kernels::cpu {

/// LayerNorm over the last dimension (Ba et al. 2016): y = (x - mean) * rstd * gamma + beta with
/// rstd = 1 / sqrt(var + eps), var the biased variance. x, y [n, h]; gamma, beta [h]; mean and
/// rstd [n] are written for the backward.
template <class T>
void layernorm_forward(const T* x, const T* gamma, const T* beta, int64_t n, int64_t h, double eps, T* y, T* mean,
                       T* rstd);

/// LayerNorm backward. With xhat = (x - mean) rstd and g = dy gamma:
///   dx = rstd (g - mean(g) - xhat mean(g xhat))   (written),
///   dgamma += sum_rows dy xhat,  dbeta += sum_rows dy   (accumulated, so partial sums add up).
template <class T>
void layernorm_backward(const T* dy, const T* x, const T* gamma, const T* mean, const T* rstd, int64_t n, int64_t h,
                        T* dx, T* dgamma, T* dbeta);

/// RMSNorm over the last dimension (Zhang & Sennrich 2019): y = x * rstd * gamma with
/// rstd = 1 / sqrt(mean(x^2) + eps), no mean subtracted and no beta. x, y [n, h]; gamma [h];
/// rstd [n] is written for the backward. float sums the squares in vector lanes, as LayerNorm.
template <class T>
void rmsnorm_forward(const T* x, const T* gamma, int64_t n, int64_t h, double eps, T* y, T* rstd);

/// RMSNorm backward. With xhat = x rstd and g = dy gamma:
///   dx = rstd (g - xhat mean(g xhat))   (written),   dgamma += sum_rows dy xhat   (accumulated).
template <class T>
void rmsnorm_backward(const T* dy, const T* x, const T* gamma, const T* rstd, int64_t n, int64_t h, T* dx, T* dgamma);

/// SwiGLU's product (Shazeer 2020, as Llama's MLP): g = SiLU(a) * b with SiLU(a) = a sigmoid(a),
/// for u [n, 2f] holding each row's gate a (columns 0 .. f-1) then up b (f .. 2f-1); g [n, f].
template <class T> void swiglu_forward(const T* u, int64_t n, int64_t f, T* g);
/// Its backward from dg [n, f]: with sigma = sigmoid(a),
///   da = dg b sigma (1 + a (1 - sigma)),   db = dg SiLU(a),
/// written into du [n, 2f] in u's layout (gate then up columns).
template <class T> void swiglu_backward(const T* dg, const T* u, int64_t n, int64_t f, T* du);

/// Exact GeLU (Hendrycks & Gimpel 2016): y = x Phi(x) = 0.5 x (1 + erf(x / sqrt 2)). x, y [n].
template <class T> void gelu_forward(const T* x, int64_t n, T* y);
/// dx = dy (Phi(x) + x phi(x)), phi the standard normal density. Written, not accumulated.
template <class T> void gelu_backward(const T* dy, const T* x, int64_t n, T* dx);

/// RoPE (Su et al. 2021) in place on x [b, s, heads, d], rotate-half convention (as in
/// GPT-NeoX and Llama): for i < d/2, with angle a = pos * theta^(-2i/d),
///   (x_i, x_{i+d/2}) -> (x_i cos a - x_{i+d/2} sin a, x_{i+d/2} cos a + x_i sin a).
/// positions[t] is the *global* position of local token t (the same for every batch row).
/// Angles are computed in double whatever T is, since pos * freq loses digits in float at
/// long sequence lengths. Requires d even.
template <class T>
void rope_forward(T* x, int64_t b, int64_t s, int64_t heads, int64_t d, const int64_t* positions, double theta);
/// The backward of a rotation is the rotation by -a (its transpose), applied in place to dx.
template <class T>
void rope_backward(T* dx, int64_t b, int64_t s, int64_t heads, int64_t d, const int64_t* positions, double theta);

/// Dropout on x [b, s, h] at `site`: y = x * keep / (1 - p), keep drawn by dropout_keep() for
/// global token index bi * s_global + positions[t] and feature j. positions[t] is the global
/// position of local token t. p = 0 copies. Requires 0 <= p < 1. y may alias x. The backward
/// is the same function applied to dy.
template <class T>
void dropout_forward(const T* x, T* y, int64_t b, int64_t s, int64_t h, const int64_t* positions, int64_t s_global,
                     double p, uint64_t seed, uint32_t site);
/// out = residual + dropout(y + bias) in one pass (Megatron's bias_dropout_add): y, residual,
/// out [b, s, h]; bias [h], or null for none; dropout as dropout_forward's. The same float
/// operations in the same order as add_bias, dropout_forward and an add, so the same bits;
/// out may alias residual.
template <class T>
void bias_dropout_add(const T* y, const T* bias, const T* residual, T* out, int64_t b, int64_t s, int64_t h,
                      const int64_t* positions, int64_t s_global, double p, uint64_t seed, uint32_t site);
/// The 0/1 mask of dropout_forward, as T, [b, s, h].
template <class T>
void dropout_mask(T* mask, int64_t b, int64_t s, int64_t h, const int64_t* positions, int64_t s_global, double p,
                  uint64_t seed, uint32_t site);

/// y[r, :] += bias for every row r of y [n, h].
template <class T> void add_bias(T* y, const T* bias, int64_t n, int64_t h);
/// dbias += sum over rows of dy [n, h].
template <class T> void bias_grad(const T* dy, int64_t n, int64_t h, T* dbias);

}  // namespace ringside::kernels::cpu

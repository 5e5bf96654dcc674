// The vectorised float primitives: the attention kernels' row work between two GEMMs (version 1)
// and GeLU's erf.
// The kernels work in base 2 (scores pre-multiplied by log2 e), as FlashAttention does: 2^x
// needs no ln 2 range reduction. The float versions are vectorised (OpenMP SIMD pragmas, compiled
// once per path of isa.h and run on the path in force, RINGSIDE_CPU_ISA's) and use a polynomial
// 2^x accurate to about 2 ulp; double uses std::exp2, since it is the reference's precision.
#pragma once
#include <cstdint>

namespace ringside::kernels::cpu {

/// max_i s[i] (-inf for n = 0 or all -inf).
float row_max(const float* s, int64_t n);
double row_max(const double* s, int64_t n);

/// s[i] = 2^(s[i] - m) in place; returns the sum. 2^(-inf) is exactly 0.
float exp2_shift_sum(float* s, int64_t n, float m);
double exp2_shift_sum(double* s, int64_t n, double m);

/// x[i] *= a.
void scale_row(float* x, int64_t n, float a);
void scale_row(double* x, int64_t n, double a);

/// sum_i a[i] b[i].
float dot(const float* a, const float* b, int64_t n);
double dot(const double* a, const double* b, int64_t n);

/// dp[i] = p[i] * (dp[i] - D): the softmax gradient of one row (Dao 2023, eq. for dS).
void softmax_grad_row(const float* p, float* dp, int64_t n, float D);
void softmax_grad_row(const double* p, double* dp, int64_t n, double D);

/// Exact GeLU in float, vectorised: erf by Abramowitz & Stegun 7.1.26 (absolute error
/// <= 1.5e-7) with the exp of fast_exp2f. The float kernels of ops.h's gelu_forward and
/// gelu_backward (double keeps std::erf). y may alias x; dx may alias dy.
void gelu_forward_f32(const float* x, int64_t n, float* y);
void gelu_backward_f32(const float* dy, const float* x, int64_t n, float* dx);

/// SwiGLU in float, vectorised: sigmoid(a) = 1 / (1 + 2^(-a log2 e)) with fast_exp2f's
/// polynomial (which stops at 2^127, so a < -88 gives sigmoid 2^-127, not 0 / inf or a NaN).
/// The float kernels of ops.h's swiglu_forward and swiglu_backward (double keeps std::exp);
/// u [n, 2f] (gate | up), g and dg [n, f], du [n, 2f].
void swiglu_forward_f32(const float* u, int64_t n, int64_t f, float* g);
void swiglu_backward_f32(const float* dg, const float* u, int64_t n, int64_t f, float* du);

/// The dropout words of one token: words[4 g + w] = dropout_bits4(seed, site, token, g)[w] for
/// g < groups (bit for bit; Philox4x32-10 vectorised across groups). words holds 4 groups.
void dropout_words(uint64_t seed, uint32_t site, uint64_t token, int64_t groups, uint32_t* words);

/// 2^x in float: x = n + r with n = round(x), r in [-1/2, 1/2], 2^r by its degree-7 Taylor
/// polynomial (truncation 5e-9; about 2 ulp in all), 2^n in the exponent field. 0 for
/// x <= -127 (so 2^-inf = 0); NaN stays NaN. Exposed for its test against std::exp2.
float fast_exp2f(float x);

}  // namespace ringside::kernels::cpu

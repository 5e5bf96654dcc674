// Row primitives of the attention kernels: the O(tile) work between two GEMMs.
// The float versions are vectorised (OpenMP SIMD pragmas, one clone per x86 ISA level chosen
// at load time) and use a polynomial exp accurate to about 2 ulp; double uses std::exp, since
// it is the reference's precision.
#pragma once
#include <cstdint>

namespace ringside::kernels::cpu {

/// max_i s[i] (-inf for n = 0 or all -inf).
float row_max(const float* s, int64_t n);
double row_max(const double* s, int64_t n);

/// s[i] = exp(s[i] - m) in place; returns the sum. exp(-inf - m) is exactly 0.
float exp_shift_sum(float* s, int64_t n, float m);
double exp_shift_sum(double* s, int64_t n, double m);

/// x[i] *= a.
void scale_row(float* x, int64_t n, float a);
void scale_row(double* x, int64_t n, double a);

/// sum_i a[i] b[i].
float dot(const float* a, const float* b, int64_t n);
double dot(const double* a, const double* b, int64_t n);

/// dp[i] = p[i] * (dp[i] - D): the softmax gradient of one row (Dao 2023, eq. for dS).
void softmax_grad_row(const float* p, float* dp, int64_t n, float D);
void softmax_grad_row(const double* p, double* dp, int64_t n, double D);

/// exp(x) in float: Cephes-style range reduction and degree-6 polynomial (max error about
/// 2 ulp), 0 for x < -87.3 (so exp(-inf) = 0). Exposed for its test against std::exp.
float fast_expf(float x);

}  // namespace ringside::kernels::cpu

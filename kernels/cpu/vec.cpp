#include "kernels/cpu/vec.h"

#include <algorithm>
#include <cmath>
#include <limits>

// One clone per ISA level, picked by the loader (GCC ifunc) from the CPU's *features*:
// AVX-512, AVX2, baseline SSE2. ("arch=..." clones would test the CPU *model* and fall back to
// the baseline on any newer model.) The build stays portable to any x86-64 while the hot loops
// use the machine's vector width.
#if defined(__GNUC__) && !defined(__clang__) && defined(__x86_64__)
#define RS_VEC_CLONES __attribute__((target_clones("avx512f", "avx2", "default")))
#else
#define RS_VEC_CLONES
#endif

namespace ringside::kernels::cpu {

namespace {
// always_inline: without it GCC will not inline a target-less function into the clones, and
// the loops calling it stay scalar.
__attribute__((always_inline)) inline float expf_poly(float x) {
  // exp(x) = 2^n exp(r), n = round(x / ln 2), r = x - n ln 2 in [-ln2/2, ln2/2]; ln 2 is split
  // in two (C1 exact in float) so that r keeps its low bits (Cephes expf).
  constexpr float kLo = -87.3f, kHi = 88.3f, kLog2e = 1.44269504088896341f;
  constexpr float C1 = 0.693359375f, C2 = -2.12194440e-4f;
  constexpr float kRound = 12582912.0f;  // 1.5 * 2^23: adding it rounds to the nearest integer
  // Ternaries, not std::min/max, and a union pun, not std::bit_cast: the forms GCC vectorises.
  float xc = x < kLo ? kLo : x;
  xc = xc > kHi ? kHi : xc;
  const float n = (xc * kLog2e + kRound) - kRound;
  const float r = (xc - n * C1) - n * C2;
  float p = 1.9875691500e-4f;
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  p = p * r * r + r + 1.0f;
  union {
    int32_t i;
    float f;
  } two_n;
  two_n.i = (static_cast<int32_t>(n) + 127) << 23;  // 2^n built in the exponent field
  return x < kLo ? 0.0f : p * two_n.f;
}
}  // namespace

float fast_expf(float x) { return expf_poly(x); }

RS_VEC_CLONES float row_max(const float* s, int64_t n) {
  float m = -std::numeric_limits<float>::infinity();
#pragma omp simd reduction(max : m)
  for (int64_t i = 0; i < n; ++i) m = s[i] > m ? s[i] : m;
  return m;
}

RS_VEC_CLONES float exp_shift_sum(float* s, int64_t n, float m) {
  float sum = 0;
#pragma omp simd reduction(+ : sum)
  for (int64_t i = 0; i < n; ++i) {
    const float e = expf_poly(s[i] - m);
    s[i] = e;
    sum += e;
  }
  return sum;
}

RS_VEC_CLONES void scale_row(float* x, int64_t n, float a) {
#pragma omp simd
  for (int64_t i = 0; i < n; ++i) x[i] *= a;
}

RS_VEC_CLONES float dot(const float* a, const float* b, int64_t n) {
  float sum = 0;
#pragma omp simd reduction(+ : sum)
  for (int64_t i = 0; i < n; ++i) sum += a[i] * b[i];
  return sum;
}

RS_VEC_CLONES void softmax_grad_row(const float* p, float* dp, int64_t n, float D) {
#pragma omp simd
  for (int64_t i = 0; i < n; ++i) dp[i] = p[i] * (dp[i] - D);
}

double row_max(const double* s, int64_t n) {
  double m = -std::numeric_limits<double>::infinity();
  for (int64_t i = 0; i < n; ++i) m = std::max(m, s[i]);
  return m;
}

double exp_shift_sum(double* s, int64_t n, double m) {
  double sum = 0;
  for (int64_t i = 0; i < n; ++i) sum += (s[i] = std::exp(s[i] - m));
  return sum;
}

void scale_row(double* x, int64_t n, double a) {
  for (int64_t i = 0; i < n; ++i) x[i] *= a;
}

double dot(const double* a, const double* b, int64_t n) {
  double sum = 0;
  for (int64_t i = 0; i < n; ++i) sum += a[i] * b[i];
  return sum;
}

void softmax_grad_row(const double* p, double* dp, int64_t n, double D) {
  for (int64_t i = 0; i < n; ++i) dp[i] = p[i] * (dp[i] - D);
}

}  // namespace ringside::kernels::cpu

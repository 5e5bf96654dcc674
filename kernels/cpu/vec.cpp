#include "kernels/cpu/vec.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "kernels/cpu/isa_paths.h"

// Each float loop is written once (name_body, vectorised by its OpenMP SIMD pragma) and compiled
// once per vector path of isa.h, chosen at run time by active_cpu_isa() (isa_paths.h): a
// path's lane count and FMAs decide its float bits, so RINGSIDE_CPU_ISA picks them, not the CPU.
namespace ringside::kernels::cpu {

namespace {
// RS_INLINE (always_inline): without it GCC will not inline a target-less function into the
// paths' functions, and the loops calling it stay scalar.
RS_INLINE float exp2_poly(float x) {
  constexpr float kRound = 12582912.0f;  // 1.5 * 2^23: adding it rounds to the nearest integer
  // Ternaries, not std::min/max, and a union pun, not std::bit_cast: the forms GCC vectorises.
  float xc = x < -127.0f ? -127.0f : x;  // n = -127 builds the bit pattern 0, so 2^x = 0
  xc = xc > 127.0f ? 127.0f : xc;
  const float n = (xc + kRound) - kRound;
  const float r = xc - n;  // exact, in [-1/2, 1/2]
  // 2^r = e^(r ln 2) = sum_k (ln 2)^k r^k / k!, Horner form.
  float p = 1.5252733804059838e-05f;
  p = p * r + 1.5403530393381606e-04f;
  p = p * r + 1.3333558146428441e-03f;
  p = p * r + 9.6181291076284772e-03f;
  p = p * r + 5.5504108664821576e-02f;
  p = p * r + 2.4022650695910071e-01f;
  p = p * r + 6.9314718055994531e-01f;
  p = p * r + 1.0f;
  union {
    int32_t i;
    float f;
  } two_n;
  two_n.i = (static_cast<int32_t>(n) + 127) << 23;  // 2^n built in the exponent field
  return p * two_n.f;
}
}  // namespace

float fast_exp2f(float x) { return exp2_poly(x); }

static RS_INLINE float row_max_body(const float* s, int64_t n) {
  float m = -std::numeric_limits<float>::infinity();
#pragma omp simd reduction(max : m)
  for (int64_t i = 0; i < n; ++i) m = s[i] > m ? s[i] : m;
  return m;
}
RS_ISA_DISPATCH(float, row_max, (const float* s, int64_t n), (s, n))

static RS_INLINE float exp2_shift_sum_body(float* s, int64_t n, float m) {
  float sum = 0;
#pragma omp simd reduction(+ : sum)
  for (int64_t i = 0; i < n; ++i) {
    const float e = exp2_poly(s[i] - m);
    s[i] = e;
    sum += e;
  }
  return sum;
}
RS_ISA_DISPATCH(float, exp2_shift_sum, (float* s, int64_t n, float m), (s, n, m))

static RS_INLINE void scale_row_body(float* x, int64_t n, float a) {
#pragma omp simd
  for (int64_t i = 0; i < n; ++i) x[i] *= a;
}
RS_ISA_DISPATCH(void, scale_row, (float* x, int64_t n, float a), (x, n, a))

static RS_INLINE float dot_body(const float* a, const float* b, int64_t n) {
  float sum = 0;
#pragma omp simd reduction(+ : sum)
  for (int64_t i = 0; i < n; ++i) sum += a[i] * b[i];
  return sum;
}
RS_ISA_DISPATCH(float, dot, (const float* a, const float* b, int64_t n), (a, b, n))

static RS_INLINE void softmax_grad_row_body(const float* p, float* dp, int64_t n, float D) {
#pragma omp simd
  for (int64_t i = 0; i < n; ++i) dp[i] = p[i] * (dp[i] - D);
}
RS_ISA_DISPATCH(void, softmax_grad_row, (const float* p, float* dp, int64_t n, float D), (p, dp, n, D))

namespace {
// erf(x) by Abramowitz & Stegun 7.1.26: 1 - t (a1 + t (a2 + t (a3 + t (a4 + t a5)))) e^(-x^2),
// t = 1 / (1 + p |x|), for x >= 0, odd in x; absolute error <= 1.5e-7 (float's own is 6e-8 at 1).
RS_INLINE float erf_as(float x) {
  const float ax = x < 0 ? -x : x;
  const float t = 1.0f / (1.0f + 0.3275911f * ax);
  float poly = 1.061405429f;
  poly = poly * t - 1.453152027f;
  poly = poly * t + 1.421413741f;
  poly = poly * t - 0.284496736f;
  poly = poly * t + 0.254829592f;
  const float e = 1.0f - t * poly * exp2_poly(-1.4426950408889634f * ax * ax);
  return x < 0 ? -e : e;
}
}  // namespace

static RS_INLINE void gelu_forward_f32_body(const float* x, int64_t n, float* y) {
#pragma omp simd
  for (int64_t i = 0; i < n; ++i) y[i] = 0.5f * x[i] * (1.0f + erf_as(x[i] * 0.70710678118654752f));
}
RS_ISA_DISPATCH(void, gelu_forward_f32, (const float* x, int64_t n, float* y), (x, n, y))

static RS_INLINE void gelu_backward_f32_body(const float* dy, const float* x, int64_t n, float* dx) {
#pragma omp simd
  for (int64_t i = 0; i < n; ++i) {
    const float cdf = 0.5f * (1.0f + erf_as(x[i] * 0.70710678118654752f));
    const float pdf = 0.39894228040143268f * exp2_poly(-0.72134752044448170f * x[i] * x[i]);  // e^(-x^2/2)
    dx[i] = dy[i] * (cdf + x[i] * pdf);
  }
}
RS_ISA_DISPATCH(void, gelu_backward_f32, (const float* dy, const float* x, int64_t n, float* dx), (dy, x, n, dx))

namespace {
// sigmoid(a) = 1 / (1 + e^-a) by 2^(-a log2 e) (exp2_poly stops at 2^127: no overflow to inf).
RS_INLINE float sigmoid_f(float a) { return 1.0f / (1.0f + exp2_poly(-1.4426950408889634f * a)); }
}  // namespace

// Two passes over each row, the sigmoid and then the products: in one loop GCC merges the
// clamps of exp2_poly into masked moves on the sigmoid's register, a dependence from each
// vector of the row to the next through the division, and the loop ran 6x slower (26 against
// 4.3 ms at 4096 x 2048, AVX-512). The same operations on the same values: the same bits.
static RS_INLINE void swiglu_forward_f32_body(const float* u, int64_t n, int64_t f, float* g) {
  for (int64_t r = 0; r < n; ++r) {
    const float *a = u + r * 2 * f, *b = a + f;
    float* gr = g + r * f;
#pragma omp simd
    for (int64_t j = 0; j < f; ++j) gr[j] = sigmoid_f(a[j]);
#pragma omp simd
    for (int64_t j = 0; j < f; ++j) gr[j] = a[j] * gr[j] * b[j];
  }
}
RS_ISA_DISPATCH(void, swiglu_forward_f32, (const float* u, int64_t n, int64_t f, float* g), (u, n, f, g))

static RS_INLINE void swiglu_backward_f32_body(const float* dg, const float* u, int64_t n, int64_t f, float* du) {
  for (int64_t r = 0; r < n; ++r) {
    const float *a = u + r * 2 * f, *b = a + f, *d = dg + r * f;
    float *da = du + r * 2 * f, *db = da + f;
#pragma omp simd
    for (int64_t j = 0; j < f; ++j) {
      const float sigma = sigmoid_f(a[j]);
      da[j] = d[j] * b[j] * sigma * (1.0f + a[j] * (1.0f - sigma));
      db[j] = d[j] * a[j] * sigma;
    }
  }
}
RS_ISA_DISPATCH(void, swiglu_backward_f32, (const float* dg, const float* u, int64_t n, int64_t f, float* du),
                (dg, u, n, f, du))

static RS_INLINE void dropout_words_body(uint64_t seed, uint32_t site, uint64_t token, int64_t groups, uint32_t* words) {
  // Philox4x32-10 (Salmon et al. 2011), as Random123 computes it, one lane per group g with
  // counter (g, token low, token high, site) and key (seed low, seed high): the same words as
  // dropout_bits4 (kernels/philox.h), several groups at a time.
  const uint32_t t_lo = static_cast<uint32_t>(token), t_hi = static_cast<uint32_t>(token >> 32);
  const uint32_t k0 = static_cast<uint32_t>(seed), k1 = static_cast<uint32_t>(seed >> 32);
#pragma omp simd
  for (int64_t g = 0; g < groups; ++g) {
    uint32_t c0 = static_cast<uint32_t>(g), c1 = t_lo, c2 = t_hi, c3 = site, key0 = k0, key1 = k1;
    for (int round = 0; round < 10; ++round) {
      const uint64_t p0 = uint64_t{0xD2511F53u} * c0, p1 = uint64_t{0xCD9E8D57u} * c2;
      const uint32_t hi0 = static_cast<uint32_t>(p0 >> 32), lo0 = static_cast<uint32_t>(p0);
      const uint32_t hi1 = static_cast<uint32_t>(p1 >> 32), lo1 = static_cast<uint32_t>(p1);
      c0 = hi1 ^ c1 ^ key0, c1 = lo1, c2 = hi0 ^ c3 ^ key1, c3 = lo0;
      key0 += 0x9E3779B9u, key1 += 0xBB67AE85u;
    }
    words[4 * g] = c0, words[4 * g + 1] = c1, words[4 * g + 2] = c2, words[4 * g + 3] = c3;
  }
}
RS_ISA_DISPATCH(void, dropout_words, (uint64_t seed, uint32_t site, uint64_t token, int64_t groups, uint32_t* words), (seed, site, token, groups, words))

double row_max(const double* s, int64_t n) {
  double m = -std::numeric_limits<double>::infinity();
  for (int64_t i = 0; i < n; ++i) m = std::max(m, s[i]);
  return m;
}

double exp2_shift_sum(double* s, int64_t n, double m) {
  double sum = 0;
  for (int64_t i = 0; i < n; ++i) sum += (s[i] = std::exp2(s[i] - m));
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

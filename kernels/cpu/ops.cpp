#include "kernels/cpu/ops.h"

#include <algorithm>
#include <cmath>
#include <type_traits>
#include <vector>

#include "core/error.h"
#include "kernels/cpu/blas.h"
#include "kernels/cpu/vec.h"
#include "kernels/philox.h"

#if RINGSIDE_OPENBLAS
extern "C" void openblas_set_num_threads(int num_threads);
#endif

namespace ringside::kernels::cpu {

void set_blas_single_threaded() {
#if RINGSIDE_OPENBLAS
  openblas_set_num_threads(1);
#endif  // the reference BLAS is single-threaded
}


namespace {
// sum_j (x_j - shift)^power for power 1 or 2. float sums in vector lanes (a row sits in L1, so
// the passes are cheap once they do not wait on one running sum); double sums in order, the
// fp64 reference's bits.
template <int power, class T> T row_sum(const T* x, int64_t h, T shift) {
  T sum = 0;
  if constexpr (std::is_same_v<T, float>) {
#pragma omp simd reduction(+ : sum)
    for (int64_t j = 0; j < h; ++j) sum += power == 1 ? x[j] - shift : (x[j] - shift) * (x[j] - shift);
  } else {
    for (int64_t j = 0; j < h; ++j) sum += power == 1 ? x[j] - shift : (x[j] - shift) * (x[j] - shift);
  }
  return sum;
}
}  // namespace

template <class T>
void layernorm_forward(const T* x, const T* gamma, const T* beta, int64_t n, int64_t h, double eps, T* y, T* mean,
                       T* rstd) {
  for (int64_t r = 0; r < n; ++r) {
    const T* xr = x + r * h;
    // Two passes (mean, then squared deviations): stable where E[x^2] - E[x]^2 cancels.
    const T mu = row_sum<1>(xr, h, T(0)) / static_cast<T>(h);
    const T var = row_sum<2>(xr, h, mu) / static_cast<T>(h);
    const T rs = T(1) / std::sqrt(var + static_cast<T>(eps));
    for (int64_t j = 0; j < h; ++j) y[r * h + j] = (xr[j] - mu) * rs * gamma[j] + beta[j];
    mean[r] = mu;
    rstd[r] = rs;
  }
}

template <class T>
void layernorm_backward(const T* dy, const T* x, const T* gamma, const T* mean, const T* rstd, int64_t n, int64_t h,
                        T* dx, T* dgamma, T* dbeta) {
  for (int64_t r = 0; r < n; ++r) {
    const T* dyr = dy + r * h;
    const T* xr = x + r * h;
    const T mu = mean[r], rs = rstd[r];
    T mean_g = 0, mean_gx = 0;
    for (int64_t j = 0; j < h; ++j) {
      const T xhat = (xr[j] - mu) * rs, g = dyr[j] * gamma[j];
      mean_g += g;
      mean_gx += g * xhat;
      dgamma[j] += dyr[j] * xhat;
      dbeta[j] += dyr[j];
    }
    mean_g /= static_cast<T>(h);
    mean_gx /= static_cast<T>(h);
    for (int64_t j = 0; j < h; ++j) {
      const T xhat = (xr[j] - mu) * rs;
      dx[r * h + j] = rs * (dyr[j] * gamma[j] - mean_g - xhat * mean_gx);
    }
  }
}

template <class T>
void rmsnorm_forward(const T* x, const T* gamma, int64_t n, int64_t h, double eps, T* y, T* rstd) {
  for (int64_t r = 0; r < n; ++r) {
    const T* xr = x + r * h;
    const T rs = T(1) / std::sqrt(row_sum<2>(xr, h, T(0)) / static_cast<T>(h) + static_cast<T>(eps));
    for (int64_t j = 0; j < h; ++j) y[r * h + j] = xr[j] * rs * gamma[j];
    rstd[r] = rs;
  }
}

template <class T>
void rmsnorm_backward(const T* dy, const T* x, const T* gamma, const T* rstd, int64_t n, int64_t h, T* dx, T* dgamma) {
  for (int64_t r = 0; r < n; ++r) {
    const T* dyr = dy + r * h;
    const T* xr = x + r * h;
    const T rs = rstd[r];
    T mean_gx = 0;
    for (int64_t j = 0; j < h; ++j) {
      const T xhat = xr[j] * rs;
      mean_gx += dyr[j] * gamma[j] * xhat;
      dgamma[j] += dyr[j] * xhat;
    }
    mean_gx /= static_cast<T>(h);
    for (int64_t j = 0; j < h; ++j) dx[r * h + j] = rs * (dyr[j] * gamma[j] - xr[j] * rs * mean_gx);
  }
}

template <class T> void swiglu_forward(const T* u, int64_t n, int64_t f, T* g) {
  if constexpr (std::is_same_v<T, float>) return swiglu_forward_f32(u, n, f, g);
  for (int64_t r = 0; r < n; ++r) {
    const T *a = u + r * 2 * f, *b = a + f;
    for (int64_t j = 0; j < f; ++j) g[r * f + j] = a[j] / (T(1) + std::exp(-a[j])) * b[j];
  }
}

template <class T> void swiglu_backward(const T* dg, const T* u, int64_t n, int64_t f, T* du) {
  if constexpr (std::is_same_v<T, float>) return swiglu_backward_f32(dg, u, n, f, du);
  for (int64_t r = 0; r < n; ++r) {
    const T *a = u + r * 2 * f, *b = a + f, *d = dg + r * f;
    T *da = du + r * 2 * f, *db = da + f;
    for (int64_t j = 0; j < f; ++j) {
      const T sigma = T(1) / (T(1) + std::exp(-a[j]));
      const T dgj = d[j];  // read before writing: du may not alias dg, but keep the order plain
      da[j] = dgj * b[j] * sigma * (T(1) + a[j] * (T(1) - sigma));
      db[j] = dgj * a[j] * sigma;
    }
  }
}

template <class T> void gelu_forward(const T* x, int64_t n, T* y) {
  if constexpr (std::is_same_v<T, float>) return gelu_forward_f32(x, n, y);
  const T inv_sqrt2 = static_cast<T>(0.70710678118654752440);
  for (int64_t i = 0; i < n; ++i) y[i] = T(0.5) * x[i] * (T(1) + std::erf(x[i] * inv_sqrt2));
}

template <class T> void gelu_backward(const T* dy, const T* x, int64_t n, T* dx) {
  if constexpr (std::is_same_v<T, float>) return gelu_backward_f32(dy, x, n, dx);
  const T inv_sqrt2 = static_cast<T>(0.70710678118654752440);
  const T inv_sqrt2pi = static_cast<T>(0.39894228040143267794);
  for (int64_t i = 0; i < n; ++i) {
    const T cdf = T(0.5) * (T(1) + std::erf(x[i] * inv_sqrt2));
    const T pdf = inv_sqrt2pi * std::exp(T(-0.5) * x[i] * x[i]);
    dx[i] = dy[i] * (cdf + x[i] * pdf);
  }
}

namespace {
// Rotates every head of x by +angle (sign = 1) or -angle (sign = -1).
template <class T>
void rope_apply(T* x, int64_t b, int64_t s, int64_t heads, int64_t d, const int64_t* positions, double theta,
                double sign) {
  RS_CHECK(d % 2 == 0, "rope: head dim d must be even, got ", d);
  const int64_t half = d / 2;
  std::vector<double> inv_freq(half);
  for (int64_t i = 0; i < half; ++i) inv_freq[i] = std::pow(theta, -2.0 * double(i) / double(d));
  std::vector<T> cs(half), sn(half);
  // float: cos and sin of pos f from tables of (pos / 64) 64 f and (pos % 64) f by the angle sum,
  // in double (error ~1e-16, far below float's), so that the trigonometry costs (s / 64 + 64)
  // d/2 calls instead of s d/2. double keeps the direct call (the fp64 reference's bits).
  constexpr int64_t kLow = 64;
  int64_t max_pos = 0;
  for (int64_t t = 0; t < s; ++t) max_pos = std::max(max_pos, positions[t]);
  // (A shard whose positions reach far past its length, a late ring chunk, calls directly.)
  const bool tables = std::is_same_v<T, float> && max_pos / kLow + kLow < s;
  // cos and sin of (k step) f_i for k < n, row k of a [n, half] table.
  auto angle_table = [&](int64_t n, int64_t step, std::vector<double>& cos_t, std::vector<double>& sin_t) {
    cos_t.resize(n * half), sin_t.resize(n * half);
    for (int64_t k = 0; k < n; ++k)
      for (int64_t i = 0; i < half; ++i) {
        cos_t[k * half + i] = std::cos(double(k * step) * inv_freq[i]);
        sin_t[k * half + i] = std::sin(double(k * step) * inv_freq[i]);
      }
  };
  std::vector<double> hi_cos, hi_sin, lo_cos, lo_sin;
  if (tables) {
    angle_table(max_pos / kLow + 1, kLow, hi_cos, hi_sin);
    angle_table(kLow, 1, lo_cos, lo_sin);
  }
  for (int64_t t = 0; t < s; ++t) {
    for (int64_t i = 0; i < half; ++i) {
      if (tables) {
        const int64_t hi = positions[t] / kLow * half + i, lo = positions[t] % kLow * half + i;
        cs[i] = static_cast<T>(hi_cos[hi] * lo_cos[lo] - hi_sin[hi] * lo_sin[lo]);
        sn[i] = static_cast<T>(sign * (hi_sin[hi] * lo_cos[lo] + hi_cos[hi] * lo_sin[lo]));
        continue;
      }
      const double a = double(positions[t]) * inv_freq[i];
      cs[i] = static_cast<T>(std::cos(a));
      sn[i] = static_cast<T>(sign * std::sin(a));
    }
    for (int64_t bi = 0; bi < b; ++bi)
      for (int64_t hh = 0; hh < heads; ++hh) {
        T* v = x + ((bi * s + t) * heads + hh) * d;
        for (int64_t i = 0; i < half; ++i) {
          const T x1 = v[i], x2 = v[i + half];
          v[i] = x1 * cs[i] - x2 * sn[i];
          v[i + half] = x2 * cs[i] + x1 * sn[i];
        }
      }
  }
}
}  // namespace

template <class T>
void rope_forward(T* x, int64_t b, int64_t s, int64_t heads, int64_t d, const int64_t* positions, double theta) {
  rope_apply(x, b, s, heads, d, positions, theta, 1.0);
}

template <class T>
void rope_backward(T* dx, int64_t b, int64_t s, int64_t heads, int64_t d, const int64_t* positions, double theta) {
  rope_apply(dx, b, s, heads, d, positions, theta, -1.0);
}

namespace {
// Calls f(row offset, keep, h) for every token row of a [b, s, h] tensor, keep[j] = 1 where
// feature j is kept: one Philox call serves four consecutive features (its four output words),
// and a row's calls run vectorised (dropout_words).
template <class F>
void for_each_keep_row(int64_t b, int64_t s, int64_t h, const int64_t* positions, int64_t s_global, double p,
                       uint64_t seed, uint32_t site, F&& f) {
  RS_CHECK(p >= 0 && p < 1, "dropout: p must be in [0, 1), got ", p);
  const uint32_t threshold = dropout_threshold(p);
  const int64_t groups = (h + 3) / 4;
  std::vector<uint32_t> words(4 * groups);
  std::vector<uint8_t> keep(4 * groups);
  for (int64_t bi = 0; bi < b; ++bi)
    for (int64_t t = 0; t < s; ++t) {
      dropout_words(seed, site, static_cast<uint64_t>(bi * s_global + positions[t]), groups, words.data());
#pragma omp simd
      for (int64_t j = 0; j < h; ++j) keep[j] = (words[j] >> 8) >= threshold;
      f((bi * s + t) * h, keep.data());
    }
}
}  // namespace

template <class T>
void dropout_forward(const T* x, T* y, int64_t b, int64_t s, int64_t h, const int64_t* positions, int64_t s_global,
                     double p, uint64_t seed, uint32_t site) {
  if (p == 0) {
    for (int64_t i = 0; i < b * s * h; ++i) y[i] = x[i];
    return;
  }
  const T scale = static_cast<T>(1.0 / (1.0 - p));
  for_each_keep_row(b, s, h, positions, s_global, p, seed, site, [&](int64_t row, const uint8_t* keep) {
#pragma omp simd
    for (int64_t j = 0; j < h; ++j) {
      const T scaled = x[row + j] * scale;  // taken either way: a select, not a branch
      y[row + j] = keep[j] ? scaled : T(0);
    }
  });
}

template <class T>
void bias_dropout_add(const T* y, const T* bias, const T* residual, T* out, int64_t b, int64_t s, int64_t h,
                      const int64_t* positions, int64_t s_global, double p, uint64_t seed, uint32_t site) {
  // Each row as add_bias, dropout_forward and add compute it, while it is in cache. The product
  // is taken whether kept or not, so that the choice is a select the compiler vectorises, not
  // a branch (one in ten mispredicted at p 0.1).
  std::vector<T> biased(h);
  auto bias_row = [&](int64_t row) {
    for (int64_t j = 0; j < h; ++j) biased[j] = bias ? y[row + j] + bias[j] : y[row + j];
  };
  if (p == 0) {
    for (int64_t row = 0; row < b * s * h; row += h) {
      bias_row(row);
      for (int64_t j = 0; j < h; ++j) out[row + j] = residual[row + j] + biased[j];
    }
    return;
  }
  const T scale = static_cast<T>(1.0 / (1.0 - p));
  for_each_keep_row(b, s, h, positions, s_global, p, seed, site, [&](int64_t row, const uint8_t* keep) {
    bias_row(row);
#pragma omp simd
    for (int64_t j = 0; j < h; ++j) {
      const T scaled = biased[j] * scale;
      out[row + j] = residual[row + j] + (keep[j] ? scaled : T(0));
    }
  });
}

template <class T>
void dropout_mask(T* mask, int64_t b, int64_t s, int64_t h, const int64_t* positions, int64_t s_global, double p,
                  uint64_t seed, uint32_t site) {
  for_each_keep_row(b, s, h, positions, s_global, p, seed, site, [&](int64_t row, const uint8_t* keep) {
    for (int64_t j = 0; j < h; ++j) mask[row + j] = keep[j] ? T(1) : T(0);
  });
}

template <class T> void add_bias(T* y, const T* bias, int64_t n, int64_t h) {
  for (int64_t r = 0; r < n; ++r)
    for (int64_t j = 0; j < h; ++j) y[r * h + j] += bias[j];
}

template <class T> void bias_grad(const T* dy, int64_t n, int64_t h, T* dbias) {
  for (int64_t r = 0; r < n; ++r)
    for (int64_t j = 0; j < h; ++j) dbias[j] += dy[r * h + j];
}

#define RS_INSTANTIATE(T)                                                                                       \
  template void layernorm_forward<T>(const T*, const T*, const T*, int64_t, int64_t, double, T*, T*, T*);       \
  template void layernorm_backward<T>(const T*, const T*, const T*, const T*, const T*, int64_t, int64_t, T*, T*, \
                                      T*);                                                                      \
  template void rmsnorm_forward<T>(const T*, const T*, int64_t, int64_t, double, T*, T*);                       \
  template void rmsnorm_backward<T>(const T*, const T*, const T*, const T*, int64_t, int64_t, T*, T*);          \
  template void swiglu_forward<T>(const T*, int64_t, int64_t, T*);                                              \
  template void swiglu_backward<T>(const T*, const T*, int64_t, int64_t, T*);                                   \
  template void gelu_forward<T>(const T*, int64_t, T*);                                                         \
  template void gelu_backward<T>(const T*, const T*, int64_t, T*);                                              \
  template void rope_forward<T>(T*, int64_t, int64_t, int64_t, int64_t, const int64_t*, double);                \
  template void rope_backward<T>(T*, int64_t, int64_t, int64_t, int64_t, const int64_t*, double);               \
  template void dropout_forward<T>(const T*, T*, int64_t, int64_t, int64_t, const int64_t*, int64_t, double,    \
                                   uint64_t, uint32_t);                                                         \
  template void bias_dropout_add<T>(const T*, const T*, const T*, T*, int64_t, int64_t, int64_t, const int64_t*,   \
                                    int64_t, double, uint64_t, uint32_t);                                       \
  template void dropout_mask<T>(T*, int64_t, int64_t, int64_t, const int64_t*, int64_t, double, uint64_t,       \
                                uint32_t);                                                                      \
  template void add_bias<T>(T*, const T*, int64_t, int64_t);                                                    \
  template void bias_grad<T>(const T*, int64_t, int64_t, T*);
RS_INSTANTIATE(float)
RS_INSTANTIATE(double)
#undef RS_INSTANTIATE

}  // namespace ringside::kernels::cpu

#include "kernels/cpu/ops.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "core/error.h"
#include "kernels/cpu/blas.h"
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


template <class T>
void layernorm_forward(const T* x, const T* gamma, const T* beta, int64_t n, int64_t h, double eps, T* y, T* mean,
                       T* rstd) {
  for (int64_t r = 0; r < n; ++r) {
    const T* xr = x + r * h;
    // Two passes (mean, then squared deviations): stable where E[x^2] - E[x]^2 cancels.
    T mu = 0;
    for (int64_t j = 0; j < h; ++j) mu += xr[j];
    mu /= static_cast<T>(h);
    T var = 0;
    for (int64_t j = 0; j < h; ++j) var += (xr[j] - mu) * (xr[j] - mu);
    var /= static_cast<T>(h);
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

template <class T> void gelu_forward(const T* x, int64_t n, T* y) {
  const T inv_sqrt2 = static_cast<T>(0.70710678118654752440);
  for (int64_t i = 0; i < n; ++i) y[i] = T(0.5) * x[i] * (T(1) + std::erf(x[i] * inv_sqrt2));
}

template <class T> void gelu_backward(const T* dy, const T* x, int64_t n, T* dx) {
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
  for (int64_t t = 0; t < s; ++t) {
    for (int64_t i = 0; i < half; ++i) {
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
// Calls f(element index, keep) for every element of a [b, s, h] tensor. One Philox call
// serves four consecutive features (its four output words).
template <class F>
void for_each_keep(int64_t b, int64_t s, int64_t h, const int64_t* positions, int64_t s_global, double p,
                   uint64_t seed, uint32_t site, F&& f) {
  RS_CHECK(p >= 0 && p < 1, "dropout: p must be in [0, 1), got ", p);
  const uint32_t threshold = dropout_threshold(p);
  for (int64_t bi = 0; bi < b; ++bi)
    for (int64_t t = 0; t < s; ++t) {
      const uint64_t token = static_cast<uint64_t>(bi * s_global + positions[t]);
      const int64_t row = (bi * s + t) * h;
      for (int64_t g = 0; g * 4 < h; ++g) {
        const auto words = dropout_bits4(seed, site, token, static_cast<uint64_t>(g));
        for (int64_t j = g * 4; j < std::min(h, g * 4 + 4); ++j) f(row + j, (words[j & 3] >> 8) >= threshold);
      }
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
  for_each_keep(b, s, h, positions, s_global, p, seed, site,
                   [&](int64_t i, bool keep) { y[i] = keep ? x[i] * scale : T(0); });
}

template <class T>
void dropout_mask(T* mask, int64_t b, int64_t s, int64_t h, const int64_t* positions, int64_t s_global, double p,
                  uint64_t seed, uint32_t site) {
  for_each_keep(b, s, h, positions, s_global, p, seed, site,
                   [&](int64_t i, bool keep) { mask[i] = keep ? T(1) : T(0); });
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
  template void gelu_forward<T>(const T*, int64_t, T*);                                                         \
  template void gelu_backward<T>(const T*, const T*, int64_t, T*);                                              \
  template void rope_forward<T>(T*, int64_t, int64_t, int64_t, int64_t, const int64_t*, double);                \
  template void rope_backward<T>(T*, int64_t, int64_t, int64_t, int64_t, const int64_t*, double);               \
  template void dropout_forward<T>(const T*, T*, int64_t, int64_t, int64_t, const int64_t*, int64_t, double,    \
                                   uint64_t, uint32_t);                                                         \
  template void dropout_mask<T>(T*, int64_t, int64_t, int64_t, const int64_t*, int64_t, double, uint64_t,       \
                                uint32_t);                                                                      \
  template void add_bias<T>(T*, const T*, int64_t, int64_t);                                                    \
  template void bias_grad<T>(const T*, int64_t, int64_t, T*);
RS_INSTANTIATE(float)
RS_INSTANTIATE(double)
#undef RS_INSTANTIATE

}  // namespace ringside::kernels::cpu

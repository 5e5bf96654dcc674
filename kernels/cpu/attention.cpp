#include "kernels/cpu/attention.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <type_traits>
#include <vector>

#include "core/error.h"

// The contract of kernels/attention_params.h: what a call must satisfy, which keys a row sees,
// and what the call costs.
namespace ringside::kernels {

void validate(const AttentionParams& p) {
  RS_CHECK(p.b >= 1 && p.sq >= 1 && p.sk >= 1 && p.H >= 1 && p.Hkv >= 1 && p.d >= 1,
           "attention: shapes must be positive (b=", p.b, " sq=", p.sq, " sk=", p.sk, " H=", p.H,
           " Hkv=", p.Hkv, " d=", p.d, ")");
  RS_CHECK(p.H % p.Hkv == 0, "attention: H (", p.H, ") must be a multiple of Hkv (", p.Hkv, ")");
  RS_CHECK(p.q_stride >= 1 && p.k_stride >= 1, "attention: position strides must be >= 1");
  RS_CHECK(p.block_q >= 1 && p.block_k >= 1, "attention: block sizes must be >= 1");
  RS_CHECK(p.softmax_scale > 0, "attention: softmax_scale must be > 0");
  if (p.mask == nullptr) return;
  const DocumentMask& m = *p.mask;
  RS_CHECK(m.window >= 0, "attention: the window must be >= 0 (0: none), not ", m.window);
  RS_CHECK(m.starts.size() == m.lengths.size(), "attention: ", m.starts.size(), " document starts but ",
           m.lengths.size(), " lengths");
  for (size_t i = 0; i < m.starts.size(); ++i) {
    RS_CHECK(m.lengths[i] >= 1, "attention: document ", i, " has length ", m.lengths[i], " (must be >= 1)");
    RS_CHECK(i == 0 || m.starts[i] >= m.starts[i - 1] + m.lengths[i - 1], "attention: document ", i,
             " starts at ", m.starts[i], ", inside document ", i - 1);
  }
}

KeyRange visible_key_range(const AttentionParams& p, int64_t i) {
  constexpr int64_t kFar = std::numeric_limits<int64_t>::max() / 4;
  const int64_t qpos = p.q_offset + i * p.q_stride;
  int64_t lo = -kFar, hi = p.causal ? qpos : kFar;  // visible key positions, inclusive
  if (const DocumentMask* m = p.mask) {
    if (!m->starts.empty()) {
      // The document holding qpos: the last that starts at or before it, if qpos is inside it.
      const auto it = std::upper_bound(m->starts.begin(), m->starts.end(), qpos);
      if (it == m->starts.begin()) return {};
      const size_t doc = size_t(it - m->starts.begin()) - 1;
      const int64_t end = m->starts[doc] + m->lengths[doc];
      if (qpos >= end) return {};  // padding
      lo = m->starts[doc], hi = std::min(hi, end - 1);
    }
    if (m->window > 0) {
      lo = std::max(lo, qpos - m->window + 1);
      if (!p.causal) hi = std::min(hi, qpos + m->window - 1);
    }
  }
  // Key j sits at k_offset + j k_stride: the j with lo <= position <= hi.
  auto floor_div = [](int64_t a, int64_t b) { return a >= 0 ? a / b : -((-a + b - 1) / b); };
  const int64_t begin = std::max<int64_t>(0, -floor_div(-(lo - p.k_offset), p.k_stride));  // ceil
  const int64_t end = std::min<int64_t>(p.sk, floor_div(hi - p.k_offset, p.k_stride) + 1);
  if (end <= begin) return {};
  return {begin, end};
}

double attention_forward_flops(const AttentionParams& p) {
  // Visible (query, key) pairs per head; each costs 2d for QK^T and 2d for PV.
  double pairs = 0;
  if (p.mask == nullptr && !p.causal) {
    pairs = double(p.sq) * double(p.sk);
  } else if (p.mask == nullptr && p.q_stride == p.k_stride) {
    // Equal strides (every layout's blocks): query i sees clamp(i + delta, 0, sk) keys, a
    // clamped ramp, summed in closed form so that the count costs the same at any length.
    const int64_t t = p.k_stride, D = p.q_offset - p.k_offset;
    const int64_t delta = (D >= 0 ? D / t : -((-D + t - 1) / t)) + 1;  // floor(D / t) + 1
    auto ramp = [&](int64_t n) -> double {  // sum of clamp(x, 0, sk) over x < n
      const int64_t m = n - 1;
      if (m <= 0) return 0;
      if (m <= p.sk) return double(m) * double(m + 1) / 2;
      return double(p.sk) * double(p.sk + 1) / 2 + double(m - p.sk) * double(p.sk);
    };
    pairs = ramp(delta + p.sq) - ramp(delta);
  } else {  // documents, a window, or unequal strides: row by row
    for (int64_t i = 0; i < p.sq; ++i) pairs += double(visible_key_range(p, i).size());
  }
  return 4.0 * double(p.d) * pairs * double(p.b) * double(p.H);
}

}  // namespace ringside::kernels

namespace ringside::kernels::cpu {

namespace {
constexpr double kNegInf = -std::numeric_limits<double>::infinity();
}  // namespace

template <class T>
void lse_merge(int64_t b, int64_t sq, int64_t H, int64_t d, T* out, T* lse, const T* out_b, const T* lse_b) {
  for (int64_t bi = 0; bi < b; ++bi)
    for (int64_t h = 0; h < H; ++h)
      for (int64_t i = 0; i < sq; ++i) {
        T& la = lse[(bi * H + h) * sq + i];
        const T lb = lse_b[(bi * H + h) * sq + i];
        const T hi = std::max(la, lb), lo = std::min(la, lb);
        T* o = out + ((bi * sq + i) * H + h) * d;
        const T* ob = out_b + ((bi * sq + i) * H + h) * d;
        if (hi == static_cast<T>(kNegInf)) {  // neither part saw a key
          std::fill(o, o + d, T(0));
          la = hi;
          continue;
        }
        const T l = hi + std::log1p(std::exp(lo - hi));
        const T wa = std::exp(la - l), wb = std::exp(lb - l);
        for (int64_t c = 0; c < d; ++c) o[c] = wa * o[c] + wb * ob[c];
        la = l;
      }
}

// float runs version 2, double version 1 (the fp64 reference's precision, where speed is not
// the point).
template <class T>
void attention_forward(const AttentionParams& p, const T* q, const T* k, const T* v, T* out, T* lse) {
  if constexpr (std::is_same_v<T, float>) attention_forward_v2(p, q, k, v, out, lse);
  else attention_forward_v1(p, q, k, v, out, lse);
}

template <class T>
void attention_backward(const AttentionParams& p, const T* q, const T* k, const T* v, const T* out, const T* dout,
                        const T* lse, T* dq, T* dk, T* dv) {
  if constexpr (std::is_same_v<T, float>) attention_backward_v2(p, q, k, v, out, dout, lse, dq, dk, dv);
  else attention_backward_v1(p, q, k, v, out, dout, lse, dq, dk, dv);
}

template void attention_forward<float>(const AttentionParams&, const float*, const float*, const float*, float*, float*);
template void attention_forward<double>(const AttentionParams&, const double*, const double*, const double*, double*,
                                        double*);
template void attention_backward<float>(const AttentionParams&, const float*, const float*, const float*, const float*,
                                        const float*, const float*, float*, float*, float*);
template void attention_backward<double>(const AttentionParams&, const double*, const double*, const double*,
                                         const double*, const double*, const double*, double*, double*, double*);
template void lse_merge<float>(int64_t, int64_t, int64_t, int64_t, float*, float*, const float*, const float*);
template void lse_merge<double>(int64_t, int64_t, int64_t, int64_t, double*, double*, const double*, const double*);

}  // namespace ringside::kernels::cpu

#include "kernels/cpu/attention.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "core/error.h"
#include "kernels/cpu/blas.h"
#include "kernels/cpu/vec.h"

namespace ringside::kernels::cpu {

void validate(const AttentionParams& p) {
  RS_CHECK(p.b >= 1 && p.sq >= 1 && p.sk >= 1 && p.H >= 1 && p.Hkv >= 1 && p.d >= 1,
           "attention: shapes must be positive (b=", p.b, " sq=", p.sq, " sk=", p.sk, " H=", p.H,
           " Hkv=", p.Hkv, " d=", p.d, ")");
  RS_CHECK(p.H % p.Hkv == 0, "attention: H (", p.H, ") must be a multiple of Hkv (", p.Hkv, ")");
  RS_CHECK(p.q_stride >= 1 && p.k_stride >= 1, "attention: position strides must be >= 1");
  RS_CHECK(p.block_q >= 1 && p.block_k >= 1, "attention: block sizes must be >= 1");
  RS_CHECK(p.softmax_scale > 0, "attention: softmax_scale must be > 0");
}

namespace {

constexpr double kNegInf = -std::numeric_limits<double>::infinity();
constexpr double kLog2e = 1.4426950408889634, kLn2 = 0.6931471805599453;

// Where a tile sits against the causal diagonal. Positions grow with the index, so comparing
// the tile's corners is enough.
enum class TileMask { visible, partial, hidden };

struct Positions {
  const AttentionParams& p;
  int64_t q(int64_t i) const { return p.q_offset + i * p.q_stride; }
  int64_t k(int64_t j) const { return p.k_offset + j * p.k_stride; }
  TileMask tile(int64_t i0, int64_t bq, int64_t j0, int64_t bk) const {
    if (!p.causal) return TileMask::visible;
    if (k(j0) > q(i0 + bq - 1)) return TileMask::hidden;    // first key after the last query
    if (k(j0 + bk - 1) <= q(i0)) return TileMask::visible;  // last key before the first query
    return TileMask::partial;
  }
  // Sets s[r][c] to -inf where key j0+c is after query i0+r.
  template <class T>
  void apply(T* s, int64_t lds, int64_t i0, int64_t bq, int64_t j0, int64_t bk) const {
    for (int64_t r = 0; r < bq; ++r) {
      const int64_t qp = q(i0 + r);
      for (int64_t c = 0; c < bk; ++c)
        if (k(j0 + c) > qp) s[r * lds + c] = static_cast<T>(kNegInf);
    }
  }
};

}  // namespace

template <class T>
void attention_forward(const AttentionParams& p, const T* q, const T* k, const T* v, T* out, T* lse) {
  validate(p);
  const int64_t H = p.H, Hkv = p.Hkv, d = p.d, group = H / Hkv;
  const int64_t ldq = H * d, ldk = Hkv * d;
  const int64_t Bq = std::min(p.block_q, p.sq), Bk = std::min(p.block_k, p.sk);
  // Scores in base 2: S2 = (softmax_scale log2 e) Q K^T, so that exp(S - m) = 2^(S2 - m2)
  // (FlashAttention-2 does the same); lse = ln 2 (m2 + log2 l) at the end.
  const T scale2 = static_cast<T>(p.softmax_scale * kLog2e);
  const Positions pos{p};

  // Per-tile scratch: scores S [Bq, Bk] (turned into probabilities in place), the running
  // output accumulator [Bq, d], and per row the running max m and denominator l.
  std::vector<T> s(Bq * Bk), acc(Bq * d), m(Bq), l(Bq);

  for (int64_t bi = 0; bi < p.b; ++bi) {
    for (int64_t h = 0; h < H; ++h) {
      const T* qh = q + bi * p.sq * ldq + h * d;
      const T* kh = k + bi * p.sk * ldk + (h / group) * d;
      const T* vh = v + bi * p.sk * ldk + (h / group) * d;
      T* oh = out + bi * p.sq * ldq + h * d;
      T* lse_h = lse + (bi * H + h) * p.sq;

      for (int64_t i0 = 0; i0 < p.sq; i0 += Bq) {
        const int64_t bq = std::min(Bq, p.sq - i0);
        std::fill(m.begin(), m.end(), static_cast<T>(kNegInf));
        std::fill(l.begin(), l.end(), T(0));
        std::fill(acc.begin(), acc.end(), T(0));

        for (int64_t j0 = 0; j0 < p.sk; j0 += Bk) {
          const int64_t bk = std::min(Bk, p.sk - j0);
          const TileMask tm = pos.tile(i0, bq, j0, bk);
          if (tm == TileMask::hidden) break;  // every later key block is later still
          // S2 = scale log2(e) Q_i K_j^T
          gemm(false, true, bq, bk, d, scale2, qh + i0 * ldq, ldq, kh + j0 * ldk, ldk, T(0), s.data(), Bk);
          if (tm == TileMask::partial) pos.apply(s.data(), Bk, i0, bq, j0, bk);

          // Online softmax (Milakov & Gimelshein 2018): rescale what was accumulated under the
          // old row max, then add this tile's exp(S - m_new).
          for (int64_t r = 0; r < bq; ++r) {
            T* sr = s.data() + r * Bk;
            const T m_new = std::max(m[r], row_max(sr, bk));
            if (m_new == static_cast<T>(kNegInf)) {  // nothing visible yet in this row
              std::fill(sr, sr + bk, T(0));
              continue;
            }
            const T alpha = std::exp2(m[r] - m_new);  // 2^-inf = 0 on the first visible tile
            l[r] = l[r] * alpha + exp2_shift_sum(sr, bk, m_new);
            if (alpha != T(1)) scale_row(acc.data() + r * d, d, alpha);
            m[r] = m_new;
          }
          // acc += P V_j
          gemm(false, false, bq, d, bk, T(1), s.data(), Bk, vh + j0 * ldk, ldk, T(1), acc.data(), d);
        }

        for (int64_t r = 0; r < bq; ++r) {
          T* o = oh + (i0 + r) * ldq;
          if (l[r] == T(0)) {  // fully masked row: out 0, lse -inf, no 0/0
            std::fill(o, o + d, T(0));
            lse_h[i0 + r] = static_cast<T>(kNegInf);
            continue;
          }
          const T inv = T(1) / l[r];
          for (int64_t c = 0; c < d; ++c) o[c] = acc[r * d + c] * inv;
          lse_h[i0 + r] = static_cast<T>(kLn2 * (double(m[r]) + std::log2(double(l[r]))));
        }
      }
    }
  }
}

template <class T>
void attention_backward(const AttentionParams& p, const T* q, const T* k, const T* v, const T* out,
                        const T* dout, const T* lse, T* dq, T* dk, T* dv) {
  validate(p);
  const int64_t H = p.H, Hkv = p.Hkv, d = p.d, group = H / Hkv;
  const int64_t ldq = H * d, ldk = Hkv * d;
  const int64_t Bq = std::min(p.block_q, p.sq), Bk = std::min(p.block_k, p.sk);
  const T scale = static_cast<T>(p.softmax_scale), scale2 = static_cast<T>(p.softmax_scale * kLog2e);
  const Positions pos{p};

  // P and dP tiles [Bq, Bk]; for every query row of one head, D = rowsum(dout * out) and the
  // lse in base 2 (the forward's scores were base 2 too).
  std::vector<T> pt(Bq * Bk), dpt(Bq * Bk), D(p.sq), lse2(p.sq);

  for (int64_t bi = 0; bi < p.b; ++bi) {
    for (int64_t h = 0; h < H; ++h) {
      const int64_t qbase = bi * p.sq * ldq + h * d, kbase = bi * p.sk * ldk + (h / group) * d;
      const T* lse_h = lse + (bi * H + h) * p.sq;
      for (int64_t i = 0; i < p.sq; ++i) {
        D[i] = dot(dout + qbase + i * ldq, out + qbase + i * ldq, d);
        lse2[i] = static_cast<T>(double(lse_h[i]) * kLog2e);
      }

      // Key blocks outside, query blocks inside: dK_j and dV_j stay hot across the inner loop.
      for (int64_t j0 = 0; j0 < p.sk; j0 += Bk) {
        const int64_t bk = std::min(Bk, p.sk - j0);
        const T* kj = k + kbase + j0 * ldk;
        const T* vj = v + kbase + j0 * ldk;
        T* dkj = dk + kbase + j0 * ldk;
        T* dvj = dv + kbase + j0 * ldk;
        for (int64_t i0 = 0; i0 < p.sq; i0 += Bq) {
          const int64_t bq = std::min(Bq, p.sq - i0);
          const TileMask tm = pos.tile(i0, bq, j0, bk);
          if (tm == TileMask::hidden) continue;  // later query blocks may still see this key block
          const T* qi = q + qbase + i0 * ldq;
          const T* doi = dout + qbase + i0 * ldq;
          T* dqi = dq + qbase + i0 * ldq;

          // P = exp(scale Q_i K_j^T - lse_i) = 2^(S2 - lse2_i), recomputed instead of stored.
          gemm(false, true, bq, bk, d, scale2, qi, ldq, kj, ldk, T(0), pt.data(), Bk);
          if (tm == TileMask::partial) pos.apply(pt.data(), Bk, i0, bq, j0, bk);
          for (int64_t r = 0; r < bq; ++r) {
            T* pr = pt.data() + r * Bk;
            const T l2 = lse2[i0 + r];
            if (l2 == static_cast<T>(kNegInf)) std::fill(pr, pr + bk, T(0));  // row sees no key
            else exp2_shift_sum(pr, bk, l2);
          }
          // dV_j += P^T dO_i ;  dP = dO_i V_j^T
          gemm(true, false, bk, d, bq, T(1), pt.data(), Bk, doi, ldq, T(1), dvj, ldk);
          gemm(false, true, bq, bk, d, T(1), doi, ldq, vj, ldk, T(0), dpt.data(), Bk);
          // dS = P * (dP - D_i), in place in dpt
          for (int64_t r = 0; r < bq; ++r) softmax_grad_row(pt.data() + r * Bk, dpt.data() + r * Bk, bk, D[i0 + r]);
          // dQ_i += scale dS K_j ;  dK_j += scale dS^T Q_i
          gemm(false, false, bq, d, bk, scale, dpt.data(), Bk, kj, ldk, T(1), dqi, ldq);
          gemm(true, false, bk, d, bq, scale, dpt.data(), Bk, qi, ldq, T(1), dkj, ldk);
        }
      }
    }
  }
}

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

double attention_forward_flops(const AttentionParams& p) {
  // Visible (query, key) pairs per head; each costs 2d for QK^T and 2d for PV.
  double pairs = 0;
  if (!p.causal) {
    pairs = double(p.sq) * double(p.sk);
  } else if (p.q_stride == p.k_stride) {
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
  } else {
    for (int64_t i = 0; i < p.sq; ++i) {
      const int64_t qp = p.q_offset + i * p.q_stride;
      if (qp < p.k_offset) continue;
      pairs += double(std::min(p.sk, (qp - p.k_offset) / p.k_stride + 1));
    }
  }
  return 4.0 * double(p.d) * pairs * double(p.b) * double(p.H);
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

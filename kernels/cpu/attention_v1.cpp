// Attention, version 1: the plain blockwise kernels. FlashAttention-2's algorithm (Dao 2023) as
// written in the paper, each tile's products one BLAS call: S = Q K^T, the online softmax on S,
// O += P V. The reference for version 2 (attention_v2.cpp) and the double-precision kernel.
#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "kernels/cpu/attention.h"
#include "kernels/cpu/blas.h"
#include "kernels/cpu/vec.h"

namespace ringside::kernels::cpu {

namespace {

constexpr double kNegInf = -std::numeric_limits<double>::infinity();
constexpr double kLog2e = 1.4426950408889634, kLn2 = 0.6931471805599453;

// Where a tile sits against the mask: every row's visible keys are one interval
// (visible_key_range), so a tile is hidden when no row's interval meets its keys and visible
// when every row's covers them.
enum class TileMask { visible, partial, hidden };

struct Positions {
  const AttentionParams& p;
  TileMask tile(int64_t i0, int64_t bq, int64_t j0, int64_t bk) const {
    if (!p.causal && p.mask == nullptr) return TileMask::visible;
    bool any = false, all = true;
    for (int64_t i = i0; i < i0 + bq; ++i) {
      const KeyRange r = visible_key_range(p, i);
      any = any || r.meets(j0, bk);
      all = all && r.begin <= j0 && r.end >= j0 + bk;
    }
    return !any ? TileMask::hidden : all ? TileMask::visible : TileMask::partial;
  }
  // Sets s[r][c] to -inf where key j0+c is outside query i0+r's visible keys.
  template <class T>
  void apply(T* s, int64_t lds, int64_t i0, int64_t bq, int64_t j0, int64_t bk) const {
    for (int64_t r = 0; r < bq; ++r) {
      const KeyRange range = visible_key_range(p, i0 + r);
      for (int64_t c = 0; c < bk; ++c)
        if (j0 + c < range.begin || j0 + c >= range.end) s[r * lds + c] = static_cast<T>(kNegInf);
    }
  }
};

}  // namespace

template <class T>
void attention_forward_v1(const AttentionParams& p, const T* q, const T* k, const T* v, T* out, T* lse) {
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
          if (tm == TileMask::hidden) continue;  // wholly masked: no work
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
void attention_backward_v1(const AttentionParams& p, const T* q, const T* k, const T* v, const T* out,
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

template void attention_forward_v1<float>(const AttentionParams&, const float*, const float*, const float*, float*,
                                           float*);
template void attention_forward_v1<double>(const AttentionParams&, const double*, const double*, const double*,
                                            double*, double*);
template void attention_backward_v1<float>(const AttentionParams&, const float*, const float*, const float*,
                                           const float*, const float*, const float*, float*, float*, float*);
template void attention_backward_v1<double>(const AttentionParams&, const double*, const double*, const double*,
                                            const double*, const double*, const double*, double*, double*, double*);

}  // namespace ringside::kernels::cpu

// Naive fp64 implementations: the textbook formulas, one loop per symbol, no blocking, no
// tricks. The kernels are tested against these.
#pragma once
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

#include "kernels/cpu/attention.h"

namespace naive {

using Vec = std::vector<double>;
using ringside::kernels::cpu::AttentionParams;
constexpr double kNegInf = -std::numeric_limits<double>::infinity();

/// The mask spelled out pair by pair: causal order, then (with a DocumentMask) the same
/// document, found by scanning every document, and the window.
inline bool visible(const AttentionParams& p, int64_t i, int64_t j) {
  const int64_t qp = p.q_offset + i * p.q_stride, kp = p.k_offset + j * p.k_stride;
  if (p.causal && kp > qp) return false;
  if (p.mask == nullptr) return true;
  const auto& m = *p.mask;
  if (!m.starts.empty()) {
    int64_t qdoc = -1, kdoc = -1;
    for (size_t d = 0; d < m.starts.size(); ++d) {
      if (qp >= m.starts[d] && qp < m.starts[d] + m.lengths[d]) qdoc = int64_t(d);
      if (kp >= m.starts[d] && kp < m.starts[d] + m.lengths[d]) kdoc = int64_t(d);
    }
    if (qdoc < 0 || qdoc != kdoc) return false;
  }
  return m.window == 0 || (qp - kp < m.window && kp - qp < m.window);
}

/// Full softmax(q k^T scale + mask) v, with lse; layouts as kernels/cpu/attention.h.
inline void attention_forward(const AttentionParams& p, const Vec& q, const Vec& k, const Vec& v, Vec& out, Vec& lse) {
  const int64_t H = p.H, Hkv = p.Hkv, d = p.d, g = H / Hkv;
  out.assign(p.b * p.sq * H * d, 0.0);
  lse.assign(p.b * H * p.sq, kNegInf);
  for (int64_t b = 0; b < p.b; ++b)
    for (int64_t h = 0; h < H; ++h)
      for (int64_t i = 0; i < p.sq; ++i) {
        Vec s(p.sk, kNegInf);
        double m = kNegInf;
        for (int64_t j = 0; j < p.sk; ++j) {
          if (!visible(p, i, j)) continue;
          double dot = 0;
          for (int64_t c = 0; c < d; ++c)
            dot += q[((b * p.sq + i) * H + h) * d + c] * k[((b * p.sk + j) * Hkv + h / g) * d + c];
          s[j] = dot * p.softmax_scale;
          m = std::max(m, s[j]);
        }
        if (m == kNegInf) continue;  // no visible key: out 0, lse -inf
        double z = 0;
        for (int64_t j = 0; j < p.sk; ++j) z += std::exp(s[j] - m);
        lse[(b * H + h) * p.sq + i] = m + std::log(z);
        for (int64_t j = 0; j < p.sk; ++j) {
          const double pj = std::exp(s[j] - m) / z;
          for (int64_t c = 0; c < d; ++c)
            out[((b * p.sq + i) * H + h) * d + c] += pj * v[((b * p.sk + j) * Hkv + h / g) * d + c];
        }
      }
}

/// Gradients of sum(out * dout) by the chain rule through the full probability matrix:
/// dP = dout v^T, dS = P (dP - rowsum(P dP)), dq = scale dS k, dk = scale dS^T q, dv = P^T dout.
inline void attention_backward(const AttentionParams& p, const Vec& q, const Vec& k, const Vec& v, const Vec& dout,
                               Vec& dq, Vec& dk, Vec& dv) {
  const int64_t H = p.H, Hkv = p.Hkv, d = p.d, g = H / Hkv;
  Vec out, lse;
  attention_forward(p, q, k, v, out, lse);
  dq.assign(q.size(), 0.0);
  dk.assign(k.size(), 0.0);
  dv.assign(v.size(), 0.0);
  for (int64_t b = 0; b < p.b; ++b)
    for (int64_t h = 0; h < H; ++h)
      for (int64_t i = 0; i < p.sq; ++i) {
        const double l = lse[(b * H + h) * p.sq + i];
        if (l == kNegInf) continue;
        auto qi = [&](int64_t c) { return q[((b * p.sq + i) * H + h) * d + c]; };
        auto doi = [&](int64_t c) { return dout[((b * p.sq + i) * H + h) * d + c]; };
        auto kv = [&](int64_t j, int64_t c) { return ((b * p.sk + j) * Hkv + h / g) * d + c; };
        Vec P(p.sk, 0.0), dP(p.sk, 0.0);
        double rowsum = 0;
        for (int64_t j = 0; j < p.sk; ++j) {
          if (!visible(p, i, j)) continue;
          double s = 0, dpj = 0;
          for (int64_t c = 0; c < d; ++c) s += qi(c) * k[kv(j, c)], dpj += doi(c) * v[kv(j, c)];
          P[j] = std::exp(s * p.softmax_scale - l);
          dP[j] = dpj;
          rowsum += P[j] * dpj;
        }
        for (int64_t j = 0; j < p.sk; ++j) {
          if (P[j] == 0) continue;
          const double dS = P[j] * (dP[j] - rowsum);
          for (int64_t c = 0; c < d; ++c) {
            dq[((b * p.sq + i) * H + h) * d + c] += p.softmax_scale * dS * k[kv(j, c)];
            dk[kv(j, c)] += p.softmax_scale * dS * qi(c);
            dv[kv(j, c)] += P[j] * doi(c);
          }
        }
      }
}

}  // namespace naive

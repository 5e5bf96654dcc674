// Attention, version 2: the fast float kernels. The algorithm is version 1's (attention_v1.cpp,
// FlashAttention-2's blockwise online softmax), read the same way; what changes is how a tile's
// products are computed. Version 1 calls BLAS on each tile; version 2 packs K and V once per
// head into the layout its one register-blocked micro-kernel reads (the forward reads Q in
// place), and fuses the softmax into the tile loop, strip by strip of kRows query rows, so that
// the scores never leave L1.
//
// The micro-kernel (micro below) computes C[kRows, NV vectors] (+)= A B, A read one element at
// a time (broadcast, any strides: a row of Q, or a column of P when the product is P^T dO; the
// generic path, which has no broadcast load, reads it expanded: operand()) and B read a row of
// vectors at a time. Every product of attention is one of its uses:
//
//   forward   S  = Qs K^T   A = Qs strip,  B = K^T panel      (scores, base 2, scale folded in Qs)
//             O += P V      A = P strip,   B = V rows
//   backward  S  = Qs K^T, P = 2^(S - lse2)           dP = dO V^T   (B = V^T panel)
//             dV += P^T dO  A = P^T (strided), B = dO rows      dK += dS^T Qs   dQ += dS K
//
// Paths (kernels/cpu/isa.h, chosen by isa_paths.h's one dispatch): the same code compiled for
// AVX-512, AVX2 + FMA and a portable fallback, GCC's vector extensions giving the vector type;
// products contract to FMA where the path has it (this file is built with -ffp-contract=fast).
#include "kernels/cpu/attention.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <memory>
#include <vector>

#include "core/error.h"
#include "kernels/cpu/isa_paths.h"

namespace ringside::kernels::cpu {

namespace {

constexpr float kNegInf = -std::numeric_limits<float>::infinity();
constexpr double kLog2e = 1.4426950408889634, kLn2 = 0.6931471805599453;
constexpr int64_t kRows = 6;  // query rows per strip: the micro-kernel's height on every path

// The three paths: vector type, its width W, and NV, the micro-kernel's width in vectors (its
// kRows x NV accumulators fill the register file but for the loads: 24 of 32 zmm, 12 of 16 ymm).
typedef float f32x16 __attribute__((vector_size(64)));
typedef int32_t i32x16 __attribute__((vector_size(64)));
typedef float f32x8 __attribute__((vector_size(32)));
typedef int32_t i32x8 __attribute__((vector_size(32)));
typedef float f32x4 __attribute__((vector_size(16)));
typedef int32_t i32x4 __attribute__((vector_size(16)));

// kExpandA: whether the micro-kernel reads its A operand expanded (operand() below).
struct Avx512 {
  using V = f32x16;
  using I = i32x16;
  static constexpr int64_t W = 16, NV = 4;
  static constexpr bool kExpandA = false;
};
struct Avx2 {
  using V = f32x8;
  using I = i32x8;
  static constexpr int64_t W = 8, NV = 2;
  static constexpr bool kExpandA = false;
};
struct Generic {
  using V = f32x4;
  using I = i32x4;
  static constexpr int64_t W = 4, NV = 2;
#if defined(__x86_64__)
  static constexpr bool kExpandA = true;  // SSE2: no broadcast load
#else
  static constexpr bool kExpandA = false;
#endif
};

// Unaligned loads and stores (a template argument drops the typedefs' aligned(4), so memcpy).
template <class V> RS_INLINE V load(const float* p) {
  V x;
  __builtin_memcpy(&x, p, sizeof x);
  return x;
}
template <class V> RS_INLINE void store(float* p, V x) { __builtin_memcpy(p, &x, sizeof x); }
// x in every lane (outside the micro-kernel's loop, which multiplies by the scalar directly so
// that the broadcast folds into the FMA).
template <class A> RS_INLINE typename A::V splat(float x) { return typename A::V{} + x; }

int64_t round_up(int64_t x, int64_t m) { return (x + m - 1) / m * m; }

// 2^x on a whole vector, for x <= 127 (every use here is a score minus its row's max or lse, so
// x <= 0 but for rounding): x = n + r with n = round(x), r in [-1/2, 1/2]; 2^r by a degree-5
// polynomial fitted to minimise the relative error on [-1/2, 1/2] (2.4e-7, 2 ulp); 2^n built in
// the exponent field. t = x + 1.5 2^23 rounds x to an integer and leaves n in t's low mantissa
// bits, so (bits(t) + 127) << 23 is 2^n's bit pattern with no float-to-int conversion. x <= -127
// gives exactly 0 (so 2^-inf = 0).
template <class A> RS_INLINE typename A::V exp2v(typename A::V x) {
  using V = typename A::V;
  using I = typename A::I;
  const V lo = splat<A>(-127.0f), round = splat<A>(12582912.0f);
  x = x < lo ? lo : x;
  const V t = x + round;
  const V r = x - (t - round);
  V p = splat<A>(1.3276468e-03f);
  p = p * r + 9.6755413e-03f;
  p = p * r + 5.5507133e-02f;
  p = p * r + 2.4022120e-01f;
  p = p * r + 6.9314697e-01f;
  p = p * r + 1.0000001f;
  const I two_n = ((I)t + 127) << 23;  // a vector cast reinterprets the bits
  return p * (V)two_n;
}

// The A operand of the micro-kernel below, A(r, kk) = a[r a_row + kk a_k] for r < kRows and
// kk < k, as the path reads it: in place where a vector can be loaded with one element in every
// lane (AVX2's and AVX-512's broadcast loads); expanded into `room` where it cannot (SSE2
// broadcasts with a shuffle, on the ports its adds need: the generic forward ran at 0.72 of
// sgemm), each element W times, [k][kRows][W], so that the micro-kernel loads it as a vector.
template <class A>
RS_INLINE const float* operand(const float* a, int64_t a_row, int64_t a_k, int64_t k, float* room) {
  if constexpr (!A::kExpandA) return a;
  constexpr int64_t W = A::W;
  for (int64_t kk = 0; kk < k; ++kk)
    for (int64_t r = 0; r < kRows; ++r)
      store<typename A::V>(room + (kk * kRows + r) * W, splat<A>(a[r * a_row + kk * a_k]));
  return room;
}

// The micro-kernel: C[r][0, NC W) (+)= sum_k A(r, k) B[k][0, NC W) for r < kRows, with
// A(r, k) = a[r a_row + k a_k] (a as operand() gives it). c has row stride ldc, b row stride
// ldb. NC <= A::NV.
template <class A, int64_t NC, bool kAccumulate>
RS_INLINE void micro(const float* a, int64_t a_row, int64_t a_k, int64_t k, const float* b, int64_t ldb, float* c,
                     int64_t ldc) {
  using V = typename A::V;
  constexpr int64_t W = A::W;
  V acc[kRows][NC];
#pragma GCC unroll 8
  for (int64_t r = 0; r < kRows; ++r)
#pragma GCC unroll 8
    for (int64_t v = 0; v < NC; ++v) acc[r][v] = kAccumulate ? load<V>(c + r * ldc + v * W) : V{};
  // Unrolled 4 times: the loop's own increments and branch cost AVX2's 16-register path about
  // 4% of its forward.
#pragma GCC unroll 4
  for (int64_t kk = 0; kk < k; ++kk) {
    V bv[NC];
#pragma GCC unroll 8
    for (int64_t v = 0; v < NC; ++v) bv[v] = load<V>(b + kk * ldb + v * W);
#pragma GCC unroll 8
    for (int64_t r = 0; r < kRows; ++r) {
      if constexpr (A::kExpandA) {
        const V ar = load<V>(a + (kk * kRows + r) * W);
#pragma GCC unroll 8
        for (int64_t v = 0; v < NC; ++v) acc[r][v] += ar * bv[v];
      } else {
        const float ar = a[r * a_row + kk * a_k];
#pragma GCC unroll 8
        for (int64_t v = 0; v < NC; ++v) acc[r][v] += ar * bv[v];
      }
    }
  }
#pragma GCC unroll 8
  for (int64_t r = 0; r < kRows; ++r)
#pragma GCC unroll 8
    for (int64_t v = 0; v < NC; ++v) store<V>(c + r * ldc + v * W, acc[r][v]);
}

// C[kRows, n] (+)= A B over n columns (a multiple of W), NV vectors at a time and the rest in
// one narrower call.
template <class A, bool kAccumulate>
RS_INLINE void micro_row(const float* a, int64_t a_row, int64_t a_k, int64_t k, const float* b, int64_t ldb, int64_t n,
                         float* c, int64_t ldc) {
  constexpr int64_t W = A::W, NV = A::NV;
  int64_t j = 0;
  for (; j + NV * W <= n; j += NV * W) micro<A, NV, kAccumulate>(a, a_row, a_k, k, b + j, ldb, c + j, ldc);
  const int64_t rest = (n - j) / W;
  if constexpr (NV > 3)
    if (rest == 3) return micro<A, 3, kAccumulate>(a, a_row, a_k, k, b + j, ldb, c + j, ldc);
  if constexpr (NV > 2)
    if (rest == 2) return micro<A, 2, kAccumulate>(a, a_row, a_k, k, b + j, ldb, c + j, ldc);
  if (rest == 1) micro<A, 1, kAccumulate>(a, a_row, a_k, k, b + j, ldb, c + j, ldc);
}

// S[kRows, panels NR) = A Bt over panels of NR = NV W keys, each panel packed [k][NR].
template <class A>
RS_INLINE void micro_panels(const float* a, int64_t a_row, int64_t k, const float* panels, int64_t panels_n,
                            float* s, int64_t lds) {
  constexpr int64_t NR = A::NV * A::W;
  for (int64_t pn = 0; pn < panels_n; ++pn)
    micro<A, A::NV, false>(a, a_row, 1, k, panels + pn * k * NR, NR, s + pn * NR, lds);
}

// The largest and the sum of a vector's lanes, by halving the vector (an extract and one op per
// halving), not by W - 1 dependent scalar ops.
template <class Half, class V> RS_INLINE void halves(V x, Half& lo, Half& hi) {
  __builtin_memcpy(&lo, &x, sizeof lo);
  __builtin_memcpy(&hi, reinterpret_cast<const char*>(&x) + sizeof lo, sizeof hi);
}
RS_INLINE float lanes_max(f32x4 x) {
  const float a = x[0] > x[1] ? x[0] : x[1], b = x[2] > x[3] ? x[2] : x[3];
  return a > b ? a : b;
}
RS_INLINE float lanes_max(f32x8 x) {
  f32x4 lo, hi;
  halves(x, lo, hi);
  return lanes_max(lo > hi ? lo : hi);
}
RS_INLINE float lanes_max(f32x16 x) {
  f32x8 lo, hi;
  halves(x, lo, hi);
  return lanes_max(lo > hi ? lo : hi);
}
RS_INLINE float lanes_sum(f32x4 x) { return (x[0] + x[1]) + (x[2] + x[3]); }
RS_INLINE float lanes_sum(f32x8 x) {
  f32x4 lo, hi;
  halves(x, lo, hi);
  return lanes_sum(lo + hi);
}
RS_INLINE float lanes_sum(f32x16 x) {
  f32x8 lo, hi;
  halves(x, lo, hi);
  return lanes_sum(lo + hi);
}

// ---- packing: once per (batch row, kv head) for K and V, once per query head for Q and dO ----

// K^T (or V^T) in panels of NR keys: panel p holds [d][NR], key j at column j - p NR, zeros past
// sk, so that a panel's row is NR contiguous keys of one feature.
void pack_transposed(const float* x, int64_t ld, int64_t s, int64_t d, int64_t NR, float* out) {
  const int64_t panels = round_up(s, NR) / NR;
  // A panel at a time, written in order: each output row is NR keys' feature c, read from NR
  // rows of x at once (a key at a time wrote d lines NR floats apart, 4% of the AVX2 forward).
  for (int64_t pn = 0; pn < panels; ++pn) {
    const int64_t j0 = pn * NR, keys = std::min(NR, s - j0);
    float* panel = out + pn * d * NR;
    for (int64_t c = 0; c < d; ++c) {
      float* row = panel + c * NR;
      for (int64_t jj = 0; jj < keys; ++jj) row[jj] = x[(j0 + jj) * ld + c];
      for (int64_t jj = keys; jj < NR; ++jj) row[jj] = 0.0f;
    }
  }
}

// Rows [s_pad][dp] of scale * x, zeros past s and past d.
void pack_rows(const float* x, int64_t ld, int64_t s, int64_t d, int64_t s_pad, int64_t dp, float scale, float* out) {
  std::fill(out, out + s_pad * dp, 0.0f);
  for (int64_t i = 0; i < s; ++i)
    for (int64_t c = 0; c < d; ++c) out[i * dp + c] = scale * x[i * ld + c];
}

// The keys each query row sees (visible_key_range), found once per call, and per strip of
// kRows rows the keys any of its rows sees: from the first visible key of any row to past the
// last (empty when none sees any; rows past sq see nothing).
struct RowKeys {
  std::vector<KeyRange> row, strip;
  explicit RowKeys(const AttentionParams& p) : row(round_up(p.sq, kRows)), strip(row.size() / kRows) {
    for (int64_t i = 0; i < p.sq; ++i) row[i] = visible_key_range(p, i);
    for (size_t g = 0; g < strip.size(); ++g) strip[g] = span(int64_t(g) * kRows, kRows);
  }
  // Rows [i0, i0 + n) together (i0 a multiple of kRows).
  KeyRange block(int64_t i0, int64_t n) const {
    KeyRange all;
    for (int64_t g = i0 / kRows; g < (i0 + n + kRows - 1) / kRows; ++g) all = hull(all, strip[g]);
    return all;
  }

 private:
  KeyRange span(int64_t i0, int64_t n) const {
    KeyRange all;
    for (int64_t i = i0; i < i0 + n; ++i) all = hull(all, row[i]);
    return all;
  }
};

// A 64-byte aligned float scratch buffer.
struct Scratch {
  std::unique_ptr<float[], void (*)(void*)> data{nullptr, std::free};
  explicit Scratch(int64_t n) {
    void* p = std::aligned_alloc(64, static_cast<size_t>(round_up(std::max<int64_t>(n, 1) * 4, 64)));
    RS_CHECK(p != nullptr, "attention: out of memory for ", n, " floats of scratch");
    data.reset(static_cast<float*>(p));
  }
  float* get() const { return data.get(); }
  float& operator[](int64_t i) const { return data[i]; }
};

// Tile sizes: query rows and keys per block, the caller's blocks rounded to the strip and the
// panel, and capped where L2 stops holding a block's working set.
struct Tiles {
  int64_t Bq, Bk;
  Tiles(const AttentionParams& p, int64_t NR, int64_t max_q, int64_t max_k)
      : Bq(std::max(kRows, std::min(max_q, p.block_q) / kRows * kRows)),
        Bk(std::max(NR, std::min(max_k, p.block_k) / NR * NR)) {}
};

// ---- forward ----

template <class A>
RS_INLINE void forward_impl(const AttentionParams& p, const float* q, const float* k, const float* v, float* out,
                            float* lse) {
  using V = typename A::V;
  constexpr int64_t W = A::W, NR = A::NV * A::W;
  const int64_t H = p.H, Hkv = p.Hkv, d = p.d, group = H / Hkv;
  const int64_t ldq = H * d, ldk = Hkv * d;
  const int64_t dp = round_up(d, W), sk_pad = round_up(p.sk, NR);
  const Tiles t(p, NR, 252, 256);
  const RowKeys keys(p);
  const float scale2 = static_cast<float>(p.softmax_scale * kLog2e);

  // K^T is packed in panels of NR keys, V in rows of dp (both once per kv head): V's rows read in
  // place lie Hkv d apart, so that each key of a strip's P V is a new cache line and, every few
  // keys, a new page (AVX2's 16-column calls missed the TLB once a key, the largest part of what
  // its forward lost to sgemm). Q is read in place, but for a last strip of fewer than kRows
  // rows, which is copied so that the micro-kernel never reads past q.
  Scratch kt(sk_pad * d), vp(sk_pad * dp), q_tail(kRows * d), s(kRows * t.Bk), acc(t.Bq * dp), m(t.Bq),
      l(t.Bq), expanded(A::kExpandA ? kRows * W * std::max(d, t.Bk) : 0);
  const V scale2v = splat<A>(scale2);
  for (int64_t bi = 0; bi < p.b; ++bi)
    for (int64_t g = 0; g < Hkv; ++g) {
      pack_transposed(k + bi * p.sk * ldk + g * d, ldk, p.sk, d, NR, kt.get());
      pack_rows(v + bi * p.sk * ldk + g * d, ldk, p.sk, d, sk_pad, dp, 1.0f, vp.get());
      for (int64_t h = g * group; h < (g + 1) * group; ++h) {
        const float* qh = q + bi * p.sq * ldq + h * d;
        float* oh = out + bi * p.sq * ldq + h * d;
        float* lse_h = lse + (bi * H + h) * p.sq;

        for (int64_t i0 = 0; i0 < p.sq; i0 += t.Bq) {
          const int64_t bq = std::min(t.Bq, p.sq - i0);
          std::fill(acc.get(), acc.get() + t.Bq * dp, 0.0f);
          std::fill(m.get(), m.get() + t.Bq, kNegInf);
          std::fill(l.get(), l.get() + t.Bq, 0.0f);
          const KeyRange block_keys = keys.block(i0, bq);  // keys any row of the block sees
          const int64_t tail_rows = bq % kRows;  // a last strip of fewer rows, copied once
          if (tail_rows > 0) pack_rows(qh + (i0 + bq - tail_rows) * ldq, ldq, tail_rows, d, kRows, d, 1.0f, q_tail.get());

          for (int64_t j0 = block_keys.begin / t.Bk * t.Bk; j0 < block_keys.end; j0 += t.Bk) {
            for (int64_t r0 = 0; r0 < bq; r0 += kRows) {
              const int64_t rows = std::min(kRows, bq - r0);
              // This strip's keys in the block, columns [c0, seen), c0 on a panel's edge.
              const KeyRange strip = keys.strip[(i0 + r0) / kRows];
              const int64_t seen = std::min(t.Bk, strip.end - j0);
              if (!strip.meets(j0, t.Bk)) continue;  // the mask hides the strip
              const int64_t c0 = std::max<int64_t>(0, strip.begin - j0) / NR * NR;
              const int64_t width = round_up(seen, NR);
              float* sr = s.get();
              // S = Q K^T for the strip, then the mask: -inf outside each row's own keys.
              const bool tail = rows < kRows;
              const int64_t ldqs = tail ? d : ldq;
              const float* qa = operand<A>(tail ? q_tail.get() : qh + (i0 + r0) * ldq, ldqs, 1, d, expanded.get());
              micro_panels<A>(qa, ldqs, d, kt.get() + (j0 + c0) * d, (width - c0) / NR, sr + c0, t.Bk);
              for (int64_t r = 0; r < kRows; ++r) {
                const KeyRange row = keys.row[i0 + r0 + r];
                const int64_t lo = row.empty() ? width : std::clamp<int64_t>(row.begin - j0, c0, width);
                const int64_t hi = row.empty() ? width : std::clamp<int64_t>(row.end - j0, lo, width);
                for (int64_t c = c0; c < lo; ++c) sr[r * t.Bk + c] = kNegInf;
                for (int64_t c = hi; c < width; ++c) sr[r * t.Bk + c] = kNegInf;
              }
              // Online softmax on the strip (Milakov & Gimelshein 2018), in base 2 as FlashAttention-2
              // does: with S2 = softmax_scale log2(e) S, exp(S - m) = 2^(S2 - m2), the running max m2
              // and denominator l of each row, the accumulator rescaled by 2^(m2_old - m2_new).
              for (int64_t r = 0; r < kRows; ++r) {
                float* row = sr + r * t.Bk;
                const int64_t ri = r0 + r;
                // The row's max over NV chains (the columns are whole panels), not one chain of
                // dependent maxes.
                V mxs[A::NV];
                for (V& mv : mxs) mv = splat<A>(kNegInf);
                for (int64_t c = c0; c < width; c += NR)
#pragma GCC unroll 4
                  for (int64_t v = 0; v < A::NV; ++v) {
                    const V x = load<V>(row + c + v * W);
                    mxs[v] = x > mxs[v] ? x : mxs[v];
                  }
                V mx = mxs[0];
                for (int64_t v = 1; v < A::NV; ++v) mx = mxs[v] > mx ? mxs[v] : mx;
                const float m_new = std::max(ri < bq ? m[ri] : kNegInf, scale2 * lanes_max(mx));
                if (m_new == kNegInf) {  // nothing visible yet in this row: P = 0
                  std::fill(row + c0, row + width, 0.0f);
                  continue;
                }
                V sum{};
                const V mv = splat<A>(m_new);
                for (int64_t c = c0; c < width; c += W) {
                  const V e = exp2v<A>(load<V>(row + c) * scale2v - mv);
                  store<V>(row + c, e);
                  sum += e;
                }
                const float total = lanes_sum(sum);
                // 2^(m_old - m_new): 1 when the max stands, 0 on the row's first visible block.
                const float alpha = m_new == m[ri] ? 1.0f : exp2v<A>(splat<A>(m[ri] - m_new))[0];
                l[ri] = l[ri] * alpha + total;
                m[ri] = m_new;
                if (alpha != 1.0f) {
                  float* o = acc.get() + ri * dp;
                  const V av = splat<A>(alpha);
                  for (int64_t c = 0; c < dp; c += W) store<V>(o + c, load<V>(o + c) * av);
                }
              }
              // O += P V over the strip's keys.
              micro_row<A, true>(operand<A>(sr + c0, t.Bk, 1, seen - c0, expanded.get()), t.Bk, 1, seen - c0,
                                 vp.get() + (j0 + c0) * dp, dp, dp, acc.get() + r0 * dp, dp);
            }
          }

          for (int64_t r = 0; r < bq; ++r) {
            float* o = oh + (i0 + r) * ldq;
            if (l[r] == 0.0f) {  // fully masked row: out 0, lse -inf, no 0/0
              std::fill(o, o + d, 0.0f);
              lse_h[i0 + r] = kNegInf;
              continue;
            }
            const float inv = 1.0f / l[r];
            for (int64_t c = 0; c < d; ++c) o[c] = acc[r * dp + c] * inv;
            lse_h[i0 + r] = static_cast<float>(kLn2 * (double(m[r]) + std::log2(double(l[r]))));
          }
        }
      }
    }
}

// ---- backward ----

template <class A>
RS_INLINE void backward_impl(const AttentionParams& p, const float* q, const float* k, const float* v,
                             const float* out, const float* dout, const float* lse, float* dq, float* dk, float* dv) {
  using V = typename A::V;
  constexpr int64_t W = A::W, NR = A::NV * A::W;
  const int64_t H = p.H, Hkv = p.Hkv, d = p.d, group = H / Hkv;
  const int64_t ldq = H * d, ldk = Hkv * d;
  const int64_t dp = round_up(d, W), sq_pad = round_up(p.sq, kRows), sk_pad = round_up(p.sk, NR);
  const Tiles t(p, NR, 96, 128);
  const RowKeys keys(p);
  const float scale2 = static_cast<float>(p.softmax_scale * kLog2e);

  // Per kv head: K^T and V^T panels (for S and dP), K rows (for dQ). Per query head: Qs and dO
  // rows, D and lse2 per row, and dQ's accumulator. Per key block: dK's and dV's accumulators
  // and the P and dS tiles (rows padded to whole strips, columns to whole panels).
  // P^T dO reads kRows columns of P at a time, so the tiles have kRows spare columns and the
  // accumulators kRows spare rows.
  const int64_t ldp = t.Bk + kRows;
  Scratch kt(sk_pad * d), vt(sk_pad * d), kr(sk_pad * dp), qs(sq_pad * dp), dos(sq_pad * dp), D(sq_pad),
      lse2(sq_pad), dq_acc(sq_pad * dp), dk_acc(ldp * dp), dv_acc(ldp * dp), pt(t.Bq * ldp), dst(t.Bq * ldp),
      expanded(A::kExpandA ? kRows * W * std::max({d, t.Bk, round_up(t.Bq, kRows)}) : 0);
  for (int64_t bi = 0; bi < p.b; ++bi)
    for (int64_t g = 0; g < Hkv; ++g) {
      const int64_t kbase = bi * p.sk * ldk + g * d;
      pack_transposed(k + kbase, ldk, p.sk, d, NR, kt.get());
      pack_transposed(v + kbase, ldk, p.sk, d, NR, vt.get());
      pack_rows(k + kbase, ldk, p.sk, d, sk_pad, dp, 1.0f, kr.get());
      for (int64_t h = g * group; h < (g + 1) * group; ++h) {
        const int64_t qbase = bi * p.sq * ldq + h * d;
        pack_rows(q + qbase, ldq, p.sq, d, sq_pad, dp, scale2, qs.get());
        pack_rows(dout + qbase, ldq, p.sq, d, sq_pad, dp, 1.0f, dos.get());
        const float* lse_h = lse + (bi * H + h) * p.sq;
        for (int64_t i = 0; i < sq_pad; ++i) {
          // D = rowsum(dout * out); padding rows get lse2 = -inf, so P = 0 there.
          double dsum = 0;
          if (i < p.sq)
            for (int64_t c = 0; c < d; ++c) dsum += double(dout[qbase + i * ldq + c]) * double(out[qbase + i * ldq + c]);
          D[i] = static_cast<float>(dsum);
          lse2[i] = i < p.sq ? static_cast<float>(double(lse_h[i]) * kLog2e) : kNegInf;
        }
        std::fill(dq_acc.get(), dq_acc.get() + sq_pad * dp, 0.0f);

        // Key blocks outside, query blocks inside: dK_j and dV_j stay in cache across the inner
        // loop (Dao 2023, Algorithm 2).
        for (int64_t j0 = 0; j0 < p.sk; j0 += t.Bk) {
          const int64_t bk = std::min(t.Bk, p.sk - j0);
          std::fill(dk_acc.get(), dk_acc.get() + ldp * dp, 0.0f);
          std::fill(dv_acc.get(), dv_acc.get() + ldp * dp, 0.0f);
          bool touched = false;
          for (int64_t i0 = 0; i0 < p.sq; i0 += t.Bq) {
            const int64_t bq = std::min(t.Bq, p.sq - i0);
            // Keys of this block that any row of the query block sees: columns [block_c0, block_seen).
            const KeyRange block_keys = keys.block(i0, bq);
            const int64_t block_seen = std::min(bk, block_keys.end - j0);
            // Hidden by the mask: skip (other query blocks may still see this key block).
            if (!block_keys.meets(j0, bk)) continue;
            const int64_t block_c0 = std::max<int64_t>(0, block_keys.begin - j0) / kRows * kRows;
            touched = true;
            const int64_t block_width = std::max(round_up(block_seen, NR), round_up(block_seen, kRows));
            const int64_t strips = round_up(bq, kRows);
            for (int64_t r0 = 0; r0 < strips; r0 += kRows) {
              float* pr = pt.get() + r0 * ldp;
              float* dsr = dst.get() + r0 * ldp;
              const KeyRange strip = keys.strip[(i0 + r0) / kRows];
              const int64_t seen = std::min(bk, strip.end - j0);
              const bool meets = strip.meets(j0, bk);
              const int64_t c0 = meets ? std::max<int64_t>(0, strip.begin - j0) / NR * NR : 0;
              const int64_t width = meets ? round_up(seen, NR) : 0;
              if (width > 0) {
                // P = 2^(Qs K^T - lse2), zero outside each row's keys and in padding rows.
                micro_panels<A>(operand<A>(qs.get() + (i0 + r0) * dp, dp, 1, d, expanded.get()), dp, d,
                                kt.get() + (j0 + c0) * d, (width - c0) / NR, pr + c0, ldp);
                // dP = dO V^T
                micro_panels<A>(operand<A>(dos.get() + (i0 + r0) * dp, dp, 1, d, expanded.get()), dp, d,
                                vt.get() + (j0 + c0) * d, (width - c0) / NR, dsr + c0, ldp);
                for (int64_t r = 0; r < kRows; ++r) {
                  const int64_t ri = i0 + r0 + r;
                  float* prow = pr + r * ldp;
                  float* dsrow = dsr + r * ldp;
                  const V l2 = splat<A>(lse2[ri]), Dv = splat<A>(D[ri]);
                  if (lse2[ri] == kNegInf) {  // the row sees no key at all (padding rows too)
                    std::fill(prow, prow + width, 0.0f);
                    std::fill(dsrow, dsrow + width, 0.0f);
                    continue;
                  }
                  for (int64_t c = c0; c < width; c += W) {
                    const V pv = exp2v<A>(load<V>(prow + c) - l2);
                    store<V>(prow + c, pv);
                    store<V>(dsrow + c, pv * (load<V>(dsrow + c) - Dv));  // dS = P (dP - D)
                  }
                  const KeyRange row = keys.row[ri];
                  const int64_t lo = row.empty() ? width : std::clamp<int64_t>(row.begin - j0, 0, width);
                  const int64_t hi = row.empty() ? width : std::clamp<int64_t>(row.end - j0, lo, width);
                  for (int64_t c = 0; c < lo; ++c) prow[c] = dsrow[c] = 0.0f;
                  for (int64_t c = hi; c < width; ++c) prow[c] = dsrow[c] = 0.0f;
                }
                // dQ_i += dS K_j (scaled by softmax_scale at the end).
                micro_row<A, true>(operand<A>(dsr + c0, ldp, 1, seen - c0, expanded.get()), ldp, 1, seen - c0,
                                   kr.get() + (j0 + c0) * dp, dp, dp, dq_acc.get() + (i0 + r0) * dp, dp);
              }
              // The rest of the block's columns this strip does not see: zero, for P^T dO below.
              for (int64_t r = 0; r < kRows; ++r) {
                std::fill(pr + r * ldp + width, pr + r * ldp + block_width, 0.0f);
                std::fill(dsr + r * ldp + width, dsr + r * ldp + block_width, 0.0f);
              }
            }
            // dV_j += P^T dO_i and dK_j += dS^T Qs_i: A = P^T, read down P's columns.
            for (int64_t j = block_c0; j < block_seen; j += kRows) {
              micro_row<A, true>(operand<A>(pt.get() + j, 1, ldp, strips, expanded.get()), 1, ldp, strips,
                                 dos.get() + i0 * dp, dp, dp, dv_acc.get() + j * dp, dp);
              micro_row<A, true>(operand<A>(dst.get() + j, 1, ldp, strips, expanded.get()), 1, ldp, strips,
                                 qs.get() + i0 * dp, dp, dp, dk_acc.get() + j * dp, dp);
            }
          }
          if (!touched) continue;
          // dK = softmax_scale dS^T Q = ln 2 dS^T Qs, since Qs = softmax_scale log2(e) Q.
          for (int64_t j = 0; j < bk; ++j)
            for (int64_t c = 0; c < d; ++c) {
              dk[kbase + (j0 + j) * ldk + c] += static_cast<float>(kLn2) * dk_acc[j * dp + c];
              dv[kbase + (j0 + j) * ldk + c] += dv_acc[j * dp + c];
            }
        }
        const float scale = static_cast<float>(p.softmax_scale);
        for (int64_t i = 0; i < p.sq; ++i)
          for (int64_t c = 0; c < d; ++c) dq[qbase + i * ldq + c] += scale * dq_acc[i * dp + c];
      }
    }
}

RS_TARGET_AVX512 void forward_avx512(const AttentionParams& p, const float* q, const float* k, const float* v,
                                     float* out, float* lse) {
  forward_impl<Avx512>(p, q, k, v, out, lse);
}
RS_TARGET_AVX2 void forward_avx2(const AttentionParams& p, const float* q, const float* k, const float* v, float* out,
                                 float* lse) {
  forward_impl<Avx2>(p, q, k, v, out, lse);
}
void forward_generic(const AttentionParams& p, const float* q, const float* k, const float* v, float* out,
                     float* lse) {
  forward_impl<Generic>(p, q, k, v, out, lse);
}
RS_TARGET_AVX512 void backward_avx512(const AttentionParams& p, const float* q, const float* k, const float* v,
                                      const float* out, const float* dout, const float* lse, float* dq, float* dk,
                                      float* dv) {
  backward_impl<Avx512>(p, q, k, v, out, dout, lse, dq, dk, dv);
}
RS_TARGET_AVX2 void backward_avx2(const AttentionParams& p, const float* q, const float* k, const float* v,
                                  const float* out, const float* dout, const float* lse, float* dq, float* dk,
                                  float* dv) {
  backward_impl<Avx2>(p, q, k, v, out, dout, lse, dq, dk, dv);
}
void backward_generic(const AttentionParams& p, const float* q, const float* k, const float* v, const float* out,
                      const float* dout, const float* lse, float* dq, float* dk, float* dv) {
  backward_impl<Generic>(p, q, k, v, out, dout, lse, dq, dk, dv);
}

}  // namespace

void attention_forward_v2(const AttentionParams& p, const float* q, const float* k, const float* v, float* out,
                          float* lse) {
  validate(p);
  switch (active_cpu_isa()) {
#if RS_HAVE_X86_PATHS
    case CpuIsa::avx512: return forward_avx512(p, q, k, v, out, lse);
    case CpuIsa::avx2: return forward_avx2(p, q, k, v, out, lse);
#endif
    default: return forward_generic(p, q, k, v, out, lse);
  }
}

void attention_backward_v2(const AttentionParams& p, const float* q, const float* k, const float* v, const float* out,
                           const float* dout, const float* lse, float* dq, float* dk, float* dv) {
  validate(p);
  switch (active_cpu_isa()) {
#if RS_HAVE_X86_PATHS
    case CpuIsa::avx512: return backward_avx512(p, q, k, v, out, dout, lse, dq, dk, dv);
    case CpuIsa::avx2: return backward_avx2(p, q, k, v, out, dout, lse, dq, dk, dv);
#endif
    default: return backward_generic(p, q, k, v, out, dout, lse, dq, dk, dv);
  }
}

}  // namespace ringside::kernels::cpu

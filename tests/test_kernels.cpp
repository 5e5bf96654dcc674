// CPU kernels against naive fp64 implementations, over edge shapes.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <memory>
#include <random>
#include <string>

#include "kernels/cpu/attention.h"
#include "kernels/cpu/isa.h"
#include "kernels/cpu/ops.h"
#include "kernels/cpu/vec.h"
#include "forced_isa.h"
#include "naive.h"

namespace kc = ringside::kernels::cpu;
using naive::Vec;

namespace {

Vec random_vec(size_t n, unsigned seed, double scale = 1.0) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<double> u(-1.0, 1.0);
  Vec v(n);
  // Values exactly representable in float, so float and double kernels see the same input.
  for (auto& x : v) x = static_cast<float>(scale * u(rng));
  return v;
}

template <class T> std::vector<T> cast(const Vec& v) { return std::vector<T>(v.begin(), v.end()); }

template <class T> double rel_err(const std::vector<T>& a, const Vec& ref) {
  double num = 0, den = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    const double e = double(a[i]) - ref[i];
    num += e * e;
    den += ref[i] * ref[i];
  }
  return den > 0 ? std::sqrt(num / den) : std::sqrt(num);
}

template <class T> bool any_nan(const std::vector<T>& v) {
  for (T x : v)
    if (std::isnan(x)) return true;
  return false;
}

// lse: -inf exactly where the reference has -inf, else close in absolute terms.
template <class T> void check_lse(const std::vector<T>& lse, const Vec& ref, double tol) {
  REQUIRE(lse.size() == ref.size());
  for (size_t i = 0; i < ref.size(); ++i) {
    INFO("lse row " << i);
    if (std::isinf(ref[i])) {
      REQUIRE(std::isinf(lse[i]));
      REQUIRE(lse[i] < 0);
    } else {
      REQUIRE(std::abs(double(lse[i]) - ref[i]) < tol);
    }
  }
}

struct AttnCase {
  std::string name;
  kc::AttentionParams p;
  std::shared_ptr<kc::DocumentMask> mask;  ///< what p.mask points at, kept alive with the case
};

// A case whose params point at a mask of documents (starts, lengths) and a window.
AttnCase masked(std::string name, kc::AttentionParams p, std::vector<int64_t> starts, std::vector<int64_t> lengths,
                int64_t window) {
  auto m = std::make_shared<kc::DocumentMask>(kc::DocumentMask{std::move(starts), std::move(lengths), window});
  p.mask = m.get();
  return {std::move(name), p, m};
}

kc::AttentionParams params(int64_t b, int64_t sq, int64_t sk, int64_t H, int64_t Hkv, int64_t d, bool causal) {
  kc::AttentionParams p;
  p.b = b;
  p.sq = sq;
  p.sk = sk;
  p.H = H;
  p.Hkv = Hkv;
  p.d = d;
  p.causal = causal;
  p.softmax_scale = 1.0 / std::sqrt(double(d));
  return p;
}

std::vector<AttnCase> attention_cases() {
  std::vector<AttnCase> cases;
  cases.push_back({"one token", params(1, 1, 1, 2, 1, 8, true), nullptr});
  {
    auto p = params(1, 37, 37, 4, 2, 16, true);
    p.block_q = 16, p.block_k = 8;
    cases.push_back({"s not a multiple of the block", p, nullptr});
  }
  {
    auto p = params(2, 40, 40, 3, 3, 8, false);
    p.block_q = 16, p.block_k = 16;
    cases.push_back({"H = Hkv, full attention", p, nullptr});
  }
  {
    auto p = params(2, 33, 33, 4, 1, 8, true);
    p.block_q = 8, p.block_k = 16;
    cases.push_back({"Hkv = 1 (multi-query)", p, nullptr});
  }
  {
    auto p = params(1, 16, 16, 2, 1, 8, true);
    p.q_offset = 0, p.k_offset = 64;
    cases.push_back({"query block before the key block (all masked)", p, nullptr});
  }
  {
    auto p = params(1, 24, 32, 2, 2, 8, true);
    p.q_offset = 8, p.k_offset = 0, p.block_q = 8, p.block_k = 8;
    cases.push_back({"query block across the key block", p, nullptr});
  }
  {
    auto p = params(1, 16, 32, 2, 1, 8, true);
    p.q_offset = 100, p.k_offset = 0, p.block_q = 8, p.block_k = 8;
    cases.push_back({"query block after the key block", p, nullptr});
  }
  {
    auto p = params(1, 12, 12, 2, 2, 8, true);
    p.q_offset = 0, p.k_offset = 5, p.block_q = 4, p.block_k = 4;
    cases.push_back({"some rows fully masked", p, nullptr});
  }
  {
    auto p = params(2, 20, 20, 4, 2, 8, true);
    p.q_offset = 1, p.q_stride = 4, p.k_offset = 3, p.k_stride = 4, p.block_q = 8, p.block_k = 8;
    cases.push_back({"strided (striped) positions", p, nullptr});
  }
  cases.push_back({"d = 128, default blocks, s = 300", params(1, 300, 300, 2, 1, 128, true), nullptr});
  // Head dims of real models (64: GPT-2, 80: Phi-2, 128: Llama 3) and 32 and 160 around them:
  // d = 80 and 160 are not multiples of version 2's four-vector register row; s = 263 spans
  // more than one of its key blocks and ends mid-strip.
  for (int64_t d : {32, 64, 80, 128, 160})
    cases.push_back({"d = " + std::to_string(d) + ", GQA, s = 263", params(1, 263, 263, 4, 2, d, true), nullptr});
  {
    auto p = params(1, 7, 300, 2, 1, 64, true);
    p.q_offset = 290, p.k_offset = 0;
    cases.push_back({"7 queries at the end of 300 keys (a ring step's diagonal)", p, nullptr});
  }
  // Packed documents (varlen, cu_seqlens) and sliding windows: documents of 1, 2, odd and long
  // lengths; padding between documents and after the last; windows of 1, smaller than a tile
  // and larger than a document; both together; strided positions (a striped ring step).
  auto blocks = [](kc::AttentionParams p, int64_t bq, int64_t bk) { return p.block_q = bq, p.block_k = bk, p; };
  cases.push_back(masked("documents 1, 2, 5, 40", blocks(params(1, 48, 48, 4, 2, 8, true), 8, 8), {0, 1, 3, 8},
                         {1, 2, 5, 40}, 0));
  cases.push_back(masked("documents with padding between and after", blocks(params(2, 40, 40, 2, 1, 8, true), 8, 16),
                         {0, 8, 20}, {5, 1, 13}, 0));
  cases.push_back(masked("window 1 (each query sees itself)", blocks(params(1, 30, 30, 2, 2, 8, true), 8, 8), {}, {}, 1));
  cases.push_back(masked("window 5, smaller than a tile, documents 17 and 30", blocks(params(1, 47, 47, 2, 1, 16, true), 8, 8),
                         {0, 17}, {17, 30}, 5));
  cases.push_back(masked("window 100, larger than every document", params(1, 50, 50, 2, 1, 8, true), {0, 10}, {10, 40}, 100));
  cases.push_back(masked("not causal: documents and window 4", blocks(params(1, 41, 41, 2, 1, 8, false), 8, 8), {0, 3, 20},
                         {3, 16, 21}, 4));
  {
    auto p = blocks(params(1, 20, 20, 2, 1, 8, true), 8, 8);
    p.q_offset = 1, p.q_stride = 4, p.k_offset = 3, p.k_stride = 4;
    cases.push_back(masked("strided positions, documents 25 and 50, window 30", p, {0, 30}, {25, 50}, 30));
  }
  {
    auto p = params(1, 40, 90, 2, 1, 8, true);
    p.q_offset = 100, p.k_offset = 50, p.block_q = 8, p.block_k = 16;
    cases.push_back(masked("a ring step: queries 100.., keys 50.., document from 70", p, {0, 70}, {70, 80}, 0));
  }
  for (int64_t d : {64, 80})
    cases.push_back(masked("d = " + std::to_string(d) + ", s = 600, documents 1, 2, 301, 290, 6, window 200",
                           params(1, 600, 600, 4, 2, d, true), {0, 1, 3, 304, 594}, {1, 2, 301, 290, 6}, 200));
  return cases;
}

// The kernels under test: version 1 and version 2 (float), behind one signature.
template <class T> struct Kernels {
  void (*forward)(const kc::AttentionParams&, const T*, const T*, const T*, T*, T*);
  void (*backward)(const kc::AttentionParams&, const T*, const T*, const T*, const T*, const T*, const T*, T*, T*, T*);
};
template <class T> constexpr Kernels<T> kVersion1{kc::attention_forward_v1<T>, kc::attention_backward_v1<T>};
constexpr Kernels<float> kVersion2{kc::attention_forward_v2, kc::attention_backward_v2};

template <class T>
void check_attention(const kc::AttentionParams& p, double tol_out, double tol_grad, Kernels<T> kernels = {kc::attention_forward<T>, kc::attention_backward<T>}) {
  const Vec q = random_vec(p.b * p.sq * p.H * p.d, 1), k = random_vec(p.b * p.sk * p.Hkv * p.d, 2),
            v = random_vec(p.b * p.sk * p.Hkv * p.d, 3), dout = random_vec(q.size(), 4);
  Vec out_ref, lse_ref, dq_ref, dk_ref, dv_ref;
  naive::attention_forward(p, q, k, v, out_ref, lse_ref);
  naive::attention_backward(p, q, k, v, dout, dq_ref, dk_ref, dv_ref);

  auto qt = cast<T>(q), kt = cast<T>(k), vt = cast<T>(v), dot = cast<T>(dout);
  std::vector<T> out(q.size()), lse(p.b * p.H * p.sq);
  kernels.forward(p, qt.data(), kt.data(), vt.data(), out.data(), lse.data());
  CHECK_FALSE(any_nan(out));
  CHECK(rel_err(out, out_ref) < tol_out);
  check_lse(lse, lse_ref, tol_out * 10);

  std::vector<T> dq(q.size(), T(0)), dk(k.size(), T(0)), dv(v.size(), T(0));
  kernels.backward(p, qt.data(), kt.data(), vt.data(), out.data(), dot.data(), lse.data(), dq.data(), dk.data(),
                   dv.data());
  CHECK_FALSE(any_nan(dq));
  CHECK_FALSE(any_nan(dk));
  CHECK_FALSE(any_nan(dv));
  CHECK(rel_err(dq, dq_ref) < tol_grad);
  CHECK(rel_err(dk, dk_ref) < tol_grad);
  CHECK(rel_err(dv, dv_ref) < tol_grad);
}

// Each element of `analytic` against the central difference (loss(at + e) - loss(at - e)) / 2e
// in that element of `at` (e = 1e-6, fp64).
template <class Loss>
void check_central_differences(const Vec& analytic, const Vec& at, Loss loss, double margin) {
  REQUIRE(analytic.size() == at.size());
  const double e = 1e-6;
  for (size_t i = 0; i < at.size(); ++i) {
    Vec plus = at, minus = at;
    plus[i] += e, minus[i] -= e;
    INFO("element " << i);
    REQUIRE(analytic[i] == Approx((loss(plus) - loss(minus)) / (2 * e)).margin(margin));
  }
}

}  // namespace

TEST_CASE("naive attention backward agrees with finite differences", "[kernels][attention]") {
  // The naive backward is the yardstick below, so it is checked first, on its own.
  auto p = params(1, 5, 6, 2, 1, 4, true);
  p.q_offset = 2;
  const Vec q = random_vec(5 * 2 * 4, 11), k = random_vec(6 * 4, 12), v = random_vec(6 * 4, 13),
            dout = random_vec(5 * 2 * 4, 14);
  Vec dq, dk, dv;
  naive::attention_backward(p, q, k, v, dout, dq, dk, dv);
  auto loss = [&](const Vec& q2, const Vec& k2, const Vec& v2) {
    Vec out, lse;
    naive::attention_forward(p, q2, k2, v2, out, lse);
    double l = 0;
    for (size_t i = 0; i < out.size(); ++i) l += out[i] * dout[i];
    return l;
  };
  const double eps = 1e-6;
  auto fd = [&](Vec x, size_t i, int which) {
    Vec xp = x, xm = x;
    xp[i] += eps, xm[i] -= eps;
    if (which == 0) return (loss(xp, k, v) - loss(xm, k, v)) / (2 * eps);
    if (which == 1) return (loss(q, xp, v) - loss(q, xm, v)) / (2 * eps);
    return (loss(q, k, xp) - loss(q, k, xm)) / (2 * eps);
  };
  for (size_t i = 0; i < q.size(); ++i) REQUIRE(dq[i] == Approx(fd(q, i, 0)).margin(1e-8));
  for (size_t i = 0; i < k.size(); ++i) REQUIRE(dk[i] == Approx(fd(k, i, 1)).margin(1e-8));
  for (size_t i = 0; i < v.size(); ++i) REQUIRE(dv[i] == Approx(fd(v, i, 2)).margin(1e-8));
}

TEST_CASE("attention forward and backward match the naive fp64 attention", "[kernels][attention]") {
  for (const AttnCase& c : attention_cases()) {
    SECTION(c.name + " (fp64)") { check_attention<double>(c.p, 1e-12, 1e-11); }
    SECTION(c.name + " (fp32)") { check_attention<float>(c.p, 2e-6, 1e-5); }
  }
}

TEST_CASE("both kernel versions, and version 2 on every path this CPU runs, match the naive fp64 attention",
          "[kernels][attention][isa]") {
  for (const AttnCase& c : attention_cases()) {
    SECTION(c.name + " (version 1, fp32)") { check_attention<float>(c.p, 2e-6, 1e-5, kVersion1<float>); }
    SECTION(c.name + " (version 1, fp64)") { check_attention<double>(c.p, 1e-12, 1e-11, kVersion1<double>); }
    for (kc::CpuIsa isa : {kc::CpuIsa::avx512, kc::CpuIsa::avx2, kc::CpuIsa::generic}) {
      if (!kc::cpu_supports(isa)) {
        WARN("this CPU cannot run the " << kc::to_string(isa) << " path; it is not tested here");
        continue;
      }
      SECTION(c.name + " (version 2, " + kc::to_string(isa) + ")") {
        ringside::ForcedIsa forced(isa);
        REQUIRE(kc::active_cpu_isa() == isa);
        check_attention<float>(c.p, 2e-6, 1e-5, kVersion2);
      }
    }
  }
}

TEST_CASE("version 2 skips what the causal mask hides: a key block after every query adds nothing",
          "[kernels][attention]") {
  // Keys 64.. after queries 0..15: every row is fully masked, so out = 0, lse = -inf, and the
  // backward adds exactly nothing to gradients that already hold values.
  auto p = params(1, 16, 40, 2, 1, 32, true);
  p.k_offset = 64;
  const Vec q = random_vec(16 * 2 * 32, 1), k = random_vec(40 * 32, 2);
  std::vector<float> qf = cast<float>(q), kf = cast<float>(k), out(q.size(), 7.0f), lse(2 * 16, 7.0f);
  kc::attention_forward_v2(p, qf.data(), kf.data(), kf.data(), out.data(), lse.data());
  for (float x : out) REQUIRE(x == 0.0f);
  for (float x : lse) REQUIRE((std::isinf(x) && x < 0));
  std::vector<float> dq(q.size(), 1.5f), dk(k.size(), 2.5f), dv(k.size(), 3.5f);
  kc::attention_backward_v2(p, qf.data(), kf.data(), kf.data(), out.data(), qf.data(), lse.data(), dq.data(), dk.data(),
                            dv.data());
  for (float x : dq) REQUIRE(x == 1.5f);
  for (float x : dk) REQUIRE(x == 2.5f);
  for (float x : dv) REQUIRE(x == 3.5f);
}

TEST_CASE("the CPU path names parse, and a path the CPU lacks is refused with its reason", "[kernels][isa]") {
  for (kc::CpuIsa isa : {kc::CpuIsa::avx512, kc::CpuIsa::avx2, kc::CpuIsa::generic})
    REQUIRE(kc::parse_cpu_isa(kc::to_string(isa)) == isa);
  REQUIRE_THROWS_WITH(kc::parse_cpu_isa("sse9"), Catch::Contains("expected avx512, avx2 or generic"));
  REQUIRE(kc::cpu_supports(kc::CpuIsa::generic));
  REQUIRE(kc::cpu_supports(kc::best_cpu_isa()));
  if (!kc::cpu_supports(kc::CpuIsa::avx512))
    REQUIRE_THROWS_WITH(kc::set_cpu_isa(kc::CpuIsa::avx512), Catch::Contains("which this CPU lacks"));
}

TEST_CASE("a fully masked row gives out 0 and lse -inf and zero gradients", "[kernels][attention]") {
  auto p = params(1, 4, 4, 1, 1, 4, true);
  p.k_offset = 10;  // every key after every query
  std::vector<float> q(16, 1.f), k(16, 1.f), v(16, 1.f), out(16, 7.f), lse(4, 7.f), dq(16, 0.f), dk(16, 0.f),
      dv(16, 0.f), dout(16, 1.f);
  kc::attention_forward(p, q.data(), k.data(), v.data(), out.data(), lse.data());
  for (float o : out) REQUIRE(o == 0.0f);
  for (float l : lse) REQUIRE((std::isinf(l) && l < 0));
  kc::attention_backward(p, q.data(), k.data(), v.data(), out.data(), dout.data(), lse.data(), dq.data(), dk.data(),
                         dv.data());
  for (size_t i = 0; i < 16; ++i) REQUIRE((dq[i] == 0.f && dk[i] == 0.f && dv[i] == 0.f));
}

TEST_CASE("the FLOP count is exact over the visible pairs of every mask, and hidden rows and keys get nothing",
          "[kernels][attention][docs]") {
  for (const AttnCase& c : attention_cases()) {
    const kc::AttentionParams& p = c.p;
    double pairs = 0;
    for (int64_t i = 0; i < p.sq; ++i) {
      int64_t row = 0;
      for (int64_t j = 0; j < p.sk; ++j) row += naive::visible(p, i, j);
      const kc::KeyRange r = kc::visible_key_range(p, i);
      INFO(c.name << " row " << i);
      REQUIRE(r.size() == row);  // one interval, exactly the visible keys
      for (int64_t j = r.begin; j < r.end; ++j) REQUIRE(naive::visible(p, i, j));
      pairs += double(row);
    }
    INFO(c.name);
    REQUIRE(kc::attention_forward_flops(p) == 4.0 * double(p.d) * pairs * double(p.b) * double(p.H));
  }
  // A padding row (position 5 of "documents with padding", in no document) gets out 0, lse -inf
  // and no gradient; a padding key gets no dK or dV; on both versions.
  const std::vector<AttnCase> cases = attention_cases();
  const AttnCase c = *std::find_if(cases.begin(), cases.end(),
                                   [](const AttnCase& a) { return a.name == "documents with padding between and after"; });
  const kc::AttentionParams& p = c.p;
  const int64_t n = p.b * p.sq * p.H * p.d, nk = p.b * p.sk * p.Hkv * p.d;
  const std::vector<float> q = cast<float>(random_vec(n, 1)), k = cast<float>(random_vec(nk, 2)),
                           v = cast<float>(random_vec(nk, 3)), dout = cast<float>(random_vec(n, 4));
  for (Kernels<float> kern : {kVersion1<float>, kVersion2}) {
    std::vector<float> out(n), lse(p.b * p.H * p.sq), dq(n), dk(nk), dv(nk);
    kern.forward(p, q.data(), k.data(), v.data(), out.data(), lse.data());
    kern.backward(p, q.data(), k.data(), v.data(), out.data(), dout.data(), lse.data(), dq.data(), dk.data(), dv.data());
    for (int64_t bi = 0; bi < p.b; ++bi)
      for (int64_t pos : {5, 6, 7, 9, 33, 39}) {
        for (int64_t h = 0; h < p.H; ++h) {
          REQUIRE(lse[(bi * p.H + h) * p.sq + pos] == -std::numeric_limits<float>::infinity());
          for (int64_t c2 = 0; c2 < p.d; ++c2) {
            const int64_t at = ((bi * p.sq + pos) * p.H + h) * p.d + c2;
            REQUIRE((out[at] == 0.f && dq[at] == 0.f));
          }
        }
        for (int64_t c2 = 0; c2 < p.Hkv * p.d; ++c2) {
          const int64_t at = (bi * p.sk + pos) * p.Hkv * p.d + c2;
          REQUIRE((dk[at] == 0.f && dv[at] == 0.f));
        }
      }
  }
}

TEST_CASE("a bad document mask is an error", "[kernels][attention][docs]") {
  auto p = params(1, 8, 8, 1, 1, 8, true);
  kc::DocumentMask m{{0, 4}, {5, 4}, 0};  // document 1 starts inside document 0
  p.mask = &m;
  REQUIRE_THROWS_WITH(kc::validate(p), Catch::Contains("inside document 0"));
  m = {{0, 4}, {4, 0}, 0};
  REQUIRE_THROWS_WITH(kc::validate(p), Catch::Contains("document 1 has length 0"));
  m = {{0}, {8}, -1};
  REQUIRE_THROWS_WITH(kc::validate(p), Catch::Contains("window must be >= 0"));
}

TEST_CASE("the causal FLOP count is exact over visible pairs", "[kernels][attention]") {
  auto p = params(2, 8, 8, 3, 1, 16, true);
  // Contiguous causal s x s: s (s + 1) / 2 visible pairs.
  REQUIRE(kc::attention_forward_flops(p) == 4.0 * 16 * (8 * 9 / 2) * 2 * 3);
  p.causal = false;
  REQUIRE(kc::attention_forward_flops(p) == 4.0 * 16 * 64 * 2 * 3);
  p.causal = true;
  p.q_offset = 8;  // queries 8..15 see all 8 keys
  REQUIRE(kc::attention_forward_flops(p) == 4.0 * 16 * 64 * 2 * 3);
  // The closed form for equal strides against counting pair by pair, over offsets before,
  // across and after the keys, and strides 1 and 3 (striped).
  for (int64_t t : {1, 3})
    for (int64_t qo = 0; qo < 40; qo += 3)
      for (int64_t ko = 0; ko < 40; ko += 5)
        for (int64_t sq : {1, 5, 9})
          for (int64_t sk : {1, 4, 11}) {
            auto q = params(1, sq, sk, 1, 1, 4, true);
            q.q_offset = qo, q.k_offset = ko, q.q_stride = q.k_stride = t;
            double pairs = 0;
            for (int64_t i = 0; i < sq; ++i)
              for (int64_t j = 0; j < sk; ++j) pairs += ko + j * t <= qo + i * t;
            INFO("t " << t << " qo " << qo << " ko " << ko << " sq " << sq << " sk " << sk);
            REQUIRE(kc::attention_forward_flops(q) == 4.0 * 4 * pairs);
          }
}

TEST_CASE("LSE merge of two key halves equals attention over all keys", "[kernels][attention]") {
  for (bool causal : {true, false}) {
    const int64_t s = 24, H = 2, d = 8, half = 10;
    const Vec q = random_vec(s * H * d, 21), k = random_vec(s * d, 22), v = random_vec(s * d, 23);
    auto full = params(1, s, s, H, 1, d, causal);
    std::vector<double> out(q.size()), lse(H * s);
    kc::attention_forward(full, q.data(), k.data(), v.data(), out.data(), lse.data());

    auto pa = params(1, s, half, H, 1, d, causal), pb = params(1, s, s - half, H, 1, d, causal);
    pb.k_offset = half;
    std::vector<double> oa(q.size()), la(H * s), ob(q.size()), lb(H * s);
    kc::attention_forward(pa, q.data(), k.data(), v.data(), oa.data(), la.data());
    kc::attention_forward(pb, q.data(), k.data() + half * d, v.data() + half * d, ob.data(), lb.data());
    kc::lse_merge<double>(1, s, H, d, oa.data(), la.data(), ob.data(), lb.data());
    REQUIRE(rel_err(oa, out) < 1e-14);
    REQUIRE(rel_err(la, lse) < 1e-14);
  }
}

TEST_CASE("LSE merge of two -inf gives -inf and out 0 and never NaN", "[kernels][attention]") {
  const double inf = std::numeric_limits<double>::infinity();
  std::vector<double> out = {0, 0}, lse = {-inf}, ob = {0, 0}, lb = {-inf};
  kc::lse_merge<double>(1, 1, 1, 2, out.data(), lse.data(), ob.data(), lb.data());
  REQUIRE((std::isinf(lse[0]) && lse[0] < 0));
  REQUIRE((out[0] == 0 && out[1] == 0));
  // One side empty: the other passes through unchanged.
  std::vector<float> o2 = {0, 0}, l2 = {-std::numeric_limits<float>::infinity()}, o3 = {0.5f, -2.f}, l3 = {1.25f};
  kc::lse_merge<float>(1, 1, 1, 2, o2.data(), l2.data(), o3.data(), l3.data());
  REQUIRE(l2[0] == 1.25f);
  REQUIRE((o2[0] == 0.5f && o2[1] == -2.f));
}

TEST_CASE("fast_exp2f is within 2 ulp of exp2 and exactly 0 at -inf", "[kernels][vec]") {
  REQUIRE(kc::fast_exp2f(-std::numeric_limits<float>::infinity()) == 0.0f);
  REQUIRE(kc::fast_exp2f(-130.0f) == 0.0f);
  REQUIRE(kc::fast_exp2f(0.0f) == 1.0f);
  REQUIRE(kc::fast_exp2f(-3.0f) == 0.125f);
  REQUIRE(std::isnan(kc::fast_exp2f(std::numeric_limits<float>::quiet_NaN())));
  double worst = 0;
  for (float x = -125.0f; x < 127.0f; x += 0.0137f) {
    const double ref = std::exp2(double(x));
    worst = std::max(worst, std::abs(kc::fast_exp2f(x) - ref) / ref);
  }
  REQUIRE(worst < 2.5e-7);  // 2 ulp at 2^-23 = 1.19e-7
}

TEST_CASE("LayerNorm forward matches the formula and backward matches finite differences", "[kernels][layernorm]") {
  const int64_t n = 3, h = 7;
  const Vec x = random_vec(n * h, 31, 3.0), gamma = random_vec(h, 32), beta = random_vec(h, 33),
            dy = random_vec(n * h, 34);
  const double eps = 1e-5;
  Vec y(n * h), mean(n), rstd(n);
  kc::layernorm_forward(x.data(), gamma.data(), beta.data(), n, h, eps, y.data(), mean.data(), rstd.data());
  for (int64_t r = 0; r < n; ++r) {
    double mu = 0, var = 0;
    for (int64_t j = 0; j < h; ++j) mu += x[r * h + j] / h;
    for (int64_t j = 0; j < h; ++j) var += (x[r * h + j] - mu) * (x[r * h + j] - mu) / h;
    for (int64_t j = 0; j < h; ++j)
      REQUIRE(y[r * h + j] == Approx((x[r * h + j] - mu) / std::sqrt(var + eps) * gamma[j] + beta[j]).epsilon(1e-13));
  }
  Vec dx(n * h), dgamma(h, 0.0), dbeta(h, 0.0);
  kc::layernorm_backward(dy.data(), x.data(), gamma.data(), mean.data(), rstd.data(), n, h, dx.data(), dgamma.data(),
                         dbeta.data());
  auto loss = [&](const Vec& xx, const Vec& gg, const Vec& bb) {
    Vec yy(n * h), m(n), rs(n);
    kc::layernorm_forward(xx.data(), gg.data(), bb.data(), n, h, eps, yy.data(), m.data(), rs.data());
    double l = 0;
    for (int64_t i = 0; i < n * h; ++i) l += yy[i] * dy[i];
    return l;
  };
  check_central_differences(dx, x, [&](const Vec& xx) { return loss(xx, gamma, beta); }, 1e-7);
  check_central_differences(dgamma, gamma, [&](const Vec& gg) { return loss(x, gg, beta); }, 1e-7);
  check_central_differences(dbeta, beta, [&](const Vec& bb) { return loss(x, gamma, bb); }, 1e-7);
}

TEST_CASE("RMSNorm forward matches the formula and backward matches finite differences", "[kernels][rmsnorm]") {
  const int64_t n = 3, h = 7;
  const Vec x = random_vec(n * h, 35, 3.0), gamma = random_vec(h, 36), dy = random_vec(n * h, 37);
  const double eps = 1e-5;
  Vec y(n * h), rstd(n);
  kc::rmsnorm_forward(x.data(), gamma.data(), n, h, eps, y.data(), rstd.data());
  for (int64_t r = 0; r < n; ++r) {
    double ms = 0;  // mean square: no mean subtracted (Zhang & Sennrich 2019)
    for (int64_t j = 0; j < h; ++j) ms += x[r * h + j] * x[r * h + j] / h;
    REQUIRE(rstd[r] == Approx(1 / std::sqrt(ms + eps)).epsilon(1e-14));
    for (int64_t j = 0; j < h; ++j) REQUIRE(y[r * h + j] == Approx(x[r * h + j] / std::sqrt(ms + eps) * gamma[j]).epsilon(1e-13));
  }
  Vec dx(n * h), dgamma(h, 0.5);  // dgamma accumulates onto what it held
  kc::rmsnorm_backward(dy.data(), x.data(), gamma.data(), rstd.data(), n, h, dx.data(), dgamma.data());
  auto loss = [&](const Vec& xx, const Vec& gg) {
    Vec yy(n * h), rs(n);
    kc::rmsnorm_forward(xx.data(), gg.data(), n, h, eps, yy.data(), rs.data());
    double l = 0;
    for (int64_t i = 0; i < n * h; ++i) l += yy[i] * dy[i];
    return l;
  };
  check_central_differences(dx, x, [&](const Vec& xx) { return loss(xx, gamma); }, 1e-7);
  Vec added = dgamma;  // what the backward added to the 0.5 it found
  for (double& g : added) g -= 0.5;
  check_central_differences(added, gamma, [&](const Vec& gg) { return loss(x, gg); }, 1e-7);
}

TEST_CASE("SwiGLU is SiLU(gate) * up and its backward matches finite differences", "[kernels][swiglu]") {
  // One row of f = 2: gates 1 and -2, ups 3 and 0.5. SiLU(a) = a / (1 + e^-a).
  const Vec u1 = {1.0, -2.0, 3.0, 0.5};
  Vec g1(2);
  kc::swiglu_forward(u1.data(), 1, 2, g1.data());
  REQUIRE(g1[0] == Approx(1.0 / (1 + std::exp(-1.0)) * 3.0).epsilon(1e-15));
  REQUIRE(g1[1] == Approx(-2.0 / (1 + std::exp(2.0)) * 0.5).epsilon(1e-15));
  const int64_t n = 3, f = 5;
  const Vec u = random_vec(n * 2 * f, 42, 4.0), dg = random_vec(n * f, 43);
  Vec du(n * 2 * f);
  kc::swiglu_backward(dg.data(), u.data(), n, f, du.data());
  auto loss = [&](const Vec& uu) {
    Vec gg(n * f);
    kc::swiglu_forward(uu.data(), n, f, gg.data());
    double l = 0;
    for (int64_t i = 0; i < n * f; ++i) l += gg[i] * dg[i];
    return l;
  };
  check_central_differences(du, u, loss, 1e-8);  // the gate's columns and the up's
}

TEST_CASE("float SwiGLU (vectorised sigmoid) is within float rounding of the fp64 one, and deterministic", "[kernels][swiglu]") {
  const int64_t n = 2, f = 2001;
  Vec u(n * 2 * f), dg(n * f);
  for (int64_t i = 0; i < n * 2 * f; ++i) u[i] = static_cast<float>(-12.0 + 24.0 * double(i % (2 * f)) / double(2 * f - 1));
  u[0] = -100, u[1] = 100;  // tails: the sigmoid saturates, no NaN
  for (int64_t i = 0; i < n * f; ++i) dg[i] = static_cast<float>(std::sin(0.37 * double(i)));
  Vec g64(n * f), du64(n * 2 * f);
  kc::swiglu_forward(u.data(), n, f, g64.data());
  kc::swiglu_backward(dg.data(), u.data(), n, f, du64.data());
  const std::vector<float> uf = cast<float>(u), dgf = cast<float>(dg);
  std::vector<float> gf(n * f), duf(n * 2 * f), again(n * f);
  kc::swiglu_forward(uf.data(), n, f, gf.data());
  kc::swiglu_backward(dgf.data(), uf.data(), n, f, duf.data());
  kc::swiglu_forward(uf.data(), n, f, again.data());
  CHECK(again == gf);  // the same bits twice
  for (int64_t i = 0; i < n * f; ++i) {
    INFO("g " << i);
    REQUIRE(std::isfinite(gf[i]));
    REQUIRE(std::abs(gf[i] - g64[i]) <= 1e-6 * std::max(1.0, std::abs(g64[i])));
  }
  for (int64_t i = 0; i < n * 2 * f; ++i) {
    INFO("du " << i);
    REQUIRE(std::abs(duf[i] - du64[i]) <= 1e-6 * std::max(1.0, std::abs(du64[i])));
  }
  REQUIRE(std::abs(gf[0]) < 1e-30);  // SiLU(-100) = -3.7e-42: the float sigmoid stops at 2^-127, far below 1e-30
}

TEST_CASE("GeLU is the exact erf form and its backward matches finite differences", "[kernels][gelu]") {
  // x Phi(x) at +-1 and 2 (Phi from tables: 0.8413447460685429, 0.9772498680518208).
  const Vec x = {1.0, -1.0, 2.0, 0.0};
  Vec y(4);
  kc::gelu_forward(x.data(), 4, y.data());
  REQUIRE(y[0] == Approx(0.8413447460685429).epsilon(1e-15));
  REQUIRE(y[1] == Approx(-0.15865525393145707).epsilon(1e-14));
  REQUIRE(y[2] == Approx(2 * 0.9772498680518208).epsilon(1e-15));
  REQUIRE(y[3] == 0.0);
  const Vec xs = random_vec(50, 41, 4.0), ones(50, 1.0);
  Vec dx(50);
  kc::gelu_backward(ones.data(), xs.data(), 50, dx.data());
  for (int i = 0; i < 50; ++i) {
    double yp, ym;
    const double e = 1e-6, xp = xs[i] + e, xm = xs[i] - e;
    kc::gelu_forward(&xp, 1, &yp);
    kc::gelu_forward(&xm, 1, &ym);
    REQUIRE(dx[i] == Approx((yp - ym) / (2 * e)).margin(1e-8));
  }
}

TEST_CASE("float GeLU (the vectorised erf) is within 1.5e-7 |x| of the fp64 GeLU and its backward", "[kernels][gelu]") {
  // Abramowitz & Stegun 7.1.26 is within 1.5e-7 of erf; GeLU = x/2 (1 + erf(x / sqrt 2)), so the
  // error is at most 0.75e-7 |x| plus the exp's and float's rounding. Over [-8, 8] and the tails.
  const int64_t n = 4001;
  Vec x(n);
  for (int64_t i = 0; i < n; ++i) x[i] = static_cast<float>(-8.0 + 16.0 * double(i) / double(n - 1));
  x[0] = -30, x[n - 1] = 30;
  Vec y64(n), dx64(n), ones(n, 1.0);
  kc::gelu_forward(x.data(), n, y64.data());
  kc::gelu_backward(ones.data(), x.data(), n, dx64.data());
  std::vector<float> xf = cast<float>(x), yf(n), dxf(n), onesf(n, 1.0f);
  kc::gelu_forward(xf.data(), n, yf.data());
  kc::gelu_backward(onesf.data(), xf.data(), n, dxf.data());
  for (int64_t i = 0; i < n; ++i) {
    INFO("x = " << x[i]);
    REQUIRE(std::abs(yf[i] - y64[i]) <= 1.5e-7 * std::max(1.0, std::abs(x[i])) + 6e-8 * std::abs(y64[i]));
    REQUIRE(std::abs(dxf[i] - dx64[i]) <= 3e-7 * std::max(1.0, std::abs(x[i])));
  }
  REQUIRE(yf[0] == 0.0f);  // GeLU(-30) underflows to 0, never NaN
  REQUIRE(yf[n - 1] == 30.0f);
}

TEST_CASE("float RoPE's angle tables give the directly computed rotation to float precision", "[kernels][rope]") {
  // s = 300 consecutive positions from 1000 take the tables (max_pos / 64 + 64 < s); the fp64
  // kernel computes every angle directly.
  const int64_t s = 300, heads = 2, d = 64;
  std::vector<int64_t> pos(s);
  std::iota(pos.begin(), pos.end(), int64_t{1000});
  const Vec x = random_vec(s * heads * d, 52);
  Vec y64 = x;
  std::vector<float> yf = cast<float>(x);
  kc::rope_forward(y64.data(), 1, s, heads, d, pos.data(), 500000.0);
  kc::rope_forward(yf.data(), 1, s, heads, d, pos.data(), 500000.0);
  REQUIRE(rel_err(yf, y64) < 1e-7);
}

TEST_CASE("RoPE rotates halves by pos times theta^(-2i/d) at global positions", "[kernels][rope]") {
  const int64_t b = 2, s = 3, heads = 2, d = 8;
  const std::vector<int64_t> pos = {5, 1000, 77777};  // global, not 0..s-1
  const Vec x = random_vec(b * s * heads * d, 51);
  Vec y = x;
  kc::rope_forward(y.data(), b, s, heads, d, pos.data(), 10000.0);
  for (int64_t bi = 0; bi < b; ++bi)
    for (int64_t t = 0; t < s; ++t)
      for (int64_t hh = 0; hh < heads; ++hh)
        for (int64_t i = 0; i < d / 2; ++i) {
          const int64_t base = ((bi * s + t) * heads + hh) * d;
          const double a = pos[t] * std::pow(10000.0, -2.0 * i / d);
          REQUIRE(y[base + i] == Approx(x[base + i] * std::cos(a) - x[base + i + d / 2] * std::sin(a)).margin(1e-13));
          REQUIRE(y[base + i + d / 2] ==
                  Approx(x[base + i + d / 2] * std::cos(a) + x[base + i] * std::sin(a)).margin(1e-13));
        }
  // Backward is the transpose: <rope(x), g> = <x, rope_backward(g)>.
  const Vec g = random_vec(x.size(), 52);
  Vec gb = g;
  kc::rope_backward(gb.data(), b, s, heads, d, pos.data(), 10000.0);
  double lhs = 0, rhs = 0;
  for (size_t i = 0; i < x.size(); ++i) lhs += y[i] * g[i], rhs += x[i] * gb[i];
  REQUIRE(lhs == Approx(rhs).epsilon(1e-13));
}

TEST_CASE("RoPE scores depend only on the relative position", "[kernels][rope]") {
  const int64_t d = 16;
  const Vec q0 = random_vec(d, 61), k0 = random_vec(d, 62);
  auto score = [&](int64_t m, int64_t n) {
    Vec q = q0, k = k0;
    kc::rope_forward(q.data(), 1, 1, 1, d, &m, 10000.0);
    kc::rope_forward(k.data(), 1, 1, 1, d, &n, 10000.0);
    double s = 0;
    for (int64_t c = 0; c < d; ++c) s += q[c] * k[c];
    return s;
  };
  REQUIRE(score(10, 3) == Approx(score(1007, 1000)).epsilon(1e-10));
  REQUIRE(score(10, 3) != Approx(score(10, 4)).epsilon(1e-6));
}

TEST_CASE("RoPE rejects an odd head dim", "[kernels][rope]") {
  std::vector<float> x(3);
  const int64_t pos = 0;
  REQUIRE_THROWS_WITH(kc::rope_forward(x.data(), 1, 1, 1, 3, &pos, 10000.0), Catch::Contains("even"));
}

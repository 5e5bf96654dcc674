// Every CUDA kernel against its CPU kernel, written once and run twice: on a GPU
// (tests/test_cuda.cpp, device memory) and through the CPU emulation of kernels/cuda/compat.h
// (tests/test_cuda_emulated.cpp, host memory). `Mem` moves data to and from wherever the
// kernels run: float* put(vector<float>), int64_t* put(vector<int64_t>),
// vector<float> get(const float*, size_t), void* stream(), void sync().
//
// Shapes cross the kernels' tile edges (64 query rows and 32 keys a forward block, 64 keys (32
// past d = 128) and 16 query rows a backward block, 256 threads a row) and cover causal offsets and strides, GQA
// and rows that see no key. Attention must match to 1e-5 (relative, fp32 against fp32, blocked
// differently); dropout and the copies exactly.
#pragma once
#include <catch2/catch.hpp>

#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <vector>

#include "kernels/cpu/attention.h"
#include "kernels/cpu/ops.h"
#include "kernels/cuda/kernels.h"

namespace cuda_cases {

namespace kc = ringside::kernels::cpu;
namespace kg = ringside::kernels::cuda;
using F = std::vector<float>;

inline F random_floats(size_t n, unsigned seed, float scale = 1.0f) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> u(-scale, scale);
  F v(n);
  for (auto& x : v) x = u(rng);
  return v;
}

// ||a - b|| / ||b||, treating equal infinities as equal.
inline double rel_err(const F& a, const F& b) {
  REQUIRE(a.size() == b.size());
  double num = 0, den = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    if (std::isinf(b[i]) && a[i] == b[i]) continue;
    const double e = double(a[i]) - double(b[i]);
    num += e * e;
    den += double(b[i]) * double(b[i]);
  }
  return den > 0 ? std::sqrt(num / den) : std::sqrt(num);
}

template <class Mem> void elementwise(Mem& m) {
  const int64_t n = 37, h = 300;  // h > 256: a row spans more than one pass of a block
  const F x = random_floats(n * h, 1, 3.0f), y0 = random_floats(n * h, 2), bias = random_floats(h, 3);
  {
    float *px = m.put(x), *py = m.put(y0);
    kg::add(px, py, py, n * h, m.stream());
    F want(n * h);
    for (size_t i = 0; i < want.size(); ++i) want[i] = x[i] + y0[i];
    CHECK(m.get(py, want.size()) == want);
  }
  {
    float* py = m.put(y0);
    kg::add_bias(py, m.put(bias), n, h, m.stream());
    F want = y0;
    kc::add_bias(want.data(), bias.data(), n, h);
    CHECK(m.get(py, want.size()) == want);
  }
  {
    float* pb = m.put(bias);
    kg::bias_grad(m.put(x), n, h, pb, m.stream());
    F want = bias;
    kc::bias_grad(x.data(), n, h, want.data());
    CHECK(rel_err(m.get(pb, h), want) < 1e-6);
  }
  {
    float* py = m.put(y0);
    kg::gelu_forward(m.put(x), n * h, py, m.stream());
    F want(n * h), dwant(n * h);
    kc::gelu_forward(x.data(), n * h, want.data());
    CHECK(rel_err(m.get(py, want.size()), want) < 1e-6);
    float* pd = m.put(y0);
    kg::gelu_backward(m.put(y0), m.put(x), n * h, pd, m.stream());
    kc::gelu_backward(y0.data(), x.data(), n * h, dwant.data());
    CHECK(rel_err(m.get(pd, dwant.size()), dwant) < 1e-6);
  }
  {
    float* pf = m.put(y0);
    kg::fill(pf, n * h, -std::numeric_limits<float>::infinity(), m.stream());
    for (float v : m.get(pf, n * h)) REQUIRE(v == -std::numeric_limits<float>::infinity());
  }
}

template <class Mem> void layernorm(Mem& m) {
  for (int64_t h : {40, 300}) {
    const int64_t n = 6;
    const F x = random_floats(n * h, 4, 2.0f), gamma = random_floats(h, 5), beta = random_floats(h, 6),
            dy = random_floats(n * h, 7);
    F y(n * h), mean(n), rstd(n), dx(n * h), dg = random_floats(h, 8), db = random_floats(h, 9);
    F gy = y, gmean = mean, grstd = rstd;
    float *py = m.put(y), *pm = m.put(mean), *pr = m.put(rstd);
    kg::layernorm_forward(m.put(x), m.put(gamma), m.put(beta), n, h, 1e-5, py, pm, pr, m.stream());
    kc::layernorm_forward(x.data(), gamma.data(), beta.data(), n, h, 1e-5, y.data(), mean.data(), rstd.data());
    CHECK(rel_err(m.get(py, y.size()), y) < 1e-6);
    CHECK(rel_err(m.get(pm, n), mean) < 1e-6);
    CHECK(rel_err(m.get(pr, n), rstd) < 1e-6);
    float *pdx = m.put(dx), *pdg = m.put(dg), *pdb = m.put(db);
    kg::layernorm_backward(m.put(dy), m.put(x), m.put(gamma), m.put(mean), m.put(rstd), n, h, pdx, pdg, pdb, m.stream());
    kc::layernorm_backward(dy.data(), x.data(), gamma.data(), mean.data(), rstd.data(), n, h, dx.data(), dg.data(),
                           db.data());
    CHECK(rel_err(m.get(pdx, dx.size()), dx) < 1e-5);
    CHECK(rel_err(m.get(pdg, h), dg) < 1e-6);
    CHECK(rel_err(m.get(pdb, h), db) < 1e-6);
  }
}

template <class Mem> void rmsnorm_swiglu(Mem& m) {
  for (int64_t h : {40, 300}) {
    const int64_t n = 6;
    const F x = random_floats(n * h, 14, 2.0f), gamma = random_floats(h, 15), dy = random_floats(n * h, 17);
    F y(n * h), rstd(n), dx(n * h), dg = random_floats(h, 18);
    float *py = m.put(y), *pr = m.put(rstd);
    kg::rmsnorm_forward(m.put(x), m.put(gamma), n, h, 1e-5, py, pr, m.stream());
    kc::rmsnorm_forward(x.data(), gamma.data(), n, h, 1e-5, y.data(), rstd.data());
    CHECK(rel_err(m.get(py, y.size()), y) < 1e-6);
    CHECK(rel_err(m.get(pr, n), rstd) < 1e-6);
    float *pdx = m.put(dx), *pdg = m.put(dg);
    kg::rmsnorm_backward(m.put(dy), m.put(x), m.put(gamma), m.put(rstd), n, h, pdx, pdg, m.stream());
    kc::rmsnorm_backward(dy.data(), x.data(), gamma.data(), rstd.data(), n, h, dx.data(), dg.data());
    CHECK(rel_err(m.get(pdx, dx.size()), dx) < 1e-5);
    CHECK(rel_err(m.get(pdg, h), dg) < 1e-6);
  }
  const int64_t n = 7, f = 45;
  const F u = random_floats(n * 2 * f, 19, 4.0f), dgate = random_floats(n * f, 20);
  F g(n * f), du(n * 2 * f);
  float* pg = m.put(g);
  kg::swiglu_forward(m.put(u), n, f, pg, m.stream());
  kc::swiglu_forward(u.data(), n, f, g.data());
  CHECK(rel_err(m.get(pg, g.size()), g) < 1e-6);
  float* pdu = m.put(du);
  kg::swiglu_backward(m.put(dgate), m.put(u), n, f, pdu, m.stream());
  kc::swiglu_backward(dgate.data(), u.data(), n, f, du.data());
  CHECK(rel_err(m.get(pdu, du.size()), du) < 1e-6);
}

template <class Mem> void rope_dropout_qkv(Mem& m) {
  const int64_t b = 2, s = 5, heads = 3, d = 8, h = 13;
  const std::vector<int64_t> pos = {3, 4, 11, 12, 40};  // a zigzag-like shard of a longer sequence
  const int64_t* ppos = m.put(pos);
  {
    const F x = random_floats(b * s * heads * d, 10);
    F want = x;
    float* px = m.put(x);
    kg::rope(px, b, s, heads, d, ppos, 10000.0, 1.0, m.stream());
    kc::rope_forward(want.data(), b, s, heads, d, pos.data(), 10000.0);
    CHECK(rel_err(m.get(px, x.size()), want) < 1e-6);
    kg::rope(px, b, s, heads, d, ppos, 10000.0, -1.0, m.stream());  // the backward undoes it
    CHECK(rel_err(m.get(px, x.size()), x) < 1e-6);
  }
  {
    // Dropout: the very same mask and the very same floats as the CPU.
    const F x = random_floats(b * s * h, 11);
    F mask(b * s * h), y(b * s * h);
    kc::dropout_mask(mask.data(), b, s, h, pos.data(), 64, 0.3, 99, 1);
    kc::dropout_forward(x.data(), y.data(), b, s, h, pos.data(), 64, 0.3, 99, 1);
    float *pm = m.put(F(b * s * h, -1.0f)), *py = m.put(F(b * s * h, -1.0f));
    kg::dropout(nullptr, pm, b, s, h, ppos, 64, 0.3, 99, 1, true, m.stream());
    kg::dropout(m.put(x), py, b, s, h, ppos, 64, 0.3, 99, 1, false, m.stream());
    const F gm = m.get(pm, mask.size()), gy = m.get(py, y.size());
    CHECK(gm == mask);
    CHECK(gy == y);
    double kept = 0;
    for (float v : gm) kept += v;
    CHECK(kept > 0);
    CHECK(kept < double(gm.size()));
  }
  {
    const int64_t rows = 7, wq = 12, wk = 4;
    const F qkv = random_floats(rows * (wq + 2 * wk), 12);
    float *pq = m.put(F(rows * wq)), *pk = m.put(F(rows * wk)), *pv = m.put(F(rows * wk));
    kg::split_qkv(m.put(qkv), pq, pk, pv, rows, wq, wk, m.stream());
    const F q = m.get(pq, rows * wq), k = m.get(pk, rows * wk), v = m.get(pv, rows * wk);
    for (int64_t r = 0; r < rows; ++r) {
      CHECK(q[r * wq + 5] == qkv[r * (wq + 2 * wk) + 5]);
      CHECK(k[r * wk + 1] == qkv[r * (wq + 2 * wk) + wq + 1]);
      CHECK(v[r * wk + 3] == qkv[r * (wq + 2 * wk) + wq + wk + 3]);
    }
    float* pqkv = m.put(F(qkv.size()));
    kg::merge_qkv(pq, pk, pv, pqkv, rows, wq, wk, m.stream());
    CHECK(m.get(pqkv, qkv.size()) == qkv);
  }
}

// One attention configuration, forward and backward, against the CPU kernel.
template <class Mem> void attention_case(Mem& m, kc::AttentionParams p) {
  p.softmax_scale = 1.0 / std::sqrt(double(p.d));
  const int64_t nq = p.b * p.sq * p.H * p.d, nk = p.b * p.sk * p.Hkv * p.d, nl = p.b * p.H * p.sq;
  const F q = random_floats(nq, 20), k = random_floats(nk, 21), v = random_floats(nk, 22), dout = random_floats(nq, 23);
  F out(nq), lse(nl);
  kc::attention_forward(p, q.data(), k.data(), v.data(), out.data(), lse.data());
  float *pq = m.put(q), *pk = m.put(k), *pv = m.put(v), *po = m.put(F(nq, 7.0f)), *pl = m.put(F(nl, 7.0f));
  kg::attention_forward(p, pq, pk, pv, po, pl, m.stream());
  const F gout = m.get(po, nq), glse = m.get(pl, nl);
  CHECK(rel_err(gout, out) < 1e-5);
  CHECK(rel_err(glse, lse) < 1e-5);
  for (size_t i = 0; i < lse.size(); ++i)  // rows that see no key: -inf on both, never NaN
    if (std::isinf(lse[i])) REQUIRE(glse[i] == lse[i]);
  // The backward accumulates: start from nonzero gradients.
  F dq = random_floats(nq, 24), dk = random_floats(nk, 25), dv = random_floats(nk, 26);
  float *pdq = m.put(dq), *pdk = m.put(dk), *pdv = m.put(dv), *pD = m.put(F(nl));
  kc::attention_backward(p, q.data(), k.data(), v.data(), out.data(), dout.data(), lse.data(), dq.data(), dk.data(),
                         dv.data());
  kg::attention_backward(p, pq, pk, pv, m.put(out), m.put(dout), m.put(lse), pdq, pdk, pdv, pD, m.stream());
  CHECK(rel_err(m.get(pdq, nq), dq) < 1e-5);
  CHECK(rel_err(m.get(pdk, nk), dk) < 1e-5);
  CHECK(rel_err(m.get(pdv, nk), dv) < 1e-5);
}

template <class Mem> void attention(Mem& m) {
  kc::AttentionParams p;
  SECTION("causal, GQA, more than one tile each way") {
    p.b = 2, p.sq = 70, p.sk = 70, p.H = 4, p.Hkv = 2, p.d = 8, p.causal = true;
    attention_case(m, p);
  }
  SECTION("non-causal, query and key lengths differ") {
    p.b = 1, p.sq = 17, p.sk = 81, p.H = 2, p.Hkv = 2, p.d = 12, p.causal = false;
    attention_case(m, p);
  }
  SECTION("head dim 160: the backward's 32-key blocks") {
    p.b = 1, p.sq = 20, p.sk = 45, p.H = 2, p.Hkv = 1, p.d = 160, p.causal = true, p.q_offset = 25;
    attention_case(m, p);
  }
  SECTION("a ring step's block: global offsets, some rows see no key") {
    // Queries at 40, 42, ..., keys at 45, 47, ...: the first rows see nothing (lse -inf).
    p.b = 1, p.sq = 33, p.sk = 20, p.H = 2, p.Hkv = 1, p.d = 16, p.causal = true;
    p.q_offset = 40, p.q_stride = 2, p.k_offset = 45, p.k_stride = 2;
    attention_case(m, p);
  }
}

template <class Mem> void lse_merge(Mem& m) {
  const int64_t b = 2, sq = 5, H = 3, d = 4;
  const float ninf = -std::numeric_limits<float>::infinity();
  F out = random_floats(b * sq * H * d, 30), out_b = random_floats(b * sq * H * d, 31);
  F lse = random_floats(b * H * sq, 32, 3.0f), lse_b = random_floats(b * H * sq, 33, 3.0f);
  lse[0] = ninf, lse_b[1] = ninf, lse[2] = ninf, lse_b[2] = ninf;  // one side empty, both empty
  float *po = m.put(out), *pl = m.put(lse);
  kg::lse_merge(b, sq, H, d, po, pl, m.put(out_b), m.put(lse_b), m.stream());
  kc::lse_merge(b, sq, H, d, out.data(), lse.data(), out_b.data(), lse_b.data());
  CHECK(rel_err(m.get(po, out.size()), out) < 1e-6);
  const F gl = m.get(pl, lse.size());
  CHECK(rel_err(gl, lse) < 1e-6);
  CHECK(gl[2] == ninf);
}

}  // namespace cuda_cases

// The single-device reference layer: forward against a naive composition of the formulas,
// backward against finite differences, fp32 against fp64, memory against its formula.
#include <catch2/catch.hpp>

#include <cmath>

#include "check/check.h"
#include "core/error.h"
#include "kernels/philox.h"
#include "layer/presets.h"
#include "layer/reference.h"
#include "naive.h"

using namespace ringside;

namespace {

LayerConfig small_config() {
  LayerConfig c;
  c.b = 2;
  c.s = 6;
  c.h = 8;
  c.H = 2;
  c.Hkv = 1;
  c.f = 12;
  c.dropout = 0.2;
  c.seed = 77;
  return c;
}

Tensor input(const LayerConfig& c, RngSite site, DType dt, AllocTag tag = {}) {
  return random_input(c, static_cast<uint32_t>(site), dt, tag);
}

double dot(const Tensor& a, const Tensor& b) {
  double s = 0;
  for (int64_t i = 0; i < a.numel(); ++i) s += a.data<double>()[i] * b.data<double>()[i];
  return s;
}

// out of the design's layer, written as plainly as possible in fp64.
std::vector<double> naive_forward(const LayerConfig& c, const LayerWeights& w, const Tensor& x, Backend& be) {
  const int64_t N = c.tokens(), h = c.h, H = c.H, Hkv = c.Hkv, d = c.d(), f = c.f, W = c.qkv_width();
  auto P = [](const Tensor& t) { return t.data<double>(); };
  // LayerNorm, or RMSNorm (Zhang & Sennrich 2019: x / rms(x) * gamma, no mean, no beta).
  auto norm = [&](const double* in, const Tensor& g, const Tensor& bb) {
    std::vector<double> out(N * h);
    for (int64_t r = 0; r < N; ++r) {
      double mu = 0, var = 0;
      if (c.norm == Norm::layernorm)
        for (int64_t j = 0; j < h; ++j) mu += in[r * h + j] / h;
      for (int64_t j = 0; j < h; ++j) var += (in[r * h + j] - mu) * (in[r * h + j] - mu) / h;
      for (int64_t j = 0; j < h; ++j)
        out[r * h + j] = (in[r * h + j] - mu) / std::sqrt(var + c.eps) * P(g)[j] + (bb.defined() ? P(bb)[j] : 0.0);
    }
    return out;
  };
  auto linear = [&](const std::vector<double>& in, int64_t k, const Tensor& wt, const Tensor& bias, int64_t n) {
    std::vector<double> out(N * n);
    for (int64_t r = 0; r < N; ++r)
      for (int64_t j = 0; j < n; ++j) {
        double acc = bias.defined() ? P(bias)[j] : 0.0;
        for (int64_t i = 0; i < k; ++i) acc += in[r * k + i] * P(wt)[i * n + j];
        out[r * n + j] = acc;
      }
    return out;
  };
  auto dropout_mask = [&](RngSite site) {
    Tensor m = Tensor::empty({c.b, c.s, h}, DType::f64, {});
    std::vector<int64_t> pos(c.s);
    for (int64_t t = 0; t < c.s; ++t) pos[t] = t;
    be.dropout_mask(m, pos, c.s, c.dropout, c.seed, static_cast<uint32_t>(site));
    return std::vector<double>(P(m), P(m) + m.numel());
  };
  auto rope = [&](double* v, int64_t t) {  // one head vector at position t
    for (int64_t i = 0; i < d / 2; ++i) {
      const double a = t * std::pow(c.rope_theta, -2.0 * i / d), x1 = v[i], x2 = v[i + d / 2];
      v[i] = x1 * std::cos(a) - x2 * std::sin(a);
      v[i + d / 2] = x2 * std::cos(a) + x1 * std::sin(a);
    }
  };

  const std::vector<double> xs(P(x), P(x) + N * h);
  const auto h1 = norm(xs.data(), w.ln1_gamma, w.ln1_beta);
  const auto qkv = linear(h1, h, w.qkv_weight, w.qkv_bias, W);
  naive::Vec q(N * H * d), k(N * Hkv * d), v(N * Hkv * d);
  for (int64_t r = 0; r < N; ++r) {
    for (int64_t i = 0; i < H * d; ++i) q[r * H * d + i] = qkv[r * W + i];
    for (int64_t i = 0; i < Hkv * d; ++i) k[r * Hkv * d + i] = qkv[r * W + H * d + i];
    for (int64_t i = 0; i < Hkv * d; ++i) v[r * Hkv * d + i] = qkv[r * W + (H + Hkv) * d + i];
    if (c.rope) {
      for (int64_t hh = 0; hh < H; ++hh) rope(&q[(r * H + hh) * d], r % c.s);
      for (int64_t hh = 0; hh < Hkv; ++hh) rope(&k[(r * Hkv + hh) * d], r % c.s);
    }
  }
  naive::AttentionParams p;
  p.b = c.b, p.sq = p.sk = c.s, p.H = H, p.Hkv = Hkv, p.d = d, p.causal = c.causal, p.softmax_scale = 1 / std::sqrt(double(d));
  naive::Vec a, lse;
  naive::attention_forward(p, q, k, v, a, lse);
  const auto y = linear(a, H * d, w.o_weight, w.o_bias, h);
  const auto m1 = dropout_mask(RngSite::dropout1), m2 = dropout_mask(RngSite::dropout2);
  std::vector<double> x2(N * h);
  for (int64_t i = 0; i < N * h; ++i) x2[i] = xs[i] + y[i] * m1[i] / (1 - c.dropout);
  const auto h2 = norm(x2.data(), w.ln2_gamma, w.ln2_beta);
  const auto u = linear(h2, h, w.fc1_weight, w.fc1_bias, c.fc1_width());
  std::vector<double> g(N * f);
  for (int64_t r = 0; r < N; ++r)
    for (int64_t j = 0; j < f; ++j) {
      if (c.mlp == Mlp::gelu) {
        const double e = u[r * f + j];
        g[r * f + j] = 0.5 * e * (1 + std::erf(e / std::sqrt(2.0)));
      } else {  // SwiGLU: SiLU(gate) * up, u's row [gate | up]
        const double gate = u[r * 2 * f + j], up = u[r * 2 * f + f + j];
        g[r * f + j] = gate / (1 + std::exp(-gate)) * up;
      }
    }
  const auto z = linear(g, f, w.fc2_weight, w.fc2_bias, h);
  std::vector<double> out(N * h);
  for (int64_t i = 0; i < N * h; ++i) out[i] = x2[i] + z[i] * m2[i] / (1 - c.dropout);
  return out;
}

// The Llama layer on small_config's shapes: RMSNorm, SwiGLU, no biases.
LayerConfig llama(LayerConfig c) {
  c.norm = Norm::rmsnorm, c.mlp = Mlp::swiglu, c.bias = false;
  return c;
}

}  // namespace

TEST_CASE("the reference forward equals the design's formulas composed naively (fp64)", "[reference]") {
  auto be = make_cpu_backend();
  for (int layer = 0; layer < 4; ++layer)  // GPT's, Llama's, RMSNorm with GeLU and biases, LayerNorm with SwiGLU
  for (bool causal : {true, false})
    for (bool rope : {true, false}) {
      LayerConfig c = small_config();
      c.causal = causal;
      c.rope = rope;
      if (layer == 1) c = llama(c);
      if (layer == 2) c.norm = Norm::rmsnorm;
      if (layer == 3) c.mlp = Mlp::swiglu, c.bias = false;
      const LayerWeights w = init_weights(c, DType::f64, {});
      const Tensor x = input(c, RngSite::input_x, DType::f64);
      const ForwardResult r = reference_forward<double>(c, w, x, *be);
      const auto ref = naive_forward(c, w, x, *be);
      double num = 0, den = 0;
      for (int64_t i = 0; i < r.out.numel(); ++i) {
        num += std::pow(r.out.data<double>()[i] - ref[i], 2);
        den += ref[i] * ref[i];
      }
      INFO(c.summary());
      REQUIRE(std::sqrt(num / den) < 1e-14);
    }
}

TEST_CASE("the reference backward matches central finite differences (fp64) for every gradient", "[reference]") {
  auto be = make_cpu_backend();
  LayerConfig c = small_config();
  SECTION("causal, rope, GQA, dropout") {}
  SECTION("full attention, no rope, H = Hkv, no dropout") {
    c.causal = false;
    c.rope = false;
    c.Hkv = c.H;
    c.dropout = 0;
  }
  SECTION("the Llama layer: RMSNorm, SwiGLU, no biases") { c = llama(c); }
  SECTION("RMSNorm with GeLU and biases, full attention") { c.norm = Norm::rmsnorm, c.causal = false; }
  LayerWeights w = init_weights(c, DType::f64, {});
  Tensor x = input(c, RngSite::input_x, DType::f64);
  const Tensor dout = input(c, RngSite::input_dout, DType::f64);
  const ForwardResult fwd = reference_forward<double>(c, w, x, *be);
  const Gradients g = reference_backward<double>(c, w, fwd.saved, dout, *be);

  // L = sum(out * dout), so dL/dtheta is what backward returns for this dout.
  auto loss = [&] { return dot(reference_forward<double>(c, w, x, *be).out, dout); };
  auto check = [&](const std::string& name, Tensor& param, const Tensor& grad) {
    const double eps = 1e-6;
    double num = 0, den = 0;
    double* p = param.data<double>();
    for (int64_t i = 0; i < param.numel(); ++i) {
      const double keep = p[i];
      p[i] = keep + eps;
      const double lp = loss();
      p[i] = keep - eps;
      const double lm = loss();
      p[i] = keep;
      const double fd = (lp - lm) / (2 * eps);
      num += std::pow(grad.data<double>()[i] - fd, 2);
      den += fd * fd;
    }
    INFO("gradient of " << name << ": |g - fd| / |fd| = " << std::sqrt(num / den));
    CHECK(den > 0);
    CHECK(std::sqrt(num / den) < 1e-7);
  };
  check("x", x, g.dx);
  auto params = w.named();
  auto grads = g.grads.named();
  REQUIRE(params.size() == grads.size());
  REQUIRE(params.size() == (c.bias ? 12u : 8u) - (c.norm == Norm::rmsnorm ? 2u : 0u));  // the layer's own
  for (size_t i = 0; i < params.size(); ++i) check(params[i].first, *params[i].second, *grads[i].second);
}

TEST_CASE("fp32 reference against fp64 on the default config has every tensor below 1e-5", "[reference][slow]") {
  const LayerConfig c;  // b 1, s 4096, h 512, H 8, Hkv 4, f 2048, causal, rope, dropout 0.1
  auto be = make_cpu_backend();
  auto run = [&]<class T>() {
    constexpr DType dt = dtype_of<T>();
    const LayerWeights w = init_weights(c, dt, {});
    const Tensor x = input(c, RngSite::input_x, dt), dout = input(c, RngSite::input_dout, dt);
    ForwardResult f = reference_forward<T>(c, w, x, *be);
    Gradients g = reference_backward<T>(c, w, f.saved, dout, *be);
    std::vector<std::pair<std::string, Tensor>> out{{"out", f.out}, {"dx", g.dx}};
    for (auto& [name, t] : g.grads.named()) out.emplace_back("grad." + name, *t);
    return out;
  };
  const auto r32 = run.operator()<float>();
  const auto r64 = run.operator()<double>();
  for (size_t i = 0; i < r32.size(); ++i) {
    const double e = relative_error(r32[i].second, r64[i].second);
    INFO(r32[i].first << ": relative error " << e);
    CHECK(e < kTolerance);
    CHECK(e > 0);  // fp32 really ran in fp32
  }
}

TEST_CASE("saved activations are tracked per rank and equal the formula byte for byte", "[reference][memory]") {
  auto be = make_cpu_backend();
  for (DType dt : {DType::f32, DType::f64}) {
    LayerConfig c = small_config();
    c.s = 40;
    c.H = 4;
    c.Hkv = 2;
    MemoryTracker tracker;
    const AllocTag tag{3, MemCategory::workspace, &tracker};
    const LayerWeights w = init_weights(c, dt, tag);
    const Tensor x = random_input(c, 0x200, dt, tag);
    {
      ForwardResult r = dt == DType::f32 ? reference_forward<float>(c, w, x, *be, tag)
                                         : reference_forward<double>(c, w, x, *be, tag);
      const int64_t expect = dtype_size(dt) * c.tokens() * (6 * c.h + 2 * c.Hkv * c.d() + 2 * c.f + 4 + c.H);
      REQUIRE(saved_activation_bytes(c, dt) == expect);
      // Llama's: SwiGLU keeps u = [gate | up] (2 f) and g (f), RMSNorm its rstd alone (1 a token each).
      REQUIRE(saved_activation_bytes(llama(c), dt) ==
              dtype_size(dt) * c.tokens() * (6 * c.h + 2 * c.Hkv * c.d() + 3 * c.f + 2 + c.H));
      REQUIRE(tracker.live(3, MemCategory::activations) == expect);
      REQUIRE(tracker.peak(3, MemCategory::activations) == expect);
      REQUIRE(tracker.live(3, MemCategory::weights) == w.nbytes());
      REQUIRE(tracker.stats(0).peak_total == 0);  // nothing leaked onto another rank
    }
    REQUIRE(tracker.live(3, MemCategory::activations) == 0);  // released with the result
    // The Llama layer's forward keeps its formula's bytes too, and holds 3 h f MLP weights.
    const LayerConfig l = llama(c);
    const LayerWeights lw = init_weights(l, dt, tag);
    CHECK(lw.fc1_weight.numel() + lw.fc2_weight.numel() == 3 * l.h * l.f);
    CHECK(lw.nbytes() == dtype_size(dt) * l.param_count());
    {
      ForwardResult r = dt == DType::f32 ? reference_forward<float>(l, lw, x, *be, tag)
                                         : reference_forward<double>(l, lw, x, *be, tag);
      CHECK(tracker.live(3, MemCategory::activations) == saved_activation_bytes(l, dt));
    }
  }
}

TEST_CASE("weights and inputs are deterministic and equal in fp32 and fp64", "[reference]") {
  const LayerConfig c = small_config();
  const LayerWeights a = init_weights(c, DType::f32, {}), b = init_weights(c, DType::f32, {}),
                     d = init_weights(c, DType::f64, {});
  LayerConfig c2 = c;
  c2.seed = 78;
  const LayerWeights other = init_weights(c2, DType::f32, {});
  auto an = a.named(), bn = b.named(), dn = d.named(), on = other.named();
  for (size_t i = 0; i < an.size(); ++i) {
    INFO(an[i].first);
    REQUIRE(relative_error(*an[i].second, *bn[i].second) == 0);
    REQUIRE(relative_error(*an[i].second, *dn[i].second) == 0);
    REQUIRE(relative_error(*an[i].second, *on[i].second) > 0.01);  // another seed, other values
  }
  // Linear weights are bounded by 1/sqrt(fan_in), as torch.nn.Linear draws them.
  const float bound = 1.0f / std::sqrt(float(c.h));
  for (int64_t i = 0; i < a.qkv_weight.numel(); ++i) REQUIRE(std::abs(a.qkv_weight.data<float>()[i]) <= bound);
}

TEST_CASE("invalid configurations are rejected with a clear error", "[reference][config]") {
  auto bad = [](auto edit, const char* msg) {
    LayerConfig c;
    edit(c);
    REQUIRE_THROWS_AS(c.validate(), ConfigError);
    REQUIRE_THROWS_WITH(c.validate(), Catch::Contains(msg));
  };
  bad([](LayerConfig& c) { c.h = 500; }, "divisible by heads");
  bad([](LayerConfig& c) { c.Hkv = 3; }, "multiple of kv heads");
  bad([](LayerConfig& c) { c.h = 24, c.H = 8; }, "even head dim");
  bad([](LayerConfig& c) { c.dropout = 1.0; }, "[0, 1)");
  bad([](LayerConfig& c) { c.dropout = -0.5; }, "[0, 1)");
  bad([](LayerConfig& c) { c.s = 0; }, "sequence length s must be >= 1");
  bad([](LayerConfig& c) { c.b = 0; }, "batch b must be >= 1");
  bad([](LayerConfig& c) { c.b = 1 << 20, c.s = 1 << 12; }, "exceeds 2^31 - 1");  // 2^32 tokens
  bad([](LayerConfig& c) { c.dropout = 1.0 - 1e-9; }, "24-bit resolution");
  bad([](LayerConfig& c) { c.dropout = std::nan(""); }, "[0, 1), got nan");
  // SwiGLU's W1 is [h, 2f], one GEMM: 2f must fit BLAS's int where f alone does.
  bad([](LayerConfig& c) { c.h = 2, c.H = 1, c.Hkv = 1, c.s = 1, c.f = 1 << 30, c.mlp = Mlp::swiglu; },
      "h and 2f must be below 2^31 (BLAS's int): SwiGLU's W1 is [h, 2f]");
  LayerConfig gelu_wide;
  gelu_wide.h = 2, gelu_wide.H = 1, gelu_wide.Hkv = 1, gelu_wide.s = 1, gelu_wide.f = 1 << 30;
  CHECK_NOTHROW(gelu_wide.validate());
  // The element bound names the width it used: 2f with SwiGLU (1e6 tokens x 1.2e9 = 1.2e15).
  bad([](LayerConfig& c) { c.s = 1000000, c.h = 32, c.H = 4, c.Hkv = 2, c.f = 600000000, c.mlp = Mlp::swiglu; },
      "b * s * max(3h, 2f) = 1.2e+15 elements is beyond any machine (1e15)");
  CHECK_THROWS_WITH(parse_norm("batchnorm"), "unknown norm 'batchnorm' (layernorm or rmsnorm)");
  CHECK_THROWS_WITH(parse_mlp("relu"), "unknown MLP 'relu' (gelu or swiglu)");
  CHECK(parse_norm(to_string(Norm::rmsnorm)) == Norm::rmsnorm);
  CHECK(parse_mlp(to_string(Mlp::swiglu)) == Mlp::swiglu);
  LayerConfig odd;
  odd.h = 24, odd.H = 8, odd.rope = false;  // d = 3 is fine without RoPE
  REQUIRE_NOTHROW(odd.validate());
  // The forward validates too, before any work.
  odd.rope = true;
  auto be = make_cpu_backend();
  const Tensor x = Tensor::zeros({1, 4096, 24}, DType::f32, {});
  REQUIRE_THROWS_AS(reference_forward<float>(odd, LayerWeights{}, x, *be), ConfigError);
}

TEST_CASE("model presets have their papers' shapes and layers, and a preset sets the layer alone", "[config]") {
  struct Published {
    const char* name;
    int64_t h, H, Hkv, f;
    int layers;
    int64_t vocab;
  };
  // The Llama 3 Herd of Models (2024), Table 3 (vocabulary: Meta's params.json); GPT-3 (Brown et
  // al. 2020), Table 2.1 with f = 4 h and GPT-2's vocabulary. Qwen2.5 (2024), Table 1 and its
  // config.json; Mistral 7B (2023), Table 1, and v0.3's config.json.
  const Published papers[] = {{"llama3-8b", 4096, 32, 8, 14336, 32, 128256},
                              {"llama3-70b", 8192, 64, 8, 28672, 80, 128256},
                              {"llama3-405b", 16384, 128, 8, 53248, 126, 128256},
                              {"qwen2.5-7b", 3584, 28, 4, 18944, 28, 152064},
                              {"mistral-7b", 4096, 32, 8, 14336, 32, 32768},
                              {"gpt3-175b", 12288, 96, 96, 49152, 96, 50257}};
  REQUIRE(model_presets().size() == std::size(papers));
  for (const Published& w : papers) {
    INFO(w.name);
    const ModelPreset& p = find_preset(w.name);
    CHECK(p.rope == (w.name != std::string("gpt3-175b")));  // GPT-3's positions are learned
    CHECK(p.h == w.h);
    CHECK(p.H == w.H);
    CHECK(p.Hkv == w.Hkv);
    CHECK(p.f == w.f);
    CHECK(p.layers == w.layers);
    CHECK(p.vocab == w.vocab);
    CHECK(p.h / p.H == 128);  // every one has head dimension 128
    LayerConfig c;
    c.s = 65536, c.b = 2;
    apply_preset(p, c);
    CHECK((c.h == w.h && c.H == w.H && c.Hkv == w.Hkv && c.f == w.f));
    CHECK((c.s == 65536 && c.b == 2));  // the rest stays
    const std::string name = w.name;
    CHECK(c.rope_theta == (name.starts_with("llama3") ? 500000.0 : name.starts_with("gpt3") ? 10000.0 : 1e6));
    // The layer the model trains: GPT-3 LayerNorm, GeLU and biases; the others RMSNorm, SwiGLU, none.
    const bool gpt = name.starts_with("gpt3");
    CHECK(c.norm == (gpt ? Norm::layernorm : Norm::rmsnorm));
    CHECK(c.mlp == (gpt ? Mlp::gelu : Mlp::swiglu));
    CHECK(c.bias == gpt);
    CHECK(c.eps == (name.starts_with("qwen") ? 1e-6 : 1e-5));
    // Llama, Qwen and Mistral have no dropout layer (their model code); GPT-2's 0.1 for GPT-3.
    c.dropout = 0.3;
    apply_preset(p, c);
    CHECK(c.dropout == (gpt ? 0.1 : 0.0));
    c.validate();
  }
  try {
    find_preset("llama4");
    FAIL("no error");
  } catch (const ConfigError& e) {
    CHECK_THAT(e.what(), Catch::Contains("no model preset 'llama4'") && Catch::Contains("llama3-8b, llama3-70b, llama3-405b, qwen2.5-7b, mistral-7b, gpt3-175b"));
  }
}

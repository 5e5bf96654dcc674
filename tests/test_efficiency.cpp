// The calibrated model: each efficiency function against its sources' data points, the shapes
// it must be monotone in, `--efficiency ideal` as the roofline exactly, the report's JSON, and
// the validation cases and their bad inputs.
#include <catch2/catch.hpp>

#include <cmath>

#include "core/error.h"
#include "model/efficiency.h"
#include "model/model.h"
#include "model/report.h"
#include "model/validation.h"
#include "parallel/run_plan.h"
#include "run/runner.h"
#include "trace/metrics.h"

using namespace ringside;

namespace {

// The rate of one square call of L tokens, as FlashAttention's charts measure it (batch x
// seqlen = 16K tokens, hidden 2048: 16 heads of d 128): causal queries see (L + 1) / 2 keys.
double chart_rate(const model::AttentionKernel& k, int64_t L, bool causal, bool backward, int sms) {
  model::AttentionCall call;
  call.b = 16384 / L, call.sq = call.sk = L, call.H = 16, call.d = 128;
  call.keys_per_query = causal ? double(L + 1) / 2 : double(L);
  call.masked = causal, call.backward = backward;
  return model::attention_rate(k, call, sms);
}

// Forward + backward as the charts count it: 3.5 forwards of FLOPs over both times.
double chart_fwd_bwd(const model::AttentionKernel& k, int64_t L, bool causal, int sms) {
  return 3.5 / (1 / chart_rate(k, L, causal, false, sms) + 2.5 / chart_rate(k, L, causal, true, sms));
}

const int64_t kLengths[] = {512, 1024, 2048, 4096, 8192, 16384};

trace::TraceData dry(const char* strategy, const LayerConfig& cfg, int P, MemoryTracker& tracker) {
  return model::dry_run(resolve(parse_parallel_config(strategy), cfg, P), tracker);
}

}  // namespace

TEST_CASE("attention rates: FlashAttention's published charts, every point within 6%", "[model][efficiency]") {
  const model::Hardware h100 = model::load_hardware("h100-nvlink"), a100 = model::load_hardware("a100-nvlink");
  const model::Efficiency& e = h100.efficiency;
  // docs/calibration.md C: TFLOP/s at 512 .. 16K (H100: FA3 README chart's FA2 and FA3 rows for
  // the forward, FA2 README chart for forward + backward; A100: FA2 README chart).
  struct Series {
    const char* what;
    const model::Hardware* hw;
    const char* kernel;
    bool causal, fwd_bwd;
    double tflops[6];
  };
  const Series series[] = {
      {"H100 FA2 forward d128", &h100, "fa2", false, false, {309, 350, 362, 366, 370, 370}},
      {"H100 FA2 forward causal d128", &h100, "fa2", true, false, {191, 260, 298, 319, 333, 335}},
      {"H100 FA2 fwd+bwd d128", &h100, "fa2", false, true, {248, 294, 320, 326, 335, 338}},
      {"H100 FA2 fwd+bwd causal d128", &h100, "fa2", true, true, {163, 221, 265, 294, 308, 328}},
      {"H100 FA3 forward d128", &h100, "fa3", false, false, {467, 565, 625, 638, 646, 648}},
      {"H100 FA3 forward causal d128", &h100, "fa3", true, false, {292, 423, 521, 579, 602, 616}},
      {"H100 cuDNN forward d128", &h100, "cudnn", false, false, {497, 574, 617, 609, 600, 595}},
      {"H100 cuDNN forward causal d128", &h100, "cudnn", true, false, {315, 410, 484, 518, 529, 539}},
      {"A100 FA2 fwd+bwd d128", &a100, "fa2", false, true, {150, 172, 187, 196, 201, 203}},
      {"A100 FA2 fwd+bwd causal d128", &a100, "fa2", true, true, {99, 133, 155, 173, 182, 189}},
  };
  for (const Series& s : series) {
    const model::AttentionKernel& k = s.hw->efficiency.attention.at(s.kernel);
    for (int i = 0; i < 6; ++i) {
      const int sms = s.hw->efficiency.sms;
      const double modeled = s.fwd_bwd ? chart_fwd_bwd(k, kLengths[i], s.causal, sms) : chart_rate(k, kLengths[i], s.causal, false, sms);
      INFO(s.what << " at " << kLengths[i] << ": modeled " << modeled / 1e12 << " TFLOP/s, published " << s.tflops[i]);
      CHECK(modeled / 1e12 == Approx(s.tflops[i]).epsilon(0.06));
    }
  }
  // Head dim: FA2 fwd+bwd causal at 8K, d 64: 273 TFLOP/s (32 heads); FA3 forward causal d 64: 460.
  model::AttentionCall d64;
  d64.b = 2, d64.sq = d64.sk = 8192, d64.H = 32, d64.d = 64, d64.keys_per_query = 4096.5, d64.masked = true;
  const model::AttentionKernel& fa2 = e.attention.at("fa2");
  const double fwd = model::attention_rate(fa2, d64, e.sms);
  d64.backward = true;
  const double bwd = model::attention_rate(fa2, d64, e.sms);
  CHECK(3.5 / (1 / fwd + 2.5 / bwd) / 1e12 == Approx(273).epsilon(0.06));
  d64.backward = false;
  CHECK(model::attention_rate(e.attention.at("fa3"), d64, e.sms) / 1e12 == Approx(460).epsilon(0.06));
  // ring-flash-attention's own single-GPU flash_attn on 8xH800 (8K causal, H 32): 325 forward,
  // 298 forward + backward (docs/calibration.md A).
  model::AttentionCall rfa;
  rfa.sq = rfa.sk = 8192, rfa.H = 32, rfa.d = 128, rfa.keys_per_query = 4096.5, rfa.masked = true;
  const model::Hardware h800 = model::load_hardware("h800-nvlink");
  const double r_fwd = model::attention_rate(h800.efficiency.attention.at("fa2"), rfa, h800.efficiency.sms);
  rfa.backward = true;
  const double r_bwd = model::attention_rate(h800.efficiency.attention.at("fa2"), rfa, h800.efficiency.sms);
  CHECK(r_fwd / 1e12 == Approx(325).epsilon(0.06));
  CHECK(3.5 / (1 / r_fwd + 2.5 / r_bwd) / 1e12 == Approx(298).epsilon(0.06));
}

TEST_CASE("attention and GEMM rates: a longer block is never slower per FLOP, the big shapes reach MAMF", "[model][efficiency]") {
  for (const char* name : {"a100-nvlink", "h100-nvlink", "h800-nvlink", "a800-nvlink", "h200", "h100-ib"}) {
    INFO(name);
    const model::Hardware hw = model::load_hardware(name);
    const model::Efficiency& e = hw.efficiency;
    REQUIRE(e.present);
    for (const auto& [family, k] : e.attention) {
      for (bool masked : {false, true})
        for (bool backward : {false, true}) {
          double last = 0;
          for (int64_t c = 16; c <= (1 << 20); c *= 2) {
            model::AttentionCall call;
            call.sq = call.sk = c, call.H = 8, call.d = 128, call.keys_per_query = masked ? double(c + 1) / 2 : double(c);
            call.masked = masked, call.backward = backward;
            const double r = model::attention_rate(k, call, e.sms);
            INFO(family << (masked ? " causal" : "") << (backward ? " backward" : " forward") << " at " << c);
            CHECK(r >= last);
            const model::AttentionCurve& curve =
                backward ? (masked ? k.backward_causal : k.backward) : (masked ? k.forward_causal : k.forward);
            CHECK(r <= curve.rate * 1.000001);  // never past its long-block rate at d = 128
            last = r;
          }
        }
    }
    // GEMM: MAMF's own shape reaches MAMF exactly; a big square within 5% of it; a GEMM of one
    // output tile uses one SM of all, at most 1/SMs of it (as a wave of one tile does).
    const double peak = hw.peak_flops_bf16;
    CHECK(model::gemm_rate(e, peak, e.gemm.bf16, e.gemm.best_m, e.gemm.best_n, e.gemm.best_k) == Approx(peak * e.gemm.bf16));
    CHECK(model::gemm_rate(e, peak, e.gemm.bf16, 8192, 8192, 8192) >= 0.95 * peak * e.gemm.bf16);
    CHECK(model::gemm_rate(e, peak, e.gemm.bf16, 128, 128, 8192) <= peak * e.gemm.bf16 / e.sms * 1.05);
    // Longer k is never slower per FLOP.
    double last = 0;
    for (int64_t k = 16; k <= 65536; k *= 2) {
      const double r = model::gemm_rate(e, peak, e.gemm.bf16, 4096, 4096, k);
      CHECK(r >= last);
      last = r;
    }
  }
  // A100's MAMF is 271.2 TFLOP/s, H100's 794.5 (stas00/ml-engineering): the profiles' fractions.
  CHECK(model::load_hardware("a100-nvlink").efficiency.gemm.bf16 * 312 == Approx(271.2).epsilon(0.001));
  CHECK(model::load_hardware("h100-nvlink").efficiency.gemm.bf16 * 989 == Approx(794.5).epsilon(0.001));
}

TEST_CASE("transfers: a bigger message never has lower bandwidth, and NCCL's measured busbw at the large end", "[model][efficiency]") {
  const model::Hardware h100 = model::load_hardware("h100-nvlink"), a100 = model::load_hardware("a100-nvlink");
  const model::ModelOptions achieved;
  for (const model::Hardware* hw : {&h100, &a100})
    for (bool same_node : {true, false}) {
      double last = 0;
      for (double bytes = 1; bytes <= 1e10; bytes *= 4) {
        const double bw = bytes / model::transfer_seconds(bytes, same_node, *hw, achieved);
        CHECK(bw >= last);
        last = bw;
      }
    }
  // 4 GB inside an H100 node: NCCL's ring all-reduce busbw is 365-370 GB/s (nccl#1455); 8x A100
  // 232.5 (nccl-tests#175); a 400G NIC 46-48 GB/s (nccl-tests#290).
  auto large = [&](const model::Hardware& hw, bool same_node) { return 4e9 / model::transfer_seconds(4e9, same_node, hw, achieved) / 1e9; };
  CHECK(large(h100, true) == Approx(367.5).epsilon(0.02));
  CHECK(large(a100, true) == Approx(232.5).epsilon(0.02));
  CHECK(large(h100, false) == Approx(47).epsilon(0.03));
}

TEST_CASE("the roofline, --efficiency ideal, is today's model exactly, whatever the profile holds", "[model][efficiency]") {
  LayerConfig cfg;
  cfg.s = 2048, cfg.h = 512, cfg.H = 8, cfg.Hkv = 4, cfg.f = 1024;
  MemoryTracker tracker;
  const trace::TraceData schedule = dry("ring", cfg, 4, tracker);
  model::Hardware with = model::load_hardware("h100-nvlink");
  model::Hardware without = with;
  without.efficiency = {};
  model::ModelOptions ideal;
  ideal.efficiency = "ideal";
  const trace::TraceData a = model::model_trace(schedule, with, ideal), b = model::model_trace(schedule, without);
  REQUIRE(a.ranks.size() == b.ranks.size());
  for (size_t r = 0; r < a.ranks.size(); ++r)
    for (size_t i = 0; i < a.ranks[r].events.size(); ++i) {
      REQUIRE(a.ranks[r].events[i].ts_ns == b.ranks[r].events[i].ts_ns);
      REQUIRE(a.ranks[r].events[i].dur_ns == b.ranks[r].events[i].dur_ns);
    }
  // Every op of the roofline is max(FLOPs / peak, bytes / HBM), to the ns.
  for (const trace::Event& e : a.ranks[0].events)
    if (e.stream == trace::Stream::compute && (e.kind == trace::Kind::gemm || e.kind == trace::Kind::attention || e.kind == trace::Kind::norm))
      REQUIRE(e.dur_ns == std::llround(1e9 * std::max(e.flops / with.peak_flops_bf16, double(e.bytes) / with.memory_bandwidth)));
  // Achieved is slower, never faster: every rate is a fraction of its peak.
  const trace::TraceData c = model::model_trace(schedule, with);
  auto layer = [](const trace::TraceData& t) { return trace::compute_metrics(t).front().ranks.front().time.window_ns; };
  CHECK(layer(c) > layer(a));
  // fp8 needs FP8 tensor cores: an A100 has none.
  model::ModelOptions fp8;
  fp8.dtype = "fp8";
  REQUIRE_THROWS_WITH(model::model_trace(schedule, model::load_hardware("a100-nvlink"), fp8), Catch::Contains("no FP8 tensor cores"));
  // FP8 GEMMs are faster than bf16's, the rest the same: the layer is faster, its attention is not.
  const trace::TraceData f = model::model_trace(schedule, with, fp8);
  CHECK(layer(f) < layer(c));
  // fa3 exists on Hopper only.
  model::ModelOptions fa3;
  fa3.attention_kernel = "fa3";
  REQUIRE_THROWS_WITH(model::model_trace(schedule, model::load_hardware("a100-nvlink"), fa3),
                      Catch::Contains("--attention-kernel fa3: a100-nvlink has no published rates for it (it has fa2)"));
}

TEST_CASE("the report: the slowest rank's forward and backward, attention's share, attention alone", "[model][efficiency]") {
  LayerConfig cfg;
  cfg.s = 4096, cfg.h = 512, cfg.H = 8, cfg.Hkv = 4, cfg.f = 1024;
  MemoryTracker tracker;
  const trace::TraceData schedule = dry("ring", cfg, 4, tracker);
  const model::Hardware hw = model::load_hardware("h100-nvlink");
  const trace::TraceData modeled = model::model_trace(schedule, hw);
  const std::vector<model::StrategyReport> layer = model::report_of(modeled, trace::compute_metrics(modeled));
  REQUIRE(layer.size() == 1);
  const model::RankReport& w = layer[0].slowest;
  REQUIRE(layer[0].ranks.size() == 4);
  CHECK(w.layer.forward_s > 0);
  CHECK(w.layer.backward_s > w.layer.forward_s);  // 2.5 forwards of attention, two GEMMs a GEMM
  CHECK(w.attention.forward_s > 0);
  CHECK(w.attention.forward_s < w.layer.forward_s);
  for (const model::RankReport& r : layer[0].ranks)  // a rank's window is its forward, then its backward
    CHECK(r.total_s == Approx(r.layer.forward_s + r.layer.backward_s).epsilon(0.01));
  const nlohmann::json j = model::report_json(layer[0], false);
  CHECK(j.at(nlohmann::json::json_pointer("/layer/forward_s")).get<double>() == w.layer.forward_s);
  CHECK(j.at(nlohmann::json::json_pointer("/attention/backward_s")).get<double>() == w.attention.backward_s);
  CHECK(j.at("ranks").size() == 4);
  // Attention alone: only the attention sublayer's ops and transfers remain; its time is that
  // sublayer's, without the GEMMs around it (the ring's K/V included).
  const trace::TraceData only = model::attention_only(schedule);
  for (const trace::RankTrace& r : only.ranks)
    for (const trace::Event& e : r.events) REQUIRE((e.kind == trace::Kind::phase || e.sublayer == "attention"));
  const trace::TraceData modeled_only = model::model_trace(only, hw);
  const std::vector<model::StrategyReport> att = model::report_of(modeled_only, trace::compute_metrics(modeled_only));
  const double alone = att[0].slowest.total_s;
  CHECK(alone < w.total_s);
  CHECK(alone == Approx(w.attention.forward_s + w.attention.backward_s).epsilon(0.15));
  CHECK_FALSE(model::report_json(att[0], true).contains("layer"));
}

TEST_CASE("validation cases: the built-in ones parse, a bad case is refused by name", "[model][validate]") {
  const std::vector<model::ValidationCase> cases = model::builtin_validation_cases();
  REQUIRE(cases.size() >= 13);  // ring-flash-attention's 12 batch cases and Megatron's layer
  size_t rfa = 0;
  for (const model::ValidationCase& c : cases) rfa += c.name.rfind("rfa-", 0) == 0;
  CHECK(rfa == 12);
  const nlohmann::json good = nlohmann::json::parse(R"({
    "name": "x", "source": {"title": "t", "url": "https://example.org", "where": "table 1"},
    "hardware": {"profile": "h800-nvlink"}, "kernel": "fa2", "configuration": "c",
    "args": ["--strategy", "ring", "--hw", "h800-nvlink"],
    "measured": {"value": 57.5, "unit": "ms", "quantity": "/attention/total_s", "definition": "d"}})");
  const model::ValidationCase c = model::parse_validation_case(good, "x.json");
  CHECK(c.measured_s == Approx(0.0575));
  CHECK(c.tolerance == 0.15);
  auto refused = [&](auto&& edit, const char* message) {
    nlohmann::json j = good;
    edit(j);
    INFO(j.dump());
    REQUIRE_THROWS_AS(model::parse_validation_case(j, "x.json"), ConfigError);
    REQUIRE_THROWS_WITH(model::parse_validation_case(j, "x.json"), Catch::Contains(message));
  };
  refused([](nlohmann::json& j) { j.erase("source"); }, "source must say where the number was published");
  refused([](nlohmann::json& j) { j["source"]["url"] = "example.org"; }, "source.url must be a URL");
  refused([](nlohmann::json& j) { j["hardware"]["profile"] = "h900"; }, "hardware.profile h900 is not a built-in profile (a100-nvlink, a800-nvlink");
  refused([](nlohmann::json& j) { j["args"] = {"--strategy", "ring", "--hw", "a100-nvlink"}; }, "--hw h800-nvlink");
  refused([](nlohmann::json& j) { j["measured"]["unit"] = "iter/s"; }, "measured.unit must be s, ms or us");
  refused([](nlohmann::json& j) { j["measured"]["value"] = -1; }, "measured.value must be a positive number");
  refused([](nlohmann::json& j) { j["measured"]["quantity"] = "/layer/speed"; }, "is none of /layer/forward_s");
  refused([](nlohmann::json& j) { j["measured"]["quantity"] = "/step/step_s"; }, "is a whole step's: args need --gbs");
  refused([](nlohmann::json& j) { j["tolerance"] = 0.3; }, "needs tolerance_reason");
  refused([](nlohmann::json& j) { j = nlohmann::json::array(); }, "a validation case is a JSON object");
  // Orders: two cases of one group, each side's order.
  model::ValidationCase a = c, b = c;
  a.name = "a", b.name = "b", a.measured_s = 1, b.measured_s = 2;
  std::vector<model::ValidationRow> rows{{a, 1.1}, {b, 1.9}};
  REQUIRE(model::validation_orders(rows).size() == 1);
  CHECK(model::validation_orders(rows)[0].holds());
  rows[1].modeled_s = 1.0;
  CHECK_FALSE(model::validation_orders(rows)[0].holds());
  // A tie measured orders nothing: whichever the model puts first, the order holds.
  std::vector<model::ValidationRow> tie = rows;
  tie[1].c.measured_s = 1;
  CHECK(model::validation_orders(tie)[0].holds());
  CHECK(model::median_abs_error(rows) == Approx((0.1 + 0.5) / 2));
  CHECK(model::worst_abs_error(rows) == Approx(0.5));
}

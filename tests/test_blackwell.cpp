// The Blackwell GPU parts (src/model/hardware/gpus/*.json, issue 60): each peak, MAMF rate and
// attention curve against the published figure it was taken or fitted from (docs/calibration.md G,
// scripts/fit_attention.py), the fa4 kernel family where families are checked, and MXFP8.
#include <catch2/catch.hpp>

#include <fstream>
#include <sstream>

#include "core/error.h"
#include "model/efficiency.h"
#include "model/model.h"
#include "model/stack.h"

using namespace ringside;

namespace {

// A GPU part's JSON, read from the source tree.
nlohmann::json gpu_part_json(const std::string& name) {
  const std::string path = std::string(RINGSIDE_SOURCE_DIR "/src/model/hardware/gpus/") + name + ".json";
  std::ifstream in(path);
  REQUIRE(in.good());
  std::stringstream text;
  text << in.rdbuf();
  return nlohmann::json::parse(text.str());
}

// A GPU part made a whole profile of today's format: the part gives compute, memory and kernel
// rates; a system of 8 to a node on NVLink and InfiniBand (test values) gives the links, until the
// loader of parts (issue 60) composes them itself.
model::Hardware blackwell(const std::string& name) {
  nlohmann::json j = gpu_part_json(name);
  j["gpus_per_node"] = 8;
  j["intra_node"] = {{"bandwidth_GBps", 900}, {"latency_us", 3}};
  j["inter_node"] = {{"bandwidth_GBps", 50}, {"latency_us", 5}};
  j["efficiency"]["links"] = {{"intra_node", 0.92}, {"inter_node", 0.94}, {"source", "test"}};
  return model::parse_hardware(j, name);
}

// One attention call of b x L x H of head dim d, square, as the benchmarks run it: causal queries
// see (L + 1) / 2 keys.
double rate_tflops(const model::Hardware& hw, const std::string& family, int64_t b, int64_t L, int64_t H, int64_t d, bool causal,
                   bool backward) {
  model::AttentionCall call;
  call.b = b, call.sq = call.sk = L, call.H = H, call.d = d;
  call.keys_per_query = causal ? double(L + 1) / 2 : double(L);
  call.masked = causal, call.backward = backward;
  return model::attention_rate(hw.efficiency.attention.at(family), call, hw.efficiency.sms) / 1e12;
}

}  // namespace

TEST_CASE("Blackwell parts: datasheet peaks, memory, SMs and MXFP8", "[blackwell]") {
  struct Spec {
    const char* name;
    double bf16, fp8, fp32, hbm_GB, hbm_TBps;
    int sms;
  };
  // docs/calibration.md G; fp32 from glennklockwood.com (B200 80 at 1,000 W, GB200 90 at 1,200 W, HGX B300 75).
  for (const Spec& s : {Spec{"b200", 2250, 4500, 80, 180, 7.7, 148}, Spec{"gb200", 2500, 5000, 90, 186, 8.0, 148},
                        Spec{"gb300", 2500, 5000, 75, 279, 8.0, 160}}) {
    INFO(s.name);
    const model::Hardware hw = blackwell(s.name);
    CHECK(hw.name == s.name);
    CHECK(hw.peak_flops_bf16 / 1e12 == Approx(s.bf16));
    CHECK(hw.peak_flops_fp8 / 1e12 == Approx(s.fp8));
    CHECK(hw.peak_flops_fp32 / 1e12 == Approx(s.fp32));
    CHECK(hw.memory_bytes / 1e9 == Approx(s.hbm_GB));
    CHECK(hw.memory_bandwidth / 1e12 == Approx(s.hbm_TBps));
    CHECK(hw.efficiency.sms == s.sms);
    CHECK(hw.mxfp8);
    CHECK(hw.efficiency.default_kernel == "fa4");
    CHECK(hw.efficiency.attention.size() == 2);  // fa4 and cudnn: no FA2 or FA3 rates measured on Blackwell here
  }
}

TEST_CASE("Blackwell parts: GEMMs reach B200's MAMF, GB200 above Azure's fixed-shape sweep", "[blackwell]") {
  // stas00/ml-engineering MAMF on B200: bf16 1,745.0 TFLOP/s at 1792x16128x3072, fp8 e4m3 3,432. GB200 and
  // GB300 take those rates absolute (their peaks are higher; no MAMF of theirs was found).
  for (const char* name : {"b200", "gb200", "gb300"}) {
    INFO(name);
    const model::Hardware hw = blackwell(name);
    const model::Efficiency& e = hw.efficiency;
    const auto at_best = [&](double peak, double mamf) { return model::gemm_rate(e, peak, mamf, 1792, 16128, 3072) / 1e12; };
    CHECK(at_best(hw.peak_flops_bf16, e.gemm.bf16) == Approx(1745.0).epsilon(0.005));
    CHECK(at_best(hw.peak_flops_fp8, e.gemm.fp8) == Approx(3432).epsilon(0.005));
  }
  // Azure/AI-benchmarking-guide ND_GB200_v6: cuBLASLt FP8 2,906.9 TFLOP/s at 16384^3, a fixed shape on CUDA
  // 12.8, read as a lower bound: the model's rate there lies above it and at most B200's MAMF.
  const model::Hardware gb200 = blackwell("gb200");
  const double fp8_16k = model::gemm_rate(gb200.efficiency, gb200.peak_flops_fp8, gb200.efficiency.gemm.fp8, 16384, 16384, 16384) / 1e12;
  CHECK(fp8_16k > 2906.9);
  CHECK(fp8_16k <= 3432 * 1.005);
}

TEST_CASE("Blackwell parts: attention curves reproduce their published points", "[blackwell]") {
  struct Point {
    const char* what;
    const char* part;
    const char* family;
    int64_t b, L, H, d;
    bool causal, backward;
    double published, tolerance;  // the fit's stated worst error, plus rounding
  };
  const Point points[] = {
      // flash-attention PR #2605, FA4 table, 32K tokens of 16 heads of d 128 (fit worst 1.2%)
      {"FA4 forward 1K", "b200", "fa4", 32, 1024, 16, 128, false, false, 1145, 0.015},
      {"FA4 forward 4K", "b200", "fa4", 8, 4096, 16, 128, false, false, 1559, 0.015},
      {"FA4 forward 16K", "b200", "fa4", 2, 16384, 16, 128, false, false, 1745, 0.015},
      // the same table, causal (fit worst 1.3%; at 4K the unmasked curve of the same keys bounds it)
      {"FA4 forward causal 1K", "b200", "fa4", 32, 1024, 16, 128, true, false, 785, 0.016},
      {"FA4 forward causal 2K", "b200", "fa4", 16, 2048, 16, 128, true, false, 1132, 0.016},
      {"FA4 forward causal 4K", "b200", "fa4", 8, 4096, 16, 128, true, false, 1381, 0.016},
      // d_half from the FA4 table's d 64 (32 heads) at 8K
      {"FA4 forward d64 8K", "b200", "fa4", 4, 8192, 32, 64, false, false, 1179, 0.016},
      // PR #2280, 2-CTA backward at 8K, batch 4, 16 heads: one point each, R through it
      {"FA4 backward 8K", "b200", "fa4", 4, 8192, 16, 128, false, true, 1359.8, 0.002},
      {"FA4 backward causal 8K", "b200", "fa4", 4, 8192, 16, 128, true, true, 1208.6, 0.002},
      // cudnn-frontend be6c079, cuDNN 9.13.1 on B200, 128 query heads, batch 1 (fit worst 3.0%)
      {"cuDNN backward causal 8K", "b200", "cudnn", 1, 8192, 128, 128, true, true, 942.5, 0.032},
      {"cuDNN backward causal 16K", "b200", "cudnn", 1, 16384, 128, 128, true, true, 1074.8, 0.032},
      {"cuDNN backward causal 32K", "b200", "cudnn", 1, 32768, 128, 128, true, true, 1108.7, 0.032},
      {"cuDNN backward causal 64K", "b200", "cudnn", 1, 65536, 128, 128, true, true, 1073.1, 0.032},
      // PR #2605's cuDNN column: d 64 (fits worst 0.2% and 0.6%) and its one d 128 point
      {"cuDNN forward d64 1K", "b200", "cudnn", 32, 1024, 32, 64, false, false, 980, 0.006},
      {"cuDNN forward d64 16K", "b200", "cudnn", 2, 16384, 32, 64, false, false, 1157, 0.006},
      {"cuDNN forward causal d64 1K", "b200", "cudnn", 32, 1024, 32, 64, true, false, 627, 0.01},
      {"cuDNN forward causal d64 8K", "b200", "cudnn", 4, 8192, 32, 64, true, false, 1071, 0.01},
      {"cuDNN forward d128 1K", "b200", "cudnn", 32, 1024, 16, 128, false, false, 1428, 0.006},
      // cuDNN 9.22 on GB200, batch 2, 64 query heads (k_half B200's, R minimax: worst 9.6%)
      {"GB200 cuDNN backward causal 8K", "gb200", "cudnn", 2, 8192, 64, 128, true, true, 1332, 0.098},
      {"GB200 cuDNN backward causal 16K", "gb200", "cudnn", 2, 16384, 64, 128, true, true, 1328, 0.098},
      {"GB200 cuDNN backward causal 32K", "gb200", "cudnn", 2, 32768, 64, 128, true, true, 1226, 0.098},
  };
  for (const Point& p : points) {
    INFO(p.what);
    const model::Hardware hw = blackwell(p.part);
    CHECK(rate_tflops(hw, p.family, p.b, p.L, p.H, p.d, p.causal, p.backward) == Approx(p.published).epsilon(p.tolerance));
  }
}

TEST_CASE("Blackwell parts: derived curves follow their stated rules", "[blackwell]") {
  const model::Hardware b200 = blackwell("b200"), gb200 = blackwell("gb200"), gb300 = blackwell("gb300");
  // Non-causal cuDNN backward: the causal curve x 1.044 (cuDNN 9.19 on H200 at equal keys a query sees).
  for (const model::Hardware* hw : {&b200, &gb200}) {
    const model::AttentionKernel& k = hw->efficiency.attention.at("cudnn");
    CHECK(k.backward.rate / k.backward_causal.rate == Approx(1.044).epsilon(0.002));
    CHECK(k.backward.k_half == k.backward_causal.k_half);
  }
  // One-point and unfixable curves take B200 cuDNN's causal backward half-point, 662 keys.
  CHECK(b200.efficiency.attention.at("fa4").backward.k_half == 662);
  CHECK(b200.efficiency.attention.at("fa4").backward_causal.k_half == 662);
  CHECK(gb200.efficiency.attention.at("cudnn").backward_causal.k_half == 662);
  // What GB200 and GB300 were not measured on is B200's, absolute; GB300's attention is GB200's.
  for (const char* family : {"fa4", "cudnn"}) {
    INFO(family);
    const model::AttentionKernel &b = b200.efficiency.attention.at(family), &g = gb200.efficiency.attention.at(family),
                                 &u = gb300.efficiency.attention.at(family);
    CHECK(g.forward.rate == b.forward.rate);
    CHECK(g.forward_causal.rate == b.forward_causal.rate);
    for (auto curve : {&model::AttentionKernel::forward, &model::AttentionKernel::forward_causal, &model::AttentionKernel::backward,
                       &model::AttentionKernel::backward_causal}) {
      CHECK((u.*curve).rate == (g.*curve).rate);
      CHECK((u.*curve).k_half == (g.*curve).k_half);
    }
  }
}

TEST_CASE("fa4 is a kernel family wherever families are checked, and an unknown one is not", "[blackwell]") {
  // A profile's efficiency: fa4 parses (the parts above), fa5 does not.
  nlohmann::json j = gpu_part_json("b200");
  j["efficiency"]["attention"]["fa5"] = j["efficiency"]["attention"]["fa4"];
  j["gpus_per_node"] = 8;
  j["intra_node"] = {{"bandwidth_GBps", 900}, {"latency_us", 3}};
  j["inter_node"] = {{"bandwidth_GBps", 50}, {"latency_us", 5}};
  j["efficiency"]["links"] = {{"intra_node", 0.92}, {"inter_node", 0.94}, {"source", "test"}};
  REQUIRE_THROWS_WITH(model::parse_hardware(j, "b200"), Catch::Contains("attention.fa5: a kernel family is fa2, fa3, fa4 or cudnn"));

  // A stack's preference list.
  nlohmann::json stack = model::stack_json("megatron");
  stack["attention"]["kernels"] = {"fa4", "cudnn"};
  CHECK(model::parse_stack(stack, "s").attention_kernels == std::vector<std::string>{"fa4", "cudnn"});
  stack["attention"]["kernels"] = {"fa5"};
  REQUIRE_THROWS_WITH(model::parse_stack(stack, "s"), Catch::Contains("a kernel family is fa2, fa3, fa4 or cudnn"));

  // --attention-kernel: fa4 on a Blackwell part; on H100 no rates; fa5 unknown.
  const model::Hardware b200 = blackwell("b200"), h100 = model::load_hardware("h100-nvlink");
  model::ModelOptions o;
  o.attention_kernel = "fa4";
  CHECK_NOTHROW(model::check_model_options(b200, o));
  CHECK(model::attention_kernel_of(b200, o) == "fa4");
  REQUIRE_THROWS_WITH(model::check_model_options(h100, o),
                      Catch::Contains("--attention-kernel fa4: h100-nvlink has no published rates for it (it has cudnn, fa2, fa3)"));
  o.attention_kernel = "fa5";
  REQUIRE_THROWS_WITH(model::check_model_options(b200, o), Catch::Contains("--attention-kernel fa5: fa2, fa3, fa4 or cudnn"));

  // The built-in stacks prefer no fa4 (none of them calls it: docs in the report), so Megatron runs
  // cuDNN on Blackwell as on Hopper, and a stack that calls FA2 alone finds no rates on these parts.
  model::ModelOptions megatron;
  CHECK(model::attention_kernel_of(b200, megatron) == "cudnn");
  CHECK(model::attention_kernel_of(h100, megatron) == "cudnn");
  model::ModelOptions ring;
  ring.stack = model::load_stack("ring-flash-attention");
  REQUIRE_THROWS_WITH(model::check_model_options(b200, ring), Catch::Contains("has published rates for none of them (it has cudnn, fa4)"));
}

TEST_CASE("MXFP8 runs on the Blackwell parts and nowhere else", "[blackwell]") {
  model::ModelOptions o;
  o.dtype = "fp8", o.fp8_recipe = "mxfp8";
  for (const char* name : {"b200", "gb200", "gb300"}) {
    INFO(name);
    CHECK_NOTHROW(model::check_model_options(blackwell(name), o));
  }
  REQUIRE_THROWS_WITH(model::check_model_options(model::load_hardware("h100-nvlink"), o),
                      Catch::Contains("h100-nvlink has no MXFP8 tensor cores"));
}

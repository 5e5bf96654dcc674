// No modeled number above what the hardware can do (issue 57): MFU counts the FLOPs the mask
// leaves, no op's modeled rate passes its peak, the replay and the step planner stop on one that
// does, and ranks sharing one machine's memory fit in their share of it.
#include <catch2/catch.hpp>

#include <cmath>
#include <numeric>

#include "core/error.h"
#include "kernels/cpu/attention.h"
#include "model/flops.h"
#include "model/model.h"
#include "model/step_parts.h"
#include "parallel/run_plan.h"
#include "run/runner.h"
#include "trace/metrics.h"

using namespace ringside;

namespace {

// The pairs the kernels' own mask leaves (kernels/attention_params.h), counted row by row by
// their FLOP count: 4 d per visible pair per head.
double kernel_pairs(const LayerConfig& cfg) {
  kernels::AttentionParams p;
  p.b = 1, p.sq = p.sk = cfg.s, p.H = p.Hkv = 1, p.d = 1, p.causal = cfg.causal;
  kernels::DocumentMask mask;
  const std::vector<int64_t> docs = cfg.docs.empty() ? std::vector<int64_t>{cfg.s} : cfg.docs;
  int64_t start = 0;
  for (int64_t n : docs) mask.starts.push_back(start), mask.lengths.push_back(n), start += n;
  mask.window = cfg.window;
  p.mask = &mask;
  return kernels::attention_forward_flops(p) / 4.0;
}

LayerConfig layer(int64_t s, bool causal, int64_t window, std::vector<int64_t> docs) {
  LayerConfig cfg;
  cfg.s = s, cfg.h = 512, cfg.H = 8, cfg.Hkv = 4, cfg.f = 1024;
  cfg.causal = causal, cfg.window = window, cfg.docs = std::move(docs);
  return cfg;
}

trace::Event gemm_event(double flops, int64_t bytes) {
  trace::Event ev;
  ev.name = "matmul", ev.kind = trace::Kind::gemm, ev.stream = trace::Stream::compute;
  ev.flops = flops, ev.bytes = bytes;
  return ev;
}

}  // namespace

TEST_CASE("MFU's attention pairs: the closed form is the kernels' mask, row by row, under windows and documents",
          "[model][limits]") {
  const std::vector<int64_t> docs{700, 2000, 299, 1097};
  for (bool causal : {true, false})
    for (int64_t window : {int64_t{0}, int64_t{1}, int64_t{300}, int64_t{1500}, int64_t{5000}})
      for (const std::vector<int64_t>& d : {std::vector<int64_t>{}, docs}) {
        const LayerConfig cfg = layer(4096, causal, window, d);
        if (!cfg.masked()) continue;
        INFO("causal " << causal << " window " << window << " docs " << d.size());
        REQUIRE(model::attention_pairs(cfg) == kernel_pairs(cfg));  // whole numbers, exact
      }
  // No mask beyond causal: FlashAttention's s^2 / 2 (the kernel's s (s + 1) / 2 to within 1/s).
  const LayerConfig plain = layer(4096, true, 0, {});
  CHECK(model::attention_pairs(plain) == 4096.0 * 4096 / 2);
  CHECK(kernel_pairs(plain) == 4096.0 * 4097 / 2);
  CHECK(model::attention_pairs(layer(4096, false, 0, {})) == 4096.0 * 4096);
  // The break test's 1M-token sequence under an 8K window: 0.78% of s^2, not the 50% causal counts.
  const LayerConfig windowed = layer(1048576, true, 8192, {});
  CHECK(model::attention_pairs(windowed) == 8192.0 * 8193 / 2 + (1048576.0 - 8192) * 8192);
  // MFU's FLOPs a token: the GEMMs and head unchanged, attention 4 H d pairs / s.
  const double whole = model::model_flops_per_token(windowed, 32, 128256, false);
  const double masked = model::model_flops_per_token(windowed, 32, 128256, true);
  CHECK(whole - masked == Approx(3 * 32 * 4.0 * 512 * (1048576.0 * 1048576 - model::attention_pairs(windowed)) / 1048576).epsilon(1e-12));
  CHECK(model::attention_count_text(windowed) == "attention as its mask leaves it (causal, a window of 8192 keys): the pairs it keeps, counted exactly");
  CHECK(model::attention_count_text(plain) == "attention causally halved (FlashAttention's count)");
}

TEST_CASE("no modeled rate passes its peak: a profile whose attention chart is near the peak, at head dim 256",
          "[model][limits]") {
  // The head-dim term scales a chart's rate up above d 128 (efficiency.h); with a chart at
  // 985 of 989 TFLOP/s it modeled attention at d 256 above the peak (1038 TFLOP/s in the break test).
  model::Hardware hw = model::load_hardware("h100-nvlink");
  for (auto& [name, k] : hw.efficiency.attention)
    for (model::AttentionCurve* c : {&k.forward, &k.forward_causal, &k.backward, &k.backward_causal}) c->rate = 985e12, c->k_half = 1;
  hw.efficiency.gemm.bf16 = 1.0;
  LayerConfig cfg = layer(65536, false, 0, {});
  cfg.h = 4096, cfg.H = cfg.Hkv = 16, cfg.f = 4096;  // d = 256
  MemoryTracker tracker;
  const trace::TraceData schedule = model::dry_run(resolve(parse_parallel_config("ring"), cfg, 2), tracker);
  const trace::TraceData modeled = model::model_trace(schedule, hw);
  double fastest = 0;
  int attention_ops = 0;
  for (const trace::RankTrace& r : modeled.ranks)
    for (const trace::Event& e : r.events)
      if (e.stream == trace::Stream::compute && e.flops > 0 && e.dur_ns > 0) {
        fastest = std::max(fastest, e.flops / (double(e.dur_ns) * 1e-9));
        attention_ops += e.kind == trace::Kind::attention;
      }
  REQUIRE(attention_ops > 0);
  CHECK(fastest <= hw.peak_flops_bf16 * (1 + 1e-6));  // the ns rounding of dur_ns
  CHECK(fastest > 0.95 * hw.peak_flops_bf16);        // and the cap is the peak, not below it
}

TEST_CASE("the replay's guard: an op or transfer faster than the hardware stops the model, naming it and the numbers",
          "[model][limits]") {
  const model::Hardware hw = model::load_hardware("h100-nvlink");
  const model::ModelOptions o;
  auto what = [] { return std::string("op 'matmul' of ring rank 3"); };
  // 989 TFLOP/s for 1 ms: the peak exactly passes; 1% more does not.
  REQUIRE_NOTHROW(model::check_op_within_hardware(gemm_event(989e9, 0), 0, 1e-3, hw, o, what));
  REQUIRE_THROWS_WITH(model::check_op_within_hardware(gemm_event(1.01 * 989e9, 0), 0, 1e-3, hw, o, what),
                      Catch::Contains("op 'matmul' of ring rank 3 on h100-nvlink does its FLOPs at 998.89 TFLOP/s") &&
                          Catch::Contains("above the bf16 peak of 989 TFLOP/s"));
  // FP8 GEMMs are held to the FP8 peak, and pass bf16's; memory traffic to the HBM's bandwidth.
  model::ModelOptions fp8;
  fp8.dtype = "fp8";
  REQUIRE_NOTHROW(model::check_op_within_hardware(gemm_event(1500e9, 0), 0, 1e-3, hw, fp8, what));
  REQUIRE_THROWS_WITH(model::check_op_within_hardware(gemm_event(0, 0), 4e9, 1e-3, hw, o, what),
                      Catch::Contains("its memory traffic at 4000 GB/s") && Catch::Contains("the memory bandwidth of 3350 GB/s"));
  REQUIRE_THROWS_WITH(model::check_op_within_hardware(gemm_event(1, 0), 0, 0, hw, o, what), Catch::Contains("inf TFLOP/s"));
  // A transfer: 450 GB/s on NVLink, 50 on InfiniBand.
  REQUIRE_NOTHROW(model::check_transfer_within_hardware(450e6, 1e-3, hw.tiers.front(), hw, what));
  REQUIRE_THROWS_WITH(model::check_transfer_within_hardware(450e6, 1e-3, hw.tiers.back(), hw, what),
                      Catch::Contains("450 GB/s, above the line rate of 50 GB/s of InfiniBand"));
}

TEST_CASE("the step's guard: MFU above 100% or memory that does not add up is a bug, not a row", "[model][limits]") {
  const model::Hardware hw = model::load_hardware("h100-nvlink");
  model::StepRow r;
  r.candidate.layer.par = parse_parallel_config("ring");
  r.cost.step_s = r.cost.pipeline_s = 1;
  r.cost.state.weights = 1e9, r.cost.activation_bytes = 2e9;
  r.mfu = 0.99;
  REQUIRE_NOTHROW(model::step_parts::check_step_row(r, hw));
  r.mfu = 1.02;
  REQUIRE_THROWS_WITH(model::step_parts::check_step_row(r, hw), Catch::Contains("MFU 102% passes the peak"));
  r.mfu = 0.5, r.cost.activation_bytes = -1;
  REQUIRE_THROWS_WITH(model::step_parts::check_step_row(r, hw), Catch::Contains("activations -1 bytes"));
  r.cost.activation_bytes = 0, r.cost.step_s = 0.5;
  REQUIRE_THROWS_WITH(model::step_parts::check_step_row(r, hw), Catch::Contains("shorter than its pipeline"));
}

TEST_CASE("a profile whose FP8 peak is below bf16's is refused: its MFU over the FP8 peak would pass 100% on bf16 ops",
          "[model][limits]") {
  nlohmann::json j = model::hardware_json("h100-nvlink");
  j["peak_flops"]["fp8"] = 1e14;  // the break test's: below the bf16 peak of 989e12
  REQUIRE_THROWS_WITH(model::parse_hardware(j, "fp8low.json"),
                      Catch::Contains("fp8low.json: peak_flops.fp8 (100 TFLOP/s) is below peak_flops.bf16 (989)"));
  j["peak_flops"]["fp8"] = 989e12;  // equal: accepted
  REQUIRE_NOTHROW(model::parse_hardware(j, "fp8equal.json"));
}

TEST_CASE("ranks sharing one machine's memory fit in their share of it", "[model][limits]") {
  model::Hardware shared = model::load_hardware("h100-nvlink");
  shared.memory_shared = true, shared.memory_bytes = 24e9;
  const model::Hardware each = model::memory_per_rank(shared, 16);
  CHECK(each.memory_bytes == 1.5e9);
  CHECK_FALSE(each.memory_shared);
  CHECK_THAT(each.description, Catch::Contains("shared by 16 ranks"));
  // A GPU's memory is its own: unchanged whatever the ranks.
  const model::Hardware gpu = model::load_hardware("h100-nvlink");
  CHECK(model::memory_per_rank(gpu, 16).memory_bytes == gpu.memory_bytes);
  REQUIRE_THROWS_AS(model::memory_per_rank(gpu, 0), ConfigError);
}

// `ringside calibrate`'s fits (model/calibrate.h) on samples made at known rates with the model's
// own forms: every rate recovered, the parameters that a run cannot fix kept and said, nothing
// fitted past an efficiency of 1, and the runs it refuses.
#include <catch2/catch.hpp>

#include <cmath>

#include "core/error.h"
#include "model/calibrate.h"
#include "model/efficiency.h"
#include "model/model.h"

using namespace ringside;

namespace {

// The known rates: h100-nvlink with every fitted parameter moved.
model::Hardware truth_profile() {
  model::Hardware hw = model::load_hardware("h100-nvlink");
  hw.efficiency.gemm.bf16 = 0.70, hw.efficiency.gemm.k_half = 96, hw.efficiency.gemm.sustained = 1;
  hw.efficiency.memory_fraction = 0.78, hw.efficiency.launch_s = 4e-6;
  hw.efficiency.attention["fa3"].forward.rate = 600e12;
  hw.efficiency.attention["fa3"].forward.k_half = 150;
  hw.efficiency.attention["fa3"].backward_causal.rate = 700e12;
  hw.tiers[0].latency_s = 4e-6, hw.tiers[0].efficiency = 0.7;
  hw.tiers[1].latency_s = 8e-6, hw.tiers[1].efficiency = 0.85;
  return hw;
}

double gemm_seconds(const model::Hardware& hw, int64_t m, int64_t n, int64_t k) {
  const double peak = hw.peak_flops_bf16;
  const double rate = model::gemm_rate(hw.efficiency, peak, hw.efficiency.gemm.bf16, m, n, k);
  const double flops = 2.0 * m * n * k, bytes = 2.0 * (double(m) * k + double(k) * n + double(m) * n);
  return std::max(flops / std::min(rate * hw.efficiency.clock, peak), bytes / (hw.memory_bandwidth * hw.efficiency.memory_fraction));
}

double attention_seconds(const model::Hardware& truth, const trace::AttentionSample& s) {
  model::Hardware hw = truth;
  hw.efficiency.launch_s = 0;
  const double sq = double(s.sq), sk = double(s.sk);
  const double pairs = !s.causal ? sq * sk : sq * (sk - sq) + sq * (sq + 1) / 2;
  trace::Event ev;
  ev.kind = trace::Kind::attention, ev.stream = trace::Stream::compute;
  ev.name = s.backward ? "attention_backward" : "attention_forward";
  ev.flops = 4.0 * s.d * s.b * s.H * pairs * (s.backward ? 2.5 : 1.0);
  ev.detail = detail::concat("b=", s.b, " sq=", s.sq, " sk=", s.sk, " H=", s.H, " Hkv=", s.Hkv, " d=", s.d);
  model::ModelOptions o;
  o.attention_kernel = s.family;
  return model::op_seconds(ev, 0, hw, o);
}

// A run of a 16-GPU job (two nodes of 8) whose every kernel took what `truth` says.
trace::ProfiledRun known_run(const model::Hardware& truth) {
  trace::ProfiledRun run;
  run.world_size = 16, run.sms = 132, run.kernels = 1000;
  for (int64_t m : {2048, 8192})
    for (int64_t n : {1024, 4096, 14336})
      for (int64_t k : {128, 512, 2048, 8192}) run.gemms.push_back({0, m, n, k, "bf16", "aten::mm", "gemm", gemm_seconds(truth, m, n, k)});
  for (int64_t sk : {256, 1024, 4096, 16384}) {
    trace::AttentionSample s;
    s.family = "fa3", s.b = 1, s.sq = 4096, s.sk = sk, s.H = 32, s.Hkv = 8, s.d = 128;
    s.seconds = attention_seconds(truth, s);
    run.attention.push_back(s);
  }
  for (int64_t L : {1024, 4096, 8192}) {  // causal squares, backward: the keys a query sees span 8x
    trace::AttentionSample s;
    s.family = "fa3", s.backward = true, s.causal = true, s.b = 2, s.sq = s.sk = L, s.H = 32, s.Hkv = 8, s.d = 128;
    s.seconds = attention_seconds(truth, s);
    run.attention.push_back(s);
  }
  for (double mib : {32, 128, 1024}) run.memory.push_back({0, mib * (1 << 20), "aten::add", mib * (1 << 20) / (truth.memory_bandwidth * 0.78)});
  for (int i = 0; i < 20; ++i) run.queued_gaps.push_back(4e-6);
  // An all-gather inside node 0 and an all-reduce across the nodes (ranks 0 and 8), each at three sizes.
  const std::vector<int> node{0, 1, 2, 3, 4, 5, 6, 7}, across{0, 8};
  int64_t call = 0;
  for (double S : {1e6, 16e6, 256e6}) {
    const model::Tier &nv = truth.tiers[0], &ib = truth.tiers[1];
    run.comms.push_back({0, 0, trace::NcclCall::all_gather, S, node, -1, "tp", call, 7 * (nv.latency_s + S / 8 / (nv.bandwidth * nv.efficiency))});
    run.comms.push_back({0, 0, trace::NcclCall::all_reduce, S / 16, across, -1, "dp", call, 2 * (ib.latency_s + S / 32 / (ib.bandwidth * ib.efficiency))});
    ++call;
  }
  return run;
}

const model::CalibratedParameter& parameter(const model::Calibration& c, const std::string& name) {
  for (const model::CalibratedParameter& p : c.parameters)
    if (p.name == name) return p;
  FAIL("no parameter " << name);
  return c.parameters.front();
}

}  // namespace

TEST_CASE("calibrate recovers every rate a run at known rates measures, within 2%", "[calibrate]") {
  const model::Hardware truth = truth_profile(), base = model::load_hardware("h100-nvlink");
  const model::Calibration c = model::calibrate(known_run(truth), base, {});
  auto fitted = [&](const std::string& name, double want) {
    const model::CalibratedParameter& p = parameter(c, name);
    INFO(name << ": base " << p.base << ", fitted " << p.fitted << ", want " << want << (p.kept ? ", kept: " + p.why : ""));
    CHECK_FALSE(p.kept);
    CHECK(p.fitted == Approx(want).epsilon(0.02));
    CHECK(p.median_error < 0.02);
  };
  fitted("efficiency.gemm.bf16", 0.70);
  fitted("efficiency.gemm.k_half", 96);
  fitted("efficiency.memory.fraction", 0.78);
  fitted("efficiency.memory.launch_us", 4);
  fitted("efficiency.attention.fa3.forward.tflops", 600);
  fitted("efficiency.attention.fa3.forward.k_half", 150);
  fitted("efficiency.attention.fa3.backward_causal.tflops", 700);
  fitted("tiers[0] (NVLink).latency_us", 4);
  fitted("tiers[0] (NVLink).efficiency", 0.7);
  fitted("tiers[1] (InfiniBand).latency_us", 8);
  fitted("tiers[1] (InfiniBand).efficiency", 0.85);
  // The fitted profile is the truth where the run measured it: the same GEMM time.
  CHECK(gemm_seconds(c.hw, 4096, 4096, 1024) == Approx(gemm_seconds(truth, 4096, 4096, 1024)).epsilon(0.02));
  // The causal backward's keys span 1024..8192 / 2 (8x): its k_half is fitted too, to the truth's (the base's).
  fitted("efficiency.attention.fa3.backward_causal.k_half", base.efficiency.attention.at("fa3").backward_causal.k_half);
}

TEST_CASE("calibrate keeps the base's value where the run has too few samples, and says why", "[calibrate]") {
  const model::Hardware truth = truth_profile(), base = model::load_hardware("h100-nvlink");
  trace::ProfiledRun run = known_run(truth);
  run.attention.resize(2);  // two forward calls: fewer than --min-samples 3
  run.gemms.erase(std::remove_if(run.gemms.begin(), run.gemms.end(), [](const trace::GemmSample& g) { return g.k != 2048; }),
                  run.gemms.end());  // one k: no half point
  const model::Calibration c = model::calibrate(run, base, {});
  const model::CalibratedParameter& fwd = parameter(c, "efficiency.attention.fa3.forward.tflops");
  CHECK(fwd.kept);
  CHECK(fwd.samples == 2);
  CHECK(fwd.fitted == base.efficiency.attention.at("fa3").forward.rate / 1e12);
  CHECK_THAT(fwd.why, Catch::Contains("fewer than 3"));
  const model::CalibratedParameter& kh = parameter(c, "efficiency.gemm.k_half");
  CHECK(kh.kept);
  CHECK_THAT(kh.why, Catch::Contains("1 value"));
  CHECK(c.hw.efficiency.gemm.k_half == base.efficiency.gemm.k_half);
  CHECK(parameter(c, "efficiency.gemm.fp8").kept);
  CHECK(parameter(c, "efficiency.gemm.fp8").why == "the run has none");
  // The GEMM fraction is still fitted at the base's k_half: each k = 2048 GEMM's time holds.
  CHECK_FALSE(parameter(c, "efficiency.gemm.bf16").kept);
}

TEST_CASE("calibrate never fits an efficiency past 1 nor a rate past the peak", "[calibrate]") {
  const model::Hardware base = model::load_hardware("h100-nvlink");
  trace::ProfiledRun run = known_run(truth_profile());
  for (trace::MemoryBoundSample& m : run.memory) m.seconds = m.bytes / (base.memory_bandwidth * 1.03);  // 3% past the HBM's datasheet rate: at the bound, within 5%
  for (trace::GemmSample& g : run.gemms) g.dtype = "fp32", g.seconds /= 5;  // TF32 GEMMs, as fp32 tensors record them
  for (trace::AttentionSample& a : run.attention) a.seconds /= 4;          // past the bf16 peak
  const model::Calibration c = model::calibrate(run, base, {});
  CHECK(parameter(c, "efficiency.memory.fraction").fitted == Approx(1.0));
  CHECK_THAT(parameter(c, "efficiency.memory.fraction").why, Catch::Contains("at its bound 1"));
  const model::CalibratedParameter& fp32 = parameter(c, "efficiency.gemm.fp32");
  CHECK(fp32.kept);
  CHECK_THAT(fp32.why, Catch::Contains("faster than the fp32 peak"));
  for (const model::CalibratedParameter& p : c.parameters) {
    INFO(p.name);
    if (p.unit.empty() && !p.name.ends_with("k_half")) CHECK(p.fitted <= 1.0);
    if (p.unit == "TFLOP/s") CHECK(p.fitted <= base.peak_flops_bf16 / 1e12 + 1e-9);
  }
  // Twice the datasheet's rate: 100% off at the bound 1 (more than 5%), so the base's is kept, and why said.
  for (trace::MemoryBoundSample& m : run.memory) m.seconds = m.bytes / (base.memory_bandwidth * 2);
  const model::Calibration twice = model::calibrate(run, base, {});
  const model::CalibratedParameter& memory = parameter(twice, "efficiency.memory.fraction");
  CHECK(memory.kept);
  CHECK(memory.fitted == base.efficiency.memory_fraction);
  CHECK_THAT(memory.why, Catch::Contains("faster than the base's HBM allows (median 100% off at a fraction of 1"));
  // The profile it writes loads: every efficiency in range.
  CHECK_NOTHROW(model::load_hardware_json(model::calibrated_profile(c, "mine", "run/", "2026-12-06"), "mine.json"));
}

TEST_CASE("calibrate refuses a run without GPU kernels and one with nothing to fit", "[calibrate]") {
  const model::Hardware base = model::load_hardware("h100-nvlink");
  trace::ProfiledRun cpu_only;
  cpu_only.world_size = 2;
  CHECK_THROWS_WITH(model::calibrate(cpu_only, base, {}), Catch::Contains("no GPU kernels"));
  trace::ProfiledRun bare;
  bare.world_size = 2, bare.kernels = 40, bare.skipped["an op the model has no rate for (aten::sum)"] = 40;
  CHECK_THROWS_WITH(model::calibrate(bare, base, {}),
                    Catch::Contains("nothing to fit") && Catch::Contains("record_shapes=True") && Catch::Contains("aten::sum"));
  model::CalibrateOptions o;
  o.stack = "no-such-stack";
  CHECK_THROWS_AS(model::calibrate(known_run(truth_profile()), base, o), ConfigError);
}

TEST_CASE("calibrate's profile names its run and date and keeps the rest of the base", "[calibrate]") {
  const model::Hardware base = model::load_hardware("h100-nvlink");
  const model::Calibration c = model::calibrate(known_run(truth_profile()), base, {});
  const nlohmann::json j = model::calibrated_profile(c, "my-cluster", "traces/", "2026-12-06");
  CHECK(j["name"] == "my-cluster");
  CHECK_THAT(j["source"].get<std::string>(), Catch::StartsWith("calibrated from traces/ on 2026-12-06"));
  CHECK(j["calibration"]["base"] == "h100-nvlink");
  const model::Hardware hw = model::load_hardware_json(j, "my-cluster.json");
  CHECK(hw.efficiency.gemm.bf16 == Approx(0.70).epsilon(0.02));
  CHECK(hw.efficiency.attention.at("fa2").forward.rate == base.efficiency.attention.at("fa2").forward.rate);  // not in the run: kept
  CHECK(hw.peak_flops_bf16 == base.peak_flops_bf16);
  CHECK(hw.tiers.size() == base.tiers.size());
  CHECK_THAT(hw.efficiency.gemm.source, Catch::StartsWith("calibrated from traces/"));
}

TEST_CASE("calibrate leaves out what does not measure a rate: a stray sample, waited-for NCCL kernels, tiny GEMMs", "[calibrate]") {
  const model::Hardware truth = truth_profile(), base = model::load_hardware("h100-nvlink");
  // One GEMM 100x slower than its rate (it waited): left out, counted, the fraction the truth's.
  trace::ProfiledRun run = known_run(truth);
  run.gemms[5].seconds *= 100;
  model::Calibration c = model::calibrate(run, base, {});
  CHECK(parameter(c, "efficiency.gemm.bf16").fitted == Approx(0.70).epsilon(0.002));
  CHECK_THAT(parameter(c, "efficiency.gemm.bf16").why, Catch::Contains("1 sample more than 2x off left out"));
  // Every NCCL kernel 20 ms longer (each waited for its peers): no link fitted from them.
  for (trace::CommSample& s : run.comms) s.seconds += 0.02;
  c = model::calibrate(run, base, {});
  for (const char* tier : {"tiers[0] (NVLink)", "tiers[1] (InfiniBand)"}) {
    INFO(tier);
    CHECK(parameter(c, std::string(tier) + ".latency_us").kept);
    CHECK(parameter(c, std::string(tier) + ".efficiency").kept);
  }
  CHECK_THAT(parameter(c, "tiers[0] (NVLink).latency_us").why, Catch::Contains("past 1 ms"));
  // With one message size a tier's latency stays the base's; the waits then read as a link under
  // 5% of its line rate, which is not taken either.
  std::erase_if(run.comms, [](const trace::CommSample& s) { return s.call > 0; });
  run.comms.push_back(run.comms[0]), run.comms.back().call = 1;
  run.comms.push_back(run.comms[0]), run.comms.back().call = 2;
  c = model::calibrate(run, base, {});
  CHECK(parameter(c, "tiers[0] (NVLink).efficiency").kept);
  CHECK_THAT(parameter(c, "tiers[0] (NVLink).efficiency").why, Catch::Contains("under 5% of the line rate"));
  // GEMMs all under 2 us at the peak: not samples of a rate, and said; the base's sustained share kept.
  const model::Hardware a100 = model::load_hardware("a100-nvlink");
  trace::ProfiledRun tiny = known_run(truth);
  for (trace::GemmSample& g : tiny.gemms) g.m = g.n = g.k = 16, g.seconds = 4e-6;
  tiny.sms = 108;
  c = model::calibrate(tiny, a100, {});
  CHECK(parameter(c, "efficiency.gemm.bf16").kept);
  CHECK_THAT(parameter(c, "efficiency.gemm.bf16").why, Catch::Contains("24 more too small to measure a rate"));
  CHECK(c.hw.efficiency.gemm.sustained == a100.efficiency.gemm.sustained);
  CHECK(a100.efficiency.gemm.sustained < 1);
}

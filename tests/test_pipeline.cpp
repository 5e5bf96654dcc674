// The whole step's pieces (issue 40): the pipeline simulated against the closed-form bubbles of
// Narayanan et al. 2021, ZeRO's memory against the paper's own figures, and the data-parallel
// collectives against the ring formulas.
#include <catch2/catch.hpp>

#include "spans.h"

#include <cmath>
#include <set>
#include <tuple>

#include "core/error.h"
#include "layer/presets.h"
#include "model/collectives.h"
#include "model/flops.h"
#include "model/pipeline.h"
#include "model/step.h"
#include "model/zero.h"

using namespace ringside;
using namespace ringside::model;

namespace {

PipelineSpec spec(int pp, int m, int vp, double forward_s, double backward_s, double p2p_s = 0) {
  PipelineSpec s;
  s.pp = pp, s.microbatches = m, s.vp = vp, s.forward_s = forward_s, s.backward_s = backward_s, s.p2p_s = p2p_s;
  return s;
}

// Every (microbatch, chunk) runs its forward once and its backward once on each rank, the
// forward first, and no two ops of a rank overlap.
void check_complete(const PipelineRun& run, const PipelineSpec& s) {
  REQUIRE(int(run.ranks.size()) == s.pp);
  for (int r = 0; r < s.pp; ++r) {
    INFO("rank " << r);
    std::set<std::tuple<bool, int, int>> seen;
    double free_at = 0;
    for (const PipelineOp& op : run.ranks[r]) {
      CHECK(op.start_s >= free_at);
      free_at = op.end_s;
      CHECK(seen.insert({op.forward, op.microbatch, op.chunk}).second);
      if (!op.forward) CHECK(seen.count({true, op.microbatch, op.chunk}) == 1);
    }
    CHECK(int(seen.size()) == 2 * s.microbatches * s.vp);
  }
}

}  // namespace

TEST_CASE("1F1B: the simulated bubble is (PP - 1) / m, and stage r holds min(PP - r, m) microbatches", "[pipeline]") {
  for (auto [pp, m] : {std::pair{2, 1}, {2, 8}, {4, 4}, {4, 8}, {3, 7}, {8, 16}, {16, 64}, {8, 3}}) {
    // A backward twice the forward, as the GEMMs' dX and dW make it.
    const PipelineSpec s = spec(pp, m, 1, 1.0, 2.0);
    INFO("PP " << pp << " m " << m);
    const PipelineRun run = simulate_pipeline(s);
    check_complete(run, s);
    CHECK(run.ideal_s == 3.0 * m);
    CHECK(run.step_s == Approx(3.0 * (m + pp - 1)).epsilon(1e-12));
    CHECK(run.bubble_fraction() == Approx(double(pp - 1) / m).epsilon(1e-12));
    for (int r = 0; r < pp; ++r) CHECK(run.peak_in_flight[r] == std::min(pp - r, m));
  }
}

TEST_CASE("interleaved 1F1B: the bubble shrinks to (PP - 1) / (m VP), at more microbatches in flight", "[pipeline]") {
  for (auto [pp, m, vp] : {std::tuple{2, 2, 2}, {4, 4, 2}, {4, 8, 2}, {4, 8, 4}, {8, 16, 2}, {8, 8, 3}}) {
    // A chunk of L / (PP VP) layers: 1/VP of the stage's work each.
    const PipelineSpec s = spec(pp, m, vp, 1.0 / vp, 2.0 / vp);
    INFO("PP " << pp << " m " << m << " VP " << vp);
    const PipelineRun run = simulate_pipeline(s);
    check_complete(run, s);
    CHECK(run.ideal_s == Approx(3.0 * m));
    CHECK(run.bubble_fraction() == Approx(double(pp - 1) / (double(m) * vp)).epsilon(1e-12));
    // Rank 0 warms up with 2 (PP - 1) + (VP - 1) PP forwards, then holds one more.
    CHECK(run.peak_in_flight[0] == std::min(2 * (pp - 1) + (vp - 1) * pp + 1, m * vp));
  }
}

TEST_CASE("the pipeline waits for the transfers between stages", "[pipeline]") {
  // PP 2, one microbatch: F on rank 0, send, F and B on rank 1, send back, B on rank 0.
  const PipelineRun one = simulate_pipeline(spec(2, 1, 1, 1.0, 2.0, 0.25));
  CHECK(one.step_s == Approx(2 * 1.0 + 2 * 2.0 + 2 * 0.25));
  const PipelineOp& b0 = one.ranks[0].back();
  CHECK_FALSE(b0.forward);
  CHECK(b0.start_s == Approx(1.0 + 0.25 + 1.0 + 2.0 + 0.25));
  // More stages, more hops: the transfers lengthen the step, never shorten it.
  const double without = simulate_pipeline(spec(4, 8, 2, 0.5, 1.0)).step_s;
  CHECK(simulate_pipeline(spec(4, 8, 2, 0.5, 1.0, 0.1)).step_s > without);
}

TEST_CASE("the pipeline's bad input: one clear error each", "[pipeline]") {
  CHECK_THROWS_WITH(simulate_pipeline(spec(1, 4, 2, 1, 2)), Catch::Contains("VP = 2 model chunks need PP > 1"));
  CHECK_THROWS_WITH(simulate_pipeline(spec(4, 6, 2, 1, 2)),
                    Catch::Contains("the interleaved schedule needs m divisible by PP, but m = 6 and PP = 4"));
  CHECK_THROWS_AS(simulate_pipeline(spec(0, 4, 1, 1, 2)), ConfigError);
  CHECK_THROWS_AS(simulate_pipeline(spec(2, 0, 1, 1, 2)), ConfigError);
  CHECK_THROWS_AS(simulate_pipeline(spec(2, 4, 1, -1, 2)), ConfigError);
}

TEST_CASE("ZeRO: a GPU's weights, gradients and Adam state, as the paper's Figure 1 gives them", "[pipeline][zero]") {
  // Rajbhandari et al. 2020, Figure 1: Ψ = 7.5 B parameters, N_d = 64, K = 12:
  // 120 GB, 31.4 GB, 16.6 GB and 1.9 GB for the baseline and ZeRO stages 1, 2 and 3.
  const double psi = 7.5e9;
  const double published[] = {120e9, 31.4e9, 16.6e9, 1.9e9};
  const double exact[] = {16 * psi, 4 * psi + 12 * psi / 64, 2 * psi + 14 * psi / 64, 16 * psi / 64};
  for (int stage = 0; stage <= 3; ++stage) {
    INFO("stage " << stage);
    const ZeroStateBytes b = zero_state_bytes(psi, 64, stage);
    CHECK(b.total() == Approx(exact[stage]).epsilon(1e-15));
    CHECK(b.total() == Approx(published[stage]).epsilon(0.03));  // the paper rounds to 0.1 GB
  }
  const ZeroStateBytes two = zero_state_bytes(psi, 64, 2);
  CHECK(two.weights == 2 * psi);
  CHECK(two.grads == 2 * psi / 64);
  CHECK(two.optimizer == 12 * psi / 64);
  CHECK(zero_state_bytes(psi, 1, 3).total() == zero_state_bytes(psi, 1, 0).total());  // N_d = 1 shards nothing
  CHECK_THROWS_WITH(zero_state_bytes(psi, 64, 4), "ZeRO stage 4 is not 0, 1, 2 or 3");
  CHECK_THROWS_AS(zero_state_bytes(psi, 0, 1), ConfigError);
  // fp32 training (issue 41's break test: --dtype fp32 kept bf16's weights): 4 + 4 + 8 bytes a
  // parameter, the weights their own master copy.
  const ZeroStateBytes fp32 = zero_state_bytes(psi, 64, 2, 4);
  CHECK(fp32.weights == 4 * psi);
  CHECK(fp32.grads == 4 * psi / 64);
  CHECK(fp32.optimizer == 8 * psi / 64);
  CHECK_THROWS_AS(zero_state_bytes(psi, 64, 2, 3), ConfigError);
}

using ringside::testing::strided;

TEST_CASE("collectives in closed form: the ring inside a node, hierarchical across nodes", "[pipeline][collectives]") {
  const Hardware hw = load_hardware("h100-nvlink");
  const ModelOptions o;  // the achieved rates
  const Tier& nvlink = hw.tiers.front();
  const Tier& ib = hw.tiers.back();
  const double busbw_in = nvlink.bandwidth * nvlink.efficiency, busbw_out = ib.bandwidth * ib.efficiency;
  const double S = 1 << 30;  // 1 GiB of gradients
  // Inside one node of 8: the ring formula, 2 (N - 1) / N S / busbw for an all-reduce, plus a
  // latency a step (nccl-tests' busbw definition).
  const Span node = strided(hw, 8, 1);
  REQUIRE(node.domains(0) == 1);
  CHECK(collective_seconds(Collective::all_reduce, S, node, hw, o) ==
        Approx(2.0 * 7 / 8 * S / busbw_in + 2 * 7 * nvlink.latency_s).epsilon(1e-12));
  CHECK(collective_seconds(Collective::reduce_scatter, S, node, hw, o) ==
        Approx(7.0 / 8 * S / busbw_in + 7 * nvlink.latency_s).epsilon(1e-12));
  CHECK(tier_bytes(Collective::all_reduce, S, node, 1) == 0);
  // Data parallelism outermost over 64 GPUs, TP 8 inside: one member a node, all across.
  const Span dp = strided(hw, 64, 8);
  REQUIRE((dp.most[0] == 1 && dp.domains(0) == 64));
  CHECK(collective_seconds(Collective::all_reduce, S, dp, hw, o) ==
        Approx(2.0 * 63 / 64 * S / busbw_out + 2 * 63 * ib.latency_s).epsilon(1e-12));
  // A group of 32 on 4 whole nodes: the 8-ring inside, the 4-ring across on S / 8, the 8-ring again.
  const Span wide = strided(hw, 32, 1);
  REQUIRE((wide.most[0] == 8 && wide.domains(0) == 4));
  const double inside = 7 * (nvlink.latency_s + S / 8 / busbw_in);
  const double across = 2 * 3 * (ib.latency_s + S / 8 / 4 / busbw_out);
  CHECK(collective_seconds(Collective::all_reduce, S, wide, hw, o) == Approx(2 * inside + across).epsilon(1e-12));
  CHECK(tier_bytes(Collective::all_reduce, S, wide, 1) == Approx(2.0 * 3 / 4 * S / 8));
  // TP's all-gather spanning nodes (its 8 members 8 ranks apart) is slower than inside one.
  CHECK(collective_seconds(Collective::all_gather, S, strided(hw, 8, 8), hw, o) >
        5 * collective_seconds(Collective::all_gather, S, node, hw, o));
  CHECK(collective_seconds(Collective::all_reduce, S, strided(hw, 1, 1), hw, o) == 0);
}

TEST_CASE("the step around the layer: pipeline, data parallelism, optimizer and memory", "[pipeline][step]") {
  const Hardware hw = load_hardware("h100-nvlink");
  const ModelOptions o;
  LayerCost layer;
  layer.forward_s = 1e-3, layer.backward_s = 2e-3, layer.params = 1e8, layer.saved_bytes = 1e9, layer.p2p_bytes = 64e6;
  SECTION("no pipeline, no data parallelism: m microbatches of L layers, then Adam over every parameter") {
    StepConfig c;
    c.layers = 32, c.microbatches = 4;
    const StepCost s = model_step(c, layer, {}, hw, o);
    CHECK(s.pipeline_s == Approx(4 * 32 * 3e-3));
    CHECK(s.bubble_fraction == Approx(0).margin(1e-12));
    CHECK(s.dp_s == 0);
    CHECK(s.optimizer_s == Approx(hw.efficiency.launch_s + 28 * 32e8 / (hw.memory_bandwidth * hw.efficiency.memory_fraction)));
    CHECK(s.step_s == Approx(s.pipeline_s + s.optimizer_s));
    CHECK(s.state.total() == Approx(16 * 32e8));       // 2 + 2 + 12 bytes a parameter, unsharded
    CHECK(s.activation_bytes == Approx(32 * 1e9));    // one microbatch in flight, every layer
  }
  SECTION("1F1B over 4 stages: the first stage holds PP microbatches of L / PP layers, L layers' worth") {
    StepConfig c;
    c.layers = 32, c.pp = 4, c.microbatches = 8;
    const StepCost s = model_step(c, layer, {}, hw, o);
    CHECK(s.activation_bytes == Approx(32 * 1e9));  // Korthikanti et al. 2022, 4.2.3: independent of PP
    CHECK(s.state.total() == Approx(16 * 8e8));      // its 8 layers
    // The transfers between stages lengthen the bubble past (PP - 1) / m.
    CHECK(s.bubble_fraction > 3.0 / 8);
    PipelineSpec p;
    p.pp = 4, p.microbatches = 8, p.forward_s = 8e-3, p.backward_s = 16e-3;
    p.p2p_s = transfer_seconds(64e6, hw.tiers.back(), hw, o);
    CHECK(s.pipeline_s == Approx(simulate_pipeline(p).step_s));
    c.vp = 2;  // interleaved: a smaller bubble, more in flight
    const StepCost v = model_step(c, layer, {}, hw, o);
    CHECK(v.bubble_fraction < s.bubble_fraction);
    CHECK(v.activation_bytes == Approx((2 * 3 + 4 + 1) * 4 * 1e9));  // 11 chunks of 4 layers
  }
  SECTION("data parallelism over 64 nodes: ZeRO 1 reduce-scatters the gradients and all-gathers the weights") {
    StepConfig c;
    c.layers = 32, c.microbatches = 4, c.dp = 64, c.zero = 1, c.dp_span = strided(hw, 64, 8);
    c.overlap_grad_reduce = false;
    const double bytes = 2 * 32e8;
    const double rs = collective_seconds(Collective::reduce_scatter, bytes, c.dp_span, hw, o);
    const double ag = collective_seconds(Collective::all_gather, bytes, c.dp_span, hw, o);
    const StepCost s = model_step(c, layer, {}, hw, o);
    CHECK(s.dp_s == Approx(rs + ag));
    CHECK(s.dp_exposed_s == Approx(rs + ag));
    CHECK(s.optimizer_s == Approx(hw.efficiency.launch_s + 28 * 32e8 / 64 / (hw.memory_bandwidth * hw.efficiency.memory_fraction)));
    CHECK(s.state.optimizer == Approx(12 * 32e8 / 64));
    // Overlapped with the last backward: a long one (32 layers x 10 ms) hides all but the last
    // of the 4 buckets; a short one (32 x 2 ms = 64 ms) leaves exposed what outlasts it.
    c.overlap_grad_reduce = true;
    LayerCost slow = layer;
    slow.backward_s = 10e-3;
    REQUIRE(rs > 32 * 2e-3);
    REQUIRE(rs < 32 * 10e-3);
    CHECK(model_step(c, slow, {}, hw, o).dp_exposed_s == Approx(rs / 4 + ag));
    CHECK(model_step(c, layer, {}, hw, o).dp_exposed_s == Approx(rs - 32 * 2e-3 + ag));
    // ZeRO 0 all-reduces, and gathers nothing after.
    c.zero = 0, c.overlap_grad_reduce = false;
    CHECK(model_step(c, layer, {}, hw, o).dp_s == Approx(collective_seconds(Collective::all_reduce, bytes, c.dp_span, hw, o)));
  }
  SECTION("Llama 3's rule with two stages: L + 2 = 2 VP k, both stages one layer short") {
    // 30 layers, PP 2, VP 2: chunks of 8, the first chunk of stage 0 and the last of stage 1
    // one short (7 + 8 and 8 + 7), which VP = 2 dividing the 15 layers of a stage would refuse.
    StepConfig c;
    c.layers = 30, c.pp = 2, c.vp = 2, c.microbatches = 4;
    const PipelineSpec p = pipeline_spec(c, layer, {}, hw, o);
    REQUIRE(p.stage_forward_s.size() == 4);
    CHECK(p.stage_forward_s[0] == Approx(7 * 1e-3));  // virtual stage 0: stage 0, chunk 0
    CHECK(p.stage_forward_s[1] == Approx(8 * 1e-3));
    CHECK(p.stage_forward_s[2] == Approx(8 * 1e-3));
    CHECK(p.stage_forward_s[3] == Approx(7 * 1e-3));  // stage 1, chunk 1
    c.vp = 7;  // divides neither 15 nor 16
    CHECK_THROWS_WITH(model_step(c, layer, {}, hw, o), Catch::Contains("VP = 7 must divide the 15 layers of a full stage"));
  }
  SECTION("fp32 weights: the gradient collectives move 4 bytes a parameter") {
    StepConfig c;
    c.layers = 32, c.microbatches = 4, c.dp = 64, c.zero = 0, c.dp_span = strided(hw, 64, 8), c.overlap_grad_reduce = false;
    c.weight_bytes = 4;
    const StepCost s = model_step(c, layer, {}, hw, o);
    CHECK(s.grad_bytes == 4 * 32e8);
    CHECK(s.dp_s == Approx(collective_seconds(Collective::all_reduce, 4 * 32e8, c.dp_span, hw, o)));
    CHECK(s.state.total() == Approx(16 * 32e8));  // 4 + 4 + 8
  }
  StepConfig bad;
  bad.layers = 29, bad.pp = 4;
  CHECK_THROWS_WITH(model_step(bad, layer, {}, hw, o),
                    "PP = 4 must divide the L = 29 layers, or leave at most the first and last stage one layer short (Llama 3's "
                    "rule); 29 layers on 4 stages would leave 3 short");
  bad.layers = 32, bad.vp = 3;
  CHECK_THROWS_WITH(model_step(bad, layer, {}, hw, o), Catch::Contains("VP = 3 must divide the 8 layers of a full stage"));
}

TEST_CASE("model FLOPs: Megatron's count for GPT, the 6N rule plus attention for Llama, both conventions", "[pipeline][flops]") {
  // GPT-3 175B at s = 2048: 72 L h^2 (1 + s / 6h + V / 12 L h) a token (Narayanan et al. 2021,
  // eq. 3, over B s tokens), attention whole.
  const ModelPreset& gpt = find_preset("gpt3-175b");
  LayerConfig g;
  apply_preset(gpt, g);
  g.s = 2048;
  const double L = gpt.layers, h = double(g.h), s = double(g.s), V = double(gpt.vocab);
  CHECK(model_flops_per_token(g, gpt.layers, gpt.vocab, false) ==
        Approx(72 * L * h * h * (1 + s / (6 * h) + V / (12 * L * h))).epsilon(1e-12));
  CHECK(model_flops_per_token(g, gpt.layers, gpt.vocab, true) ==
        Approx(72 * L * h * h * (1 + s / (12 * h) + V / (12 * L * h))).epsilon(1e-12));
  // Llama 3 8B at 8K: 6 N over its matrices (the layers' and the LM head's, Kaplan et al. 2020)
  // plus attention's 12 L s h, or 6 L s h halved. N from the layer's own parameter count.
  const ModelPreset& llama = find_preset("llama3-8b");
  LayerConfig c;
  apply_preset(llama, c);
  c.s = 8192;
  const double matrices = double(c.param_count() - 2 * c.norm_params());  // no biases
  const double N = llama.layers * matrices + double(c.h) * llama.vocab;
  const double attention = 12.0 * llama.layers * c.s * c.h;
  CHECK(model_flops_per_token(c, llama.layers, llama.vocab, false) == Approx(6 * N + attention).epsilon(1e-12));
  CHECK(model_flops_per_token(c, llama.layers, llama.vocab, true) == Approx(6 * N + attention / 2).epsilon(1e-12));
  // Without a mask there is nothing to halve.
  c.causal = false;
  CHECK(model_flops_per_token(c, llama.layers, llama.vocab, true) == model_flops_per_token(c, llama.layers, llama.vocab, false));
  // MFU: 400 tokens/s a GPU of 1e12 FLOPs each on a 989 TFLOP/s H100 is 40%.
  CHECK(mfu(400, 1e12, 989e12) == Approx(400e12 / 989e12));
}

TEST_CASE("pipeline_times runs simulate_pipeline's ops from a compiled program: its step and ideal time bit for bit", "[pipeline]") {
  // 1F1B and interleaved, equal and uneven stages (the ends, a short first and last stage), with
  // and without transfers: the planner's fast path and the plain list scheduling agree exactly.
  for (auto [pp, m, vp] : {std::tuple{1, 1, 1}, {1, 9, 1}, {2, 1, 1}, {4, 8, 1}, {3, 7, 1}, {4, 8, 2}, {4, 12, 3}, {8, 16, 4}, {16, 48, 2}}) {
    for (double p2p : {0.0, 0.013}) {
      PipelineSpec s = spec(pp, m, vp, 0.1, 0.2, p2p);
      for (int v = 0; v < pp * vp; ++v) {
        s.stage_forward_s.push_back(0.1 + 0.01 * (v % 3) + (v == 0 ? 0.05 : 0.0));
        s.stage_backward_s.push_back(0.2 + 0.007 * (v % 5) + (v + 1 == pp * vp ? 0.3 : 0.0));
      }
      INFO("PP " << pp << ", m " << m << ", VP " << vp << ", p2p " << p2p);
      const PipelineRun run = simulate_pipeline(s);
      const PipelineTimes fast = pipeline_times(s);
      CHECK(fast.step_s == run.step_s);
      CHECK(fast.ideal_s == run.ideal_s);
      CHECK(fast.bubble_fraction() == run.bubble_fraction());
      CHECK(*pipeline_in_flight(s) == run.peak_in_flight);
    }
  }
  CHECK_THROWS_WITH(pipeline_times(spec(4, 6, 2, 1, 2)), Catch::Contains("needs m divisible by PP"));
}

TEST_CASE("PipelineMemo: a pipeline simulated once, the same spec answered from the memo, and another transfer time is another pipeline", "[pipeline]") {
  PipelineMemo memo;
  const PipelineSpec s = spec(4, 8, 2, 0.5, 1.0, 0.1);
  const PipelineTimes first = memo.times(s), again = memo.times(s);
  CHECK(first.step_s == again.step_s);
  CHECK(first.step_s == simulate_pipeline(s).step_s);
  CHECK(memo.simulated == 1);
  CHECK(memo.reused == 1);
  CHECK(memo.ops == 2.0 * 4 * 2 * 8);
  memo.times(spec(4, 8, 2, 0.5, 1.0, 0.2));
  CHECK(memo.simulated == 2);
  memo.clear();
  memo.times(s);
  CHECK(memo.simulated == 3);  // forgotten, simulated again; the counts stay
  CHECK_THROWS_WITH(memo.times(spec(4, 8, 2, std::nan(""), 1.0)), Catch::Contains("must be >= 0"));
  // ZeRO 0, 1 and 2 run one pipeline: the step's model simulates it once for all three.
  const Hardware hw = load_hardware("h100-nvlink");
  StepConfig c;
  c.layers = 8, c.pp = 4, c.vp = 2, c.microbatches = 8, c.dp = 2, c.dp_span = strided(hw, 2, 1);
  LayerCost layer;
  layer.forward_s = 1e-3, layer.backward_s = 2e-3, layer.params = 1e6, layer.p2p_bytes = 1e6;
  PipelineMemo zeros;
  double step0 = 0;
  for (int zero = 0; zero <= 2; ++zero) {
    c.zero = zero;
    const StepCost memoized = model_step(c, layer, {}, hw, ModelOptions{}, &zeros), plain = model_step(c, layer, {}, hw, ModelOptions{});
    CHECK(memoized.step_s == plain.step_s);
    CHECK(memoized.pp_exposed_s == plain.pp_exposed_s);
    if (zero == 0) step0 = memoized.pipeline_s;
    CHECK(memoized.pipeline_s == step0);
  }
  CHECK(zeros.simulated == 2);  // the pipeline and the one with free links (pp_exposed_s)
  CHECK(zeros.reused == 4);
}

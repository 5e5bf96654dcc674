// Issue 61, the smaller items: the bytes `model` says a rank sends, by class, against the closed
// forms; the bubble's excess over (PP-1)/(m VP), by cause, against hand-worked pipelines; and
// the MFU footnote's whole count, said only as true of the rows.
#include <catch2/catch.hpp>

#include <numeric>

#include "model/bubble.h"
#include "model/bytes_sent.h"
#include "model/flops.h"
#include "parallel/formulas.h"
#include "parallel/run_plan.h"
#include "spans.h"

using namespace ringside;
using namespace ringside::model;

namespace {

LayerConfig layer(int64_t s, bool causal = true) {
  LayerConfig c;
  c.b = 1, c.s = s, c.h = 256, c.H = 8, c.Hkv = 4, c.f = 512, c.causal = causal;
  return c;
}

RunPlan plan(const std::string& name, const LayerConfig& c, int P, Layout layout = Layout::contiguous,
             Recompute rc = Recompute::none) {
  ParallelConfig par = parse_parallel_config(name);
  par.layout = layout, par.recompute = rc;
  return resolve(par, c, P);
}

const SentClass& find(const std::vector<SentClass>& classes, const std::string& what) {
  for (const SentClass& s : classes)
    if (s.what == what) return s;
  FAIL("no class " << what);
  return classes.front();
}

}  // namespace

TEST_CASE("model's bytes by class are the closed forms, and add up to parallel_comm_bytes on every rank", "[sent]") {
  const int64_t s = 4096, d = 32, Hkv = 4, h = 256;
  SECTION("the contiguous K/V ring: 2 (C-1) (s/C) Hkv d bytes forward, 2 (2C-1) (s/C) Hkv d backward, per rank") {
    for (int C : {2, 4, 8}) {
      INFO("C = " << C);
      const std::vector<SentClass> sent = layer_bytes_sent(plan("ring", layer(s, false), C), "bf16");
      REQUIRE(h == layer(s).h);
      const SentClass& ring = find(sent, "CP ring (p2p)");
      CHECK(ring.forward == 2.0 * (C - 1) * (s / C) * Hkv * d * 2);
      CHECK(ring.backward == 2.0 * (2 * C - 1) * (s / C) * Hkv * d * 2);
      CHECK(ring.all == C * (ring.forward + ring.backward));  // every rank the same
      // The weight gradients' all-reduce over C: 2 (C-1)/C of the layer's parameters.
      const double params = double(parallel_param_count(plan("ring", layer(s, false), C)));
      const SentClass& grads = find(sent, detail::concat("gradient all-reduce over CP ", C));
      CHECK(grads.forward == 0);
      CHECK(grads.backward == Approx(2.0 * (C - 1) / C * params * 2).epsilon(1e-5));
      CHECK(find(sent, "all classes").most == ring.most + grads.most);
    }
  }
  SECTION("TP + SP: all-gathers of (T-1)/T N h forward twice and backward four times, reduce-scatters twice each way") {
    for (int T : {2, 4}) {
      INFO("T = " << T);
      const std::vector<SentClass> sent = layer_bytes_sent(plan("tp-sp", layer(s), T), "fp32");
      const double N = s;  // tokens of the sequence: TP keeps them all, N h / T each
      CHECK(find(sent, "TP all-gather").forward == 2 * (T - 1) * (N / T) * h * 4);
      CHECK(find(sent, "TP all-gather").backward == 4 * (T - 1) * (N / T) * h * 4);
      CHECK(find(sent, "TP reduce-scatter").forward == 2 * (T - 1) * (N / T) * h * 4);
      CHECK(find(sent, "TP reduce-scatter").backward == 2 * (T - 1) * (N / T) * h * 4);
    }
  }
  SECTION("every class of every scheme sums to parallel_comm_bytes, full recomputation included") {
    for (const char* name : {"ring", "ulysses", "all-gather", "tp2xring2", "ulysses2xring2", "tp", "tp-sp"})
      for (Recompute rc : {Recompute::none, Recompute::full}) {
        INFO(name << " recompute " << to_string(rc));
        const RunPlan p = plan(name, layer(512), 4, Layout::zigzag, rc);
        double most = 0, all = 0;
        for (int r = 0; r < 4; ++r) {
          const CommBytes total = parallel_comm_bytes(p, r, DType::f32);
          CommBytes sum;
          for (const ClassBytes& k : parallel_comm_bytes_by_class(p, r, DType::f32))
            sum.forward += k.bytes.forward, sum.backward += k.bytes.backward;
          CHECK(sum.forward == total.forward);
          CHECK(sum.backward == total.backward);
          most = std::max(most, double(total.forward + total.backward)), all += double(total.forward + total.backward);
        }
        const std::vector<SentClass> sent = layer_bytes_sent(p, "fp32");
        CHECK(find(sent, "all classes").most == most);
        CHECK(find(sent, "all classes").all == all);
      }
  }
  SECTION("full recomputation sends the forward's TP and CP bytes again, not the gradients'") {
    const std::vector<SentClass> none = layer_bytes_sent(plan("tp2xring2", layer(512), 4), "bf16");
    const std::vector<SentClass> full = layer_bytes_sent(plan("tp2xring2", layer(512), 4, Layout::contiguous, Recompute::full), "bf16");
    for (const char* k : {"TP all-gather", "TP reduce-scatter", "CP ring (p2p)"})
      CHECK(find(full, k).backward == find(none, k).backward + find(none, k).forward);
    CHECK(find(full, "gradient all-reduce over CP 2").backward == find(none, "gradient all-reduce over CP 2").backward);
  }
  SECTION("one rank sends nothing: no classes") { CHECK(layer_bytes_sent(plan("ring", layer(512), 1), "bf16").empty()); }
}

TEST_CASE("a step's bytes by class: the pipeline's sends and the gradient collectives over DP x CP", "[sent]") {
  const RunPlan p = plan("ring", layer(1024), 2);
  const std::vector<SentClass> one = layer_bytes_sent(p, "bf16");
  ModeledStep step;
  step.config.layers = 8, step.config.pp = 4, step.config.vp = 2, step.config.microbatches = 8, step.config.dp = 6;
  step.config.zero = 1;
  step.layer.p2p_bytes = 1e6;
  step.row.cost.grad_bytes = 6e8, step.row.cost.gathered_bytes = 3e8;
  const std::vector<SentClass> sent = step_bytes_sent(step, p, "bf16");
  // A middle stage sends each of its 2 chunks' activations on and their gradients back: 2 VP m.
  CHECK(find(sent, "PP send/recv").most == 2 * 2 * 8 * 1e6);
  CHECK(find(sent, "gradient reduce-scatter over DP x CP 6 (ZeRO 1)").most == Approx(5.0 / 6 * 6e8));
  CHECK(find(sent, "weight all-gather over DP x CP 6 (ZeRO 1)").most == Approx(5.0 / 6 * 3e8));
  // The layers: m microbatches through the stage's L / PP = 2 layers, the layer's ring bytes each.
  CHECK(find(sent, "CP ring (p2p) (its layers)").most == 8 * 2 * find(one, "CP ring (p2p)").most);
  // PP = 2: each stage is an end, one send short a chunk; ZeRO 0 all-reduces, 2 (n-1)/n.
  step.config.pp = 2, step.config.zero = 0;
  const std::vector<SentClass> two = step_bytes_sent(step, p, "bf16");
  CHECK(find(two, "PP send/recv").most == (2 * 2 - 1) * 8 * 1e6);
  CHECK(find(two, "gradient all-reduce over DP x CP 6").most == Approx(2 * 5.0 / 6 * 6e8));
}

TEST_CASE("the bubble's excess over (PP-1)/(m VP), by cause, from the pipeline simulated without each", "[bubble]") {
  Hardware hw = load_hardware("h100-nvlink");
  for (Tier& t : hw.tiers) t.latency_s = 0;  // a transfer of 0 bytes takes no time
  const ModelOptions o;
  LayerCost layer;
  layer.forward_s = 1e-3, layer.backward_s = 2e-3;
  StepConfig c;
  c.layers = 12, c.pp = 3, c.vp = 2, c.microbatches = 6;
  SECTION("equal stages, free transfers: the formula's, exactly, and nothing more") {
    const BubbleParts b = bubble_parts(c, layer, {}, hw, o);
    CHECK(b.formula == 2.0 / 12);
    CHECK(b.bubble == Approx(2.0 / 12).epsilon(1e-12));
    CHECK(b.uneven_layers == Approx(0).margin(1e-12));
    CHECK(b.ends == 0);
    CHECK(b.transfers == 0);
    CHECK(bubble_words(b) == "bubble 16.7%: the formula (PP-1)/(m VP) = 2/(6 x 2) = 16.7%, equal stages with the transfers hidden");
  }
  SECTION("the LM head on the last stage: PP 2, m 1 by hand, the busiest stage's work the ideal") {
    // Stage 0: F 1 ms, B 2 ms; stage 1 with the head: F 1.5 ms, B 2.5 ms. One microbatch runs
    // F0, F1, B1, B0: 7 ms, the ideal stage 1's 4 ms, the bubble 3/4 against the formula's 1/1.
    StepConfig two;
    two.layers = 2, two.pp = 2, two.microbatches = 1;
    EndsCost ends;
    ends.head_forward_s = 0.5e-3, ends.head_backward_s = 0.5e-3;
    const BubbleParts b = bubble_parts(two, layer, ends, hw, o);
    CHECK(b.formula == 1);
    CHECK(b.bubble == Approx(0.75));
    CHECK(b.ends == Approx(-0.25));
    CHECK(b.uneven_layers == Approx(0).margin(1e-12));
    CHECK(b.transfers == 0);
    CHECK(bubble_words(b).find("-25.0% from the LM head and loss on the last stage (1.00 ms a microbatch") != std::string::npos);
  }
  SECTION("the head and the transfers, interleaved: the parts add up to the simulated bubble") {
    EndsCost ends;
    ends.head_forward_s = 2e-3, ends.head_backward_s = 4e-3, ends.embedding_forward_s = 1e-4, ends.embedding_backward_s = 1e-4;
    layer.p2p_bytes = 64e6;  // 142 us a transfer on NVLink at 450 GB/s
    c.pp_tier = 0;
    const BubbleParts b = bubble_parts(c, layer, ends, hw, o);
    CHECK(b.formula + b.uneven_layers + b.ends + b.transfers == Approx(b.bubble).epsilon(1e-12));
    CHECK(b.bubble == Approx(model_step(c, layer, ends, hw, o).bubble_fraction));
    CHECK(b.transfers > 0.001);
    CHECK(std::abs(b.ends) > 0.001);
  }
  SECTION("the first and last stages one layer short (Llama 3's rule): that part named") {
    StepConfig shorter;
    shorter.layers = 14, shorter.pp = 4, shorter.microbatches = 8;  // 3, 4, 4, 3 layers
    const BubbleParts b = bubble_parts(shorter, layer, {}, hw, o);
    CHECK(b.short_stages == 2);
    CHECK(std::abs(b.uneven_layers) > 0.001);
    CHECK(b.bubble == Approx(b.formula + b.uneven_layers).epsilon(1e-12));
    CHECK(bubble_words(b).find("from the first and last stages one layer short (L = 14 on PP 4)") != std::string::npos);
  }
  SECTION("PP = 1: no pipeline") {
    StepConfig flat;
    flat.layers = 4;
    CHECK(bubble_words(bubble_parts(flat, layer, {}, hw, o)) == "no pipeline (PP = 1), no bubble");
  }
}

TEST_CASE("the MFU footnote's whole count is said only as true of the rows", "[mfu]") {
  const LayerConfig short_seq = layer(4096), long_seq = layer(1 << 20);
  const double ratio_short = model_flops_per_token(short_seq, 32, 32000, false) / model_flops_per_token(short_seq, 32, 32000, true);
  const double ratio_long = model_flops_per_token(long_seq, 32, 32000, false) / model_flops_per_token(long_seq, 32, 32000, true);
  REQUIRE(ratio_short > 1);
  REQUIRE(ratio_long > 1.9);  // attention nearly all the work: whole is about twice causal
  SECTION("no row passes 100% counted whole: no sentence says one does") {
    const std::string note = whole_count_note(short_seq, 32, 32000, {0.40, 0.45});
    CHECK(note.find("over 100%") == std::string::npos);
    CHECK(note.find("no row passes 100% either way") != std::string::npos);
    char best[32];
    std::snprintf(best, sizeof best, "the best would read %.1f%%", 100 * 0.45 * ratio_short);
    CHECK(note.find(best) != std::string::npos);
  }
  SECTION("rows that do pass it: counted, with the highest") {
    const std::string note = whole_count_note(long_seq, 32, 32000, {0.60, 0.45, 0.55});
    INFO(note);
    char want[128];
    std::snprintf(want, sizeof want, "2 of the 3 rows would read over 100%% (up to %.1f%%)", 100 * 0.60 * ratio_long);
    CHECK(0.45 * ratio_long < 1);  // so exactly two pass
    CHECK(note.find(want) != std::string::npos);
  }
  SECTION("no mask, or no rows: nothing to say") {
    CHECK(whole_count_note(layer(4096, false), 32, 32000, {0.5}).empty());
    CHECK(whole_count_note(short_seq, 32, 32000, {}).empty());
  }
}

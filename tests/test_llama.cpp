// The layer the field trains (issue 39): RMSNorm, SwiGLU and no biases, in every configuration
// against the fp64 reference, its saved and sent bytes and FLOPs against the formulas, Megatron's
// TP split of gate and up, and what selective recomputation makes again.
#include <catch2/catch.hpp>

#include <map>
#include <string>

#include "check/check.h"
#include "layer/presets.h"
#include "layer/tokenwise.h"
#include "model/model.h"
#include "parallel/formulas.h"
#include "parallel/run_plan.h"
#include "configurations.h"
#include "reference64.h"
#include "run/runner.h"

using namespace ringside;

namespace {

// Llama's layer on small shapes: 8 heads over 4 kv heads, so TP 4 splits both.
LayerConfig llama_layer() {
  LayerConfig c;
  c.b = 2, c.s = 32, c.h = 64, c.H = 8, c.Hkv = 4, c.f = 48, c.seed = 13;
  c.norm = Norm::rmsnorm, c.mlp = Mlp::swiglu, c.bias = false;
  return c;
}

// FLOPs of a schedule's compute ops in `phase` (and `sublayer`, when given), over all ranks.
double flops_of(const trace::TraceData& t, const std::string& phase, const std::string& sublayer = "") {
  double sum = 0;
  for (const trace::RankTrace& r : t.ranks)
    for (const trace::Event& e : r.events)
      if (e.stream == trace::Stream::compute && e.phase == phase && (sublayer.empty() || e.sublayer == sublayer))
        sum += e.flops;
  return sum;
}

}  // namespace

TEST_CASE("the Llama layer: every configuration, layout and recompute mode against fp64, with its formulas", "[llama]") {
  struct Variant {
    const char* name;
    bool causal;
    std::vector<int64_t> docs;
    int64_t window;
    Recompute recompute;
  };
  const Variant variants[] = {
      {"causal, no recompute", true, {}, 0, Recompute::none},
      {"full attention, selective", false, {}, 0, Recompute::selective},
      {"documents 3, 20, 9 and a window 5, full", true, {3, 20, 9}, 5, Recompute::full},
      {"causal, selective", true, {}, 0, Recompute::selective},
  };
  int runs = 0;
  std::map<std::string, int> names;
  for (const Variant& v : variants) {
    LayerConfig c = llama_layer();
    c.causal = v.causal, c.docs = v.docs, c.window = v.window;
    const ReferenceRun ref = reference64(c);
    for (const ParallelConfig& config : testing::configurations({{2, 2}, {1, 4}, {4, 1}, {2, 4}}))
      for (Layout layout : kLayouts) {
        const bool has_layout = config.scheme().token_layout;
        if (!has_layout && layout != Layout::contiguous) continue;
        ParallelConfig par = config;
        par.layout = layout, par.recompute = v.recompute;
        const int P = par.tp * par.cp;
        REQUIRE_FALSE(testing::refusal(par, c, P));  // these shapes split every way
        const RunPlan plan = resolve(par, c, P);
        INFO(v.name << ": " << par.name() << " (" << to_string(par.cp_comm) << ") P=" << P << " " << to_string(layout));
        MemoryTracker tracker;
        const auto res = testing::run_and_check(plan, ref, tracker);
        CHECK(res[0].grads.named().size() == 6u);  // no biases, no beta: 4 matrices and 2 gammas
        ++runs, ++names[par.name()];
      }
  }
  // 16 configurations: the 11 with a ring (K/V or pass-Q) or an all-gather in 5 layouts, the
  // other 5 (plain TP among them) in one.
  CHECK(names.size() == 16u);
  CHECK(runs == 4 * (11 * 5 + 5));
}

TEST_CASE("the Llama layer's parameters: 3 h f in the MLP, gate and up split by Megatron's columns", "[llama]") {
  const LayerConfig c = llama_layer();
  const LayerWeights w = init_weights(c, DType::f32, {});
  std::vector<std::string> names;
  for (auto& [name, t] : w.named()) names.push_back(name);
  CHECK(names == std::vector<std::string>{"ln1.gamma", "qkv.weight", "o.weight", "ln2.gamma", "fc1.weight", "fc2.weight"});
  CHECK(w.fc1_weight.shape() == Shape{c.h, 2 * c.f});  // [gate | up]
  CHECK(w.fc1_weight.numel() + w.fc2_weight.numel() == 3 * c.h * c.f);
  CHECK(c.param_count() == c.h * c.qkv_width() + c.h * c.h + 3 * c.h * c.f + 2 * c.h);
  // The parameters the two layers share hold the same values (one Philox site per slot).
  LayerConfig gpt = c;
  gpt.norm = Norm::layernorm, gpt.mlp = Mlp::gelu, gpt.bias = true;
  const LayerWeights g = init_weights(gpt, DType::f32, {});
  CHECK(relative_error(w.qkv_weight, g.qkv_weight) == 0);
  CHECK(relative_error(w.fc2_weight, g.fc2_weight) == 0);
  // TP rank t holds its f/T of the gate's columns and of the up's: [gate_t | up_t].
  const int T = 4;
  const int64_t fl = c.f / T;
  for (int t = 0; t < T; ++t) {
    const LayerWeights shard = tp_shard_weights(c, T, t, DType::f32, {});
    REQUIRE(shard.fc1_weight.shape() == Shape{c.h, 2 * fl});
    CHECK_FALSE(shard.qkv_bias.defined());
    for (int64_t row = 0; row < c.h; ++row)
      for (int64_t j = 0; j < fl; ++j) {
        const float* mine = shard.fc1_weight.data<float>() + row * 2 * fl;
        const float* whole = w.fc1_weight.data<float>() + row * 2 * c.f;
        REQUIRE(mine[j] == whole[t * fl + j]);               // gate
        REQUIRE(mine[fl + j] == whole[c.f + t * fl + j]);    // up
      }
  }
  // The sequence-parallel gradients TP all-reduces: the two gammas alone (GPT: 6 h).
  CHECK(sequence_parallel_param_count(c) == 2 * c.h);
  CHECK(sequence_parallel_param_count(gpt) == 6 * c.h);
}

TEST_CASE("FLOPs: SwiGLU's MLP forward is 6 N h f against GeLU's 4 N h f, on the trace and in the formula", "[llama]") {
  for (Mlp mlp : {Mlp::gelu, Mlp::swiglu})
    for (const char* strategy : {"tp-sp", "ring", "ulysses"}) {
      LayerConfig c = llama_layer();
      c.mlp = mlp, c.s = 256, c.h = 128, c.f = 320;
      INFO(to_string(mlp) << " " << strategy);
      MemoryTracker tracker;
      const trace::TraceData t = model::dry_run(resolve(parse_parallel_config(strategy), c, 4), tracker);
      const double N = double(c.tokens()), per_token = mlp == Mlp::swiglu ? 6 : 4;
      CHECK(flops_of(t, "forward", "mlp") == per_token * N * c.h * c.f);
      CHECK(flops_of(t, "forward") == Approx(layer_forward_flops(c)).epsilon(1e-12));
      // The backward's GEMMs are twice the forward's (dX and dW), attention 2.5 times.
      CHECK(flops_of(t, "backward", "mlp") == 2 * per_token * N * c.h * c.f);
    }
}

TEST_CASE("selective recomputation makes RMSNorm and the SwiGLU product again, bit for bit the results of none", "[llama][recompute]") {
  const LayerConfig c = llama_layer();
  for (const char* strategy : {"tp-sp", "ring"}) {
    MemoryTracker real;  // outlives the records
    std::map<Recompute, std::vector<RunRecord>> runs;
    std::map<Recompute, trace::TraceData> traces;
    for (Recompute rc : {Recompute::none, Recompute::selective}) {
      ParallelConfig par = parse_parallel_config(strategy);
      par.recompute = rc;
      MemoryTracker tracker;
      traces[rc] = model::dry_run(resolve(par, c, 4), tracker);
      runs[rc] = run_local_ranks(resolve(par, c, 4), DType::f32, real);
    }
    INFO(strategy);
    std::map<std::string, int> again;
    for (const trace::RankTrace& r : traces[Recompute::selective].ranks)
      for (const trace::Event& e : r.events)
        if (e.phase == "recompute" && trace::is_work(e.kind)) ++again[e.name];
    CHECK(again == std::map<std::string, int>{{"rmsnorm_forward", 8}, {"swiglu_forward", 4}});  // two norms, one product, 4 ranks
    const auto none = runs[Recompute::none][0].grads.named(), selective = runs[Recompute::selective][0].grads.named();
    REQUIRE(none.size() == selective.size());
    for (size_t i = 0; i < none.size(); ++i) {
      INFO(none[i].first);
      CHECK(relative_error(*none[i].second, *selective[i].second) == 0);
    }
    CHECK(relative_error(runs[Recompute::none][0].out, runs[Recompute::selective][0].out) == 0);
    CHECK(relative_error(runs[Recompute::none][0].dx, runs[Recompute::selective][0].dx) == 0);
  }
}

TEST_CASE("SwiGLU under TP: f must split over T, named in the error", "[llama][config]") {
  LayerConfig c = llama_layer();
  c.f = 50;  // 50 / 4 is not whole
  CHECK_THROWS_WITH(resolve(ParallelConfig{4, 1, &no_cp_scheme()}, c, 4), Catch::Contains("ffn width f = 50 must be divisible by T = 4 (each TP rank holds f/T columns of SwiGLU's gate and of its up)"));
}

TEST_CASE("Ulysses' all-to-all buffers are communication memory: a narrow MLP's saved bytes equal the formula", "[llama][ulysses]") {
  // With f small the end of the forward no longer outweighs the all-to-all's send and receive
  // buffers, which were tagged as activations: measured 16.25 KiB against a formula of 14.50 KiB
  // (ulysses, P 4, f 2, selective) until they were tagged comm.
  for (Mlp mlp : {Mlp::gelu, Mlp::swiglu}) {
    LayerConfig c = llama_layer();
    c.mlp = mlp, c.f = 4, c.Hkv = 8;
    const ReferenceRun ref = reference64(c);
    for (const ParallelConfig& config : testing::configurations({{1, 4}, {2, 2}}))
      for (Recompute recompute : {Recompute::none, Recompute::selective}) {
        if (config.a2a_size() == 1) continue;
        ParallelConfig par = config;
        par.recompute = recompute;
        INFO(to_string(mlp) << " " << par.name() << " " << to_string(recompute));
        MemoryTracker tracker;
        const auto res = testing::run_and_check(resolve(par, c, par.tp * par.cp), ref, tracker);
        CHECK(res[0].peak_comm_forward >= 2 * c.b * (c.s / 4) * (c.H / par.tp) * c.d() * 4);  // q's send and receive
      }
  }
}

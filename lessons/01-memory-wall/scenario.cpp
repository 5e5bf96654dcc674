// Lesson 1: the activation memory wall. What one layer keeps for its backward grows with the
// sequence; tensor parallelism alone cannot split all of it; splitting the sequence can.
#include "lessons/lesson.h"
#include "parallel/formulas.h"
#include "layer/presets.h"
#include "layer/reference.h"
#include "layer/weights.h"

namespace ringside::lessons {

namespace {

// Korthikanti et al. 2022, "Reducing Activation Recomputation in Large Transformer Models",
// section 4: activation bytes per layer in 16-bit with the s x s softmax stored (a heads).
double korthikanti_none(double s, double b, double h, double a) { return s * b * h * (34 + 5 * a * s / h); }
double korthikanti_tp(double s, double b, double h, double a, double t) {
  return s * b * h * (10 + 24 / t + 5 * a * s / (h * t));
}
double korthikanti_tp_sp(double s, double b, double h, double a, double t) {
  return s * b * h / t * (34 + 5 * a * s / h);
}

// The layer's saved bytes at three sequence lengths, measured against the formula (recorded as
// PREFIXsaved_sN and PREFIXformula_sN).
void saved_table(Script& L, const LayerConfig& cfg, const char* prefix) {
  Table t({"s", "saved (measured)", "formula 4 " + saved_activation_formula(cfg), "bytes per token"});
  for (int64_t s : {128, 256, 512}) {
    LayerConfig c = cfg;
    c.s = s;
    const ReferenceRun ref = run_reference(c, DType::f32);
    const int64_t formula = saved_activation_bytes(c, DType::f32);
    L.record(fmt("%ssaved_s%lld", prefix, (long long)s), double(ref.peak_saved));
    L.record(fmt("%sformula_s%lld", prefix, (long long)s), double(formula));
    t.row({std::to_string(s), grouped(ref.peak_saved), grouped(formula), grouped(ref.peak_saved / c.tokens())});
  }
  L.table(t);
}

}  // namespace

void memory_wall(Script& L) {
  // A small layer that runs in well under a second here; d = 16.
  LayerConfig cfg;
  cfg.b = 1, cfg.s = 512, cfg.h = 128, cfg.H = 8, cfg.Hkv = 4, cfg.f = 512;

  // ---- 1. what one layer keeps, measured ------------------------------------------------
  L.step("What one layer keeps for its backward");
  L.say("The backward of a layer needs tensors from its forward: the LayerNorm inputs and");
  L.say("statistics, q, k, v, the attention output and its lse, the MLP's u = h2 W1 + b1 and");
  L.say("GeLU(u), and the residual sums. ringside counts every allocation, so this is measured:");
  L.say("the reference layer (b=1 h=%lld H=%lld Hkv=%lld f=%lld, fp32) at three sequence lengths.", (long long)cfg.h,
        (long long)cfg.H, (long long)cfg.Hkv, (long long)cfg.f);
  L.blank();
  saved_table(L, cfg, "");
  L.blank();
  L.say("Twice the tokens, twice the bytes: every saved tensor is [tokens, something]. Attention");
  L.say("here is blockwise (FlashAttention), so it keeps lse [H, s] instead of the s x s softmax.");
  L.say("That is the GPT layer (LayerNorm, GeLU, biases), the one Korthikanti et al. count. The");
  L.say("layer Llama, Qwen and Mistral train has RMSNorm (no mean: one statistic a token) and a");
  L.say("SwiGLU MLP, down(SiLU(gate(x)) * up(x)): its backward reads gate and up and the product,");
  L.say("3f a token where GeLU keeps 2f. The same shapes, --norm rmsnorm --mlp swiglu --no-bias:");
  L.blank();
  LayerConfig llama = cfg;
  llama.norm = Norm::rmsnorm, llama.mlp = Mlp::swiglu, llama.bias = false;
  saved_table(L, llama, "llama_");

  // ---- 2. the same in the paper's terms -----------------------------------------------------
  // GPT-3 175B, the paper's own example: a = 96 heads, h = 12288, b = 1.
  const double h = 12288, a = 96, b = 1;
  L.step("Korthikanti's formula: s b h (34 + 5 a s / h)");
  L.say("Korthikanti et al. 2022 count the bytes a 16-bit layer keeps: 34 s b h for the tensors");
  L.say("above (plus dropout masks), and 5 a s^2 b for the softmax scores and their dropout when");
  L.say("attention stores the s x s matrix. For GPT-3 175B (a=96, h=12288, b=1), per layer:");
  L.blank();
  Table t2({"s", "34 s b h", "5 a s^2 b", "per layer", "96 layers"});
  for (double s : {2048.0, 8192.0, 32768.0, 131072.0}) {
    const double linear = 34 * s * b * h, quad = 5 * a * s * s * b, total = korthikanti_none(s, b, h, a);
    L.record(fmt("korthikanti_none_s%.0f", s), total);
    t2.row({fmt("%.0f", s), format_bytes(linear), format_bytes(quad), format_bytes(total), format_bytes(96 * total)});
  }
  L.table(t2);
  L.blank();
  L.say("The s^2 term wins from s = 34 h / (5 a) = %.0f tokens on. FlashAttention removes it", L.record("s2_crossover_tokens", 34 * h / (5 * a)));
  L.say("(it recomputes the scores from lse), which leaves 34 s b h: linear, but at s = 1M a single");
  const double wall = L.record("gpt3_s1m_layer_bytes", 34 * 1048576 * b * h);
  L.say("GPT-3 layer still keeps %s (%s bytes), and an H100 has 80 GB.", format_bytes(wall).c_str(), grouped(int64_t(wall)).c_str());

  // ---- 3. tensor parallelism alone -----------------------------------------------------------
  L.step("Why tensor parallelism alone leaves 10 s b h per rank");
  L.say("Tensor parallelism (Megatron) splits attention by heads and the MLP by f over t ranks:");
  L.say("24 s b h of the 34 divide by t. The other 10 s b h do not: the two LayerNorms' inputs");
  L.say("(4 s b h), the inputs of the QKV and first MLP GEMMs (4 s b h) and the two dropout masks");
  L.say("(2 s b h) are whole on every rank. Per rank, GPT-3 175B at s = 2048:");
  L.blank();
  Table t3({"t", "TP: s b h (10 + 24/t + 5as/(ht))", "TP+SP: (s b h / t)(34 + 5as/h)"});
  for (double t : {1.0, 2.0, 4.0, 8.0}) {
    const double tp = korthikanti_tp(2048, b, h, a, t), sp = korthikanti_tp_sp(2048, b, h, a, t);
    t3.row({fmt("%.0f", t), grouped(int64_t(tp)), grouped(int64_t(sp))});
  }
  L.table(t3);
  const double tp8 = L.record("tp_t8_bytes", korthikanti_tp(2048, b, h, a, 8));
  const double sp8 = L.record("tp_sp_t8_bytes", korthikanti_tp_sp(2048, b, h, a, 8));
  const double floor = L.record("tp_floor_bytes", 10 * 2048 * b * h);
  L.blank();
  L.say("At t = 8: TP %s bytes, TP+SP %s bytes, the paper's numbers.", grouped(int64_t(tp8)).c_str(),
        grouped(int64_t(sp8)).c_str());
  L.say("However large t gets, TP alone never goes below 10 s b h = %s bytes per rank.", grouped(int64_t(floor)).c_str());
  L.say("Sequence parallelism splits those 10 s b h by sequence too (lesson 2); context");
  L.say("parallelism splits everything (lesson 3).");

  // ---- 4. measured: split the sequence -------------------------------------------------------
  L.step("Measured: splitting the sequence divides the saved bytes by P");
  L.say("The ring (context parallelism) gives each rank s/P tokens of everything. The same layer,");
  L.say("s = %lld, on P = 1, 2 and 4 local ranks; the largest rank's saved activations and its", (long long)cfg.s);
  L.say("peak memory (weights, gradients, activations, workspace, buffers):");
  L.blank();
  Table t4({"P", "saved per rank", "reference / P", "peak per rank", "weights + grads"});
  const int64_t ref_saved = saved_activation_bytes(cfg, DType::f32);
  for (int P : {1, 2, 4}) {
    const RunPlan ring = plan_of("ring", cfg, P);
    const std::vector<RunRecord> rr = L.run(ring, fmt("P=%d", P));
    int64_t saved = 0, peak = 0;
    for (const RunRecord& r : rr) saved = std::max(saved, r.peak_saved), peak = std::max(peak, r.peak_bytes);
    int64_t params = 0;
    for (auto& [name, shape] : weight_shapes(cfg)) params += numel(shape);
    L.record(fmt("ring_saved_p%d", P), double(saved));
    L.record(fmt("ring_saved_formula_p%d", P), double(parallel_saved_bytes(ring, 0, DType::f32)));
    t4.row({std::to_string(P), grouped(saved), grouped(ref_saved / P), format_bytes(double(peak)), format_bytes(8.0 * double(params))});
  }
  L.table(t4);
  L.blank();
  L.say("Saved activations fall exactly as 1/P. The weights and their gradients do not: every ring");
  L.say("rank holds all of them (ZeRO or FSDP would shard them; that is another lesson). In the");
  L.say("viewer the memory lanes of the three runs share one scale: each halving is visible.");
  L.steps.back().focus = L.phase("P=4");

  // ---- 5. the wall -------------------------------------------------------------------------
  L.step("The wall, and the three ways through it");
  const double per_token = double(saved_activation_bytes(cfg, DType::f32)) / double(cfg.tokens());
  L.say("This layer keeps %.0f bytes per token (fp32). At 1M tokens one layer would keep %s;", per_token,
        format_bytes(per_token * 1048576).c_str());
  // Two published layers at 1M tokens, on this layer's count (lse, no dropout masks), in 16-bit.
  auto own_count = [&](const char* preset, const char* key) {
    LayerConfig c;
    apply_preset(find_preset(preset), c);
    c.s = 1048576;
    return L.record(key, double(saved_activation_bytes(c, DType::f32)) / 2);
  };
  const double gpt3_wall = own_count("gpt3-175b", "gpt3_s1m_own_bytes");
  const double llama_wall = own_count("llama3-8b", "llama3_8b_s1m_layer_bytes");
  L.say("in 16-bit, counted this way (no dropout masks), GPT-3's layer keeps %s", format_bytes(gpt3_wall).c_str());
  L.say("(Korthikanti's %s counts its masks too), and Llama 3 8B's layer", format_bytes(wall).c_str());
  L.say("(RMSNorm, SwiGLU) keeps %s.", format_bytes(llama_wall).c_str());
  L.say("No GPU holds that, so the tokens themselves must be split:");
  L.say("  lesson 2  Megatron SP: TP plus the 10 s b h split by sequence (P must divide Hkv)");
  L.say("  lesson 3  ring attention: every tensor split by sequence, K/V passed around a ring");
  L.say("  lesson 5  Ulysses: split by sequence, and by heads inside attention (P must divide H)");
  L.say("The trace of this lesson holds the P = 1, 2, 4 runs: compare their memory lanes.");
  L.steps.front().focus = L.phase("P=1");  // step 1 is about one device's layer

  // ---- check yourself ------------------------------------------------------------------------
  LayerConfig twice = cfg;
  twice.s = 2 * cfg.s;
  const double saved_1024 = double(saved_activation_bytes(twice, DType::f32));
  const double floor_8k = 10 * 8192 * b * h;
  L.check_yourself({
      {fmt("Step 1's layer keeps %s bytes at s = %lld. What does it keep at s = %lld?", grouped(ref_saved).c_str(),
           (long long)cfg.s, (long long)twice.s),
       saved_1024, grouped(int64_t(saved_1024)) + " bytes",
       "every saved tensor is [tokens, something], so twice the tokens keep twice the bytes"},
      {"GPT-3 175B at s = 8192 under TP alone: how many bytes per rank can no TP degree remove?", floor_8k,
       grouped(int64_t(floor_8k)) + " bytes", "10 s b h = 10 x 8192 x 1 x 12288, whole on every TP rank"},
      {fmt("The ring over P = 8 ranks on step 1's layer (s = %lld): saved activations per rank?", (long long)cfg.s),
       double(ref_saved) / 8, grouped(ref_saved / 8) + " bytes",
       "every tensor is split by sequence, so the reference's bytes / P"},
  });
}

}  // namespace ringside::lessons

// Lesson 6: choosing. The three strategies on one run, side by side (memory, volume, overlap),
// and where each belongs: which limits it has and which links it needs.
#include <cmath>

#include "layer/reference.h"
#include "lessons/lesson.h"
#include "layer/presets.h"
#include "model/plan.h"
#include "trace/metrics.h"

namespace ringside::lessons {

void choosing(Script& L) {
  LayerConfig cfg;
  cfg.b = 1, cfg.s = 2048, cfg.h = 128, cfg.H = 8, cfg.Hkv = 4, cfg.f = 512;
  const int P = 4;
  const char* names[] = {"tp-sp", "ring", "ulysses"};
  std::vector<RunPlan> plans;
  std::vector<std::vector<RunRecord>> runs;
  for (const char* n : names) plans.push_back(plan_of(n, cfg, P)), runs.push_back(L.run(plans.back(), n));
  const ReferenceRun ref64 = run_reference(cfg, DType::f64), ref32 = run_reference(cfg, DType::f32);

  // ---- 1. one answer ------------------------------------------------------------------------------
  L.step("Three strategies, one answer");
  L.say("The same layer on P = %d ranks, three ways:", P);
  L.say_config(cfg);
  L.say("Each result (out, dx and all 12 parameter gradients) against the fp64 reference; the");
  L.say("worst relative error of each, beside the single-device fp32 reference's own:");
  L.blank();
  const double e32 = L.record("error_reference_f32", worst_error(ref32.out, ref32.dx, ref32.grads, ref64));
  Table t1({"run", "worst error vs fp64", "ratio to the fp32 reference"});
  t1.row({"reference fp32", fmt("%.2e", e32), "1.0"});
  for (size_t i = 0; i < runs.size(); ++i) {
    const RunRecord& r = runs[i][0];
    const double e = L.record(fmt("error_%s", names[i]), worst_error(r.out, r.dx, r.grads, ref64));
    t1.row({names[i], fmt("%.2e", e), fmt("%.2f", e / e32)});
  }
  L.table(t1);
  L.blank();
  L.say("All three are as accurate as one device: the splits change the order of fp32 sums, not");
  L.say("the math. (Dropout masks match bit for bit: Philox keyed by global token and feature.)");

  // ---- 2. memory ----------------------------------------------------------------------------------
  L.step("Memory per rank", L.phase("tp-sp"));
  L.say("Per rank, measured by the memory tracker: saved activations, and the peak of everything");
  L.say("(weights, gradients, activations, workspace, communication buffers):");
  L.blank();
  Table t2({"run", "saved activations", "peak memory", "weights held"});
  int64_t params = 0;
  for (auto& [name, shape] : weight_shapes(cfg)) params += numel(shape);
  for (size_t i = 0; i < runs.size(); ++i) {
    int64_t saved = 0, peak = 0;
    for (const RunRecord& r : runs[i]) saved = std::max(saved, r.peak_saved), peak = std::max(peak, r.peak_bytes);
    L.record(fmt("saved_%s", names[i]), double(saved));
    L.record(fmt("peak_%s", names[i]), double(peak));
    t2.row({names[i], grouped(saved), format_bytes(double(peak)), i == 0 ? "1/P of them" : "all of them"});
  }
  L.table(t2);
  L.blank();
  L.say("Saved activations: TP+SP and the ring keep exactly 1/P of the reference's %s bytes;",
        grouped(int64_t(L.record("reference_saved_bytes", double(saved_activation_bytes(cfg, DType::f32))))).c_str());
  L.say("Ulysses a little more, as it keeps the attention output in both layouts. Only TP+SP also");
  L.say("splits the weights, which is why it is used with the others in practice (Megatron: TP");
  L.say("inside a node, CP across). In this small layer (h = %lld) the weights are a small part of the", (long long)cfg.h);
  L.say("peak, and TP+SP's all-gathered [b, s, h] buffers make its peak the highest.");

  // ---- 3. volume ----------------------------------------------------------------------------------
  L.step("Bytes on the wire", L.phase("ring"));
  L.say("Bytes sent per rank, measured (each equals its strategy's formula):");
  L.blank();
  Table t3({"run", "forward", "formula", "backward", "formula"});
  for (size_t i = 0; i < runs.size(); ++i) {
    const CommBytes f = parallel_comm_bytes(plans[i], 0, DType::f32);
    const RunRecord& r = runs[i][0];
    L.record(fmt("forward_bytes_%s", names[i]), double(r.forward.bytes_sent));
    L.record(fmt("forward_formula_%s", names[i]), double(f.forward));
    L.record(fmt("backward_bytes_%s", names[i]), double(r.backward.bytes_sent));
    L.record(fmt("backward_formula_%s", names[i]), double(f.backward));
    t3.row({names[i], grouped(r.forward.bytes_sent), grouped(f.forward), grouped(r.backward.bytes_sent), grouped(f.backward)});
  }
  L.table(t3);
  L.blank();
  L.say("Ring and Ulysses replicate the weights, so their backward all-reduces every weight gradient");
  L.say("(data-parallel style: each rank saw s/P tokens); TP+SP's ranks own disjoint shards and need");
  L.say("not. The ring's backward also sends K/V again and the dK/dV that travel home.");

  // ---- 4. time on GPUs -------------------------------------------------------------------------------
  // The strategies' own code, dry-run at a GPU-sized layer and modeled on one node (NVLink) and
  // across nodes (InfiniBand). Toy layers on a GPU are all latency; this one is not.
  LayerConfig big;
  apply_preset(find_preset("llama3-8b"), big);  // its shape and its layer: RMSNorm, SwiGLU, no biases
  big.b = 1, big.s = 131072;
  const int P8 = 8;
  const model::Hardware nvlink = model::load_hardware("h100-nvlink"), ib = model::load_hardware("h100-ib");
  const char* modeled_names[] = {"tp-sp", "ring", "ulysses", "all-gather", "tp2xring4", "ulysses2xring4"};
  for (const char* n : modeled_names)
    for (const model::Hardware* hw : {&nvlink, &ib}) L.dry_run(plan_of(n, big, P8), std::string(n) + " 128K", hw);
  L.step("Time on GPUs: one node, or across nodes", L.phase(L.modeled_name("ring 128K", &ib)));
  L.say("Times of toy layers on GPUs are all latency, so this step dry-runs each strategy's own");
  L.say("code (no math, only its schedule) on P = %d GPUs for Llama 3 8B's layer (--preset llama3-8b),", P8);
  L.say_config(big, ",");
  L.say("and models it in bf16 on H100s: once inside one node (%s: NVLink, %.0f GB/s), once", nvlink.name.c_str(),
        nvlink.tiers.front().bandwidth / 1e9);
  L.say("with every GPU in its own node (%s: InfiniBand, %.0f GB/s). Forward + backward:", ib.name.c_str(),
        ib.tiers.back().bandwidth / 1e9);
  L.blank();
  Table t4({"strategy", "NVLink: layer", "exposed", "hidden", "IB: layer", "exposed", "hidden"});
  std::string fastest[2];
  double best[2] = {1e300, 1e300};
  for (const char* n : modeled_names) {
    std::vector<std::string> row{n};
    int k = 0;
    for (const model::Hardware* hw : {&nvlink, &ib}) {
      const trace::StrategyMetrics& m = L.modeled_metrics.at(L.modeled_name(std::string(n) + " 128K", hw));
      const double layer = double(layer_ns(m)), exposed = double(m.total.exposed_comm_ns) / P8;
      const double hidden = attention_hidden_pct(m);
      const std::string key = fmt("%s_%s", hw == &nvlink ? "nvlink" : "ib", n);
      L.record("layer_ns_" + key, layer);
      L.record("exposed_ns_" + key, exposed);
      if (layer < best[k]) best[k] = layer, fastest[k] = n;
      row.push_back(format_ns(layer)), row.push_back(format_ns(exposed));
      row.push_back(std::isnan(hidden) ? "-" : fmt("%.0f%%", hidden));
      ++k;
    }
    t4.row(row);
  }
  L.table(t4);
  L.trust(model::run_kind(false, false, parse_parallel_config("ring"), "bf16"));
  L.blank();
  L.say("exposed: per GPU, communication nothing hides, all of it (the weight-gradient all-reduce");
  L.say("of ring and Ulysses too); hidden: the share of attention's own traffic under compute.");
  L.say("Fastest: %s inside the node, %s across nodes. TP+SP and Ulysses wait for each", fastest[0].c_str(),
        fastest[1].c_str());
  L.say("collective (the next op needs its result); the ring posts the next block's transfer before");
  const double ring_ib_hidden = attention_hidden_pct(L.modeled_metrics.at(L.modeled_name("ring 128K", &ib)));
  L.say("computing on the current one, so at %lld tokens a GPU its K/V traffic %s across",
        (long long)(big.s / P8), ring_ib_hidden >= 90 ? "hides even" : "is only partly hidden");
  L.say("InfiniBand. (Times modeled, so the same on every run; the viewer shows each timeline.)");

  // ---- 5. where each sits -----------------------------------------------------------------------------
  L.step("Where each sits");
  // Liu et al. 2023: the ring hides its transfer when a block has c >= F/B tokens (bf16, MHA).
  struct Link {
    const char* name;
    double flops, bandwidth;
  };
  const Link links[] = {{"A100, NVLink 3 (312 TFLOP/s, 300 GB/s)", 312e12, 300e9},
                        {"H100 SXM, NVLink 4 (989 TFLOP/s, 450 GB/s)", 989e12, 450e9},
                        {"H100, InfiniBand NDR (989 TFLOP/s, 50 GB/s)", 989e12, 50e9}};
  L.say("The ring's transfer hides when each block has c >= F/B tokens (lesson 3, bf16, MHA):");
  L.blank();
  Table t5({"GPU and link", "c >= F/B tokens per GPU"});
  const char* keys[] = {"threshold_a100_nvlink", "threshold_h100_nvlink", "threshold_h100_ib"};
  for (size_t i = 0; i < 3; ++i)
    t5.row({links[i].name, fmt("%.0f", L.record(keys[i], links[i].flops / links[i].bandwidth))});
  L.table(t5);
  L.blank();
  // Step 4's layer is GQA: its K/V carry Hkv heads, not H, so its threshold is (Hkv/H) F/B.
  const double gqa = double(big.Hkv) / double(big.H);
  L.say("Those are for MHA. With GQA a block's K/V carry Hkv heads, not H, and c* shrinks by");
  const double ib_gqa = L.record("threshold_h100_ib_gqa", gqa * double(L.numbers["threshold_h100_ib"]));
  L.say("Hkv/H: Llama 3 8B's %lld/%lld brings InfiniBand's %s to (Hkv/H) F/B = %s tokens, which",
        (long long)big.Hkv, (long long)big.H, grouped(int64_t(std::llround(double(L.numbers["threshold_h100_ib"])))).c_str(),
        grouped(int64_t(std::llround(ib_gqa))).c_str());
  const double ib_causal = L.record("threshold_h100_ib_gqa_causal", 2 * ib_gqa);
  L.say("a causal mask doubles: a balanced (zigzag) step computes half its c x c pairs but moves");
  L.say("all c tokens' K/V, so c >= 2 (Hkv/H) F/B = %s tokens. That is why step 4's %s tokens",
        grouped(std::llround(ib_causal)).c_str(), grouped(big.s / P8).c_str());
  L.say("a GPU %s across InfiniBand.", double(big.s / P8) >= ib_causal ? "can hide their K/V" : "still cannot hide their K/V");
  // The same threshold at the rates the kernels and NCCL reach (the chapter quotes it beside the planner).
  L.record("threshold_h100_ib_gqa_causal_achieved", model::ring_threshold(ib, {}, ib.tiers.back(), gqa, true).tokens);
  L.blank();
  L.say("So, for long sequences:");
  L.say("  TP+SP    splits weights too, but every collective is exposed, and P must divide H,");
  L.say("           Hkv and f (here P <= %lld):", (long long)cfg.Hkv);
  L.say("           inside a node, on NVLink, at P = 2 to 8.");
  L.say("  Ulysses  fewest bytes at large P (4Nh/P per link), all-to-all needs full bisection");
  L.say("           bandwidth, P must divide H (here P <= %lld), K/V replicated past Hkv: inside", (long long)cfg.H);
  L.say("           a node.");
  L.say("  ring     no head limit, P up to s/2 (zigzag); hides its transfer when c >= F/B (MHA;");
  L.say("           GQA and a causal mask scale it as above): a few thousand tokens per GPU");
  L.say("           inside NVLink, ~20K per GPU across InfiniBand for MHA, ~10K for Llama 3 8B.");
  L.say("Real long-context training combines them: TP (or Ulysses) inside a node, the ring (CP)");
  L.say("across nodes, as Megatron's CP and USP (Fang and Zhao 2024) do.");
  L.blank();
  L.say("See it at scale with the what-if model, a dry run of the same code on modeled hardware:");
  L.say("  ringside model --seq 1048576 --ranks 64 --strategy ring --hw h100-nvlink \\");
  L.say("      --trace out/1m.json");
  L.say("  ringside model --seq 1048576 --ranks 64 --strategy ring --hw h100-ib");
  L.record("max_ranks_tp_sp", double(cfg.Hkv));
  L.record("max_ranks_ulysses", double(cfg.H));

  // ---- 6. ask the planner -------------------------------------------------------------------------------
  // The same 8B-sized layer on 8 H100s in two nodes of 4: every split dry-run and modeled.
  L.step("Ask the planner");
  model::Hardware two_nodes = nvlink;
  two_nodes.name = "h100-nvlink, 4 per node", two_nodes.tiers.front().gpus = 4;
  model::PlanOptions po;
  po.gpus = P8, po.modes = {Recompute::none};
  const model::Plan plan = model::make_plan(big, po, {two_nodes}).front();
  L.say("Steps 4 and 5 compare strategies one by one. `ringside plan` asks the whole question: it");
  L.say("enumerates every split of P GPUs (TP and each kind of CP, their hybrids, both rank orders,");
  L.say("each layout), rejects what cannot split the layer or does not fit, dry-runs and models the");
  L.say("rest, and ranks them. The layer of step 4 on %d H100s in two nodes of %d (NVLink inside,", P8,
        two_nodes.domain_gpus());
  L.say("InfiniBand across), one layer, no recompute; the five fastest of %zu:", plan.ranked());
  L.blank();
  Table t6({"#", "candidate", "layer", "exposed", "across nodes/GPU"});
  for (size_t i = 0; i < 5 && i < plan.ranked(); ++i) {
    const model::PlanRow& r = plan.rows[i];
    L.record(fmt("plan_layer_ns_%zu", i + 1), r.step_s * 1e9);
    t6.row({fmt("%zu", i + 1), r.candidate.name(), format_ns(r.step_s * 1e9), format_ns(r.exposed_s * 1e9),
            format_bytes(r.beyond_domain_bytes())});
  }
  L.table(t6);
  L.blank();
  const model::PlanRow& win = plan.rows.front();
  const bool tp_inside = win.candidate.par.tp > 1 && win.candidate.par.order == RankOrder::tp_cp;
  L.say("The winner, %s, puts %s inside each node and the ring across:", win.candidate.name().c_str(),
        tp_inside ? "TP" : "the all-to-all");
  L.say("step 5's advice, now as a ranking. Its reason, from the formulas the lessons teach:");
  for (size_t at = 0; at < win.reason.size();) {  // one clause a line
    const size_t end = std::min(win.reason.find("; ", at), win.reason.size());
    L.say("  %s", win.reason.substr(at, end - at).c_str());
    at = end + 2;
  }
  auto place_of = [&](const std::string& name) {
    for (size_t i = 0; i < plan.ranked(); ++i)
      if (plan.rows[i].candidate.name() == name) return double(i + 1);
    return 0.0;
  };
  // The ring alone in its best layout (zigzag and striped balance the same work).
  const double ring_place =
      L.record("plan_place_ring", std::min(place_of("ring striped none"), place_of("ring zigzag none")));
  const double ulysses_place = L.record("plan_place_ulysses", place_of("ulysses none"));
  L.say("A single strategy over all %d GPUs ranks lower: the ring alone is #%.0f (it sends more", P8, ring_place);
  L.say("across InfiniBand), Ulysses alone #%.0f (its all-to-alls wait across it). Which of", ulysses_place);
  L.say("the two is faster on one layer depends on c against F/B and on the heads, so ask the planner");
  L.say("for your model rather than a rule of thumb:");
  L.say("  ringside plan --preset llama3-70b --seq 1048576 --gpus 64 --hw h100-nvlink");
  L.say("This step's table again: a copy of src/model/hardware/h100-nvlink.json with");
  L.say("\"gpus_per_node\": 4, then `ringside plan --preset llama3-8b --seq %lld --gpus %d --hw",
        (long long)big.s, P8);
  L.say("that.json --layers 1 --recompute none`.");
  L.record("plan_ranked", double(plan.ranked()));

  // ---- check yourself ------------------------------------------------------------------------
  const int P2 = 2;
  const double tp2_bytes = double(parallel_comm_bytes(plan_of("tp-sp", cfg, P2), 0, DType::f32).forward);
  const double tp_over_ring = double(L.numbers["forward_bytes_tp-sp"]) / double(L.numbers["forward_bytes_ring"]);
  const double ib_over = double(L.numbers["layer_ns_ib_tp-sp"]) / double(L.numbers["layer_ns_ib_ring"]);
  L.check_yourself({
      {fmt("Step 1's layer under TP+SP on P = %d ranks: how many bytes does a rank send in the forward?", P2),
       tp2_bytes, grouped(int64_t(tp2_bytes)) + " bytes",
       fmt("2 all-gathers + 2 reduce-scatters of N h: 4 N h (P-1)/P x 4 = 4 x %lld x %lld x %d/%d x 4",
           (long long)cfg.s, (long long)cfg.h, P2 - 1, P2)},
      {"On this layer, how many times the ring's forward bytes does TP+SP send, at any P?", tp_over_ring,
       fmt("%.0f times", tp_over_ring),
       fmt("4 N h (P-1)/P over 2 (Hkv/H) N h (P-1)/P = 2 H / Hkv = 2 x %lld / %lld: TP+SP moves the "
           "activations, the ring only K and V",
           (long long)cfg.H, (long long)cfg.Hkv)},
      {fmt("Llama 3 8B's layer on %d H100s, each in its own node (InfiniBand): from which sequence length "
           "on can the ring hide its K/V?",
           P8),
       P8 * ib_causal, grouped(std::llround(P8 * ib_causal)) + " tokens",
       fmt("P 2 (Hkv/H) F/B = %d x %s tokens a GPU (causal)", P8, grouped(std::llround(ib_causal)).c_str())},
      {"Across InfiniBand (step 4), how many times the ring's layer time does TP+SP's take?", ib_over,
       fmt("%.2f times", ib_over),
       fmt("%s / %s, step 4's IB column: TP+SP's collectives are all exposed, the ring's K/V hide",
           format_ns(double(L.numbers["layer_ns_ib_tp-sp"])).c_str(), format_ns(double(L.numbers["layer_ns_ib_ring"])).c_str())},
  });
}

}  // namespace ringside::lessons

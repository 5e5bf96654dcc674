// Lesson 7: combining. Real long-context training never uses one strategy alone: TP x CP
// (Megatron) and Ulysses x ring (USP) on one run, the traffic of each group, and where each
// group should sit, NVLink or InfiniBand, shown with the what-if model. Then the pass-Q ring
// (--cp-comm p2p-q) beside the K/V ring on one layer, MHA and GQA: the bytes of the run against
// both formulas, its exposed last hop (modeled), and where passing Q wins (prefill, by formula).
#include <algorithm>
#include <cmath>
#include <map>

#include "layer/reference.h"
#include "lessons/lesson.h"
#include "layer/presets.h"
#include "model/model.h"
#include "parallel/formulas.h"
#include "parallel/ring_attention.h"
#include "parallel/ring_q_attention.h"
#include "trace/metrics.h"

namespace ringside::lessons {

namespace {

// The two rings steps 5 and 6 run side by side: their configuration names, and which passes Q.
struct RingRun {
  const char* name;
  bool passes_q;
};
constexpr RingRun kRings[] = {{"ring", false}, {"ring-q", true}};

// Bytes rank `rank` sent in `phase` to peers in its own group of `par` (same c: TP; same t: CP;
// for a2a+p2p, same r: the all-to-all; same u: the ring), from its trace.
std::map<std::string, int64_t> bytes_by_group(const trace::TraceData& t, const std::string& label,
                                              const ParallelConfig& par, int rank, const std::string& phase) {
  std::map<std::string, int64_t> by;
  const GroupCoords me = coords_of(par, rank);
  for (const trace::RankTrace& r : t.ranks) {
    if (r.strategy != label || r.rank != rank) continue;
    for (const trace::Event& e : r.events) {
      if (e.stream != trace::Stream::comm || e.direction != trace::Direction::send || e.phase != phase) continue;
      const GroupCoords peer = coords_of(par, e.peer);
      std::string group = peer.c == me.c ? "TP" : peer.t == me.t ? "CP" : "?";
      if (par.scheme().nested() && group == "CP") group = peer.r == me.r ? "all-to-all" : "ring";
      by[group] += e.bytes;
    }
  }
  return by;
}

// The modeled layer (the slowest rank's forward + backward) and the bytes all ranks send inside
// their node and across nodes, from a dry run of `name` on P ranks of `hw`.
struct Placement {
  double layer_ms = 0;
  int64_t across_bytes = 0, inside_bytes = 0;
};
Placement model_placement(const std::string& name, const LayerConfig& cfg, int P, const model::Hardware& hw) {
  MemoryTracker tracker;
  const trace::TraceData schedule = model::dry_run(plan_of(name, cfg, P), tracker);
  Placement p;
  const model::Topology topology = hw.topology(P);
  for (const trace::RankTrace& r : schedule.ranks)
    for (const trace::Event& e : r.events)
      if (e.stream == trace::Stream::comm && e.direction == trace::Direction::send)
        (topology.link(r.rank, e.peer) == 0 ? p.inside_bytes : p.across_bytes) += e.bytes;
  for (const trace::StrategyMetrics& m : trace::compute_metrics(model::model_trace(schedule, hw)))
    for (const trace::RankMetrics& r : m.ranks) p.layer_ms = std::max(p.layer_ms, r.time.window_ns / 1e6);
  return p;
}

// Bytes rank `rank` of `label` sent point to point in `phase`, from its trace: a ring's hops,
// without the gradient all-reduce every CP configuration ends its backward with (lesson 10).
int64_t p2p_sent(const trace::TraceData& t, const std::string& label, int rank, const std::string& phase) {
  int64_t sent = 0;
  for (const trace::RankTrace& r : t.ranks)
    if (r.strategy == label && r.rank == rank)
      for (const trace::Event& e : r.events)
        if (e.kind == trace::Kind::p2p && e.direction == trace::Direction::send && e.phase == phase) sent += e.bytes;
  return sent;
}

}  // namespace

void combining(Script& L) {
  LayerConfig cfg;
  cfg.b = 1, cfg.s = 512, cfg.h = 128, cfg.H = 8, cfg.Hkv = 4, cfg.f = 512;
  const int P = 4;
  const std::vector<std::string> names = {"tp2xring2", "ulysses2xring2"};
  std::vector<RunPlan> plans;
  std::vector<std::vector<RunRecord>> runs;
  for (const std::string& n : names) plans.push_back(plan_of(n, cfg, P)), runs.push_back(L.run(plans.back(), n));
  const ReferenceRun ref = run_reference(cfg, DType::f64);
  auto worst = [&](const RunRecord& r) { return worst_error(r.out, r.dx, r.grads, ref); };

  // ---- 1. TP x CP ------------------------------------------------------------------------------
  const RunPlan& tpcp_plan = plans[0];
  const ParallelConfig& tpcp = tpcp_plan.par;
  L.step("TP x CP: two groups, one layer", L.phase("tp2xring2"));
  L.say("P = %d ranks as T = 2 (Megatron TP with SP) x C = 2 (the ring), on this layer:", P);
  L.say_config(cfg);
  L.say("Ranks are numbered TP innermost (Megatron's tp-cp order): the TP rank changes fastest, so");
  L.say("neighbouring ranks, which share a node, share a TP group. Ranks 0 and 1 are a TP group and");
  L.say("share a CP shard of the sequence; ranks 0 and 2 are a ring. Each rank holds half the heads");
  L.say("of its CP shard, and between the TP blocks half of the shard's tokens:");
  L.blank();
  Table t1({"rank", "t, c", "TP group", "ring", "CP shard (zigzag over 2)", "tokens between TP blocks", "q heads"});
  for (int r = 0; r < P; ++r) {
    const GroupCoords g = coords_of(tpcp, r);
    t1.row({std::to_string(r), fmt("%d, %d", g.t, g.c), fmt("%d %d", world_rank_of(tpcp, 0, g.c), world_rank_of(tpcp, 1, g.c)),
            fmt("%d %d", world_rank_of(tpcp, g.t, 0), world_rank_of(tpcp, g.t, 1)), token_runs(tpcp_plan.cp_positions(g.c)),
            token_runs(tpcp_plan.rank_positions(r)), fmt("%d-%d", g.t * 4, g.t * 4 + 3)});
  }
  L.table(t1);
  L.blank();
  L.say("Inside a TP group the all-gather and reduce-scatter of lesson 2 run on the shard's 256");
  L.say("tokens; across the ring the K/V of this rank's 4 heads travel as in lesson 3. Worst error");
  L.say("against the fp64 reference, out, dx and every gradient: %.2e (below %s: correct).",
        L.record("error_tp2xring2", worst(runs[0][0])), kToleranceText);

  // ---- 2. per-group traffic --------------------------------------------------------------------
  L.step("Who talks to whom", L.phase("tp2xring2", "forward"));
  L.say("Bytes rank 0 sent in the forward, by group (from the trace), and the formulas:");
  L.blank();
  const std::map<std::string, int64_t> g0 = bytes_by_group(L.trace, "tp2xring2", tpcp, 0, "forward");
  const int64_t Nh = cfg.b * (cfg.s / 2) * cfg.h;             // the CP shard's activations, elements
  const int64_t kv = cfg.b * (cfg.s / 2) * (cfg.Hkv / 2) * cfg.d();  // one K block of this rank's heads
  Table t2({"group", "measured", "formula", "what"});
  t2.row({"TP", grouped(int64_t(L.record("tp_forward_bytes", double(g0.count("TP") ? g0.at("TP") : 0)))),
          grouped(int64_t(L.record("tp_forward_formula", double(4 * (Nh / 2) * 4)))),
          "2 all-gathers + 2 reduce-scatters of N_c h (T-1)/T"});
  t2.row({"CP (ring)", grouped(int64_t(L.record("cp_forward_bytes", double(g0.count("CP") ? g0.at("CP") : 0)))),
          grouped(int64_t(L.record("cp_forward_formula", double(2 * kv * 4 * (2 - 1))))), "K and V, R-1 hops"});
  L.table(t2);
  L.blank();
  L.say("TP moves the activations, %.0fx the ring's K/V here. Its collectives are on the critical",
        double(4 * (Nh / 2)) / double(2 * kv));
  L.say("path (the next GEMM waits for them), while the ring's transfers can hide behind attention");
  L.say("where each block has c >= F/B tokens (lesson 3; times on this CPU are the threads', not a");
  L.say("GPU's). The chatty group belongs on the fast link.");

  // ---- 3. Ulysses x ring ----------------------------------------------------------------------
  const RunPlan& usp_plan = plans[1];
  const ParallelConfig& usp = usp_plan.par;
  L.step("Ulysses x ring: reorder by both degrees", L.phase("ulysses2xring2"));
  L.say("USP (Fang and Zhao 2024): an all-to-all over U = 2 ranks gives each the whole ring shard for");
  L.say("half the heads, then the ring over R = 2 shards runs on those heads. For the ring to be");
  L.say("balanced, what the all-to-all gathers must be a zigzag shard over the R rings, in order. So");
  L.say("the input is reordered by both degrees: rank (u, r) holds the u-th half of ring shard r.");
  L.blank();
  Table t3({"rank", "u, r", "tokens held", "after the all-to-all", "q heads", "attention MFLOP"});
  std::vector<double> work;
  for (int r = 0; r < P; ++r) {
    const GroupCoords g = coords_of(usp, r);
    const double f = runs[1][size_t(r)].attention_flops;
    work.push_back(f);
    t3.row({std::to_string(r), fmt("%d, %d", g.u, g.r), token_runs(usp_plan.rank_positions(r)),
            token_runs(layout_positions(Layout::zigzag, cfg.s, 2, g.r)), fmt("%d-%d", g.u * 4, g.u * 4 + 3),
            fmt("%.2f", f / 1e6)});
  }
  L.table(t3);
  L.blank();
  // The input split in order, not reordered (long-context-attention issue 53).
  const RunPlan in_order = plan_of("ulysses2xring2", cfg, P, Layout::contiguous);
  std::vector<double> in_order_work;
  for (int r = 0; r < P; ++r) in_order_work.push_back(parallel_attention_flops(in_order, r));
  L.say("Attention FLOPs per rank: imbalance (max / mean) %.3f. Split the input in order instead",
        L.record("usp_work_imbalance", trace::max_over_mean(work)));
  L.say("(rank c holding the c-th quarter; long-context-attention's issue 53) and the all-to-all");
  L.say("gathers contiguous halves: imbalance %.3f. Worst error against fp64: %.2e.",
        L.record("usp_in_order_imbalance", trace::max_over_mean(in_order_work)), L.record("error_ulysses2xring2", worst(runs[1][0])));
  const std::map<std::string, int64_t> u0 = bytes_by_group(L.trace, "ulysses2xring2", usp, 0, "forward");
  L.say("Rank 0's forward bytes: %s in the all-to-all group (q, k, v, out),",
        grouped(int64_t(L.record("usp_a2a_forward_bytes", double(u0.count("all-to-all") ? u0.at("all-to-all") : 0)))).c_str());
  L.say("%s around the ring.",
        grouped(int64_t(L.record("usp_ring_forward_bytes", double(u0.count("ring") ? u0.at("ring") : 0)))).c_str());

  // ---- 4. placement ----------------------------------------------------------------------------
  L.step("Where each group should sit");
  const model::Hardware hw = model::load_hardware("h100-nvlink");
  LayerConfig big;
  apply_preset(find_preset("llama3-8b"), big);  // its shape and its layer: RMSNorm, SwiGLU, no biases
  big.s = 65536;
  const int Q = 16;
  // Placement needs nodes of several GPUs: this step stays on h100-nvlink whatever --hw says, and says so.
  L.paragraph(fmt("The what-if model replays a dry run of the same code on 16 GPUs of %s, %d per node (NVLink %.0f GB/s "
                  "inside, InfiniBand %.0f GB/s across)%s, for Llama 3 8B's layer at 64K tokens:",
                  hw.name.c_str(), hw.domain_gpus(), hw.tiers.front().bandwidth / 1e9, hw.tiers.back().bandwidth / 1e9,
                  L.hw.name == find_lesson(L.number).hw ? "" : " (this step's profile whatever --hw says)"));
  L.say_config(big);
  L.say("The same degrees, placed two ways. The innermost group is 8 neighbouring ranks, one node;");
  L.say("the outer group spans the nodes, a hop of it crossing InfiniBand where it meets a node's");
  L.say("edge. Bytes all ranks send, forward + backward, inside a node and across (as the fp32 dry");
  L.say("run records them; bf16 halves them), and the modeled layer time (bf16):");
  L.blank();
  Table t4({"configuration", "innermost", "outer", "bytes inside", "bytes across", "layer (modeled)"});
  struct Row {
    const char* name;
    const char* inside;
    const char* across;
    const char* key;
  };
  const Row rows[] = {{"tp8xring2", "TP 8", "ring 2", "tp_inside"},
                      {"ring2xtp8", "ring 2", "TP 8", "tp_across"},
                      {"ulysses8xring2", "all-to-all 8", "ring 2", "a2a_inside"},
                      {"ulysses2xring8", "all-to-all 2", "ring 8", "ring_across"}};
  std::map<std::string, double> ms;
  for (const Row& row : rows) {
    const Placement p = model_placement(row.name, big, Q, hw);
    ms[row.key] = L.record(fmt("layer_ms_%s", row.key), p.layer_ms);
    L.record(fmt("across_bytes_%s", row.key), double(p.across_bytes));
    t4.row({row.name, row.inside, row.across, format_bytes(double(p.inside_bytes)), format_bytes(double(p.across_bytes)),
            fmt("%.1f ms", p.layer_ms)});
  }
  L.table(t4);
  L.trust(model::run_kind(false, false, parse_parallel_config("tp8xring2"), "bf16"));
  L.blank();
  L.record("layer_tp_across_over_inside", ms["tp_across"] / ms["tp_inside"]);
  L.say("TP inside the node and the ring across it: %.1f ms; the reverse: %.1f ms, %.1fx slower, for",
        ms["tp_inside"], ms["tp_across"], ms["tp_across"] / ms["tp_inside"]);
  L.say("the same bytes in total. In ring2xtp8 each TP group has 4 GPUs in each node: 2 of the 8");
  L.say("hops of its all-gathers and reduce-scatters cross InfiniBand, and every GEMM waits for the");
  // Lesson 3's threshold for this layer across InfiniBand at the peak: GQA's Hkv/H, doubled by
  // the causal mask (a balanced step computes half its c x c pairs; lesson 6).
  model::ModelOptions peak;
  peak.efficiency = "ideal";
  const double c_star = L.record("ring_threshold_ib_tokens",
                                 model::ring_threshold(hw, peak, hw.tiers.back(), double(big.Hkv) / double(big.H), big.causal).tokens);
  L.say("slowest hop. The ring's K/V hide behind attention when each GPU has enough tokens");
  L.say("(lessons 3 and 6: c >= 2 (Hkv/H) F/B under a causal mask, %s tokens for this layer", grouped(std::llround(c_star)).c_str());
  L.say("across InfiniBand at the peak; here %lld K).", (long long)(big.s / 2 / 1024));
  L.say("Ulysses x ring: the all-to-all of 8 inside the node and a ring of 2 across it, %.1f ms,", ms["a2a_inside"]);
  L.say("against %.1f ms for an all-to-all of 2 and a ring of 8: a longer ring sends more, and", ms["ring_across"]);
  L.say("only partly hides it at %lld K tokens per GPU.", (long long)(big.s / 8 / 1024));
  L.say("(This step's timeline is the model's, not in this lesson's trace: `ringside model");
  L.say("--strategy ring2xtp8 --ranks 16 ... --trace FILE` writes it.)");

  // ---- 5. passing Q instead of K/V -------------------------------------------------------------
  // The K/V ring and the pass-Q ring (parallel/ring_q_attention.cpp) alone over the P ranks, on
  // step 1's layer with Hkv = H (MHA) and Hkv = H/4 (Llama 3's grouping).
  struct Variant {
    const char* name;
    int64_t Hkv;
    const char* key;
  };
  const Variant variants[] = {{"MHA", cfg.H, "mha"}, {"GQA", cfg.H / 4, "gqa"}};
  const int64_t n = cfg.b * cfg.s / P;  // each rank's tokens: its queries and its keys
  Table t5({"layer", "ring", "forward sent", "formula", "backward sent", "formula"});
  std::map<std::string, double> sent;  // "kv_forward_mha": rank 0's bytes
  std::map<std::string, double> ringq_error;
  for (const Variant& v : variants) {
    LayerConfig c = cfg;
    c.Hkv = v.Hkv;
    const ReferenceRun ref_v = run_reference(c, DType::f64);
    // ring_attention_bytes over one K block, ring_q_bytes over the query block (fp32).
    const CommBytes kv_formula = ring_attention_bytes(c.b * n * c.Hkv * c.d() * 4, P);
    const RingQBytes q_formula = ring_q_bytes(c.b, n, c.H, c.d(), P, DType::f32);
    for (const RingRun& each : kRings) {
      const char* ring = each.name;
      const bool q = each.passes_q;
      const std::string label = fmt("%s %s", ring, v.name), key = fmt("%s_%%s_%s", q ? "q" : "kv", v.key);
      const std::vector<RunRecord> rr = L.run(plan_of(ring, c, P), label);
      const double error = L.record(fmt("error_%s_%s", ring, v.key), worst_error(rr[0].out, rr[0].dx, rr[0].grads, ref_v));
      if (q) ringq_error[v.key] = error;
      const double fwd = L.record(fmt(key.c_str(), "forward"), double(p2p_sent(L.trace, label, 0, "forward")));
      const double bwd = L.record(fmt(key.c_str(), "backward"), double(p2p_sent(L.trace, label, 0, "backward")));
      const double fwd_f = L.record(fmt(key.c_str(), "forward_formula"), double(q ? q_formula.forward : kv_formula.forward));
      const double bwd_f = L.record(fmt(key.c_str(), "backward_formula"), double(q ? q_formula.backward : kv_formula.backward));
      sent[fmt(key.c_str(), "forward")] = fwd, sent[fmt(key.c_str(), "backward")] = bwd;
      t5.row({q ? "" : fmt("%s, Hkv = %lld", v.name, (long long)v.Hkv), q ? "pass-Q" : "K/V", grouped(int64_t(fwd)),
              grouped(int64_t(fwd_f)), grouped(int64_t(bwd)), grouped(int64_t(bwd_f))});
    }
  }
  L.step("Passing Q instead of K/V", L.phase("ring-q MHA", "forward"));
  L.say("Every ring so far keeps the queries home and passes K and V. The pass-Q ring (--cp-comm");
  L.say("p2p-q, configuration ring-q; src/parallel/ring_q_attention.cpp) turns it around: K and V");
  L.say("stay, each query block travels with its running out and lse, every rank it visits merges");
  L.say("its own keys' part in, and after R-1 hops the result comes home. Both rings alone on step");
  L.say("1's layer, P = R = %d, n = %lld tokens a rank, with Hkv = H = %lld (MHA) and Hkv = %lld", P, (long long)n,
        (long long)cfg.H, (long long)(cfg.H / 4));
  L.say("(GQA, Llama 3's H/4). Rank 0's point-to-point bytes (from the trace: the gradient");
  L.say("all-reduce of lesson 10 left out), beside the formulas:");
  L.blank();
  L.table(t5);
  L.blank();
  L.say("With kv = b n Hkv d, q = b n H d and l = b H n (q's lse) elements, x 4 B:");
  L.say("  K/V ring  forward 2 (R-1) kv       backward 2 (2R-1) kv: K, V again, dK/dV R hops home");
  L.say("  pass-Q    forward (R-1)(2q + l)    backward (R-1)(4q + l): q, out, dout, lse, and dQ");
  const double mha_fwd = L.record("q_over_kv_forward_mha", sent["q_forward_mha"] / sent["kv_forward_mha"]);
  const double mha_bwd = L.record("q_over_kv_backward_mha", sent["q_backward_mha"] / sent["kv_backward_mha"]);
  const double gqa_fwd = L.record("q_over_kv_forward_gqa", sent["q_forward_gqa"] / sent["kv_forward_gqa"]);
  const double gqa_bwd = L.record("q_over_kv_backward_gqa", sent["q_backward_gqa"] / sent["kv_backward_gqa"]);
  L.say("MHA (q = kv): the forwards differ by the lse alone, 2d+1 against 2d per head and token,");
  L.say("%.3fx; the pass-Q backward is the lighter, %.3fx, as the diagonal's dQ stays home where", mha_fwd, mha_bwd);
  L.say("the K/V ring's dK/dV make all R hops (lighter while R-1 < 2d). A tie. Under GQA K and V");
  L.say("are Hkv/H of q, and the pass-Q ring sends %.2fx forward and %.2fx backward: it loses by", gqa_fwd, gqa_bwd);
  L.say("about H/Hkv. Worst error against fp64, out, dx and every gradient: %.2e (MHA)", ringq_error["mha"]);
  L.say("and %.2e (GQA), below %s: correct either way.", ringq_error["gqa"], kToleranceText);

  // ---- 6. the last hop home (modeled) ----------------------------------------------------------
  // Llama 3 8B's layer with Hkv = H (where the bytes tie) dry-run at 32K tokens on one node of 8
  // GPUs of step 4's profile, whatever --hw says (across a network neither ring hides its hops at
  // this length, and the step is about the one that still shows): rank 0's waits for transfers
  // inside attention, per phase.
  LayerConfig mha = big;
  mha.Hkv = mha.H, mha.s = 32768;
  const int P8 = 8;
  auto attention_waits = [&](const std::string& label, const std::string& phase) {
    int64_t ns = 0;
    for (const trace::RankTrace& r : L.trace.ranks)
      if (r.strategy == L.modeled_name(label, &hw) && r.rank == 0)
        for (const trace::Event& e : r.events)
          if (e.kind == trace::Kind::wait && e.phase == phase && e.sublayer == "attention") ns += e.dur_ns;
    return double(ns);
  };
  Table t6({"ring", "layer (modeled)", "rank 0's compute", "waits: forward", "backward"});
  std::map<std::string, double> layer_ms_of;
  for (const RingRun& each : kRings) {
    const char* ring = each.name;
    const bool q = each.passes_q;
    const std::string label = fmt("%s MHA 32K", ring), key = q ? "q" : "kv";
    const trace::StrategyMetrics& m = L.dry_run(plan_of(ring, mha, P8), label, &hw);
    layer_ms_of[key] = L.record(fmt("modeled_layer_ms_%s", key.c_str()), double(layer_ns(m)) / 1e6);
    const double compute = L.record(fmt("modeled_compute_ms_%s", key.c_str()), double(m.ranks[0].time.compute_ns) / 1e6);
    const double wait_fwd = L.record(fmt("modeled_wait_forward_ns_%s", key.c_str()), attention_waits(label, "forward"));
    const double wait_bwd = L.record(fmt("modeled_wait_backward_ns_%s", key.c_str()), attention_waits(label, "backward"));
    t6.row({q ? "pass-Q" : "K/V", fmt("%.1f ms", layer_ms_of[key]), fmt("%.1f ms", compute), format_ns(wait_fwd),
            format_ns(wait_bwd)});
  }
  const int64_t home_hop = L.record("modeled_home_hop_bytes", double(mha.b * (mha.s / P8) * mha.H * (mha.d() + 1) * 2));
  L.step(fmt("The pass-Q ring's last hop (modeled on %s)", hw.name.c_str()),
         L.phase(L.modeled_name("ring-q MHA 32K", &hw), "forward"));
  L.say("Both rings post each step's hop before its compute, and it hides there when a step has");
  L.say("enough tokens (lesson 3). What differs is the end. The K/V ring's forward ends with its");
  L.say("last compute. The pass-Q ring's travelling results must then come home: one hop of out and");
  L.say("lse with nothing left to hide behind. In the backward both end with a hop home, dK and dV");
  L.say("for the K/V ring, dQ for the pass-Q ring. Llama 3 8B's layer with Hkv = H = %lld (MHA, where", (long long)mha.H);
  L.paragraph(fmt("the bytes tie), s = %s on one node of %d GPUs of %s%s, dry-run and modeled in bf16; rank 0's "
                  "compute and its waits for transfers inside attention:",
                  grouped(mha.s).c_str(), P8, hw.name.c_str(), L.hw.name == find_lesson(L.number).hw ? "" : " (step 4's profile whatever --hw says)"));
  L.blank();
  L.table(t6);
  L.trust(model::run_kind(false, false, parse_parallel_config("ring-q"), "bf16"));
  L.blank();
  L.say("The pass-Q forward's wait is that hop home: b n H (d+1) x 2 B = %s bytes.", grouped(home_hop).c_str());
  L.say("The K/V ring's backward waits for two tensors home, the pass-Q ring's for one. The layer");
  L.say("takes %.1f ms against %.1f ms: the rest of the gap is compute, the pass-Q ring's extra", layer_ms_of["q"],
        layer_ms_of["kv"]);
  L.say("merges and copies (each visiting block's part merged into its travelling result),");
  L.say("memory-bound work the K/V ring does not do. Passing Q buys no overlap.");

  // ---- 7. where it wins -----------------------------------------------------------------------
  // Llama 3 8B prefilling the last 1,024 tokens of a 64K context on a ring of 8, bf16: the
  // formulas at n_q queries and n_k keys a rank (the runs above cannot have n_q != n_k).
  const int R8 = 8;
  const int64_t context = 65536, fresh = 1024, n_k = context / R8, n_q = fresh / R8;
  const int64_t kv_hop = 2 * big.b * n_k * big.Hkv * big.d() * 2;  // K and V, bf16
  const double q_forward = double(ring_q_bytes(big.b, n_q, big.H, big.d(), R8, DType::f32).forward) / 2;  // bf16
  const double q_hop = q_forward / (R8 - 1);  // q, out and lse
  const double breakeven = L.record("breakeven_q_over_k", 2.0 * double(big.Hkv * big.d()) / double(big.H * (2 * big.d() + 1)));
  L.step("Where passing Q wins: few queries, a long cache");
  L.say("What a hop carries grows with the tokens of what travels: the pass-Q ring's with the");
  L.say("queries', b n_q H (2d+1) forward; the K/V ring's with the keys', 2 b n_k Hkv d. Training's");
  L.say("self-attention has n_q = n_k on every rank (equal shards), so passing Q ties at best, and");
  L.say("this layer, whose queries and keys are the same tokens, cannot show it winning. It wins");
  L.say("where n_q / n_k < 2 Hkv d / (H (2d+1)): inference prefill of a few new tokens against a");
  L.say("long cache. Llama 3 8B (H = %lld, Hkv = %lld, d = %lld): n_q / n_k < %.3f. The formulas", (long long)big.H,
        (long long)big.Hkv, (long long)big.d(), breakeven);
  L.say("(not a run) for its last %s tokens of a %s-token context on R = %d GPUs, bf16,", grouped(fresh).c_str(),
        grouped(context).c_str(), R8);
  L.say("forward only (prefill has no backward): n_k = %s keys, n_q = %lld queries a GPU:", grouped(n_k).c_str(), (long long)n_q);
  L.blank();
  Table t7({"ring", "what travels", "one hop", "forward per GPU"});
  t7.row({"K/V", fmt("K and V of %s keys", grouped(n_k).c_str()),
          grouped(int64_t(L.record("prefill_kv_hop_bytes", double(kv_hop)))),
          format_bytes(L.record("prefill_kv_forward_bytes", double(ring_attention_bytes(kv_hop / 2, R8).forward)))});
  t7.row({"pass-Q", fmt("q, out, lse of %lld queries", (long long)n_q), grouped(int64_t(L.record("prefill_q_hop_bytes", q_hop))),
          format_bytes(L.record("prefill_q_forward_bytes", q_forward))});
  L.table(t7);
  L.blank();
  L.say("Passing Q moves %.1fx fewer bytes here, and hides them better. Each step computes",
        L.record("prefill_kv_over_q", double(kv_hop) / q_hop));
  L.say("n_q x n_k pairs either way (unmasked: the new tokens see the whole cache), so a K/V hop");
  L.say("hides behind it when the queries that stay are n_q >= (Hkv/H) F/B (lesson 3's c*), a");
  L.say("pass-Q hop when the keys that stay are n_k >= (2d+1)/(2d) F/B.");
  // The thresholds on step 6's node (the ring inside it).
  const double kv_star = L.record("prefill_kv_threshold_tokens",
                                  model::ring_threshold(hw, peak, hw.tiers.front(), double(big.Hkv) / double(big.H)).tokens);
  const double q_star = L.record("prefill_q_threshold_tokens",
                                 model::ring_threshold(hw, peak, hw.tiers.front(), double(2 * big.d() + 1) / double(2 * big.d())).tokens);
  L.paragraph(fmt("On a node of %s at the peak these are %s and %s tokens: with %lld queries a GPU the K/V ring's hops %s, "
                  "and the pass-Q ring's %s behind its %s keys.",
                  hw.name.c_str(), grouped(std::llround(kv_star)).c_str(), grouped(std::llround(q_star)).c_str(),
                  (long long)n_q, double(n_q) >= kv_star ? "hide" : "cannot hide", double(n_k) >= q_star ? "hide" : "cannot hide",
                  grouped(n_k).c_str()));

  // ---- 8. the rule ----------------------------------------------------------------------------
  L.step("The rule");
  L.say("Put the group that moves the most, and waits for it, on the fastest link:");
  L.say("  TP (or Ulysses) inside a node, on NVLink: all-gathers, reduce-scatters, all-to-alls,");
  L.say("      each on the critical path; TP also splits the weights.");
  L.say("  the ring (CP) across nodes: point-to-point K/V that hide behind compute at long enough");
  L.say("      sequences, and no limit from the head count.");
  L.say("  all_gather CP (Llama 3) is the simple alternative: one gather of K/V, easy masking, at");
  L.say("      the price of holding the whole sequence's K/V for a while.");
  L.say("  the pass-Q ring (p2p-q) where the queries are fewer than the keys: in training it ties");
  L.say("      the K/V ring at best (MHA) and loses by about H/Hkv under GQA.");
  L.say("Placement is the point, not hybrids as such: at 1M tokens on 64 GPUs the modeled plain");
  L.say("ring is as fast as TP 8 x ring 8 (both hide their traffic). TP 8 holds 1/8 of the weights,");
  L.say("but its all-gathers put the whole CP shard on every TP rank: at this length its peak memory");
  L.say("is the higher. TP's weight split pays where weights, not activations, fill the GPU.");
  L.say("Try it:");
  L.say("  ringside model --strategy tp8xring8 --ranks 64 --seq 1048576 --heads 64 --kv-heads 8 \\");
  L.say("      --hidden 4096 --ffn 16384 --hw h100-nvlink      (and ring8xtp8: the reverse order)");
  L.say("  ringside bench model        (every strategy and hybrid, side by side)");

  // ---- check yourself ------------------------------------------------------------------------
  // Step 2's formulas at T = 2 x C = 4 (P = 8), and step 3's in-order split with a ring of R = 4.
  const int T = 2, C = 4;
  const int64_t Nc = cfg.b * (cfg.s / C);  // the CP shard's tokens
  const double tp_bytes = double(4 * (Nc * cfg.h * (T - 1) / T) * 4);
  const double ring_bytes = double(2 * Nc * (cfg.Hkv / T) * cfg.d() * 4 * (C - 1));
  const RunPlan in_order4 = plan_of("ulysses2xring4", cfg, 2 * C, Layout::contiguous);
  std::vector<double> in_order4_work;
  for (int r = 0; r < 2 * C; ++r) in_order4_work.push_back(parallel_attention_flops(in_order4, r));
  const double in_order4_imbalance = trace::max_over_mean(in_order4_work);
  const double allgather_kv = double(2 * big.b * big.s * big.Hkv * big.d() * 2);  // allgather_kv_bytes, bf16
  // Step 5's ratio for Llama 3 70B, and step 7's break-even in queries a GPU.
  LayerConfig l70;
  apply_preset(find_preset("llama3-70b"), l70);
  const double ratio70 = double(ring_q_bytes(1, 1, l70.H, l70.d(), 2, DType::f32).forward) /
                         double(ring_attention_bytes(l70.Hkv * l70.d() * 4, 2).forward);
  const double max_queries = std::floor(double(n_k) * breakeven);
  L.check_yourself({
      {fmt("TP %d x ring %d on P = %d, step 1's layer: how many bytes does rank 0 send to its TP group in the "
           "forward?",
           T, C, T * C),
       tp_bytes, grouped(int64_t(tp_bytes)) + " bytes",
       fmt("2 all-gathers + 2 reduce-scatters of N_c h (T-1)/T x 4, N_c = s/C = %lld: 4 x %lld x %lld x %d/%d x 4",
           (long long)Nc, (long long)Nc, (long long)cfg.h, T - 1, T)},
      {"The same run: how many bytes does rank 0 send to its ring in the forward?", ring_bytes, grouped(int64_t(ring_bytes)) + " bytes",
       fmt("K and V of its Hkv/T = %lld heads, C-1 hops: 2 (s/C) (Hkv/T) d x 4 x (C-1) = 2 x %lld x %lld x %lld x 4 x %d",
           (long long)(cfg.Hkv / T), (long long)Nc, (long long)(cfg.Hkv / T), (long long)cfg.d(), C - 1)},
      {fmt("Ulysses 2 x ring %d on P = %d with the input split in order: the imbalance (max / mean work)?", C, 2 * C),
       in_order4_imbalance, fmt("%.3f", in_order4_imbalance),
       fmt("each ring shard is a contiguous quarter, c = s/R = %lld: (R-1) c^2 + c(c+1)/2 pairs over the mean "
           "s(s+1)/(2R)",
           (long long)(cfg.s / C))},
      {fmt("All-gather CP on step 4's layer (s = %s, T = 1): how many bytes of K and V, bf16, does a rank hold "
           "while it attends?",
           grouped(big.s).c_str()),
       allgather_kv, grouped(int64_t(allgather_kv)) + " bytes (" + format_bytes(allgather_kv) + ")",
       fmt("the whole sequence's, whatever C: 2 b s Hkv d x 2 = 2 x %s x %lld x %lld x 2",
           grouped(big.s).c_str(), (long long)big.Hkv, (long long)big.d())},
      {fmt("Llama 3 70B's layer (H = %lld, Hkv = %lld, d = %lld), equal shards: how many times the K/V ring's "
           "forward bytes does the pass-Q ring send?",
           (long long)l70.H, (long long)l70.Hkv, (long long)l70.d()),
       ratio70, fmt("%.3f times", ratio70),
       fmt("(R-1)(2q + l) over 2 (R-1) kv, per token: H (2d+1) / (2 Hkv d) = %lld x %lld / (2 x %lld x %lld)",
           (long long)l70.H, (long long)(2 * l70.d() + 1), (long long)l70.Hkv, (long long)l70.d())},
      {fmt("Step 7's prefill (Llama 3 8B, %s keys a GPU): up to how many queries a GPU does passing Q send "
           "fewer bytes than passing K/V?",
           grouped(n_k).c_str()),
       max_queries, fmt("%s queries", grouped(int64_t(max_queries)).c_str()),
       fmt("n_q H (2d+1) < 2 n_k Hkv d: n_q < %s x 2 x %lld x %lld / (%lld x %lld) = %.2f", grouped(n_k).c_str(),
           (long long)big.Hkv, (long long)big.d(), (long long)big.H, (long long)(2 * big.d() + 1), double(n_k) * breakeven)},
  });
}

}  // namespace ringside::lessons

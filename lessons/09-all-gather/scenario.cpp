// Lesson 9: all-gather context parallelism, as Llama 3 trains long contexts (Dubey et al. 2024,
// section 3.3.2; TransformerEngine's cp_comm_type all_gather). Every rank gathers the whole
// sequence's K and V, attends its own queries to them, and in the backward reduce-scatters dK/dV:
// one collective where the ring takes P-1 steps, paid for by holding every token's K/V at once.
#include <algorithm>
#include <cmath>
#include <map>

#include "layer/presets.h"
#include "layer/reference.h"
#include "lessons/lesson.h"
#include "parallel/formulas.h"
#include "trace/metrics.h"

namespace ringside::lessons {

namespace {

// Bytes rank `rank` of `label` sent in `phase`, by the collective that moved them (all_gather,
// reduce_scatter, all_reduce, p2p), from its trace.
std::map<trace::Kind, int64_t> sent_by_kind(const trace::TraceData& t, const std::string& label, int rank, const std::string& phase) {
  std::map<trace::Kind, int64_t> by;
  for (const trace::RankTrace& r : t.ranks)
    if (r.strategy == label && r.rank == rank)
      for (const trace::Event& e : r.events)
        if (e.stream == trace::Stream::comm && e.direction == trace::Direction::send && e.phase == phase) by[e.kind] += e.bytes;
  return by;
}

}  // namespace

void all_gather_cp(Script& L) {
  // A small GQA layer (Hkv/H = 1/4, as Llama 3's 8 of 32), causal, on P = 4 local ranks.
  LayerConfig cfg;
  cfg.b = 1, cfg.s = 512, cfg.h = 128, cfg.H = 8, cfg.Hkv = 2, cfg.f = 512;
  const int P = 4;
  const int64_t d = cfg.d(), e = 4;                                   // head dim, fp32 bytes
  const int64_t kv_whole = cfg.b * cfg.s * cfg.Hkv * d * e;           // K (or V) of the whole sequence
  const RunPlan ag = plan_of("all-gather", cfg, P), ring = plan_of("ring", cfg, P);
  const std::vector<RunRecord> ra = L.run(ag, "all-gather");
  const std::vector<RunRecord> rr = L.run(ring, "ring");
  const ReferenceRun ref = run_reference(cfg, DType::f64);

  // ---- 1. the forward ---------------------------------------------------------------------------
  L.step("Gather K and V, attend locally", L.phase("all-gather", "forward"));
  L.say("Llama 3 (Dubey et al. 2024, section 3.3.2) splits long sequences over a CP group of P");
  L.say("ranks, but not with a ring: each rank all-gathers the keys and values of the whole");
  L.say("sequence, then attends its own queries to them in one call. TransformerEngine calls it");
  L.say("cp_comm_type all_gather; ringside's strategy is `all-gather`. On P = %d ranks, the layer:", P);
  L.say_config(cfg);
  L.say("Each rank holds 2P chunks' worth of queries in zigzag order (chunks r and 2P-1-r, so the");
  L.say("causal work is even, as in lesson 4); after the two all-gathers every rank holds all");
  L.say("%lld tokens' K and V:", (long long)cfg.s);
  L.blank();
  Table t1({"rank", "query tokens", "k, v after the gather", "sent (measured)", "formula"});
  const int64_t fwd_formula = parallel_comm_bytes(ag, 0, DType::f32).forward;
  for (int r = 0; r < P; ++r) {
    L.record(fmt("forward_bytes_rank%d", r), double(ra[size_t(r)].forward.bytes_sent));
    t1.row({std::to_string(r), token_runs(ag.rank_positions(r)),
            fmt("[1, %lld, %lld, %lld]", (long long)cfg.s, (long long)cfg.Hkv, (long long)d), grouped(ra[size_t(r)].forward.bytes_sent),
            grouped(parallel_comm_bytes(ag, r, DType::f32).forward)});
  }
  L.table(t1);
  L.record("forward_bytes_formula", double(fwd_formula));
  L.record("kv_whole_bytes", double(kv_whole));
  L.blank();
  L.say("An all-gather of a buffer of S bytes sends S (P-1)/P per rank (the ring algorithm, as");
  L.say("NCCL's): K and V are S = b s Hkv d x 4 B = %s bytes each, so 2 S (P-1)/P =", grouped(kv_whole).c_str());
  L.say("%s bytes, the measured column. Worst error against the fp64 reference, out, dx and",
        grouped(int64_t(2 * kv_whole * (P - 1) / P)).c_str());
  L.say("every gradient: %.2e (below %s).", L.record("error_all_gather", worst_error(ra[0].out, ra[0].dx, ra[0].grads, ref)),
        kToleranceText);

  // ---- 2. the backward --------------------------------------------------------------------------
  const std::map<trace::Kind, int64_t> back = sent_by_kind(L.trace, "all-gather", 0, "backward");
  auto of = [&](trace::Kind k) { return back.count(k) ? back.at(k) : int64_t(0); };
  const int64_t params = parallel_param_count(ag);
  L.step("The backward: gather again, reduce-scatter dK and dV", L.phase("all-gather", "backward"));
  L.say("The backward gathers K and V again (Llama 3 keeps only the rank's own shards, not the");
  L.say("gathered copy), computes dQ for its queries and a partial dK, dV for every token, and");
  L.say("reduce-scatters those: each rank gets the sum over the group for its own tokens. Then the");
  L.say("weight gradients' all-reduce, which every CP strategy ends with (lesson 10). Rank 0's");
  L.say("backward bytes, by collective (from the trace), and the formulas:");
  L.blank();
  Table t2({"collective", "measured", "formula", "what"});
  const double ag_formula = 2.0 * double(kv_whole) * (P - 1) / P;
  const double ar_formula = 2.0 * double(params) * e * (P - 1) / P;
  t2.row({"all_gather", grouped(int64_t(L.record("backward_all_gather_bytes", double(of(trace::Kind::all_gather))))),
          grouped(int64_t(ag_formula)), "K and V again: 2 S (P-1)/P"});
  t2.row({"reduce_scatter", grouped(int64_t(L.record("backward_reduce_scatter_bytes", double(of(trace::Kind::reduce_scatter))))),
          grouped(int64_t(ag_formula)), "dK and dV: 2 S (P-1)/P"});
  t2.row({"all_reduce", grouped(int64_t(L.record("backward_all_reduce_bytes", double(of(trace::Kind::all_reduce))))),
          grouped(int64_t(ar_formula)), fmt("%s weights: 2 x 4 B (P-1)/P each", grouped(params).c_str())});
  t2.row({"total", grouped(int64_t(L.record("backward_bytes_rank0", double(ra[0].backward.bytes_sent)))),
          grouped(int64_t(L.record("backward_bytes_formula", double(parallel_comm_bytes(ag, 0, DType::f32).backward)))), ""});
  L.table(t2);
  L.record("params", double(params));
  L.blank();
  L.say("A reduce-scatter is the all-gather run backwards (each hop adds instead of copies), so it");
  L.say("moves the same bytes. The attention's share is 4 S (P-1)/P: all-gathers and");
  L.say("reduce-scatters whose results the next op needs at once, so nothing hides them here.");

  // ---- 3. beside the ring -----------------------------------------------------------------------
  L.step("Beside the ring: the same bytes, held at once", L.phase("all-gather", "forward"));
  L.say("The ring (lesson 3) on the same layer and ranks. Forward bytes are equal: the ring passes");
  L.say("each K/V block P-1 hops, which is what a ring all-gather does. The backward differs by one");
  L.say("hop: the ring's dK/dV travel P hops home, the reduce-scatter's P-1. What differs most is");
  L.say("memory. The ring holds two blocks at a time (the one in use, the one arriving); all-gather");
  L.say("holds the whole sequence's K and V, plus V's receive buffer before it is put in order.");
  L.say("(At this size the weights and their gradients set the peak, the same in both.)");
  L.blank();
  Table t3({"strategy", "forward sent", "backward sent", "comm buffers (peak)", "formula", "peak per rank"});
  struct Row {
    const char* name;
    const RunPlan* plan;
    const std::vector<RunRecord>* runs;
    const char* key;
  };
  for (const Row& row : {Row{"ring", &ring, &rr, "ring"}, Row{"all-gather", &ag, &ra, "ag"}}) {
    int64_t comm = 0, peak = 0;
    for (const RunRecord& x : *row.runs) comm = std::max(comm, x.peak_comm_forward), peak = std::max(peak, x.peak_bytes);
    const int64_t formula = parallel_forward_comm_peak(*row.plan, 0, DType::f32);
    L.record(fmt("%s_forward_bytes", row.key), double((*row.runs)[0].forward.bytes_sent));
    L.record(fmt("%s_backward_attention_bytes", row.key),
             double((*row.runs)[0].backward.bytes_sent) - ar_formula);  // less the weight gradients' all-reduce
    L.record(fmt("%s_comm_peak", row.key), double(comm));
    L.record(fmt("%s_comm_peak_formula", row.key), double(formula));
    L.record(fmt("%s_peak_bytes", row.key), double(peak));
    t3.row({row.name, grouped((*row.runs)[0].forward.bytes_sent), grouped((*row.runs)[0].backward.bytes_sent), grouped(comm),
            grouped(formula), format_bytes(double(peak))});
  }
  L.table(t3);
  L.blank();
  const int64_t Nc = cfg.b * cfg.s / P;
  L.say("The formulas: the ring 4 (b s/P) Hkv d x 4 B = %s; all-gather 3 b s Hkv d x 4 B =", grouped(4 * Nc * cfg.Hkv * d * e).c_str());
  L.say("%s: %.0f times the ring's (3P/4), and growing with P where the ring's shrinks. At", grouped(3 * kv_whole).c_str(),
        L.record("comm_peak_ratio", 3.0 * P / 4));
  L.say("long contexts that buffer is the price: every rank holds every token's K/V for a moment.");

  // ---- 4. GQA -----------------------------------------------------------------------------------
  L.step("Why GQA makes the gather cheap");
  LayerConfig l8, l70;
  apply_preset(find_preset("llama3-8b"), l8);
  apply_preset(find_preset("llama3-70b"), l70);
  const int64_t S128 = 131072;
  L.say("With grouped-query attention K and V have Hkv heads where q has H: the whole sequence's");
  L.say("K/V is Hkv/H of its q. Llama 3 8B has H = %lld, Hkv = %lld; 70B has H = %lld, Hkv = %lld", (long long)l8.H,
        (long long)l8.Hkv, (long long)l70.H, (long long)l70.Hkv);
  L.say("(d = %lld in both).", (long long)l8.d());
  L.say("At s = 128K in bf16, per layer, what an all-gather rank holds:");
  L.blank();
  Table t4({"layer", "Hkv/H", "K and V of 128K tokens", "the same with Hkv = H (MHA)"});
  for (const LayerConfig* c : {&l8, &l70}) {
    const double kv = 2.0 * double(S128 * c->Hkv * c->d()) * 2, mha = 2.0 * double(S128 * c->H * c->d()) * 2;
    const std::string key = c == &l8 ? "8b" : "70b";
    L.record("kv128k_bytes_" + key, kv);
    L.record("kv128k_mha_bytes_" + key, mha);
    t4.row({c == &l8 ? "Llama 3 8B" : "Llama 3 70B", fmt("%lld/%lld", (long long)c->Hkv, (long long)c->H), format_bytes(kv), format_bytes(mha)});
  }
  L.table(t4);
  L.blank();
  L.say("2 s Hkv d x 2 B is the same %s for both: 70B adds query heads, not K/V heads.",
        format_bytes(L.numbers["kv128k_bytes_8b"].get<double>()).c_str());
  L.say("Llama 3's 8 K/V heads make the gathered K/V small beside the layer's activations,");
  L.say("and so its traffic small: the all-gather sends 2 (Hkv/H) N h (P-1)/P elements, the ring's");
  L.say("forward volume, but in one collective instead of P-1 steps that each must be hidden.");
  L.say("The paper's reasons besides: any mask (documents, causal) is easy on whole K/V, and the");
  L.say("gather is small next to attention's compute at 128K.");

  // ---- 5. modeled: exposed comm and the crossover -----------------------------------------------
  const int Pm = 8;
  LayerConfig big = l8;
  const int64_t lengths[] = {4096, 16384, 65536};
  L.step(fmt("Modeled on %s: exposed communication, ring against all-gather", L.hw.name.c_str()));
  L.say("Llama 3 8B's layer on P = %d GPUs of %s, dry-run (the strategies' own code, no", Pm, L.hw.name.c_str());
  L.say("math) and modeled in bf16 at three lengths, causal, zigzag. Per GPU: the layer's time");
  L.say("(forward + backward, the slowest GPU) and attention's own communication left exposed:");
  L.blank();
  Table t5({"s", "tokens/GPU", "ring: layer", "exposed", "all-gather: layer", "exposed"});
  int64_t crossover = 0;
  for (int64_t s : lengths) {
    big.s = s;
    const std::string k = fmt("s%lld", (long long)(s / 1024));
    double layer[2], exposed[2];
    const char* names[2] = {"ring", "all-gather"};
    for (int i = 0; i < 2; ++i) {
      const trace::StrategyMetrics& m = L.dry_run(plan_of(names[i], big, Pm), fmt("%s %lldK", names[i], (long long)(s / 1024)));
      const std::optional<trace::Breakdown> b = trace::sublayer_comm(m, "attention");
      layer[i] = double(layer_ns(m));
      exposed[i] = b ? double(b->exposed_comm_ns) / Pm : 0;
      L.record(fmt("%s_%s_layer_ns", i ? "ag" : "ring", k.c_str()), layer[i]);
      L.record(fmt("%s_%s_exposed_ns", i ? "ag" : "ring", k.c_str()), exposed[i]);
    }
    if (!crossover && layer[0] < layer[1]) crossover = s;
    t5.row({grouped(s), grouped(s / Pm), format_ns(layer[0]), format_ns(exposed[0]), format_ns(layer[1]), format_ns(exposed[1])});
  }
  L.table(t5);
  L.trust(model::run_kind(false, false, parse_parallel_config("all-gather"), "bf16"));
  L.record("crossover_s", double(crossover));
  L.blank();
  L.say("The all-gather's exposed time is all of its attention traffic: the gathers and");
  L.say("reduce-scatters block the attention that needs them. The ring's hides behind each step's");
  L.say("compute once a step has enough tokens (c >= 2 (Hkv/H) F/B under a causal mask, lessons 3");
  L.say("and 6); at short sequences its P-1 hops each pay a latency that a small block cannot");
  L.say("cover, and its attention runs as P small kernels, each slower than one call over the");
  L.say("whole sequence.");
  if (crossover)
    L.say("Here the ring's layer is the faster from s = %s on; below that all-gather wins.", grouped(crossover).c_str());
  else
    L.say("Here all-gather's layer is the faster at every length shown.");
  L.say("Llama 3 chose all-gather for its simplicity and masks, at a GQA ratio that keeps it cheap.");

  // ---- check yourself ---------------------------------------------------------------------------
  const double q1 = 2.0 * double(S128 * l8.Hkv * l8.d()) * 2 * 7 / 8;  // K and V, bf16, P = 8
  const double q2 = 3.0 * double(kv_whole) * 2;                            // s twice: 3 b (2s) Hkv d x 4
  const double q3 = double(l70.H) / double(l70.Hkv);
  L.check_yourself({
      {"Llama 3 8B at s = 128K on P = 8 GPUs in bf16: bytes each GPU sends in one layer's forward all-gathers of K and V?",
       q1, grouped(int64_t(q1)) + " bytes", "2 S (P-1)/P with S = b s Hkv d x 2 B = 128K x 8 x 128 x 2 B"},
      {fmt("Step 3's layer at s = %lld: all-gather's peak communication buffers per rank?", (long long)(2 * cfg.s)), q2,
       grouped(int64_t(q2)) + " bytes", "3 b s Hkv d x 4 B: K and V of every token, and V's receive buffer"},
      {"Llama 3 70B: how many times the bytes would the gather move if K/V had all H heads?", q3, fmt("%.0f times", q3),
       "H / Hkv = 64 / 8: the gathered K/V scale with Hkv"},
  });
}

}  // namespace ringside::lessons

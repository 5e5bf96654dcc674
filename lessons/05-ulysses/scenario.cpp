// Lesson 5: DeepSpeed-Ulysses (Jacobs et al. 2023). Attention needs whole sequences, but each
// head is independent: an all-to-all turns "my tokens, all heads" into "all tokens, my heads",
// attention runs locally, and a second all-to-all turns it back.
#include "core/error.h"
#include "layer/presets.h"
#include "lessons/lesson.h"
#include "parallel/formulas.h"
#include "parallel/ulysses_attention.h"

namespace ringside::lessons {

void ulysses(Script& L) {
  LayerConfig cfg;
  cfg.b = 1, cfg.s = 256, cfg.h = 128, cfg.H = 8, cfg.Hkv = 2, cfg.f = 512;  // GQA: 4 query heads per K/V head
  const int P = 4;
  const int64_t b = cfg.b, s = cfg.s, H = cfg.H, d = cfg.d(), sl = s / P, e = 4;
  const int64_t Hkv_rep = ulysses_kv_heads(cfg, P), R = Hkv_rep / cfg.Hkv;  // K/V heads received together; ranks per head
  const RunPlan ulysses_plan = plan_of("ulysses", cfg, P), ring_plan = plan_of("ring", cfg, P);
  const std::vector<RunRecord> rr = L.run(ulysses_plan, "ulysses");
  const std::vector<RunRecord> ring = L.run(ring_plan, "ring");
  auto a2a_window = [&](int nth) {
    // The nth forward all-to-all call (the same call number on every rank).
    int64_t call = -1;
    int k = 0;
    for (const trace::RankTrace& t : L.trace.ranks)
      if (t.strategy == "ulysses" && t.rank == 0)
        for (const trace::Event& ev : t.events)
          if (ev.kind == trace::Kind::collective && ev.name == "all_to_all" && ev.phase == "forward" && k++ == nth) call = ev.collective;
    return L.window("ulysses", [call](const trace::Event& ev) { return ev.kind == trace::Kind::collective && ev.collective == call; });
  };

  // ---- 1. before ------------------------------------------------------------------------------
  L.step("Before attention: tokens split, all heads", L.phase("ulysses", "forward"));
  L.say("Ulysses on P = %d ranks; the layer:", P);
  L.say_config(cfg);
  L.say("Outside attention Ulysses is like the ring: rank r holds s/P tokens and every weight.");
  L.say("LayerNorm, the QKV projection and RoPE run on those tokens, giving all heads of them:");
  L.blank();
  Table t1({"rank", "tokens", "q", "k, v"});
  for (int r = 0; r < P; ++r)
    t1.row({std::to_string(r), fmt("[%lld, %lld)", (long long)(r * sl), (long long)((r + 1) * sl)),
            fmt("[%lld, %lld, %lld, %lld]", (long long)b, (long long)sl, (long long)H, (long long)d),
            fmt("[%lld, %lld, %lld, %lld]", (long long)b, (long long)sl, (long long)cfg.Hkv, (long long)d)});
  L.table(t1);

  // ---- 2. the all-to-all -------------------------------------------------------------------------
  L.step("All-to-all: from sequence to heads", a2a_window(0));
  L.say("Attention needs every token of a head, and heads are independent. So each rank cuts its");
  L.say("[s/P, H, d] into P pieces by heads and sends piece j to rank j: an all-to-all. Rank r");
  L.say("receives its H/P heads from every rank, [s, H/P, d]: the whole sequence, %lld heads.", (long long)(H / P));
  L.blank();
  Table t2({"rank", "q heads", "q after", "k, v after", "bytes sent per all-to-all of q"});
  const int64_t q_bytes = b * sl * H * d * e * (P - 1) / P;
  for (int r = 0; r < P; ++r)
    t2.row({std::to_string(r), fmt("%lld-%lld", (long long)(r * H / P), (long long)((r + 1) * H / P - 1)),
            fmt("[%lld, %lld, %lld, %lld]", (long long)b, (long long)s, (long long)(H / P), (long long)d),
            fmt("[%lld, %lld, %lld, %lld]", (long long)b, (long long)s, (long long)(Hkv_rep / P), (long long)d), grouped(q_bytes)});
  L.table(t2);
  L.blank();
  L.say("Each rank keeps 1/P of its part and sends the rest, one piece to each other rank: of");
  L.say("q's %s per rank, %s stay home. (The DeepSpeed-Ulysses paper counts an", format_bytes(double(b * sl * H * d * e)).c_str(),
        format_bytes(double(b * sl * H * d * e / P)).c_str());
  L.say("all-to-all of an aggregate message M over P GPUs as M/P per link.)");
  L.record("q_all_to_all_bytes", double(q_bytes));

  // ---- 3. GQA ----------------------------------------------------------------------------------------
  L.step("GQA: fewer K/V heads than ranks", a2a_window(1));
  L.say("This layer has Hkv = %lld K/V heads for H = %lld query heads (query head i reads K/V head", (long long)cfg.Hkv,
        (long long)H);
  L.say("i / %lld). With P = %d > Hkv the K/V heads cannot be divided among the ranks. Instead each", (long long)(H / cfg.Hkv), P);
  L.say("rank receives exactly the K/V heads its query heads read, so each K/V head goes to");
  L.say("P / Hkv = %lld ranks:", (long long)R);
  L.blank();
  Table t3({"rank", "q heads", "reads K/V head"});
  int64_t received = 0;  // K/V heads the ranks receive together
  for (int r = 0; r < P; ++r) {
    const HeadShare share = ulysses_head_share(H, cfg.Hkv, P, r);
    received += share.kv_count;
    t3.row({std::to_string(r), fmt("%lld-%lld", (long long)share.q_first, (long long)(share.q_first + share.q_count - 1)),
            share.kv_count == 1 ? std::to_string(share.kv_first)
                                : fmt("%lld-%lld", (long long)share.kv_first, (long long)(share.kv_first + share.kv_count - 1))});
  }
  L.table(t3);
  L.record("kv_heads_replicated", double(received));
  L.blank();
  L.say("Sending a head to several ranks costs bytes: K and V move as if there were %lld heads. In", (long long)received);
  L.say("the backward a K/V head's gradient is the sum of what its readers computed. When one K/V");
  L.say("head's query heads straddle two ranks (H 6, Hkv 3, P 2) it goes to both.");

  // ---- 4. attention and back ---------------------------------------------------------------------
  L.step("Attention on whole sequences, then back", L.window("ulysses", [](const trace::Event& ev) {
           return ev.phase == "forward" && ev.kind == trace::Kind::attention;
         }));
  L.say("Each rank runs ordinary attention over all s = %lld tokens for its heads: no ring, no", (long long)s);
  L.say("merge, and the causal triangle is whole on every rank, so the work is equal:");
  L.blank();
  Table t4({"rank", "attention MFLOP"});
  for (int r = 0; r < P; ++r) {
    t4.row({std::to_string(r), fmt("%.2f", rr[size_t(r)].attention_flops / 1e6)});
    L.record(fmt("attention_flops_rank%d", r), rr[size_t(r)].attention_flops);
  }
  L.table(t4);
  L.blank();
  L.say("A second all-to-all turns the output [s, H/P, d] back into [s/P, H, d], and the rest of");
  L.say("the layer is token-wise again. The backward does the same four all-to-alls in reverse.");

  // ---- 5. the head-count limit -------------------------------------------------------------------
  L.step("The head-count limit");
  std::string refused;
  try {
    plan_of("ulysses", cfg, 16);
  } catch (const ConfigError& ex) {
    refused = ex.what();
  }
  L.say("Heads are the unit Ulysses distributes, so P cannot exceed H: with H = %lld, P = 16 is", (long long)H);
  L.say("refused on every rank before any communication:");
  L.blank();
  L.steps.back().text += wrap(refused, 88, "  ");
  L.blank();
  L.say("Llama-3 70B has 64 query heads and 8 K/V heads: Ulysses alone stops at 64 GPUs, and past");
  L.say("8 it sends each K/V head to several ranks. The ring has no such limit; the two combine (USP,");
  L.say("Fang and Zhao 2024; lesson 7).");
  L.record("max_ranks", double(H));
  L.record("p16_refused", refused.empty() ? 0.0 : 1.0);

  // ---- 6. volume --------------------------------------------------------------------------------
  L.step("Volume against the ring", L.phase("ulysses", "forward"));
  const double uly_fwd = double(rr[0].forward.bytes_sent), ring_fwd = double(ring[0].forward.bytes_sent);
  L.record("ulysses_forward_bytes", uly_fwd);
  L.record("ulysses_forward_formula", double(parallel_comm_bytes(ulysses_plan, 0, DType::f32).forward));
  L.record("ring_forward_bytes", ring_fwd);
  L.record("ring_forward_formula", double(parallel_comm_bytes(ring_plan, 0, DType::f32).forward));
  L.say("Forward bytes sent per rank, measured at P = %d: Ulysses %s (q, k, v and out),", P,
        grouped(int64_t(uly_fwd)).c_str());
  L.say("the ring %s (K and V, P-1 hops). The formulas, per rank, N = b s tokens, e bytes per", grouped(int64_t(ring_fwd)).c_str());
  L.say("element:");
  L.say("  Ulysses  (2 + 2 Hkv'/H) N h (P-1)/P^2 e   (with Hkv' = H, 4 N h (P-1)/P^2, about 4Nh/P:");
  L.say("           the paper's 4Nh/P per link)");
  L.say("  ring     2 (Hkv/H) N h (P-1)/P e");
  L.blank();
  Table t5({"P", "Ulysses, this GQA layer", "ring, this GQA layer", "Ulysses, MHA", "ring, MHA"});
  LayerConfig mha = cfg;
  mha.Hkv = cfg.H;
  for (int p : {2, 4, 8}) {
    auto forward_bytes = [&](const char* name, const LayerConfig& c) {
      return grouped(parallel_comm_bytes(plan_of(name, c, p), 0, DType::f32).forward);
    };
    t5.row({std::to_string(p), forward_bytes("ulysses", cfg), forward_bytes("ring", cfg), forward_bytes("ulysses", mha),
            forward_bytes("ring", mha)});
  }
  L.table(t5);
  L.blank();
  L.say("Ulysses' bytes per rank fall with P, as (P-1)/P^2; the ring's grow towards 2 (Hkv/H) N h e.");
  L.say("At P = 8 this GQA layer replicates K/V to 8 heads and Ulysses moves as much as with MHA.");
  L.say("Ulysses moves less at large P, but all-to-all needs every pair of ranks connected at full");
  L.say("speed (inside a node), and its transfers sit on the critical path, while the ring's hide");
  L.say("behind compute.");

  // ---- check yourself ------------------------------------------------------------------------
  const int P8 = 8, P32 = 32;
  const int64_t sl8 = s / P8;
  const double q_bytes8 = double(b * sl8 * H * d * e * (P8 - 1) / P8);
  const double flops8 = parallel_attention_flops(plan_of("ulysses", cfg, P8), 0);
  LayerConfig llama70;
  apply_preset(find_preset("llama3-70b"), llama70);
  const double readers = double(ulysses_kv_heads(llama70, P32) / llama70.Hkv);
  LayerConfig mqa = cfg;
  mqa.Hkv = 1;
  const double mqa_bytes = double(parallel_comm_bytes(plan_of("ulysses", mqa, P), 0, DType::f32).forward);
  L.check_yourself({
      {fmt("Step 2's all-to-all of q sends %s bytes per rank at P = %d. How many at P = %d?", grouped(q_bytes).c_str(), P, P8),
       q_bytes8, grouped(int64_t(q_bytes8)) + " bytes",
       fmt("b (s/P) H d e (P-1)/P = %lld x %lld x %lld x %lld x 4 x %d/%d: a smaller piece, less of it kept home",
           (long long)b, (long long)sl8, (long long)H, (long long)d, P8 - 1, P8)},
      {fmt("At P = %d, how many attention MFLOP does each rank compute (step 4's table is P = %d)?", P8, P),
       flops8, fmt("%.2f MFLOP", flops8 / 1e6),
       fmt("H/P = %lld head over the whole causal sequence: 4 d (H/P) s(s+1)/2 = 4 x %lld x %lld x %lld x %lld / 2",
           (long long)(H / P8), (long long)d, (long long)(H / P8), (long long)s, (long long)(s + 1))},
      {fmt("Llama 3 70B (H = %lld, Hkv = %lld) under Ulysses on P = %d: to how many ranks does each K/V head go?",
           (long long)llama70.H, (long long)llama70.Hkv, P32),
       readers, fmt("%.0f ranks", readers),
       fmt("each rank reads the one K/V head of its H/P = %lld query heads: P / Hkv = %d / %lld",
           (long long)(llama70.H / P32), P32, (long long)llama70.Hkv)},
      {fmt("Make this layer MQA (Hkv = 1). Ulysses' forward bytes per rank at P = %d?", P),
       mqa_bytes, grouped(int64_t(mqa_bytes)) + " bytes",
       fmt("the one K/V head still goes to every rank, Hkv' = P = %d as with Hkv = %lld: (2 + 2 Hkv'/H) N h "
           "(P-1)/P^2 x 4, the same bytes",
           P, (long long)cfg.Hkv)},
  });
}

}  // namespace ringside::lessons

// Lesson 2: Megatron sequence parallelism. Tensor parallelism splits the GEMMs; sequence
// parallelism splits what lies between them by tokens, and the all-reduces of TP become an
// all-gather in and a reduce-scatter out: the same bytes in the forward, and a quarter more
// over forward and backward, since the backward gathers the norms' outputs again. Plain TP
// runs beside it, so that every comparison is measured.
#include <map>

#include "layer/reference.h"
#include "lessons/lesson.h"
#include "parallel/formulas.h"
#include "run/runner.h"

namespace ringside::lessons {

namespace {

// Megatron's names for the two conjugate operators (Korthikanti et al. 2022, figure 5). In the
// backward each sublayer's all-gathers come in the code's order: the MLP gathers dz (g-bar's
// backward), then h2 again for dW_1; the output projection gathers dy; QKV gathers h1 again.
const char* megatron_name(const std::string& op, const std::string& phase, const std::string& sublayer, int nth_in_sublayer) {
  if (op == "all_gather" && phase == "forward") return "g";
  if (op == "all_gather") return sublayer == "qkv" || (sublayer == "mlp" && nth_in_sublayer == 1) ? "re-gather for dW" : "g-bar (backward)";
  if (op == "reduce_scatter") return phase == "forward" ? "g-bar" : "g (backward)";
  return "";
}

}  // namespace

void megatron_sp(Script& L) {
  LayerConfig cfg;
  cfg.b = 1, cfg.s = 256, cfg.h = 128, cfg.H = 8, cfg.Hkv = 4, cfg.f = 512;
  const int P = 4;
  const int64_t b = cfg.b, s = cfg.s, h = cfg.h, d = cfg.d(), N = cfg.tokens();
  // The un-reduced gradients too: step 5 shows what forgetting their all-reduce gives.
  const RunPlan sp_plan = plan_of("tp-sp", cfg, P), tp_plan = plan_of("tp", cfg, P);
  const std::vector<RunRecord> rr = L.run(sp_plan, "tp-sp", {}, RankOptions{.keep_partial_grads = true});
  const std::vector<RunRecord> plain = L.run(tp_plan, "tp");
  const trace::RankTrace* r0 = nullptr;
  for (const trace::RankTrace& t : L.trace.ranks)
    if (t.strategy == "tp-sp" && t.rank == 0) r0 = &t;

  // ---- 1. who holds what -------------------------------------------------------------------
  L.step("Who holds what: heads and f by rank, tokens by rank in between", L.phase("tp-sp"));
  L.say("TP+SP on P = %d ranks; the layer:", P);
  L.say_config(cfg);
  L.say("Inside the attention and MLP blocks each rank owns a slice of the weights (TP): query");
  L.say("heads and their K/V heads (W_qkv's columns, W_o's rows) and a slice of f (W_1's columns,");
  L.say("W_2's rows). Between the blocks (LayerNorm, dropout, residual) each rank holds s/P tokens");
  L.say("of the whole hidden state (SP): [b, s/P, h] instead of TP's replicated [b, s, h].");
  L.blank();
  Table t1({"rank", "tokens (between blocks)", "q heads", "kv heads", "f columns", "W_qkv shard", "W_1 shard"});
  const int64_t Hl = cfg.H / P, Hkvl = cfg.Hkv / P, fl = cfg.f / P, sl = s / P;
  for (int r = 0; r < P; ++r)
    t1.row({std::to_string(r), fmt("[%lld, %lld)", (long long)(r * sl), (long long)((r + 1) * sl)),
            fmt("%lld-%lld", (long long)(r * Hl), (long long)((r + 1) * Hl - 1)),
            Hkvl == 1 ? std::to_string(r * Hkvl) : fmt("%lld-%lld", (long long)(r * Hkvl), (long long)((r + 1) * Hkvl - 1)),
            fmt("[%lld, %lld)", (long long)(r * fl), (long long)((r + 1) * fl)),
            fmt("[%lld, %lld]", (long long)h, (long long)((Hl + 2 * Hkvl) * d)), fmt("[%lld, %lld]", (long long)h, (long long)fl)});
  L.table(t1);
  L.blank();
  L.say("Every rank validated H %% P, Hkv %% P, f %% P and s %% P before any communication: TP+SP");
  L.say("cannot use more ranks than it has K/V heads (here %lld).", (long long)cfg.Hkv);

  // ---- 2. the forward's collectives, from the trace ----------------------------------------
  // The collective spans of rank 0, outermost only (an all-reduce nests its two halves).
  auto collectives = [&](const std::string& phase) {
    std::map<int64_t, const trace::Event*> by_call;  // call number -> its outermost span
    for (const trace::Event& e : r0->events)
      if (e.kind == trace::Kind::collective && e.phase == phase) {
        const trace::Event*& o = by_call[e.collective];
        if (!o || e.dur_ns > o->dur_ns) o = &e;
      }
    std::vector<const trace::Event*> out;
    for (const auto& [call, e] : by_call) out.push_back(e);
    return out;
  };
  const double e4 = 4;  // fp32 bytes
  L.step("Forward: all-gather in, reduce-scatter out", L.phase("tp-sp", "forward"));
  L.say("The forward, as rank 0's trace recorded it. (The ranks start together at a barrier; an");
  L.say("all-gather still waits for the slowest rank to arrive, so its span includes that wait.)");
  L.say("Before each column-parallel GEMM (QKV, W_1)");
  L.say("the ranks need every token: an all-gather along the sequence, [b, s/P, h] -> [b, s, h].");
  L.say("After each row-parallel GEMM (W_o, W_2) every rank holds a partial sum over its heads or");
  L.say("f slice for all tokens: a reduce-scatter sums them and leaves each rank its s/P tokens.");
  L.say("Megatron calls the two operators g (entering a TP block) and g-bar (leaving it).");
  L.blank();
  Table t2({"#", "collective", "Megatron", "sublayer", "in -> out", "bytes sent"});
  int64_t fwd_sent = 0;
  for (const trace::Event* e : collectives("forward")) {
    const bool ag = e->name == "all_gather";
    t2.row({std::to_string(e->collective), e->name, megatron_name(e->name, "forward", e->sublayer, 0), e->sublayer,
            ag ? fmt("[%lld, %lld, %lld] -> [%lld, %lld, %lld]", (long long)b, (long long)sl, (long long)h, (long long)b,
                     (long long)s, (long long)h)
               : fmt("[%lld, %lld, %lld] -> [%lld, %lld, %lld]", (long long)b, (long long)s, (long long)h, (long long)b,
                     (long long)sl, (long long)h),
            grouped(e->bytes)});
    fwd_sent += e->bytes;
  }
  L.table(t2);
  L.record("forward_collectives", double(collectives("forward").size()));
  L.blank();
  L.say("Each moves N h (P-1)/P elements per rank: %s bytes in fp32.", grouped(int64_t(N * h * (P - 1) / P * e4)).c_str());

  // ---- 3. the same volume as TP, in the forward -------------------------------------------
  L.step("Forward: the same bytes as tensor parallelism's all-reduces", L.phase("tp", "forward"));
  L.say("Plain TP (Megatron without --sequence-parallel, the strategy \"tp\", run beside it in this");
  L.say("trace) ends each block with an all-reduce of [b, s, h]. A ring all-reduce IS a");
  L.say("reduce-scatter followed by an all-gather: 2 N h (P-1)/P elements per rank. SP moves the");
  L.say("all-gather half to the start of the next block and runs LayerNorm and dropout on the");
  L.say("scattered tokens in between, so in the forward the bytes are the same and the");
  L.say("activations between the blocks shrink by P. (The backward differs: step 4.)");
  L.blank();
  const double formula = L.record("forward_bytes_formula", 4.0 * N * h * (P - 1) / P * e4);
  const double tp = L.record("tp_all_reduce_bytes", 2 * (2.0 * N * h * (P - 1) / P) * e4);
  Table t3({"rank", "TP+SP (measured)", "4 N h (P-1)/P", "TP (measured)", "2 all-reduces"});
  for (int r = 0; r < P; ++r) {
    L.record(fmt("forward_bytes_rank%d", r), double(rr[size_t(r)].forward.bytes_sent));
    L.record(fmt("tp_forward_bytes_rank%d", r), double(plain[size_t(r)].forward.bytes_sent));
    t3.row({std::to_string(r), grouped(rr[size_t(r)].forward.bytes_sent), grouped(int64_t(formula)),
            grouped(plain[size_t(r)].forward.bytes_sent), grouped(int64_t(tp))});
  }
  L.table(t3);
  L.record("forward_bytes_trace_rank0", double(fwd_sent));

  // ---- 4. backward ---------------------------------------------------------------------------
  L.step("Backward: the two swap, the norms' outputs are gathered again", L.phase("tp-sp", "backward"));
  L.say("In the backward an all-gather's conjugate is a reduce-scatter and vice versa. But the");
  L.say("weight gradients of the column-parallel GEMMs need their inputs for all s tokens:");
  L.say("dW_qkv = h1^T dqkv and dW_1 = h2^T du, where h1 and h2 are the LayerNorms' outputs.");
  L.say("SP kept only each rank's s/P tokens of them (that is its memory saving), so Megatron");
  L.say("all-gathers them again (\"re-gather for dW\"). Rank 0's backward, in order:");
  L.blank();
  Table t4({"#", "collective", "Megatron", "sublayer", "bytes sent by rank 0"});
  std::map<std::string, int> gathers;  // all-gathers so far, by sublayer
  for (const trace::Event* e : collectives("backward")) {
    const int nth = e->name == "all_gather" ? gathers[e->sublayer]++ : 0;
    t4.row({std::to_string(e->collective), e->name, megatron_name(e->name, "backward", e->sublayer, nth), e->sublayer,
            grouped(e->bytes)});
  }
  L.table(t4);
  L.blank();
  L.say("The last one, in grad_sync, is an all-reduce of %lld floats: the gradients of the", (long long)(6 * h));
  L.say("parameters that live in the sequence-parallel region (both LayerNorms' gamma and beta,");
  L.say("o.bias, fc2.bias). Each rank saw only s/P tokens, so each holds a partial sum.");
  L.blank();
  // Forward and backward together, both strategies, each against its formula.
  const double half = N * h * (P - 1) / P * e4;  // one all-gather or reduce-scatter of [b, s, h]
  const double params = 2.0 * 6 * h * (P - 1) / P * e4;  // the all-reduce of the 6 h SP parameters
  const double sp_total = L.record("sp_total_bytes_formula", 10 * half + params);
  const double tp_total = L.record("tp_total_bytes_formula", 8 * half);
  L.record("sp_total_bytes_rank0", double(rr[0].forward.bytes_sent + rr[0].backward.bytes_sent));
  L.record("tp_total_bytes_rank0", double(plain[0].forward.bytes_sent + plain[0].backward.bytes_sent));
  Table t4b({"rank 0, bytes", "forward", "backward", "total (measured)", "formula"});
  t4b.row({"TP: 4 all-reduces", grouped(plain[0].forward.bytes_sent), grouped(plain[0].backward.bytes_sent),
           grouped(plain[0].forward.bytes_sent + plain[0].backward.bytes_sent), grouped(int64_t(tp_total))});
  t4b.row({"TP+SP: 6 AG, 4 RS, params", grouped(rr[0].forward.bytes_sent), grouped(rr[0].backward.bytes_sent),
           grouped(rr[0].forward.bytes_sent + rr[0].backward.bytes_sent), grouped(int64_t(sp_total))});
  L.table(t4b);
  L.say("  (formulas, x 4 bytes: TP 8 N h (P-1)/P; TP+SP 10 N h (P-1)/P + 2 x 6 h (P-1)/P)");
  L.blank();
  L.say("Over the whole layer SP sends %.2fx TP's bytes: Korthikanti et al. say SP adds no", L.record("sp_over_tp_bytes", sp_total / tp_total));
  L.say("communication, which holds for the forward. The two re-gathers buy the memory of");
  L.say("step 6; keeping h1 and h2 whole instead would cost 2 h elements a token on every rank.");
  L.say("Megatron starts the re-gather asynchronously and computes the input gradient meanwhile;");
  L.say("ringside gathers first, so its modeled timeline shows the re-gather exposed.");

  // ---- 5. the LayerNorm gradient bug -----------------------------------------------------------
  L.step("Forgetting that all-reduce: the classic SP bug", L.window("tp-sp", [](const trace::Event& e) {
           return e.kind == trace::Kind::sublayer && e.name == "grad_sync";
         }));
  const ReferenceRun ref = run_reference(cfg, DType::f64);
  L.say("ln1.gamma's gradient against the fp64 reference (relative Frobenius error):");
  L.blank();
  Table t5({"rank", "partial (its s/P tokens only)", "after the all-reduce"});
  double min_partial = 1e300, max_partial = 0, worst_full = 0;
  for (int r = 0; r < P; ++r) {
    const double partial = relative_error(rr[size_t(r)].partial_grads.ln1_gamma, ref.grads.ln1_gamma);
    const double full = relative_error(rr[size_t(r)].local_grads.ln1_gamma, ref.grads.ln1_gamma);
    min_partial = std::min(min_partial, partial), max_partial = std::max(max_partial, partial), worst_full = std::max(worst_full, full);
    t5.row({std::to_string(r), fmt("%.3f", partial), fmt("%.1e", full)});
  }
  L.table(t5);
  L.record("ln1_gamma_error_partial_min", min_partial);
  L.record("ln1_gamma_error_allreduced_max", worst_full);
  L.blank();
  L.say("Without the all-reduce each rank would step its LayerNorm with the gradient of its own");
  L.say("s/P tokens: %.0f%% to %.0f%% wrong here, not a rounding error, and the ranks' copies of gamma", 100 * min_partial,
        100 * max_partial);
  L.say("would drift apart.");
  L.say("Nothing crashes: the loss just trains worse. Megatron all-reduces these over the TP group.");

  // ---- 6. memory ----------------------------------------------------------------------------
  L.step("What SP saves: the activations between the blocks, split by P", L.phase("tp-sp"));
  const double ref_saved = double(saved_activation_bytes(cfg, DType::f32));
  // Plain TP keeps x, h1, x2, h2 and the norms' statistics whole: (4 h + 2 z) per token.
  const double whole = double(N * (4 * h + 2 * cfg.norm_stats())) * e4;
  Table t6({"rank", "TP+SP (measured)", "reference / P", "TP (measured)", "formula"});
  for (int r = 0; r < P; ++r) {
    L.record(fmt("saved_rank%d", r), double(rr[size_t(r)].peak_saved));
    L.record(fmt("tp_saved_rank%d", r), double(plain[size_t(r)].peak_saved));
    t6.row({std::to_string(r), grouped(rr[size_t(r)].peak_saved), grouped(int64_t(ref_saved / P)),
            grouped(plain[size_t(r)].peak_saved), grouped(parallel_saved_bytes(tp_plan, r, DType::f32))});
  }
  L.record("tp_saved_formula", double(parallel_saved_bytes(tp_plan, 0, DType::f32)));
  L.say("With SP every saved tensor is split by P: by heads or f inside the blocks, by tokens");
  L.say("between them; each rank keeps exactly 1/P of the reference's bytes. Plain TP keeps the");
  L.say("region between the blocks whole on every rank: x, h1, x2, h2 and the norms' statistics,");
  L.say("N (4 h + 2 z) elements (z = 2 statistics a token for LayerNorm):");
  L.blank();
  L.table(t6);
  L.blank();
  L.say("TP keeps %s more bytes a rank: (P-1)/P of those %s. This is", grouped(L.record("tp_extra_saved", double(plain[0].peak_saved - rr[0].peak_saved))).c_str(),
        grouped(int64_t(L.record("tp_whole_region_bytes", whole))).c_str());
  L.say("Korthikanti et al.'s 10 s b h term of lesson 1 for this layer: their 8 s b h (the two");
  L.say("norms' inputs and outputs, in 16-bit) plus 2 s b h of dropout masks, which ringside");
  L.say("redraws from its Philox key instead of keeping. The communication is on the critical");
  L.say("path, though: each block waits for its all-gather (the trace's vermillion strips,");
  L.say("\"exposed comm\" in its key). That is why TP+SP stays inside a node, on NVLink.");

  // ---- check yourself ------------------------------------------------------------------------
  const int P8 = 8;
  const double fwd8 = 4.0 * N * h * (P8 - 1) / P8 * e4;
  const double extra = 2 * half + params;
  const RunPlan tp2 = plan_of("tp", cfg, 2);
  const double tp2_saved = double(parallel_saved_bytes(tp2, 0, DType::f32));
  L.check_yourself({
      {fmt("TP+SP over P = %d ranks on this layer (if Hkv allowed it): forward bytes a rank sends?", P8), fwd8,
       grouped(int64_t(fwd8)) + " bytes", "2 all-gathers + 2 reduce-scatters, 4 N h (P-1)/P x 4 bytes"},
      {fmt("At P = %d, how many more bytes does rank 0 send under TP+SP than under TP, forward and", P) +
           " backward together?",
       extra, grouped(int64_t(extra)) + " bytes",
       "the two re-gathers, 2 N h (P-1)/P, and the SP parameters' all-reduce, 2 x 6 h (P-1)/P, x 4 bytes"},
      {"Plain TP on P = 2 ranks: saved activations a rank keeps?", tp2_saved, grouped(int64_t(tp2_saved)) + " bytes",
       "N (4 h + 2 z) whole, plus half of the rest: (reference - N (4 h + 2 z)) / 2, in fp32"},
  });
}

}  // namespace ringside::lessons

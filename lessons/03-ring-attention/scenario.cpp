// Lesson 3: ring attention (Liu et al. 2023). Softmax over all keys can be computed one key
// block at a time and merged through the log-sum-exp; so each rank keeps its queries and the
// K/V blocks travel around a ring, each transfer hidden behind the previous block's compute.
#include <chrono>
#include <cmath>

#include "kernels/cpu/attention.h"
#include "lessons/lesson.h"
#include "parallel/formulas.h"
#include "trace/metrics.h"

namespace ringside::lessons {

namespace {

// The merge by hand: 2 queries, 2 keys in two blocks of one, d = 2, one head, scale 1.
void merge_by_hand(Script& L) {
  namespace k = kernels::cpu;
  const double q[4] = {1, 2, 0, 1}, key[4] = {1, 0, 2, 1}, v[4] = {1, 2, 3, 4};
  k::AttentionParams p;
  p.b = 1, p.sq = 2, p.H = 1, p.Hkv = 1, p.d = 2, p.causal = false, p.softmax_scale = 1;
  p.sk = 1;  // one key per block
  double out_a[4], lse_a[2], out_b[4], lse_b[2];
  k::attention_forward(p, q, key, v, out_a, lse_a);          // block A: key 0
  k::attention_forward(p, q, key + 2, v + 2, out_b, lse_b);  // block B: key 1
  double out[4], lse[2];
  std::copy(out_a, out_a + 4, out), std::copy(lse_a, lse_a + 2, lse);
  k::lse_merge(1, 2, 1, 2, out, lse, out_b, lse_b);
  p.sk = 2;  // both keys at once, for comparison
  double out_full[4], lse_full[2];
  k::attention_forward(p, q, key, v, out_full, lse_full);

  L.say("Queries q0 = (1, 2), q1 = (0, 1); keys k0 = (1, 0), k1 = (2, 1); values v0 = (1, 2),");
  L.say("v1 = (3, 4); softmax_scale 1 to keep the arithmetic by hand. Block A holds key 0, block B");
  L.say("key 1. Each block alone gives a partial out and lse = log sum exp of the row's scores:");
  L.blank();
  L.say("  q0: scores 1 (A) and 4 (B): lse_A = 1, out_A = v0;  lse_B = 4, out_B = v1");
  L.say("  merged lse = max + log1p(exp(min - max)) = 4 + log1p(e^-3) = %.6f", lse[0]);
  L.say("  merged out = exp(lse_A - lse) out_A + exp(lse_B - lse) out_B");
  L.say("             = %.6f (1, 2) + %.6f (3, 4) = (%.6f, %.6f)", std::exp(lse_a[0] - lse[0]), std::exp(lse_b[0] - lse[0]),
        out[0], out[1]);
  L.blank();
  Table t({"row", "lse_A", "lse_B", "merged lse", "full lse", "merged out", "full attention"});
  double err = 0;
  for (int i = 0; i < 2; ++i) {
    t.row({fmt("q%d", i), fmt("%.6f", lse_a[i]), fmt("%.6f", lse_b[i]), fmt("%.6f", lse[i]), fmt("%.6f", lse_full[i]),
           fmt("(%.6f, %.6f)", out[2 * i], out[2 * i + 1]), fmt("(%.6f, %.6f)", out_full[2 * i], out_full[2 * i + 1])});
    err = std::max({err, std::fabs(lse[i] - lse_full[i]), std::fabs(out[2 * i] - out_full[2 * i]),
                    std::fabs(out[2 * i + 1] - out_full[2 * i + 1])});
  }
  L.table(t);
  L.record("merge_lse_q0", lse[0]);
  L.record("merge_out_q0_0", out[0]);
  L.record("merge_max_abs_error", err);
  L.blank();
  L.say("The merge is exact (largest difference %.1e in fp64): the blocks can come in any order,", err);
  L.say("one at a time, and nothing of size s x s is ever needed. This is what each ring step does.");
}

}  // namespace

void ring_attention(Script& L) {
  // Full (non-causal) attention, contiguous: every step does the same work. Lesson 4 adds the mask.
  LayerConfig cfg;
  cfg.b = 1, cfg.s = 1024, cfg.h = 128, cfg.H = 8, cfg.Hkv = 4, cfg.f = 512;
  cfg.causal = false, cfg.layout = Layout::contiguous;
  const int P = 4;
  const int64_t c = cfg.s / P, d = cfg.d(), e = 4;  // block tokens, head dim, fp32 bytes
  const int64_t kv_block = 2 * cfg.b * c * cfg.Hkv * d * e;  // K and V of one block
  const Strategy ring = find_strategy("ring");

  L.step("The LSE merge by hand, on a 2 x 2 example");
  merge_by_hand(L);

  const std::vector<RankResult> rr = L.run(ring, cfg, P, "ring");
  auto block = [&](int r) { return fmt("[%lld, %lld)", (long long)(r * c), (long long)((r + 1) * c)); };

  L.step("Who holds what", L.phase("ring", "forward"));
  L.say("Ring attention on P = %d ranks; the layer:", P);
  L.say("  %s", cfg.summary().c_str());
  L.say("Every rank keeps its own s/P = %lld query tokens for the whole layer. Its K/V block (the", (long long)c);
  L.say("keys and values of those tokens) is what travels: %s bytes per block", grouped(kv_block).c_str());
  L.say("(2 x b x s/P x Hkv x d x 4). Each step, rank r sends the block it holds to rank r+1 and");
  L.say("receives from rank r-1.");
  L.blank();
  Table t1({"rank", "query tokens", "q", "k, v", "K/V block bytes"});
  for (int r = 0; r < P; ++r)
    t1.row({std::to_string(r), block(r), fmt("[1, %lld, %lld, %lld]", (long long)c, (long long)cfg.H, (long long)d),
            fmt("[1, %lld, %lld, %lld]", (long long)c, (long long)cfg.Hkv, (long long)d), grouped(kv_block)});
  L.table(t1);
  L.record("kv_block_bytes", double(kv_block));

  // ---- the P steps of the forward ring, from the ranks' step records.
  for (int i = 0; i < P; ++i) {
    L.step(fmt("Forward ring step %d of %d", i, P - 1), L.window("ring", [i](const trace::Event& ev) {
             return ev.cat == "ring_step" && ev.phase == "forward" && ev.step == i;
           }));
    if (i == 0) {
      L.say("Step 0: every rank computes its queries against its own K/V block, and at the same");
      L.say("time (posted first) sends that block right and receives the left neighbour's.");
      L.say("'waited' is the time after the compute until this step's transfers were done: zero");
      L.say("when the transfer hid behind the compute. (Times: threads sharing 2 cores, they vary.)");
    } else if (i < P - 1) {
      L.say("Step %d: the block that arrived during step %d is computed on and merged into the", i, i - 1);
      L.say("running (out, lse), while it travels on to the right.");
    } else {
      L.say("Step %d, the last: the final block arrives; nothing is sent. Every query has now seen", i);
      L.say("every key: P = %d compute steps, and P - 1 = %d transfers per rank.", P, P - 1);
    }
    L.blank();
    Table t({"rank", "K/V of rank", "computes q x k (tokens)", "MFLOP", "to", "sent", "compute", "waited"});
    for (int r = 0; r < P; ++r) {
      const StepRecord& s = rr[size_t(r)].steps[size_t(i)];
      t.row({std::to_string(r), fmt("%d %s", s.block_of, block(s.block_of).c_str()), s.computed, fmt("%.2f", s.flops / 1e6),
             i < P - 1 ? std::to_string((r + 1) % P) : "-", grouped(s.bytes_sent), fmt("%.2f ms", s.compute_s * 1e3),
             fmt("%.2f ms", s.wait_s * 1e3)});
      L.record(fmt("forward_step%d_rank%d_bytes", i, r), double(s.bytes_sent));
      L.record(fmt("forward_step%d_rank%d_block_of", i, r), double(s.block_of));
    }
    L.table(t);
  }

  // ---- backward
  L.step("Backward: the ring again, and dK/dV travel home", L.phase("ring", "backward"));
  L.say("The backward runs the same ring. dQ of a rank's queries stays home and accumulates. The");
  L.say("gradients of a K/V block, dK and dV, accumulate on every rank that used the block, so they");
  L.say("travel with it: after P hops (one more than K/V) each block's dK/dV are back at their owner.");
  L.say("Each dK/dV hop is posted after a step and waited for after the next one's compute, as");
  L.say("ring-flash-attention does, so it hides behind compute like the forward's K/V.");
  L.blank();
  Table tb({"step", "rank 0 holds K/V of", "computes", "bytes sent by rank 0 (K/V + dK/dV)"});
  for (int i = 0; i < P; ++i) {
    const StepRecord& s = rr[0].steps[size_t(P + i)];
    tb.row({std::to_string(i), fmt("rank %d", s.block_of), s.computed, grouped(s.bytes_sent)});
    L.record(fmt("backward_step%d_rank0_bytes", i), double(s.bytes_sent));
  }
  L.table(tb);
  L.blank();
  L.say("Forward bytes per rank: 2 (Hkv/H) N h (P-1)/P = %s; measured %s.",
        grouped(ring_comm_bytes(cfg, P, 0, DType::f32).forward).c_str(), grouped(rr[0].forward.bytes_sent).c_str());
  L.record("forward_bytes_rank0", double(rr[0].forward.bytes_sent));
  L.record("forward_bytes_formula", double(ring_comm_bytes(cfg, P, 0, DType::f32).forward));

  // ---- when overlap hides the transfer
  // Two ranks for this part: one per core of a 2-core machine, so that the times are the
  // ranks' own and not the scheduler's. A block is then c2 = s/2 tokens.
  const int P2 = 2;
  const int64_t c2 = cfg.s / P2;
  // This CPU's attention rate F on one such block, alone on a core (best of 3).
  double F = 0;
  {
    kernels::cpu::AttentionParams p;
    p.b = cfg.b, p.sq = c2, p.sk = c2, p.H = cfg.H, p.Hkv = cfg.Hkv, p.d = d, p.causal = false;
    p.softmax_scale = cfg.softmax_scale();
    std::vector<float> qb(size_t(c2 * cfg.H * d), 0.01f), kb(size_t(c2 * cfg.Hkv * d), 0.02f), vb(kb), ob(qb.size());
    std::vector<float> lb(size_t(cfg.H * c2));
    for (int rep = 0; rep < 3; ++rep) {
      const auto t0 = std::chrono::steady_clock::now();
      kernels::cpu::attention_forward(p, qb.data(), kb.data(), vb.data(), ob.data(), lb.data());
      const double sec = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      F = std::max(F, kernels::cpu::attention_forward_flops(p) / std::max(sec, 1e-9));
    }
  }
  // A step's compute, 4 c^2 d H FLOPs, outlasts its transfer, 2 c Hkv d e bytes, when
  // 4 c^2 d H / F >= 2 c Hkv d e / B, i.e. c >= (e / 2) (Hkv / H) F / B tokens.
  auto threshold = [&](double B) { return (double(e) / 2) * (double(cfg.Hkv) / double(cfg.H)) * F / B; };
  const double B_slow = threshold(1) / (3.0 * double(c2)), B_fast = threshold(1) * 3.0 / double(c2);  // c* = 3c, c/3
  const std::string slow = "ring slow link", fast = "ring fast link";
  LocalOptions lo;
  lo.bandwidth_gbps = B_slow / 1e9;
  L.run(ring, cfg, P2, slow, lo);
  lo.bandwidth_gbps = B_fast / 1e9;
  L.run(ring, cfg, P2, fast, lo);
  const std::vector<trace::StrategyMetrics> metrics = trace::compute_metrics(L.trace);

  L.step("When overlap hides the transfer: c >= F/B", L.phase(slow, "forward"));
  L.say("A step computes c queries against c keys: 4 c^2 d FLOPs per head at F FLOP/s. Its");
  L.say("transfer moves c keys and values: 4 c d bytes per head in 16-bit at B bytes/s. The");
  L.say("transfer hides when 4 c^2 d / F >= 4 c d / B, that is when c >= F/B (Liu et al. 2023).");
  const double a100 = L.record("a100_threshold_tokens", 312e12 / 300e9);
  L.say("An A100: 312 TFLOP/s bf16 and 300 GB/s NVLink give c >= %.0f tokens per GPU per block.", a100);
  L.blank();
  L.say("Here (fp32, GQA): c >= (e/2)(Hkv/H) F/B. This CPU computes one block's attention at");
  L.say("F = %.2f GFLOP/s. The scenario ran the ring twice more, on P = 2 ranks (c = %lld tokens per", F / 1e9, (long long)c2);
  L.say("block) with an artificial link: one slow enough that c* = 3c, one fast enough that c* = c/3:");
  L.blank();
  Table t({"run", "link", "threshold c*", "c / c*: at most hidden", "hidden (measured)"});
  L.record("block_tokens", double(c2));
  for (const auto& [label, B] : {std::pair{slow, B_slow}, std::pair{fast, B_fast}}) {
    std::string per_step;
    for (const trace::StrategyMetrics& m : metrics)
      if (m.strategy == label)
        for (const trace::StepMetrics& st : m.steps)
          if (st.phase == "forward" && st.step < P2 - 1) {
            const double pct = st.total.overlap_pct();
            per_step += (per_step.empty() ? "" : "  ") + (std::isnan(pct) ? std::string("-") : fmt("%.0f%%", pct));
          }
    L.record(label == slow ? "slow_threshold_tokens" : "fast_threshold_tokens", threshold(B));
    t.row({label, fmt("%.1f MB/s", B / 1e6), fmt("%.0f tokens", threshold(B)),
           fmt("%.0f%%", 100 * std::min(1.0, double(c2) / threshold(B))), per_step});
  }
  L.table(t);
  L.blank();
  L.say("Below the threshold the ranks wait for every block (red under the comm lanes); above it");
  L.say("the transfer disappears behind the compute (green). Longer sequences make c larger, so");
  L.say("ring attention hides its communication better the longer the context.");
}

}  // namespace ringside::lessons

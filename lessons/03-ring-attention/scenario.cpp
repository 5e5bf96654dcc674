// Lesson 3: ring attention (Liu et al. 2023). Softmax over all keys can be computed one key
// block at a time and merged through the log-sum-exp; so each rank keeps its queries and the
// K/V blocks travel around a ring, each transfer hidden behind the previous block's compute.
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
  cfg.causal = false;
  const int P = 4;
  const int64_t c = cfg.s / P, d = cfg.d(), e = 4;  // block tokens, head dim, fp32 bytes
  const int64_t kv_block = 2 * cfg.b * c * cfg.Hkv * d * e;  // K and V of one block
  const RunPlan ring = plan_of("ring", cfg, P, Layout::contiguous);

  L.step("The LSE merge by hand, on a 2 x 2 example");
  merge_by_hand(L);

  const std::vector<RunRecord> rr = L.run(ring, "ring");
  auto block = [&](int r) { return fmt("[%lld, %lld)", (long long)(r * c), (long long)((r + 1) * c)); };

  L.step("Who holds what", L.phase("ring", "forward"));
  L.say("Ring attention on P = %d ranks; the layer:", P);
  L.say_config(cfg);
  L.say("Every rank keeps its own s/P = %lld query tokens for the whole layer. Its K/V block (the", (long long)c);
  L.say("keys and values of those tokens) is what travels: %s bytes per block", grouped(kv_block).c_str());
  L.say("(2 x b x s/P x Hkv x d x 4). Each step, rank r sends the block it holds to rank r+1 and");
  L.say("receives from rank r-1. The attention here is non-causal: every query sees every key, so");
  L.say("every step is the same work on every rank. Under a causal mask (a language model's)");
  L.say("contiguous blocks are not: lesson 4 shows why, and the zigzag layout that balances them,");
  L.say("step by step (which K/V block each rank computes with at each step, and which half of it).");
  L.blank();
  Table t1({"rank", "query tokens", "q", "k, v", "K/V block bytes"});
  for (int r = 0; r < P; ++r)
    t1.row({std::to_string(r), block(r), fmt("[1, %lld, %lld, %lld]", (long long)c, (long long)cfg.H, (long long)d),
            fmt("[1, %lld, %lld, %lld]", (long long)c, (long long)cfg.Hkv, (long long)d), grouped(kv_block)});
  L.table(t1);
  L.record("kv_block_bytes", double(kv_block));

  // ---- the P steps of the forward ring, from the ranks' step records.
  for (int i = 0; i < P; ++i) {
    L.step(fmt("Forward ring step %d (steps 0 to %d)", i, P - 1), L.window("ring", [i](const trace::Event& ev) {
             return ev.kind == trace::Kind::ring_step && ev.phase == "forward" && ev.step == i;
           }));
    if (i == 0) {
      L.say("Step 0: every rank computes its queries against its own K/V block, and at the same");
      L.say("time (posted first) sends that block right and receives the left neighbour's. Whether");
      L.say("the transfer hides behind the compute is a question of the GPU and its link: step 8");
      L.say("answers it on %s.", L.hw.name.c_str());
    } else if (i < P - 1) {
      L.say("Step %d: the block that arrived during step %d is computed on and merged into the", i, i - 1);
      L.say("running (out, lse), while it travels on to the right.");
    } else {
      L.say("Step %d, the last: the final block arrives; nothing is sent. Every query has now seen", i);
      L.say("every key: P = %d compute steps, and P - 1 = %d transfers per rank.", P, P - 1);
    }
    L.blank();
    Table t({"rank", "K/V of rank", "computes q x k (tokens)", "MFLOP", "to", "sent"});
    for (int r = 0; r < P; ++r) {
      const StepRecord& s = rr[size_t(r)].steps[size_t(i)];
      t.row({std::to_string(r), fmt("%d %s", s.block_of, block(s.block_of).c_str()), s.computed, fmt("%.2f", s.flops / 1e6),
             i < P - 1 ? std::to_string((r + 1) % P) : "-", grouped(s.bytes_sent)});
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
  L.say("ring-flash-attention does, so it can hide behind compute like the forward's K/V; the last");
  L.say("hop, home, has no compute left to hide behind.");
  L.blank();
  Table tb({"step", "rank 0 holds K/V of", "computes", "bytes sent by rank 0 (K/V + dK/dV)"});
  for (int i = 0; i < P; ++i) {
    const StepRecord& s = rr[0].steps[size_t(P + i)];
    tb.row({std::to_string(i), fmt("rank %d", s.block_of), s.computed, grouped(s.bytes_sent)});
    L.record(fmt("backward_step%d_rank0_bytes", i), double(s.bytes_sent));
  }
  L.table(tb);
  L.blank();
  L.say("Forward bytes per rank: 2 (Hkv/H) N h (P-1)/P x 4 B = %s; measured %s.",
        grouped(parallel_comm_bytes(ring, 0, DType::f32).forward).c_str(), grouped(rr[0].forward.bytes_sent).c_str());
  L.record("forward_bytes_rank0", double(rr[0].forward.bytes_sent));
  L.record("forward_bytes_formula", double(parallel_comm_bytes(ring, 0, DType::f32).forward));

  // ---- when overlap hides the transfer, on a GPU
  // The same ring code, dry-run at two block sizes of a GPU-sized layer (multi-head, d = 128)
  // and modeled on L.hw: one block below the threshold, one above.
  constexpr int P3 = 4;
  // The link between ring neighbours, as the profile's topology places the P3 GPUs: NVLink when
  // they share a domain, else the network.
  auto link = [&](const model::Hardware& hw) -> const model::Tier& {
    return hw.tiers[hw.topology(P3).span({0, 1, 2, 3}).tier];
  };
  static_assert(P3 == 4, "the ring's members above");
  const double F = L.hw.peak_flops_bf16, B = link(L.hw).bandwidth, alpha = link(L.hw).latency_s;
  const double c_star = L.record("threshold_tokens", F / B);
  const model::Hardware ib = model::load_hardware("h100-ib");
  const double c_star_ib = L.record("threshold_tokens_h100_ib", ib.peak_flops_bf16 / link(ib).bandwidth);
  LayerConfig gpu;
  gpu.b = 1, gpu.h = 2048, gpu.H = 16, gpu.Hkv = 16, gpu.f = 8192;
  gpu.causal = false;
  const int64_t sizes[] = {512, 2048};  // tokens per block: c* / 2 and 2 c* on an A100
  struct Crossover {
    int64_t c;
    std::string label;
    double compute_ns, transfer_ns, exposed_ns, hidden_pct;
  };
  // Each block size twice: at the datasheet peak (the roofline, where c* = F/B is exact) and at
  // the rates the kernels and NCCL really reach (the profile's efficiency).
  model::ModelOptions peak;
  peak.efficiency = "ideal";
  auto crossover = [&](int64_t c, const std::string& label, const model::ModelOptions& options, double link_bandwidth) {
    gpu.s = c * P3;
    const trace::StrategyMetrics& m = L.dry_run(plan_of("ring", gpu, P3, Layout::contiguous), label, nullptr, options);
    // Forward step 1: a block that arrived, computed on while the next one moves.
    const trace::StepMetrics* st = nullptr;
    for (const trace::StepMetrics& x : m.steps)
      if (x.phase == "forward" && x.step == 1) st = &x;
    RS_CHECK(st != nullptr, "lesson 3: no forward step 1 in ", label);
    // K and V go as two messages, one after the other on the sender's link, each bf16.
    const double kv_bytes = 2.0 * double(gpu.b * c * gpu.Hkv * gpu.d()) * 2;
    return Crossover{c, label, double(st->total.compute_ns) / P3, (2 * alpha + kv_bytes / link_bandwidth) * 1e9,
                     double(st->total.exposed_comm_ns) / P3, attention_hidden_pct(m)};
  };
  std::vector<Crossover> cross, real;
  for (int64_t c : sizes) {
    const Crossover x = crossover(c, fmt("ring c=%lld", (long long)c), peak, B);
    const std::string key = fmt("c%lld", (long long)c);
    L.record(key + "_step_compute_ns", x.compute_ns);
    L.record(key + "_step_transfer_ns", x.transfer_ns);
    L.record(key + "_step_exposed_ns", x.exposed_ns);
    L.record(key + "_attention_hidden_pct", x.hidden_pct);
    L.record(key + "_attention_flops_per_step", 4.0 * double(c * c * gpu.d() * gpu.H));
    cross.push_back(x);
  }
  // The achieved threshold: the c where a block's attention takes as long as its K/V transfer,
  // at the kernel's rate for a c x c block (which falls as c shrinks) and NCCL's share of the link.
  const bool achieved = L.hw.efficiency.present;
  const model::AttentionKernel* kernel = nullptr;
  double B_real = B, R = 0, k_half = 0, c_star_real = c_star, c_star_fixed = c_star, full_gpu = 0;
  const std::string family = model::attention_kernel_of(L.hw, {});
  if (achieved) {
    const model::Efficiency& e = L.hw.efficiency;
    kernel = &e.attention.at(family);
    B_real = B * link(L.hw).efficiency;
    R = kernel->forward.rate, k_half = kernel->forward.k_half;
    // At a full GPU, 4 c^2 d H / (R c / (c + k_half)) = 4 c Hkv d / B_nccl gives c* =
    // (Hkv/H) R / B_nccl - k_half: the block length where the kernel's slower rate meets the link.
    full_gpu = double(e.sms) * 128.0 / double(gpu.b * gpu.H);  // query tiles of 128 rows, one per SM
    const model::RingThreshold t = model::ring_threshold(L.hw, {}, link(L.hw), double(gpu.Hkv) / double(gpu.H));
    c_star_real = L.record("threshold_tokens_achieved", t.tokens);
    c_star_fixed = L.record("threshold_tokens_fixed_costs",
                            model::ring_threshold_with_fixed_costs(L.hw, {}, link(L.hw), gpu.b, gpu.H, gpu.Hkv, gpu.d()));
    for (int64_t c : sizes) {
      const Crossover x = crossover(c, fmt("ring c=%lld achieved", (long long)c), {}, B_real);
      const std::string key = fmt("c%lld_achieved", (long long)c);
      L.record(key + "_step_compute_ns", x.compute_ns);
      L.record(key + "_step_exposed_ns", x.exposed_ns);
      real.push_back(x);
    }
  }

  L.step("When overlap hides the transfer: c >= F/B", L.phase(L.modeled_name(cross[0].label), "forward"));
  L.say("A step computes c queries against c keys: 4 c^2 d FLOPs per head at F FLOP/s. Its");
  L.say("transfer moves c keys and values: 4 c d bytes per head in bf16 at B bytes/s. The");
  L.say("transfer hides when 4 c^2 d / F >= 4 c d / B, that is when c >= F/B (Liu et al. 2023).");
  L.say("On %s, F = %.4g TFLOP/s (bf16) and B = %.4g GB/s give c* = F/B = %s tokens.", L.hw.name.c_str(), F / 1e12,
        B / 1e9, grouped(int64_t(std::llround(c_star))).c_str());
  L.say("(With fewer K/V heads than query heads, Hkv < H, the transfer and so c* shrink by Hkv/H;");
  L.say("under a causal mask a balanced step computes half its c x c pairs, and c* doubles.)");
  L.blank();
  L.say("The same ring code, dry-run (no math, only the schedule) on P = %d GPUs for a", P3);
  L.say("layer of h = %lld, H = Hkv = %lld, d = %lld, and modeled on %s, at two block sizes c", (long long)gpu.h,
        (long long)gpu.H, (long long)gpu.d(), L.hw.name.c_str());
  L.say("(%s). Forward ring step 1, per GPU, and the whole layer's", 
        double(sizes[0]) < c_star && double(sizes[1]) >= c_star ? "one below c*, one above"
        : double(sizes[1]) < c_star                             ? "both below c* on this profile"
                                                                : "both above c* on this profile");
  L.say("attention traffic:");
  L.blank();
  Table t({"run", "c / c*", "compute", "K/V transfer", "exposed", "layer: attn hidden"});
  for (const Crossover& x : cross)
    t.row({x.label, fmt("%.2f", double(x.c) / c_star), format_ns(x.compute_ns), format_ns(x.transfer_ns), format_ns(x.exposed_ns),
           fmt("%.0f%%", x.hidden_pct)});
  L.table(t);
  L.blank();
  // The compute column is the whole step: the attention at F, and what is not matmul.
  const double attention_ns = L.record("c512_attention_ns", 4.0 * double(sizes[0] * sizes[0] * gpu.d() * gpu.H) / F * 1e9);
  const double rest_ns = L.record("c512_rest_ns", cross[0].compute_ns - attention_ns);
  L.say("compute is the whole step: the attention, 4 c^2 d H / F = %s at c = %lld, and the LSE",
        format_ns(attention_ns).c_str(), (long long)sizes[0]);
  L.say("merge into the running output with the block's slicing, %s (memory-bound: HBM's rate).",
        format_ns(rest_ns).c_str());
  L.say("transfer = 2 latency + 2 b c Hkv d x 2 B / B: K and V are two messages of %.0f us", alpha * 1e6);
  L.say("latency each; exposed = transfer - compute when positive. Below c* the GPUs wait at every");
  L.say("step (vermillion under the comm lanes in the viewer); above it the transfer runs under");
  L.say("compute.");
  L.say("'layer: attn hidden' is all of attention's traffic over forward and backward: even above c*");
  L.say("the backward's last dK/dV hop, home, has nothing left to hide behind. Longer sequences make");
  L.say("c larger, so the ring hides its traffic better the longer the context. These times are");
  L.say("modeled, so they are the same on every run.");
  if (L.hw.name != ib.name)
    L.say("`ringside lesson 3 --hw h100-ib` replays the two runs across InfiniBand, where c* is %s.",
          grouped(int64_t(std::llround(c_star_ib))).c_str());
  if (achieved) {
    L.blank();
    L.say("That threshold is the datasheet's: F is the peak of the tensor cores, B the link's line");
    L.say("rate (the table above is modeled at them: `--efficiency ideal`). Real kernels reach less,");
    const char* kernel_name = family == "fa2" ? "FlashAttention 2" : family == "fa3" ? "FlashAttention 3" : family == "fa4" ? "FlashAttention 4" : "cuDNN's attention";
    L.say("and less the shorter the block. %s on %s sustains R c / (c + %.0f)", kernel_name, L.hw.name.c_str(), k_half);
    L.say("for a block of c keys, with R = %.0f TFLOP/s (fitted to its published charts:", R / 1e12);
    L.say("docs/calibration.md); NCCL moves %.0f GB/s of the link's %.0f. So a short ring block is", B_real / 1e9, B / 1e9);
    L.say("both less work per byte and a slower kernel. Where they cross, at those rates:");
    L.blank();
    L.say("  c* (peak)     = F / B                        = %s tokens", grouped(int64_t(std::llround(c_star))).c_str());
    L.say("  c* (achieved) = R / B_nccl - k_half           = %s tokens",
          grouped(int64_t(std::llround(c_star_real))).c_str());
    L.say("  c* (achieved, each step's fixed costs too)   = %s tokens",
          grouped(int64_t(std::llround(c_star_fixed))).c_str());
    L.blank();
    L.say("The last counts what every step pays whatever its c: a kernel launch of %.0f us each, the", L.hw.efficiency.launch_s * 1e6);
    L.say("merge of the block into the fp32 running output (memory-bound), and the %.0f us latency of", alpha * 1e6);
    L.say("each of the K and V messages; the occupancy of a block of %lld heads too (efficiency.h). The", (long long)gpu.H);
    L.say("compute's fixed costs help a step hide its transfer; the messages' latency works against it.");
    L.blank();
    L.say("The achieved c* is lower: the kernel loses more to its peak (%.0f%% of it at long blocks) than", 100 * R / F);
    L.say("NCCL loses to the link (%.0f%%). And a step does more than its matmuls: the merge into the", 100 * B_real / B);
    L.say("running output (fp32), the block's slicing and each kernel's launch take time the transfer");
    L.say("hides behind too. Below %s tokens a block has fewer query tiles than the GPU has SMs, and", grouped(int64_t(std::llround(full_gpu))).c_str());
    L.say("runs slower still: it hides its transfer by wasting the GPU. The same two runs at the");
    L.say("achieved rates:");
    L.blank();
    Table a({"run", "c / c*", "compute", "K/V transfer", "exposed", "layer: attn hidden"});
    for (const Crossover& x : real)
      a.row({x.label, fmt("%.2f", double(x.c) / c_star_real), format_ns(x.compute_ns), format_ns(x.transfer_ns),
             format_ns(x.exposed_ns), fmt("%.0f%%", x.hidden_pct)});
    L.table(a);
  L.trust(model::run_kind(false, false, parse_parallel_config("ring"), "bf16"));
    L.blank();
    L.say("Real runs hide more than the datasheet says: the direction that matters when you choose a");
    L.say("ring.");
    L.say("`ringside validate` holds these rates against published ring-attention runs.");
  }

  // ---- check yourself ------------------------------------------------------------------------
  const int P8 = 8;
  const int64_t kv_block8 = 2 * cfg.b * (cfg.s / P8) * cfg.Hkv * d * e;  // K and V of one block at P = 8
  const double forward8 = double(parallel_comm_bytes(plan_of("ring", cfg, P8, Layout::contiguous), 0, DType::f32).forward);
  const double gqa = 8.0 / 32;  // Llama 3 8B's Hkv/H
  const int64_t c1k = 1024;     // step 8's layer, one block of 1,024 tokens
  const double transfer_1k = (2 * alpha + 2.0 * double(gpu.b * c1k * gpu.Hkv * gpu.d()) * 2 / B) * 1e9;
  const double attention_1k = 4.0 * double(c1k * c1k * gpu.d() * gpu.H) / F * 1e9;
  L.check_yourself({
      {fmt("Step 7's forward sends %s bytes per rank at P = %d. How many at P = %d, on the same layer?",
           grouped(rr[0].forward.bytes_sent).c_str(), P, P8),
       forward8, grouped(int64_t(forward8)) + " bytes",
       fmt("2 (Hkv/H) N h (P-1)/P x 4 B = 2 x %lld/%lld x %lld x %lld x %d/%d x 4: more hops of smaller blocks, "
           "towards 2 (Hkv/H) N h x 4",
           (long long)cfg.Hkv, (long long)cfg.H, (long long)cfg.s, (long long)cfg.h, P8 - 1, P8)},
      {fmt("In the backward a rank sends K/V P - 1 times and dK/dV P times. How many bytes is that at P = %d?", P8),
       double((2 * P8 - 1) * kv_block8), grouped((2 * P8 - 1) * kv_block8) + " bytes",
       fmt("(2P - 1) blocks of 2 b (s/P) Hkv d x 4 = %d x %s", 2 * P8 - 1, grouped(kv_block8).c_str())},
      {fmt("On %s at the peak, without a causal mask, how many tokens must a block have to hide its K/V "
           "when Hkv/H = 8/32 (Llama 3 8B's heads)?",
           L.hw.name.c_str()),
       gqa * c_star, grouped(std::llround(gqa * c_star)) + " tokens",
       fmt("(Hkv/H) F/B = 8/32 x %s: K/V carry Hkv heads, the compute all H", grouped(std::llround(c_star)).c_str())},
      {fmt("Step 8's layer at c = %s tokens on %s: how long does a forward step's K/V transfer take?",
           grouped(c1k).c_str(), L.hw.name.c_str()),
       transfer_1k, format_ns(transfer_1k),
       fmt("2 latency + 2 b c Hkv d x 2 B / B = 2 x %.0f us + 2 x %lld x %lld x %lld x 2 / %.0f GB/s. The attention "
           "alone, 4 c^2 d H / F = %s, is shorter: the latencies put the crossover above F/B",
           alpha * 1e6, (long long)c1k, (long long)gpu.Hkv, (long long)gpu.d(), B / 1e9, format_ns(attention_1k).c_str())},
  });
}

}  // namespace ringside::lessons

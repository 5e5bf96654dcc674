// Lesson 10: the weight-gradient all-reduce. Every weight is replicated over the CP group and each
// CP rank saw only its tokens, so the backward ends with an all-reduce of every weight gradient
// over CP (parallel/parallel_layer.cpp, sublayer grad_sync), as data parallelism's does over DP.
// At real sizes it is most of CP's exposed time in a one-layer view, unless it is bucketed and
// overlapped with the backward (Megatron's --overlap-grad-reduce, PyTorch DDP's buckets).
#include <algorithm>
#include <cmath>

#include "core/error.h"
#include "layer/presets.h"
#include "layer/reference.h"
#include "layer/weights.h"
#include "lessons/lesson.h"
#include "parallel/formulas.h"
#include "parallel/parallel_layer.h"
#include "trace/metrics.h"

namespace ringside::lessons {

namespace {

// ||sum_r a_r - ref|| / ||ref||, the Frobenius norms of the sum of the ranks' f32 tensors.
double error_of_sum(const std::vector<const Tensor*>& parts, const Tensor& ref) {
  const double* want = ref.data<double>();
  double diff = 0, norm = 0;
  for (int64_t i = 0; i < ref.numel(); ++i) {
    double sum = 0;
    for (const Tensor* t : parts) sum += double(t->data<float>()[i]);
    diff += (sum - want[i]) * (sum - want[i]), norm += want[i] * want[i];
  }
  return std::sqrt(diff / norm);
}

// The parameters in bucket `b` (parallel_layer.h's grad_buckets).
int64_t bucket_params(const LayerConfig& cfg, const GradBucket& b) {
  int64_t n = 0;
  for (auto& [name, shape] : weight_shapes(cfg))
    for (const char* p : b.prefixes)
      if (name.rfind(p, 0) == 0) n += numel(shape);
  return n;
}

// One bucket on rank 0's modeled timeline, ns from the backward's start: when its gradients were
// ready (the backward's last op before it, in program order), when its all-reduce began and ended.
struct BucketTimes {
  double ready = 0, begin = 0, end = 0;
};

// The overlapped run's buckets (its grad_sync spans) and where rank 0's backward compute ends.
std::vector<BucketTimes> bucket_times(const trace::RankTrace& r, double& compute_end) {
  int64_t start = 0;
  for (const trace::Event& e : r.events)
    if (e.kind == trace::Kind::phase && e.name == "backward") start = e.ts_ns;
  std::vector<const trace::Event*> spans, work;
  for (const trace::Event& e : r.events) {
    if (e.phase != "backward") continue;
    if (e.kind == trace::Kind::sublayer && e.name == "grad_sync") spans.push_back(&e);
    else if (e.sublayer != "grad_sync" && e.stream == trace::Stream::compute && trace::is_work(e.kind)) work.push_back(&e);
  }
  std::sort(spans.begin(), spans.end(), [](const trace::Event* a, const trace::Event* b) { return a->order < b->order; });
  compute_end = 0;
  for (const trace::Event* w : work) compute_end = std::max(compute_end, double(w->end_ns() - start));
  std::vector<BucketTimes> out;
  for (const trace::Event* s : spans) {
    BucketTimes b{0, double(s->ts_ns - start), double(s->end_ns() - start)};
    for (const trace::Event* w : work)
      if (w->end_order < s->order) b.ready = std::max(b.ready, double(w->end_ns() - start));
    out.push_back(b);
  }
  return out;
}

const trace::RankTrace& rank0_of(const trace::TraceData& t, const std::string& label) {
  for (const trace::RankTrace& r : t.ranks)
    if (r.strategy == label && r.rank == 0) return r;
  throw Error("lesson 10: no rank 0 in " + label);
}

}  // namespace

void grad_all_reduce(Script& L) {
  LayerConfig cfg;
  cfg.b = 1, cfg.s = 512, cfg.h = 128, cfg.H = 8, cfg.Hkv = 4, cfg.f = 512;
  const int P = 4;
  const RunPlan ring = plan_of("ring", cfg, P);
  const std::vector<RunRecord> partial = L.run(ring, "ring, no grad_sync", {}, RankOptions{.grad_sync = false});
  const std::vector<RunRecord> synced = L.run(ring, "ring");
  const ReferenceRun ref = run_reference(cfg, DType::f64);
  const int64_t params = parallel_param_count(ring);

  // ---- 1. why CP needs it ------------------------------------------------------------------------
  L.step("Each CP rank holds a partial gradient", L.phase("ring, no grad_sync", "backward"));
  L.say("Context parallelism splits the tokens, not the weights: every rank of the CP group holds");
  L.say("all %s parameters of the layer, and the gradient of a weight is a sum over tokens, e.g.", grouped(params).c_str());
  L.say("dW1 = h2^T du over every token. Each rank sums only its own s/P tokens. The ring on P = %d", P);
  L.say("ranks, run once without its gradient all-reduce (RankOptions grad_sync = false) and once");
  L.say("with it; fc1.weight's gradient against the fp64 reference (relative Frobenius error):");
  L.blank();
  Table t1({"rank", "its own tokens only", "after the all-reduce"});
  std::vector<const Tensor*> parts;
  double worst_partial = 1e300;
  for (int r = 0; r < P; ++r) {
    const double own = relative_error(partial[size_t(r)].local_grads.fc1_weight, ref.grads.fc1_weight);
    const double all = relative_error(synced[size_t(r)].local_grads.fc1_weight, ref.grads.fc1_weight);
    worst_partial = std::min(worst_partial, own);
    parts.push_back(&partial[size_t(r)].local_grads.fc1_weight);
    // After the all-reduce the error is fp32's rounding, whose digits depend on the machine's
    // BLAS kernels: the table says the bound it meets (the chapter must hold on every machine).
    t1.row({std::to_string(r), fmt("%.3f", own), all < 1e-5 ? std::string("< 1e-05") : fmt("%.1e", all)});
    L.record(fmt("error_synced_rank%d", r), all);
  }
  L.table(t1);
  L.record("error_partial_min", worst_partial);
  L.blank();
  L.say("The sum of the four partial gradients is the reference's (error %.1e): the all-reduce",
        L.record("error_sum_of_partials", error_of_sum(parts, ref.grads.fc1_weight)));
  L.say("is that sum, put on every rank. Without it each rank would step its weights differently");
  L.say("and the replicas would drift apart. Every CP strategy needs it (ring, Ulysses,");
  L.say("all-gather): the weights are replicated over the group in all of them.");
  L.blank();
  const double ar = 2.0 * double(params) * 4 * (P - 1) / P;
  L.say("Its bytes: a ring all-reduce of S bytes sends 2 S (P-1)/P per rank (a reduce-scatter and an");
  L.say("all-gather). Here S = %s x 4 B: %s bytes; measured, the backward with it", grouped(params).c_str(), grouped(int64_t(ar)).c_str());
  L.say("sends %s bytes more than without it.",
        grouped(int64_t(L.record("all_reduce_bytes_measured", double(synced[0].backward.bytes_sent - partial[0].backward.bytes_sent))))
            .c_str());
  L.record("all_reduce_bytes_formula", ar);

  // ---- 2. DP does the same ----------------------------------------------------------------------
  LayerConfig big;
  apply_preset(find_preset("llama3-8b"), big);
  const int C = 8, DP = 4;
  big.s = 65536;
  const RunPlan big_ring = plan_of("ring", big, C);
  const int64_t big_params = parallel_param_count(big_ring);
  const double grad_bytes = 2.0 * double(big_params);  // bf16
  L.step("Data parallelism needs the same, so Megatron folds CP into DP");
  L.say("Data parallelism replicates the weights over DP ranks that each see other sequences: its");
  L.say("gradients are partial sums too, all-reduced over DP. Two groups, one reason, so");
  L.say("Megatron-LM reduces the gradients once over the DP x CP ranks together (its data-parallel");
  L.say("group 'with context parallelism'), and the optimizer shards over that group too.");
  L.say("Llama 3 8B's layer, %s parameters, bf16 gradients (%s):", grouped(big_params).c_str(), format_bytes(grad_bytes).c_str());
  L.blank();
  Table t2({"all-reduce over", "ranks", "bytes each GPU sends", "2 (n-1)/n"});
  const double over_cp = L.record("big_all_reduce_cp_bytes", 2.0 * grad_bytes * (C - 1) / C);
  const double over_both = L.record("big_all_reduce_dpcp_bytes", 2.0 * grad_bytes * (C * DP - 1) / (C * DP));
  t2.row({"CP", std::to_string(C), grouped(int64_t(over_cp)), fmt("%.3f", 2.0 * (C - 1) / C)});
  t2.row({"DP x CP", std::to_string(C * DP), grouped(int64_t(over_both)), fmt("%.3f", 2.0 * (C * DP - 1) / (C * DP))});
  L.table(t2);
  L.record("big_params", double(big_params));
  L.blank();
  L.say("Four times the ranks, %.0f%% more bytes per GPU: a ring all-reduce's traffic per GPU hardly",
        L.record("dpcp_extra_pct", 100 * (over_both / over_cp - 1)));
  L.say("grows with its group (nccl-tests' busbw factor 2 (n-1)/n). What grows is the latency, one");
  L.say("hop per rank, and the span: a DP x CP group leaves the node.");

  // ---- 3. modeled at real size: exposed ---------------------------------------------------------
  model::ModelOptions overlapped;
  overlapped.overlap_grad_reduce = true;
  const std::string lx = "ring 64K exposed", lo = "ring 64K overlapped", ln = "ring 64K no grad_sync";
  const trace::StrategyMetrics& mn = L.dry_run(big_ring, ln, nullptr, {}, RankOptions{.grad_sync = false});
  const trace::StrategyMetrics& mx = L.dry_run(big_ring, lx);
  const trace::StrategyMetrics& mo = L.dry_run(big_ring, lo, nullptr, overlapped);
  auto exposed_of = [&](const trace::StrategyMetrics& m, const char* sub) {
    const std::optional<trace::Breakdown> b = trace::sublayer_comm(m, sub);
    return b ? double(b->exposed_comm_ns) / C : 0.0;
  };
  L.step(fmt("At real size, after the backward: the all-reduce exposed (%s)", L.hw.name.c_str()),
         L.phase(L.modeled_name(lx), "backward"));
  L.say("Llama 3 8B's layer at s = 64K on a ring of P = %d GPUs of %s, dry-run and modeled", C, L.hw.name.c_str());
  L.say("in bf16, with the all-reduce where ringside's layer posts it: after the backward, on the");
  L.say("critical path. Per GPU, the communication left exposed, by sublayer:");
  L.blank();
  const double attn_x = L.record("exposed_attention_ns", exposed_of(mx, "attention"));
  const double sync_x = L.record("exposed_grad_sync_ns", exposed_of(mx, "grad_sync"));
  const CommBytes fp32 = parallel_comm_bytes(big_ring, 0, DType::f32);
  const double sync_bytes = 2.0 * grad_bytes * (C - 1) / C;                             // bf16
  const double attention_bytes = double(fp32.forward + fp32.backward) / 2 - sync_bytes;  // bf16: half of fp32's
  L.record("attention_bytes", attention_bytes);
  L.record("grad_sync_bytes", sync_bytes);
  Table t3({"sublayer", "sends per GPU", "exposed per GPU"});
  t3.row({"attention (K/V, dK/dV)", format_bytes(attention_bytes), format_ns(attn_x)});
  t3.row({"grad_sync (all-reduce)", format_bytes(sync_bytes), format_ns(sync_x)});
  L.table(t3);
  const double win_n = double(mn.ranks[0].time.window_ns), win_x = double(mx.ranks[0].time.window_ns),
               win_o = double(mo.ranks[0].time.window_ns);
  L.record("layer_no_sync_ns", win_n);
  L.record("layer_exposed_ns", win_x);
  L.record("layer_overlapped_ns", win_o);
  const double tail_x = L.record("tail_exposed_ns", win_x - win_n);
  L.blank();
  L.say("At 8K tokens a GPU the ring hides its K/V behind attention; the gradient all-reduce,");
  L.say("%s of it, has nothing left to hide behind. It adds %s to GPU 0's", format_bytes(2.0 * grad_bytes * (C - 1) / C).c_str(),
        format_ns(tail_x).c_str());
  L.say("layer of %s (%.0f%%): in a one-layer view, most of what CP costs in communication.", format_ns(win_x).c_str(),
        100 * tail_x / win_x);

  // ---- 4. overlapped ----------------------------------------------------------------------------
  double compute_end = 0;
  const std::vector<BucketTimes> bt = bucket_times(rank0_of(L.trace, L.modeled_name(lo)), compute_end);
  RS_CHECK(bt.size() == grad_buckets().size(), "lesson 10: ", bt.size(), " buckets in the overlapped run");
  L.step("Overlapped: each bucket all-reduced as soon as its gradients exist", L.phase(L.modeled_name(lo), "backward"));
  L.say("Megatron's --overlap-grad-reduce (and PyTorch DDP) do not wait for the backward's end. The");
  L.say("gradients live in buckets; when the backward has finished every gradient of a bucket, its");
  L.say("all-reduce starts on the communication stream while the backward computes on. ringside's");
  L.say("layer posts three buckets in the backward's order (`ringside model --overlap-grad-reduce`):");
  L.say("the MLP's after the MLP's backward, ln2's and W_o's after the output projection's, and");
  L.say("W_qkv's and ln1's at the end. GPU 0, times from the backward's start:");
  L.blank();
  Table t4({"bucket", "parameters", "bf16 bytes", "ready", "all-reduce", "done"});
  // The ring's link: where the profile's topology places its C GPUs (one NVLink domain, on a node).
  const model::Tier& ring_link = L.hw.tiers[L.hw.topology(C).link(0, C - 1)];
  const double alpha_hop = model::transfer_seconds(0, ring_link, L.hw, {}) * 1e9;
  for (size_t k = 0; k < bt.size(); ++k) {
    const int64_t n = bucket_params(big, grad_buckets()[k]);
    const double duration = bt[k].end - bt[k].begin;
    // A ring all-reduce: 2 (P-1) hops of S/P bytes, each latency + bytes / (link x NCCL's share).
    const double hops = 2.0 * (C - 1) * model::transfer_seconds(2.0 * double(n) / C, ring_link, L.hw, {}) * 1e9;
    L.record(fmt("bucket%zu_params", k + 1), double(n));
    L.record(fmt("bucket%zu_ready_ns", k + 1), bt[k].ready);
    L.record(fmt("bucket%zu_begin_ns", k + 1), bt[k].begin);
    L.record(fmt("bucket%zu_end_ns", k + 1), bt[k].end);
    L.record(fmt("bucket%zu_all_reduce_ns", k + 1), duration);
    L.record(fmt("bucket%zu_hops_ns", k + 1), hops);
    t4.row({grad_buckets()[k].name, grouped(n), format_bytes(2.0 * double(n)), format_ns(bt[k].ready), format_ns(duration), format_ns(bt[k].end)});
  }
  L.table(t4);
  L.record("backward_compute_end_ns", compute_end);
  L.record("hop_latency_ns", alpha_hop);
  const double tail_o = L.record("tail_overlapped_ns", win_o - win_n);
  L.blank();
  L.say("The backward's compute ends at %s. The MLP's bucket, the largest, runs under the", format_ns(compute_end).c_str());
  L.say("attention's backward; W_o's under the rest. The last bucket is ready only when the compute");
  L.say("ends, so its all-reduce is exposed: %s, against %s after the backward.", format_ns(tail_o).c_str(),
        format_ns(tail_x).c_str());
  L.say("An all-reduce's time is 2 (P-1) hops of S/P bytes (latency %s each), plus", format_ns(alpha_hop).c_str());
  L.say("the reduce-scatter's adds and packing the bucket into one buffer and back (memory-bound;");
  L.say("Megatron's buckets are one buffer already). Each bucket starts at max(ready, the previous");
  L.say("bucket's done): NCCL runs one collective at a time on its stream. The tail is at most the");
  L.say("last bucket's done less the compute's end: the last bucket also waits for the GPUs whose");
  L.say("backward ends later (the zigzag ring's steps differ in their kernels' occupancy).");

  // ---- 5. the two timelines ---------------------------------------------------------------------
  L.step("Exposed against overlapped");
  L.say("The two modeled timelines side by side in the viewer: GPU 0's layer and what the gradient");
  L.say("all-reduce adds to it, and the HTA exposed time of grad_sync's transfers per GPU:");
  L.blank();
  Table t5({"timeline", "layer (GPU 0)", "added by the all-reduce", "grad_sync exposed per GPU"});
  t5.row({"no all-reduce", format_ns(win_n), "-", "-"});
  t5.row({"after the backward", format_ns(win_x), format_ns(tail_x), format_ns(sync_x)});
  const double sync_o = L.record("exposed_grad_sync_overlapped_ns", exposed_of(mo, "grad_sync"));
  t5.row({"overlapped (3 buckets)", format_ns(win_o), format_ns(tail_o), format_ns(sync_o)});
  L.table(t5);
  L.trust(model::run_kind(false, false, parse_parallel_config("ring"), "bf16"));
  L.blank();
  L.say("(The two columns measure two things. Added: how much longer GPU 0's layer is, for the");
  L.say("transfers and for packing the buckets and the reduce-scatter's adds, memory-bound kernels.");
  L.say("Exposed, as HTA counts it: the communication no compute hides. After the backward the");
  L.say("packing and adds are compute, so exposed is the transfers alone; overlapped, ringside");
  L.say("draws them on the comm lane, as NCCL runs its reductions in its own kernels.)");
  L.blank();
  L.say("Overlap removes %.0f%% of what the all-reduce added. The rest, the last bucket, is a one-layer",
        L.record("overlap_saved_pct", 100 * (1 - tail_o / tail_x)));
  L.say("view's artefact: in a model of many layers that bucket's all-reduce runs under the previous");
  L.say("layer's backward, and only the first layer's last bucket is exposed. That is what the");
  L.say("whole-step model assumes (`ringside model --gbs`, lesson 8, with --no-overlap-grad-reduce");
  L.say("to expose it); ZeRO's reduce-scatter overlaps the same way.");
  L.say("Try: ringside model --preset llama3-8b --strategy ring --ranks 8 --seq 65536 \\");
  L.say("        --hw %s --overlap-grad-reduce --trace out/overlap.json", L.hw.name.c_str());

  // ---- check yourself ---------------------------------------------------------------------------
  const double q1 = 2.0 * grad_bytes * (16 - 1) / 16;
  const double q3 = std::max(0.0, bt.back().end - compute_end);
  L.check_yourself({
      {"Llama 3 8B's layer on a CP group of 16 GPUs: bytes each GPU sends in its bf16 gradients' ring all-reduce?", q1,
       grouped(int64_t(q1)) + " bytes", fmt("2 S (P-1)/P with S = %s parameters x 2 B and P = 16", grouped(big_params).c_str())},
      {"Step 1's layer on P = 8 ranks in fp32: bytes each rank sends in the gradient all-reduce?",
       2.0 * double(params) * 4 * 7 / 8, grouped(int64_t(2.0 * double(params) * 4 * 7 / 8)) + " bytes",
       fmt("2 x %s x 4 B x 7/8", grouped(params).c_str())},
      {"Step 4's last bucket: how much of its all-reduce is exposed, from the table's ready, all-reduce and done?", q3,
       format_ns(q3), "done of the last bucket - the compute's end, when positive: it is ready only at the end"},
  });
}

}  // namespace ringside::lessons

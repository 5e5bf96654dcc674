// Activation recomputation (--recompute none|selective|full) in every strategy: the same
// results bit for bit, the saved bytes of each mode's formula (Korthikanti et al. 2022's 2 s b h
// for full), the forward's bytes sent again under full, and the extra FLOPs on the trace.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cstring>
#include <map>

#include "check/check.h"
#include "layer/presets.h"
#include "model/model.h"
#include "parallel/formulas.h"
#include "parallel/run_plan.h"
#include "reference64.h"
#include "run/runner.h"
#include "trace/metrics.h"

using namespace ringside;

namespace {

LayerConfig small_layer() {
  LayerConfig c;
  c.b = 2, c.s = 32, c.h = 64, c.H = 8, c.Hkv = 4, c.f = 96, c.seed = 11;
  return c;
}

// The plan of `par` for c on P ranks, recomputing as `rc` says.
RunPlan plan_of(ParallelConfig par, const LayerConfig& c, int P, Recompute rc) {
  par.recompute = rc;
  return resolve(par, c, P);
}

// The configurations of four ranks: each algorithm once, and the two hybrids.
std::vector<ParallelConfig> four_rank_configurations() {
  return {{4, 1, &no_cp_scheme()}, {1, 4, &cp_scheme("p2p")},        {1, 4, &cp_scheme("a2a")},
          {1, 4, &cp_scheme("all_gather")}, {2, 2, &cp_scheme("p2p")}, {1, 4, &cp_scheme("a2a+p2p"), 2}};
}

// FLOPs and bytes of a schedule's compute ops by phase ("forward", "backward", "recompute"),
// over all ranks; `only` counts the ops of those names alone.
struct Work {
  double flops = 0, bytes = 0;
};
std::map<std::string, Work> work_by_phase(const trace::TraceData& t, const std::vector<std::string>& only = {}) {
  std::map<std::string, Work> by;
  for (const trace::RankTrace& r : t.ranks)
    for (const trace::Event& e : r.events)
      if (e.stream == trace::Stream::compute && (only.empty() || std::find(only.begin(), only.end(), e.name) != only.end()))
        by[e.phase].flops += e.flops, by[e.phase].bytes += double(e.bytes);
  return by;
}

// Whether two tensors hold the same bits.
bool same_bits(const Tensor& a, const Tensor& b) {
  return a.shape() == b.shape() && a.dtype() == b.dtype() && std::memcmp(a.raw_data(), b.raw_data(), size_t(a.nbytes())) == 0;
}

}  // namespace

TEST_CASE("recomputation changes no bit of the results, and saves the bytes of each mode's formula", "[recompute]") {
  const ReferenceRun ref = reference64(small_layer());
  for (const ParallelConfig& par : four_rank_configurations()) {
    MemoryTracker trackers[3];  // outlive the results they count
    std::vector<RunRecord> none;
    for (Recompute rc : {Recompute::none, Recompute::selective, Recompute::full}) {
      const RunPlan plan = plan_of(par, small_layer(), 4, rc);
      INFO(par.name() << " --recompute " << to_string(rc));
      MemoryTracker& tracker = trackers[int(rc)];
      const std::vector<RunRecord> res = run_local_ranks(plan, DType::f32, tracker);
      CHECK(worst_error(res[0], ref).first < kTolerance);
      for (int r = 0; r < 4; ++r) {
        INFO("rank " << r);
        CHECK(res[r].peak_saved == parallel_saved_bytes(plan, r, DType::f32));
        const CommBytes cb = parallel_comm_bytes(plan, r, DType::f32);
        CHECK(res[r].forward.bytes_sent == cb.forward);
        CHECK(res[r].backward.bytes_sent == cb.backward);
        CHECK(res[r].attention_flops == parallel_attention_flops(plan, r));  // the forward's, not twice
      }
      if (rc == Recompute::none) {
        none = res;
        continue;
      }
      // The same kernels on the same inputs: the results are the no-recompute run's, bit for bit.
      CHECK(same_bits(res[0].out, none[0].out));
      CHECK(same_bits(res[0].dx, none[0].dx));
      const auto grads = res[0].grads.named();
      const auto grads_none = none[0].grads.named();
      for (size_t i = 0; i < grads.size(); ++i) CHECK(same_bits(*grads[i].second, *grads_none[i].second));
      // Under full, the backward sends the forward's bytes again; under selective, nothing more.
      const CommBytes base = parallel_comm_bytes(plan_of(par, small_layer(), 4, Recompute::none), 0, DType::f32);
      CHECK(res[0].backward.bytes_sent == base.backward + (rc == Recompute::full ? base.forward : 0));
      CHECK(res[0].steps.size() == none[0].steps.size());  // the recomputed ring steps are not steps of their own
    }
  }
}

TEST_CASE("what each mode saves, element by element, and full recompute's 2sbh (Korthikanti et al. 2022)", "[recompute]") {
  // The ring on P = 4: a rank holds n = s / 4 tokens whole.
  const LayerConfig c = small_layer();
  const int64_t n = c.b * c.s / 4, h = c.h, f = c.f, Hd = c.H * c.d(), Hkv_d = c.Hkv * c.d(), H = c.H;
  ParallelConfig ring{1, 4, &cp_scheme("p2p")};
  const int64_t attention = n * (2 * Hd + 2 * Hkv_d + H);  // q, k, v, out, lse
  CHECK(parallel_saved_bytes(resolve(ring, c, 4), 0, DType::f32) == 4 * (n * (4 * h + 4 + 2 * f) + attention));
  ring.recompute = Recompute::selective;  // x, x2, u and attention's
  CHECK(parallel_saved_bytes(resolve(ring, c, 4), 0, DType::f32) == 4 * (n * (2 * h + f) + attention));
  ring.recompute = Recompute::full;  // x alone
  CHECK(parallel_saved_bytes(resolve(ring, c, 4), 0, DType::f32) == 4 * n * h);

  // GPT-3 175B, s 2048, b 1, TP+SP over t = 8: full recomputation keeps 2 s b h / t bytes per
  // layer in 16-bit (Korthikanti et al. 2022, section 5), 6,291,456; this project counts fp32
  // and fp64 elements, two and four times that.
  LayerConfig gpt3;
  apply_preset(find_preset("gpt3-175b"), gpt3);
  gpt3.s = 2048;
  ParallelConfig tp8{8, 1, &no_cp_scheme()};
  tp8.recompute = Recompute::full;
  const RunPlan tp8_plan = resolve(tp8, gpt3, 8);
  for (int r = 0; r < 8; ++r) {
    CHECK(parallel_saved_bytes(tp8_plan, r, DType::f32) == 2 * 6291456);
    CHECK(parallel_saved_bytes(tp8_plan, r, DType::f64) == 4 * 6291456);
  }
}

TEST_CASE("the extra FLOPs of recomputation are on the trace, so the model charges for them", "[recompute][model]") {
  const ParallelConfig ring = parse_parallel_config("ring");
  std::map<Recompute, std::map<std::string, Work>> work, cheap;
  std::map<Recompute, int64_t> layer_ns;
  model::Hardware gpu = model::load_hardware("h100-nvlink");
  for (Recompute rc : {Recompute::none, Recompute::selective, Recompute::full}) {
    LayerConfig c = small_layer();
    c.s = 4096, c.h = 1024, c.H = 8, c.Hkv = 8, c.f = 4096;
    MemoryTracker tracker;
    const trace::TraceData schedule = model::dry_run(plan_of(ring, c, 4, rc), tracker);
    work[rc] = work_by_phase(schedule);
    cheap[rc] = work_by_phase(schedule, {"layernorm_forward", "gelu_forward"});
    const trace::TraceData modeled = model::model_trace(schedule, gpu);
    for (const trace::StrategyMetrics& m : trace::compute_metrics(modeled))
      for (const trace::RankMetrics& r : m.ranks) layer_ns[rc] = std::max(layer_ns[rc], r.time.window_ns);
  }
  const Work forward = work[Recompute::none]["forward"];
  CHECK(work[Recompute::none].count("recompute") == 0);
  // Full: the forward once more, exactly its FLOPs and bytes; the forward and backward unchanged.
  CHECK(work[Recompute::full]["recompute"].flops == forward.flops);
  CHECK(work[Recompute::full]["recompute"].bytes == forward.bytes);
  CHECK(work[Recompute::full]["forward"].flops == forward.flops);
  CHECK(work[Recompute::full]["backward"].flops == work[Recompute::none]["backward"].flops);
  // Selective: the forward's two LayerNorms and GeLU again, memory-bound ops the model charges
  // by their bytes (no GEMM, no attention: no FLOPs counted).
  CHECK(work[Recompute::selective]["recompute"].flops == 0);
  CHECK(work[Recompute::selective]["recompute"].bytes == cheap[Recompute::none]["forward"].bytes);
  CHECK(work[Recompute::selective]["recompute"].bytes > 0);
  // And the model charges for them: full costs about a forward more, selective a little.
  CHECK(layer_ns[Recompute::full] > layer_ns[Recompute::selective]);
  CHECK(layer_ns[Recompute::selective] > layer_ns[Recompute::none]);
  CHECK(double(layer_ns[Recompute::full]) > 1.2 * double(layer_ns[Recompute::none]));
}

// Issue 57: `ringside reference --recompute full` printed the mode and saved what none saves.
// The reference recomputes as asked: each mode keeps its formula's bytes (x alone under full),
// which are what one rank of a strategy keeps with the same flags, and the results are the
// no-recompute run's bit for bit.
TEST_CASE("the reference recomputes as asked: each mode's saved bytes are its formula and a one-rank run's", "[recompute][reference]") {
  LayerConfig gpt = small_layer();
  LayerConfig llama = gpt;
  llama.norm = Norm::rmsnorm, llama.mlp = Mlp::swiglu, llama.bias = false;
  for (const LayerConfig& c : {gpt, llama}) {
    const int64_t N = c.b * c.s, h = c.h, f = c.f, Hkv_d = c.Hkv * c.d(), H = c.H;
    const int64_t u = c.mlp == Mlp::swiglu ? 2 * f : f, z = c.norm == Norm::layernorm ? 2 : 1;
    // The formulas written out: none keeps x, h1, x2, h2, q, a, k, v, lse, u, g and the norms'
    // statistics; selective drops h1, h2, the statistics and g; full keeps x.
    const std::map<Recompute, int64_t> elements = {{Recompute::none, N * (6 * h + 2 * Hkv_d + u + f + 2 * z + H)},
                                                   {Recompute::selective, N * (4 * h + 2 * Hkv_d + u + H)},
                                                   {Recompute::full, N * h}};
    const ReferenceRun none = run_reference(c, DType::f32);
    for (const auto& [rc, count] : elements) {
      INFO(c.summary(rc));
      const ReferenceRun r = run_reference(c, DType::f32, rc);
      CHECK(saved_activation_bytes(c, DType::f32, rc) == 4 * count);
      CHECK(r.peak_saved == 4 * count);
      // One rank of a strategy with the same layer and mode keeps the same bytes, by its formula
      // and as its run measures them.
      ParallelConfig one;  // one rank, unsplit (resolve_one_rank's)
      one.recompute = rc;
      const RunPlan plan = resolve(one, c, 1);
      CHECK(parallel_saved_bytes(plan, 0, DType::f32) == r.peak_saved);
      MemoryTracker tracker;
      const std::vector<RunRecord> run = run_local_ranks(plan, DType::f32, tracker);
      CHECK(run[0].peak_saved == r.peak_saved);
      // Recomputed, the same kernels on the same inputs: the same bits as without.
      CHECK(same_bits(r.out, none.out));
      CHECK(same_bits(r.dx, none.dx));
      const auto grads = r.grads.named(), grads_none = none.grads.named();
      for (size_t i = 0; i < grads.size(); ++i) CHECK(same_bits(*grads[i].second, *grads_none[i].second));
    }
    // fp64 too (the reference's own precision): full keeps 8 N h bytes.
    CHECK(run_reference(c, DType::f64, Recompute::full).peak_saved == 8 * N * h);
  }
  CHECK(saved_activation_formula(gpt, Recompute::selective) == "N(4h + 2Hkv d + f + H)");
  CHECK(saved_activation_formula(llama, Recompute::selective) == "N(4h + 2Hkv d + 2f + H)");
  CHECK(saved_activation_formula(gpt, Recompute::full) == "N h");
}

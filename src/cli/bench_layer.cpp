// `ringside bench layer`: the reference layer (one device, fp32, one thread) forward and
// backward in GFLOP/s, as ratios to OpenBLAS sgemm measured in the same run, so that the figure
// says how close the whole layer, token-wise work included, comes to this machine's GEMM.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <optional>
#include <vector>

#include "cli/commands.h"
#include "cli/format.h"
#include "cli/peer_pytorch.h"
#include "core/memory_limits.h"
#include "device/backend.h"
#include "kernels/cpu/blas.h"
#include "kernels/philox.h"
#include "layer/reference.h"
#include "layer/weights.h"
#include "parallel/run_plan.h"

namespace ringside::cli {

namespace kc = kernels::cpu;

CLI::App* add_bench_layer(CLI::App& bench, BenchLayerOptions& o) {
  CLI::App* l = bench.add_subcommand("layer", "The reference layer's forward and backward GFLOP/s against OpenBLAS sgemm, one thread");
  add_config_flags(*l, o.cfg, o.choices, /*with_recompute=*/false);
  refuse_flag(*l, "--layout", "the reference layer runs the whole sequence on one device: there is no context-parallel "
                              "layout to choose");
  l->add_option("--repetitions", o.repetitions, "runs of sgemm, forward and backward, interleaved; the best of each counts")->capture_default_str()->check(CLI::Range(1, 50));
  l->add_option("--peer", o.peer, "also run the same layers in PyTorch eager in the same rounds (skipped, with a line, "
                                 "where the Python has no torch)")->check(CLI::IsMember({"pytorch"}));
  CLI::Option* peer = l->get_option("--peer");
  l->add_option("--python", o.python, "the peer's Python (default: $RINGSIDE_PYTHON, else python3 on PATH)")
      ->check(non_empty("--python needs a program"))
      ->needs(peer);
  return l;
}

namespace {

// The layers bench layer runs at the given shape: the one the flags name, then GPT's (LayerNorm,
// GeLU, biases) and Llama's (RMSNorm, SwiGLU, none) where it is neither.
struct BenchedLayer {
  const char* name;
  LayerConfig cfg;
};
std::vector<BenchedLayer> layers_of(const LayerConfig& given) {
  auto with = [&](Norm norm, Mlp mlp, bool bias) {
    LayerConfig c = given;
    c.norm = norm, c.mlp = mlp, c.bias = bias;
    return c;
  };
  const LayerConfig gpt = with(Norm::layernorm, Mlp::gelu, true), llama = with(Norm::rmsnorm, Mlp::swiglu, false);
  auto same = [](const LayerConfig& a, const LayerConfig& b) { return a.norm == b.norm && a.mlp == b.mlp && a.bias == b.bias; };
  std::vector<BenchedLayer> all;
  if (!same(given, gpt) && !same(given, llama)) all.push_back({"this layer", given});
  all.push_back({"gpt layer", gpt});
  all.push_back({"llama layer", llama});
  if (same(given, llama)) std::swap(all[0], all[1]);  // the layer asked for first
  return all;
}

// One layer's weights, inputs and saved forward, and its best times.
struct LayerRun {
  BenchedLayer layer;
  LayerWeights w;
  Tensor x, dout;
  ForwardResult fwd;
  double forward_s = 1e300, backward_s = 1e300;
};

// What --peer needs of each layer: its name, config and ringside's parameter count.
std::vector<PeerLayer> peer_layers(const std::vector<LayerRun>& runs) {
  std::vector<PeerLayer> layers;
  for (const LayerRun& r : runs) {
    int64_t params = 0;
    for (const auto& [name, t] : r.w.named()) params += t->numel();
    layers.push_back({r.layer.name, r.layer.cfg, params});
  }
  return layers;
}

// Each layer's best forward and backward seconds.
std::vector<std::pair<double, double>> best_times(const std::vector<LayerRun>& runs) {
  std::vector<std::pair<double, double>> times;
  for (const LayerRun& r : runs) times.emplace_back(r.forward_s, r.backward_s);
  return times;
}

}  // namespace

int bench_layer(const BenchLayerOptions& o) {
  kc::set_blas_single_threaded();
  std::vector<LayerRun> runs;
  double bytes = 0;
  for (const BenchedLayer& l : layers_of(o.cfg)) {  // the layer asked for first, so its error is the one named
    resolve_one_rank(l.cfg);                        // the other layer too: SwiGLU's [h, 2f] has limits of its own
    runs.push_back({l, {}, {}, {}, {}}), bytes += reference_peak_bytes(l.cfg, DType::f32);
  }
  require_memory(bytes, "bench layer at this size", "--seq, --batch, --hidden or --ffn");

  constexpr int64_t kGemm = 2048;
  std::vector<float> A = random_floats(kGemm * kGemm, 5), B = random_floats(kGemm * kGemm, 6), C(kGemm * kGemm);
  auto be = make_cpu_backend();
  const AllocTag tag{};
  for (LayerRun& r : runs) {
    r.w = init_weights(r.layer.cfg, DType::f32, tag);
    r.x = random_input(r.layer.cfg, static_cast<uint32_t>(RngSite::input_x), DType::f32, tag);
    r.dout = random_input(r.layer.cfg, static_cast<uint32_t>(RngSite::input_dout), DType::f32, tag);
  }

  std::optional<PytorchPeers> peers;  // started now: importing torch overlaps ringside's warm-up
  if (!o.peer.empty()) peers.emplace(o.python, peer_layers(runs));
  std::printf("ringside bench layer: the reference layer, fp32, one thread, best of %d\n", o.repetitions);
  for (const LayerRun& r : runs) std::printf("  %-12s %s\n", r.layer.name, r.layer.cfg.summary().c_str());
  std::printf("  backend: %s\n", be->describe().c_str());
  std::fflush(stdout);
  // All interleaved, best of the repetitions each, so that a slow spell of the machine
  // (another process, a lower clock) weighs on all of them alike.
  using clock = std::chrono::steady_clock;
  auto seconds = [](auto&& body) {
    const auto t0 = clock::now();
    body();
    return std::chrono::duration<double>(clock::now() - t0).count();
  };
  for (LayerRun& r : runs) r.fwd = reference_forward<float>(r.layer.cfg, r.w, r.x, *be, tag);  // warm: pages, packs
  if (peers) peers->wait_ready();
  double sgemm_s = 1e300;
  for (int i = 0; i < o.repetitions; ++i) {
    sgemm_s = std::min(sgemm_s, seconds([&] {
      kc::gemm(false, false, kGemm, kGemm, kGemm, 1.0f, A.data(), kGemm, B.data(), kGemm, 0.0f, C.data(), kGemm);
    }));
    for (LayerRun& r : runs) {
      const LayerConfig& c = r.layer.cfg;
      r.forward_s = std::min(r.forward_s, seconds([&] { r.fwd = reference_forward<float>(c, r.w, r.x, *be, tag); }));
      r.backward_s = std::min(r.backward_s, seconds([&] { (void)reference_backward<float>(c, r.w, r.fwd.saved, r.dout, *be, tag); }));
    }
    if (peers && peers->active()) peers->round();
  }

  const double sgemm = 2.0 * kGemm * kGemm * kGemm / sgemm_s;
  std::printf("\n  %-34s %12s %16s %10s %8s\n", "", "time", "throughput", "/ sgemm", "target");
  std::printf("  %-34s %12s %16s %10s\n", sgemm_reference_label().c_str(), format_seconds(sgemm_s).c_str(), format_flops(sgemm).c_str(), "1.00");
  for (const LayerRun& r : runs)
    for (const auto& [dir, flops, time, target] :
         {std::tuple{"forward", layer_forward_flops(r.layer.cfg), r.forward_s, o.forward_target},
          std::tuple{"backward", layer_backward_flops(r.layer.cfg), r.backward_s, o.backward_target}}) {
      const double ratio = flops / time / sgemm;
      const std::string row = std::string(r.layer.name) + " " + dir;
      // The work beside its rate: what the layer flags asked for, the same on every run.
      std::printf("  %-34s %12s %16s %10.2f    >= %.2f  %-12s %10.4g GFLOP a call\n", row.c_str(), format_seconds(time).c_str(),
                  format_flops(flops / time).c_str(), ratio, target, sgemm_verdict(ratio, target).c_str(), flops / 1e9);
    }
  std::printf("  (FLOPs: the GEMMs, 2 m n k each (the MLP's 4 N h f with GeLU, 6 N h f with SwiGLU), and attention\n"
              "   as FlashAttention counts it; the backward twice the GEMMs and 2.5 x attention. Token-wise work\n"
              "   (the norms, GeLU or SwiGLU's product, dropout, RoPE) is time, not FLOPs.)\n");
  if (const std::string note = sgemm_fallback_note(); !note.empty()) std::printf("%s\n", note.c_str());
  if (peers) peers->print(best_times(runs));
  return 0;  // a benchmark reports; the tests are what pass or fail
}

}  // namespace ringside::cli

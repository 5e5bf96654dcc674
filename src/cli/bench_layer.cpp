// `ringside bench layer`: the reference layer (one device, fp32, one thread) forward and
// backward in GFLOP/s, as ratios to OpenBLAS sgemm measured in the same run, so that the figure
// says how close the whole layer, token-wise work included, comes to this machine's GEMM.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <vector>

#include "cli/commands.h"
#include "cli/format.h"
#include "core/memory_limits.h"
#include "device/backend.h"
#include "kernels/cpu/blas.h"
#include "kernels/philox.h"
#include "layer/reference.h"
#include "layer/weights.h"

namespace ringside::cli {

namespace kc = kernels::cpu;

CLI::App* add_bench_layer(CLI::App& bench, BenchLayerOptions& o) {
  CLI::App* l = bench.add_subcommand("layer", "The reference layer's forward and backward GFLOP/s against OpenBLAS sgemm, one thread");
  add_config_flags(*l, o.cfg, o.choices, /*with_recompute=*/false);
  l->add_option("--repetitions", o.repetitions, "runs of sgemm, forward and backward, interleaved; the best of each counts")->capture_default_str()->check(CLI::Range(1, 50));
  return l;
}

int bench_layer(const BenchLayerOptions& o) {
  o.cfg.validate();
  kc::set_blas_single_threaded();
  require_memory(reference_peak_bytes(o.cfg, DType::f32), "bench layer at this size", "--seq, --batch, --hidden or --ffn");

  constexpr int64_t kGemm = 2048;
  std::vector<float> A = random_floats(kGemm * kGemm, 5), B = random_floats(kGemm * kGemm, 6), C(kGemm * kGemm);
  auto be = make_cpu_backend();
  const AllocTag tag{};
  const LayerWeights w = init_weights(o.cfg, DType::f32, tag);
  const Tensor x = random_input(o.cfg, static_cast<uint32_t>(RngSite::input_x), DType::f32, tag);
  const Tensor dout = random_input(o.cfg, static_cast<uint32_t>(RngSite::input_dout), DType::f32, tag);

  std::printf("ringside bench layer: the reference layer, fp32, one thread, best of %d\n", o.repetitions);
  std::printf("  layer: %s\n", o.cfg.summary().c_str());
  std::printf("  backend: %s\n", be->describe().c_str());
  std::fflush(stdout);
  // The three interleaved, best of the repetitions each, so that a slow spell of the machine
  // (another process, a lower clock) weighs on all of them alike.
  using clock = std::chrono::steady_clock;
  auto seconds = [](auto&& body) {
    const auto t0 = clock::now();
    body();
    return std::chrono::duration<double>(clock::now() - t0).count();
  };
  ForwardResult fwd = reference_forward<float>(o.cfg, w, x, *be, tag);  // warm: pages, packs
  double sgemm_s = 1e300, forward_s = 1e300, backward_s = 1e300;
  for (int i = 0; i < o.repetitions; ++i) {
    sgemm_s = std::min(sgemm_s, seconds([&] {
      kc::gemm(false, false, kGemm, kGemm, kGemm, 1.0f, A.data(), kGemm, B.data(), kGemm, 0.0f, C.data(), kGemm);
    }));
    forward_s = std::min(forward_s, seconds([&] { fwd = reference_forward<float>(o.cfg, w, x, *be, tag); }));
    backward_s = std::min(backward_s, seconds([&] { (void)reference_backward<float>(o.cfg, w, fwd.saved, dout, *be, tag); }));
  }

  const double sgemm = 2.0 * kGemm * kGemm * kGemm / sgemm_s;
  std::printf("\n  %-20s %12s %16s %10s %8s\n", "", "time", "throughput", "/ sgemm", "target");
  std::printf("  %-20s %12s %16s %10s\n", "sgemm 2048^3", format_seconds(sgemm_s).c_str(), format_flops(sgemm).c_str(), "1.00");
  for (const auto& [dir, flops, seconds, target] :
       {std::tuple{"layer forward", layer_forward_flops(o.cfg), forward_s, o.forward_target},
        std::tuple{"layer backward", layer_backward_flops(o.cfg), backward_s, o.backward_target}}) {
    const double ratio = flops / seconds / sgemm;
    std::printf("  %-20s %12s %16s %10.2f    >= %.2f  %s\n", dir, format_seconds(seconds).c_str(),
                format_flops(flops / seconds).c_str(), ratio, target, ratio >= target ? "ok" : "BELOW TARGET");
  }
  std::printf("  (FLOPs: the GEMMs, 2 m n k each, and attention as FlashAttention counts it; the backward twice the\n"
              "   GEMMs and 2.5 x attention. Token-wise work (LayerNorm, GeLU, dropout, RoPE) is time, not FLOPs.)\n");
  return 0;  // a benchmark reports; the tests are what pass or fail
}

}  // namespace ringside::cli

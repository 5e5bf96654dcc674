// `ringside bench cuda`: the CUDA backend on this machine's GPU 0.
//   1. cuBLAS sgemm (n x n x n, fp32, no TF32): the reference throughput of this run.
//   2. FlashAttention-2 forward and backward (kernels/cuda) TFLOP/s, and their ratio to (1).
//   3. Ring attention on P virtual ranks sharing the GPU, traced: overlap % and exposed comm of
//      the attention's K/V transfers and of the whole layer, from the CUDA-event timeline.
// Times are CUDA events around `iterations` launches, best of `repetitions`.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <random>

#include "cli/commands.h"
#include "cli/format.h"
#include "device/backend.h"
#include "core/gpu.h"
#include "run/runner.h"
#include "trace/metrics.h"

namespace ringside::cli {

void add_bench_cuda(CLI::App& bench, BenchCudaOptions& o) {
  CLI::App* c = bench.add_subcommand("cuda", "GPU: attention TFLOP/s against cuBLAS sgemm; ring overlap on virtual ranks");
  c->add_option("--seq", o.s, "attention: sequence length s")->capture_default_str()->check(CLI::Range(int64_t{64}, int64_t{1} << 20));
  c->add_option("--heads", o.H, "attention: heads H")->capture_default_str()->check(CLI::Range(int64_t{1}, int64_t{256}));
  c->add_option("--head-dim", o.d, "attention: head dim d")->capture_default_str()->check(CLI::Range(int64_t{2}, int64_t{256}));
  c->add_option("--gemm", o.gemm_n, "sgemm size n (n x n x n)")->capture_default_str()->check(CLI::Range(int64_t{64}, int64_t{32768}));
  c->add_option("--ring-seq", o.ring.s, "ring: sequence length")->capture_default_str()->check(CLI::Range(int64_t{64}, int64_t{1} << 22));
  c->add_option("--ranks", o.ranks, "ring: virtual ranks on the GPU")->capture_default_str()->check(CLI::Range(1, 16));
  c->add_option("--repetitions", o.repetitions, "repetitions; the best counts")->capture_default_str()->check(CLI::Range(1, 100));
}

namespace {

// Seconds per call of fn, best of `reps` runs of `iters` calls, timed by events on the stream.
template <class F> double best_seconds(int reps, int iters, F&& fn) {
  fn();  // warm-up: first launches, allocator pool
  gpu::synchronize();
  double best = INFINITY;
  for (int r = 0; r < reps; ++r) {
    auto start = gpu::Event::record();
    for (int i = 0; i < iters; ++i) fn();
    auto end = gpu::Event::record();
    best = std::min(best, double(end->steady_ns() - start->steady_ns()) * 1e-9 / iters);
  }
  return best;
}

Tensor random_device(const Shape& shape, AllocTag tag, unsigned seed) {
  Tensor host = Tensor::empty(shape, DType::f32, tag, Device::cpu);
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  for (int64_t i = 0; i < host.numel(); ++i) host.data<float>()[i] = u(rng);
  return host.copy_to(Device::cuda, tag);
}

}  // namespace

int bench_cuda(const BenchCudaOptions& o) {
  if (!gpu::built()) throw ConfigError("bench cuda: this build has no CUDA backend (configure with nvcc present)");
  if (gpu::device_count() == 0)
    throw ConfigError("bench cuda: no CUDA device is visible on this machine (nvidia-smi lists the GPUs)");
  std::printf("ringside bench cuda: %s\n", gpu::describe(0).c_str());
  MemoryTracker tracker;
  const AllocTag tag{0, MemCategory::workspace, &tracker};
  double gemm_tflops = 0;
  {
    gpu::Bind bind(0, 0);
    auto be = make_cuda_backend();
    std::printf("  backend: %s\n", be->describe().c_str());
    const int64_t n = o.gemm_n;
    Tensor a = random_device({n, n}, tag, 1), b = random_device({n, n}, tag, 2), c = random_device({n, n}, tag, 3);
    const double gemm_s = best_seconds(o.repetitions, 5, [&] { be->matmul(a, false, b, false, c); });
    gemm_tflops = 2.0 * double(n) * double(n) * double(n) / gemm_s / 1e12;
    std::printf("\n  cuBLAS sgemm %lld^3             %8.2f TFLOP/s   (the reference)\n", static_cast<long long>(n),
                gemm_tflops);

    AttentionParams p;
    p.b = 1, p.sq = p.sk = o.s, p.H = p.Hkv = o.H, p.d = o.d, p.causal = true;
    p.softmax_scale = 1.0 / std::sqrt(double(o.d));
    Tensor q = random_device({1, o.s, o.H, o.d}, tag, 4), k = random_device({1, o.s, o.H, o.d}, tag, 5),
           v = random_device({1, o.s, o.H, o.d}, tag, 6), dout = random_device({1, o.s, o.H, o.d}, tag, 7);
    Tensor out = Tensor::empty(q.shape(), DType::f32, tag), lse = Tensor::empty({1, o.H, o.s}, DType::f32, tag);
    Tensor dq = be->zeros(q.shape(), DType::f32, tag), dk = be->zeros(k.shape(), DType::f32, tag),
           dv = be->zeros(v.shape(), DType::f32, tag);
    const double flops = kernels::cpu::attention_forward_flops(p);
    const double fwd_s = best_seconds(o.repetitions, 3, [&] { be->attention_forward(p, q, k, v, out, lse); });
    const double bwd_s =
        best_seconds(o.repetitions, 3, [&] { be->attention_backward(p, q, k, v, out, dout, lse, dq, dk, dv); });
    const double fwd_tf = flops / fwd_s / 1e12, bwd_tf = 2.5 * flops / bwd_s / 1e12;
    std::printf("  attention forward  s=%lld H=%lld d=%lld causal  %8.2f TFLOP/s   %.2f x sgemm  (%s)\n",
                static_cast<long long>(o.s), static_cast<long long>(o.H), static_cast<long long>(o.d), fwd_tf,
                fwd_tf / gemm_tflops, format_seconds(fwd_s).c_str());
    std::printf("  attention backward                       %8.2f TFLOP/s   %.2f x sgemm  (%s)\n", bwd_tf,
                bwd_tf / gemm_tflops, format_seconds(bwd_s).c_str());
  }

  // The ring on virtual ranks: each has its own compute and comm streams, transfers are
  // device-to-device copies on the comm streams; the trace says how much of them compute hid.
  const RunPlan ring = resolve(parse_parallel_config("ring"), o.ring, o.ranks, Device::cuda);
  std::vector<trace::RankTrace> traces;
  trace::Clock clock;
  clock.origin_ns = trace::Clock::steady_now_ns();
  TraceSink sink{clock, &traces};
  LocalOptions opts;
  MemoryTracker ring_tracker;
  for (int r = 0; r < o.repetitions; ++r) {  // the last run is the one measured (pools warm)
    traces.clear();
    run_local_ranks(ring, DType::f32, ring_tracker, opts, &sink);
  }
  const auto m = trace::compute_metrics(trace::TraceData{{}, {}, traces, {}});
  std::printf("\n  ring attention, %d virtual ranks on GPU 0: %s\n", o.ranks, o.ring.summary().c_str());
  auto row = [](const char* what, const trace::Breakdown& b) {
    std::printf("    %-26s comm %10s   overlap %5.1f%%   exposed %10s\n", what, format_seconds(b.comm_ns * 1e-9).c_str(),
                b.overlap_pct(), format_seconds(b.exposed_comm_ns * 1e-9).c_str());
  };
  for (const auto& [sublayer, b] : m.at(0).comm_by_sublayer) row(("sublayer " + sublayer).c_str(), b);
  row("the whole layer", m.at(0).total);
  std::printf("    layer time %s (forward + backward, slowest rank)\n",
              format_seconds(double(m.at(0).end_ns - m.at(0).begin_ns) * 1e-9).c_str());
  return 0;
}

}  // namespace ringside::cli

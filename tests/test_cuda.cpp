// The CUDA backend on a GPU: every kernel against the CPU kernel, every strategy on GPU ranks
// against the fp64 CPU reference, memory and bytes against the formulas, the CUDA-event
// timeline, and NCCL. Without a GPU every test exits with CTest's skip code (77): it reports
// SKIPPED, never a vacuous pass.
#define CATCH_CONFIG_RUNNER
#include <catch2/catch.hpp>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <utility>
#include <vector>

#include "cuda_kernel_cases.h"
#include "core/gpu.h"
#include "check/check.h"
#include "parallel/formulas.h"
#include "parallel/run_plan.h"
#include "run/runner.h"
#include "reference64.h"
#include "trace/metrics.h"

using namespace ringside;

namespace {

// Device memory for the kernel cases, freed at the end of the test.
struct DeviceMem {
  std::vector<void*> blocks;
  const gpu::RankStreams& s = gpu::require_bound("DeviceMem");
  ~DeviceMem() {
    gpu::synchronize();
    for (void* p : blocks) gpu::release(p, s);
  }
  template <class T> T* put(const std::vector<T>& v) {
    void* p = gpu::allocate(static_cast<int64_t>((v.size() + 1) * sizeof(T)), s);
    blocks.push_back(p);
    gpu::copy(p, v.data(), static_cast<int64_t>(v.size() * sizeof(T)));
    return static_cast<T*>(p);
  }
  std::vector<float> get(const float* p, size_t n) {
    std::vector<float> out(n);
    gpu::copy(out.data(), p, static_cast<int64_t>(n * sizeof(float)));  // waits for the stream
    return out;
  }
  void* stream() { return s.compute; }
};

LayerConfig small() {
  LayerConfig c;
  c.b = 2, c.s = 64, c.h = 64, c.H = 8, c.Hkv = 8, c.f = 128, c.seed = 5, c.dropout = 0.1;
  return c;
}

LocalOptions on_gpu() {
  LocalOptions o;
  o.device = Device::cuda;
  return o;
}

}  // namespace

// The kernel cases of cuda_kernel_cases.h, on device memory of GPU 0.
template <class Case> void on_gpu(Case run_case) {
  gpu::Bind bind(0, 0);
  DeviceMem m;
  run_case(m);
}

TEST_CASE("cuda kernels: elementwise, bias, GeLU, fill", "[cuda]") { on_gpu(cuda_cases::elementwise<DeviceMem>); }
TEST_CASE("cuda kernels: LayerNorm forward and backward", "[cuda]") { on_gpu(cuda_cases::layernorm<DeviceMem>); }
TEST_CASE("cuda kernels: RMSNorm and SwiGLU forward and backward", "[cuda]") { on_gpu(cuda_cases::rmsnorm_swiglu<DeviceMem>); }
TEST_CASE("cuda kernels: RoPE, dropout bit for bit, fused QKV", "[cuda]") { on_gpu(cuda_cases::rope_dropout_qkv<DeviceMem>); }
TEST_CASE("cuda kernels: FlashAttention-2 forward and backward", "[cuda]") { on_gpu(cuda_cases::attention<DeviceMem>); }
TEST_CASE("cuda kernels: LSE merge", "[cuda]") { on_gpu(cuda_cases::lse_merge<DeviceMem>); }

TEST_CASE("cuda backend: dropout masks through the backend equal the CPU backend's", "[cuda]") {
  gpu::Bind bind(0, 0);
  MemoryTracker tracker;
  const AllocTag tag{0, MemCategory::workspace, &tracker};
  const std::vector<int64_t> pos = {0, 1, 2, 3, 32, 33, 34, 35, 60, 61, 62, 63};  // a zigzag shard
  Tensor gmask = Tensor::empty({2, 12, 24}, DType::f32, tag, Device::cuda);
  Tensor cmask = Tensor::empty({2, 12, 24}, DType::f32, tag, Device::cpu);
  make_cuda_backend()->dropout_mask(gmask, pos, 64, 0.25, 1234, 2);
  make_cpu_backend()->dropout_mask(cmask, pos, 64, 0.25, 1234, 2);
  const Tensor back = gmask.copy_to(Device::cpu, tag);
  REQUIRE(std::memcmp(back.raw_data(), cmask.raw_data(), static_cast<size_t>(cmask.nbytes())) == 0);
  double kept = 0;
  for (int64_t i = 0; i < cmask.numel(); ++i) kept += cmask.data<float>()[i];
  CHECK(kept / double(cmask.numel()) == Approx(0.75).margin(0.06));
}

TEST_CASE("every strategy on P = 2, 4, 8 virtual GPU ranks matches the fp64 reference", "[cuda]") {
  struct Case {
    Layout layout;
    bool llama;  // RMSNorm, SwiGLU, no biases
  };
  for (const Case& k : {Case{Layout::zigzag, false}, Case{Layout::contiguous, false}, Case{Layout::striped, false},
                        Case{Layout::zigzag, true}}) {
    LayerConfig c = small();
    if (k.llama) c.norm = Norm::rmsnorm, c.mlp = Mlp::swiglu, c.bias = false;
    const ReferenceRun ref = reference64(c);
    for (const ParallelConfig& named : strategies()) {
      ParallelConfig par = named;
      par.layout = k.layout;
      if (par.name() != "ring" && k.layout != Layout::zigzag) continue;  // the layout is the ring's
      for (int P : {2, 4, 8}) {
        INFO(par.name() << " P=" << P << " layout=" << to_string(k.layout) << (k.llama ? ", the Llama layer" : ""));
        const RunPlan plan = resolve(par, c, P, Device::cuda);  // the matrix must run, not be skipped
        MemoryTracker tracker;
        const auto res = run_local_ranks(plan, DType::f32, tracker, on_gpu());
        REQUIRE(res[0].out.device() == Device::cpu);
        const auto [err, which] = worst_error(res[0], ref);
        INFO("worst " << which << " " << err);
        CHECK(err < kTolerance);
        for (int r = 0; r < P; ++r) {  // device memory is tracked as host memory is
          CHECK(res[r].peak_saved == parallel_saved_bytes(plan, r, DType::f32));
          const CommBytes cb = parallel_comm_bytes(plan, r, DType::f32);
          CHECK(res[r].forward.bytes_sent == cb.forward);
          CHECK(res[r].backward.bytes_sent == cb.backward);
        }
      }
    }
  }
}

TEST_CASE("GQA and no dropout on GPU ranks: Ulysses replicates kv heads, the ring carries Hkv", "[cuda]") {
  LayerConfig c = small();
  c.Hkv = 2, c.dropout = 0, c.causal = false;
  const ReferenceRun ref = reference64(c);
  // Hkv = 2 < P = 4: Ulysses replicates each kv head twice; TP splits kv heads, so P = 2.
  for (auto [name, P] : {std::pair{"ring", 4}, std::pair{"ulysses", 4}, std::pair{"tp-sp", 2}}) {
    const RunPlan plan = resolve(parse_parallel_config(name), c, P, Device::cuda);
    MemoryTracker tracker;
    const auto res = run_local_ranks(plan, DType::f32, tracker, on_gpu());
    INFO(name << " P=" << P);
    CHECK(worst_error(res[0], ref).first < kTolerance);
  }
}

TEST_CASE("the CUDA timeline: events timed on the streams, inside their phases, K/V bytes as the formula", "[cuda]") {
  LayerConfig c = small();
  c.s = 512;
  const int P = 4;
  MemoryTracker tracker;
  std::vector<trace::RankTrace> traces;
  trace::Clock clock;
  clock.origin_ns = trace::Clock::steady_now_ns();
  TraceSink sink{clock, &traces};
  run_local_ranks(resolve(parse_parallel_config("ring"), c, P, Device::cuda), DType::f32, tracker, on_gpu(), &sink);
  REQUIRE(traces.size() == size_t(P));
  for (const trace::RankTrace& t : traces) {
    int64_t begin = INT64_MAX, end = INT64_MIN, kv_bytes = 0;
    int attention = 0;
    for (const trace::Event& e : t.events)
      if (e.kind == trace::Kind::phase) begin = std::min(begin, e.ts_ns), end = std::max(end, e.end_ns());
    for (const trace::Event& e : t.events) {
      CHECK(e.mark_begin == -1);  // every mark resolved into a time
      if (e.kind == trace::Kind::attention) {
        ++attention;
        // Within the phases, to the clocks' agreement: phases are host times read after a
        // stream synchronisation, ops are event times anchored to the host clock.
        CHECK(e.ts_ns >= begin - 20000);
        CHECK(e.end_ns() <= end + 20000);
      }
      if (e.stream == trace::Stream::comm && e.direction == trace::Direction::send && (e.name == "send k" || e.name == "send v") &&
          e.phase == "forward")
        kv_bytes += e.bytes;
    }
    CHECK(attention > 0);
    // Forward: P - 1 steps, each sending our current K and V blocks [b, s/P, Hkv, d] in f32.
    CHECK(kv_bytes == (P - 1) * 2 * c.b * (c.s / P) * c.Hkv * c.d() * 4);
  }
  const auto m = trace::compute_metrics(trace::TraceData{{}, {}, traces, {}});
  REQUIRE(m.size() == 1);
  CHECK(m[0].total.comm_ns > 0);
  CHECK(m[0].total.compute_ns > 0);
}

TEST_CASE("a failing GPU rank takes the job down with its message", "[cuda]") {
  setenv("RINGSIDE_INJECT_FAILURE", "1:backward", 1);
  MemoryTracker tracker;
  CHECK_THROWS_WITH(run_local_ranks(resolve(parse_parallel_config("ring"), small(), 2, Device::cuda), DType::f32, tracker, on_gpu()),
                    Catch::Contains("rank 1") && Catch::Contains("injected failure"));
  unsetenv("RINGSIDE_INJECT_FAILURE");
  CHECK_THROWS_WITH(run_local_ranks(resolve(parse_parallel_config("ring"), small(), 2, Device::cuda), DType::f64, tracker, on_gpu()),
                    Catch::Contains("f32"));
}

TEST_CASE("nccl: every strategy on one GPU per rank matches the fp64 reference", "[cuda][nccl]") {
  const LayerConfig c = small();
  const ReferenceRun ref = reference64(c);
  LocalOptions o = on_gpu();
  o.nccl = true;
  const int P = std::min(gpu::device_count(), 4);
  for (const ParallelConfig& par : strategies()) {
    INFO(par.name() << " P=" << P);
    const RunPlan plan = resolve(par, c, P, Device::cuda);
    MemoryTracker tracker;
    const auto res = run_local_ranks(plan, DType::f32, tracker, o);
    CHECK(worst_error(res[0], ref).first < kTolerance);
    for (int r = 0; r < P; ++r) CHECK(res[r].forward.bytes_sent == parallel_comm_bytes(plan, r, DType::f32).forward);
  }
}

// Skips (exit 77, CTest's SKIP_RETURN_CODE) when there is no GPU, or, for the NCCL test, fewer
// than two or no NCCL; run without a test name it leaves the NCCL test out then. Listing the
// tests works anywhere (CTest discovers them at build time).
int main(int argc, char** argv) {
  bool listing = false, nccl = false, named = false;
  for (int i = 1; i < argc; ++i) {
    if (std::strncmp(argv[i], "--list", 6) == 0) listing = true;
    if (std::strstr(argv[i], "nccl")) nccl = true;
    if (argv[i][0] != '-') named = true;
  }
  std::vector<char*> args(argv, argv + argc);
  if (!listing) {
    const int gpus = gpu::device_count();
    if (gpus == 0) {
      std::printf("SKIPPED: no CUDA device on this machine (the CUDA backend is built and linked)\n");
      return 77;
    }
    if (!nccl_available() || gpus < 2) {
      if (nccl) {
        std::printf("SKIPPED: NCCL needs 2 or more GPUs and a build with NCCL (%d GPU%s)\n", gpus, gpus == 1 ? "" : "s");
        return 77;
      }
      static char no_nccl[] = "~[nccl]";
      if (!named) args.push_back(no_nccl);
    }
  }
  return Catch::Session().run(static_cast<int>(args.size()), args.data());
}

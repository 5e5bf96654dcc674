// Issue 58: which OpenBLAS kernels ringside runs (kernels/cpu/blas_kernels.h), and the fused
// end of a sublayer (bias_dropout_add) against the three ops it replaces, bit for bit.
#include <catch2/catch.hpp>

#include <cstring>
#include <fstream>
#include <numeric>
#include <sstream>
#include <string>
#include <vector>

#include "core/tensor.h"
#include "device/backend.h"
#include "kernels/cpu/blas_kernels.h"
#include "kernels/cpu/ops.h"
#include "kernels/philox.h"

namespace kc = ringside::kernels::cpu;

TEST_CASE("OpenBLAS kernel sets by vector width: the SSE sets 128, Haswell, Zen and Sandybridge 256, SkylakeX's 512",
          "[blas]") {
  for (const char* sse : {"Prescott", "Core2", "Penryn", "Dunnington", "Nehalem", "Atom", "Barcelona", "Bobcat", "Nano"})
    CHECK(kc::openblas_kernel_width(sse) == 128);
  for (const char* avx : {"Haswell", "Zen", "Sandybridge"}) CHECK(kc::openblas_kernel_width(avx) == 256);
  for (const char* wide : {"SkylakeX", "Cooperlake", "SapphireRapids"}) CHECK(kc::openblas_kernel_width(wide) == 512);
  // A name a newer OpenBLAS may bring: unknown, so its choice stands.
  CHECK(kc::openblas_kernel_width("Zen5") == 0);
  CHECK(kc::openblas_kernel_width("") == 0);
}

TEST_CASE("ringside restarts on the CPU's best kernels only where OpenBLAS chose narrower ones and no one forced them",
          "[blas]") {
  // Debian 12's OpenBLAS on a CPU it does not recognise: Prescott.
  CHECK(kc::kernels_to_restart_with("Prescott", "SkylakeX", false) == "SkylakeX");
  CHECK(kc::kernels_to_restart_with("Prescott", "Haswell", false) == "Haswell");
  // AMD's AVX-512 CPUs (Zen 4, 5), which it takes for Zen (Haswell's kernels).
  CHECK(kc::kernels_to_restart_with("Zen", "SkylakeX", false) == "SkylakeX");
  CHECK(kc::kernels_to_restart_with("Haswell", "SkylakeX", false) == "SkylakeX");
  // As wide already, forced by the user, nothing better, or a set this table does not know.
  CHECK(kc::kernels_to_restart_with("SkylakeX", "SkylakeX", false).empty());
  CHECK(kc::kernels_to_restart_with("Cooperlake", "SkylakeX", false).empty());
  CHECK(kc::kernels_to_restart_with("Zen", "Haswell", false).empty());
  CHECK(kc::kernels_to_restart_with("Prescott", "SkylakeX", true).empty());
  CHECK(kc::kernels_to_restart_with("Prescott", "", false).empty());
  CHECK(kc::kernels_to_restart_with("Zen5", "SkylakeX", false).empty());
}

TEST_CASE("the kernels line says who chose them, and a forced set below the CPU's best is a fallback", "[blas]") {
  using kc::BlasChoice;
  kc::BlasKernels k{"SkylakeX", "SkylakeX", "", BlasChoice::openblas};
  CHECK(k.describe() == "kernel set SkylakeX (AVX-512), OpenBLAS's choice");
  CHECK_FALSE(k.below_best());
  k = {"SkylakeX", "SkylakeX", "Prescott", BlasChoice::ringside, "SkylakeX"};
  CHECK(k.describe() == "kernel set SkylakeX (AVX-512), ringside's choice for this CPU (OpenBLAS's own: Prescott, SSE2)");
  CHECK_FALSE(k.below_best());
  k = {"Prescott", "SkylakeX", "", BlasChoice::forced, "", "Prescott"};
  CHECK(k.describe() ==
        "kernel set Prescott (SSE2), as OPENBLAS_CORETYPE asks, below this CPU's best, SkylakeX (AVX-512): unset "
        "OPENBLAS_CORETYPE for it");
  CHECK(k.below_best());
  k = {"Haswell", "Haswell", "", BlasChoice::forced, "", "haswell"};  // OpenBLAS takes any case
  CHECK(k.describe() == "kernel set Haswell (AVX2), as OPENBLAS_CORETYPE asks");
  CHECK_FALSE(k.below_best());
  // A name OpenBLAS does not know: it chose by itself, and the line does not credit the variable.
  k = {"Cooperlake", "SkylakeX", "", BlasChoice::forced, "", "Foo\x1b"};
  CHECK(k.describe() == "kernel set Cooperlake (AVX-512), OpenBLAS's choice: OPENBLAS_CORETYPE='Foo?' names no kernel set it knows");
  // The restart did not take (no /proc, an exec refused): what runs, and how to get the best.
  k = {"Prescott", "SkylakeX", "Prescott", BlasChoice::ringside, "SkylakeX"};
  CHECK(k.below_best());
  CHECK(k.describe() == "kernel set Prescott (SSE2), OpenBLAS's choice: ringside's restart on SkylakeX (AVX-512), this CPU's "
                        "best, did not happen; OPENBLAS_CORETYPE=SkylakeX selects it");
  // OpenBLAS's own narrower choice where ringside did not restart (a build without DYNAMIC_ARCH).
  k = {"Haswell", "SkylakeX", "", BlasChoice::openblas};
  CHECK(k.describe() == "kernel set Haswell (AVX2), OpenBLAS's choice, below this CPU's best, SkylakeX (AVX-512): "
                        "OPENBLAS_CORETYPE=SkylakeX selects it");
}

TEST_CASE("the CPU's best kernel set is the one /proc/cpuinfo's flags name", "[blas]") {
  std::ifstream cpuinfo("/proc/cpuinfo");
  std::string line, flags;
  while (std::getline(cpuinfo, line))
    if (line.rfind("flags", 0) == 0) {
      flags = line.substr(line.find(':') + 1) + " ";
      break;
    }
  auto has = [&](const char* f) { return flags.find(" " + std::string(f) + " ") != std::string::npos; };
  if (flags.empty()) return;  // no /proc (not Linux): nothing to compare with
  const std::string want = has("avx512f") && has("avx512bw") && has("avx512dq") && has("avx512vl") ? "SkylakeX"
                           : has("avx2") && has("fma")                                               ? "Haswell"
                                                                                                     : "";
  CHECK(kc::best_openblas_kernels() == want);
  // And the test binary itself runs them (it restarts as ringside does), unless forced.
  const kc::BlasKernels k = kc::blas_kernels();
  if (k.how != kc::BlasChoice::forced && k.how != kc::BlasChoice::not_openblas) CHECK_FALSE(k.below_best());
}

namespace {
template <class T>
std::vector<T> values(int64_t n, uint32_t site) {
  std::vector<T> v(n);
  for (int64_t i = 0; i < n; ++i) v[i] = static_cast<T>(4 * ringside::philox_uniform(7, site, uint64_t(i)) - 2);
  return v;
}
}  // namespace

TEMPLATE_TEST_CASE("bias_dropout_add computes add_bias, dropout_forward and add bit for bit, in one pass", "[blas][dropout]",
                   float, double) {
  using T = TestType;
  const int64_t b = 2, s = 9, h = 37;  // h not a multiple of any vector width
  std::vector<int64_t> positions(s);
  std::iota(positions.begin(), positions.end(), int64_t{100});
  for (double p : {0.0, 0.1, 0.5})
    for (bool with_bias : {true, false}) {
      std::vector<T> y = values<T>(b * s * h, 1), residual = values<T>(b * s * h, 2), bias = values<T>(h, 3);
      residual[5] = T(-0.0);  // -0 + a dropped 0 is +0: the fused select must give it too
      // The three ops, as the traced run and the CUDA backend do them.
      std::vector<T> composed = y, want(b * s * h);
      if (with_bias) kc::add_bias(composed.data(), bias.data(), b * s, h);
      kc::dropout_forward(composed.data(), composed.data(), b, s, h, positions.data(), 4096, p, 1234, 7);
      for (int64_t i = 0; i < b * s * h; ++i) want[i] = residual[i] + composed[i];
      std::vector<T> out(b * s * h);
      kc::bias_dropout_add(y.data(), with_bias ? bias.data() : nullptr, residual.data(), out.data(), b, s, h,
                           positions.data(), 4096, p, 1234, 7);
      INFO("p " << p << (with_bias ? ", bias" : ", no bias"));
      CHECK(std::memcmp(out.data(), want.data(), sizeof(T) * out.size()) == 0);
      // out may alias the residual (x2 = x + ... in place).
      kc::bias_dropout_add(y.data(), with_bias ? bias.data() : nullptr, residual.data(), residual.data(), b, s, h,
                           positions.data(), 4096, p, 1234, 7);
      CHECK(std::memcmp(residual.data(), want.data(), sizeof(T) * out.size()) == 0);
    }
}

TEST_CASE("the CPU backend's bias_dropout_add equals the Backend's composed default, and refuses a bias of the wrong width",
          "[blas][dropout]") {
  using namespace ringside;
  auto be = make_cpu_backend();
  const AllocTag tag{};
  const Shape shape{1, 6, 19};
  auto filled = [&](const Shape& sh, uint32_t site) {
    Tensor t = be->empty(sh, DType::f32, tag);
    const std::vector<float> v = values<float>(t.numel(), site);
    std::memcpy(t.data<float>(), v.data(), sizeof(float) * v.size());
    return t;
  };
  const std::vector<int64_t> positions{0, 1, 2, 3, 4, 5};
  Tensor y = filled(shape, 1), residual = filled(shape, 2), bias = filled({19}, 3);
  Tensor y2 = y.clone(tag), fused = be->empty(shape, DType::f32, tag), composed = be->empty(shape, DType::f32, tag);
  be->bias_dropout_add(y, bias, positions, 6, 0.2, 99, 1, residual, fused);
  be->Backend::bias_dropout_add(y2, bias, positions, 6, 0.2, 99, 1, residual, composed);
  CHECK(std::memcmp(fused.data<float>(), composed.data<float>(), fused.nbytes()) == 0);
  Tensor wrong = filled({18}, 4);
  CHECK_THROWS_WITH(be->bias_dropout_add(y, wrong, positions, 6, 0.2, 99, 1, residual, fused),
                    Catch::Contains("bias_dropout_add: bias [18] for rows of 19"));
}

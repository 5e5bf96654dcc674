// The refactor into attention-level primitives (issue 16) must not change a single bit of what
// the three original strategies compute: their outputs and gradients, hashed, against hashes
// taken from the code before the refactor (commit 860403d). The fp64 hashes are still those;
// the fp32 ones were taken again when issue 20 replaced the float kernels (attention version
// 2, the vectorised GeLU, RoPE's angle tables), on version 2's generic path, which every CPU
// runs, so that the hashes do not depend on the machine's vector width.
#include <catch2/catch.hpp>

#include <cstdio>
#include <cstdlib>
#include <string>

#include "kernels/cpu/blas.h"
#include "kernels/cpu/isa.h"
#include "parallel/harness.h"

using namespace ringside;

namespace {

// FNV-1a over the bytes of out, dx and every gradient (rank 0's gathered results; every rank's
// are the same).
uint64_t result_hash(const RankResult& r) {
  uint64_t h = 1469598103934665603ULL;
  auto add = [&](const Tensor& t) {
    const auto* p = static_cast<const unsigned char*>(t.raw_data());
    for (int64_t i = 0; i < t.nbytes(); ++i) h = (h ^ p[i]) * 1099511628211ULL;
  };
  add(r.out), add(r.dx);
  for (auto& [name, t] : const_cast<LayerWeights&>(r.grads).named()) add(*t);
  return h;
}

struct Case {
  const char* strategy;
  int P;
  DType dt;
  int64_t Hkv;
  bool causal, rope;
  double dropout;
  Layout layout;
  uint64_t hash;  ///< with OpenBLAS's Haswell kernels (what Debian 12's OpenBLAS picks on the CI machines)
  uint64_t hash_skylakex, hash_prescott;  ///< with OPENBLAS_CORETYPE=SkylakeX and =Prescott
};

// The column of the OpenBLAS kernel set in use: its GEMMs sum in their own order, so each set
// has its own bits. 0: no hashes for this BLAS (the check is skipped, with a warning).
uint64_t Case::*hash_column() {
#ifdef RINGSIDE_OPENBLAS
  const std::string core = openblas_get_corename();
  if (core == "Haswell" || core == "Zen") return &Case::hash;
  if (core == "SkylakeX") return &Case::hash_skylakex;
  if (core == "Prescott") return &Case::hash_prescott;
#endif
  return nullptr;
}

// Taken with RINGSIDE_PRINT_HASHES=1 (see the file for when).
const Case kCases[] = {
#include "bit_identity_hashes.inc"
};

}  // namespace

TEST_CASE("tp-sp, ring and ulysses compute bit for bit what they computed before the refactor", "[strategies][bits]") {
  const bool print = std::getenv("RINGSIDE_PRINT_HASHES") != nullptr;
  uint64_t Case::*column = hash_column();
  if (column == nullptr) {
    WARN("no hashes for this BLAS's kernels; bit identity not checked");
    return;
  }
  const kernels::cpu::CpuIsa before = kernels::cpu::active_cpu_isa();
  kernels::cpu::set_cpu_isa(kernels::cpu::CpuIsa::generic);
  int checked = 0;
  for (const Case& k : kCases) {
    LayerConfig c;
    c.b = 2, c.s = 24, c.h = 48, c.H = 12, c.f = 96, c.seed = 99;
    c.Hkv = k.Hkv, c.causal = k.causal, c.rope = k.rope, c.dropout = k.dropout, c.layout = k.layout;
    MemoryTracker tracker;
    const auto res = run_strategy_local(find_strategy(k.strategy), c, k.P, k.dt, tracker);
    const uint64_t h = result_hash(res[0]);
    if (print)
      std::printf("  {\"%s\", %d, DType::%s, %lld, %s, %s, %.1f, Layout::%s, 0x%016llxULL},\n", k.strategy, k.P,
                  k.dt == DType::f32 ? "f32" : "f64", static_cast<long long>(k.Hkv), k.causal ? "true" : "false",
                  k.rope ? "true" : "false", k.dropout, k.layout == Layout::automatic ? "automatic" : to_string(k.layout), static_cast<unsigned long long>(h));
    INFO(k.strategy << " P=" << k.P << " Hkv=" << k.Hkv << " causal=" << k.causal << " rope=" << k.rope
                    << " dropout=" << k.dropout << " layout=" << to_string(k.layout));
    CHECK(h == k.*column);
    ++checked;
  }
  kernels::cpu::set_cpu_isa(before);
  REQUIRE(checked == 30);
}

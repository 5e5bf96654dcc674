// What `ringside reference --dump` wrote (the CTest fixture "cli: reference --dump") against
// the library: the same config, the same tensors, bit for bit.
#include <catch2/catch.hpp>

#include "lessons/lesson.h"
#include "model/model.h"
#include "trace/metrics.h"
#include "trace/trace_file.h"

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>

#include <nlohmann/json.hpp>

#include "core/npy.h"
#include "kernels/philox.h"
#include "layer/reference.h"
#include "check/check.h"
#include "parallel/config.h"

using namespace ringside;
namespace fs = std::filesystem;

namespace {

// The JSON file the CTest fixture named in the environment variable `var` (compare --json).
nlohmann::json json_from_env(const char* var) {
  const char* path = std::getenv(var);
  INFO(var);
  REQUIRE(path != nullptr);
  std::ifstream f(path);
  REQUIRE(f.good());
  return nlohmann::json::parse(f);
}

}  // namespace

TEST_CASE("the --dump directory holds every tensor named and shaped as documented", "[cli]") {
  const char* env = std::getenv("RINGSIDE_DUMP_DIR");
  REQUIRE(env != nullptr);
  const fs::path dir = env;
  std::ifstream mf(dir / "manifest.json");
  REQUIRE(mf.good());
  const nlohmann::json m = nlohmann::json::parse(mf);

  LayerConfig c;
  const auto& jc = m.at("config");
  c.b = jc.at("b"), c.s = jc.at("s"), c.h = jc.at("h"), c.H = jc.at("H"), c.Hkv = jc.at("Hkv"), c.f = jc.at("f");
  c.causal = jc.at("causal"), c.rope = jc.at("rope"), c.dropout = jc.at("dropout"), c.seed = jc.at("seed");
  c.norm = parse_norm(jc.at("norm")), c.mlp = parse_mlp(jc.at("mlp")), c.bias = jc.at("bias");
  REQUIRE(double(jc.at("eps")) == 1e-5);
  // The GPT layer, or with RINGSIDE_DUMP_LAYER=llama the CTest's --norm rmsnorm --mlp swiglu --no-bias.
  const bool llama = std::getenv("RINGSIDE_DUMP_LAYER") && std::string(std::getenv("RINGSIDE_DUMP_LAYER")) == "llama";
  CHECK(c.norm == (llama ? Norm::rmsnorm : Norm::layernorm));
  CHECK(c.mlp == (llama ? Mlp::swiglu : Mlp::gelu));
  CHECK(c.bias == !llama);
  // The CTest command line: --seq 48 --hidden 32 --heads 4 --kv-heads 2 --ffn 64 --batch 2 --seed 7.
  REQUIRE((c.b == 2 && c.s == 48 && c.h == 32 && c.H == 4 && c.Hkv == 2 && c.f == 64 && c.seed == 7));
  REQUIRE((c.causal && c.rope && c.dropout == 0.1));

  auto load = [&](const std::string& name) {
    INFO("tensor " << name);
    REQUIRE(m.at("tensors").contains(name));
    Tensor t = read_npy((dir / m.at("tensors").at(name).at("file").get<std::string>()).string());
    REQUIRE(t.dtype() == DType::f32);
    REQUIRE(t.shape() == m.at("tensors").at(name).at("shape").get<Shape>());
    return t;
  };

  // Shapes as documented.
  const Shape act{c.b, c.s, c.h};
  for (const char* n : {"x", "dout", "out", "dropout1.mask", "dropout2.mask", "grad.x"}) REQUIRE(load(n).shape() == act);
  for (auto& [name, shape] : weight_shapes(c)) {
    REQUIRE(load(name).shape() == shape);
    REQUIRE(load("grad." + name).shape() == shape);
  }
  REQUIRE(load("qkv.weight").shape() == Shape{c.h, (c.H + 2 * c.Hkv) * c.d()});
  REQUIRE(load("fc1.weight").shape() == Shape{c.h, (llama ? 2 : 1) * c.f});  // SwiGLU: [gate | up]
  // Exactly the layer's tensors: no bias or beta the layer does not have.
  size_t parameters = 0;
  for (auto& [name, entry] : m.at("tensors").items()) parameters += name.ends_with(".weight") || name.ends_with(".bias") ||
                                                                    name.ends_with(".gamma") || name.ends_with(".beta");
  CHECK(parameters == 2 * weight_shapes(c).size());  // each parameter and its gradient

  // Values: recompute with the library and compare bit for bit.
  auto be = make_cpu_backend();
  const LayerWeights w = init_weights(c, DType::f32, {});
  const Tensor x = random_input(c, static_cast<uint32_t>(RngSite::input_x), DType::f32, {});
  const Tensor dout = random_input(c, static_cast<uint32_t>(RngSite::input_dout), DType::f32, {});
  REQUIRE(relative_error(load("x"), x) == 0);
  REQUIRE(relative_error(load("dout"), dout) == 0);
  for (auto& [name, t] : w.named()) REQUIRE(relative_error(load(name), *t) == 0);
  const ForwardResult f = reference_forward<float>(c, w, x, *be);
  const Gradients g = reference_backward<float>(c, w, f.saved, dout, *be);
  REQUIRE(relative_error(load("out"), f.out) == 0);
  REQUIRE(relative_error(load("grad.x"), g.dx) == 0);
  for (auto& [name, t] : g.grads.named()) REQUIRE(relative_error(load("grad." + name), *t) == 0);

  // Masks are 0/1; kept fraction near 1 - p; the two sites differ.
  const Tensor m1 = load("dropout1.mask"), m2 = load("dropout2.mask");
  int64_t kept = 0, differ = 0;
  for (int64_t i = 0; i < m1.numel(); ++i) {
    const float a = m1.data<float>()[i], b = m2.data<float>()[i];
    REQUIRE((a == 0.0f || a == 1.0f));
    kept += a == 1.0f;
    differ += a != b;
  }
  const double n = double(m1.numel()), p = c.dropout;
  REQUIRE(std::abs(kept - n * (1 - p)) < 4 * std::sqrt(n * p * (1 - p)));
  REQUIRE(differ > 0);
}

TEST_CASE("the compare json holds every tensor and every rank, measured beside the formulas", "[cli-json]") {
  const nlohmann::json j = json_from_env("RINGSIDE_COMPARE_JSON");
  REQUIRE(j.at("ranks") == 4);
  REQUIRE(j.at("backend") == "local");
  REQUIRE(j.at("config").at("s") == 48);
  REQUIRE(j.at("reference_fp32").at("errors").size() == 14);  // out, grad.x, 12 weights
  REQUIRE(j.at("strategies").size() == 6);  // tp-sp, ring, ulysses, all-gather, tp2xring2, ulysses2xring2
  // The ring's work table: the zigzag layout ran (causal) and is balanced; contiguous is not.
  const auto& work = j.at("ring_work_per_rank");
  REQUIRE(work.at("zigzag").at("measured") == true);
  REQUIRE(work.at("zigzag").at("gflops").size() == 4);
  REQUIRE(work.at("zigzag").at("max_over_min").get<double>() <= 1.1);
  REQUIRE(work.at("contiguous").at("max_over_min").get<double>() > 3);
  for (const auto& s : j.at("strategies")) {
    INFO(s.at("name"));
    REQUIRE(s.at("ok") == true);
    REQUIRE(s.at("errors").size() == 14);
    double worst = 0;
    for (auto& [name, e] : s.at("errors").items()) worst = std::max(worst, e.get<double>());
    REQUIRE(s.at("worst").at("error").get<double>() == worst);
    REQUIRE(worst < kTolerance);
    REQUIRE(s.at("per_rank").size() == 4);
    // The configuration, resolved: its degrees multiply to P and name it.
    const auto& par = s.at("parallel");
    const int T = par.at("tp_size"), C = par.at("cp_size"), U = par.at("a2a_size"), R = par.at("ring_size");
    REQUIRE(T * C == 4);
    const CpScheme* comm = parse_cp_comm(par.at("cp_comm_type"));
    REQUIRE(U * R == (comm->groups.a2a || comm->groups.ring ? C : 1));  // all_gather: neither an all-to-all nor a ring
    const ParallelConfig named = parse_parallel_config(s.at("name")).resolved(4);
    REQUIRE((named.tp == T && named.cp == C && named.cp_comm == comm && named.a2a_size() == U && named.ring_size() == R));
    for (const auto& r : s.at("per_rank")) {
      REQUIRE(r.at("peak_saved_bytes") == r.at("formula_saved_bytes"));
      REQUIRE(r.at("bytes_sent").at("forward") == r.at("formula_bytes_sent").at("forward"));
      REQUIRE(r.at("bytes_sent").at("backward") == r.at("formula_bytes_sent").at("backward"));
      REQUIRE(r.at("bytes_sent").at("forward").get<double>() > 0);
      if (s.at("name") == "ring") REQUIRE(r.at("attention_flops").get<double>() > 0);
      // The timeline's numbers: consistent with each other and with the counters.
      const auto& t = r.at("timeline");
      REQUIRE(t.at("peak_memory_bytes") == r.at("peak_bytes"));
      REQUIRE(t.at("bytes_sent").get<double>() ==
              r.at("bytes_sent").at("forward").get<double>() + r.at("bytes_sent").at("backward").get<double>());
      const double comm = t.at("comm_us"), overlap = t.at("overlap_us"), exposed = t.at("exposed_comm_us");
      REQUIRE(comm > 0);
      REQUIRE(exposed == Approx(comm - overlap));
      REQUIRE(t.at("overlap_pct").get<double>() == Approx(100 * overlap / comm));
      REQUIRE(t.at("compute_us").get<double>() + exposed + t.at("idle_us").get<double>() ==
              Approx(t.at("window_us").get<double>()));
    }
    const auto& tl = s.at("timeline");
    REQUIRE(tl.at("compute_imbalance").get<double>() >= 1.0);
    // Ring steps: R per pass for the configurations with a ring (R = P for the ring, 2 for the
    // hybrids at P 4); none for the others.
    const std::string name = s.at("name");
    REQUIRE(tl.contains("steps") == (name.find("ring") != std::string::npos));
    if (name == "ring") REQUIRE(tl.at("steps").size() == 8);
    if (name == "tp2xring2" || name == "ulysses2xring2") REQUIRE(tl.at("steps").size() == 4);
  }
}

TEST_CASE("compare's modeled twin is the same on two runs, and what model --from makes of its trace", "[cli-twin]") {
  const nlohmann::json a = json_from_env("RINGSIDE_COMPARE_JSON"), b = json_from_env("RINGSIDE_COMPARE_AGAIN_JSON");
  REQUIRE(a.at("modeled").at("hardware").at("name") == "a100-nvlink");
  REQUIRE(a.at("modeled").at("strategies").size() == a.at("strategies").size());
  // Deterministic: every modeled number of the two runs is the same (the measured times are not).
  CHECK(a.at("modeled") == b.at("modeled"));
  // The trace holds each strategy's twin right after it, and modeling the trace again (as
  // `ringside model --from` does: the twins are left out) gives the twins' metrics.
  const char* trace_path = std::getenv("RINGSIDE_COMPARE_TRACE");
  REQUIRE(trace_path != nullptr);
  const trace::TraceData recorded = trace::read_trace(trace_path);
  REQUIRE(recorded.run.groups.size() == a.at("strategies").size());
  std::vector<std::string> order;
  for (const trace::RankTrace& r : recorded.ranks)
    if (order.empty() || order.back() != r.strategy) order.push_back(r.strategy);
  REQUIRE(order.size() == 2 * a.at("strategies").size());
  for (size_t i = 0; i < order.size(); i += 2) CHECK(order[i + 1] == model::modeled_label(order[i], "a100-nvlink"));
  const trace::TraceData again = model::model_trace(recorded, model::load_hardware("a100-nvlink"));
  const std::vector<trace::StrategyMetrics> m = trace::compute_metrics(again);
  REQUIRE(m.size() == a.at("strategies").size());
  for (size_t i = 0; i < m.size(); ++i) {
    const nlohmann::json& twin = a.at("modeled").at("strategies").at(i);
    INFO(m[i].strategy);
    CHECK(twin.at("strategy") == m[i].strategy);
    int64_t layer = 0;
    for (const trace::RankMetrics& r : m[i].ranks) layer = std::max(layer, r.time.window_ns);
    CHECK(twin.at("layer_us").get<double>() == Approx(double(layer) / 1e3).margin(1e-3));
    CHECK(twin.at("total").at("exposed_comm_us").get<double>() == Approx(double(m[i].total.exposed_comm_ns) / 1e3).margin(1e-3));
    CHECK(twin.at("total").at("overlap_us").get<double>() == Approx(double(m[i].total.overlap_ns) / 1e3).margin(1e-3));
  }
}

TEST_CASE("the README's demo and validation table say what their runs say (a stale README fails)", "[cli-readme]") {
  nlohmann::json demo = json_from_env("RINGSIDE_DEMO_JSON");
  demo["validate"] = json_from_env("RINGSIDE_VALIDATE_JSON");    // the fit and held-out sets: /validate/...
  demo["leave_out"] = json_from_env("RINGSIDE_LEAVE_OUT_JSON");  // leave-one-source-out: /leave_out/...
  std::ifstream r(RINGSIDE_SOURCE_DIR "/README.md", std::ios::binary);
  REQUIRE(r.good());
  std::ostringstream readme;
  readme << r.rdbuf();
  CHECK(lessons::chapter_marks(readme.str()) >= 5);
  for (const std::string& p : lessons::chapter_drift(readme.str(), demo, {})) FAIL_CHECK(p);
}

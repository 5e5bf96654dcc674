// The what-if model: the dry run records the real run's schedule; the model reproduces the
// closed forms (ring overlap at c = F/B, Ulysses' volume, memory per rank).
#include <catch2/catch.hpp>

#include <cmath>
#include <cstring>
#include <fstream>
#include <iterator>
#include <map>
#include <regex>

#include "comm/tensor_comm.h"
#include "core/error.h"
#include "layer/weights.h"
#include "model/model.h"
#include "parallel/formulas.h"
#include "parallel/run_plan.h"
#include "run/runner.h"
#include "trace/metrics.h"
#include "trace/trace.h"

using namespace ringside;

namespace {

LayerConfig small() {
  LayerConfig c;
  c.b = 2, c.s = 64, c.h = 64, c.H = 8, c.Hkv = 4, c.f = 64;
  return c;
}

// The plan of the configuration `name` for c on P ranks, in `layout`.
RunPlan plan_of(const std::string& name, const LayerConfig& c, int P, Layout layout = Layout::automatic) {
  ParallelConfig par = parse_parallel_config(name);
  par.layout = layout;
  return resolve(par, c, P);
}

std::vector<trace::RankTrace> traced(const RunPlan& plan, bool dry, MemoryTracker& tracker,
                                     std::vector<RunRecord>* results = nullptr) {
  std::vector<trace::RankTrace> out;
  trace::Clock clock;
  clock.origin_ns = trace::Clock::steady_now_ns();
  TraceSink sink{clock, &out};
  LocalOptions o;
  o.dry_run = dry;
  auto r = run_local_ranks(plan, DType::f32, tracker, o, &sink);
  if (results) *results = std::move(r);
  return out;
}

}  // namespace

TEST_CASE("a dry run records the real run's schedule: the same events in the same order, and memory", "[model]") {
  for (const char* name : {"tp-sp", "ring", "ulysses"})
    for (int P : {2, 4}) {
      INFO(name << " P = " << P);
      const RunPlan plan = plan_of(name, small(), P);
      MemoryTracker real_t, dry_t;
      std::vector<RunRecord> real_r, dry_r;
      const auto real = traced(plan, false, real_t, &real_r);
      const auto dry = traced(plan, true, dry_t, &dry_r);
      REQUIRE(real.size() == dry.size());
      for (size_t p = 0; p < real.size(); ++p) {
        // Program order is the schedule; the vector order (completion) may differ with timing.
        auto by_order = [](std::vector<trace::Event> v) {
          std::stable_sort(v.begin(), v.end(), [](const trace::Event& a, const trace::Event& b) { return a.order < b.order; });
          return v;
        };
        const auto a = by_order(real[p].events), b = by_order(dry[p].events);
        REQUIRE(a.size() == b.size());
        for (size_t i = 0; i < a.size(); ++i) {
          INFO("rank " << p << " event " << i << ": " << a[i].name << " / " << b[i].name);
          REQUIRE(a[i].name == b[i].name);
          REQUIRE(a[i].kind == b[i].kind);
          REQUIRE(a[i].order == b[i].order);
          REQUIRE(a[i].end_order == b[i].end_order);
          REQUIRE(a[i].flops == b[i].flops);
          REQUIRE(a[i].bytes == b[i].bytes);
          REQUIRE(a[i].peer == b[i].peer);
          REQUIRE(a[i].seq == b[i].seq);
          REQUIRE(a[i].phase == b[i].phase);
          REQUIRE(a[i].sublayer == b[i].sublayer);
        }
        REQUIRE(real_r[p].peak_bytes == dry_r[p].peak_bytes);
        REQUIRE(real_r[p].peak_saved == dry_r[p].peak_saved);
        REQUIRE(real_r[p].forward.bytes_sent == dry_r[p].forward.bytes_sent);
        REQUIRE(real_r[p].backward.bytes_sent == dry_r[p].backward.bytes_sent);
        REQUIRE(dry_r[p].out.is_dry());
      }
    }
}

namespace {

// An ideal machine but for compute and its links: memory bandwidth so high that only FLOPs
// count, no latency, one node. F and B as given.
model::Hardware ideal(double F, double B) {
  model::Hardware h;
  h.name = "test";
  h.peak_flops_bf16 = h.peak_flops_fp32 = F;
  h.memory_bandwidth = 1e30;
  h.memory_bytes = 1e30;
  model::Tier link;  // one tier: every GPU joined alike
  link.name = "link", link.bandwidth = B;
  h.tiers = {link};
  return h;
}

trace::TraceData dry_schedule(const RunPlan& plan, std::vector<RunRecord>* results = nullptr, MemoryTracker* tracker = nullptr) {
  MemoryTracker local;
  return model::dry_run(plan, tracker ? *tracker : local, results);
}

// The exposed communication of forward ring step `step`, summed over the ranks (ns).
int64_t exposed_at_step(const trace::TraceData& modeled, int step) {
  for (const trace::StrategyMetrics& m : trace::compute_metrics(modeled))
    for (const trace::StepMetrics& s : m.steps)
      if (s.phase == "forward" && s.step == step) return s.total.exposed_comm_ns;
  FAIL("no forward ring step " << step);
  return -1;
}

}  // namespace

TEST_CASE("the model flips the ring from exposed to hidden at c = F/B tokens (Liu et al. 2023)", "[model]") {
  // A100: 312 TFLOP/s bf16, 300 GB/s NVLink: F/B = 1040 tokens per block, for MHA in bf16.
  const model::Hardware a100 = ideal(312e12, 300e9);
  REQUIRE(a100.peak_flops_bf16 / a100.tiers.front().bandwidth == Approx(1040));
  for (int64_t c : {800, 1000, 1100, 1300}) {
    INFO("c = " << c << " tokens per block");
    LayerConfig cfg;
    cfg.b = 1, cfg.s = 2 * c, cfg.h = 512, cfg.H = 8, cfg.Hkv = 8, cfg.f = 64;  // MHA, d = 64
    cfg.causal = false, cfg.dropout = 0;
    const trace::TraceData modeled = model::model_trace(dry_schedule(plan_of("ring", cfg, 2, Layout::contiguous)), a100);
    // Step 0 computes on the local block while the neighbour's K and V arrive.
    const int64_t exposed = exposed_at_step(modeled, 0);
    if (c < 1040) REQUIRE(exposed > 0);
    else REQUIRE(exposed == 0);
  }
  // Under a causal mask a zigzag step computes half its c x c pairs: the threshold doubles,
  // 2 F/B = 2080 tokens (the break test's finding: lesson 6 and the planner once said F/B).
  model::ModelOptions peak;
  peak.efficiency = "ideal";
  CHECK(model::ring_threshold(a100, peak, a100.tiers.front(), 1.0, true).tokens == Approx(2080));
  CHECK(std::string(model::ring_threshold(a100, peak, a100.tiers.front(), 1.0, true).doubling) == "2 ");
  for (int64_t c : {1600, 1900, 2300, 2600}) {
    INFO("causal, c = " << c << " tokens per block");
    LayerConfig cfg;
    cfg.b = 1, cfg.s = 2 * c, cfg.h = 512, cfg.H = 8, cfg.Hkv = 8, cfg.f = 64;
    cfg.dropout = 0;
    const trace::TraceData modeled = model::model_trace(dry_schedule(plan_of("ring", cfg, 2, Layout::zigzag)), a100);
    const int64_t exposed = exposed_at_step(modeled, 0);
    if (c < 2080) REQUIRE(exposed > 0);
    else REQUIRE(exposed == 0);
  }
}

TEST_CASE("a transfer takes latency + bytes / bandwidth, an op max(FLOPs / peak, bytes / memory bandwidth)", "[model]") {
  // Two ranks by hand: rank 0 computes, then sends 1 MB; rank 1 posts its receive and waits.
  trace::TraceData t;
  t.run.dtype = "float32";
  for (int r = 0; r < 2; ++r) {
    trace::RankTrace rt;
    rt.strategy = "hand", rt.rank = r;
    int64_t pc = 0;
    if (r == 0) {
      trace::Event op;
      op.name = "matmul", op.kind = trace::Kind::gemm, op.flops = 2e9, op.bytes = 4'000'000, op.order = pc++, op.end_order = pc++;
      rt.events.push_back(op);
    }
    trace::Event post;
    post.name = r == 0 ? "send x" : "recv x", post.kind = trace::Kind::p2p, post.stream = trace::Stream::comm;
    post.direction = r == 0 ? trace::Direction::send : trace::Direction::recv, post.peer = 1 - r, post.tag = 5, post.seq = 0, post.bytes = 1'000'000;
    post.order = post.end_order = pc++;
    trace::Event wait;
    wait.name = "wait", wait.kind = trace::Kind::wait, wait.direction = post.direction, wait.peer = post.peer, wait.tag = 5, wait.seq = 0;
    wait.order = pc++, wait.end_order = pc++;
    rt.events.push_back(post), rt.events.push_back(wait);
    t.ranks.push_back(rt);
  }
  model::Hardware hw = ideal(1e12, 1e9);
  hw.memory_bandwidth = 1e9;  // the op: max(2e9 / 1e12, 2e6 / 1e9) = 2 ms (bf16 halves its bytes)
  hw.tiers.front().latency_s = 10e-6;
  const trace::TraceData m = model::model_trace(t, hw);
  const trace::Event& op = m.ranks[0].events[0];
  REQUIRE(op.ts_ns == 0);
  REQUIRE(op.dur_ns == 2'000'000);
  const trace::Event& send = m.ranks[0].events[1];
  REQUIRE(send.ts_ns == 2'000'000);                // posted after the op; the receive was posted at 0
  REQUIRE(send.dur_ns == 10'000 + 500'000);         // 10 us + 0.5 MB (bf16) / 1 GB/s
  REQUIRE(m.ranks[1].events[1].end_ns() == 2'510'000);  // the receiver waits until it arrives
  REQUIRE(m.run.modeled);
  REQUIRE(m.run.hardware_name() == "test");

  // A wait whose transfer is never posted: an error naming it, not a hang.
  trace::TraceData cut = t;
  cut.ranks[0].events.erase(cut.ranks[0].events.begin() + 1);
  REQUIRE_THROWS_WITH(model::model_trace(cut, hw), Catch::Contains("cannot finish: hand rank 0 waits for 'wait' (a send to rank 1, tag 5, seq 0)") &&
                                                     Catch::Contains("not posted on both ends"));
  // A wait whose transfer neither end posted (both removed): an error, not a free transfer.
  trace::TraceData gone = t;
  gone.ranks[0].events.erase(gone.ranks[0].events.begin() + 1);
  gone.ranks[1].events.erase(gone.ranks[1].events.begin());
  REQUIRE_THROWS_WITH(model::model_trace(gone, hw), Catch::Contains("incomplete") && Catch::Contains("neither end posted"));
  // A modeled trace is not modeled again (its bytes are the model's already).
  REQUIRE_THROWS_WITH(model::model_trace(m, hw), Catch::Contains("already modeled"));
  // A foreign trace without program order.
  trace::TraceData foreign = t;
  foreign.ranks[0].events[0].order = -1;
  REQUIRE_THROWS_WITH(model::model_trace(foreign, hw), Catch::Contains("no program order"));
}

TEST_CASE("the modeled trace of a run holds the measured trace's events, in order, retimed consistently", "[model]") {
  for (const char* name : {"tp-sp", "ring", "ulysses"}) {
    INFO(name);
    MemoryTracker tracker;
    trace::TraceData measured;
    measured.run.dtype = "float32";
    measured.ranks = traced(plan_of(name, small(), 4), false, tracker);
    const trace::TraceData m = model::model_trace(measured, model::load_hardware("h100-nvlink"));
    REQUIRE(m.ranks.size() == measured.ranks.size());
    for (size_t p = 0; p < m.ranks.size(); ++p) {
      const auto& a = measured.ranks[p].events;
      const auto& b = m.ranks[p].events;
      REQUIRE(a.size() == b.size());
      std::map<std::tuple<int, int, int, int64_t>, const trace::Event*> sends;
      for (size_t i = 0; i < a.size(); ++i) {
        REQUIRE(a[i].name == b[i].name);
        REQUIRE(a[i].order == b[i].order);
        REQUIRE(b[i].ts_ns >= 0);
        REQUIRE(b[i].dur_ns >= 0);
        REQUIRE(b[i].bytes == (a[i].bytes + 1) / 2);  // bf16: half of fp32 (rounded)
      }
      // In program order, every compute-stream event begins no earlier than the one before.
      std::vector<const trace::Event*> seq;
      for (const auto& e : b)
        if (e.stream == trace::Stream::compute) seq.push_back(&e);
      std::sort(seq.begin(), seq.end(), [](auto* x, auto* y) { return x->order < y->order; });
      for (size_t i = 1; i < seq.size(); ++i) REQUIRE(seq[i]->ts_ns >= seq[i - 1]->ts_ns);
      REQUIRE(m.ranks[p].memory.size() == measured.ranks[p].memory.size());
    }
  }
}

TEST_CASE("issue 59: the record of the model options holds every option, and a modeled trace and its twins keep it through the file",
          "[model][issue59]") {
  const model::Hardware hw = model::load_hardware("h100-nvlink");
  // Every option away from its default: achieved rates here, the roofline below.
  model::ModelOptions all;
  all.dtype = "fp8", all.attention_kernel = "fa3", all.stack = model::load_stack("torchtitan"), all.merge = "unfused";
  all.fp8_recipe = "current", all.tp_comm_overlap = true, all.overlap_grad_reduce = true;
  all.stack.grad_reduce_fp32 = !model::default_stack().grad_reduce_fp32;
  model::ModelOptions ideal;
  ideal.efficiency = "ideal";
  const nlohmann::json base = model::modeling_info(hw, {}).to_json(), changed = model::modeling_info(hw, all).to_json(),
                       roofline = model::modeling_info(hw, ideal).to_json();
  CHECK(base == nlohmann::json{{"dtype", "bf16"}, {"efficiency", "achieved"}, {"attention_kernel", "cudnn"}, {"stack", "megatron"},
                               {"merge", "fused"}, {"fp8_recipe", nullptr}, {"tp_comm_overlap", false},
                               {"grad_reduce_fp32", model::default_stack().grad_reduce_fp32}, {"overlap_grad_reduce", false}});
  CHECK(changed == nlohmann::json{{"dtype", "fp8"}, {"efficiency", "achieved"}, {"attention_kernel", "fa3"}, {"stack", "torchtitan"},
                                  {"merge", "unfused"}, {"fp8_recipe", "current"}, {"tp_comm_overlap", true},
                                  {"grad_reduce_fp32", !model::default_stack().grad_reduce_fp32}, {"overlap_grad_reduce", true}});
  CHECK(roofline["efficiency"] == "ideal");
  CHECK(roofline["attention_kernel"].is_null());  // at the roofline no kernel's rates run
  // Each field of the record moves with its option: none is left at its default.
  for (const auto& [key, value] : base.items()) {
    INFO(key);
    CHECK((changed[key] != value || roofline[key] != value));
  }

  // Through the file: a modeled trace's otherData.modeling, and a twin's modeled_groups[label].modeling.
  MemoryTracker tracker;
  trace::TraceData schedule = model::dry_run(plan_of("ring", small(), 2), tracker);
  const trace::TraceData modeled = model::model_trace(schedule, hw, all);
  const trace::TraceData read = trace::parse_trace(trace::to_chrome_json(modeled).dump(), "modeled.json");
  REQUIRE(read.run.modeling.has_value());
  CHECK(*read.run.modeling == model::modeling_info(hw, all));
  CHECK(read.run.model_dtype == "fp8");
  CHECK(read.run.model_attention_kernel == "fa3");
  MemoryTracker measured_tracker;
  trace::TraceData measured;
  measured.run.dtype = "float32";
  measured.ranks = traced(plan_of("ring", small(), 2), false, measured_tracker);
  const trace::TraceData twins = trace::parse_trace(trace::to_chrome_json(model::with_modeled_twin(measured, hw, all)).dump(), "twins.json");
  const trace::GroupInfo* twin = twins.run.group("ring (modeled, h100-nvlink)");
  REQUIRE(twin != nullptr);
  REQUIRE(twin->modeling.has_value());
  CHECK(*twin->modeling == model::modeling_info(hw, all));
  CHECK(twin->efficiency == "achieved");
  // The options reach the numbers too: the same schedule's ring costs more under the unfused merge.
  model::ModelOptions unfused;
  unfused.merge = "unfused";
  auto layer = [&](const model::ModelOptions& o) { return trace::layer_ns(trace::compute_metrics(model::model_trace(schedule, hw, o)).front()); };
  CHECK(layer(unfused) > layer({}));
}

TEST_CASE("a measured trace's modeled twin: after each group, aligned at the layer's start, left out when modeled again", "[model]") {
  MemoryTracker tracker;
  trace::TraceData measured;
  measured.run.dtype = "float32";
  for (const char* name : {"tp-sp", "ring"}) {
    std::vector<trace::RankTrace> r = traced(plan_of(name, small(), 4), false, tracker);
    measured.ranks.insert(measured.ranks.end(), r.begin(), r.end());
  }
  const model::Hardware hw = model::load_hardware("a100-nvlink");
  const trace::TraceData both = model::with_modeled_twin(measured, hw);
  REQUIRE(both.ranks.size() == 2 * measured.ranks.size());
  const std::vector<std::string> want = {"tp-sp", "tp-sp (modeled, a100-nvlink)", "ring", "ring (modeled, a100-nvlink)"};
  for (size_t p = 0; p < both.ranks.size(); ++p) CHECK(both.ranks[p].strategy == want[p / 4]);
  // As the file says it: otherData.modeled_groups, read back.
  const nlohmann::json other = trace::to_chrome_json(both)["otherData"];
  CHECK(other["modeled_groups"]["ring (modeled, a100-nvlink)"]["of"] == "ring");
  CHECK(other["modeled_groups"]["ring (modeled, a100-nvlink)"]["hardware"] == "a100-nvlink");
  CHECK(other["modeled_hardware"]["name"] == "a100-nvlink");
  const trace::RunInfo info = trace::run_info(other);
  REQUIRE(info.group("ring (modeled, a100-nvlink)") != nullptr);
  CHECK(info.group("ring (modeled, a100-nvlink)")->of == "ring");
  CHECK(info.group("ring (modeled, a100-nvlink)")->dtype == "bf16");
  CHECK(info.group("ring") == nullptr);
  CHECK(info.is_modeled("ring (modeled, a100-nvlink)"));
  CHECK_FALSE(info.is_modeled("ring"));
  // Aligned: each twin's first forward starts when its recorded group's does.
  auto forward_start = [&](const std::string& label) {
    int64_t t = INT64_MAX;
    for (const trace::RankTrace& r : both.ranks)
      if (r.strategy == label)
        for (const trace::Event& e : r.events)
          if (e.kind == trace::Kind::phase) t = std::min(t, e.ts_ns);
    return t;
  };
  CHECK(forward_start("ring") == forward_start("ring (modeled, a100-nvlink)"));
  CHECK(forward_start("tp-sp") == forward_start("tp-sp (modeled, a100-nvlink)"));
  // The twin's times are model_trace's, moved: the same durations.
  const trace::TraceData alone = model::model_trace(measured, hw);
  for (size_t i = 0; i < alone.ranks[4].events.size(); ++i)
    REQUIRE(alone.ranks[4].events[i].dur_ns == both.ranks[12].events[i].dur_ns);
  // Modeling the trace with its twins models what was recorded (model --from), and adding
  // twins again adds none.
  const trace::TraceData again = model::model_trace(both, hw);
  REQUIRE(again.ranks.size() == measured.ranks.size());
  for (size_t p = 0; p < again.ranks.size(); ++p)
    for (size_t i = 0; i < again.ranks[p].events.size(); ++i) REQUIRE(again.ranks[p].events[i].ts_ns == alone.ranks[p].events[i].ts_ns);
  trace::TraceData twice = both;
  model::add_modeled_twins(twice, hw);
  CHECK(twice.ranks.size() == both.ranks.size());
  // A second profile adds its own twins beside the first.
  model::add_modeled_twins(twice, model::load_hardware("h100-ib"));
  CHECK(twice.ranks.size() == 3 * measured.ranks.size());
  CHECK(twice.ranks[8].strategy == "tp-sp (modeled, h100-ib)");
}

TEST_CASE("at 1M tokens the dry run's memory per rank equals each strategy's formula", "[model]") {
  struct Case {
    const char* name;
    int P;
    int64_t H, Hkv;
  };
  for (const Case& k : {Case{"ring", 64, 8, 4}, Case{"ulysses", 8, 8, 4}, Case{"tp-sp", 8, 8, 8}}) {
    INFO(k.name << " P = " << k.P);
    LayerConfig c;
    c.s = 1 << 20, c.H = k.H, c.Hkv = k.Hkv;
    MemoryTracker tracker;  // outlives the results' tensors
    std::vector<RunRecord> res;
    const RunPlan plan = plan_of(k.name, c, k.P);
    dry_schedule(plan, &res, &tracker);
    for (int r = 0; r < k.P; ++r) REQUIRE(res[size_t(r)].peak_saved == parallel_saved_bytes(plan, r, DType::f32));
  }
}

TEST_CASE("Ulysses moves 4Nh/P per link: N h / P^2 per message, four all-to-alls (Jacobs et al. 2023)", "[model]") {
  LayerConfig c;
  c.b = 1, c.s = 4096, c.h = 512, c.H = 8, c.Hkv = 8, c.f = 64;  // MHA: Hkv' = H
  const int P = 8;
  const trace::TraceData m = model::model_trace(dry_schedule(plan_of("ulysses", c, P)), model::load_hardware("h100-nvlink"));
  const double N = double(c.tokens()), h = double(c.h), e = 2;  // bf16
  for (const trace::RankTrace& r : m.ranks) {
    double sent = 0;
    for (const trace::Event& ev : r.events)
      if (ev.stream == trace::Stream::comm && ev.direction == trace::Direction::send && ev.phase == "forward") {
        REQUIRE(ev.kind == trace::Kind::all_to_all);
        REQUIRE(double(ev.bytes) == N * h / (P * P) * e);  // one link's share of one tensor
        sent += double(ev.bytes);
      }
    // Per rank: 4 tensors x (P-1) links: 4 N h (P-1)/P^2, the paper's 4Nh/P per link in aggregate.
    REQUIRE(sent == 4 * N * h * (P - 1) / (P * P) * e);
  }
}

TEST_CASE("hardware profiles: the built-in ones parse, a bad one is refused by name", "[model]") {
  for (const std::string& n : model::hardware_names()) {
    if (n == "this-machine") continue;
    const model::Hardware h = model::load_hardware(n);
    REQUIRE(h.name == n);
    REQUIRE(h.peak_flops_bf16 >= h.peak_flops_fp32);
    REQUIRE(h.memory_bytes >= 80e9);
  }
  REQUIRE(model::load_hardware("a100-nvlink").peak_flops_bf16 / model::load_hardware("a100-nvlink").tiers.front().bandwidth == Approx(1040));
  REQUIRE(model::load_hardware("h100-ib").tiers.size() == 1);  // every GPU over InfiniBand
  REQUIRE(model::load_hardware("h100-ib").tiers.front().name == "InfiniBand");
  auto bad = [](const char* text) { return model::parse_hardware(nlohmann::json::parse(text), "x.json"); };
  nlohmann::json good = model::load_hardware("h200").to_json();
  REQUIRE(model::parse_hardware(good, "round trip").memory_bandwidth == Approx(4.8e12));
  REQUIRE_THROWS_WITH(bad("[]"), Catch::Contains("a JSON object"));
  good["memory_GB"] = -1;
  REQUIRE_THROWS_WITH(model::parse_hardware(good, "x.json"), Catch::Contains("x.json: memory_GB must be a number in [0.001, 1e+06]"));
  good = model::load_hardware("h200").to_json();
  good["tiers"][1].erase("latency_us");
  REQUIRE_THROWS_WITH(model::parse_hardware(good, "x.json"), Catch::Contains("tiers[1].latency_us"));
  // A unit slip (TFLOP/s written as FLOP/s) is out of range, not a 1e12 times slower GPU.
  good = model::load_hardware("h200").to_json();
  good["peak_flops"]["bf16"] = 989;
  REQUIRE_THROWS_WITH(model::parse_hardware(good, "x.json"), Catch::Contains("peak_flops.bf16 must be a number in [1e+06, 1e+18]"));
  good["peak_flops"]["bf16"] = 989e12;
  good["tiers"][0]["latency_us"] = 1e300;
  REQUIRE_THROWS_WITH(model::parse_hardware(good, "x.json"), Catch::Contains("tiers[0].latency_us must be a number in"));
  REQUIRE_THROWS_AS(model::load_hardware("tpu-v9"), ConfigError);
  const model::Hardware me = model::measure_this_machine();
  REQUIRE(me.peak_flops_fp32 > 1e8);
  REQUIRE(me.memory_bandwidth > 1e8);
}

TEST_CASE("the model never overflows: past the trace's range it names the op, below, time grows with s", "[model]") {
  // The slowest profile the ranges accept (issue 15: int64 ns wrapped, 4.1e9 s at 1M tokens,
  // 9.2e9 s at 8M, then 4.4e9 s at 32M).
  model::Hardware slow = ideal(1e6, 1e6);
  slow.name = "slow";
  slow.memory_bandwidth = 1e6;
  slow.tiers.front().latency_s = 1.0;
  LayerConfig cfg;
  cfg.b = 1, cfg.h = 64, cfg.H = 4, cfg.Hkv = 4, cfg.f = 64, cfg.dropout = 0;
  int64_t last = 0;
  bool refused = false;
  for (int64_t s : {64, 256, 1024, 4096, 16384, 65536, 262144, 1048576}) {
    INFO("s = " << s);
    cfg.s = s;
    try {
      const trace::TraceData m = model::model_trace(dry_schedule(plan_of("ring", cfg, 2)), slow);
      REQUIRE(!refused);  // once past the range, a longer sequence cannot come back into it
      int64_t end = 0;
      for (const trace::RankTrace& r : m.ranks)
        for (const trace::Event& e : r.events) end = std::max(end, e.end_ns());
      REQUIRE(end > last);
      REQUIRE(end <= trace::kMaxTimeNs);
      last = end;
      // What the model writes, the reader reads.
      REQUIRE_NOTHROW(trace::parse_trace(trace::to_chrome_json(m).dump(), "modeled"));
    } catch (const Error& e) {
      REQUIRE_THAT(e.what(), Catch::Contains("the modeled time passes 9e+06 s, the trace format's range") &&
                                 Catch::Contains(" of ring rank ") && Catch::Contains("on slow"));
      refused = true;
    }
  }
  REQUIRE(refused);  // the profile is slow enough to reach the range within these sizes
  REQUIRE(last > 0);
}

TEST_CASE("the trace writer refuses what the reader would refuse", "[model][trace]") {
  trace::TraceData t;
  trace::RankTrace r;
  r.strategy = "s", r.rank = 0;
  trace::Event e;
  e.name = "op", e.kind = trace::Kind::gemm, e.ts_ns = trace::kMaxTimeNs, e.dur_ns = trace::kMaxTimeNs, e.order = 0, e.end_order = 1;
  r.events.push_back(e);
  t.ranks.push_back(r);
  // At the edge of the range: written and read back exactly.
  const trace::TraceData back = trace::parse_trace(trace::to_chrome_json(t).dump(), "edge");
  REQUIRE(back.ranks.at(0).events.at(0).ts_ns == trace::kMaxTimeNs);
  REQUIRE(back.ranks.at(0).events.at(0).dur_ns == trace::kMaxTimeNs);
  // One nanosecond past it: the writer says which event, before a byte is written.
  t.ranks[0].events[0].dur_ns = trace::kMaxTimeNs + 1;
  REQUIRE_THROWS_WITH(trace::to_chrome_json(t), Catch::Contains("event 'op' of s rank 0") &&
                                                    Catch::Contains("outside the trace format's range of 9e+12 us"));
  t.ranks[0].events[0].dur_ns = 1;
  t.ranks[0].events[0].bytes = int64_t(trace::kMaxBytes) + 2;
  REQUIRE_THROWS_WITH(trace::to_chrome_json(t), Catch::Contains("outside the trace format's range"));
  t.ranks[0].events[0].bytes = 0;
  t.ranks[0].memory.push_back({-trace::kMaxTimeNs - 1, {}});
  REQUIRE_THROWS_WITH(trace::to_chrome_json(t), Catch::Contains("a memory sample of s rank 0"));
}

TEST_CASE("every strategy's schedule stays within the bound the memory check counts", "[model]") {
  // model::schedule_events_bound(P, cfg, layout) sizes the memory check before a dry run: it must hold.
  LayerConfig cfg;
  cfg.b = 1, cfg.s = 512, cfg.h = 256, cfg.H = 16, cfg.Hkv = 16, cfg.f = 64;
  for (int P : {2, 4, 8, 16}) {
    size_t busiest = 0;
    for (const ParallelConfig& par : default_strategies(P)) {
      INFO(par.name() << " P = " << P);
      const RunPlan plan = resolve(par, cfg, P);
      size_t events = 0;
      for (const trace::RankTrace& r : dry_schedule(plan).ranks) events += r.events.size();
      REQUIRE(double(events) <= model::schedule_events_bound(P, cfg, plan.requested_layout()));
      busiest = std::max(busiest, events);
    }
    // And not by a wide margin where P^2 rules: a measure, not a refusal of every large run.
    if (P == 16) REQUIRE(double(busiest) >= 0.5 * model::schedule_events_bound(P, cfg, ParallelConfig{}.requested_layout(cfg)));
  }
  // A pack of many documents under a per-document layout: two runs a document on every rank.
  LayerConfig packed = cfg;
  packed.s = 4096, packed.docs = parse_docs("random:200", packed.s, 7), packed.window = 64;
  for (Layout layout : {Layout::zigzag_per_doc, Layout::greedy})
    for (int P : {2, 8}) {
      size_t busiest = 0;
      for (const char* name : {"ring", "all-gather", "ulysses2xring"}) {
        if (P == 2 && std::string(name) == "ulysses2xring") continue;
        const RunPlan plan = plan_of(name, packed, P, layout);
        INFO(name << " P = " << P << " " << to_string(layout));
        size_t events = 0;
        for (const trace::RankTrace& r : dry_schedule(plan).ranks) events += r.events.size();
        REQUIRE(double(events) <= model::schedule_events_bound(P, packed, plan.requested_layout()));
        busiest = std::max(busiest, events);
      }
      CHECK(double(busiest) >= 0.25 * model::schedule_events_bound(P, packed, layout));
    }
}

TEST_CASE("TP inside a node and the ring across nodes beats the reverse placement (1M tokens, 64 H100s)", "[model][hybrid]") {
  // The issue's layer: h 4096, 64 heads, 8 kv heads, f 16384, 1M tokens, 64 ranks of 8 per node.
  LayerConfig cfg;
  cfg.s = 1 << 20, cfg.h = 4096, cfg.H = 64, cfg.Hkv = 8, cfg.f = 16384;
  const model::Hardware hw = model::load_hardware("h100-nvlink");
  REQUIRE(hw.domain_gpus() == 8);
  std::map<std::string, int64_t> layer_ns;
  for (const char* name : {"tp8xring8", "ring8xtp8", "ring"}) {
    const ParallelConfig par = parse_parallel_config(name);
    const trace::TraceData schedule = dry_schedule(resolve(par, cfg, 64));
    // Where the TP collectives go: inside the node in tp-cp order, across nodes in cp-tp.
    int64_t tp_inside = 0, tp_across = 0;
    for (const trace::RankTrace& r : schedule.ranks)
      for (const trace::Event& e : r.events)
        if (e.stream == trace::Stream::comm && e.direction == trace::Direction::send && e.kind != trace::Kind::p2p && e.sublayer != "grad_sync")
          (r.rank / 8 == e.peer / 8 ? tp_inside : tp_across) += e.bytes;
    INFO(name << ": TP bytes inside nodes " << tp_inside << ", across " << tp_across);
    if (par.tp == 1) CHECK((tp_inside == 0 && tp_across == 0));  // the plain ring: no TP
    else if (par.order == RankOrder::tp_cp) CHECK((tp_inside > 0 && tp_across == 0));
    else CHECK((tp_across > 0 && tp_inside == 0));
    for (const trace::StrategyMetrics& m : trace::compute_metrics(model::model_trace(schedule, hw)))
      for (const trace::RankMetrics& r : m.ranks) layer_ns[name] = std::max(layer_ns[name], r.time.window_ns);
  }
  INFO("modeled layer: tp8xring8 " << layer_ns["tp8xring8"] / 1e6 << " ms, ring8xtp8 " << layer_ns["ring8xtp8"] / 1e6 << " ms");
  // At the rates real kernels reach the layer's compute is longer and hides more of TP's
  // traffic across nodes, so the gain is smaller than the roofline's (0.77): 0.88 modeled.
  CHECK(layer_ns["tp8xring8"] < 0.9 * layer_ns["ring8xtp8"]);
  // The README and lesson 7 quote them: modeled times are deterministic, so to the millisecond.
  auto quoted = [](const char* file, const char* pattern) {
    std::ifstream in(std::string(RINGSIDE_SOURCE_DIR "/") + file);
    const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    std::smatch m;
    INFO(file << ": /" << pattern << "/");
    REQUIRE(std::regex_search(text, m, std::regex(pattern)));
    return std::stol(m[1]);
  };
  const long tpcp = std::lround(layer_ns["tp8xring8"] / 1e6), cptp = std::lround(layer_ns["ring8xtp8"] / 1e6),
             ring = std::lround(layer_ns["ring"] / 1e6);
  CHECK(quoted("README.md", R"(# (\d+) ms modeled; ring8xtp8)") == tpcp);
  CHECK(quoted("README.md", R"(ms modeled; ring8xtp8: (\d+) ms)") == cptp);
  CHECK(quoted("README.md", R"(`tp8xring8` (\d+) ms against \d+ ms for `ring8xtp8`)") == tpcp);
  CHECK(quoted("README.md", R"(`tp8xring8` \d+ ms against (\d+) ms for `ring8xtp8`)") == cptp);
  CHECK(quoted("lessons/07-combining/README.md", R"(# (\d+) ms \(modeled\))") == tpcp);
  CHECK(quoted("lessons/07-combining/README.md", R"(# (\d+) ms: TP across nodes)") == cptp);
  CHECK(quoted("lessons/07-combining/README.md", R"(modeled plain ring \((\d+) ms\))") == ring);
}

TEST_CASE("a rank's modeled peak falls as ranks are added: no rank draws the whole sequence's input", "[model]") {
  // Before, every rank drew the whole [b, s, h] input and kept its tokens, so the peak held s h
  // on every rank whatever P (model's OUT OF MEMORY for 10M tokens on 64 H100s that fit).
  LayerConfig cfg;
  cfg.s = 262144, cfg.h = 1024, cfg.H = 16, cfg.Hkv = 16, cfg.f = 1024;
  std::map<int, int64_t> peak;
  for (int P : {16, 32}) {
    const trace::TraceData schedule = dry_schedule(plan_of("ring", cfg, P));
    for (const trace::StrategyMetrics& m : trace::compute_metrics(schedule))
      for (const trace::RankMetrics& r : m.ranks) peak[P] = std::max(peak[P], r.peak_memory_bytes);
  }
  INFO("peak per rank: P 16 " << peak[16] << ", P 32 " << peak[32]);
  CHECK(peak[32] < 0.6 * peak[16]);
  // And a rank's input tokens are the whole input's, bit for bit.
  LayerConfig small;
  small.b = 2, small.s = 16, small.h = 8, small.H = 2, small.Hkv = 2, small.f = 8;
  const std::vector<int64_t> pos = layout_positions(Layout::zigzag, small.s, 4, 1);
  const Tensor whole = random_input(small, 7, DType::f32, {});
  const Tensor mine = random_input_tokens(small, 7, pos, DType::f32, {});
  const Tensor taken = take_tokens(whole, pos, {});
  REQUIRE(std::memcmp(mine.raw_data(), taken.raw_data(), size_t(mine.nbytes())) == 0);
}

TEST_CASE("the overlapped gradient all-reduce: buckets under the backward, only what outlasts it exposed", "[model]") {
  LayerConfig cfg;
  cfg.b = 1, cfg.s = 2048, cfg.h = 1024, cfg.H = 8, cfg.Hkv = 8, cfg.f = 4096;
  const RunPlan plan = resolve(parse_parallel_config("ring"), cfg, 4);
  const model::Hardware hw = ideal(1e14, 1e10);
  MemoryTracker t1, t2, t3;
  RankOptions none, buckets;
  none.grad_sync = false;
  buckets.overlap_grad_reduce = true;
  const trace::TraceData after = model::dry_run(plan, t1), bucketed = model::dry_run(plan, t2, nullptr, buckets),
                         without = model::dry_run(plan, t3, nullptr, none);
  model::ModelOptions overlap;
  overlap.overlap_grad_reduce = true;
  auto layer = [&](const trace::TraceData& schedule, const model::ModelOptions& o) {
    return double(trace::layer_ns(trace::compute_metrics(model::model_trace(schedule, hw, o)).at(0)));
  };
  const double exposed = layer(after, {}), no_sync = layer(without, {}), overlapped = layer(bucketed, overlap);
  // Three buckets, posted where their gradients are ready, replayed in place: the same bytes at no
  // latency, so the same time as the one all-reduce after the backward.
  CHECK(layer(bucketed, {}) == Approx(exposed).epsilon(1e-3));
  // One all-reduce at the end has nothing left to hide behind: overlapping it changes nothing.
  CHECK(layer(after, overlap) == exposed);
  CHECK(no_sync < overlapped);
  CHECK(overlapped < exposed);
  // Overlapped, the first bucket's transfers start before the backward's compute ends, on GPU 0.
  const trace::TraceData modeled = model::model_trace(bucketed, hw, overlap);
  int64_t first_send = INT64_MAX, compute_end = 0;
  for (const trace::Event& e : modeled.ranks.at(0).events) {
    if (e.phase != "backward") continue;
    if (e.sublayer == "grad_sync" && e.stream == trace::Stream::comm) first_send = std::min(first_send, e.ts_ns);
    if (e.sublayer != "grad_sync" && e.stream == trace::Stream::compute && trace::is_work(e.kind))
      compute_end = std::max(compute_end, e.end_ns());
  }
  CHECK(first_send < compute_end);
  // The bucketed run computes what the unbucketed one does (on a small layer).
  LayerConfig small;
  small.b = 1, small.s = 256, small.h = 64, small.H = 4, small.Hkv = 2, small.f = 128;
  const RunPlan sp = resolve(parse_parallel_config("ring"), small, 4);
  MemoryTracker t4, t5;
  std::vector<RunRecord> a = run_local_ranks(sp, DType::f32, t4), b = run_local_ranks(sp, DType::f32, t5, {}, nullptr, buckets);
  CHECK(relative_error(b[0].grads.fc1_weight, a[0].grads.fc1_weight) < 1e-6);
  CHECK(relative_error(b[0].grads.qkv_weight, a[0].grads.qkv_weight) < 1e-6);
}

// The timeline: the trace writer and reader, the Chrome trace format, the metrics against
// hand-built traces, what a ring run's trace holds, and malformed files.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <functional>
#include <map>
#include <mutex>
#include <random>
#include <tuple>
#include <set>

#include "catapult_reading.h"
#include "core/output.h"
#include "layer/tokenwise.h"
#include "model/model.h"
#include "parallel/formulas.h"
#include "parallel/run_plan.h"
#include "run/runner.h"
#include "trace/metrics.h"
#include "trace/trace_file.h"

using namespace ringside;
using namespace ringside::trace;

namespace {

LayerConfig small() {
  LayerConfig c;
  c.b = 2, c.s = 32, c.h = 32, c.H = 4, c.Hkv = 2, c.f = 64, c.seed = 5;
  return c;
}

// The plan of the configuration `name` for c on P ranks, in `layout`.
RunPlan plan_of(const std::string& name, const LayerConfig& c, int P, Layout layout = Layout::automatic) {
  ParallelConfig par = parse_parallel_config(name);
  par.layout = layout;
  return resolve(par, c, P);
}

// A traced run of `name` on P local ranks (in `layout`); the results and the timeline.
struct TracedRun {
  std::unique_ptr<MemoryTracker> tracker = std::make_unique<MemoryTracker>();
  std::vector<RunRecord> results;
  TraceData trace;
};
TracedRun traced(const std::string& name, const LayerConfig& c, int P, Layout layout = Layout::automatic) {
  TracedRun t;
  const TraceSink sink{Clock{Clock::steady_now_ns()}, &t.trace.ranks};
  t.results = run_local_ranks(plan_of(name, c, P, layout), DType::f32, *t.tracker, {}, &sink);
  return t;
}

Event ev(const char* name, Kind kind, int64_t ts, int64_t dur, Stream stream = Stream::compute) {
  Event e;
  e.name = name, e.kind = kind, e.ts_ns = ts, e.dur_ns = dur, e.stream = stream;
  return e;
}
Event comm(int64_t ts, int64_t dur, Direction dir = Direction::send, int peer = 1) {
  Event e = ev(to_string(dir), Kind::p2p, ts, dur, Stream::comm);
  e.direction = dir, e.peer = peer, e.bytes = 100;
  return e;
}

// One strategy, one rank per list of events; window from a phase event spanning [0, end).
TraceData hand_built(std::vector<std::vector<Event>> ranks, int64_t end) {
  TraceData t;
  for (size_t r = 0; r < ranks.size(); ++r) {
    RankTrace rt;
    rt.strategy = "s", rt.rank = int(r);
    rt.events = std::move(ranks[r]);
    Event phase = ev("forward", Kind::phase, 0, end);
    phase.phase = "forward";
    rt.events.push_back(phase);
    t.ranks.push_back(rt);
  }
  return t;
}

std::string error_of(const std::string& text) {
  try {
    parse_trace(text, "t.json");
  } catch (const Error& e) {
    return e.what();
  }
  return "(no error)";
}

}  // namespace

TEST_CASE("intervals merge into a union and intersect exactly", "[trace]") {
  const auto m = merge_intervals({{5, 10}, {0, 3}, {2, 4}, {10, 12}, {20, 20}, {15, 18}});
  REQUIRE(m.size() == 3);  // [0,4) [5,12) [15,18); the empty one dropped, adjacent ones joined
  CHECK(m[0].begin == 0);
  CHECK(m[0].end == 4);
  CHECK(m[1].begin == 5);
  CHECK(m[1].end == 12);
  CHECK(length(m) == 4 + 7 + 3);
  CHECK(intersection_length(m, merge_intervals({{3, 6}, {11, 16}})) == 1 + 1 + 1 + 1);
  CHECK(intersection_length(m, {}) == 0);
}

TEST_CASE("metrics of hand-built traces with known overlaps", "[trace]") {
  SECTION("no overlap at all") {
    const auto m = compute_metrics(hand_built({{ev("gemm", Kind::gemm, 0, 10), comm(10, 10)}}, 20));
    const Breakdown& b = m.at(0).ranks.at(0).time;
    CHECK(b.compute_ns == 10);
    CHECK(b.comm_ns == 10);
    CHECK(b.overlap_ns == 0);
    CHECK(b.exposed_comm_ns == 10);
    CHECK(b.idle_ns == 0);
    CHECK(b.overlap_pct() == 0);
  }
  SECTION("comm wholly inside compute") {
    const auto m = compute_metrics(hand_built({{ev("attn", Kind::attention, 0, 100), comm(20, 30)}}, 100));
    const Breakdown& b = m.at(0).ranks.at(0).time;
    CHECK(b.overlap_ns == 30);
    CHECK(b.overlap_pct() == 100);
    CHECK(b.exposed_comm_ns == 0);
    CHECK(b.idle_ns == 0);
  }
  SECTION("nested compute counts once; a wait and a collective span are not compute") {
    const auto m = compute_metrics(hand_built(
        {{ev("attn", Kind::attention, 0, 100), ev("inner", Kind::elementwise, 10, 10), ev("all_gather", Kind::collective, 100, 40),
          ev("wait", Kind::wait, 100, 40), comm(90, 40)}},
        140));
    const Breakdown& b = m.at(0).ranks.at(0).time;
    CHECK(b.compute_ns == 100);
    CHECK(b.comm_ns == 40);
    CHECK(b.overlap_ns == 10);
    CHECK(b.exposed_comm_ns == 30);
    CHECK(b.overlap_pct() == Approx(25));
    CHECK(b.idle_ns == 10);  // [130, 140): waiting with nothing in flight
  }
  SECTION("adjacent intervals, two comm lanes at once, and idle time") {
    const auto m = compute_metrics(hand_built({{ev("a", Kind::gemm, 0, 10), ev("b", Kind::norm, 10, 10), comm(5, 10, Direction::send),
                                                comm(8, 10, Direction::recv), ev("c", Kind::gemm, 100, 50)}},
                                              200));
    const Breakdown& b = m.at(0).ranks.at(0).time;
    CHECK(b.compute_ns == 70);
    CHECK(b.comm_ns == 13);  // [5, 18)
    CHECK(b.overlap_ns == 13);
    CHECK(b.idle_ns == 200 - 70);
    CHECK(m.at(0).ranks.at(0).bytes_sent == 100);  // only the send
  }
  SECTION("imbalance across ranks, and totals") {
    const auto m = compute_metrics(hand_built({{ev("a", Kind::gemm, 0, 30)}, {ev("a", Kind::gemm, 0, 10), comm(10, 20)}}, 40));
    CHECK(m.at(0).compute_imbalance == Approx(1.5));  // 30 / mean(30, 10)
    CHECK(m.at(0).total.compute_ns == 40);
    CHECK(m.at(0).total.comm_ns == 20);
    CHECK(m.at(0).total.idle_ns == 10 + 10);
    CHECK(std::isnan(m.at(0).ranks.at(0).time.overlap_pct()));  // rank 0 never communicates
  }
  SECTION("a selection clips every interval") {
    const auto m = compute_metrics(hand_built({{ev("a", Kind::gemm, 0, 100), comm(50, 100)}}, 200), Interval{75, 125});
    const Breakdown& b = m.at(0).ranks.at(0).time;
    CHECK(b.window_ns == 50);
    CHECK(b.compute_ns == 25);
    CHECK(b.comm_ns == 50);
    CHECK(b.overlap_ns == 25);
  }
  SECTION("ring steps: each rank's step span with its ops and transfers") {
    std::vector<Event> r0;
    for (int step = 0; step < 2; ++step) {
      Event s = ev("ring step", Kind::ring_step, step * 100, 100), a = ev("attn", Kind::attention, step * 100, 60);
      Event c = comm(step * 100 + 40, 40);
      s.step = a.step = c.step = step;
      s.phase = a.phase = c.phase = "forward";
      r0.push_back(s), r0.push_back(a), r0.push_back(c);
    }
    const auto m = compute_metrics(hand_built({r0}, 200));
    REQUIRE(m.at(0).steps.size() == 2);
    const StepMetrics& st = m.at(0).steps[1];
    CHECK(st.phase == "forward");
    CHECK(st.step == 1);
    CHECK(st.total.window_ns == 100);
    CHECK(st.total.compute_ns == 60);
    CHECK(st.total.overlap_ns == 20);
    CHECK(st.total.exposed_comm_ns == 20);
    CHECK(st.bytes_sent == 100);
  }
  SECTION("a step's transfer that runs on into the next step is hidden by the next step's compute") {
    Event s0 = ev("ring step", Kind::ring_step, 0, 100), a0 = ev("attn", Kind::attention, 0, 60), c0 = comm(90, 40);
    Event s1 = ev("ring step", Kind::ring_step, 100, 100), a1 = ev("attn", Kind::attention, 100, 60);
    s0.step = a0.step = c0.step = 0;
    s1.step = a1.step = 1;
    for (Event* e : {&s0, &a0, &c0, &s1, &a1}) e->phase = "backward";
    const auto m = compute_metrics(hand_built({{s0, a0, c0, s1, a1}}, 200));
    const StepMetrics& st = m.at(0).steps.at(0);
    CHECK(st.total.window_ns == 130);  // until its transfer ends
    CHECK(st.total.compute_ns == 60 + 30);
    CHECK(st.total.overlap_ns == 30);
    CHECK(st.total.overlap_pct() == Approx(75));
  }
  SECTION("memory: the peak inside the window, counting what was live when it opened") {
    TraceData t = hand_built({{ev("a", Kind::gemm, 10, 10)}}, 100);
    t.ranks[0].memory = {{-5, {500, 0, 0, 0, 0}}, {20, {500, 0, 300, 0, 0}}, {30, {500, 0, 0, 0, 0}}, {150, {9999, 0, 0, 0, 0}}};
    const RankMetrics& r = compute_metrics(t).at(0).ranks.at(0);
    CHECK(r.peak_memory_bytes == 800);
    CHECK(r.peak_by_category[0] == 500);
    CHECK(r.peak_by_category[2] == 300);
  }
  SECTION("memory: a rank's peak is over its own forward + backward, not its setup while others run") {
    TraceData t = hand_built({{ev("a", Kind::gemm, 10, 10)}, {ev("a", Kind::gemm, 60, 10)}}, 100);
    t.ranks[1].events.back().ts_ns = 50, t.ranks[1].events.back().dur_ns = 50;  // rank 1 starts at 50
    t.ranks[1].memory = {{20, {7000, 0, 0, 0, 0}}, {40, {100, 0, 0, 0, 0}}, {60, {100, 0, 50, 0, 0}}};
    const auto m = compute_metrics(t);
    CHECK(m.at(0).begin_ns == 0);  // the strategy's window opens with rank 0
    CHECK(m.at(0).ranks.at(1).peak_memory_bytes == 150);
  }
}

namespace {

// A transfer of collective call `id` (Kineto's shape without a direction: bytes = nccl-tests'
// size; ringside's: a send or receive of one ring message), over n ranks (0: not said).
Event transfer(Kind kind, int64_t id, int64_t ts, int64_t dur, int64_t bytes, Direction dir = Direction::none, int n = 0) {
  Event e = ev(to_string(kind), kind, ts, dur, Stream::comm);
  e.collective = id, e.bytes = bytes, e.direction = dir, e.group_size = n;
  return e;
}

// The one kind's row of a strategy's communication by collective kind.
const CollectiveStats& row_of(const StrategyMetrics& m, Kind kind) {
  const auto it = std::find_if(m.comm_by_kind.begin(), m.comm_by_kind.end(), [&](const CollectiveStats& s) { return s.kind == kind; });
  INFO("the " << to_string(kind) << " row");
  REQUIRE(it != m.comm_by_kind.end());
  return *it;
}

}  // namespace

TEST_CASE("busbw factors are nccl-tests' PERFORMANCE.md's", "[trace]") {
  CHECK(busbw_factor(Kind::all_reduce, 4) == 1.5);
  CHECK(busbw_factor(Kind::all_reduce, 8) == 1.75);
  CHECK(busbw_factor(Kind::all_gather, 4) == 0.75);
  CHECK(busbw_factor(Kind::reduce_scatter, 2) == 0.5);
  CHECK(busbw_factor(Kind::all_to_all, 8) == 0.875);
  CHECK(busbw_factor(Kind::p2p, 8) == 1);    // send/recv
  CHECK(busbw_factor(Kind::other, 8) == 1);  // broadcast, reduce
  CHECK(busbw_factor(Kind::all_gather, 1) == 0);
  CHECK(busbw_factor(Kind::gemm, 4) == 0);   // not a transfer
}

TEST_CASE("communication by collective kind: calls, nccl-tests' size, algbw and busbw of hand-built traces", "[trace]") {
  SECTION("a Kineto-style all_reduce of 1 MiB in 1 ms on 4 ranks: algbw 1.048576 GB/s, busbw 1.572864") {
    std::vector<std::vector<Event>> ranks;
    for (int r = 0; r < 4; ++r) ranks.push_back({transfer(Kind::all_reduce, 0, 1000, 1'000'000, 1 << 20, Direction::none, 4)});
    const auto m = compute_metrics(hand_built(ranks, 2'000'000));
    REQUIRE(m.at(0).comm_by_kind.size() == 1);
    const CollectiveStats& s = row_of(m[0], Kind::all_reduce);
    CHECK(s.calls == 4);  // one per rank
    CHECK(s.group_size == 4);
    CHECK(s.size_bytes == 4 << 20);
    CHECK(s.time_ns == 4'000'000);
    CHECK(s.algbw_gbps() == Approx(1.048576));
    CHECK(s.busbw_gbps() == Approx(1.572864));
  }
  SECTION("a Kineto-style all_gather over a group of 2 in a 4-rank job, and one whose group is not said") {
    std::vector<std::vector<Event>> ranks;
    for (int r = 0; r < 4; ++r) ranks.push_back({transfer(Kind::all_gather, 0, 0, 2'000'000, 8 << 20, Direction::none, 2)});
    auto m = compute_metrics(hand_built(ranks, 3'000'000));
    CHECK(row_of(m.at(0), Kind::all_gather).algbw_gbps() == Approx(4.194304));
    CHECK(row_of(m.at(0), Kind::all_gather).busbw_gbps() == Approx(2.097152));  // x (2-1)/2
    CHECK(row_of(m.at(0), Kind::all_gather).group_size == 2);
    ranks[0].push_back(transfer(Kind::all_gather, 1, 2'000'000, 1'000'000, 8 << 20));  // n: the strategy's 4 ranks
    m = compute_metrics(hand_built(ranks, 3'000'000));
    const CollectiveStats& s = row_of(m.at(0), Kind::all_gather);
    CHECK(s.calls == 5);
    CHECK(s.group_size == -1);  // mixed
    CHECK(s.bus_bytes == Approx(4 * (8 << 20) * 0.5 + (8 << 20) * 0.75));
    CHECK(s.busbw_gbps() == Approx(s.bus_bytes / 9e6));
  }
  SECTION("a p2p message counts once, at its send: 1 MB in 0.5 ms is 2 GB/s, busbw too") {
    Event send = transfer(Kind::p2p, -1, 100, 500'000, 1'000'000, Direction::send), recv = send;
    recv.direction = Direction::recv, recv.ts_ns = 150, recv.dur_ns = 450'000;
    const auto m = compute_metrics(hand_built({{send}, {recv}}, 1'000'000));
    const CollectiveStats& s = row_of(m.at(0), Kind::p2p);
    CHECK(s.calls == 1);
    CHECK(s.group_size == 0);  // a message has no group
    CHECK(s.size_bytes == 1'000'000);
    CHECK(s.time_ns == 500'000);
    CHECK(s.algbw_gbps() == Approx(2.0));
    CHECK(s.busbw_gbps() == Approx(2.0));
  }
  SECTION("ringside's rings: a call's sends are S x factor, its time from the first transfer to the last") {
    RankTrace r;
    for (int k = 0; k < 3; ++k) {  // reduce_scatter of 1 MiB on 4 ranks: 3 chunks of 256 KiB each way
      r.events.push_back(transfer(Kind::reduce_scatter, 7, 100 * k, 80, 256 << 10, Direction::send));
      r.events.push_back(transfer(Kind::reduce_scatter, 7, 100 * k + 10, 90, 256 << 10, Direction::recv));
    }
    for (int k = 0; k < 6; ++k)  // all_reduce of 3 MiB: both rings, 6 chunks of 768 KiB sent
      r.events.push_back(transfer(Kind::all_reduce, 8, 1000 + 100 * k, 100, 768 << 10, Direction::send));
    r.events.push_back(transfer(Kind::all_to_all, 9, 2000, 50, 100, Direction::send));  // 3 blocks of 100 bytes, one each way
    r.events.push_back(transfer(Kind::all_to_all, 9, 2000, 70, 100, Direction::send));
    r.events.push_back(transfer(Kind::all_to_all, 9, 2010, 90, 100, Direction::send));
    const auto calls = comm_calls(r, 4);
    REQUIRE(calls.size() == 3);
    CHECK(calls[0].kind == Kind::reduce_scatter);
    CHECK(calls[0].collective == 7);
    CHECK(calls[0].size_bytes == 1 << 20);  // 768 KiB sent / (3/4)
    CHECK(calls[0].begin_ns == 0);
    CHECK(calls[0].time_ns() == 300);
    CHECK(calls[1].kind == Kind::all_reduce);
    CHECK(calls[1].size_bytes == 3 << 20);  // 4.5 MiB sent / (2 x 3/4)
    CHECK(calls[1].time_ns() == 600);
    CHECK(calls[2].size_bytes == 400);  // 300 bytes / (3/4): the whole send buffer, its own block included
    CHECK(calls[2].time_ns() == 100);
    CHECK(comm_calls(r, 2)[0].size_bytes == (768 << 10) * 2);  // n = 2: the factor is 1/2
  }
  SECTION("only calls starting in the window count; ops drawn on the comm stream and receives are not calls") {
    Event op = ev("all_reduce pack", Kind::memory, 10, 10, Stream::comm);
    Event late = transfer(Kind::all_gather, 3, 5000, 10, 1 << 20);
    Event nccl_kernel = ev("ncclDevKernel_Broadcast", Kind::other, 20, 1000, Stream::comm);  // a foreign trace's: no bytes
    Event recv = transfer(Kind::p2p, -1, 0, 10, 64, Direction::recv);
    const auto m = compute_metrics(hand_built({{op, late, nccl_kernel, recv}}, 4000));
    REQUIRE(m.at(0).comm_by_kind.size() == 1);  // other only
    const CollectiveStats& s = row_of(m[0], Kind::other);
    CHECK(s.calls == 1);
    CHECK(s.time_ns == 1000);
    CHECK(std::isnan(s.algbw_gbps()));  // no size: no bandwidth
    CHECK(std::isnan(s.busbw_gbps()));
  }
}

TEST_CASE("a ringside run's collectives reconstruct nccl-tests' size exactly from what each rank sent", "[trace]") {
  SECTION("tp-sp on 4 ranks: every all-gather gathers [b, s, h], every reduce-scatter scatters it") {
    LayerConfig c = small();
    c.Hkv = c.H;  // TP splits the kv heads too
    const int P = 4;
    TracedRun run = traced("tp-sp", c, P);
    const int64_t bsh = c.b * c.s * c.h * 4;  // fp32: the all-gather's output, the reduce-scatter's input
    for (const RankTrace& r : run.trace.ranks) {
      INFO("rank " << r.rank);
      std::map<Kind, int> count;
      for (const CommCall& call : comm_calls(r, P)) {
        INFO(to_string(call.kind) << " call " << call.collective);
        ++count[call.kind];
        CHECK(call.group_size == P);  // recorded by the communicator, not the default
        CHECK(call.time_ns() > 0);
        if (call.kind == Kind::all_gather || call.kind == Kind::reduce_scatter) CHECK(call.size_bytes == bsh);
        else if (call.kind == Kind::all_reduce) CHECK(call.size_bytes == sequence_parallel_param_count(c) * 4);
        else FAIL("tp-sp sends no " << to_string(call.kind));
      }
      CHECK(count[Kind::all_gather] == 2 + 4);      // formulas.h: 2 forward, 4 backward (two re-gathers)
      CHECK(count[Kind::reduce_scatter] == 2 + 2);
      CHECK(count[Kind::all_reduce] == 1);          // the sequence-parallel parameters' gradients
    }
    // Summed, S x factor is what the ranks sent: the analytic formula's bytes.
    const auto m = compute_metrics(run.trace);
    const RunPlan plan = plan_of("tp-sp", c, P);
    int64_t formula = 0;
    for (int r = 0; r < P; ++r) formula += parallel_comm_bytes(plan, r, DType::f32).forward + parallel_comm_bytes(plan, r, DType::f32).backward;
    double bus = 0;
    for (const CollectiveStats& s : m.at(0).comm_by_kind) bus += s.bus_bytes;
    CHECK(bus == Approx(double(formula)).epsilon(1e-12));
    CHECK(row_of(m[0], Kind::all_gather).size_bytes == 6 * P * bsh);
  }
  SECTION("ulysses2xring2: the all-to-alls are over groups of 2, their size each rank's whole send buffer") {
    const LayerConfig c = small();
    const int P = 4, U = 2;
    TracedRun run = traced("ulysses2xring2", c, P);
    const int64_t tokens = c.b * (c.s / P);  // this rank's, before the all-to-all
    const std::set<int64_t> buffers = {tokens * c.H * c.d() * 4, tokens * ulysses_kv_heads(c, U) * c.d() * 4};  // q and out; k, v
    int a2a = 0, hops = 0;
    for (const RankTrace& r : run.trace.ranks)
      for (const CommCall& call : comm_calls(r, P)) {
        if (call.kind == Kind::p2p) ++hops;
        if (call.kind != Kind::all_to_all) continue;
        ++a2a;
        INFO("rank " << r.rank << " all_to_all " << call.collective);
        CHECK(call.group_size == U);
        CHECK(buffers.count(call.size_bytes) == 1);
      }
    CHECK(a2a == P * 8);  // q, k, v, out forward; dout, dq, dk, dv backward
    CHECK(hops > 0);      // the ring between the groups
    const auto m = compute_metrics(run.trace);
    CHECK(row_of(m.at(0), Kind::all_to_all).group_size == U);
    CHECK(row_of(m.at(0), Kind::all_reduce).group_size == P);  // the gradients over all of CP
  }
}

TEST_CASE("the trace writer and reader round-trip every field", "[trace]") {
  TraceData t;
  t.run.producer = "test", t.run.ranks = 2;
  t.other["lesson"] = {{"number", 3}};  // a producer's own field
  for (const char* strategy : {"ring", "ulysses"})
    for (int r = 0; r < 2; ++r) {
      RankTrace rt;
      rt.strategy = strategy, rt.rank = r, rt.clock_offset_ns = 17 * r, rt.clock_uncertainty_ns = 3 * r;
      Event a = ev("attention_forward", Kind::attention, 1000 + r, 123456);
      a.phase = "forward", a.sublayer = "attention", a.step = 1, a.flops = 1.5e9, a.bytes = 4096, a.detail = "b=1 sq=8";
      Event s = comm(2000, 777, r == 0 ? Direction::send : Direction::recv, 1 - r);
      s.phase = "forward", s.step = 1, s.tag = 2, s.seq = 0, s.name = r == 0 ? "send k" : "recv k";
      Event g = comm(5000, 10, Direction::send, 1 - r);
      g.name = "all_gather", g.kind = Kind::all_gather, g.collective = 4, g.tag = 1 << 20, g.seq = 3;
      rt.events = {a, s, g};
      rt.memory = {{0, {1, 2, 3, 4, 5}}, {999, {10, 20, 30, 40, 50}}};
      t.ranks.push_back(rt);
    }
  const std::string text = to_chrome_json(t).dump();
  const TraceData back = parse_trace(text);
  CHECK(back.run.producer == "test");
  CHECK(back.run.ranks == 2);
  CHECK(back.run.version == RINGSIDE_VERSION);
  CHECK(back.other["lesson"]["number"] == 3);
  CHECK_FALSE(back.other.contains("producer"));  // typed once: in run, not again in other
  REQUIRE(back.ranks.size() == t.ranks.size());
  for (size_t i = 0; i < t.ranks.size(); ++i) {
    const RankTrace &a = t.ranks[i], &b = back.ranks[i];
    CHECK(b.strategy == a.strategy);
    CHECK(b.rank == a.rank);
    CHECK(b.clock_offset_ns == a.clock_offset_ns);
    CHECK(b.clock_uncertainty_ns == a.clock_uncertainty_ns);
    REQUIRE(b.events.size() == a.events.size());
    for (size_t k = 0; k < a.events.size(); ++k) {  // written in start order, as these were
      const Event &x = a.events[k], &y = b.events[k];
      CHECK(y.name == x.name);
      CHECK(y.kind == x.kind);
      CHECK(y.ts_ns == x.ts_ns);
      CHECK(y.dur_ns == x.dur_ns);
      CHECK(y.stream == x.stream);
      CHECK(y.phase == x.phase);
      CHECK(y.sublayer == x.sublayer);
      CHECK(y.step == x.step);
      CHECK(y.peer == x.peer);
      CHECK(y.bytes == x.bytes);
      CHECK(y.flops == x.flops);
      CHECK(y.collective == x.collective);
      CHECK(y.direction == x.direction);
      CHECK(y.tag == x.tag);
      CHECK(y.seq == x.seq);
      CHECK(y.detail == x.detail);
    }
    REQUIRE(b.memory.size() == 2);
    CHECK(b.memory[1].ts_ns == 999);
    CHECK(b.memory[1].bytes == a.memory[1].bytes);
  }
  // One flow per strategy: rank 0's "send k" to rank 1's "recv k" (the all_gather sends have no receive).
  REQUIRE(back.flows.size() == 2);
  CHECK(back.ranks[back.flows[0].from].rank == 0);
  CHECK(back.ranks[back.flows[0].to].rank == 1);
  CHECK(back.flows[0].from_ts_ns == 2001);  // 1 ns inside the send that starts at 2000, never at its edge
  // Written again, the same text.
  CHECK(to_chrome_json(back).dump() == text);
}

TEST_CASE("every kind and direction is its file name and back, and a foreign kind reads and writes as other", "[trace]") {
  for (int k = 0; k <= int(Kind::other); ++k) {
    INFO(to_string(Kind(k)));
    CHECK(kind_of(to_string(Kind(k))) == Kind(k));
  }
  CHECK(std::string(to_string(Kind::ring_step)) == "ring_step");  // the file's name, as design.md gives it
  CHECK(std::string(to_string(Kind::all_to_all)) == "all_to_all");
  for (Direction d : {Direction::none, Direction::send, Direction::recv}) CHECK(direction_of(to_string(d)) == d);
  CHECK(kind_of("kernel") == Kind::other);
  CHECK(kind_of("") == Kind::other);
  CHECK(kind_of("Ring_Step") == Kind::other);  // names are exact
  CHECK(direction_of("sideways") == Direction::none);
  // A foreign event: kind other and no direction, read; written back, its cat is "other".
  const TraceData t = parse_trace(R"js({"traceEvents":[
    {"ph":"X","name":"sm90_gemm","cat":"kernel","ts":0,"dur":10,"pid":3,"tid":0,"args":{"direction":"sideways"}}]})js");
  REQUIRE(t.ranks.size() == 1);
  REQUIRE(t.ranks[0].events.size() == 1);
  CHECK(t.ranks[0].events[0].kind == Kind::other);
  CHECK(t.ranks[0].events[0].direction == Direction::none);
  const nlohmann::json back = to_chrome_json(t);
  int written = 0;
  for (const auto& e : back["traceEvents"])
    if (e.value("ph", "") == "X") {
      ++written;
      CHECK(e["cat"] == "other");
      CHECK_FALSE(e["args"].contains("direction"));
    }
  CHECK(written == 1);
}

TEST_CASE("a traced run's file follows the Chrome trace format", "[trace]") {
  LayerConfig c = small();
  c.s = 48;  // zigzag over 3 ranks: 6 chunks
  TracedRun run = traced("ring", c, 3);
  TracedRun u = traced("ulysses", c, 2);
  for (auto& r : u.trace.ranks) run.trace.ranks.push_back(std::move(r));
  const nlohmann::json j = nlohmann::json::parse(to_chrome_json(run.trace).dump());
  REQUIRE(j.is_object());
  CHECK(j["displayTimeUnit"] == "ns");
  REQUIRE(j["otherData"].is_object());
  CHECK(j["otherData"]["strategies"] == nlohmann::json({"ring", "ulysses"}));
  const nlohmann::json& evs = j["traceEvents"];
  REQUIRE(evs.is_array());
  std::map<int64_t, std::string> process_names;
  struct Slice {  // in ns, as Perfetto reads ts and dur (each rounded from microseconds)
    int64_t ts, end;
    std::string name;
  };
  auto ns = [](const nlohmann::json& v) { return std::llround(v.get<double>() * 1000); };
  std::map<std::pair<int64_t, int64_t>, std::vector<Slice>> slices;  // (pid, tid) -> slices
  std::map<int64_t, std::vector<double>> counter_ts;
  std::map<int64_t, std::vector<nlohmann::json>> flows;
  for (const auto& e : evs) {
    REQUIRE(e["ph"].is_string());
    REQUIRE(e["pid"].is_number_integer());
    REQUIRE(e["tid"].is_number_integer());
    const std::string ph = e["ph"];
    REQUIRE((ph == "X" || ph == "i" || ph == "C" || ph == "M" || ph == "s" || ph == "f"));
    if (ph == "i") CHECK(e["s"] == "p");  // zero-length events: process instants, nested in nothing
    if (ph != "M") REQUIRE(e["ts"].is_number());
    if (ph == "M" && e["name"] == "process_name") process_names[e["pid"]] = e["args"]["name"];
    if (ph == "X") {
      REQUIRE(e["dur"].is_number());
      REQUIRE(e["dur"].get<double>() > 0);  // no zero-length slices
      REQUIRE(e["name"].is_string());
      REQUIRE(e["cat"].is_string());
      REQUIRE(e["args"].is_object());
      slices[{e["pid"], e["tid"]}].push_back({ns(e["ts"]), ns(e["ts"]) + ns(e["dur"]), e["name"]});
    }
    if (ph == "C") counter_ts[e["pid"]].push_back(e["ts"]);
    if (ph == "s" || ph == "f") flows[e["id"]].push_back(e);
  }
  CHECK(process_names.at(0) == "ring: GPU 0");
  CHECK(process_names.at(2) == "ring: GPU 2");
  CHECK(process_names.at(1001) == "ulysses: GPU 1");
  // The slices of one thread nest (Perfetto drops those that cross).
  for (auto& [key, v] : slices) {
    std::sort(v.begin(), v.end(), [](auto& a, auto& b) { return a.ts != b.ts ? a.ts < b.ts : a.end > b.end; });
    std::vector<const Slice*> open;  // the enclosing slices
    for (const Slice& s : v) {
      while (!open.empty() && open.back()->end <= s.ts) open.pop_back();
      INFO("pid " << key.first << " tid " << key.second << ": " << s.name << " [" << s.ts << ", " << s.end << ") in "
                  << (open.empty() ? "-" : open.back()->name) << " ending " << (open.empty() ? 0 : open.back()->end));
      REQUIRE((open.empty() || s.end <= open.back()->end));
      open.push_back(&s);
    }
  }
  // Counters in time order per process (the categories, and the total on its own);
  // flows paired, each end inside a slice of its thread.
  CHECK(counter_ts.size() == 5);
  for (auto& [pid, ts] : counter_ts) CHECK(std::is_sorted(ts.begin(), ts.end()));
  REQUIRE(!flows.empty());
  for (auto& [id, pair] : flows) {
    REQUIRE(pair.size() == 2);
    const auto& s = pair[0]["ph"] == "s" ? pair[0] : pair[1];
    const auto& f = pair[0]["ph"] == "s" ? pair[1] : pair[0];
    CHECK(s["ph"] == "s");
    CHECK(f["ph"] == "f");
    CHECK(f["bp"] == "e");
    CHECK(f["ts"].get<double>() >= s["ts"].get<double>());  // the arrow runs forward in time
    for (const auto* end : {&s, &f}) {
      bool bound = false;
      for (const Slice& sl : slices[{(*end)["pid"], (*end)["tid"]}])
        bound |= sl.ts <= ns((*end)["ts"]) && ns((*end)["ts"]) <= sl.end;
      CHECK(bound);
    }
  }
}

TEST_CASE("a ring run's trace holds P-1 ring steps of K/V per rank per pass, with the right peers and bytes", "[trace]") {
  for (Layout layout : {Layout::contiguous, Layout::zigzag}) {
    const LayerConfig c = small();
    const int P = 4;
    TracedRun run = traced("ring", c, P, layout);
    const int64_t kv = c.b * (c.s / P) * c.Hkv * c.d() * 4;
    REQUIRE(run.trace.ranks.size() == size_t(P));
    for (const RankTrace& t : run.trace.ranks) {
      const int r = t.rank, right = (r + 1) % P, left = (r + P - 1) % P;
      for (const char* phase : {"forward", "backward"}) {
        std::map<std::string, std::set<int>> steps;  // event name -> ring steps it appeared at
        int step_spans = 0;
        for (const Event& e : t.events) {
          if (e.phase != phase) continue;
          if (e.kind == Kind::ring_step) ++step_spans;
          if (e.kind != Kind::p2p) continue;
          INFO("rank " << r << " " << phase << " " << e.name << " step " << e.step);
          CHECK(e.stream == Stream::comm);
          CHECK(e.bytes == kv);
          CHECK(e.peer == (e.direction == Direction::send ? right : left));
          CHECK(steps[e.name].insert(e.step).second);  // once per step
        }
        CHECK(step_spans == P);  // P compute steps, the last without a transfer
        for (const char* name : {"send k", "send v", "recv k", "recv v"}) {
          INFO(phase << " " << name);
          CHECK(steps[name] == std::set<int>{0, 1, 2});  // P - 1 ring steps
        }
        if (std::string(phase) == "backward")  // the dK/dV accumulators travel P hops, home at the last
          for (const char* name : {"send dk", "recv dv"}) CHECK(steps[name] == std::set<int>{0, 1, 2, 3});
      }
    }
    // The metrics see the same: P ring steps per pass.
    const auto m = compute_metrics(run.trace);
    REQUIRE(m.size() == 1);
    CHECK(m[0].steps.size() == size_t(2 * P));
    CHECK(m[0].steps[0].bytes_sent == 2 * kv * P);  // K and V from every rank
  }
}

TEST_CASE("the trace's memory peak equals the MemoryTracker's and its sends the communicator's", "[trace]") {
  for (const char* name : {"tp-sp", "ring", "ulysses"}) {
    const int P = 2;
    TracedRun run = traced(name, small(), P);
    const auto m = compute_metrics(run.trace);
    REQUIRE(m.size() == 1);
    REQUIRE(m[0].ranks.size() == size_t(P));
    for (int r = 0; r < P; ++r) {
      INFO(name << " rank " << r);
      const RunRecord& res = run.results[r];
      CHECK(res.peak_bytes > 0);
      CHECK(m[0].ranks[r].peak_memory_bytes == res.peak_bytes);
      CHECK(m[0].ranks[r].bytes_sent == res.forward.bytes_sent + res.backward.bytes_sent);
      CHECK(m[0].ranks[r].peak_by_category[int(MemCategory::activations)] == res.peak_saved);
      // Every op is accounted for: compute plus idle plus exposed comm fill the window.
      const Breakdown& b = m[0].ranks[r].time;
      CHECK(b.compute_ns + b.exposed_comm_ns + b.idle_ns == b.window_ns);
      CHECK(b.compute_ns > 0);
      CHECK(b.comm_ns > 0);
    }
  }
}

TEST_CASE("every strategy marks its sublayers in order, and every op inside a phase has one", "[trace]") {
  const std::vector<std::string> forward = {"ln1", "qkv", "attention", "out_proj", "ln2", "mlp"};
  const std::vector<std::string> backward = {"mlp", "ln2", "out_proj", "attention", "qkv", "ln1", "grad_sync"};
  for (const char* name : {"tp-sp", "ring", "ulysses"}) {
    TracedRun run = traced(name, small(), 2);
    for (const RankTrace& t : run.trace.ranks) {
      INFO(name << " rank " << t.rank);
      std::vector<const Event*> spans;
      for (const Event& e : t.events)
        if (e.kind == Kind::sublayer) spans.push_back(&e);
      std::sort(spans.begin(), spans.end(), [](auto* a, auto* b) { return a->ts_ns < b->ts_ns; });
      std::vector<std::string> fwd, bwd;
      for (const Event* e : spans) (e->phase == "forward" ? fwd : bwd).push_back(e->name);
      CHECK(fwd == forward);
      CHECK(bwd == backward);
      for (const Event& e : t.events)
        if (!e.phase.empty() && e.kind != Kind::phase) {
          INFO(e.name << " at " << e.ts_ns);
          CHECK(!e.sublayer.empty());
        }
    }
  }
}

TEST_CASE("tracing leaves the results bit for bit unchanged", "[trace]") {
  MemoryTracker tracker;
  const auto plain = run_local_ranks(plan_of("ring", small(), 2), DType::f32, tracker);
  TracedRun run = traced("ring", small(), 2);
  CHECK(relative_error(plain[0].out, run.results[0].out) == 0);
  CHECK(relative_error(plain[0].dx, run.results[0].dx) == 0);
}

TEST_CASE("the reader rejects malformed traces with the problem named", "[trace]") {
  const std::string ok = R"({"traceEvents":[{"ph":"X","name":"a","cat":"gemm","ts":1,"dur":2,"pid":0,"tid":0}]})";
  REQUIRE(parse_trace(ok).ranks.size() == 1);
  auto with = [](const std::string& event) { return R"({"traceEvents":[)" + event + "]}"; };
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"", "not valid JSON"},
      {ok.substr(0, ok.size() / 2), "not valid JSON"},
      {"[1, 2", "not valid JSON"},
      {R"({"events": []})", "no 'traceEvents'"},
      {R"({"traceEvents": 5})", "'traceEvents' must be an array"},
      {R"({"traceEvents": [], "otherData": 3})", "'otherData' must be an object"},
      {with("7"), "traceEvents[0]: an event must be an object"},
      {with(R"({"name":"a","ts":1,"pid":0,"tid":0})"), "traceEvents[0]: missing 'ph'"},
      {with(R"({"ph":"Q","pid":0})"), "unknown phase 'Q'"},
      {with(R"({"ph":"B","pid":0,"tid":0,"ts":1})"), "phase 'B' is Chrome trace but ringside reads only X, i, C, M, s and f"},
      {with(R"({"ph":"X","name":"a","ts":"1","dur":2,"pid":0,"tid":0})"), "'ts' must be a number, got string"},
      {with(R"({"ph":"X","name":"a","ts":1e300,"dur":2,"pid":0,"tid":0})"), "'ts' = 1e+300 is out of range"},
      {with(R"({"ph":"X","name":"a","ts":1,"dur":-2,"pid":0,"tid":0})"), "'dur' = -2 is out of range"},
      {with(R"({"ph":"X","name":"a","ts":1,"dur":2,"pid":1e20,"tid":0})"), "'pid' must be an integer, got 1e+20 (written as a floating-point number"},
      {with(R"({"ph":"X","name":"a","ts":1,"dur":2,"pid":0,"tid":0,"args":{"step":2.5}})"), "'args.step' must be an integer, got the non-integer 2.5"},
      {R"({"traceEvents":[],"otherData":{"processes":[{"pid":0,"rank":0},{"pid":0,"rank":1}]}})", "otherData.processes[1]: pid 0 is listed twice"},
      {R"({"traceEvents":[],"otherData":{"processes":[{"pid":0,"rank":1,"strategy":"ring"},{"pid":5,"rank":1,"strategy":"ring"}]}})",
       "pids 0 and 5 are both rank 1 of strategy 'ring'"},
      {with(R"({"ph":"X","name":"a","ts":1,"dur":2,"pid":99999999999999999999,"tid":0})"), "'pid' must be an integer"},
      {with(R"({"ph":"X","name":"a","ts":1,"dur":2,"pid":18446744073709551615,"tid":0})"), "'pid' = 18446744073709551615 is out of range"},
      {with(R"({"ph":"X","name":"a","ts":1,"dur":2,"pid":-1,"tid":0})"), "'pid' = -1 is out of range"},
      {with(R"({"ph":"X","name":7,"ts":1,"dur":2,"pid":0,"tid":0})"), "'name' must be a string, got number"},
      {with(R"({"ph":"X","name":"a","ts":1,"dur":2,"pid":0,"tid":0,"args":[]})"), "'args' must be an object, got array"},
      {with(R"({"ph":"X","name":"a","ts":1,"dur":2,"pid":0,"tid":0,"args":{"bytes":-5}})"), "'args.bytes' = -5 is out of range"},
      {with(R"({"ph":"X","name":"a","ts":1,"dur":2,"pid":0,"tid":0,"args":{"step":"two"}})"), "'args.step' must be an integer"},
      {with(R"({"ph":"C","name":"memory","ts":1,"pid":0,"tid":0,"args":{"weights":"lots"}})"), "'args.weights' must be a number"},
      {with(R"({"ph":"M","name":"process_name","pid":0,"tid":0,"args":{}})"), "missing 'args.name'"},
      {with(R"({"ph":"M","name":"frobnicate","pid":0,"tid":0})"), "unknown metadata event 'frobnicate'"},
      {with(R"({"ph":"s","id":3,"ts":1,"pid":0,"tid":0})"), "flow id 3 has a start ('s') but no finish ('f')"},
      {with(R"({"ph":"f","id":3,"ts":1,"pid":0,"tid":0})"), "flow id 3 has a finish ('f') but no start ('s')"},
      {with(R"({"ph":"s","id":3,"ts":1,"pid":0,"tid":0},{"ph":"s","id":3,"ts":1,"pid":0,"tid":0})"), "flow id 3 has a second 's' event"},
      // A group's own configuration (issue 42): an object per group, the fields the tile map reads typed.
      {R"({"traceEvents":[],"otherData":{"group_configs":[1]}})", "otherData.group_configs must be an object (group label: configuration), got array"},
      {R"({"traceEvents":[],"otherData":{"group_configs":{"ring packed":"docs"}}})", R"(otherData.group_configs["ring packed"] must be an object)"},
      {R"({"traceEvents":[],"otherData":{"group_configs":{"ring":{"docs":[300,0]}}}})",
       R"(otherData.group_configs["ring"].docs must be an array of positive integers (document lengths), got array)"},
      {R"({"traceEvents":[],"otherData":{"group_configs":{"ring":{"docs":"300,20"}}}})", R"(["ring"].docs must be an array of positive integers)"},
      {R"({"traceEvents":[],"otherData":{"group_configs":{"ring":{"docs":[2.5]}}}})", R"(["ring"].docs must be an array of positive integers)"},
      {R"({"traceEvents":[],"otherData":{"group_configs":{"ring":{"causal":"yes"}}}})", R"(["ring"].causal must be a boolean, got "yes")"},
      {R"({"traceEvents":[],"otherData":{"group_configs":{"ring":{"layout":7}}}})", R"(["ring"].layout must be one of contiguous, zigzag, striped, zigzag-per-doc, greedy, got 7)"},
      {R"({"traceEvents":[],"otherData":{"group_configs":{"ring":{"layout":"nonsense"}}}})", R"(["ring"].layout must be one of contiguous)"},
      // The break test's: documents that do not pack the sequence, and a sum that would wrap.
      {R"({"traceEvents":[],"otherData":{"group_configs":{"ring":{"s":510,"docs":[100,100,100,100]}}}})",
       R"(["ring"].docs sum to 400 tokens, not s = 510)"},
      {R"({"traceEvents":[],"otherData":{"group_configs":{"ring":{"s":510,"docs":[4611686018427387904,4611686018427387904,510]}}}})",
       R"(["ring"].docs sum to 2199023256062 tokens, not s = 510)"},
      {R"({"traceEvents":[],"otherData":{"group_configs":{"ring":{"window":-4}}}})", R"(["ring"].window must be an integer >= 0, got -4)"},
      {R"({"traceEvents":[],"otherData":{"group_configs":{"ring":{"s":18446744073709551615}}}})", R"(["ring"].s must be an integer >= 0)"},
  };
  for (const auto& [text, expect] : cases) {
    INFO(text);
    CHECK_THAT(error_of(text), Catch::Contains(expect) && Catch::Contains("t.json"));
  }
}

TEST_CASE("a group's own configuration round-trips, and a trace without one reads as before", "[trace]") {
  // Two recorded runs of a lesson: the first's configuration is the trace's, the second (packed
  // documents, another layout) carries its own; a twin of the second answers with its run's.
  TraceData t;
  t.run.config = nlohmann::json{{"s", 512}, {"causal", true}, {"layout", "contiguous"}};
  t.run.group_configs["ring packed greedy"] = {{"s", 510}, {"causal", true}, {"layout", "greedy"}, {"docs", {300, 20, 130, 60}}};
  t.run.groups["ring packed greedy (modeled, a100-nvlink)"] = GroupInfo{"ring packed greedy", "a100-nvlink", "bf16", std::nullopt, "", 0, std::nullopt};
  for (const char* strategy : {"ring contiguous", "ring packed greedy"}) {
    RankTrace r;
    r.strategy = strategy;
    r.events = {ev("attention_forward", Kind::attention, 0, 10)};
    t.ranks.push_back(r);
  }
  const TraceData back = parse_trace(to_chrome_json(t).dump());
  REQUIRE(back.run.group_configs.size() == 1);
  const nlohmann::json* packed = back.run.config_of("ring packed greedy");
  REQUIRE(packed);
  CHECK((*packed)["docs"] == nlohmann::json{300, 20, 130, 60});
  CHECK((*packed)["layout"] == "greedy");
  CHECK(back.run.config_of("ring packed greedy (modeled, a100-nvlink)") == packed);  // a twin: its run's
  REQUIRE(back.run.config_of("ring contiguous"));
  CHECK((*back.run.config_of("ring contiguous"))["s"] == 512);  // not listed: the trace's
  CHECK_FALSE(back.other.contains("group_configs"));  // typed once, in run
  CHECK(to_chrome_json(back).dump() == to_chrome_json(t).dump());
  // A trace written before group configs: every group ran otherData.config.
  nlohmann::json old = to_chrome_json(t);
  old["otherData"].erase("group_configs");
  const TraceData before = parse_trace(old.dump());
  CHECK(before.run.group_configs.empty());
  REQUIRE(before.run.config_of("ring packed greedy"));
  CHECK((*before.run.config_of("ring packed greedy"))["s"] == 512);
  CHECK(TraceData{}.run.config_of("ring") == nullptr);  // no config at all
}

TEST_CASE("the reader survives every truncation and random corruption of a real trace", "[trace]") {
  // The ring's schedule replayed on a modeled GPU: a real trace whose every byte is the same on
  // every run, so that the corruptions below are too (a measured trace's times change them).
  MemoryTracker tracker;
  const TraceData schedule = model::dry_run(plan_of("ring", small(), 2), tracker);
  const std::string text = to_chrome_json(model::model_trace(schedule, model::load_hardware("a100-nvlink"))).dump();
  REQUIRE(parse_trace(text).ranks.size() == 2);
  // Every cut is an error (a prefix of a JSON object is never a JSON object), never a crash.
  int errors = 0, cuts = 0;
  for (size_t n = 0; n < text.size(); n += 1 + text.size() / 500, ++cuts) {
    try {
      parse_trace(std::string_view(text).substr(0, n));
    } catch (const Error&) {
      ++errors;
    }
  }
  CHECK(errors == cuts);
  // Random byte changes: a ringside::Error or a valid parse, nothing else.
  std::mt19937 rng(42);
  const std::string alphabet = "{}[]\",:0123456789.-eE+ abcXCMsf\\\x01\xff";
  for (int i = 0; i < 300; ++i) {
    std::string bad = text;
    for (int k = 0; k < 3; ++k) bad[rng() % bad.size()] = alphabet[rng() % alphabet.size()];
    try {
      const TraceData t = parse_trace(bad);
      compute_metrics(t);
    } catch (const Error&) {
    }
  }
}

TEST_CASE("the ring gives every transfer but the last compute to hide behind: posted before a step's attention, waited after it", "[trace][ring]") {
  // Program order (each event's order and end_order), the same on every machine, not the
  // measured times, which vary with its load. The comm thread moves a posted transfer while its
  // rank computes (test_comm.cpp: "a posted send progresses while its rank computes"), so each
  // transfer below overlaps the attention it brackets: the K/V of step i that of step i, and
  // the dK/dV sent on at the end of backward step i that of step i + 1. The last step's dK/dV,
  // sent home, has nothing left to hide behind.
  for (int P : {2, 4}) {
    const TracedRun run = traced("ring", small(), P);
    for (const RankTrace& rt : run.trace.ranks) {
      INFO("P = " << P << ", rank " << rt.rank);
      // Per (phase, step): the first attention op's order and the last one's end_order.
      std::map<std::pair<std::string, int>, std::pair<int64_t, int64_t>> attention;
      std::map<std::tuple<Direction, int, int, int64_t>, int64_t> waited;  // (direction, peer, tag, seq) -> order
      for (const Event& e : rt.events) {
        if (e.kind == Kind::attention && e.step >= 0) {
          auto [it, fresh] = attention.try_emplace({e.phase, e.step}, e.order, e.end_order);
          it->second = {std::min(it->second.first, e.order), std::max(it->second.second, e.end_order)};
        }
        if (e.kind == Kind::wait && e.step >= 0) waited[{e.direction, e.peer, e.tag, e.seq}] = e.order;
      }
      int hidden = 0, exposed = 0;
      for (const Event& e : rt.events) {
        if (e.kind != Kind::p2p || e.step < 0) continue;
        INFO(e.phase << " step " << e.step << ": " << e.name);
        const bool gradient = e.name.find("dk") != std::string::npos || e.name.find("dv") != std::string::npos;
        const int behind = gradient ? e.step + 1 : e.step;
        if (gradient && behind == P) {  // the last step's dK/dV, waited for after the ring
          ++exposed;
          continue;
        }
        const auto wait = waited.find({e.direction, e.peer, e.tag, e.seq});
        const auto compute = attention.find({e.phase, behind});
        REQUIRE(wait != waited.end());
        REQUIRE(compute != attention.end());
        CHECK(e.order < compute->second.first);
        CHECK(compute->second.second < wait->second);
        ++hidden;
      }
      // K and V, sent and received, at each of the P - 1 steps that pass them on, forward and
      // backward; dK and dV likewise at every backward step, the last one's exposed.
      CHECK(hidden == 3 * 4 * (P - 1));
      CHECK(exposed == 4);
    }
  }
}

TEST_CASE("the reader names processes from the file, and counts NCCL kernels as communication", "[trace]") {
  const TraceData t = parse_trace(R"js({"traceEvents":[
    {"ph":"M","name":"process_name","pid":7,"tid":0,"args":{"name":"ring: GPU 3"}},
    {"ph":"M","name":"process_name","pid":8,"tid":0,"args":{"name":"GPU 1"}},
    {"ph":"M","name":"process_name","pid":9,"tid":0,"args":{"name":"python3 (trainer)"}},
    {"ph":"X","name":"ncclDevKernel_AllReduce_Sum_f32","cat":"kernel","ts":5,"dur":10,"pid":12345,"tid":7},
    {"ph":"X","name":"sm90_gemm","cat":"kernel","ts":0,"dur":10,"pid":12345,"tid":7}]})js");
  std::map<int, const RankTrace*> by_rank;
  for (const RankTrace& r : t.ranks) by_rank[r.rank] = &r;
  REQUIRE(by_rank.count(3));
  CHECK(by_rank[3]->strategy == "ring");
  CHECK(by_rank.at(1)->strategy.empty());
  CHECK(by_rank.at(9)->strategy == "python3 (trainer)");  // rank: the pid
  REQUIRE(by_rank.count(12345));
  const auto m = compute_metrics(t);
  bool found = false;
  for (const StrategyMetrics& sm : m)
    for (const RankMetrics& r : sm.ranks)
      if (r.rank == 12345) {
        found = true;
        CHECK(r.time.comm_ns == 10000);
        CHECK(r.time.compute_ns == 10000);
        CHECK(r.time.overlap_ns == 5000);
      }
  CHECK(found);
  // A folder is a PyTorch profiler run's (trace/kineto.h): one without its traces is an error.
  CHECK_THROWS_WITH(read_trace("/"), Catch::Contains("no PyTorch profiler traces in /"));
  CHECK_THROWS_WITH(read_trace("/dev/null"), Catch::Contains("not a regular file"));
  CHECK_THROWS_WITH(read_trace("/nonexistent/x.json"), Catch::Contains("cannot read trace /nonexistent/x.json"));
}

TEST_CASE("a live sink sees the ranks' traces grow while they run", "[trace]") {
  LayerConfig c = small();
  LocalOptions slow;
  slow.latency_us = 20000;  // 20 ms per message: the run lasts long enough to be seen live
  std::vector<RankTrace> final_ranks;
  TraceSink sink{Clock{Clock::steady_now_ns()}, &final_ranks};
  std::mutex mu;
  std::vector<size_t> seen;  // events in each live copy
  sink.flush_every_s = 0.02;
  sink.flush = [&](const std::vector<RankTrace>& now) {
    size_t n = 0;
    for (const RankTrace& r : now) n += r.events.size();
    std::lock_guard lock(mu);
    seen.push_back(n);
  };
  MemoryTracker tracker;
  run_local_ranks(plan_of("ring", c, 2), DType::f32, tracker, slow, &sink);
  size_t total = 0;
  for (const RankTrace& r : final_ranks) total += r.events.size();
  REQUIRE(seen.size() >= 2);
  CHECK(std::is_sorted(seen.begin(), seen.end()));  // only ever grows
  CHECK(seen.back() <= total);
  CHECK(*std::max_element(seen.begin(), seen.end()) > 0);
}

namespace {

// What Catapult makes of `doc` (catapult_reading.h) is what ringside means:
//   - every flow's `s` and `f` fall in exactly one slice of their thread, the `s` in a send and
//     the `f` in the receive of that very message (peer, tag and seq agree);
//   - no slice is drawn inside another against program order: a child begins after its parent
//     (order) and ends before it (end_order);
//   - no slice has zero length;
//   - each `memory` counter's stacked top equals the `memory total` counter at the same time.
// Returns the number of flows and of parent/child pairs checked.
std::pair<size_t, size_t> check_catapult_reading(const nlohmann::json& doc, const std::string& what) {
  INFO(what);
  const testing::CatapultReading c = testing::read_as_catapult(doc);
  std::map<int64_t, int64_t> rank_of;  // pid -> rank
  for (const auto& p : doc.at("otherData").at("processes")) rank_of[p.at("pid")] = p.at("rank");
  auto arg = [](const testing::ViewerSlice* s, const char* k) { return s->event->at("args").value(k, nlohmann::json()); };
  size_t flows = 0, pairs = 0, unbound = 0, misbound = 0, misnested = 0, zero = 0;
  std::string first_unbound, first_misbound, first_misnested;
  for (const auto& [id, ends] : c.flows) {
    ++flows;
    const testing::FlowEnd &s = ends.first, &f = ends.second;
    REQUIRE(s.event);
    REQUIRE(f.event);
    if (s.holding != 1 || f.holding != 1) {
      if (!unbound++) first_unbound = id + ": s in " + std::to_string(s.holding) + " slices, f in " + std::to_string(f.holding);
      continue;
    }
    const bool right = arg(s.bound, "direction") == "send" && arg(f.bound, "direction") == "recv" &&
                       arg(s.bound, "peer") == rank_of.at(f.pid) && arg(f.bound, "peer") == rank_of.at(s.pid) &&
                       arg(s.bound, "tag") == arg(f.bound, "tag") && arg(s.bound, "seq") == arg(f.bound, "seq");
    if (!right && !misbound++) first_misbound = id + ": " + s.bound->event->dump() + " -> " + f.bound->event->dump();
  }
  for (const auto& [thread, slices] : c.threads)
    for (const testing::ViewerSlice& child : slices) {
      zero += child.event->at("ph") == "X" && child.end_ns == child.start_ns;
      if (child.parent < 0) continue;
      ++pairs;
      const testing::ViewerSlice& parent = slices[size_t(child.parent)];
      const int64_t co = arg(&child, "order").get<int64_t>(), ce = arg(&child, "end_order").get<int64_t>();
      const int64_t po = arg(&parent, "order").get<int64_t>(), pe = arg(&parent, "end_order").get<int64_t>();
      if ((co < po || ce > pe) && !misnested++) first_misnested = child.event->dump() + " inside " + parent.event->dump();
    }
  INFO("first unbound flow: " << first_unbound);
  CHECK(unbound == 0);
  INFO("first misbound flow: " << first_misbound);
  CHECK(misbound == 0);
  INFO("first misnested pair: " << first_misnested);
  CHECK(misnested == 0);
  CHECK(zero == 0);
  size_t samples = 0;
  for (const auto& [pid, counters] : c.counters) {
    const auto& parts = counters.at("memory");
    const auto& total = counters.at("memory total");
    REQUIRE(parts.size() == total.size());
    for (size_t i = 0; i < parts.size(); ++i) {
      REQUIRE(parts[i].first == total[i].first);
      REQUIRE(parts[i].second == total[i].second);
    }
    samples += parts.size();
  }
  CHECK(samples > 0);
  return {flows, pairs};
}

}  // namespace

TEST_CASE("Catapult reads a traced run as ringside means it: flows bound, slices nested in program order, memory stacked to its total", "[trace]") {
  LayerConfig c = small();
  c.s = 48;
  TracedRun run = traced("ring", c, 3);
  TracedRun u = traced("ulysses", c, 2);
  for (auto& r : u.trace.ranks) run.trace.ranks.push_back(std::move(r));
  const nlohmann::json doc = to_chrome_json(run.trace);
  const auto [flows, pairs] = check_catapult_reading(doc, "ring x3 + ulysses x2");
  CHECK(flows > 0);
  CHECK(pairs > 0);
  // The counters' totals are the memory tracker's, sample for sample.
  const testing::CatapultReading reading = testing::read_as_catapult(doc);
  for (const RankTrace& r : run.trace.ranks) {
    const int64_t pid = (r.strategy == "ring" ? 0 : 1000) + r.rank;
    const auto& total = reading.counters.at(pid).at("memory total");
    REQUIRE(total.size() == r.memory.size());
    for (size_t i = 0; i < total.size(); ++i) CHECK(total[i].second == double(r.memory[i].total()));
  }
}

TEST_CASE("the writer binds flows and nests slices unambiguously where times touch", "[trace]") {
  // Rank 0 sends twice back to back, the second send starting the instant the first ends (the
  // case that bound half the flows of the 1M-token trace to the wrong send); rank 1 receives
  // them back to back. An op and its sublayer have the same extent; a wait of no time sits
  // where one op ends and the next begins.
  auto numbered = [](Event e, int64_t order, int64_t end_order) {
    e.order = order, e.end_order = end_order;
    return e;
  };
  auto transfer = [&](int64_t ts, int64_t dur, Direction dir, int peer, int64_t seq, int64_t order) {
    Event e = comm(ts, dur, dir, peer);
    e.tag = 3, e.seq = seq;
    return numbered(e, order, order);
  };
  Event ln1 = numbered(ev("ln1", Kind::sublayer, 0, 100), 1, 4);
  Event op = numbered(ev("layernorm_forward", Kind::norm, 0, 100), 2, 3);
  Event wait = numbered(ev("wait recv k", Kind::wait, 100, 0), 5, 6);
  Event next = numbered(ev("matmul", Kind::gemm, 100, 50), 7, 8);
  std::vector<Event> r0{ln1, op, wait, next, transfer(10, 40, Direction::send, 1, 0, 9), transfer(50, 40, Direction::send, 1, 1, 10)};
  std::vector<Event> r1{transfer(10, 40, Direction::recv, 0, 0, 1), transfer(50, 45, Direction::recv, 0, 1, 2)};
  TraceData t = hand_built({r0, r1}, 200);
  for (RankTrace& r : t.ranks) {
    r.events.back().order = 0, r.events.back().end_order = 99;  // the phase holds everything
    r.memory = {MemorySample{0, {100, 0, 20, 0, 0}}, MemorySample{60, {100, 0, 50, 7, 3}}};
  }
  const nlohmann::json doc = to_chrome_json(t);
  const auto [flows, pairs] = check_catapult_reading(doc, "hand-built");
  CHECK(flows == 2);
  const testing::CatapultReading c = testing::read_as_catapult(doc);
  // ln1 is layernorm_forward's parent, not its child; the wait is an instant, in no slice.
  const auto& compute = c.threads.at({0, 0});
  REQUIRE(compute.size() == 4);  // forward, ln1, layernorm_forward, matmul
  CHECK(compute[1].event->at("name") == "ln1");
  CHECK(compute[2].event->at("name") == "layernorm_forward");
  CHECK(compute[2].parent == 1);
  size_t instants = 0;
  for (const auto& e : doc["traceEvents"])
    if (e["ph"] == "i") {
      ++instants;
      CHECK(e["name"] == "wait recv k");
      CHECK(e["s"] == "p");
      CHECK(e["tid"] == 0);
    }
  CHECK(instants == 1);
  // Each flow's start is 1 ns inside its send, its finish 1 ns inside its receive.
  for (const auto& [id, ends] : c.flows) {
    CHECK(ends.first.ts_ns == testing::catapult_ns(ends.first.bound->event->at("ts")) + 1);
    CHECK(ends.second.ts_ns == ends.second.bound->end_ns - 1);
  }
  // The memory: the categories stacked reach the total, which is a counter of its own.
  CHECK(c.counters.at(0).at("memory").back().second == 160);
  CHECK(c.counters.at(0).at("memory total").back().second == 160);
  // And ringside reads it all back: the instant as a zero-length wait of the compute stream.
  const TraceData back = parse_trace(doc.dump());
  const auto& evs = back.ranks[0].events;
  const auto w = std::find_if(evs.begin(), evs.end(), [](const Event& e) { return e.name == "wait recv k"; });
  REQUIRE(w != evs.end());
  CHECK(w->dur_ns == 0);
  CHECK(w->ts_ns == 100);
  CHECK(w->stream == Stream::compute);
  CHECK(w->order == 5);
  CHECK(back.ranks[0].memory.back().total() == 160);
  CHECK(back.flows.size() == 2);
}

// The traces a user makes: the demo's compare (every strategy and its modeled twin, P = 4) and
// the modeled ring at 1M tokens on 64 ranks, as CTest wrote them (RINGSIDE_DEMO_TRACE and
// RINGSIDE_MODEL_TRACE).
TEST_CASE("Catapult reads the demo's trace and the 64-rank model trace as ringside means them", "[viewer-reading]") {
  for (const char* var : {"RINGSIDE_DEMO_TRACE", "RINGSIDE_MODEL_TRACE"}) {
    const char* path = std::getenv(var);
    INFO(var);
    REQUIRE(path);
    const nlohmann::json doc = nlohmann::json::parse(output::read_input(path, "trace", size_t(1) << 31));
    const auto [flows, pairs] = check_catapult_reading(doc, path);
    std::printf("%s: %zu flows bound to their send and receive, %zu parent/child pairs in program order\n", path, flows, pairs);
    CHECK(flows >= 1000);
    CHECK(pairs >= 5000);
  }
}

// ---- Issue 57: corrupt traces refused, one error naming the event and the field.

namespace {

// The ring's schedule on 4 ranks replayed on a modeled GPU, as the file holds it: a real trace
// whose every byte is the same on every run (a measured one's times vary).
nlohmann::json modeled_ring_file() {
  MemoryTracker tracker;
  const TraceData schedule = model::dry_run(plan_of("ring", small(), 4), tracker);
  return to_chrome_json(model::model_trace(schedule, model::load_hardware("a100-nvlink")));
}

// The index in traceEvents of the events of `pid` (X or i) that `keep` takes, in file order.
std::vector<size_t> events_where(const nlohmann::json& file, int64_t pid, const std::function<bool(const nlohmann::json&)>& keep) {
  std::vector<size_t> out;
  const nlohmann::json& evs = file["traceEvents"];
  for (size_t i = 0; i < evs.size(); ++i)
    if ((evs[i]["ph"] == "X" || evs[i]["ph"] == "i") && evs[i]["pid"] == pid && keep(evs[i])) out.push_back(i);
  return out;
}

bool is_compute_op(const nlohmann::json& e) {
  const std::string cat = e["cat"];
  return cat == "gemm" || cat == "attention" || cat == "norm" || cat == "elementwise";
}

}  // namespace

TEST_CASE("issue 57: program order is checked: a point of its own for each tick, in the order of the times", "[trace][issue57]") {
  const nlohmann::json good = modeled_ring_file();
  REQUIRE(parse_trace(good.dump(), "t.json").ranks.size() == 4);
  auto error = [](const nlohmann::json& file) { return error_of(file.dump()); };
  // The break test's: every event's order 0 (it modeled as a 105 us layer at 100% overlap).
  {
    nlohmann::json bad = good;
    for (nlohmann::json& e : bad["traceEvents"])
      if (e.contains("args") && e["args"].contains("order")) e["args"]["order"] = 0, e["args"]["end_order"] = 0;
    CHECK_THAT(error(bad), Catch::Matches(R"(t\.json: traceEvents\[[0-9]+\]: 'args\.(end_)?order' = 0 is also 'args\.(end_)?order' of traceEvents\[[0-9]+\] \(ring rank [0-3]\): each point of a rank's program has an order of its own)"));
  }
  // Two ops of rank 1 swapped in program order, their times as they were.
  {
    nlohmann::json bad = good;
    const std::vector<size_t> ops = events_where(bad, 1, is_compute_op);
    REQUIRE(ops.size() >= 2);
    nlohmann::json &a = bad["traceEvents"][ops[0]]["args"], &b = bad["traceEvents"][ops[1]]["args"];
    std::swap(a["order"], b["order"]);
    std::swap(a["end_order"], b["end_order"]);
    CHECK_THAT(error(bad), Catch::Contains("t.json: traceEvents[") && Catch::Contains("program order against time") &&
                               Catch::Contains("in ring rank 1's program"));
  }
  // Every order of rank 2 reversed (each still its own): a later op "ends" before an earlier.
  {
    nlohmann::json bad = good;
    for (size_t i : events_where(bad, 2, [](const nlohmann::json& e) { return e["args"].contains("order"); })) {
      nlohmann::json& a = bad["traceEvents"][i]["args"];
      const int64_t order = a["order"], end = a["end_order"];
      a["order"] = 1000000 - end, a["end_order"] = 1000000 - order;
    }
    CHECK_THAT(error(bad), Catch::Contains("program order against time") && Catch::Contains("ring rank 2's program"));
  }
  // One end of the pair missing, an end before its start, a direction nobody writes.
  {
    nlohmann::json bad = good;
    const size_t op = events_where(bad, 0, is_compute_op).at(0);
    bad["traceEvents"][op]["args"].erase("end_order");
    CHECK_THAT(error(bad), Catch::Contains(detail::concat("traceEvents[", op, "]: 'args.order' without 'args.end_order'")));
    bad = good;
    nlohmann::json& a = bad["traceEvents"][op]["args"];
    a["end_order"] = a["order"].get<int64_t>() - 1;
    CHECK_THAT(error(bad), Catch::Contains(detail::concat("traceEvents[", op, "]: 'args.end_order' = ")) &&
                               Catch::Contains("is before its 'args.order'"));
  }
  // Peers: one that is not a rank of the strategy, the event's own rank; a message twice.
  const std::vector<size_t> sends =
      events_where(good, 1, [](const nlohmann::json& e) { return e["args"].value("direction", "") == "send" && e["cat"] == "p2p"; });
  REQUIRE(sends.size() >= 2);
  for (const auto& [peer, expect] : std::vector<std::pair<int, std::string>>{
           {99, "'args.peer' = 99 is not a rank of ring (its ranks: 0 to 3)"},
           {4, "'args.peer' = 4 is not a rank of ring (its ranks: 0 to 3)"},
           {1, "'args.peer' = 1 is the event's own rank (ring rank 1)"}}) {
    nlohmann::json bad = good;
    bad["traceEvents"][sends[0]]["args"]["peer"] = peer;
    CHECK_THAT(error(bad), Catch::Contains(detail::concat("t.json: traceEvents[", sends[0], "]: ", expect)));
  }
  {
    nlohmann::json bad = good;
    const nlohmann::json& first = bad["traceEvents"][sends[0]]["args"];
    nlohmann::json& second = bad["traceEvents"][sends[1]]["args"];
    second["peer"] = first["peer"], second["tag"] = first["tag"], second["seq"] = first["seq"];
    CHECK_THAT(error(bad), Catch::Contains("'args.seq' = ") && Catch::Contains("names again the send to rank") &&
                               Catch::Contains("each message has a seq of its own"));
  }
  {
    nlohmann::json bad = good;
    bad["traceEvents"][sends[0]]["args"]["direction"] = "sideways";
    CHECK_THAT(error(bad), Catch::Contains(detail::concat("traceEvents[", sends[0], "]: 'args.direction' of a p2p must be send or recv, got 'sideways'")));
  }
}

TEST_CASE("issue 57: otherData's fields are of the types the readers take, or the trace is refused naming the field", "[trace][issue57]") {
  // A measured run with its modeled twin, as `compare --trace` writes it: read back whole.
  const nlohmann::json good = to_chrome_json(model::with_modeled_twin(traced("ring", small(), 2).trace, model::load_hardware("a100-nvlink")));
  const TraceData back = parse_trace(good.dump(), "t.json");
  REQUIRE(back.run.groups.size() == 1);
  const std::string twin = back.run.groups.begin()->first;
  const std::vector<std::tuple<std::string, nlohmann::json, std::string>> cases = {
      // The break test's: modeled_groups of the wrong type read as "no twins", and the twin was modeled again.
      {"/modeled_groups", "ring (modeled, a100-nvlink)", R"x(otherData.modeled_groups must be an object (modeled group label: {of, hardware, dtype, ...}), got "ring (modeled, a100-nvlink)")x"},
      {"/modeled_groups", 3, "otherData.modeled_groups must be an object"},
      {"/modeled_groups", nlohmann::json::array({twin}), "otherData.modeled_groups must be an object (modeled group label: {of, hardware, dtype, ...}), got array"},
      {"/modeled_groups/" + twin, "ring", "otherData.modeled_groups[\"" + twin + "\"] must be an object (a modeled group"},
      {"/modeled_groups/" + twin + "/of", 5, "otherData.modeled_groups[\"" + twin + "\"].of must be a string, got 5"},
      {"/modeled_groups/" + twin + "/of", twin, "otherData.modeled_groups[\"" + twin + "\"].of names the group itself"},
      {"/modeled_groups/" + twin + "/layers", "two", "otherData.modeled_groups[\"" + twin + "\"].layers must be an integer from 1 to 2^31 - 1, got \"two\""},
      {"/modeled_groups/" + twin + "/hardware", 7, "otherData.modeled_groups[\"" + twin + "\"].hardware must be a hardware profile"},
      {"/modeled_groups/" + twin + "/dry_run", nlohmann::json::array(), "otherData.modeled_groups[\"" + twin + "\"].dry_run must be an object (a configuration), got array"},
      // Beyond it: every other key a RunInfo reads.
      {"/modeled", "yes", R"(otherData.modeled must be a boolean, got "yes")"},
      {"/ranks", "2", R"(otherData.ranks must be an integer from 1 to 2^31 - 1, got "2")"},
      {"/ranks", 0, "otherData.ranks must be an integer from 1 to 2^31 - 1, got 0"},
      {"/dtype", 4, "otherData.dtype must be a string, got 4"},
      {"/producer", nlohmann::json::object(), "otherData.producer must be a string, got object"},
      {"/modeled_hardware", nlohmann::json{{"nom", "a100"}}, "otherData.modeled_hardware must be a hardware profile: its name, or an object with a string \"name\", got object"},
      {"/config", "ring", R"(otherData.config must be an object (a configuration), got "ring")"},
      {"/config/causal", "yes", R"(otherData.config.causal must be a boolean, got "yes")"},
      {"/config/recompute", 1, "otherData.config.recompute must be a string, got 1"},
      {"/config/layout", "auto", "otherData.config.layout must be one of contiguous, zigzag, striped, zigzag-per-doc, greedy"},
  };
  for (const auto& [pointer, value, expect] : cases) {
    INFO(pointer << " = " << value.dump());
    nlohmann::json bad = good;
    bad["otherData"][nlohmann::json::json_pointer(pointer)] = value;
    CHECK_THAT(error_of(bad.dump()), Catch::Contains("t.json: " + expect));
  }
}

TEST_CASE("issue 59: otherData.modeling, the model options a run was modeled under, is typed, or the trace is refused naming the field",
          "[trace][issue59]") {
  model::ModelOptions roofline;  // attention_kernel and fp8_recipe null: both are allowed
  roofline.efficiency = "ideal";
  const nlohmann::json good = to_chrome_json(model::with_modeled_twin(traced("ring", small(), 2).trace, model::load_hardware("a100-nvlink"), roofline));
  const TraceData back = parse_trace(good.dump(), "t.json");
  REQUIRE(back.run.groups.size() == 1);
  const std::string twin = back.run.groups.begin()->first;
  REQUIRE(back.run.groups.begin()->second.modeling.has_value());
  CHECK(back.run.groups.begin()->second.modeling->efficiency == "ideal");
  CHECK(back.run.groups.begin()->second.modeling->attention_kernel.empty());
  const std::string group = "otherData.modeled_groups[\"" + twin + "\"].modeling";
  const std::vector<std::tuple<std::string, nlohmann::json, std::string>> cases = {
      {"/modeling", "fused", R"x(otherData.modeling must be an object (the model's options: dtype, efficiency, stack, merge, ...), got "fused")x"},
      {"/modeling/merge", 3, "otherData.modeling.merge must be a string, got 3"},
      {"/modeling/stack", nullptr, "otherData.modeling.stack must be a string, got null"},
      {"/modeling/attention_kernel", 5, "otherData.modeling.attention_kernel must be a string or null, got 5"},
      {"/modeling/tp_comm_overlap", "yes", R"(otherData.modeling.tp_comm_overlap must be a boolean, got "yes")"},
      {"/modeled_groups/" + twin + "/modeling", nlohmann::json::array(), group + " must be an object"},
      {"/modeled_groups/" + twin + "/modeling/dtype", false, group + ".dtype must be a string, got false"},
      {"/modeled_groups/" + twin + "/modeling/overlap_grad_reduce", 1, group + ".overlap_grad_reduce must be a boolean, got 1"},
  };
  for (const auto& [pointer, value, expect] : cases) {
    INFO(pointer << " = " << value.dump());
    nlohmann::json bad = good;
    bad["otherData"][nlohmann::json::json_pointer(pointer)] = value;
    CHECK_THAT(error_of(bad.dump()), Catch::Contains("t.json: " + expect));
  }
}

TEST_CASE("the slowest rank: the one busy longest in the shared window, and what makes it so", "[trace]") {
  // Issue 61: trace-stats gave every rank the same window and could not say which rank the others
  // wait for. Three ranks of a 10 ms window (ns): rank 1 computes no more than the others but
  // waits 3 ms longer on its communication.
  auto rank = [](int r, int64_t compute, int64_t exposed) {
    trace::RankMetrics m;
    m.rank = r;
    m.time.window_ns = 10'000'000, m.time.compute_ns = compute, m.time.exposed_comm_ns = exposed;
    m.time.comm_ns = exposed, m.time.idle_ns = 10'000'000 - compute - exposed;
    return m;
  };
  trace::StrategyMetrics s;
  s.ranks = {rank(0, 4'000'000, 2'000'000), rank(1, 4'000'000, 5'000'000), rank(2, 5'000'000, 1'000'000)};
  const trace::SlowestRank w = trace::slowest_rank(s);
  CHECK(w.rank == 1);
  CHECK(w.busy_ns() == 9'000'000);
  CHECK(w.others.compute_ns == 4'500'000);
  CHECK(w.others.exposed_comm_ns == 1'500'000);
  CHECK(w.others.idle_ns == 4'000'000);
  CHECK(w.exposed_excess_ns == 3'500'000);
  CHECK(w.compute_excess_ns == -500'000);
  CHECK(w.cause == "exposed communication");
  // A rank busier on compute is slow for its compute; one rank alone has no slowest.
  s.ranks[2] = rank(2, 9'500'000, 0);
  CHECK(trace::slowest_rank(s).rank == 2);
  CHECK(trace::slowest_rank(s).cause == "compute");
  s.ranks.resize(1);
  CHECK(trace::slowest_rank(s).rank == -1);
}

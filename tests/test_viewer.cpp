// The viewer's model without a window (layout, time axis, exposed comm, ring steps, tile map,
// replay, hit testing), and the pixels of a headless screenshot of a hand-built trace.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <map>
#include <set>

#include "kernels/cpu/attention.h"
#include "model/model.h"
#include "parallel/formulas.h"
#include "parallel/run_plan.h"
#include "run/runner.h"
#include "stb_image.h"
#include "viz/view_model.h"

using namespace ringside;
using namespace ringside::viz;
using trace::Event;
using trace::Stream;

namespace {

Event ev(const char* name, trace::Kind kind, int64_t ts, int64_t dur, Stream stream = Stream::compute) {
  Event e;
  e.name = name, e.kind = kind, e.ts_ns = ts, e.dur_ns = dur, e.stream = stream;
  return e;
}

// A traced ring run on P local ranks, as a trace file would hold it.
// The plan run on local ranks, traced, as the viewer reads its file; `records`, every rank's
// (their tensors counted in `tracker`, which must outlive them).
trace::TraceData traced(const RunPlan& plan, MemoryTracker& tracker, std::vector<RunRecord>* records = nullptr) {
  trace::TraceData t;
  const TraceSink sink{trace::Clock{trace::Clock::steady_now_ns()}, &t.ranks};
  std::vector<RunRecord> all = run_local_ranks(plan, DType::f32, tracker, {}, &sink);
  if (records) *records = std::move(all);
  t.run.config = plan.config_json();
  t.run.layout = to_string(plan.requested_layout());
  return trace::parse_trace(trace::to_chrome_json(t).dump());
}

trace::TraceData ring_trace(int P, Layout layout, bool causal = true) {
  LayerConfig c;
  c.b = 1, c.s = 64, c.h = 32, c.H = 4, c.Hkv = 2, c.f = 32, c.causal = causal;
  ParallelConfig ring = parse_parallel_config("ring");
  ring.layout = layout;
  MemoryTracker tracker;
  return traced(resolve(ring, c, P), tracker);
}

}  // namespace

TEST_CASE("the time axis maps time to pixels and back, zooms about the mouse and pans", "[viewer]") {
  TimeAxis a;
  a.t0 = 1000, a.t1 = 3000, a.x0 = 100, a.x1 = 500;
  CHECK(a.x_of(2000) == Approx(300));
  CHECK(a.t_of(300) == Approx(2000));
  a.zoom(2, 200);  // the time under x = 200 stays under it
  CHECK(a.x_of(1500) == Approx(200));
  CHECK(a.t1 - a.t0 == Approx(1000));
  a.pan(40);  // drag right by 40 px: earlier times come into view
  CHECK(a.x_of(1500) == Approx(240));
  a.fit(0, 10000);
  CHECK(a.t0 == Approx(-200));
  CHECK(a.t1 == Approx(10200));
}

TEST_CASE("the layout gives every strategy a group and every GPU its lanes", "[viewer]") {
  trace::TraceData t;
  for (const char* st : {"ring", "ulysses"})
    for (int r = 1; r >= 0; --r) {  // out of rank order on purpose
      trace::RankTrace rt;
      rt.strategy = st, rt.rank = r;
      rt.events = {ev("forward", trace::Kind::phase, 0, 100), ev("attention", trace::Kind::attention, 10, 50), ev("send", trace::Kind::p2p, 20, 30, Stream::comm),
                   ev("recv", trace::Kind::p2p, 25, 30, Stream::comm), ev("late", trace::Kind::p2p, 60, 10, Stream::comm)};
      rt.memory = {trace::MemorySample{0, {100, 0, 0, 0, 0}}};  // a memory plot to draw
      t.ranks.push_back(rt);
    }
  LayoutOptions o;
  const TimelineLayout l = make_layout(t, o);
  REQUIRE(l.groups.size() == 2);
  CHECK(l.groups[0].strategy == "ring");
  REQUIRE(l.groups[0].processes.size() == 2);
  CHECK(t.ranks[l.groups[0].processes[0]].rank == 0);  // rank order
  // Per GPU: compute, two comm lanes (send and recv overlap in time; the late one fits the first), memory.
  CHECK(l.groups[0].lanes.size() == 2 * 4);
  const Lane& compute = l.lanes[l.groups[0].lanes[0]];
  CHECK(compute.kind == Lane::compute);
  CHECK(compute.depth == std::vector<int>{0, 1});  // the attention op nests in the phase
  CHECK(compute.height == Approx(2 * o.row));       // two rows: the phase, the op in it
  const Lane& comm0 = l.lanes[l.groups[0].lanes[1]];
  const Lane& comm1 = l.lanes[l.groups[0].lanes[2]];
  CHECK(comm0.events.size() == 2);  // send, then late
  CHECK(comm1.events.size() == 1);  // recv
  CHECK(comm1.y == Approx(comm0.y + comm0.height));
  CHECK(l.lanes[l.groups[0].lanes[3]].kind == Lane::memory);
  CHECK(l.groups[1].y == Approx(l.groups[0].y + l.groups[0].height + o.gap));
  CHECK(l.height > l.groups[1].y);
}

// Issue 61: a modeled step's rows drew a compute lane of max_depth rows (the bar on the first,
// the label in the middle of the empty ones below), an empty comm lane and an empty memory plot.
TEST_CASE("a lane is as tall as what it draws: a compute lane one row a nesting level, no lane with nothing to draw", "[viewer]") {
  trace::TraceData t;
  trace::RankTrace stage;  // a pipeline stage's row: ops one after another, no comm, no memory
  stage.strategy = "step", stage.rank = 0;
  stage.events = {ev("F0", trace::Kind::other, 0, 100), ev("bubble", trace::Kind::wait, 100, 10), ev("B0", trace::Kind::other, 110, 200)};
  stage.memory = {trace::MemorySample{0, {0, 0, 0, 0, 0}}};  // a sample of no bytes draws nothing
  trace::RankTrace deep;  // a phase, a sublayer in it, an op in that; a send; memory
  deep.strategy = "step", deep.rank = 1;
  deep.events = {ev("forward", trace::Kind::phase, 0, 300), ev("attention", trace::Kind::other, 10, 100),
                 ev("attention_forward", trace::Kind::attention, 20, 50), ev("send", trace::Kind::p2p, 20, 30, Stream::comm)};
  deep.memory = {trace::MemorySample{0, {100, 0, 50, 0, 0}}};
  t.ranks = {stage, deep};
  LayoutOptions o;
  const TimelineLayout l = make_layout(t, o);
  REQUIRE(l.groups.size() == 1);
  const Group& g = l.groups[0];
  std::vector<std::string> labels;
  for (size_t li : g.lanes) labels.push_back(l.lanes[li].label);
  CHECK(labels == std::vector<std::string>{"GPU 0 compute", "GPU 1 compute", "GPU 1 comm", "GPU 1 memory"});
  const Lane &flat = l.lanes[g.lanes[0]], &nested = l.lanes[g.lanes[1]];
  CHECK(flat.height == Approx(o.row));  // one row: nothing nests
  CHECK(nested.depth == std::vector<int>{0, 1, 2});
  CHECK(nested.height == Approx(3 * o.row));
  CHECK(nested.y == Approx(flat.y + flat.height + o.gap));  // GPU 0 takes its one row and the gap
  for (size_t k = 0; k + 1 < g.lanes.size(); ++k) {  // each lane of GPU 1 starts where the one above ends
    const Lane &a = l.lanes[g.lanes[k]], &b = l.lanes[g.lanes[k + 1]];
    if (a.process == b.process) CHECK(b.y == Approx(a.y + a.height));
  }
  CHECK(g.height == Approx(o.header + 4 * o.row + o.gap + o.row * 0.75f + o.memory + o.gap));
  // Collapsed: a summary row per GPU, and no memory plot where no GPU holds memory.
  o.collapse_all = true;
  t.ranks[1].memory.clear();
  const TimelineLayout c = make_layout(t, o);
  REQUIRE(c.groups[0].lanes.size() == 2);
  for (size_t li : c.groups[0].lanes) CHECK(c.lanes[li].kind == Lane::summary);
}

TEST_CASE("a group's title wraps at its header's width: words after their spaces, the tag whole, never past the edge, or is cut with ...", "[viewer]") {
  const auto mono = [](const std::string& s) { return 7.0f * float(s.size()); };  // 7 px a character
  const std::vector<TitlePiece> pieces{{"[-] winner ring2 pp4", 1, 0, 0}, {"MODELED on h100", 2, 9, 7}, {"4 stages, 4.9 s, ", 3, 0, 10},
                                       {"sent 16 GiB/stage", 4, 0, 0}};
  // Wide enough: one row, as drawn before wrapping: the tag 7 px after the name with 3 px of box.
  const std::vector<PlacedWord> one = flow_title(pieces, 1000, mono);
  CHECK(one.back().row == 0);
  REQUIRE(one.size() == 4 + 1 + 4 + 3);
  CHECK(one[4].text == "MODELED on h100");
  CHECK(one[4].x == Approx(20 * 7 + 7 + 3));
  CHECK(one[4].box == 9);
  CHECK(one[5].x == Approx(one[4].x + 15 * 7 + 3 + 10));  // after the box, 10 px
  // 200 px: every row's ink ends within it, the tag never broken, the words in order.
  const std::vector<PlacedWord> rows = flow_title(pieces, 200, mono);
  std::string text;
  for (const PlacedWord& w : rows) {
    CHECK(w.x + w.width + (w.box ? 3 : 0) <= 200);
    text += w.text + (w.box ? " " : "");
  }
  CHECK(text == "[-] winner ring2 pp4MODELED on h100 4 stages, 4.9 s, sent 16 GiB/stage");
  CHECK(rows.back().row == 2);
  const auto tag = std::find_if(rows.begin(), rows.end(), [](const PlacedWord& w) { return w.box; });
  CHECK(tag->row == 1);
  CHECK(tag->x == Approx(3));  // a row's first word starts at its left, the box's 3 px inside
  // Cut to one row: the words that fit, then "..." (the words before it dropped until it fits).
  auto joined = [](const std::vector<PlacedWord>& ws) {
    std::string text;
    for (const PlacedWord& w : ws) text += w.text;
    return text;
  };
  const std::vector<PlacedWord> cut = flow_title(pieces, 200, mono, 1);
  CHECK(joined(cut) == "[-] winner ring2 pp4...");
  CHECK(cut.back().row == 0);
  CHECK(cut.back().x == Approx(20 * 7));
  const std::vector<PlacedWord> tight = flow_title(pieces, 150, mono, 1);
  CHECK(joined(tight) == "[-] winner ring2 ...");
  CHECK(tight.back().x + tight.back().width <= 150);
  CHECK(flow_title(pieces, 1000, mono, 1).size() == one.size());  // what fits is not cut
  // A word wider than the width has a row to itself.
  const std::vector<PlacedWord> narrow = flow_title({{"ab abcdefghij cd", 1, 0, 0}}, 50, mono);
  REQUIRE(narrow.size() == 3);
  CHECK(narrow[1].row == 1);
  CHECK(narrow[1].x == 0);
  CHECK(narrow[2].row == 2);
}

TEST_CASE("a trace with modeled twins: each group says whether it is measured or modeled, on what, and how much comm hid", "[viewer]") {
  trace::TraceData t = model::with_modeled_twin(ring_trace(2, Layout::zigzag), model::load_hardware("a100-nvlink"));
  const TimelineLayout layout = make_layout(t);
  REQUIRE(layout.groups.size() == 2);
  CHECK(group_tag(t.run, "ring") == "MEASURED");
  CHECK(group_tag(t.run, "ring (modeled, a100-nvlink)") == "MODELED on a100-nvlink");
  const trace::RunInfo modeled_trace = trace::run_info({{"modeled", true}, {"hardware", {{"name", "h200"}}}});
  CHECK(group_tag(modeled_trace, "ring") == "MODELED on h200");
  CHECK(group_tag(trace::RunInfo{}, "ring").empty());
  CHECK(trace_tag(t.run) == "(measured, and modeled on a100-nvlink)");
  CHECK(trace_tag(modeled_trace) == "(MODELED on h200)");
  CHECK(trace_tag(trace::RunInfo{}) == "(measured)");
  CHECK(twin_of(t.run, "ring (modeled, a100-nvlink)") == "ring");
  CHECK(twin_of(t.run, "ring").empty());
  {  // A recorded group's name past the short-string buffer: the twin names it whole (a twin_of
     // that kept a pointer into its RunInfo read freed memory here).
    trace::TraceData named = ring_trace(2, Layout::zigzag);
    for (trace::RankTrace& r : named.ranks) r.strategy = "ring contiguous s=64K, a long label";
    named = model::with_modeled_twin(std::move(named), model::load_hardware("a100-nvlink"));
    CHECK(twin_of(named.run, "ring contiguous s=64K, a long label (modeled, a100-nvlink)") == "ring contiguous s=64K, a long label");
  }
  // otherData of the wrong kind (a foreign file) reads as nothing modeled, and loses nothing.
  nlohmann::json null_other;
  CHECK(trace::run_info(null_other).groups.empty());
  CHECK(trace::without_run_info(null_other).empty());
  CHECK(null_other.is_null());
  // The header's summary is the attention sublayer's overlap and its exposed time per GPU.
  for (const trace::StrategyMetrics& m : trace::compute_metrics(t)) {
    INFO(m.strategy);
    trace::Breakdown att;
    for (const auto& [sub, b] : m.comm_by_sublayer)
      if (sub == "attention") att = b;
    REQUIRE(att.comm_ns > 0);
    // (printf's rounding, half to even, as the header's: the measured group's percentage may
    // fall on a half.)
    char pct[16];
    std::snprintf(pct, sizeof pct, "%.0f", att.overlap_pct());
    // Beside it all communication's exposed time, as compare's "exposed" column (issue 42:
    // the header said 39.8 us where the table said 87 us, without saying why).
    const std::string want = "attention comm " + std::string(pct) + "% hidden, " +
                             format_ns(double(att.exposed_comm_ns) / 2) + " exposed/GPU; all comm " +
                             format_ns(double(m.total.exposed_comm_ns) / 2) + " exposed/GPU";
    CHECK(comm_summary(m) == want);
  }
  // The tile map's key names every GPU of a hue (issue 42: on 64 ranks it stopped at GPU 15).
  CHECK(rank_color_key(3, 4) == "GPU 3");
  CHECK(rank_color_key(3, 64) == "GPU 3, 15, 27, 39, 51, 63");
  CHECK(rank_color_key(0, 256) == "GPU 0, 12, 24, ..., 252, every 12th");
  CHECK(rank_color(5) == rank_color(5 + kRankColors));
  // --fit: modeled, measured, all, a group's name; nothing for a name no group has.
  CHECK(groups_to_fit(layout, t.run, "all").size() == 2);
  REQUIRE(groups_to_fit(layout, t.run, "modeled").size() == 1);
  CHECK(groups_to_fit(layout, t.run, "modeled")[0]->strategy == "ring (modeled, a100-nvlink)");
  REQUIRE(groups_to_fit(layout, t.run, "measured").size() == 1);
  CHECK(groups_to_fit(layout, t.run, "measured")[0]->strategy == "ring");
  CHECK(groups_to_fit(layout, t.run, "ring").size() == 1);
  CHECK(groups_to_fit(layout, t.run, "warp").empty());
  // Aligned: both groups' zero is their forward's start, at the same time.
  CHECK(layout.groups[0].zero_ns == layout.groups[1].zero_ns);
}

TEST_CASE("exposed communication is comm minus compute", "[viewer]") {
  trace::RankTrace r;
  r.events = {ev("a", trace::Kind::attention, 0, 100), ev("w", trace::Kind::wait, 100, 50), ev("c", trace::Kind::p2p, 80, 60, Stream::comm),
              ev("d", trace::Kind::all_reduce, 200, 40, Stream::comm), ev("g", trace::Kind::gemm, 210, 10)};
  const auto x = exposed_intervals(r);
  REQUIRE(x.size() == 3);
  CHECK(x[0].begin == 100);  // the wait does not hide it
  CHECK(x[0].end == 140);
  CHECK(x[1].begin == 200);
  CHECK(x[1].end == 210);
  CHECK(x[2].begin == 220);
  CHECK(x[2].end == 240);
}

TEST_CASE("replay reveals up to the play head and steps through the ring", "[viewer]") {
  const trace::TraceData t = ring_trace(4, Layout::zigzag);
  const auto marks = step_marks(t);
  REQUIRE(marks.size() == 8);  // 4 forward steps, then 4 backward
  CHECK(marks[0].phase == "forward");
  CHECK(marks[0].step == 0);
  CHECK(marks[7].phase == "backward");
  CHECK(marks[7].step == 3);
  const auto next = step_after(marks, marks[2].ts_ns, +1);
  REQUIRE(next);
  CHECK(*next == marks[3].ts_ns);
  CHECK(!step_after(marks, marks[7].ts_ns, +1));
  CHECK(*step_after(marks, marks[0].ts_ns + 1, -1) == marks[0].ts_ns);
  Replay rp;
  rp.playing = true, rp.speed = 0.5;
  CHECK(rp.advance(1e-3, 1'000'000'000));
  CHECK(rp.head_ns == 500'000);
  CHECK(rp.advance(10, 1'000'000));  // runs past the end: stops there
  CHECK(rp.head_ns == 1'000'000);
  CHECK(!rp.playing);
}

TEST_CASE("the attention tile map gives each tile its rank and ring step, masked tiles masked", "[viewer]") {
  for (Layout layout : {Layout::contiguous, Layout::zigzag, Layout::striped}) {
    const int P = 4;
    const trace::TraceData t = ring_trace(P, layout);
    const auto m = tile_map(t, "ring");
    REQUIRE(m);
    INFO(to_string(layout));
    CHECK(m->blocks == (layout == Layout::zigzag ? 2 * P : P));
    int computed = 0;
    for (int q = 0; q < m->blocks; ++q)
      for (int k = 0; k < m->blocks; ++k) {
        const Tile& tile = m->at(q, k);
        auto owner = [&](int c) { return layout == Layout::zigzag ? (c < P ? c : 2 * P - 1 - c) : c; };
        CHECK(tile.masked == (layout != Layout::striped && k > q));
        // A masked tile ran nowhere (the map draws what ran): no rank, no step.
        CHECK(tile.rank == (tile.masked ? -1 : owner(q)));
        CHECK(tile.step == (tile.masked ? 0 : (owner(q) - owner(k) + P) % P));
        computed += !tile.masked;
      }
    // Against the trace: every rank computed exactly the (non-masked) tiles of its query blocks,
    // at the steps the map says: count the steps at which each rank ran attention.
    for (int r = 0; r < P; ++r) {
      std::set<int> steps_in_trace, steps_in_map;
      for (const trace::RankTrace& rt : t.ranks)
        if (rt.rank == r)
          for (const Event& e : rt.events)
            if (e.phase == "forward" && e.name == "attention_forward") steps_in_trace.insert(e.step);
      for (const Tile& tile : m->tiles)
        if (tile.rank == r && !tile.masked) steps_in_map.insert(tile.step);
      CHECK(steps_in_trace == steps_in_map);
    }
    // Replay: nothing done before the first step, everything after the last.
    const auto none = tiles_done(t, *m, INT64_MIN), all = tiles_done(t, *m, INT64_MAX);
    CHECK(std::count(none.begin(), none.end(), true) == 0);
    CHECK(std::count(all.begin(), all.end(), true) == computed);
  }
  trace::TraceData plain;
  CHECK(!tile_map(plain, "ring"));  // no config: no map
  CHECK(!tile_map(ring_trace(2, Layout::contiguous), "tp-sp"));
}

TEST_CASE("the tile map of a zigzag-per-doc run with documents and a window draws the pairs the ring computed", "[viewer]") {
  // Issue 38: the map is what ran (each ring step's recorded pairs), not a copy of the layout
  // rule, so it draws packed documents and windows too. Checked here against the layout and
  // the mask independently: every chunk of every rank is a block; a tile is computed, by the
  // rank holding its query chunk at step (owner(q) - owner(k)) mod P, exactly when the mask
  // leaves some of its pairs (the kernels' count of visible pairs), and partly masked exactly
  // when it leaves fewer than all.
  for (Layout layout : {Layout::zigzag_per_doc, Layout::greedy, Layout::zigzag}) {
    INFO(to_string(layout));
    LayerConfig c;
    c.b = 1, c.s = 120, c.h = 32, c.H = 4, c.Hkv = 2, c.f = 32;
    c.docs = {50, 7, 40, 23}, c.window = 20;
    const int P = 4;
    ParallelConfig ring = parse_parallel_config("ring");
    ring.layout = layout;
    const RunPlan plan = resolve(ring, c, P);
    MemoryTracker tracker;  // before the records, whose tensors it counts
    std::vector<RunRecord> res;
    const trace::TraceData t = traced(plan, tracker, &res);
    const auto m = tile_map(t, "ring");
    REQUIRE(m);
    CHECK(m->layout == to_string(layout));
    // The chunks, by first slot, with their owner: from the layout.
    std::map<int64_t, std::pair<Run, int>> chunks;
    for (int r = 0; r < P; ++r)
      for (const Run& run : plan.ring->runs(r))
        for (const Run& ch : plan.ring->chunks_of(run)) chunks.emplace(ch.first, std::pair{ch, r});
    // A chunk whose queries see nothing (padding alone) is no row: the map holds the rest.
    std::vector<std::pair<Run, int>> rows;
    AttentionParams base;
    base.b = c.b, base.H = c.H, base.Hkv = c.Hkv, base.d = c.d(), base.causal = c.causal, base.mask = plan.packing->mask();
    auto visible = [&](const Run& q, const Run& k) {
      AttentionParams p = base;
      p.sq = q.len, p.q_offset = q.first, p.q_stride = q.stride, p.sk = k.len, p.k_offset = k.first, p.k_stride = k.stride;
      return kernels::cpu::attention_forward_flops(p) / (4.0 * double(c.H * c.d()));
    };
    for (const auto& [first, chunk] : chunks) {
      bool sees = false;
      for (const auto& [kf, key] : chunks) sees |= visible(chunk.first, key.first) > 0;
      if (sees) rows.push_back(chunk);
    }
    REQUIRE(m->blocks == int(rows.size()));
    int computed = 0;
    for (int q = 0; q < m->blocks; ++q)
      for (int k = 0; k < m->blocks; ++k) {
        const Tile& tile = m->at(q, k);
        const auto& [qc, q_owner] = rows[size_t(q)];
        const auto& [kc, k_owner] = rows[size_t(k)];
        const double pairs = visible(qc, kc);
        INFO("tile " << q << ", " << k);
        CHECK(tile.masked == (pairs == 0));
        if (tile.masked) continue;
        ++computed;
        CHECK(tile.rank == q_owner);
        CHECK(tile.step == (q_owner - k_owner + P) % P);
        CHECK(tile.partial == (pairs < double(qc.len * kc.len)));
      }
    CHECK(computed > m->blocks);  // documents longer than a chunk: tiles off the diagonal too
    double flops = 0;
    for (const RunRecord& r : res) flops += r.attention_flops;
    CHECK(flops == parallel_attention_flops(plan, 0) + parallel_attention_flops(plan, 1) +
                       parallel_attention_flops(plan, 2) + parallel_attention_flops(plan, 3));
  }
}

TEST_CASE("hit testing finds the event under the mouse, the deepest in its row", "[viewer]") {
  trace::TraceData t;
  trace::RankTrace r;
  r.strategy = "ring";
  r.events = {ev("forward", trace::Kind::phase, 0, 1'000'000), ev("attention_forward", trace::Kind::attention, 100'000, 200'000),
              ev("send k", trace::Kind::p2p, 150'000, 100'000, Stream::comm)};  // ns: 1 ms, 200 us, 100 us
  r.events[1].flops = 2e9, r.events[1].phase = "forward", r.events[1].sublayer = "attention", r.events[1].step = 2;
  r.events[2].bytes = 1 << 20, r.events[2].peer = 1, r.events[2].direction = trace::Direction::send;
  t.ranks.push_back(r);
  LayoutOptions o;
  const TimelineLayout l = make_layout(t, o);
  TimeAxis a;
  a.t0 = 0, a.t1 = 1e6, a.x0 = 0, a.x1 = 1000;  // 1 px = 1 us
  const float top = 50;
  const Lane& compute = l.lanes[0];
  auto hit = hit_test(t, l, {a}, 200, top + compute.y + compute.row * 1.5f, top);  // row 1: the op
  REQUIRE(hit);
  CHECK(t.ranks[0].events[hit->event].name == "attention_forward");
  hit = hit_test(t, l, {a}, 600, top + compute.y + compute.row * 1.5f, top);  // row 1 at 600: only the phase
  REQUIRE(hit);
  CHECK(t.ranks[0].events[hit->event].name == "forward");
  const Lane& comm = l.lanes[1];
  hit = hit_test(t, l, {a}, 200, top + comm.y + 2, top);
  REQUIRE(hit);
  CHECK(t.ranks[0].events[hit->event].name == "send k");
  CHECK(!hit_test(t, l, {a}, 800, top + comm.y + 2, top));
  // The tooltip's lines: where, rates.
  const auto lines = describe_event(t.ranks[0].events[1]);
  const std::string all = [&] {
    std::string s;
    for (auto& x : lines) s += x + "\n";
    return s;
  }();
  CHECK_THAT(all, Catch::Contains("forward / attention, ring step 2") && Catch::Contains("2.000 GFLOP, 10000.0 GFLOP/s"));
  CHECK_THAT(describe_event(t.ranks[0].events[2])[3], Catch::Contains("1.00 MiB, 10.49 GB/s"));
}

TEST_CASE("the memory series follows the samples and marks the peak", "[viewer]") {
  trace::RankTrace r;
  r.memory = {{0, {10, 0, 5, 0, 0}}, {50, {10, 0, 90, 3, 0}}, {80, {10, 0, 1, 0, 0}}};
  const MemorySeries m = memory_series(r);
  CHECK(m.peak == 103);
  CHECK(m.peak_ts == 50);
  CHECK(m.total == std::vector<int64_t>{15, 103, 11});
  CHECK(m.by_category[2] == std::vector<int64_t>{5, 90, 1});
  // With phases, setup's transient does not count: the peak is the trace metrics' peak.
  r.memory.insert(r.memory.begin(), trace::MemorySample{-20, {9999, 0, 0, 0, 0}});
  r.events = {ev("forward", trace::Kind::phase, 10, 100)};
  const MemorySeries w = memory_series(r);
  CHECK(w.peak == 103);
  trace::TraceData t;
  t.ranks.push_back(r);
  CHECK(trace::compute_metrics(t).at(0).ranks.at(0).peak_memory_bytes == w.peak);
}

TEST_CASE("the headless screenshot of a hand-built trace has its pixels where the layout says", "[viewer-png]") {
  const char* png = std::getenv("RINGSIDE_VIEWER_PNG");
  const char* layout = std::getenv("RINGSIDE_VIEWER_LAYOUT");
  REQUIRE(png);
  REQUIRE(layout);
  int w = 0, h = 0, n = 0;
  unsigned char* px = stbi_load(png, &w, &h, &n, 4);
  REQUIRE(px);
  CHECK(w == 900);
  CHECK(h == 600);
  std::ifstream f(layout);
  const nlohmann::json j = nlohmann::json::parse(f);
  TimeAxis a;
  a.t0 = j["t0_ns"], a.t1 = j["t1_ns"], a.x0 = j["x0"], a.x1 = j["x1"];
  auto pixel = [&](float x, float y) {
    const unsigned char* p = px + (size_t(y) * size_t(w) + size_t(x)) * 4;
    return rgba(p[0], p[1], p[2]);
  };
  // Not blank: many colours.
  std::set<Color> colours;
  for (int y = 0; y < h; y += 3)
    for (int x = 0; x < w; x += 3) colours.insert(pixel(float(x), float(y)));
  CHECK(colours.size() > 20);
  const float comm = j["lanes"]["/GPU 0 comm"], compute = j["lanes"]["/GPU 0 compute"];
  const LayoutOptions o;
  const float comm_h = o.row * 0.75f;
  // In the trace: attention [0, 400) us, gemm [400, 600); p2p [100, 300) hidden under the
  // attention; all_reduce [700, 1000) exposed. Sample past the labels drawn at each event's left.
  CHECK(pixel(a.x_of(280e3), comm + 3) == color_of_kind(trace::Kind::p2p));
  CHECK(pixel(a.x_of(980e3), comm + 3) == color_of_kind(trace::Kind::all_reduce));
  CHECK(pixel(a.x_of(380e3), compute + o.row - 2) == color_of_kind(trace::Kind::attention));
  CHECK(pixel(a.x_of(580e3), compute + o.row - 2) == color_of_kind(trace::Kind::gemm));
  // Under the comm lane: hidden (green) under the send, exposed (red) under the all_reduce.
  CHECK(pixel(a.x_of(200e3), comm + comm_h - 2.5f) == kHiddenColor);
  CHECK(pixel(a.x_of(850e3), comm + comm_h - 2.5f) == kExposedColor);
  // Nothing drawn at 650 us in the comm lane: the background shows.
  CHECK(pixel(a.x_of(650e3), comm + 3) != color_of_kind(trace::Kind::p2p));
  stbi_image_free(px);
}

TEST_CASE("the palette keeps every kind that shares a lane apart, for normal vision and the three dichromacies", "[viewer]") {
  // The distance itself: black to white is 100 (L* 0 to 100); red and green, far apart to
  // most, nearly merge for a deuteranope (the reason for the palette).
  CHECK(color_distance(rgba(0, 0, 0), rgba(255, 255, 255)) == Approx(100).margin(0.01));
  CHECK(color_distance(rgba(230, 40, 40), rgba(60, 200, 90)) > 80);
  CHECK(color_distance(rgba(230, 40, 40), rgba(60, 200, 90), Vision::deuteranopia) < 45);
  auto pairs_apart = [](std::vector<std::pair<std::string, Color>> kinds, std::vector<Vision> visions) {
    for (Vision v : visions)
      for (size_t i = 0; i < kinds.size(); ++i)
        for (size_t j = i + 1; j < kinds.size(); ++j) {
          INFO(kinds[i].first << " against " << kinds[j].first << ", vision " << int(v));
          CHECK(color_distance(kinds[i].second, kinds[j].second, v) >= kMinColorDistance);
        }
  };
  const std::vector<Vision> all{Vision::normal, Vision::protanopia, Vision::deuteranopia, Vision::tritanopia};
  std::vector<std::pair<std::string, Color>> comm, compute, every;
  for (trace::Kind k : comm_kinds()) comm.push_back({trace::to_string(k), color_of_kind(k)});
  for (trace::Kind k : compute_kinds()) compute.push_back({trace::to_string(k), color_of_kind(k)});
  REQUIRE(comm.size() == 5);
  REQUIRE(compute.size() == 6);
  every = comm;
  every.insert(every.end(), compute.begin(), compute.end());
  for (auto* v : {&comm, &compute, &every}) v->push_back({"exposed", kExposedColor});
  comm.push_back({"hidden", kHiddenColor});
  pairs_apart(comm, all);     // a comm lane and the hidden/exposed strip beneath it
  pairs_apart(compute, all);  // a compute lane, and a summary row (compute and exposed comm)
  every.push_back({"hidden", kHiddenColor});
  pairs_apart(every, {Vision::normal});  // the whole key
}

TEST_CASE("collapsed groups: a summary row per GPU, thinner with many GPUs, one memory plot, and GPUs drilled into", "[viewer]") {
  trace::TraceData t;
  for (const char* st : {"ring", "ulysses"})
    for (int r = 0; r < 4; ++r) {
      trace::RankTrace rt;
      rt.strategy = st, rt.rank = r;
      rt.events = {ev("forward", trace::Kind::phase, 0, 100), ev("attention", trace::Kind::attention, 10, 50), ev("send", trace::Kind::p2p, 20, 30, Stream::comm)};
      rt.memory = {trace::MemorySample{0, {100, 0, r == 2 ? 500 : 50, 0, 0}}};  // GPU 2 peaks
      t.ranks.push_back(rt);
    }
  LayoutOptions o;
  const TimelineLayout full = make_layout(t, o);
  o.collapse_all = true;
  const TimelineLayout collapsed = make_layout(t, o);
  REQUIRE(collapsed.groups.size() == 2);
  const Group& g = collapsed.groups[0];
  CHECK(g.collapsed);
  REQUIRE(g.lanes.size() == 5);  // 4 summary rows and the memory plot
  for (int r = 0; r < 4; ++r) {
    const Lane& row = collapsed.lanes[g.lanes[size_t(r)]];
    CHECK(row.kind == Lane::summary);
    CHECK(row.height == Approx(o.summary));
    CHECK(t.ranks[row.process].rank == r);
  }
  const Lane& memory = collapsed.lanes[g.lanes[4]];
  CHECK(memory.kind == Lane::memory);
  CHECK(t.ranks[memory.process].rank == 2);  // the GPU of highest peak
  CHECK(memory.label == "memory, GPU 2 (peak)");
  CHECK(memory.height == Approx(o.group_memory));
  CHECK(g.height == Approx(o.collapsed_header + 4 * o.summary + o.group_memory + 1));
  CHECK(collapsed.height < full.height / 3);
  // Drilling into GPU 1 of the first group: its full lanes follow its row.
  o.expanded = {{0, 1}};
  const TimelineLayout drilled = make_layout(t, o);
  const Group& d = drilled.groups[0];
  REQUIRE(d.lanes.size() == 5 + 3);  // and GPU 1's compute, comm and memory lanes
  CHECK(drilled.lanes[d.lanes[1]].kind == Lane::summary);
  CHECK(drilled.lanes[d.lanes[2]].kind == Lane::compute);
  CHECK(drilled.lanes[d.lanes[2]].label == "GPU 1 compute");
  CHECK(drilled.lanes[d.lanes[5]].kind == Lane::summary);
  // 64 GPUs: rows of 256 / 64 = 4 px, so that the overview is one screen.
  trace::TraceData many;
  for (int r = 0; r < 64; ++r) {
    trace::RankTrace rt;
    rt.strategy = "ring", rt.rank = r;
    rt.events = {ev("forward", trace::Kind::phase, 0, 100)};
    many.ranks.push_back(rt);
  }
  o.expanded.clear();
  const TimelineLayout overview = make_layout(many, o);
  REQUIRE(overview.groups[0].lanes.size() == 64);  // and no memory plot: no GPU holds memory
  for (int r = 0; r < 64; ++r) CHECK(overview.lanes[overview.groups[0].lanes[size_t(r)]].height == Approx(4));
}

TEST_CASE("what a summary row shows: compute ops in their colours and exposed comm, idle is what neither covers", "[viewer]") {
  trace::RankTrace r;
  r.events = {ev("forward", trace::Kind::phase, 0, 1000), ev("attention", trace::Kind::attention, 0, 400), ev("matmul", trace::Kind::gemm, 400, 200),
              ev("wait", trace::Kind::wait, 600, 100), ev("send", trace::Kind::p2p, 100, 200, Stream::comm), ev("all_reduce", trace::Kind::all_reduce, 700, 300, Stream::comm)};
  const auto exposed = exposed_intervals(r);
  const auto a = activity(r, exposed);
  REQUIRE(a.size() == 3);
  CHECK((a[0].begin == 0 && a[0].end == 400 && a[0].color == color_of_kind(trace::Kind::attention)));
  CHECK((a[1].begin == 400 && a[1].end == 600 && a[1].color == color_of_kind(trace::Kind::gemm)));
  CHECK((a[2].begin == 700 && a[2].end == 1000 && a[2].color == kExposedColor));  // [600, 700): idle
}

TEST_CASE("framing: --fit fits the layer or one phase, not the setup before it, --zoom takes times with units", "[viewer]") {
  trace::TraceData t;
  trace::RankTrace r;
  r.strategy = "ring";
  r.events = {ev("setup", trace::Kind::memory, 0, 900), ev("forward", trace::Kind::phase, 1000, 400), ev("backward", trace::Kind::phase, 1400, 800)};
  t.ranks.push_back(r);
  const TimelineLayout l = make_layout(t);
  REQUIRE(l.groups.size() == 1);
  CHECK(l.groups[0].zero_ns == 1000);
  CHECK(l.groups[0].layer_end_ns == 2200);
  const auto layer = fit_window(l, t.run, "all");
  REQUIRE(layer);
  CHECK((layer->begin == 0 && layer->end == 1200));  // the layer, in group time: no setup
  const auto bwd = fit_window(l, t.run, "ring:backward");
  REQUIRE(bwd);
  CHECK((bwd->begin == 400 && bwd->end == 1200));
  CHECK(fit_window(l, t.run, "all:forward")->end == 400);
  CHECK(!fit_window(l, t.run, "ring:sideways"));
  // A group's name may hold a colon: the whole name first, then WHAT:PHASE.
  trace::TraceData colon = t;
  colon.ranks[0].strategy = "x:forward";
  const TimelineLayout lc = make_layout(colon);
  CHECK(split_fit(lc, colon.run, "x:forward") == std::make_pair(std::string("x:forward"), std::string()));
  CHECK(split_fit(lc, colon.run, "x:forward:backward") == std::make_pair(std::string("x:forward"), std::string("backward")));
  CHECK(fit_window(lc, colon.run, "x:forward")->end == 1200);
  CHECK(!fit_window(l, t.run, "ulysses"));
  CHECK((parse_zoom("0,150us").begin == 0 && parse_zoom("0,150us").end == 150'000));
  CHECK((parse_zoom("1ms,2.5ms").begin == 1'000'000 && parse_zoom("1ms,2.5ms").end == 2'500'000));
  CHECK(parse_zoom("0.001,0.002").end == 2'000'000);  // seconds, as --at
  CHECK(parse_zoom("-5us,10ns").begin == -5000);
  for (const char* bad : {"5", "2,1", "1xs,2", ",", "1,1", "nan,2", "0,1e300", "0x10,0x20", " 1,2", "1e-400,1", "1,2,3"}) {
    INFO(bad);
    CHECK_THROWS_AS(parse_zoom(bad), ConfigError);
  }
}

TEST_CASE("a lesson step's window of one group is the same part of every other group's run, on its own clock", "[viewer]") {
  // Issue 42: a measured run (ms on a CPU) and its modeled twin (us on a GPU). A step about the
  // run's forward ring step 1 frames the twin's forward ring step 1, never the run's clock.
  trace::TraceData t = model::with_modeled_twin(ring_trace(2, Layout::zigzag), model::load_hardware("a100-nvlink"));
  const TimelineLayout layout = make_layout(t);
  REQUIRE(layout.groups.size() == 2);
  const Group &run = layout.groups[0], &twin = layout.groups[1];
  REQUIRE(twin.strategy == "ring (modeled, a100-nvlink)");
  const Landmarks from = landmarks(t, run), to = landmarks(t, twin);
  REQUIRE(from.count("forward/step 1"));
  REQUIRE(from.count("forward/attention"));
  const trace::Interval step1 = from.at("forward/step 1"), twin_step1 = to.at("forward/step 1");
  const Correspondence c = corresponding_window(from, step1, to);
  CHECK(c.landmark == "forward/step 1");
  CHECK(c.window.begin == twin_step1.begin);
  CHECK(c.window.end == twin_step1.end);
  CHECK(landmark_words(c.landmark) == "forward ring step 1");
  // The window holds twin events: what the twin's rows draw is never empty.
  size_t inside = 0;
  for (size_t p : twin.processes)
    for (const Event& e : t.ranks[p].events) inside += e.stream == Stream::compute && e.ts_ns < c.window.end && e.end_ns() > c.window.begin;
  CHECK(inside > 0);
  // Part of a landmark maps to the same part: the run's forward from its attention sublayer on
  // (which no sublayer holds whole, whatever the measured times: the second half alone could lie
  // inside a slow MLP) is the same fraction of the twin's forward.
  const trace::Interval fwd = from.at("forward"), twin_fwd = to.at("forward");
  const trace::Interval tail{from.at("forward/attention").begin, fwd.end};
  const Correspondence h = corresponding_window(from, tail, to);
  CHECK(h.landmark == "forward");
  const double fraction = double(tail.begin - fwd.begin) / double(fwd.end - fwd.begin);
  CHECK(double(h.window.begin) == Approx(double(twin_fwd.begin) + fraction * double(twin_fwd.end - twin_fwd.begin)).margin(1));
  CHECK(h.window.end == twin_fwd.end);
  // A group without ring steps or phases in common: its whole run, in proportion.
  trace::TraceData other;
  trace::RankTrace r;
  r.strategy = "foreign";
  r.events = {ev("a", trace::Kind::gemm, 100, 100), ev("b", trace::Kind::gemm, 200, 100)};
  other.ranks.push_back(r);
  const Landmarks bare = landmarks(other, make_layout(other).groups[0]);
  const Correspondence w = corresponding_window(from, step1, bare);
  CHECK(w.landmark == "all");
  CHECK(w.window.begin >= 100);
  CHECK(w.window.end <= 300);
  CHECK(w.window.end > w.window.begin);
  CHECK(landmark_words("all") == "whole run");
  CHECK(landmark_words("backward/attention") == "backward attention");
}

TEST_CASE("ring step labels are never dropped: lettered, else numbered, else one for the phase, never overlapping", "[viewer]") {
  std::vector<StepMark> marks;
  for (int s = 0; s < 4; ++s) {
    marks.push_back({"ring", "forward", s, s * 100, s * 100 + 100});
    marks.push_back({"ring", "backward", s, 1000 + s * 100, 1000 + s * 100 + 100});
  }
  auto strip_at = [&](float px_per_step) {
    TimeAxis a;
    a.t0 = 0, a.t1 = 2000, a.x0 = 0, a.x1 = px_per_step * 20;
    return step_strip(marks, a, 7);
  };
  auto texts = [](const StepStrip& s) {
    std::vector<std::string> v;
    for (const StepLabel& l : s.labels) v.push_back(l.text);
    return v;
  };
  auto apart = [](const StepStrip& s) {
    for (size_t i = 0; i + 1 < s.labels.size(); ++i) CHECK(s.labels[i].x1 <= s.labels[i + 1].x0);
  };
  const StepStrip wide = strip_at(40);  // 40 px a step: "F0" is 18 px
  CHECK(wide.bands.size() == 8);
  CHECK(texts(wide) == std::vector<std::string>{"F0", "F1", "F2", "F3", "B0", "B1", "B2", "B3"});
  apart(wide);
  const StepStrip narrow = strip_at(14);  // "F0" no longer fits, "0" (11 px) does
  CHECK(texts(narrow) == std::vector<std::string>{"0", "1", "2", "3", "0", "1", "2", "3"});
  apart(narrow);
  const StepStrip tiny = strip_at(4);
  CHECK(texts(tiny) == std::vector<std::string>{"F0-F3 (4 steps)", "B0-B3 (4 steps)"});
  apart(tiny);
  CHECK(tiny.bands.size() == 8);  // the bands are drawn all the same
  // The forward's last step ends where the backward's first begins: its label must end there too
  // (a 2-rank ring's twin drew F1 over B0).
  const std::vector<StepMark> touching{{"ring", "forward", 0, 0, 100}, {"ring", "forward", 1, 100, 110},
                                       {"ring", "backward", 0, 110, 300}, {"ring", "backward", 1, 300, 400}};
  TimeAxis a;
  a.t0 = 0, a.t1 = 400, a.x0 = 0, a.x1 = 400;  // 1 px a ns: F1's band is 10 px, "F1" 16
  const StepStrip t = step_strip(touching, a, 7);
  CHECK(texts(t) == std::vector<std::string>{"0", "1", "B0", "B1"});
  apart(t);
}

TEST_CASE("many GPUs: the stats give the least, median and greatest, and the outliers by Tukey's fences", "[viewer]") {
  std::vector<double> comm;
  std::vector<int> ranks;
  for (int r = 0; r < 64; ++r) {
    ranks.push_back(r);
    comm.push_back(r % 8 == 0 || r % 8 == 7 ? 66.5 : 17.0 + 0.01 * (r % 3));  // the node-boundary ranks wait on InfiniBand
  }
  const Spread s = spread(comm, ranks);
  CHECK(s.max == 66.5);
  CHECK(s.max_rank == 0);
  CHECK(s.min == 17.0);
  CHECK(s.median == Approx(17.01).margin(0.01));
  const std::vector<int> out = outlier_ranks(comm, ranks);
  REQUIRE(out.size() == 16);
  for (int r : out) CHECK((r % 8 == 0 || r % 8 == 7));
  CHECK(outlier_ranks(std::vector<double>(64, 5.0), ranks).empty());
  std::vector<double> near(64, 100.0);
  near[5] = 103;  // 3% off the median: within the 5% floor, no outlier
  CHECK(outlier_ranks(near, ranks).empty());
}

// ---- PyTorch profiler (Kineto) runs: tests/fixtures/kineto, whose README says what each holds.

namespace {

std::string kineto_fixture(const char* name) { return std::string(RINGSIDE_SOURCE_DIR "/tests/fixtures/kineto/") + name; }

// A lane's events, in start order, never overlap.
bool lane_events_apart(const trace::RankTrace& r, const Lane& lane) {
  for (size_t k = 1; k < lane.events.size(); ++k)
    if (r.events[lane.events[k]].ts_ns < r.events[lane.events[k - 1]].end_ns()) return false;
  return true;
}

}  // namespace

TEST_CASE("a PyTorch profiler run's folder: one row per rank, its ring steps, a flow per send, comm lanes apart", "[viewer]") {
  // ring4 (its README): N = 4 ranks, each posting, per ring step of the forward but the last, a
  // batch of 2 sends and 2 receives (N - 1 rounds of posts), and in the backward the K/V batch
  // in every step but the last and the dK/dV batch after every step's compute, both inside the
  // step's ring_bwd_step_i range, which makes them one step (N). A round of posts is a ring
  // step. Sends per rank: (N-1)*2 + (N-1)*2 + N*2 = 20.
  constexpr int N = 4;
  const int forward_steps = N - 1, backward_steps = N, sends = (N - 1) * 2 + (N - 1) * 2 + N * 2;
  // A folder, with or without its slash; its ranks on their one clock, or shifted to line up
  // their all-reduce's ends (by up to 1.7 ms): the same steps either way.
  for (const auto& [path, align] : {std::pair{kineto_fixture("ring4"), trace::ClockAlign::automatic},
                                    std::pair{kineto_fixture("ring4") + "/", trace::ClockAlign::automatic},
                                    std::pair{kineto_fixture("ring4"), trace::ClockAlign::collectives}}) {
    INFO(path << (align == trace::ClockAlign::collectives ? ", --align collectives" : ""));
    const trace::TraceData t = trace::read_trace(path, align);
    REQUIRE(from_profiler(t.run));
    const TimelineLayout l = make_layout(t);
    REQUIRE(l.groups.size() == 1);
    const Group& g = l.groups[0];
    REQUIRE(g.processes.size() == size_t(N));
    CHECK(g.ring_steps);
    size_t all_sends = 0;
    for (int r = 0; r < N; ++r) {
      INFO("rank " << r);
      const trace::RankTrace& rt = t.ranks[g.processes[size_t(r)]];
      CHECK(rt.rank == r);  // rank order
      std::map<std::string, int> steps;
      for (const Event& e : rt.events) {
        if (e.kind == trace::Kind::ring_step) ++steps[e.phase];
        all_sends += e.stream == Stream::comm && e.direction == trace::Direction::send;
      }
      CHECK(steps["forward"] == forward_steps);
      CHECK(steps["backward"] == backward_steps);
      // Its lanes: "rank r compute", comm lanes, "rank r allocated (PyTorch)".
      std::vector<const Lane*> comm;
      const Lane* memory = nullptr;
      for (size_t li : g.lanes) {
        const Lane& lane = l.lanes[li];
        if (lane.process != g.processes[size_t(r)]) continue;
        if (lane.kind == Lane::comm) comm.push_back(&lane);
        if (lane.kind == Lane::memory) memory = &lane;
      }
      REQUIRE(memory);
      CHECK(memory->label == "rank " + std::to_string(r) + " allocated (PyTorch)");
      // The gloo Work spans overlap each other partially, on one stream: each in a lane where
      // nothing else is, so that several lanes.
      CHECK(comm.size() >= 2);
      for (const Lane* c : comm) CHECK(lane_events_apart(rt, *c));
      CHECK(!exposed_intervals(rt).empty());
      CHECK(memory_series(rt).peak > 0);
    }
    CHECK(all_sends == size_t(N * sends));
    CHECK(t.flows.size() == size_t(N * sends));  // a flow from each send to its receive
    // Every rank's steps, forward then backward, one mark each.
    const std::vector<StepMark> marks = step_marks(t);
    CHECK(marks.size() == size_t(forward_steps + backward_steps));
    // What it says it is: the user's own job, measured by the PyTorch profiler, on one clock.
    CHECK(group_tag(t.run, g.strategy) == "MEASURED on CPU, gloo (PyTorch profiler)");
    CHECK(trace_tag(t.run) == "(measured by the PyTorch profiler)");
    CHECK(row_name(t.run, 2) == "rank 2");
    if (align == trace::ClockAlign::automatic) CHECK(clock_words(t) == "clocks: one host (vm), one clock: not shifted");
    // Its memory is one series, and no ringside configuration: no tile map.
    CHECK(memory_categories(t).size() == 1);
    CHECK(!tile_map(t, g.strategy));
  }
}

TEST_CASE("a PyTorch profiler run on two hosts is aligned by its collective's end, or not, as --align says", "[viewer]") {
  // gpu2 (its README): rank 1's clock runs 1234.567 us ahead of rank 0's, and the all-reduce ends
  // at one true instant on both.
  const trace::TraceData t = trace::read_trace(kineto_fixture("gpu2"));
  REQUIRE(t.ranks.size() == 2);
  CHECK(t.ranks[0].clock_offset_ns == 0);
  CHECK(t.ranks[1].clock_offset_ns == -1234567);
  auto all_reduce_end = [](const trace::RankTrace& r) {
    for (const Event& e : r.events)
      if (e.kind == trace::Kind::all_reduce && e.stream == Stream::comm) return e.end_ns();
    return int64_t(-1);
  };
  CHECK(all_reduce_end(t.ranks[0]) == all_reduce_end(t.ranks[1]));
  CHECK(all_reduce_end(t.ranks[0]) > 0);
  CHECK(group_tag(t.run, t.ranks[0].strategy) == "MEASURED on CUDA, nccl (PyTorch profiler)");
  const std::string clocks = clock_words(t);
  CHECK(clocks.starts_with("clocks: aligned by the ends of 1 collective"));
  CHECK(clocks.find("; rank 1 shifted by -1234.567 us (uncertainty unknown: one collective)") != std::string::npos);
  const TimelineLayout l = make_layout(t);
  REQUIRE(l.groups.size() == 1);
  CHECK(l.groups[0].processes.size() == 2);
  // Each rank's ring steps were found on its own clock and moved with it: inside its rank's step
  // window, as many on each rank.
  std::vector<std::map<std::string, int>> steps_of;
  for (const trace::RankTrace& r : t.ranks) {
    INFO("rank " << r.rank);
    const auto window = trace::phase_window(r);
    REQUIRE(window);
    std::map<std::string, int> steps;
    for (const Event& e : r.events)
      if (e.kind == trace::Kind::ring_step) {
        ++steps[e.phase];
        CHECK(e.ts_ns >= window->begin);
        CHECK(e.end_ns() <= window->end);
      }
    CHECK(steps["forward"] == 1);  // the forward's one round of posts: K/V
    steps_of.push_back(steps);
  }
  CHECK(steps_of[0] == steps_of[1]);
  // --align none: each file's own clock, rank 1 1234.567 us late.
  const trace::TraceData raw = trace::read_trace(kineto_fixture("gpu2"), trace::ClockAlign::none);
  CHECK(raw.ranks[1].clock_offset_ns == 0);
  CHECK(all_reduce_end(raw.ranks[1]) - all_reduce_end(raw.ranks[0]) == 1234567);
}


namespace {

// A headless screenshot and its --layout-json, as CTest made them (the env vars name them).
struct Shot {
  int w = 0, h = 0;
  std::vector<unsigned char> px;
  nlohmann::json layout;
  Color at(float x, float y) const {
    const unsigned char* p = px.data() + (size_t(y) * size_t(w) + size_t(x)) * 4;
    return rgba(p[0], p[1], p[2]);
  }
  // Pixels of a lane's rows y .. y + 3 between the axis' ends in an event kind's colour, in the
  // row with most (a row's edges are blended where it starts between pixels).
  size_t event_pixels(float y) const {
    size_t most = 0;
    for (int dy = 0; dy < 4; ++dy) most = std::max(most, event_pixels_in_row(y + float(dy)));
    return most;
  }
  size_t event_pixels_in_row(float y) const {
    std::set<Color> kinds{kExposedColor};
    for (trace::Kind k : compute_kinds()) kinds.insert(color_of_kind(k));
    for (trace::Kind k : comm_kinds()) kinds.insert(color_of_kind(k));
    size_t n = 0;
    for (float x = layout["x0"].get<float>(); x < layout["x1"].get<float>(); x += 1) n += kinds.count(at(x, y));
    return n;
  }
};
Shot shot(const char* png_var, const char* layout_var) {
  const char* png = std::getenv(png_var);
  const char* layout = std::getenv(layout_var);
  REQUIRE(png);
  REQUIRE(layout);
  Shot s;
  int n = 0;
  unsigned char* px = stbi_load(png, &s.w, &s.h, &n, 4);
  REQUIRE(px);
  s.px.assign(px, px + size_t(s.w) * size_t(s.h) * 4);
  stbi_image_free(px);
  std::ifstream f(layout);
  s.layout = nlohmann::json::parse(f);
  return s;
}

}  // namespace

TEST_CASE("the default screenshot of the demo's trace has every group on screen, its events drawn, its ring steps labelled", "[viewer-demo]") {
  const Shot s = shot("RINGSIDE_DEMO_PNG", "RINGSIDE_DEMO_LAYOUT");
  CHECK(s.w == 1600);  // the viewer's default size
  CHECK(s.h == 1000);
  const nlohmann::json& groups = s.layout["groups"];
  REQUIRE(groups.size() == 12);  // six strategies, each measured and modeled
  for (const auto& g : groups) {
    const std::string name = g["name"];
    INFO(name);
    CHECK(g["y0"].get<float>() >= 0);
    CHECK(g["y1"].get<float>() <= float(s.h));
    // Its GPUs' rows show its events.
    size_t drawn = 0;
    for (int r = 0; r < 4; ++r) {
      const auto lane = s.layout["lanes"].find(name + "/GPU " + std::to_string(r));
      REQUIRE(lane != s.layout["lanes"].end());
      drawn += s.event_pixels(lane->get<float>());
    }
    CHECK(drawn > 100);
  }
  // Ring steps, labelled, none over another. The modeled ring's times are the same on every
  // machine: four forward and four backward labels, each in its band and inside the view,
  // lettered (F0..F3) or, where the bands are narrow, numbered (0..3). The measured ring's bands
  // are as wide as this CPU's steps took, which varies with load (issue 36: under ctest -j2 some
  // became too narrow and the phase's labels merged, as designed), so of it only what no load
  // changes is checked: each phase labelled, step by step or as one "F0-F3 (4 steps)".
  std::map<std::string, std::vector<nlohmann::json>> labels;
  for (const auto& l : s.layout["step_labels"]) labels[l["group"]].push_back(l);
  for (const char* ring : {"ring", "ring (modeled, a100-nvlink)"}) {
    INFO(ring);
    const auto& ls = labels[ring];
    for (size_t i = 0; i + 1 < ls.size(); ++i) CHECK(ls[i]["x1"].get<float>() <= ls[i + 1]["x0"].get<float>());
    std::vector<std::string> texts;
    for (const auto& l : ls) texts.push_back(l["text"]);
    if (std::string(ring) == "ring") {
      // Each phase's labels: lettered, numbered, or one for the phase.
      auto ways = [](const std::string& letter) {
        return std::vector<std::vector<std::string>>{
            {letter + "0", letter + "1", letter + "2", letter + "3"}, {"0", "1", "2", "3"}, {letter + "0-" + letter + "3 (4 steps)"}};
      };
      bool one_of_them = false;
      for (const auto& forward : ways("F"))
        for (const auto& backward : ways("B")) {
          std::vector<std::string> both = forward;
          both.insert(both.end(), backward.begin(), backward.end());
          one_of_them = one_of_them || both == texts;
        }
      CHECK(one_of_them);
      continue;
    }
    REQUIRE(ls.size() == 8);
    for (const auto& l : ls) CHECK((l["x0"].get<float>() >= s.layout["x0"].get<float>() && l["x1"].get<float>() <= s.layout["x1"].get<float>()));
    for (size_t i = 0; i < 8; ++i) {
      const std::string step = std::to_string(i % 4);
      INFO(texts[i]);
      CHECK((texts[i] == step || texts[i] == (i < 4 ? "F" : "B") + step));
    }
  }
}

TEST_CASE("a collapsed group's exposed-comm gauges are a column of their own, apart from the timeline and its colours", "[viewer-gauge]") {
  // gauge.json: GPU 0 exposes 300 us of communication, GPU 1 100 us. Issue 42: the bars were
  // drawn in the exposed-comm colour against the time axis, and read as timeline events.
  const Shot s = shot("RINGSIDE_GAUGE_PNG", "RINGSIDE_GAUGE_LAYOUT");
  const float axis_x0 = s.layout["x0"];
  const nlohmann::json& column = s.layout["gauge_column"];
  CHECK(column["heading"] == "exposed");
  CHECK(column["x1"].get<float>() <= axis_x0 - 4);  // a gap, and a rule in it, before the time axis
  std::map<std::string, nlohmann::json> gauges;
  for (const auto& g : s.layout["gauges"]) gauges[g["lane"]] = g;
  REQUIRE(gauges.size() == 2);
  const nlohmann::json &g0 = gauges.at("/GPU 0"), &g1 = gauges.at("/GPU 1");
  CHECK(g0["exposed_ns"] == 300'000);
  CHECK(g1["exposed_ns"] == 100'000);
  for (const nlohmann::json* g : {&g0, &g1}) {
    CHECK((*g)["x0"].get<float>() == column["x0"].get<float>());
    CHECK((*g)["x1"].get<float>() == column["x1"].get<float>());
  }
  // The most fills the cell; a third of it, a third.
  const float x0 = g0["x0"], x1 = g0["x1"], width = x1 - x0;
  CHECK(g0["fill_x1"].get<float>() == Approx(x1));
  CHECK(g1["fill_x1"].get<float>() - x0 == Approx(width / 3).margin(0.5));
  // The pixels: filled, then the empty track, in greys of their own (the value, right-aligned,
  // ends 2 px before the cell's edge).
  CHECK(s.at(x0 + 2, (g0["y0"].get<float>() + g0["y1"].get<float>()) / 2) == kGaugeFill);
  CHECK(s.at(x0 + 2, (g1["y0"].get<float>() + g1["y1"].get<float>()) / 2) == kGaugeFill);
  CHECK(s.at(x1 - 1, (g1["y0"].get<float>() + g1["y1"].get<float>()) / 2) == kGaugeTrack);
  // Left of the time axis no pixel of a summary row is in an event's colour or the exposed colour
  // (but the waits' grey, which the edges of the labels' grey text may hit).
  std::set<Color> timeline{kExposedColor, kHiddenColor};
  for (trace::Kind k : compute_kinds())
    if (k != trace::Kind::wait) timeline.insert(color_of_kind(k));
  for (trace::Kind k : comm_kinds()) timeline.insert(color_of_kind(k));
  for (const nlohmann::json* g : {&g0, &g1})
    for (float y = (*g)["y0"].get<float>(); y < (*g)["y1"].get<float>(); y += 1)
      for (float x = 0; x < axis_x0; x += 1) {
        INFO("pixel " << x << ", " << y);
        REQUIRE(timeline.count(s.at(x, y)) == 0);
      }
  // The rows themselves still draw the timeline: attention, and GPU 0's exposed comm.
  const float row0 = s.layout["lanes"]["/GPU 0"];
  CHECK(s.event_pixels(row0) > 100);
}

TEST_CASE("a lesson step: every group on screen draws its own part of the step, and lesson 4's packed step its packed maps", "[viewer-lesson]") {
  // Issue 42: a step about a measured run framed its window on the measured clock, and the
  // modeled twins (a thousand times faster) drew empty rows.
  for (const auto& [png, json] : {std::pair{"RINGSIDE_LESSON3_PNG", "RINGSIDE_LESSON3_LAYOUT"}, std::pair{"RINGSIDE_LESSON4_PNG", "RINGSIDE_LESSON4_LAYOUT"}}) {
    INFO(png);
    const Shot s = shot(png, json);
    const float top = s.layout["timeline"]["y0"], bottom = s.layout["timeline"]["y1"];
    size_t on_screen = 0, twins = 0;
    for (const auto& g : s.layout["groups"]) {
      const std::string name = g["name"];
      INFO(name);
      CHECK(g["t1_ns"].get<double>() > g["t0_ns"].get<double>());
      // Its first GPU row, when on screen, shows events.
      const auto lane = s.layout["lanes"].find(name + "/GPU 0");
      REQUIRE(lane != s.layout["lanes"].end());
      const float y = lane->get<float>();
      if (y < top + 2 || y + 4 > bottom - 2) continue;
      ++on_screen;
      twins += name.find("(modeled") != std::string::npos;
      CHECK(s.event_pixels(y) > 20);
    }
    CHECK(on_screen >= 4);
    CHECK(twins >= 2);
  }
  // Lesson 4 step 6 is about the packed runs: the map of its run comes first, built from the
  // run's own configuration (its documents), not the first run's.
  const Shot s = shot("RINGSIDE_LESSON4_PNG", "RINGSIDE_LESSON4_LAYOUT");
  const nlohmann::json& maps = s.layout["tile_maps"];
  REQUIRE(!maps.empty());
  CHECK(maps[0]["group"] == "ring packed greedy");
  CHECK(maps[0]["layout"] == "greedy");
  CHECK(maps[0]["docs"] == nlohmann::json{300, 20, 130, 60});
  for (const auto& m : maps)
    if (m["group"].get<std::string>().starts_with("ring packed")) CHECK(m["docs"].size() == 4);
    else CHECK(m["docs"].empty());
  // The twin of the step's run shows its own forward phase, as its header says.
  for (const auto& g : s.layout["groups"])
    if (g["name"] == "ring packed greedy (modeled, a100-nvlink)") CHECK(g["frame"] == "forward");
}

TEST_CASE("the 64-rank model trace opens as an overview: one row per rank, each showing what its rank does", "[viewer-overview]") {
  const Shot s = shot("RINGSIDE_OVERVIEW_PNG", "RINGSIDE_OVERVIEW_LAYOUT");
  REQUIRE(s.layout["groups"].size() == 1);
  CHECK(s.layout["groups"][0]["collapsed"] == true);
  float last = -1;
  for (int r = 0; r < 64; ++r) {
    INFO("GPU " << r);
    const auto lane = s.layout["lanes"].find("ring/GPU " + std::to_string(r));
    REQUIRE(lane != s.layout["lanes"].end());
    const float y = lane->get<float>();
    CHECK(y > last);  // rank order, one row each
    CHECK(y + 2 <= float(s.h));
    CHECK(s.event_pixels(y) > 100);
    last = y;
  }
}

TEST_CASE("the plan's trace shows the winner above the runner-up, both modeled, both on screen", "[viewer-plan]") {
  const Shot s = shot("RINGSIDE_PLAN_PNG", "RINGSIDE_PLAN_LAYOUT");
  REQUIRE(s.layout["groups"].size() == 2);
  const nlohmann::json& winner = s.layout["groups"][0];
  const nlohmann::json& runner_up = s.layout["groups"][1];
  CHECK(winner["name"].get<std::string>().starts_with("winner tp4xring4 zigzag none (modeled, h100-nvlink)"));
  CHECK(runner_up["name"].get<std::string>().starts_with("runner-up "));
  CHECK(winner["y1"].get<float>() <= runner_up["y0"].get<float>());
  CHECK(runner_up["y1"].get<float>() <= float(s.h));
  // Each group's first GPU row draws its events.
  for (const char* group : {"winner tp4xring4 zigzag none (modeled, h100-nvlink)", "runner-up tp2xulysses2xring4 zigzag none (modeled, h100-nvlink)"}) {
    INFO(group);
    const auto lane = s.layout["lanes"].find(std::string(group) + "/GPU 0");
    REQUIRE(lane != s.layout["lanes"].end());
    CHECK(s.event_pixels(lane->get<float>()) > 100);
  }
}

namespace {

// Whether a screenshot's ring step labels are `forward` and `backward` steps, each phase's
// labelled F0.., or 0.., or once ("F0-F2 (3 steps)").
bool labels_are_steps(const Shot& s, int forward, int backward) {
  std::vector<std::string> texts;
  for (const auto& l : s.layout["step_labels"]) texts.push_back(l["text"]);
  auto ways = [](const std::string& letter, int n) {
    std::vector<std::string> lettered, numbered;
    for (int i = 0; i < n; ++i) lettered.push_back(letter + std::to_string(i)), numbered.push_back(std::to_string(i));
    return std::vector<std::vector<std::string>>{lettered, numbered, {letter + "0-" + letter + std::to_string(n - 1) + " (" + std::to_string(n) + " steps)"}};
  };
  for (const auto& f : ways("F", forward))
    for (const auto& b : ways("B", backward)) {
      std::vector<std::string> both = f;
      both.insert(both.end(), b.begin(), b.end());
      if (both == texts) return true;
    }
  UNSCOPED_INFO("step labels: " << nlohmann::json(texts).dump());
  return false;
}

}  // namespace

TEST_CASE("a PyTorch profiler run's folder opens as one row per rank, each with its exposed comm, its memory and ring steps drawn", "[viewer-kineto]") {
  const trace::TraceData run = trace::read_trace(kineto_fixture("ring4"));
  const std::vector<int> held = memory_categories(run);
  REQUIRE(held.size() == 1);
  auto pixels = [](const Shot& s, Color c, float y) {
    size_t n = 0;
    for (float x = s.layout["x0"].get<float>(); x < s.layout["x1"].get<float>(); x += 1) n += s.at(x, y) == c;
    return n;
  };
  // The default view: its four ranks' lanes in full do not fit 1000 px, so collapsed, one row
  // per rank, and the rows taller than the default 11 px, since there is room.
  const Shot s = shot("RINGSIDE_KINETO_PNG", "RINGSIDE_KINETO_LAYOUT");
  CHECK(s.w == 1600);
  CHECK(s.h == 1000);
  REQUIRE(s.layout["groups"].size() == 1);
  const nlohmann::json& g = s.layout["groups"][0];
  CHECK(g["name"] == "pytorch");
  CHECK(g["collapsed"] == true);
  CHECK(g["tag"] == "MEASURED on CPU, gloo (PyTorch profiler)");
  CHECK(g["extent"].get<std::string>().starts_with("4 ranks, "));
  REQUIRE(s.layout["traces"].size() == 1);
  CHECK(s.layout["traces"][0]["name"] == "ring4/");
  CHECK(s.layout["traces"][0]["clock"] == "clocks: one host (vm), one clock: not shifted");
  float last = -1;
  for (int r = 0; r < 4; ++r) {
    INFO("rank " << r);
    const auto lane = s.layout["lanes"].find("pytorch/rank " + std::to_string(r));
    REQUIRE(lane != s.layout["lanes"].end());
    const float y = lane->get<float>();
    CHECK(y > last + 11);  // rank order, each row taller than the default
    CHECK(y + 11 <= s.layout["timeline"]["y1"].get<float>());
    // Its exposed communication (the gloo waits, the all-reduce): most of its time.
    CHECK(pixels(s, kExposedColor, y + 5) > 150);
    last = y;
  }
  // The memory plot: the allocator's total, labelled so, drawn in its series' colour.
  std::optional<float> memory;
  const nlohmann::json& lanes = s.layout["lanes"];
  for (auto it = lanes.begin(); it != lanes.end(); ++it)
    if (it.key().starts_with("pytorch/allocated (PyTorch), rank ")) memory = it.value().get<float>();
  REQUIRE(memory);
  CHECK(*memory > last);
  size_t drawn = 0;
  for (float y = *memory; y < g["y1"].get<float>(); y += 1) drawn += pixels(s, memory_color(held.front()), y);
  CHECK(drawn > 5000);
  // Ring steps: 3 in the forward, 4 in the backward (the unit test above says why), labelled.
  CHECK(labels_are_steps(s, 3, 4));

  // In full, with --align collectives (ring4's ranks shifted by up to 1.7 ms: the same ring
  // steps, labelled alike): each rank's comm lanes (the gloo spans overlap), and under
  // the first its exposed communication.
  const Shot f = shot("RINGSIDE_KINETO_FULL_PNG", "RINGSIDE_KINETO_FULL_LAYOUT");
  CHECK(f.layout["groups"][0]["collapsed"] == false);
  CHECK(f.layout["traces"][0]["clock"].get<std::string>().starts_with("clocks: aligned by the ends of 1 collective"));
  CHECK(labels_are_steps(f, 3, 4));
  const float top = f.layout["timeline"]["y0"], bottom = f.layout["timeline"]["y1"];
  size_t shown = 0;
  for (int r = 0; r < 4; ++r) {
    INFO("rank " << r);
    const std::string rank = "pytorch/rank " + std::to_string(r);
    CHECK(f.layout["lanes"].contains(rank + " compute"));
    CHECK(f.layout["lanes"].contains(rank + " comm 2"));
    CHECK(f.layout["lanes"].contains(rank + " allocated (PyTorch)"));
    const float comm = f.layout["lanes"][rank + " comm"];
    const float strip = comm + LayoutOptions{}.row * 0.75f - 2.5f;
    if (strip < top + 2 || strip > bottom - 2) continue;
    ++shown;
    CHECK(pixels(f, kExposedColor, strip) > 100);
  }
  CHECK(shown >= 3);
}

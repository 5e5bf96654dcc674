// The Kineto reader (trace/kineto.h): PyTorch profiler traces read into ringside's timeline.
// The fixtures' per-rank metrics are held to an independent Python computation by a CTest
// (tests/check_kineto_metrics.py); here: hand-built files whose metrics are worked out by
// hand, the fixtures' facts (ranks, bytes, peers, flows, steps), clock alignment recovering a
// known skew, and hostile files, each one clear error.
#include <catch2/catch.hpp>

#include <filesystem>
#include <fstream>
#include <functional>
#include <map>

#include "core/error.h"
#include "core/text_file.h"
#include "trace/kineto.h"
#include "trace/metrics.h"

using namespace ringside;
using namespace ringside::trace;
using nlohmann::json;

namespace {

std::string fixture(const std::string& name) { return std::string(RINGSIDE_SOURCE_DIR "/tests/fixtures/kineto/") + name; }

// A Kineto X event.
json x(const std::string& name, const std::string& cat, double ts, double dur, json args = json::object(), int pid = 100,
       int tid = 100) {
  return {{"ph", "X"}, {"cat", cat}, {"name", name}, {"pid", pid}, {"tid", tid}, {"ts", ts}, {"dur", dur}, {"args", args}};
}

// One rank of a two-rank ring by hand (us): a ProfilerStep [0, 100); "forward" [0, 60) and
// "backward" [60, 100); a matmul [10, 40) and a softmax [70, 90); in the forward a send and a
// receive of 1024 floats (pid 100 + rank) posted at 5, their Work spans [6, 50) and [7, 30); in the backward an
// all_reduce of 256 floats on another thread [80, 95) and another send/receive pair.
json rank_doc(int rank, int world = 2, int pid = -1, int peer = -1, int from = -1) {
  if (pid < 0) pid = 100 + rank;
  if (peer < 0) peer = (rank + 1) % world;
  if (from < 0) from = (rank + world - 1) % world;
  auto c10d = [&](const char* name, int p, int id) {
    return x(name, "cpu_op", 5 + 0.1 * id, 0.5,
             {{"External id", id}, {"Concrete Inputs", {"", "", std::to_string(p), "0"}},
              {"Input type", {"TensorList", "", "Scalar", "Scalar"}}, {"Input Dims", {{{4, 256}}, json::array(), json::array(), json::array()}}},
             pid, pid);
  };
  auto work = [&](const char* name, double ts, double dur, int id, std::vector<int> dims = {4, 256}) {
    return x(name, "user_annotation", ts, dur, {{"External id", id}, {"Input type", {"float"}}, {"Input Dims", {dims}}}, pid, pid);
  };
  json events = json::array({
      x("ProfilerStep#1", "user_annotation", 0, 100, {{"External id", 1}}, pid, pid),
      x("forward", "user_annotation", 0, 60, {{"External id", 2}}, pid, pid),
      x("backward", "user_annotation", 60, 40, {{"External id", 3}}, pid, pid),
      x("aten::matmul", "cpu_op", 10, 30, {{"External id", 4}}, pid, pid),
      x("aten::mm", "cpu_op", 11, 28, {{"External id", 5}}, pid, pid),
      c10d("c10d::send", peer, 10), work("gloo:send", 6, 44, 11),
      c10d("c10d::recv_", from, 12), work("gloo:recv", 7, 23, 13),
      x("aten::softmax", "cpu_op", 70, 20, {{"External id", 20}}, pid, pid),
      x("c10d::send", "cpu_op", 61, 1, {{"External id", 30}, {"Concrete Inputs", {"", "", std::to_string(peer), "0"}}}, pid, pid),
      work("gloo:send", 61.5, 10, 31),
      x("c10d::recv_", "cpu_op", 62, 1, {{"External id", 32}, {"Concrete Inputs", {"", "", std::to_string(from), "0"}}}, pid, pid),
      work("gloo:recv", 62.5, 12, 33),
      x("c10d::allreduce_", "cpu_op", 78, 1, {{"External id", 40}}, pid, pid),
      work("gloo:all_reduce", 80, 15, 900, {256}),
      {{"ph", "i"}, {"s", "t"}, {"cat", "cpu_instant_event"}, {"name", "[memory]"}, {"pid", pid}, {"tid", pid}, {"ts", 12.0},
       {"args", {{"Total Allocated", 4096}, {"Bytes", 4096}, {"Device Type", 0}}}},
      {{"ph", "M"}, {"name", "process_name"}, {"pid", pid}, {"tid", 0}, {"args", {{"name", "python"}}}},
      {{"ph", "X"}, {"cat", "Trace"}, {"name", "PyTorch Profiler (0)"}, {"pid", "Spans"}, {"tid", "PyTorch Profiler"}, {"ts", -5.0}, {"dur", 200.0}},
  });
  events[15]["tid"] = pid + 1;  // the all_reduce runs on gloo's own thread
  return {{"schemaVersion", 1},
          {"distributedInfo", {{"backend", "gloo"}, {"rank", rank}, {"world_size", world}}},
          {"baseTimeNanoseconds", 1000000},
          {"host_name", "vm"},
          {"traceEvents", events}};
}

TraceData read_docs(const std::vector<json>& docs, ClockAlign align = ClockAlign::automatic) {
  std::vector<KinetoText> texts;
  for (size_t i = 0; i < docs.size(); ++i) texts.push_back({"rank" + std::to_string(i) + ".json", docs[i].dump()});
  return parse_kineto(texts, align);
}

std::vector<json> fixture_docs(const std::string& folder) {
  std::vector<json> docs;
  for (const std::string& p : kineto_files(fixture(folder))) docs.push_back(json::parse(read_input_file(p, "trace", 14)));
  return docs;
}

// Moves every event of `doc` by `ns`, in the file's own precision (us with 3 decimals): the
// reader's ns are then exactly `ns` apart from the unshifted file's.
void shift_times(json& doc, int64_t ns) {
  for (json& e : doc["traceEvents"])
    if (e.contains("ts") && e["ts"].is_number()) e["ts"] = double(std::llround(e["ts"].get<double>() * 1000.0) + ns) / 1000.0;
}

// A temporary folder, removed at the end of the test.
struct TempDir {
  std::filesystem::path path;
  explicit TempDir(const std::string& name) : path(std::filesystem::temp_directory_path() / ("ringside-kineto-" + name)) {
    std::filesystem::remove_all(path);
    std::filesystem::create_directories(path);
  }
  ~TempDir() { std::filesystem::remove_all(path); }
  void write(const std::string& name, const std::string& text) const { std::ofstream(path / name, std::ios::binary) << text; }
};

}  // namespace

TEST_CASE("kineto: a hand-built rank's compute, comm and overlap, worked out by hand", "[kineto]") {
  const TraceData t = read_docs({rank_doc(0), rank_doc(1)});
  REQUIRE(t.ranks.size() == 2);
  CHECK(t.run.producer == kKinetoProducer);
  CHECK(t.run.backend == "gloo");
  CHECK(t.run.clock == "one host (vm), one clock: not shifted");
  const auto m = compute_metrics(t);
  REQUIRE(m.size() == 1);
  CHECK(m[0].strategy == "pytorch");
  const Breakdown& b = m[0].ranks[0].time;
  // compute: matmul [10, 40) and softmax [70, 90) (the nested mm adds nothing): 50 us.
  // comm: the c10d calls [6, 6.5) [6.2, 6.7) [61, 62) [62, 63) [78, 79), the Work spans [6, 50)
  // [7, 30) [61.5, 71.5) [62.5, 74.5) [80, 95): [6, 50) + [61, 74.5) + [78, 79) + [80, 95) = 73.5.
  CHECK(b.window_ns == 100000);
  CHECK(b.compute_ns == 50000);
  CHECK(b.comm_ns == 73500);
  // overlap: [10, 40) with [6, 50): 30; [70, 90) with [61, 74.5), [78, 79), [80, 90): 4.5 + 1 + 10.
  CHECK(b.overlap_ns == 45500);
  CHECK(b.exposed_comm_ns == 28000);
  CHECK(b.idle_ns == 100000 - 50000 - 28000);
  // Bytes: each gloo:send moves 4 x 256 floats; the all_reduce 256 floats.
  CHECK(m[0].ranks[0].bytes_sent == 2 * 4096);
  int64_t all_reduce_bytes = -1;
  for (const Event& e : t.ranks[0].events)
    if (e.name == "gloo:all_reduce") {
      all_reduce_bytes = e.bytes;
      CHECK(e.group_size == 2);
      CHECK(e.collective == 0);
      CHECK(e.detail.empty());  // no pg_config in the hand-built files: no group named
    }
  CHECK(all_reduce_bytes == 1024);
  // Memory: the one [memory] instant.
  CHECK(m[0].ranks[0].has_memory);
  CHECK(m[0].ranks[0].peak_memory_bytes == 4096);
}

TEST_CASE("kineto: sends name their peers, pair with their receives, and a ring's rounds are its steps", "[kineto]") {
  const TraceData t = read_docs({rank_doc(0), rank_doc(1)});
  // Every send's peer from its c10d call; 2 sends a rank, each paired with the peer's receive.
  REQUIRE(t.flows.size() == 4);
  for (const Flow& f : t.flows) CHECK(f.from != f.to);
  for (const RankTrace& r : t.ranks) {
    std::map<std::string, int> steps;
    for (const Event& e : r.events) {
      if (e.name == "gloo:send") CHECK(e.peer == (r.rank + 1) % 2);
      if (e.name == "gloo:recv") CHECK(e.peer == (r.rank + 1) % 2);
      if (e.kind == Kind::ring_step) ++steps[e.phase];
      if (e.name == "aten::matmul") CHECK((e.phase == "forward" && e.sublayer == "forward" && e.step == 0));
      if (e.name == "aten::softmax") CHECK((e.phase == "backward" && e.step == 0));
    }
    // One round of posts in the forward (at 5 us) and one in the backward (61 us).
    CHECK(steps["forward"] == 1);
    CHECK(steps["backward"] == 1);
  }
}

TEST_CASE("kineto: the ring fixtures, as PyTorch wrote them", "[kineto]") {
  for (const int N : {2, 4}) {
    const TraceData t = read_trace(fixture("ring" + std::to_string(N)));
    REQUIRE(int(t.ranks.size()) == N);
    CHECK(t.run.ranks == N);
    CHECK(t.run.device == "cpu");
    // Per rank (README): (N-1)*2 + (N-1)*2 + N*2 sends of [1, 4, 64, 16] fp32 to rank+1.
    const int sends = 4 * (N - 1) + 2 * N;
    CHECK(int(t.flows.size()) == N * sends);
    const auto m = compute_metrics(t);
    for (const RankTrace& r : t.ranks) {
      int n_sends = 0, forward_steps = 0, backward_steps = 0;
      for (const Event& e : r.events) {
        if (e.name == "gloo:send") {
          ++n_sends;
          CHECK(e.bytes == 4096 * 4);
          CHECK(e.peer == (r.rank + 1) % N);
          CHECK(e.direction == Direction::send);
        }
        if (e.kind == Kind::ring_step) ++(e.phase == "forward" ? forward_steps : backward_steps);
      }
      CHECK(n_sends == sends);
      // The forward posts K and V at the start of each of its N steps but the last: N - 1 rounds.
      CHECK(forward_steps == N - 1);
      // The backward posts K/V and then dK/dV inside each of its N ring_bwd_step ranges: N steps.
      CHECK(backward_steps == N);
      CHECK(m[0].ranks[size_t(r.rank)].bytes_sent == int64_t(sends) * 4096 * 4);
    }
  }
}

TEST_CASE("kineto: clock alignment recovers a skew injected into one rank", "[kineto]") {
  std::vector<json> docs = fixture_docs("ring4");
  const TraceData same = read_docs(docs, ClockAlign::collectives);
  const TraceData raw_same = read_docs(docs, ClockAlign::none);
  shift_times(docs[2], 5000123);  // rank 2's clock 5000.123 us ahead
  docs[2]["host_name"] = "other";
  const TraceData skewed = read_docs(docs);  // automatic: two hosts, so by the collectives
  REQUIRE(skewed.ranks.size() == 4);
  for (size_t r = 0; r < 4; ++r) {
    // The median of one collective's differences moves by exactly the skew.
    CHECK(skewed.ranks[r].clock_offset_ns - same.ranks[r].clock_offset_ns == (r == 2 ? -5000123 : 0));
    CAPTURE(r);
    REQUIRE(skewed.ranks[r].events.size() == same.ranks[r].events.size());
    for (size_t i = 0; i < same.ranks[r].events.size(); ++i)
      REQUIRE(skewed.ranks[r].events[i].ts_ns == same.ranks[r].events[i].ts_ns);
  }
  CHECK_THAT(skewed.run.clock, Catch::StartsWith("aligned by the ends of 1 collective"));
  // Not aligned, the skew stays: rank 2's window starts 5000.123 us later against rank 0's.
  const TraceData raw = read_docs(docs, ClockAlign::none);
  auto lead = [](const TraceData& t) { return phase_window(t.ranks[2])->begin - phase_window(t.ranks[0])->begin; };
  CHECK(lead(raw) - lead(raw_same) == 5000123);
}

TEST_CASE("kineto: the hand-made GPU fixture: kernels, NCCL and a skewed clock", "[kineto]") {
  const TraceData t = read_trace(fixture("gpu2"));
  REQUIRE(t.ranks.size() == 2);
  CHECK(t.run.device == "cuda");
  CHECK(t.run.backend == "nccl");
  // rank 1's file runs 1234.567 us ahead (README); its hosts differ, so it is aligned.
  CHECK(t.ranks[1].clock_offset_ns == -1234567);
  int64_t sent = 0, all_reduce = 0;
  for (const Event& e : t.ranks[0].events) {
    if (e.stream == Stream::comm && e.direction == Direction::send) sent += e.bytes;
    if (e.kind == Kind::all_reduce) {
      all_reduce += e.bytes;
      CHECK(e.group_size == 2);
      CHECK(e.detail == "process group 0 (default_pg)");  // its record_param_comms' args
    }
    CHECK(e.name.rfind("cuda", 0) != 0);  // launches are not the GPU's timeline
  }
  CHECK(sent == 12582912);
  CHECK(all_reduce == 262144);
  CHECK(t.flows.size() == 6);
  // Ring steps by the kernels' own times (README): the forward's one K/V exchange, the
  // backward's K/V and then, after compute, its dK/dV.
  for (const RankTrace& r : t.ranks) {
    std::map<std::string, int> steps;
    for (const Event& e : r.events)
      if (e.kind == Kind::ring_step) ++steps[e.phase];
    CHECK(steps["forward"] == 1);
    CHECK(steps["backward"] == 2);
  }
}

TEST_CASE("kineto: a folder, gzipped or not, reads the same as its files", "[kineto]") {
  TempDir dir("gz");
  for (const std::string& p : kineto_files(fixture("ring2"))) {
    const std::string name = std::filesystem::path(p).filename().string();
    dir.write(name.substr(0, name.size() - 3), read_input_file(p, "trace", 14));
  }
  const TraceData plain = read_trace(dir.path.string());
  const TraceData gz = read_traces(kineto_files(fixture("ring2")));
  REQUIRE(plain.ranks.size() == 2);
  CHECK(plain.ranks[1].events.size() == gz.ranks[1].events.size());
  CHECK(compute_metrics(plain)[0].ranks[1].time.comm_ns == compute_metrics(gz)[0].ranks[1].time.comm_ns);
}

TEST_CASE("kineto: hostile files are one clear error each", "[kineto]") {
  const std::vector<json> good = {rank_doc(0), rank_doc(1)};
  REQUIRE_NOTHROW(read_docs(good));
  auto fails = [&](const std::function<void(std::vector<json>&)>& edit, const std::string& message) {
    std::vector<json> docs = good;
    edit(docs);
    CAPTURE(message);
    CHECK_THROWS_WITH(read_docs(docs), Catch::Contains(message));
  };
  fails([](auto& d) { d[0]["traceEvents"][3].erase("ts"); }, "rank0.json: traceEvents[3]: missing 'ts'");
  fails([](auto& d) { d[0]["traceEvents"][3].erase("name"); }, "traceEvents[3]: missing 'name'");
  fails([](auto& d) { d[0]["traceEvents"][3].erase("ph"); }, "traceEvents[3]: missing 'ph'");
  fails([](auto& d) { d[0]["traceEvents"][3]["ts"] = "10"; }, "'ts' must be a number, got string");
  fails([](auto& d) { d[0]["traceEvents"][3]["dur"] = -1; }, "'dur' = -1 is out of range");
  fails([](auto& d) { d[0]["traceEvents"][3]["pid"] = 1.5; }, "'pid' must be an integer");
  fails([](auto& d) { d[0]["traceEvents"][3]["args"] = 7; }, "'args' must be an object");
  fails([](auto& d) { d[0]["traceEvents"][6]["args"]["Input Dims"] = json::array({json::array({-4, 256})}); },
        "'args.Input Dims' must hold arrays of non-negative integers");
  fails([](auto& d) { d[0]["traceEvents"][6]["args"]["Input Dims"] = "4x256"; }, "'args.Input Dims' must be an array");
  fails([](auto& d) { d[0]["traceEvents"][5]["args"]["Concrete Inputs"] = 3; }, "'args.Concrete Inputs' must be an array");
  fails([](auto& d) { d[0]["traceEvents"] = json::object(); }, "rank0.json: 'traceEvents' must be an array");
  fails([](auto& d) { d[0]["traceEvents"][0] = 5; }, "an event must be an object, got number");
  fails([](auto& d) { d[0]["traceEvents"][0]["ph"] = "B"; }, "phase 'B' is not one PyTorch's profiler writes");
  fails([](auto& d) { d[1]["distributedInfo"]["rank"] = "1"; }, "rank1.json: distributedInfo: 'rank' must be an integer");
  fails([](auto& d) { d[1]["distributedInfo"]["world_size"] = 0; }, "'world_size' = 0 is out of range");
  fails([](auto& d) { d[1]["distributedInfo"]["rank"] = 2; }, "rank 2 is not below world_size 2");
  fails([](auto& d) { d[1]["distributedInfo"] = 4; }, "'distributedInfo' must be an object");
  fails([](auto& d) { d[1]["baseTimeNanoseconds"] = -3; }, "'baseTimeNanoseconds' = -3 is out of range");
  // A rank missing, a rank twice, one process as two ranks, two processes in one file.
  fails([](auto& d) { d[1]["distributedInfo"]["world_size"] = 3, d[0]["distributedInfo"]["world_size"] = 3; },
        "rank 2 of 3 is missing: the files are of ranks 0, 1");
  fails([](auto& d) { d[1] = rank_doc(0, 2, 200); }, "rank 0 is in two files: rank0.json and rank1.json");
  fails([](auto& d) { d[1] = rank_doc(1, 2, 100); }, "rank1.json and rank0.json are one process (host 'vm', pid 100)");
  fails([](auto& d) { d[0]["traceEvents"][4]["pid"] = 7; }, "CPU events of two processes (pids 100 and 7) in one rank's file");
  fails([](auto& d) { d[1]["distributedInfo"]["world_size"] = 4; }, "rank1.json says world_size 4 where rank0.json says 2");
  // Async spans: an end without a begin, a begin without an end.
  fails([](auto& d) { d[0]["traceEvents"].push_back({{"ph", "e"}, {"cat", "a"}, {"name", "n"}, {"id", 3}, {"pid", 100}, {"tid", 100}, {"ts", 1.0}}); },
        "async end of 'n' (id 3) without its begin");
  fails([](auto& d) { d[0]["traceEvents"].push_back({{"ph", "b"}, {"cat", "a"}, {"name", "n"}, {"id", 3}, {"pid", 100}, {"tid", 100}, {"ts", 1.0}}); },
        "async event 'n' (id 3) begins at traceEvents[19] and never ends");
  // Not a Kineto trace among them.
  fails([](auto& d) { d[1] = json{{"traceEvents", json::array()}, {"otherData", json::object()}}; },
        "rank1.json: not a PyTorch profiler (Kineto) trace");
  CHECK_THROWS_WITH(parse_kineto({{"r.json", "{\"traceEvents\": [1, 2"}}), Catch::Contains("r.json: not valid JSON"));
  CHECK_THROWS_WITH(parse_kineto({}), Catch::Contains("no Kineto trace to read"));
}

TEST_CASE("kineto: async spans are read as spans, flows and stray ends are tolerated", "[kineto]") {
  std::vector<json> docs = {rank_doc(0), rank_doc(1)};
  json& ev = docs[0]["traceEvents"];
  ev.push_back({{"ph", "b"}, {"cat", "cpu_op"}, {"name", "aten::add"}, {"id", "0x1"}, {"pid", 100}, {"tid", 100}, {"ts", 95.0}});
  ev.push_back({{"ph", "e"}, {"cat", "cpu_op"}, {"name", "aten::add"}, {"id", "0x1"}, {"pid", 100}, {"tid", 100}, {"ts", 97.5}});
  ev.push_back({{"ph", "f"}, {"cat", "ac2g"}, {"name", "ac2g"}, {"id", 77}, {"bp", "e"}, {"pid", 100}, {"tid", 100}, {"ts", 3.0}});
  ev.push_back({{"ph", "s"}, {"cat", "ac2g"}, {"name", "ac2g"}, {"id", 78}, {"pid", 100}, {"tid", 100}, {"ts", 4.0}});
  const auto m = compute_metrics(read_docs(docs));
  CHECK(m[0].ranks[0].time.compute_ns == 50000 + 2500);  // the async add, [95, 97.5)
}

TEST_CASE("kineto: a folder with no traces, a file too large, a corrupt gzip", "[kineto]") {
  TempDir dir("bad");
  CHECK_THROWS_WITH(read_trace(dir.path.string()), Catch::Contains("no PyTorch profiler traces in"));
  // Not gzip at all (zlib reads it as it is), and a gzip cut in half.
  dir.write("rank0.json.gz", "not gzip at all, and long enough to have a trailer");
  CHECK_THROWS_WITH(read_trace(dir.path.string()), Catch::Contains("rank0.json.gz: not valid JSON"));
  std::string gz;
  {
    std::ifstream in(fixture("ring2/rank0.pt.trace.json.gz"), std::ios::binary);
    gz.assign(std::istreambuf_iterator<char>(in), {});
  }
  dir.write("rank0.json.gz", gz.substr(0, gz.size() / 2));
  CHECK_THROWS_WITH(read_trace(dir.path.string()), Catch::Contains("rank0.json.gz: corrupt gzip"));
  std::filesystem::remove(dir.path / "rank0.json.gz");
  // A sparse 5 GiB file: refused by its size, before anything is read.
  dir.write("rank0.json", "");
  std::filesystem::resize_file(dir.path / "rank0.json", uint64_t(5) << 30);
  CHECK_THROWS_WITH(read_trace(dir.path.string()),
                    Catch::Contains("rank0.json is 5120 MiB; ringside reads traces up to 4 GiB"));
}

TEST_CASE("kineto: what a break test found, each now right", "[kineto]") {
  // Two rings (0 <-> 1, 2 <-> 3) are not one ring: no ring steps.
  {
    const TraceData t = read_docs({rank_doc(0, 4, -1, 1, 1), rank_doc(1, 4, -1, 0, 0), rank_doc(2, 4, -1, 3, 3), rank_doc(3, 4, -1, 2, 2)});
    for (const RankTrace& r : t.ranks)
      for (const Event& e : r.events) CHECK(e.kind != Kind::ring_step);
    CHECK(t.flows.size() == 8);  // still each send paired
  }
  // One host: its clock whatever each file's baseTimeNanoseconds (the same instants, rebased).
  {
    std::vector<json> docs = {rank_doc(0), rank_doc(1)};
    docs[1]["baseTimeNanoseconds"] = 1000000 + 1000000000;
    shift_times(docs[1], -1000000000);
    const TraceData t = read_docs(docs);
    CHECK(t.run.clock == "one host (vm), one clock: not shifted");
    CHECK(compute_metrics(t)[0].ranks[1].time.comm_ns == 73500);
    CHECK(phase_window(t.ranks[1])->begin == phase_window(t.ranks[0])->begin);
  }
  // Different numbers of collectives: the k-th of each is not one call, so no alignment.
  {
    std::vector<json> docs = {rank_doc(0), rank_doc(1)};
    docs[1]["host_name"] = "other";
    docs[0]["traceEvents"].push_back(x("gloo:all_reduce", "user_annotation", 2, 1, {{"Input type", {"float"}}, {"Input Dims", {{8}}}}, 100, 101));
    const TraceData t = read_docs(docs);
    CHECK(t.run.clock == "not aligned: the ranks ran different numbers of collectives (rank 0: 2, rank 1: 1; each file's own clock)");
    CHECK(t.ranks[1].clock_offset_ns == 0);
  }
  // A GPU kernel on a rank keeps its gloo transfers (only nccl: spans are kernels' twins).
  {
    std::vector<json> docs = {rank_doc(0), rank_doc(1)};
    docs[0]["traceEvents"].push_back(x("elementwise_kernel", "kernel", 20, 10, {{"correlation", 5}}, 0, 7));
    const auto m = compute_metrics(read_docs(docs));
    CHECK(m[0].ranks[0].bytes_sent == 2 * 4096);
    CHECK(m[0].ranks[0].time.compute_ns == 10000);  // the GPU's: the kernel alone
  }
  // A peer written as a JSON integer; PyTorch's other type names.
  {
    std::vector<json> docs = {rank_doc(0), rank_doc(1)};
    docs[0]["traceEvents"][5]["args"]["Concrete Inputs"][2] = 1;
    docs[0]["traceEvents"][6]["args"]["Input type"] = {"short int"};
    const TraceData t = read_docs(docs);
    CHECK(t.flows.size() == 4);
    for (const Event& e : t.ranks[0].events)
      if (e.name == "gloo:send" && e.ts_ns < 10000) CHECK(e.bytes == 4 * 256 * 2);
  }
  // Sums of shapes past 2^53 elements, a non-string type, a group larger than the world.
  std::vector<json> docs = {rank_doc(0), rank_doc(1)};
  docs[0]["traceEvents"][6]["args"]["Input Dims"] = json::array({json::array()});
  for (int i = 0; i < 1025; ++i) docs[0]["traceEvents"][6]["args"]["Input Dims"][0].push_back({int64_t(1) << 53});
  CHECK_THROWS_WITH(read_docs(docs), Catch::Contains("traceEvents[6]: 'args.Input Dims' holds too many elements"));
  docs = {rank_doc(0), rank_doc(1)};
  docs[0]["traceEvents"][6]["args"]["Input type"] = {5};
  CHECK_THROWS_WITH(read_docs(docs), Catch::Contains("'args.Input type' must hold strings, got 5"));
  docs = {rank_doc(0), rank_doc(1)};
  docs[1]["distributedInfo"]["pg_config"] = {{{"pg_name", "0"}, {"pg_desc", "default_pg"}, {"pg_size", 7}}};
  CHECK_THROWS_WITH(read_docs(docs), Catch::Contains("rank1.json: distributedInfo.pg_config: pg_size 7 is more than world_size 2"));
  // Clocks 104+ days apart: the file that is off is named against the one that is not.
  docs = {rank_doc(0), rank_doc(1)};
  docs[1]["baseTimeNanoseconds"] = int64_t(200) * 86400 * 1000000000;
  CHECK_THROWS_WITH(read_docs(docs, ClockAlign::none), Catch::Contains("rank1.json: event") && Catch::Contains("from the first step of rank0.json"));
}

TEST_CASE("kineto: issue 57: a send or receive whose peer is not another rank of the world is refused, naming the event and the field", "[kineto][issue57]") {
  // The break test's: the ring4 fixture's first send of rank 0 (traceEvents[24], c10d::send,
  // Concrete Inputs [tensors, group, peer, tag]) naming a peer that does not exist. It was paired
  // anyway ("79 sends paired", "4 of 79 receives end before their send starts").
  const std::vector<json> ring4 = fixture_docs("ring4");
  REQUIRE(read_docs(ring4).flows.size() == 80);
  REQUIRE(ring4[0]["traceEvents"][24]["name"] == "c10d::send");
  for (const auto& [peer, expect] : std::vector<std::pair<std::string, std::string>>{
           {"99", "traceEvents[24]: 'args.Concrete Inputs'[2] = 99 is not a rank of the world (distributedInfo.world_size = 4)"},
           {"4", "traceEvents[24]: 'args.Concrete Inputs'[2] = 4 is not a rank of the world"},
           {"-1", R"(traceEvents[24]: 'args.Concrete Inputs'[2] = "-1" is not a rank (an integer from 0 to 999999999))"},
           {"abc", R"(traceEvents[24]: 'args.Concrete Inputs'[2] = "abc" is not a rank)"},
           {"1.5", R"(traceEvents[24]: 'args.Concrete Inputs'[2] = "1.5" is not a rank)"},
           {"0", "traceEvents[24]: 'args.Concrete Inputs'[2] = 0 is this file's own rank: a send's peer is another rank"}}) {
    std::vector<json> docs = ring4;
    docs[0]["traceEvents"][24]["args"]["Concrete Inputs"][2] = peer;
    CAPTURE(peer);
    CHECK_THROWS_WITH(read_docs(docs), Catch::Contains("rank0.json: " + expect));
  }
  // Beyond it: a receive naming itself, a tag that is not one, the GPU fixture's NCCL kernel
  // and record_param_comms ("Dst Rank"), and a run whose files say no world_size.
  {
    std::vector<json> docs = ring4;
    json& recv = docs[2]["traceEvents"][28];
    REQUIRE(recv["name"] == "c10d::recv_");
    recv["args"]["Concrete Inputs"][2] = "2";
    CHECK_THROWS_WITH(read_docs(docs), Catch::Contains("rank2.json: traceEvents[28]: 'args.Concrete Inputs'[2] = 2 is this file's own rank: a recv's peer"));
    docs = ring4;
    docs[0]["traceEvents"][24]["args"]["Concrete Inputs"][3] = "tag";
    CHECK_THROWS_WITH(read_docs(docs), Catch::Contains(R"(traceEvents[24]: 'args.Concrete Inputs'[3] = "tag" is not a tag)"));
  }
  {
    std::vector<json> docs = fixture_docs("gpu2");
    REQUIRE(read_docs(docs).flows.size() > 0);
    REQUIRE(docs[0]["traceEvents"][16]["args"]["Dst Rank"] == 1);
    docs[0]["traceEvents"][16]["args"]["Dst Rank"] = 2;
    CHECK_THROWS_WITH(read_docs(docs), Catch::Contains("rank0.json: traceEvents[16]: 'args.Dst Rank' = 2 is not a rank of the world (distributedInfo.world_size = 2)"));
    docs = fixture_docs("gpu2");
    REQUIRE(docs[1]["traceEvents"][64]["args"]["Collective name"] == "send");
    docs[1]["traceEvents"][64]["args"]["Dst Rank"] = 1;  // rank 1's own NCCL send kernel
    CHECK_THROWS_WITH(read_docs(docs), Catch::Contains("rank1.json: traceEvents[64]: 'args.Dst Rank' = 1 is this file's own rank"));
  }
  {
    std::vector<json> docs = {rank_doc(0), rank_doc(1)};
    for (json& d : docs) d.erase("distributedInfo");  // ranks from the file names
    REQUIRE(read_docs(docs).flows.size() == 4);
    docs[1]["traceEvents"][5]["args"]["Concrete Inputs"][2] = "7";
    CHECK_THROWS_WITH(read_docs(docs), Catch::Contains("rank1.json: traceEvents[5]: 'args.Concrete Inputs'[2] = 7 is not a rank of the run (its files are of ranks 0, 1)"));
  }
  // A receive from any source names its tag, not a peer: [tensors, group, tag].
  {
    std::vector<json> docs = {rank_doc(0), rank_doc(1)};
    docs[1]["traceEvents"].push_back(x("c10d::recv_any_source_", "cpu_op", 95, 1, {{"External id", 50}, {"Concrete Inputs", {"", "", "1"}}}, 101, 101));
    const TraceData t = read_docs(docs);
    for (const Event& e : t.ranks[1].events)
      if (e.name == "c10d::recv_any_source_") {
        CHECK(e.peer == -1);
        CHECK(e.tag == 1);
      }
  }
}

TEST_CASE("kineto: issue 62: epoch timestamps (torch before 2.1) read exactly", "[kineto][issue62]") {
  // The hand-built rank with its times as microseconds since the Unix epoch, as HTA's public
  // traces carry them (1.68e15 us, past the 9e12 of a relative clock): the same run, to the ns.
  // Epoch times in a double are exact to 0.25 us (old profilers wrote whole microseconds): the
  // hand-built rank's times in whole us, and the matmul at 10.5 us.
  json doc = rank_doc(0);
  doc.erase("baseTimeNanoseconds");
  for (json& e : doc["traceEvents"])
    if (e.contains("ts") && e["ts"].is_number()) e["ts"] = std::round(e["ts"].get<double>());
  doc["traceEvents"][3]["ts"] = 10.5;
  const json relative = doc;
  for (json& e : doc["traceEvents"])
    if (e.contains("ts") && e["ts"].is_number()) e["ts"] = 1683564902174220.0 + e["ts"].get<double>();
  const TraceData epoch = kineto_trace(doc, "epoch.json"), near = kineto_trace(relative, "relative.json");
  REQUIRE(epoch.ranks.size() == 1);
  REQUIRE(epoch.ranks[0].events.size() == near.ranks[0].events.size());
  for (size_t i = 0; i < epoch.ranks[0].events.size(); ++i) {
    const Event &a = epoch.ranks[0].events[i], &b = near.ranks[0].events[i];
    INFO(a.name);
    CHECK(a.dur_ns == b.dur_ns);
    CHECK(a.ts_ns == b.ts_ns);
  }
  CHECK(std::any_of(epoch.ranks[0].events.begin(), epoch.ranks[0].events.end(),
                    [](const Event& e) { return e.name == "aten::matmul" && e.ts_ns == 10500; }));
}

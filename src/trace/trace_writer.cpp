// The trace writer: a TraceData as Chrome trace JSON (Perfetto, chrome://tracing and Catapult read
// it), events streamed one at a time, the flows between sends and their receives derived.
#include "trace/trace_file.h"

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <sstream>
#include <tuple>

#include "core/error.h"
#include "core/json_input.h"
#include "core/memory_limits.h"
#include "core/output.h"

namespace ringside::trace {

namespace {

const char* kMemoryTotal = "memory total";  // the counter of the total bytes live

double us(int64_t ns) { return double(ns) / 1000.0; }

// ---------------------------------------------------------------------------- writer

nlohmann::json args_of(const Event& e) {
  nlohmann::json a = nlohmann::json::object();
  if (!e.phase.empty()) a["phase"] = e.phase;
  if (!e.sublayer.empty()) a["sublayer"] = e.sublayer;
  if (e.step >= 0) a["step"] = e.step;
  if (e.peer >= 0) a["peer"] = e.peer;
  if (e.bytes > 0) a["bytes"] = e.bytes;
  if (e.flops > 0) a["flops"] = e.flops;
  if (e.collective >= 0) a["collective"] = e.collective;
  if (e.direction != Direction::none) a["direction"] = to_string(e.direction);
  if (e.tag >= 0) a["tag"] = e.tag;
  if (e.seq >= 0) a["seq"] = e.seq;
  if (e.group_size > 0) a["group_size"] = e.group_size;
  if (e.order >= 0) a["order"] = e.order;
  if (e.end_order >= 0) a["end_order"] = e.end_order;
  if (!e.detail.empty()) a["detail"] = e.detail;
  if (!e.tiles.empty()) {
    nlohmann::json tiles = nlohmann::json::array();
    for (const TilePair& p : e.tiles)
      tiles.push_back({p.q_first, p.q_len, p.q_stride, p.k_first, p.k_len, p.k_stride, int(p.partial)});
    a["tiles"] = std::move(tiles);
  }
  if (!e.tiles_complete) a["tiles_complete"] = false;
  return a;
}

nlohmann::json meta(const char* name, int64_t pid, int tid, nlohmann::json args) {
  return {{"ph", "M"}, {"name", name}, {"pid", pid}, {"tid", tid}, {"args", std::move(args)}};
}

// The order of a thread's slices in the file: by start, and at equal starts in the rank's
// program order (a parent begins before its children), else the longer first. Viewers break
// start ties by file order (Catapult's SliceGroup.createSubSlices does), so this decides which
// of two slices of the same extent, a sublayer and its one op, is the parent.
bool file_order(const Event* a, const Event* b) {
  if (a->ts_ns != b->ts_ns) return a->ts_ns < b->ts_ns;
  if (a->order >= 0 && b->order >= 0 && a->order != b->order) return a->order < b->order;
  return a->dur_ns > b->dur_ns;
}

// A zero-length event: a process-scoped instant (`i`, scope `p`). A thread's zero-length slice
// or instant at the instant the slice before it ends is drawn inside that slice (Catapult's
// bounds are closed intervals); a process's instants nest in nothing. `tid` still says which
// stream it was on, for ringside's reader.
nlohmann::json instant(const Event& e, int64_t pid, int tid) {
  return {{"name", e.name}, {"cat", to_string(e.kind)}, {"ph", "i"}, {"s", "p"}, {"ts", us(e.ts_ns)},
          {"pid", pid},     {"tid", tid},   {"args", args_of(e)}};
}

// Where a flow's ends bind: 1 ns inside the transfer's slice (half-way into a slice of 1 ns),
// never at its edge. Viewers bind a flow end to the slice that holds its time, edges included,
// so on a lane where one transfer begins the instant another ends, an end at the edge binds to
// either.
double flow_start_us(const Event& e) { return e.dur_ns >= 2 ? us(e.ts_ns + 1) : (double(e.ts_ns) + 0.5) / 1000.0; }
double flow_finish_us(const Event& e) { return e.dur_ns >= 2 ? us(e.end_ns() - 1) : (double(e.ts_ns) + 0.5) / 1000.0; }

}  // namespace

namespace {

// The reader's range, held by the writer too: a file ringside writes, ringside reads.
void check_range(const Event& e, const RankTrace& r) {
  auto where = [&] { return detail::concat("trace writer: event '", e.name, "' of ", r.strategy, " rank ", r.rank); };
  if (e.ts_ns < -kMaxTimeNs || e.ts_ns > kMaxTimeNs || e.dur_ns < 0 || e.dur_ns > kMaxTimeNs)
    throw Error(detail::concat(where(), " at ", e.ts_ns, " ns for ", e.dur_ns, " ns is outside the trace format's range of ",
                               kMaxTimeUs, " us (about 104 days)"));
  if (e.bytes < 0 || double(e.bytes) > kMaxBytes || !(e.flops >= 0 && e.flops <= kMaxFlops))
    throw Error(detail::concat(where(), ": ", e.bytes, " bytes or ", e.flops, " FLOPs is outside the trace format's range"));
}

void check_range(const MemorySample& m, const RankTrace& r) {
  bool ok = m.ts_ns >= -kMaxTimeNs && m.ts_ns <= kMaxTimeNs && double(m.total()) <= kMaxBytes;  // total: its own value
  for (int64_t b : m.bytes) ok &= b >= 0 && double(b) <= kMaxBytes;
  if (!ok)
    throw Error(detail::concat("trace writer: a memory sample of ", r.strategy, " rank ", r.rank, " at ", m.ts_ns,
                               " ns is outside the trace format's range"));
}

}  // namespace

namespace {

// The events of a trace, one at a time (never the whole list in memory), and where each send and
// receive landed (pid, tid, ts), to draw the flows between them at the end.
class ChromeWriter {
 public:
  explicit ChromeWriter(std::ostream& os) : os_(os) {}

  void emit(const nlohmann::json& e) {
    os_ << (first_ ? "" : ",") << e.dump();
    first_ = false;
  }

  // One rank's process: its names, its events (compute on thread 0, transfers on comm lanes),
  // its memory counters.
  void rank(const RankTrace& r, int64_t pid, const std::string& pname) {
    emit(meta("process_name", pid, 0, {{"name", pname}}));
    emit(meta("process_sort_index", pid, 0, {{"sort_index", pid}}));
    emit(meta("thread_name", pid, 0, {{"name", "compute"}}));
    emit(meta("thread_sort_index", pid, 0, {{"sort_index", 0}}));
    std::vector<const Event*> evs;
    for (const Event& e : r.events) evs.push_back(&e);
    std::stable_sort(evs.begin(), evs.end(), file_order);
    // Comm lanes: transfers of one rank may overlap (a send and a receive at once), and the
    // slices of one thread must nest, so each transfer takes the first lane free at its start.
    std::vector<int64_t> lane_end;
    for (const Event* e : evs) {
      check_range(*e, r);
      int tid = 0;
      if (e->dur_ns == 0) {
        // No time, so no slice: an instant of the process, where no viewer nests it.
        emit(instant(*e, pid, e->stream == Stream::comm ? 1 : 0));
        continue;
      }
      if (e->stream == Stream::comm) {
        size_t lane = 0;
        while (lane < lane_end.size() && lane_end[lane] > e->ts_ns) ++lane;
        if (lane == lane_end.size()) {
          lane_end.push_back(0);
          const int ntid = int(lane) + 1;
          emit(meta("thread_name", pid, ntid, {{"name", lane == 0 ? std::string("comm") : "comm " + std::to_string(ntid)}}));
          emit(meta("thread_sort_index", pid, ntid, {{"sort_index", ntid}}));
        }
        lane_end[lane] = e->end_ns();
        tid = int(lane) + 1;
        if (e->seq >= 0 && e->peer >= 0) {
          const bool send = e->direction == Direction::send;
          const Key k{r.strategy, send ? r.rank : e->peer, send ? e->peer : r.rank, e->tag, e->seq};
          // The arrow runs from the send's start to where the data has arrived: the end of
          // the receive (under MPI a receive is posted, so starts, before its send).
          (send ? sends : recvs)[k] = End{pid, tid, send ? flow_start_us(*e) : flow_finish_us(*e)};
        }
      }
      emit({{"name", e->name},
            {"cat", to_string(e->kind)},
            {"ph", "X"},
            {"ts", us(e->ts_ns)},
            {"dur", us(e->dur_ns)},
            {"pid", pid},
            {"tid", tid},
            {"args", args_of(*e)}});
    }
    // Memory: one counter track per process, samples in time order.
    std::vector<MemorySample> mem = r.memory;
    std::stable_sort(mem.begin(), mem.end(), [](const MemorySample& a, const MemorySample& b) { return a.ts_ns < b.ts_ns; });
    for (const MemorySample& m : mem) {
      check_range(m, r);
      nlohmann::json a;
      for (int c = 0; c < kNumMemCategories; ++c) a[kCategoryNames[c]] = m.bytes[c];
      emit({{"name", "memory"}, {"ph", "C"}, {"ts", us(m.ts_ns)}, {"pid", pid}, {"tid", 0}, {"args", a}});
      // The total is a counter of its own: viewers stack a counter's series (Catapult does),
      // and a total among the categories would draw the peak twice as high.
      emit({{"name", kMemoryTotal}, {"ph", "C"}, {"ts", us(m.ts_ns)}, {"pid", pid}, {"tid", 0}, {"args", {{"total", m.total()}}}});
    }
  }

  void flows() {
  // Flows: a send and its receive, matched by (strategy, sender, receiver, tag, seq).
  int64_t id = 0;
  for (const auto& [k, s] : sends) {
    auto it = recvs.find(k);
    if (it == recvs.end()) continue;  // the receive was not recorded (a failed run)
    const End& f = it->second;
    ++id;
    const std::string name = "message";
    emit({{"ph", "s"}, {"id", id}, {"name", name}, {"cat", "flow"}, {"pid", s.pid}, {"tid", s.tid}, {"ts", s.ts_us}});
    emit({{"ph", "f"}, {"bp", "e"}, {"id", id}, {"name", name}, {"cat", "flow"}, {"pid", f.pid}, {"tid", f.tid},
          {"ts", f.ts_us}});
  }
  }

 private:
  struct End {
    int64_t pid;
    int tid;
    double ts_us;
  };
  using Key = std::tuple<std::string, int, int, int, int64_t>;  // strategy, from, to, tag, seq
  std::ostream& os_;
  bool first_ = true;
  std::map<Key, End> sends, recvs;
};

}  // namespace

void write_chrome_json(std::ostream& os, const TraceData& t) {
  std::vector<std::string> strategies;
  for (const RankTrace& r : t.ranks)
    if (std::find(strategies.begin(), strategies.end(), r.strategy) == strategies.end()) strategies.push_back(r.strategy);
  const bool several = strategies.size() > 1;
  auto pid_of = [&](const RankTrace& r) {
    RS_CHECK(r.rank >= 0 && r.rank < kMaxRanks, "trace writer: rank ", r.rank, " outside [0, ", kMaxRanks, ")");
    const auto si = std::find(strategies.begin(), strategies.end(), r.strategy) - strategies.begin();
    return int64_t(si) * kMaxRanks + r.rank;
  };

  nlohmann::json processes = nlohmann::json::array();
  for (const RankTrace& r : t.ranks) {
    processes.push_back({{"pid", pid_of(r)},
                         {"strategy", r.strategy},
                         {"rank", r.rank},
                         {"clock_offset_ns", r.clock_offset_ns},
                         {"clock_uncertainty_ns", r.clock_uncertainty_ns}});
    if (!r.tile_map.empty()) processes.back()["tile_map"] = r.tile_map;
  }
  nlohmann::json other = t.other;
  put_run_info(other, t.run);
  other["ringside_version"] = RINGSIDE_VERSION;
  other["strategies"] = strategies;
  other["processes"] = std::move(processes);
  // The keys in nlohmann's (sorted) order; the events one at a time, never the whole list in memory.
  os << R"({"displayTimeUnit":"ns","otherData":)" << other.dump() << R"(,"traceEvents":[)";
  ChromeWriter w(os);
  // Each process as Perfetto and chrome://tracing list it: "ring: GPU 3", a modeled step's "winner ...: stage 3".
  const std::string row = t.run.backend == kPipelineStages ? "stage " : "GPU ";
  for (const RankTrace& r : t.ranks)
    w.rank(r, pid_of(r), (several ? r.strategy + ": " : std::string()) + row + std::to_string(r.rank));
  w.flows();
  os << "]}\n";
}

nlohmann::json to_chrome_json(const TraceData& t) {
  std::ostringstream os;
  write_chrome_json(os, t);
  return nlohmann::json::parse(os.str());
}

void write_trace(const std::string& path, const TraceData& t) {
  // Written beside, then renamed over (core/output.h): a reader (the viewer's live mode) sees
  // the old file or the new one, never half of one.
  output::write_with(path, [&](std::ostream& os) { write_chrome_json(os, t); }, "--trace");
}

}  // namespace ringside::trace

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

const char* kCategoryNames[kNumMemCategories] = {"weights", "grads", "activations", "workspace", "comm"};
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
  if (!e.direction.empty()) a["direction"] = e.direction;
  if (e.tag >= 0) a["tag"] = e.tag;
  if (e.seq >= 0) a["seq"] = e.seq;
  if (e.order >= 0) a["order"] = e.order;
  if (e.end_order >= 0) a["end_order"] = e.end_order;
  if (!e.detail.empty()) a["detail"] = e.detail;
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
  return {{"name", e.name}, {"cat", e.cat}, {"ph", "i"}, {"s", "p"}, {"ts", us(e.ts_ns)},
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
  for (const RankTrace& r : t.ranks)
    processes.push_back({{"pid", pid_of(r)},
                         {"strategy", r.strategy},
                         {"rank", r.rank},
                         {"clock_offset_ns", r.clock_offset_ns},
                         {"clock_uncertainty_ns", r.clock_uncertainty_ns}});
  nlohmann::json other = t.other.is_object() ? t.other : nlohmann::json::object();
  other["ringside_version"] = RINGSIDE_VERSION;
  other["strategies"] = strategies;
  other["processes"] = std::move(processes);
  // The keys in nlohmann's (sorted) order; the events one at a time, never the whole list in memory.
  os << R"({"displayTimeUnit":"ns","otherData":)" << other.dump() << R"(,"traceEvents":[)";
  bool first = true;
  auto emit = [&](const nlohmann::json& e) {
    os << (first ? "" : ",") << e.dump();
    first = false;
  };

  // Per process: where each send and receive landed (pid, tid, ts), to draw the flows.
  struct End {
    int64_t pid;
    int tid;
    double ts_us;
  };
  using Key = std::tuple<std::string, int, int, int, int64_t>;  // strategy, from, to, tag, seq
  std::map<Key, End> sends, recvs;

  for (const RankTrace& r : t.ranks) {
    const int64_t pid = pid_of(r);
    const std::string pname = (several ? r.strategy + ": " : std::string()) + "GPU " + std::to_string(r.rank);
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
          const bool send = e->direction == "send";
          const Key k{r.strategy, send ? r.rank : e->peer, send ? e->peer : r.rank, e->tag, e->seq};
          // The arrow runs from the send's start to where the data has arrived: the end of
          // the receive (under MPI a receive is posted, so starts, before its send).
          (send ? sends : recvs)[k] = End{pid, tid, send ? flow_start_us(*e) : flow_finish_us(*e)};
        }
      }
      emit({{"name", e->name},
            {"cat", e->cat},
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
  output::write_with(path, [&](std::ostream& os) { write_chrome_json(os, t); }, "trace");
}

// ---------------------------------------------------------------------------- reader

namespace {

// Field access with errors that say where and what.
class EventReader {
 public:
  EventReader(const nlohmann::json& e, std::string where) : e_(e), where_(std::move(where)) {}

  [[noreturn]] void fail(const std::string& what) const { throw Error(where_ + ": " + what); }

  const nlohmann::json* find(const nlohmann::json& obj, const char* key) const {
    auto it = obj.find(key);
    return it == obj.end() ? nullptr : &*it;
  }
  std::string str(const char* key, bool required) const { return str_in(e_, key, required, ""); }
  std::string str_in(const nlohmann::json& obj, const char* key, bool required, const char* prefix) const {
    const nlohmann::json* v = find(obj, key);
    if (!v) {
      if (required) fail(detail::concat("missing '", prefix, key, "'"));
      return {};
    }
    if (!v->is_string()) fail(detail::concat("'", prefix, key, "' must be a string, got ", v->type_name()));
    return v->get<std::string>();
  }
  // An integer in [lo, hi]: JSON integers only (1e3 or 2.5 are not ids).
  int64_t integer_in(const nlohmann::json& obj, const char* key, bool required, int64_t lo, int64_t hi, int64_t dflt,
                     const char* prefix = "") const {
    const nlohmann::json* v = find(obj, key);
    if (!v) {
      if (required) fail(detail::concat("missing '", prefix, key, "'"));
      return dflt;
    }
    if (v->is_number_unsigned()) {
      const uint64_t u = v->get<uint64_t>();
      if (u > uint64_t(hi)) fail(detail::concat("'", prefix, key, "' = ", u, " is out of range [", lo, ", ", hi, "]"));
      return int64_t(u);
    }
    if (!v->is_number_integer()) fail(detail::concat("'", prefix, key, "' must be an integer, got ", describe(*v)));
    const int64_t i = v->get<int64_t>();
    if (i < lo || i > hi) fail(detail::concat("'", prefix, key, "' = ", i, " is out of range [", lo, ", ", hi, "]"));
    return i;
  }
  // A finite number in [lo, hi].
  double number_in(const nlohmann::json& obj, const char* key, bool required, double lo, double hi,
                   const char* prefix = "") const {
    const nlohmann::json* v = find(obj, key);
    if (!v) {
      if (required) fail(detail::concat("missing '", prefix, key, "'"));
      return 0;
    }
    if (!v->is_number()) fail(detail::concat("'", prefix, key, "' must be a number, got ", describe(*v)));
    const double d = v->get<double>();
    if (!std::isfinite(d) || d < lo || d > hi)
      fail(detail::concat("'", prefix, key, "' = ", d, " is out of range [", lo, ", ", hi, "]"));
    return d;
  }
  // Microseconds in the file -> integer ns.
  int64_t time_ns(const char* key, bool required, double lo) const {
    return std::llround(number_in(e_, key, required, lo, kMaxTimeUs) * 1000.0);
  }
  const nlohmann::json& args() const {
    static const nlohmann::json empty = nlohmann::json::object();
    const nlohmann::json* a = find(e_, "args");
    if (!a) return empty;
    if (!a->is_object()) fail(detail::concat("'args' must be an object, got ", a->type_name()));
    return *a;
  }
  const nlohmann::json& json() const { return e_; }

 private:
  static std::string describe(const nlohmann::json& v) {
    if (v.is_number_float()) {
      const double d = v.get<double>();
      if (std::isfinite(d) && d == std::floor(d)) return detail::concat(d, " (written as a floating-point number, or beyond 64 bits)");
      return detail::concat("the non-integer ", d);
    }
    return v.type_name();
  }
  const nlohmann::json& e_;
  std::string where_;
};

bool is_comm_kind(const std::string& cat) {
  return cat == "p2p" || cat == "all_gather" || cat == "reduce_scatter" || cat == "all_reduce" || cat == "all_to_all";
}

}  // namespace

TraceData parse_trace(std::string_view text, const std::string& source) {
  const nlohmann::json doc = parse_json(text, source);
  const nlohmann::json* list = &doc;
  TraceData out;
  if (doc.is_object()) {
    auto it = doc.find("traceEvents");
    if (it == doc.end()) throw Error(source + ": not a Chrome trace: the object has no 'traceEvents'");
    list = &*it;
    if (auto o = doc.find("otherData"); o != doc.end()) {
      if (!o->is_object()) throw Error(source + ": 'otherData' must be an object, got " + std::string(o->type_name()));
      out.other = *o;
    }
  }
  if (!list->is_array())
    throw Error(source + ": 'traceEvents' must be an array, got " + std::string(list->type_name()));

  // Processes: from otherData.processes (strategy, rank, clock) where present, else pid = rank.
  std::map<int64_t, size_t> proc;  // pid -> index into out.ranks
  std::map<std::pair<int64_t, int64_t>, std::string> thread_names;
  std::map<int64_t, std::string> process_names;  // from `M` process_name events
  std::set<int64_t> described;                   // pids that otherData.processes names
  auto process = [&](int64_t pid) -> RankTrace& {
    auto [it, fresh] = proc.try_emplace(pid, out.ranks.size());
    if (fresh) {
      RankTrace r;
      r.rank = int(pid);  // until otherData or the process name says otherwise
      out.ranks.push_back(r);
    }
    return out.ranks[it->second];
  };
  if (auto p = out.other.find("processes"); p != out.other.end()) {
    if (!p->is_array()) throw Error(source + ": otherData.processes must be an array");
    for (size_t i = 0; i < p->size(); ++i) {
      const nlohmann::json& e = (*p)[i];
      if (!e.is_object()) throw Error(detail::concat(source, ": otherData.processes[", i, "] must be an object"));
      EventReader rd(e, detail::concat(source, ": otherData.processes[", i, "]"));
      const int64_t pid = rd.integer_in(e, "pid", true, 0, INT32_MAX, 0);
      if (!described.insert(pid).second) rd.fail(detail::concat("pid ", pid, " is listed twice"));
      RankTrace& r = process(pid);
      r.strategy = rd.str("strategy", false);
      r.rank = int(rd.integer_in(e, "rank", true, 0, INT32_MAX, 0));
      r.clock_offset_ns = rd.integer_in(e, "clock_offset_ns", false, INT64_MIN / 4, INT64_MAX / 4, 0);
      r.clock_uncertainty_ns = rd.integer_in(e, "clock_uncertainty_ns", false, 0, INT64_MAX / 4, 0);
    }
  }

  struct FlowEnd {
    int64_t pid = -1, ts_ns = 0;
  };
  std::map<std::string, std::pair<FlowEnd, FlowEnd>> flows;  // id -> (s, f)
  struct Pending {
    int64_t pid, tid;
    Event e;
  };
  std::vector<Pending> xs;
  for (size_t i = 0; i < list->size(); ++i) {
    const nlohmann::json& ev = (*list)[i];
    EventReader rd(ev, detail::concat(source, ": traceEvents[", i, "]"));
    if (!ev.is_object()) rd.fail(detail::concat("an event must be an object, got ", ev.type_name()));
    const std::string ph = rd.str("ph", true);
    if ((ph == "i" || ph == "I") && rd.str("s", false) == "g") continue;  // a global instant: no rank's
    const int64_t pid = rd.integer_in(ev, "pid", true, 0, INT32_MAX, 0);
    if (ph == "X" || ph == "i" || ph == "I") {
      // A slice, or an instant: an event of no duration (ringside writes its zero-length
      // events so). A global instant belongs to no rank: left out.
      const bool instant = ph != "X";
      Pending p{pid, rd.integer_in(ev, "tid", !instant, 0, INT32_MAX, 0), {}};
      Event& e = p.e;
      e.name = rd.str("name", true);
      e.cat = rd.str("cat", false);
      e.ts_ns = rd.time_ns("ts", true, -kMaxTimeUs);
      e.dur_ns = instant ? 0 : rd.time_ns("dur", true, 0);
      const nlohmann::json& a = rd.args();
      e.phase = rd.str_in(a, "phase", false, "args.");
      e.sublayer = rd.str_in(a, "sublayer", false, "args.");
      e.step = int(rd.integer_in(a, "step", false, 0, INT32_MAX, -1, "args."));
      e.peer = int(rd.integer_in(a, "peer", false, 0, INT32_MAX, -1, "args."));
      e.bytes = int64_t(rd.number_in(a, "bytes", false, 0, kMaxBytes, "args."));
      e.flops = rd.number_in(a, "flops", false, 0, kMaxFlops, "args.");
      e.collective = rd.integer_in(a, "collective", false, 0, INT64_MAX / 4, -1, "args.");
      e.direction = rd.str_in(a, "direction", false, "args.");
      e.tag = int(rd.integer_in(a, "tag", false, 0, INT32_MAX, -1, "args."));
      e.seq = rd.integer_in(a, "seq", false, 0, INT64_MAX / 4, -1, "args.");
      e.order = rd.integer_in(a, "order", false, 0, INT64_MAX / 4, -1, "args.");
      e.end_order = rd.integer_in(a, "end_order", false, 0, INT64_MAX / 4, -1, "args.");
      e.detail = rd.str_in(a, "detail", false, "args.");
      process(pid);
      xs.push_back(std::move(p));
    } else if (ph == "C") {
      const std::string name = rd.str("name", true);
      const int64_t ts = rd.time_ns("ts", true, -kMaxTimeUs);
      const nlohmann::json& a = rd.args();
      MemorySample m{ts, {}};
      for (auto it = a.begin(); it != a.end(); ++it)
        rd.number_in(a, it.key().c_str(), true, -kMaxBytes, kMaxBytes, "args.");  // every value a sane number
      if (name == "memory") {
        for (int c = 0; c < kNumMemCategories; ++c)
          m.bytes[c] = int64_t(rd.number_in(a, kCategoryNames[c], false, 0, kMaxBytes, "args."));
        process(pid).memory.push_back(m);
      }
    } else if (ph == "M") {
      const std::string name = rd.str("name", true);
      const nlohmann::json& a = rd.args();
      if (name == "process_name") {
        process_names[pid] = rd.str_in(a, "name", true, "args.");
        process(pid);
      } else if (name == "thread_name") {
        thread_names[{pid, rd.integer_in(ev, "tid", true, 0, INT32_MAX, 0)}] = rd.str_in(a, "name", true, "args.");
      } else if (name == "process_sort_index" || name == "thread_sort_index") {
        rd.integer_in(a, "sort_index", true, INT32_MIN, INT32_MAX, 0, "args.");
      } else if (name != "process_labels" && name != "process_uptime_seconds") {
        rd.fail("unknown metadata event '" + name + "'");
      }
    } else if (ph == "s" || ph == "f") {
      const nlohmann::json* id = rd.find(ev, "id");
      if (!id) rd.fail("missing 'id'");
      std::string key;
      if (id->is_string()) key = "s:" + id->get<std::string>();
      else key = "i:" + std::to_string(rd.integer_in(ev, "id", true, 0, INT64_MAX / 4, 0));
      rd.integer_in(ev, "tid", true, 0, INT32_MAX, 0);
      auto& pair = flows[key];
      FlowEnd& end = ph == "s" ? pair.first : pair.second;
      if (end.pid >= 0) rd.fail(detail::concat("flow id ", id->dump(), " has a second '", ph, "' event"));
      end = FlowEnd{pid, rd.time_ns("ts", true, -kMaxTimeUs)};
      process(pid);
    } else {
      static const char* chrome_phases[] = {"B", "E", "b", "e", "n", "t", "P", "O", "N", "D", "R", "c", "(", ")", "S", "T", "p", "F", "V", "v"};
      const bool chrome = std::find_if(std::begin(chrome_phases), std::end(chrome_phases),
                                       [&](const char* p) { return ph == p; }) != std::end(chrome_phases);
      rd.fail(chrome ? "phase '" + ph + "' is Chrome trace but ringside reads only X, i, C, M, s and f events"
                     : "unknown phase '" + ph + "'");
    }
  }
  // Processes otherData does not describe: "<strategy>: GPU r" or "GPU r" as ringside names
  // them, else the process name (or nothing) as the strategy and the pid as the rank.
  for (auto& [pid, index] : proc) {
    if (described.count(pid)) continue;
    RankTrace& r = out.ranks[index];
    auto it = process_names.find(pid);
    if (it == process_names.end()) continue;
    const std::string& n = it->second;
    const size_t g = n.rfind("GPU ");
    const bool numbered = g != std::string::npos && g + 4 < n.size() && n.size() - g - 4 <= 9 &&
                          std::all_of(n.begin() + long(g) + 4, n.end(), [](char c) { return c >= '0' && c <= '9'; });
    if (numbered && (g == 0 || (g >= 2 && n.compare(g - 2, 2, ": ") == 0))) {
      r.rank = std::stoi(n.substr(g + 4));
      r.strategy = g == 0 ? "" : n.substr(0, g - 2);
    } else {
      r.strategy = n;
    }
  }
  {  // One process per (strategy, rank): metrics group by it.
    std::map<std::pair<std::string, int>, int64_t> seen;
    for (auto& [pid, index] : proc) {
      const RankTrace& r = out.ranks[index];
      auto [it, fresh] = seen.try_emplace({r.strategy, r.rank}, pid);
      if (!fresh)
        throw Error(detail::concat(source, ": pids ", it->second, " and ", pid, " are both rank ", r.rank,
                                   r.strategy.empty() ? std::string() : " of strategy '" + r.strategy + "'"));
    }
  }
  for (Pending& p : xs) {
    // Comm: a comm lane of ringside's, a collective or p2p kind, or a NCCL kernel (as HTA
    // classifies kernels by name).
    auto tn = thread_names.find({p.pid, p.tid});
    const bool nccl = p.e.name.size() >= 4 && (p.e.name.compare(0, 4, "nccl") == 0 || p.e.name.compare(0, 4, "NCCL") == 0);
    const bool comm = (tn != thread_names.end() && tn->second.starts_with("comm")) || is_comm_kind(p.e.cat) || nccl;
    p.e.stream = comm ? Stream::comm : Stream::compute;
    out.ranks[proc.at(p.pid)].events.push_back(std::move(p.e));
  }
  for (auto& [key, pair] : flows) {
    const std::string id = key.substr(2);
    if (pair.first.pid < 0) throw Error(source + ": flow id " + id + " has a finish ('f') but no start ('s')");
    if (pair.second.pid < 0) throw Error(source + ": flow id " + id + " has a start ('s') but no finish ('f')");
    Flow f;
    f.id = key[0] == 'i' ? std::stoll(id) : int64_t(out.flows.size());
    f.from = proc.at(pair.first.pid), f.to = proc.at(pair.second.pid);
    f.from_ts_ns = pair.first.ts_ns, f.to_ts_ns = pair.second.ts_ns;
    out.flows.push_back(f);
  }
  for (RankTrace& r : out.ranks)
    std::stable_sort(r.memory.begin(), r.memory.end(), [](const MemorySample& a, const MemorySample& b) { return a.ts_ns < b.ts_ns; });
  return out;
}

TraceData read_trace(const std::string& path) {
  std::error_code ec;
  const auto status = std::filesystem::status(path, ec);
  RS_CHECK(!ec, "cannot read trace ", path, ": ", ec.message());
  RS_CHECK(!std::filesystem::is_directory(status), "cannot read trace ", path, ": it is a directory");
  RS_CHECK(std::filesystem::is_regular_file(status), "cannot read trace ", path, ": not a regular file");
  const auto size = std::filesystem::file_size(path, ec);
  RS_CHECK(!ec, "cannot read trace ", path, ": ", ec.message());
  RS_CHECK(size <= (uint64_t(4) << 30), "trace ", path, " is ", size >> 20, " MiB; ringside reads traces up to 4 GiB");
  // The parsed JSON and the events take about 13 times the file (a 92 MB trace: 1.19 GB).
  require_memory(14.0 * double(size), "reading trace " + path, "trace", 1);
  std::ifstream f(path, std::ios::binary);
  RS_CHECK(f.good(), "cannot read trace ", path, ": ", std::strerror(errno));
  try {
    std::string text(size, '\0');
    f.read(text.data(), std::streamsize(size));
    RS_CHECK(!f.bad() && size_t(f.gcount()) == size, "cannot read trace ", path, ": read failed");
    return parse_trace(text, path);
  } catch (const std::bad_alloc&) {
    throw Error(detail::concat("trace ", path, ": out of memory reading ", size >> 20, " MiB"));
  }
}

}  // namespace ringside::trace

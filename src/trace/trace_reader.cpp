// The trace reader: Chrome trace JSON into a TraceData, every field checked (a corrupt or
// foreign file is an error naming the event, never a crash).
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
#include "core/text_file.h"
#include "trace/kineto.h"
#include "trace/event_reader.h"

namespace ringside::trace {

namespace {

// A ring step's "tiles": at most kMaxTilePairs pairs, each [q_first, q_len, q_stride, k_first,
// k_len, k_stride, partial] of non-negative integers (lengths and strides >= 1, partial 0 or 1);
// and "tiles_complete", a boolean.
void read_tiles(const EventReader& rd, const nlohmann::json& a, Event& e) {
  if (const nlohmann::json* done = rd.find(a, "tiles_complete")) {
    if (!done->is_boolean()) rd.fail("'args.tiles_complete' must be a boolean");
    e.tiles_complete = done->get<bool>();
  }
  const nlohmann::json* tiles = rd.find(a, "tiles");
  if (!tiles) return;
  if (!tiles->is_array() || tiles->size() > kMaxTilePairs)
    rd.fail(detail::concat("'args.tiles' must be an array of at most ", kMaxTilePairs, " pairs"));
  for (const nlohmann::json& t : *tiles) {
    if (!t.is_array() || t.size() != 7)
      rd.fail("'args.tiles' holds [q_first, q_len, q_stride, k_first, k_len, k_stride, partial] arrays");
    int64_t v[7];
    for (size_t i = 0; i < 7; ++i) {
      if (!t[i].is_number_integer()) rd.fail("'args.tiles' values must be integers");
      if (t[i].is_number_unsigned() && t[i].get<uint64_t>() > uint64_t(INT64_MAX))
        rd.fail(detail::concat("'args.tiles' value ", t[i].get<uint64_t>(), " is out of range"));
      v[i] = t[i].get<int64_t>();
      const int64_t lo = i == 1 || i == 2 || i == 4 || i == 5 ? 1 : 0, hi = i == 6 ? 1 : int64_t(kMaxBytes);
      if (v[i] < lo || v[i] > hi) rd.fail(detail::concat("'args.tiles' value ", v[i], " is out of range [", lo, ", ", hi, "]"));
    }
    e.tiles.push_back({v[0], v[1], v[2], v[3], v[4], v[5], v[6] == 1});
  }
}

}  // namespace

namespace {

// One file's reading: the processes (from otherData.processes, the process names, or the pid),
// then every event by its phase, then the streams, the flows and the memory order.
class TraceReader {
 public:
  // otherData: the run's description, typed once (RunInfo); the rest as it is.
  TraceReader(const nlohmann::json& other, std::string source) : source_(std::move(source)) {
    check_run_info(other, source_);  // every field a reader takes, typed: never a mistyped one read as absent
    out_.run = run_info(other);
    out_.other = without_run_info(other);
  }

  // Processes: from otherData.processes (strategy, rank, clock) where present, else pid = rank.
  void read_processes() {
    if (auto p = out_.other.find("processes"); p != out_.other.end()) {
      if (!p->is_array()) throw Error(source_ + ": otherData.processes must be an array");
      for (size_t i = 0; i < p->size(); ++i) {
        const nlohmann::json& e = (*p)[i];
        if (!e.is_object()) throw Error(detail::concat(source_, ": otherData.processes[", i, "] must be an object"));
        EventReader rd(e, detail::concat(source_, ": otherData.processes[", i, "]"));
        const int64_t pid = rd.integer_in(e, "pid", true, 0, INT32_MAX, 0);
        if (!described_.insert(pid).second) rd.fail(detail::concat("pid ", pid, " is listed twice"));
        RankTrace& r = process(pid);
        r.strategy = rd.str("strategy", false);
        r.tile_map = rd.str("tile_map", false);
        if (!r.tile_map.empty() && r.tile_map != kTileMapRingSteps && r.tile_map != kTileMapEveryRank)
          rd.fail("tile_map must be \"" + std::string(kTileMapRingSteps) + "\" or \"" + kTileMapEveryRank + "\", got \"" +
                  detail::shown_input(r.tile_map, 24) + "\"");
        r.rank = int(rd.integer_in(e, "rank", true, 0, INT32_MAX, 0));
        r.clock_offset_ns = rd.integer_in(e, "clock_offset_ns", false, INT64_MIN / 4, INT64_MAX / 4, 0);
        r.clock_uncertainty_ns = rd.integer_in(e, "clock_uncertainty_ns", false, 0, INT64_MAX / 4, 0);
      }
    }
  }

  void read_event(const nlohmann::json& ev, size_t i) {
    EventReader rd(ev, detail::concat(source_, ": traceEvents[", i, "]"));
    if (!ev.is_object()) rd.fail(detail::concat("an event must be an object, got ", ev.type_name()));
    const std::string ph = rd.str("ph", true);
    if ((ph == "i" || ph == "I") && rd.str("s", false) == "g") return;  // a global instant: no rank's
    const int64_t pid = rd.integer_in(ev, "pid", true, 0, INT32_MAX, 0);
    // Where otherData lists the processes, an event of any other is not of this run.
    if (!described_.empty() && !described_.count(pid))
      rd.fail(detail::concat("pid ", pid, " is not a process otherData.processes lists"));
    if (ph == "X" || ph == "i" || ph == "I") read_slice(rd, ev, ph, pid, i);
    else if (ph == "C") read_counter(rd, pid);
    else if (ph == "M") read_metadata(rd, ev, pid);
    else if (ph == "s" || ph == "f") read_flow(rd, ev, ph, pid);
    else refuse_phase(rd, ph);
  }

  TraceData finish() {
    // Processes otherData does not describe: "<strategy>: GPU r" or "GPU r" as ringside names
    // them, else the process name (or nothing) as the strategy and the pid as the rank.
    for (auto& [pid, index] : proc_) {
      if (described_.count(pid)) continue;
      RankTrace& r = out_.ranks[index];
      auto it = process_names_.find(pid);
      if (it == process_names_.end()) continue;
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
      for (auto& [pid, index] : proc_) {
        const RankTrace& r = out_.ranks[index];
        auto [it, fresh] = seen.try_emplace({r.strategy, r.rank}, pid);
        if (!fresh)
          throw Error(detail::concat(source_, ": pids ", it->second, " and ", pid, " are both rank ", r.rank,
                                     r.strategy.empty() ? std::string() : " of strategy '" + r.strategy + "'"));
      }
    }
    for (Pending& p : xs_) {
      // Comm: a comm lane of ringside's, a collective or p2p kind, or a NCCL kernel (as HTA
      // classifies kernels by name).
      auto tn = thread_names_.find({p.pid, p.tid});
      const bool nccl = p.e.name.size() >= 4 && (p.e.name.compare(0, 4, "nccl") == 0 || p.e.name.compare(0, 4, "NCCL") == 0);
      const bool comm = (tn != thread_names_.end() && tn->second.starts_with("comm")) || is_comm_kind(p.e.kind) || nccl;
      p.e.stream = comm ? Stream::comm : Stream::compute;
    }
    check_program_order();
    check_peers();
    for (Pending& p : xs_) out_.ranks[proc_.at(p.pid)].events.push_back(std::move(p.e));
    for (auto& [key, pair] : flows_) {
      const std::string id = key.substr(2);
      if (pair.first.pid < 0) throw Error(source_ + ": flow id " + id + " has a finish ('f') but no start ('s')");
      if (pair.second.pid < 0) throw Error(source_ + ": flow id " + id + " has a start ('s') but no finish ('f')");
      Flow f;
      f.id = key[0] == 'i' ? std::stoll(id) : int64_t(out_.flows.size());
      f.from = proc_.at(pair.first.pid), f.to = proc_.at(pair.second.pid);
      f.from_ts_ns = pair.first.ts_ns, f.to_ts_ns = pair.second.ts_ns;
      out_.flows.push_back(f);
    }
    for (RankTrace& r : out_.ranks)
      std::stable_sort(r.memory.begin(), r.memory.end(), [](const MemorySample& a, const MemorySample& b) { return a.ts_ns < b.ts_ns; });
    return std::move(out_);
  }

 private:
  struct Pending {
    int64_t pid, tid;
    size_t index;  // in traceEvents, for errors
    Event e;
  };

  // "t.json: traceEvents[12]": where an event is, for errors.
  std::string at(const Pending& p) const { return detail::concat(source_, ": traceEvents[", p.index, "]"); }
  // "ring rank 2" (or "rank 2" of a trace without strategies): whose an event is.
  std::string owner(const Pending& p) const {
    const RankTrace& r = out_.ranks[proc_.at(p.pid)];
    return detail::concat(r.strategy.empty() ? "" : r.strategy + " ", "rank ", r.rank);
  }

  // Program order (args.order, args.end_order) is what the what-if model replays: each process's
  // ticks name one point of its program each (two events never share one; a transfer's post is
  // its one point), and on the compute stream the program's points come in the order of their
  // times (an op that comes later in the program does not start before an earlier one ends).
  // Phases are left out of the second: on a GPU rank their times are the host's, the ops' the GPU's.
  void check_program_order() const {
    struct Point {
      int64_t order, ns;
      const Pending* p;
      bool end;
    };
    std::map<int64_t, std::vector<Point>> points;  // per pid
    for (const Pending& p : xs_) {
      if (p.e.order < 0) continue;
      points[p.pid].push_back({p.e.order, p.e.ts_ns, &p, false});
      if (p.e.end_order != p.e.order) points[p.pid].push_back({p.e.end_order, p.e.end_ns(), &p, true});
    }
    auto field = [](const Point& q) { return q.end ? "'args.end_order'" : "'args.order'"; };
    for (auto& [pid, v] : points) {
      std::sort(v.begin(), v.end(), [](const Point& a, const Point& b) { return a.order < b.order; });
      for (size_t k = 1; k < v.size(); ++k)
        if (v[k].order == v[k - 1].order) {
          const Point &a = v[k - 1], &b = v[k];
          const Point& later = a.p->index > b.p->index ? a : b;
          const Point& earlier = &later == &a ? b : a;
          throw Error(detail::concat(at(*later.p), ": ", field(later), " = ", later.order, " is also ", field(earlier), " of traceEvents[",
                                     earlier.p->index, "] (", owner(*later.p),
                                     "): each point of a rank's program has an order of its own"));
        }
      const Point* latest = nullptr;  // the compute-stream point of the latest time so far
      for (const Point& q : v) {
        if (q.p->e.stream != Stream::compute || q.p->e.kind == Kind::phase) continue;
        if (latest && q.ns < latest->ns)
          throw Error(detail::concat(at(*q.p), ": ", field(q), " = ", q.order, " puts its ", q.end ? "end" : "start", " (at ",
                                     double(q.ns) / 1000.0, " us) after the ", latest->end ? "end" : "start", " of traceEvents[",
                                     latest->p->index, "] (", field(*latest), " = ", latest->order, ", at ", double(latest->ns) / 1000.0,
                                     " us) in ", owner(*q.p), "'s program, but before it in time: program order against time"));
        if (!latest || q.ns >= latest->ns) latest = &q;
      }
    }
  }

  // A transfer's or wait's peer is another rank of its own strategy (of those the file holds),
  // and a message of one sender, receiver, tag and seq is sent once and received once: what
  // pairs a send with its receive (the flows, the model's transfers).
  void check_peers() const {
    std::map<std::string, std::set<int>> ranks_of;  // per strategy
    for (const RankTrace& r : out_.ranks) ranks_of[r.strategy].insert(r.rank);
    // (strategy, sender, receiver, tag, seq, side): the strategy by its place in ranks_of
    std::map<std::tuple<size_t, int, int, int, int64_t, bool>, const Pending*> messages;
    for (const Pending& p : xs_) {
      const Event& e = p.e;
      if (e.peer < 0) continue;
      const RankTrace& r = out_.ranks[proc_.at(p.pid)];
      const std::set<int>& ranks = ranks_of[r.strategy];
      if (e.peer == r.rank)
        throw Error(detail::concat(at(p), ": 'args.peer' = ", e.peer, " is the event's own rank (", owner(p),
                                   "): a transfer's peer is another rank"));
      if (!ranks.count(e.peer))
        throw Error(detail::concat(at(p), ": 'args.peer' = ", e.peer, " is not a rank of ",
                                   r.strategy.empty() ? std::string("the trace") : r.strategy, " (its ranks: ", listed(ranks), ")"));
      if (e.stream != Stream::comm || e.kind == Kind::wait || e.direction == Direction::none || e.seq < 0) continue;  // a transfer's end
      const bool send = e.direction == Direction::send;
      const auto [it, fresh] =
          messages.try_emplace({size_t(std::distance(ranks_of.begin(), ranks_of.find(r.strategy))), send ? r.rank : e.peer,
                                send ? e.peer : r.rank, e.tag, e.seq, send},
                               &p);
      if (!fresh)
        throw Error(detail::concat(at(p), ": 'args.seq' = ", e.seq, " names again the ", to_string(e.direction), send ? " to" : " from",
                                   " rank ", e.peer, " with tag ", e.tag, " of traceEvents[", it->second->index, "] (", owner(p),
                                   "): each message has a seq of its own"));
    }
  }

  // "0 to 3", or "0, 2, 5" where some are missing.
  static std::string listed(const std::set<int>& ranks) {
    if (!ranks.empty() && *ranks.rbegin() - *ranks.begin() + 1 == int(ranks.size()) && ranks.size() > 2)
      return detail::concat(*ranks.begin(), " to ", *ranks.rbegin());
    std::string s;
    for (int r : ranks) s += (s.empty() ? "" : ", ") + std::to_string(r);
    return s;
  }

  RankTrace& process(int64_t pid) {
    auto [it, fresh] = proc_.try_emplace(pid, out_.ranks.size());
    if (fresh) {
      RankTrace r;
      r.rank = int(pid);  // until otherData or the process name says otherwise
      out_.ranks.push_back(r);
    }
    return out_.ranks[it->second];
  }

  void read_slice(const EventReader& rd, const nlohmann::json& ev, const std::string& ph, int64_t pid, size_t index) {
    // A slice, or an instant: an event of no duration (ringside writes its zero-length
    // events so). A global instant belongs to no rank: left out.
    const bool instant = ph != "X";
    Pending p{pid, rd.integer_in(ev, "tid", !instant, 0, INT32_MAX, 0), index, {}};
    Event& e = p.e;
    e.name = rd.str("name", true);
    e.kind = kind_of(rd.str("cat", false));
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
    const std::string direction = rd.str_in(a, "direction", false, "args.");
    e.direction = direction_of(direction);
    // A transfer's or a wait's side pairs it with its other end: one of the two (a foreign
    // event's other words are its own).
    if (!direction.empty() && e.direction == Direction::none && (is_comm_kind(e.kind) || e.kind == Kind::wait))
      rd.fail("'args.direction' of a " + std::string(to_string(e.kind)) + " must be send or recv, got '" +
              detail::shown_input(direction) + "'");
    e.tag = int(rd.integer_in(a, "tag", false, 0, INT32_MAX, -1, "args."));
    e.seq = rd.integer_in(a, "seq", false, 0, INT64_MAX / 4, -1, "args.");
    e.group_size = int(rd.integer_in(a, "group_size", false, 1, INT32_MAX, 0, "args."));
    e.order = rd.integer_in(a, "order", false, 0, INT64_MAX / 4, -1, "args.");
    e.end_order = rd.integer_in(a, "end_order", false, 0, INT64_MAX / 4, -1, "args.");
    // Program order: where the event begins and where it ends, both or neither (a transfer's
    // post is one point, end_order = order).
    if ((e.order < 0) != (e.end_order < 0))
      rd.fail(e.order < 0 ? "'args.end_order' without 'args.order' (program order names where an event begins and ends)"
                          : "'args.order' without 'args.end_order' (program order names where an event begins and ends)");
    if (e.end_order < e.order)
      rd.fail(detail::concat("'args.end_order' = ", e.end_order, " is before its 'args.order' = ", e.order,
                             ": an event ends after it begins"));
    e.detail = rd.str_in(a, "detail", false, "args.");
    read_tiles(rd, a, e);
    process(pid);
    xs_.push_back(std::move(p));
  }

  void read_counter(const EventReader& rd, int64_t pid) {
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
  }

  void read_metadata(const EventReader& rd, const nlohmann::json& ev, int64_t pid) {
    const std::string name = rd.str("name", true);
    const nlohmann::json& a = rd.args();
    if (name == "process_name") {
      process_names_[pid] = rd.str_in(a, "name", true, "args.");
      process(pid);
    } else if (name == "thread_name") {
      thread_names_[{pid, rd.integer_in(ev, "tid", true, 0, INT32_MAX, 0)}] = rd.str_in(a, "name", true, "args.");
    } else if (name == "process_sort_index" || name == "thread_sort_index") {
      rd.integer_in(a, "sort_index", true, INT32_MIN, INT32_MAX, 0, "args.");
    } else if (name != "process_labels" && name != "process_uptime_seconds") {
      rd.fail("unknown metadata event '" + name + "'");
    }
  }

  void read_flow(const EventReader& rd, const nlohmann::json& ev, const std::string& ph, int64_t pid) {
    const nlohmann::json* id = rd.find(ev, "id");
    if (!id) rd.fail("missing 'id'");
    std::string key;
    if (id->is_string()) key = "s:" + id->get<std::string>();
    else key = "i:" + std::to_string(rd.integer_in(ev, "id", true, 0, INT64_MAX / 4, 0));
    rd.integer_in(ev, "tid", true, 0, INT32_MAX, 0);
    auto& pair = flows_[key];
    FlowEnd& end = ph == "s" ? pair.first : pair.second;
    if (end.pid >= 0) rd.fail(detail::concat("flow id ", id->dump(), " has a second '", ph, "' event"));
    end = FlowEnd{pid, rd.time_ns("ts", true, -kMaxTimeUs)};
    process(pid);
  }

  [[noreturn]] static void refuse_phase(const EventReader& rd, const std::string& ph) {
    static const char* chrome_phases[] = {"B", "E", "b", "e", "n", "t", "P", "O", "N", "D", "R", "c", "(", ")", "S", "T", "p", "F", "V", "v"};
    const bool chrome = std::find_if(std::begin(chrome_phases), std::end(chrome_phases),
                                     [&](const char* p) { return ph == p; }) != std::end(chrome_phases);
    rd.fail(chrome ? "phase '" + ph + "' is Chrome trace but ringside reads only X, i, C, M, s and f events"
                   : "unknown phase '" + ph + "'");
  }

  struct FlowEnd {
    int64_t pid = -1, ts_ns = 0;
  };
  std::string source_;
  TraceData out_;
  std::map<int64_t, size_t> proc_;  // pid -> index into out_.ranks
  std::map<std::pair<int64_t, int64_t>, std::string> thread_names_;
  std::map<int64_t, std::string> process_names_;  // from `M` process_name events
  std::set<int64_t> described_;                   // pids that otherData.processes names
  std::map<std::string, std::pair<FlowEnd, FlowEnd>> flows_;  // id -> (s, f)
  std::vector<Pending> xs_;
};

}  // namespace

TraceData parse_trace(std::string_view text, const std::string& source) {
  const nlohmann::json doc = parse_json(text, source);
  if (is_kineto(doc)) return kineto_trace(doc, source);
  const nlohmann::json* list = &doc;
  nlohmann::json other;
  if (doc.is_object()) {
    auto it = doc.find("traceEvents");
    if (it == doc.end()) throw Error(source + ": not a Chrome trace: the object has no 'traceEvents'");
    list = &*it;
    if (auto o = doc.find("otherData"); o != doc.end()) {
      if (!o->is_object()) throw Error(source + ": 'otherData' must be an object, got " + std::string(o->type_name()));
      other = *o;
    }
  }
  if (!list->is_array())
    throw Error(source + ": 'traceEvents' must be an array, got " + std::string(list->type_name()));
  TraceReader reader(other, source);
  reader.read_processes();
  for (size_t i = 0; i < list->size(); ++i) reader.read_event((*list)[i], i);
  return reader.finish();
}

TraceData read_trace(const std::string& path, ClockAlign align) {
  std::error_code ec;
  if (std::filesystem::is_directory(path, ec)) return read_kineto(kineto_files(path), align);
  // The parsed JSON and the events take about 13 times the file (a 92 MB trace: 1.19 GB); a
  // file of many tiny values may take more, and then runs out of memory (in the parse, or in
  // nlohmann's destroying the document, which allocates too): said of the file.
  try {
    return parse_trace(read_input_file(path, "trace", 14.0), path);
  } catch (const std::bad_alloc&) {
    throw Error("trace " + path + ": out of memory parsing it (the machine's, or a limit on this process)");
  }
}

TraceData read_traces(const std::vector<std::string>& paths, ClockAlign align) {
  RS_CHECK(!paths.empty(), "no trace to read");
  if (paths.size() == 1) return read_trace(paths[0], align);
  return read_kineto(trace_input_files(paths), align);  // several folders or files: one run's ranks
}

}  // namespace ringside::trace

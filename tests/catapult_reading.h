// What Catapult, the trace viewer behind chrome://tracing, makes of a Chrome trace file: which
// slice is whose parent, which slice each flow end binds to, and what a counter's stacked series
// add up to. An independent oracle for the trace writer's tests, written from the rules of
// Catapult's importer (tracing/extras/importer/trace_event_importer.html and
// tracing/model/slice_group.html), not from ringside's reader:
//   - X events become slices of their (pid, tid) thread; thread-scoped instants (`i` with "s"
//     "t" or no "s") become slices of no duration; process and global instants are not slices.
//   - A thread's slices are sorted by start, ties in file order, and nested by a stack: a slice
//     is the child of the nearest open slice that bounds it, bounds being closed intervals at
//     ns precision (a slice that starts where another ends is not inside it, but a slice of no
//     duration there is).
//   - A v1 flow's `s`, and an `f` with "bp": "e", bind to the deepest slice of their thread
//     whose closed interval holds their time.
//   - A counter's series are drawn stacked: the top of the stack is the sum of its args.
#pragma once
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

namespace ringside::testing {

struct ViewerSlice {
  const nlohmann::json* event = nullptr;
  int64_t start_ns = 0, end_ns = 0;
  long parent = -1;  ///< index into the thread's slices, -1 at the top level
  long depth = 0;
};

struct FlowEnd {
  const nlohmann::json* event = nullptr;
  int64_t pid = 0, tid = 0, ts_ns = 0;
  int holding = 0;                   ///< slices of its thread whose interval holds ts (any depth)
  const ViewerSlice* bound = nullptr;  ///< the deepest of them, where Catapult binds it
};

struct CatapultReading {
  /// Per (pid, tid): its slices in sorted (start, file) order, with their parents.
  std::map<std::pair<int64_t, int64_t>, std::vector<ViewerSlice>> threads;
  /// Per flow id: its start and its finish.
  std::map<std::string, std::pair<FlowEnd, FlowEnd>> flows;
  /// Per process, each counter event's stacked top (the sum of its args), by name, in file order.
  std::map<int64_t, std::map<std::string, std::vector<std::pair<int64_t, double>>>> counters;
};

inline int64_t catapult_ns(const nlohmann::json& us) { return std::llround(us.get<double>() * 1000.0); }

/// Reads `doc` as Catapult does (see above). Expects a well-formed trace (ringside's writer's).
inline CatapultReading read_as_catapult(const nlohmann::json& doc) {
  CatapultReading out;
  const nlohmann::json& events = doc.is_object() ? doc.at("traceEvents") : doc;
  for (const nlohmann::json& e : events) {
    const std::string ph = e.at("ph");
    const int64_t pid = e.value("pid", int64_t(0)), tid = e.value("tid", int64_t(0));
    const bool thread_instant = (ph == "i" || ph == "I") && e.value("s", std::string("t")) == "t";
    if (ph == "X" || thread_instant) {
      ViewerSlice s;
      s.event = &e;
      s.start_ns = catapult_ns(e.at("ts"));
      s.end_ns = ph == "X" ? catapult_ns(e.at("ts")) + catapult_ns(e.at("dur")) : s.start_ns;
      out.threads[{pid, tid}].push_back(s);
    } else if (ph == "s" || ph == "f") {
      FlowEnd f{&e, pid, tid, catapult_ns(e.at("ts"))};
      auto& pair = out.flows[e.at("id").dump()];
      (ph == "s" ? pair.first : pair.second) = f;
    } else if (ph == "C") {
      double top = 0;
      for (const auto& [k, v] : e.at("args").items()) top += v.get<double>();
      out.counters[pid][e.at("name").get<std::string>()].push_back({catapult_ns(e.at("ts")), top});
    }
  }
  for (auto& [thread, slices] : out.threads) {
    std::stable_sort(slices.begin(), slices.end(), [](const ViewerSlice& a, const ViewerSlice& b) { return a.start_ns < b.start_ns; });
    auto bounds = [](const ViewerSlice& p, const ViewerSlice& c) { return !(c.start_ns < p.start_ns) && !(p.end_ns < c.end_ns); };
    long root = -1;
    for (long i = 0; i < long(slices.size()); ++i) {
      while (root >= 0 && !bounds(slices[size_t(root)], slices[size_t(i)])) root = slices[size_t(root)].parent;
      slices[size_t(i)].parent = root;
      slices[size_t(i)].depth = root < 0 ? 0 : slices[size_t(root)].depth + 1;
      root = i;
    }
  }
  for (auto& [id, pair] : out.flows)
    for (FlowEnd* f : {&pair.first, &pair.second}) {
      if (!f->event) continue;
      const auto it = out.threads.find({f->pid, f->tid});
      if (it == out.threads.end()) continue;
      for (const ViewerSlice& s : it->second)
        if (s.start_ns <= f->ts_ns && f->ts_ns <= s.end_ns) {
          ++f->holding;
          if (!f->bound || s.depth > f->bound->depth) f->bound = &s;
        }
    }
  return out;
}

}  // namespace ringside::testing

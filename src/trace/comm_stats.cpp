#include "trace/comm_stats.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <map>
#include <tuple>

namespace ringside::trace {

double busbw_factor(Kind kind, int n) {
  switch (kind) {
    case Kind::all_reduce: return n < 1 ? 0.0 : 2.0 * (n - 1) / n;
    case Kind::all_gather:
    case Kind::reduce_scatter:
    case Kind::all_to_all: return n < 1 ? 0.0 : double(n - 1) / n;
    case Kind::p2p:
    case Kind::other: return 1.0;
    default: return 0.0;
  }
}

namespace {

// A transfer: what the comm stream moves (an op drawn there is not one).
bool is_transfer(const Event& e) { return e.stream == Stream::comm && (is_comm_kind(e.kind) || e.kind == Kind::other); }

// A call being gathered from its transfers.
struct Pending {
  CommCall call;
  int64_t sent = 0;         // bytes of its sends
  int64_t undirected = 0;   // the largest of its transfers without a direction
  bool has_direction = false;
};

}  // namespace

std::vector<CommCall> comm_calls(const RankTrace& r, int default_group_size) {
  std::map<std::pair<Kind, int64_t>, Pending> collectives;  // (kind, id) -> its call
  std::vector<Pending> unnamed;                              // transfers that name no call: one call each
  std::vector<CommCall> calls;
  for (const Event& e : r.events) {
    if (!is_transfer(e)) continue;
    const int n = e.group_size > 0 ? e.group_size : default_group_size;
    if (e.kind == Kind::p2p) {  // a message: its send is the call
      if (e.direction != Direction::recv) calls.push_back({e.kind, -1, e.ts_ns, e.end_ns(), e.bytes, 0});
      continue;
    }
    Pending fresh;
    fresh.call = {e.kind, e.collective, e.ts_ns, e.end_ns(), 0, n};
    Pending& p = e.collective < 0 ? unnamed.emplace_back(fresh) : collectives.try_emplace({e.kind, e.collective}, fresh).first->second;
    p.call.begin_ns = std::min(p.call.begin_ns, e.ts_ns), p.call.end_ns = std::max(p.call.end_ns, e.end_ns());
    p.call.group_size = std::max(p.call.group_size, n);
    if (e.direction == Direction::none) p.undirected = std::max(p.undirected, e.bytes);
    else p.has_direction = true;
    if (e.direction == Direction::send) add_saturating(p.sent, e.bytes);
  }
  auto finished = [](const Pending& p) {
    CommCall c = p.call;
    if (p.has_direction) {  // what the rank sent is S x factor
      const double factor = busbw_factor(c.kind, c.group_size);
      const double size = factor > 0 ? std::round(double(p.sent) / factor) : 0.0;
      c.size_bytes = size < 9e18 ? int64_t(size) : std::numeric_limits<int64_t>::max();
    } else {
      c.size_bytes = p.undirected;
    }
    return c;
  };
  for (const Pending& p : unnamed) calls.push_back(finished(p));
  for (const auto& [key, p] : collectives) calls.push_back(finished(p));
  std::sort(calls.begin(), calls.end(), [](const CommCall& a, const CommCall& b) {
    return std::tuple(a.begin_ns, a.kind, a.collective) < std::tuple(b.begin_ns, b.kind, b.collective);
  });
  return calls;
}

double CollectiveStats::algbw_gbps() const {
  if (time_ns <= 0 || size_bytes <= 0) return std::numeric_limits<double>::quiet_NaN();
  return double(size_bytes) / double(time_ns);  // bytes per ns = GB/s
}

double CollectiveStats::busbw_gbps() const {
  if (time_ns <= 0 || size_bytes <= 0) return std::numeric_limits<double>::quiet_NaN();
  return bus_bytes / double(time_ns);
}

std::vector<CollectiveStats> comm_by_kind(const std::vector<const RankTrace*>& ranks, int64_t begin_ns, int64_t end_ns) {
  std::map<Kind, CollectiveStats> by_kind;  // Kind order
  for (const RankTrace* r : ranks)
    for (const CommCall& c : comm_calls(*r, int(ranks.size()))) {
      if (c.begin_ns < begin_ns || c.begin_ns >= end_ns) continue;
      CollectiveStats& s = by_kind[c.kind];
      s.kind = c.kind;
      s.group_size = s.calls == 0 || s.group_size == c.group_size ? c.group_size : -1;
      ++s.calls;
      add_saturating(s.size_bytes, c.size_bytes);
      s.bus_bytes += c.bus_bytes();
      add_saturating(s.time_ns, c.time_ns());
    }
  std::vector<CollectiveStats> out;
  for (auto& [kind, s] : by_kind) out.push_back(s);
  return out;
}

}  // namespace ringside::trace

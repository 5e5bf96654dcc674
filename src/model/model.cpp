// The what-if model: the discrete-event replay of a schedule on a hardware profile.
#include "model/model.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <deque>
#include <functional>
#include <map>
#include <optional>
#include <tuple>

#include <unistd.h>

#include "comm/communicator.h"
#include "core/error.h"
#include "core/json_input.h"
#include "core/output.h"
#include "kernels/cpu/blas.h"
#include "model/schedule_passes.h"

namespace ringside::model {

// ---- the replay ------------------------------------------------------------------------------

namespace {

// A transfer, named by its sender, receiver, tag and seq (the same on both ends).
using Key = std::tuple<int, int, int, int64_t>;

struct Transfer {
  std::optional<int64_t> send_post, recv_post;  // modeled ns
  int64_t bytes = 0;                            // modeled (scaled) bytes
  std::optional<int64_t> start, end;
};

// "a send to rank 1, tag 5, seq 0": the transfer an event posts or waits for, for errors.
std::string transfer_of(const trace::Event& ev) {
  return detail::concat("a ", trace::to_string(ev.direction), ev.direction == trace::Direction::send ? " to" : " from", " rank ", ev.peer, ", tag ", ev.tag,
                        ", seq ", ev.seq);
}

// One point of a rank's program: an event begins or ends, or a transfer is posted.
struct Point {
  int64_t order = 0;
  enum Kind { begin, end, post } kind = begin;
  size_t event = 0;
};

// Whether an event belongs to the gradient all-reduce after (or, bucketed, inside) the backward:
// what ModelOptions::overlap_grad_reduce runs on a stream of its own.
bool is_grad_sync(const trace::Event& ev) {
  return ev.phase == "backward" && (ev.sublayer == "grad_sync" || (ev.kind == trace::Kind::sublayer && ev.name == "grad_sync"));
}

// One strategy's ranks, replayed together.
class Replay {
 public:
  Replay(trace::TraceData& out, std::vector<size_t> procs, const Hardware& hw, double bytes_scale, const ModelOptions& o)
      : out_(out), procs_(std::move(procs)), hw_(hw), scale_(bytes_scale), options_(o), topology_(hw.tiers, 1) {
    // The host's costs are the stack's, at the rates real GPUs reach (the roofline has no host).
    if (!at_roofline(hw, o))
      host_kernel_ns_ = int64_t(std::llround(o.stack.host_kernel_s * 1e9)), host_comm_ns_ = int64_t(std::llround(o.stack.host_comm_s * 1e9));
    int world = o.job_gpus;
    for (size_t p : procs_) rank_of_.push_back(out_.ranks[p].rank), world = std::max(world, gpu(out_.ranks[p].rank) + 1);
    topology_ = hw.topology(world);
    ranks_.resize(procs_.size());
    for (size_t i = 0; i < procs_.size(); ++i) build(i);
  }

  // `report`, when given, counts the points (an event's start or end, a post) as they are replayed.
  void run(ProgressReport* report) {
    size_t reported = 0;
    for (;;) {
      bool progress = false, done = true;
      size_t passed = 0;
      for (size_t i = 0; i < ranks_.size(); ++i) {
        progress |= advance(i, false);
        progress |= advance(i, true);
        done &= ranks_[i].next == ranks_[i].points.size() && ranks_[i].side_next == ranks_[i].side.size();
        passed += ranks_[i].next + ranks_[i].side_next;
      }
      if (report) report->advance(passed - reported), reported = passed;
      progress |= resolve();
      if (done) break;
      if (!progress) stuck();
    }
    finish();
  }

  size_t points() const {
    size_t n = 0;
    for (const RankState& s : ranks_) n += s.points.size() + s.side.size();
    return n;
  }

 private:
  struct RankState {
    std::vector<Point> points;
    size_t next = 0;
    int64_t t = 0;
    // Overlapped (ModelOptions::overlap_grad_reduce): the gradient all-reduce's own stream, and
    // the main program's clock after each of its points, (order, modeled ns), to start a bucket
    // where its gradients were ready.
    std::vector<Point> side;
    size_t side_next = 0;
    int64_t side_t = 0;
    std::vector<std::pair<int64_t, int64_t>> passed;
    std::vector<int64_t> start, stop;  // per event: modeled begin and end
    // The host issuing the program: when it has issued the last kernel or NCCL call (modeled
    // ns). An op starts no earlier than its issue; the host never waits for the GPU (a stream
    // wait is the GPU's), so it runs ahead wherever kernels outlast their issue.
    int64_t host = 0;
    bool posting = false;  // the last point was a post: a batch of posts is one NCCL call
    std::vector<std::pair<int64_t, int64_t>> anchors;  // (measured ns, modeled ns), for memory
  };

  trace::RankTrace& trace_of(size_t i) { return out_.ranks[procs_[i]]; }

  void build(size_t i) {
    trace::RankTrace& r = trace_of(i);
    RankState& s = ranks_[i];
    s.start.assign(r.events.size(), -1), s.stop.assign(r.events.size(), -1);
    std::vector<std::tuple<int64_t, int, Key>> sends;  // (post order, lane, transfer)
    for (size_t e = 0; e < r.events.size(); ++e) {
      const trace::Event& ev = r.events[e];
      if (ev.order < 0 || ev.end_order < ev.order)
        throw Error(detail::concat("the trace has no program order (event '", ev.name, "' of ", r.strategy, " rank ", r.rank,
                                   "): record it again with this ringside to model it"));
      const bool side = options_.overlap_grad_reduce && is_grad_sync(ev);
      std::vector<Point>& points = side ? s.side : s.points;
      if (ev.stream == trace::Stream::comm) {
        points.push_back({ev.order, Point::post, e});
        const Key k = key(r.rank, ev);
        transfers_[k].bytes = int64_t(std::llround(double(ev.bytes) * scale_));
        if (ev.direction == trace::Direction::send) sends.push_back({ev.order, side ? 1 : 0, k});
      } else {
        points.push_back({ev.order, Point::begin, e});
        points.push_back({ev.end_order, Point::end, e});
      }
    }
    auto by_order = [](const Point& a, const Point& b) { return a.order < b.order; };
    std::stable_sort(s.points.begin(), s.points.end(), by_order);
    std::stable_sort(s.side.begin(), s.side.end(), by_order);
    // Sends leave a rank's link in the order the rank posted them, each lane in its own order.
    std::stable_sort(sends.begin(), sends.end(), [](const auto& a, const auto& b) { return std::get<0>(a) < std::get<0>(b); });
    for (const auto& [order, lane, k] : sends) senders_[{r.rank, lane}].push_back(k);
  }

  // `from` plus `seconds`, in modeled ns. Past the trace format's range (about 104 days) the
  // replay stops, naming the op or transfer that got there: int64 ns would overflow not much
  // further on, and a timeline nobody can read back answers nothing.
  int64_t after(int64_t from, double seconds, const std::function<std::string()>& what) const {
    const double ns = double(from) + seconds * 1e9;
    if (!(ns <= double(trace::kMaxTimeNs)))
      throw Error(detail::concat("the modeled time passes ", trace::kMaxTimeUs / 1e6, " s, the trace format's range (about ",
                                 "104 days), at ", what(), " on ", hw_.name,
                                 ": the profile is too slow for this layer (check its units) or the layer too large"));
    return from + int64_t(std::llround(seconds * 1e9));
  }

  static Key key(int rank, const trace::Event& ev) {
    const bool send = ev.direction == trace::Direction::send;
    return {send ? rank : ev.peer, send ? ev.peer : rank, ev.tag, ev.seq};
  }

  // The main program's clock once it had passed every point before program order `order`.
  static int64_t clock_before(const RankState& s, int64_t order) {
    const auto it = std::lower_bound(s.passed.begin(), s.passed.end(), std::make_pair(order, INT64_MIN));
    return it == s.passed.begin() ? 0 : std::prev(it)->second;
  }

  // Runs rank i's program (side: its gradient all-reduce's stream, when overlapped) until it must
  // wait for a transfer not yet modeled; returns whether it moved.
  bool advance(size_t i, bool side) {
    RankState& s = ranks_[i];
    trace::RankTrace& r = trace_of(i);
    std::vector<Point>& points = side ? s.side : s.points;
    size_t& next = side ? s.side_next : s.next;
    int64_t& now = side ? s.side_t : s.t;
    bool moved = false;
    while (next < points.size()) {
      const Point& p = points[next];
      const trace::Event& ev = r.events[p.event];
      if (side) {
        // A bucket's all-reduce starts once the backward has passed the point that posted it.
        if (s.next < s.points.size() && s.points[s.next].order < p.order) return moved;
        now = std::max(now, clock_before(s, p.order));
      } else if (p.kind == Point::end && ev.kind == trace::Kind::phase && ev.name == "backward" && !s.side.empty()) {
        // The backward is done when every bucket is (Megatron's finish_grad_sync).
        if (s.side_next < s.side.size()) return moved;
        now = std::max(now, s.side_t);
      }
      if (p.kind == Point::post) {
        Transfer& t = transfers_[key(r.rank, ev)];
        int64_t posted = now;
        if (!side) {
          if (!s.posting) s.host += host_comm_ns_;
          s.posting = true;
          posted = std::max(now, s.host);
        }
        (ev.direction == trace::Direction::send ? t.send_post : t.recv_post) = posted;
        s.start[p.event] = posted;
      } else if (p.kind == Point::begin) {
        if (!side && ev.stream == trace::Stream::compute && trace::is_work(ev.kind) && !trace::is_container(ev.kind)) {
          s.host += host_kernel_ns_ * op_kernels(ev, hw_, options_);
          s.posting = false;
          now = std::max(now, s.host);
        }
        s.start[p.event] = now;
        s.anchors.push_back({ev.ts_ns, now});
      } else {
        if (ev.kind == trace::Kind::wait) {
          if (ev.seq >= 0) {
            const auto it = transfers_.find(key(r.rank, ev));
            if (it == transfers_.end())
              throw Error(detail::concat("the trace is incomplete: ", r.strategy, " rank ", r.rank, " waits for '", ev.name,
                                         "' (", transfer_of(ev), ") that neither end posted"));
            if (!it->second.end) return moved;  // blocked: its transfer is not modeled yet
            now = std::max(now, *it->second.end);
          }
        } else if (!trace::is_container(ev.kind)) {
          // A compute op, at the rate this GPU achieves for its kind and shape.
          const double bytes = double(ev.bytes) * scale_, sec = op_seconds(ev, bytes, hw_, options_);
          auto what = [&] { return detail::concat("op '", ev.name, "' of ", r.strategy, " rank ", r.rank); };
          check_op_within_hardware(ev, bytes, sec, hw_, options_, what);
          now = std::max(now, after(s.start[p.event], sec, what));
        }
        s.stop[p.event] = now;
        s.anchors.push_back({ev.end_ns(), now});
      }
      if (!side && !s.side.empty()) s.passed.push_back({p.order, now});
      ++next;
      moved = true;
    }
    return moved;
  }

  // Models every transfer whose two ends are posted and whose sender's link is free.
  bool resolve() {
    bool any = false;
    for (auto& [lane, q] : senders_) {
      const int sender = lane.first;
      while (!q.empty()) {
        Transfer& t = transfers_[q.front()];
        if (!t.send_post || !t.recv_post) break;  // FIFO: later sends wait behind this one
        const int receiver = std::get<1>(q.front());
        const Tier& link = hw_.tiers[topology_.link(gpu(sender), gpu(receiver))];
        const int64_t start = std::max({*t.send_post, *t.recv_post, link_free_[lane]});
        t.start = start;
        auto what = [&] {
          return detail::concat("the transfer from rank ", sender, " to rank ", receiver, " (tag ", std::get<2>(q.front()),
                                ", seq ", std::get<3>(q.front()), ", ", t.bytes, " bytes)");
        };
        const double sec = transfer_seconds(double(t.bytes), link, hw_, options_);
        check_transfer_within_hardware(double(t.bytes), sec, link, hw_, what);
        t.end = after(start, sec, what);
        link_free_[lane] = *t.end;
        q.pop_front();
        any = true;
      }
    }
    return any;
  }

  [[noreturn]] void stuck() {
    for (size_t i = 0; i < ranks_.size(); ++i) {
      const RankState& s = ranks_[i];
      if (s.next == s.points.size() && s.side_next == s.side.size()) continue;
      const trace::Event& ev = trace_of(i).events[s.side_next < s.side.size() ? s.side[s.side_next].event : s.points[s.next].event];
      throw Error(detail::concat("the schedule cannot finish: ", trace_of(i).strategy, " rank ", rank_of_[i], " waits for '",
                                 ev.name, "' (", transfer_of(ev), ") that is not posted on both ends (a trace cut short by a failure?)"));
    }
    throw Error("the schedule cannot finish");
  }

  // Writes the modeled times into the events and the memory samples.
  void finish() {
    for (size_t i = 0; i < ranks_.size(); ++i) {
      RankState& s = ranks_[i];
      trace::RankTrace& r = trace_of(i);
      for (size_t e = 0; e < r.events.size(); ++e) {
        trace::Event& ev = r.events[e];
        if (ev.stream == trace::Stream::comm) {
          const Transfer& t = transfers_[key(r.rank, ev)];
          ev.ts_ns = t.start.value_or(s.start[e]);
          ev.dur_ns = t.end ? *t.end - ev.ts_ns : 0;
        } else {
          ev.ts_ns = s.start[e];
          ev.dur_ns = std::max<int64_t>(0, s.stop[e] - s.start[e]);
          // Overlapped, a bucket's packing and reductions run beside the backward, as NCCL's
          // kernels do on their own stream: drawn and counted with the communication, not on
          // the compute lane they would overlap.
          if (options_.overlap_grad_reduce && is_grad_sync(ev)) ev.stream = trace::Stream::comm;
        }
        ev.bytes = int64_t(std::llround(double(ev.bytes) * scale_));
      }
      // Each memory sample moves to the modeled time of the last point measured before it.
      std::stable_sort(s.anchors.begin(), s.anchors.end());
      int64_t last = 0;
      for (trace::MemorySample& m : r.memory) {
        auto it = std::upper_bound(s.anchors.begin(), s.anchors.end(), std::make_pair(m.ts_ns, INT64_MAX));
        const int64_t t = it == s.anchors.begin() ? 0 : std::prev(it)->second;
        m.ts_ns = last = std::max(last, t);
        for (int64_t& b : m.bytes) b = int64_t(std::llround(double(b) * scale_));
      }
    }
  }

  trace::TraceData& out_;
  std::vector<size_t> procs_;
  std::vector<int> rank_of_;
  // A rank's GPU: the placement given, else its own number (consecutive ranks fill each domain).
  int gpu(int rank) const {
    return size_t(rank) < options_.gpu_of.size() ? options_.gpu_of[size_t(rank)] : rank;
  }

  const Hardware& hw_;
  int64_t host_kernel_ns_ = 0, host_comm_ns_ = 0;
  double scale_;
  const ModelOptions& options_;
  Topology topology_;  // the job's GPUs on the profile's tiers: every transfer's link
  std::vector<RankState> ranks_;
  std::map<Key, Transfer> transfers_;
  // Per (sender, lane): lane 0 the rank's program, 1 its overlapped gradient all-reduce.
  std::map<std::pair<int, int>, std::deque<Key>> senders_;
  std::map<std::pair<int, int>, int64_t> link_free_;
};

}  // namespace

double schedule_events_bound(int P, const LayerConfig& cfg, Layout layout) {
  const double documents = per_document(layout) ? double(cfg.docs.size()) + 1 : 0;
  return 64.0 * P * P + 256.0 * P + 24.0 * P * P * documents;
}

double schedule_bytes(int P, const LayerConfig& cfg, Layout layout) { return 1024.0 * schedule_events_bound(P, cfg, layout); }

namespace {

// Whether the recorded run recomputed selectively (its configuration says so).
bool selective_recompute(const trace::TraceData& schedule) {
  for (const trace::RankTrace& r : schedule.ranks) {
    const nlohmann::json* config = schedule.run.config_of(r.strategy);
    if (config && config->contains("recompute") && (*config)["recompute"] == "selective") return true;
  }
  return false;
}

}  // namespace

trace::TraceData model_trace(const trace::TraceData& schedule, const Hardware& hw, const ModelOptions& o, ProgressReport* progress) {
  check_model_options(hw, o);
  // A modeled trace's times and bytes are the model's already: model the recorded one.
  if (schedule.run.modeled)
    throw ConfigError("this trace is already modeled (otherData.modeled): model the trace the run recorded, or a dry run");
  // Traces record fp32 runs (otherData.dtype); bf16 halves every byte.
  const double recorded = schedule.run.dtype == "float64" ? 8 : 4, modeled = element_bytes(o.dtype);
  if (progress)
    progress->phase("preparing the replay on " + hw.name + " (the schedule copied, the software's passes, each rank's program)",
                    schedule.ranks.size(), "ranks");
  trace::TraceData out = schedule;
  out.flows.clear();
  // A measured trace with its modeled twins: model what was recorded, not the twins.
  std::erase_if(out.ranks, [&](const trace::RankTrace& r) { return schedule.run.group(r.strategy) != nullptr; });
  out.run.drop_groups();
  // What the implementations do differently from ringside's own code (schedule_passes.h).
  join_step_calls(out);
  if (o.dtype == "fp8") quantize_before_gather(out);
  if (o.stack.selective_recomputes_every_second_gemm && selective_recompute(schedule)) recompute_every_second_gemm(out);
  if (tp_comm_overlap_of(o)) overlap_tp_comm(out, o.stack.tp_overlap_sms);
  std::map<std::string, std::vector<size_t>> groups;
  for (size_t p = 0; p < out.ranks.size(); ++p) groups[out.ranks[p].strategy].push_back(p);
  std::vector<Replay> replays;
  replays.reserve(groups.size());  // built in place, never moved
  for (auto& [strategy, procs] : groups) {
    replays.emplace_back(out, procs, hw, modeled / recorded, o);
    if (progress) progress->advance(procs.size());
  }
  if (progress) {
    size_t points = 0;
    for (const Replay& r : replays) points += r.points();
    progress->phase("replaying the schedule on " + hw.name, points, "event starts and ends");
  }
  for (Replay& r : replays) r.run(progress);
  mark_modeled(out.run, hw, o);
  out.run.dtype = o.dtype == "fp32" ? "float32" : "bfloat16";
  out.run.device = hw.name + " (modeled)";
  return out;
}

}  // namespace ringside::model

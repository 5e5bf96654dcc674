// The what-if model: hardware profiles and the discrete-event replay of a schedule.
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

namespace ringside::model {

// The built-in profiles, embedded from src/model/hardware/*.json by CMake.
extern const std::vector<std::pair<std::string, std::string>> kBuiltinProfiles;

// ---- profiles ------------------------------------------------------------------------------

namespace {

// A number in [lo, hi]: the ranges keep every modeled time finite and catch unit slips (a
// peak of 989 meant as TFLOP/s is 989 FLOP/s).
double in_range(const nlohmann::json& j, const std::string& key, const std::string& source, const std::string& where,
                double lo, double hi) {
  const auto it = j.find(key);
  if (it == j.end() || !it->is_number() || !std::isfinite(it->get<double>()) || it->get<double>() < lo || it->get<double>() > hi)
    throw ConfigError(detail::concat(source, ": ", where, key, " must be a number in [", lo, ", ", hi, "]"));
  return it->get<double>();
}

const nlohmann::json& object(const nlohmann::json& j, const std::string& key, const std::string& source) {
  const auto it = j.find(key);
  if (it == j.end() || !it->is_object()) throw ConfigError(source + ": " + key + " must be an object");
  return *it;
}

}  // namespace

nlohmann::json Hardware::to_json() const {
  nlohmann::json peaks = {{"bf16", peak_flops_bf16}, {"fp32", peak_flops_fp32}};
  if (peak_flops_fp8 > 0) peaks["fp8"] = peak_flops_fp8;
  nlohmann::json j = {{"name", name},
          {"description", description},
          {"peak_flops", peaks},
          {"memory_bandwidth_GBps", memory_bandwidth / 1e9},
          {"memory_GB", memory_bytes / 1e9},
          {"gpus_per_node", gpus_per_node},
          {"intra_node", {{"bandwidth_GBps", intra_bandwidth / 1e9}, {"latency_us", intra_latency_s * 1e6}}},
          {"inter_node", {{"bandwidth_GBps", inter_bandwidth / 1e9}, {"latency_us", inter_latency_s * 1e6}}},
          {"source", source}};
  if (efficiency.present) j["efficiency"] = efficiency_json(efficiency);
  return j;
}

Hardware parse_hardware(const nlohmann::json& j, const std::string& source) {
  if (!j.is_object()) throw ConfigError(source + ": a hardware profile is a JSON object");
  Hardware h;
  auto str = [&](const char* k) {
    const auto it = j.find(k);
    if (it == j.end() || !it->is_string()) throw ConfigError(source + ": " + k + " must be a string");
    return it->get<std::string>();
  };
  h.name = str("name");
  // The name labels tables, traces and the viewer's groups: short, and printable.
  if (h.name.empty() || h.name.size() > 64 ||
      std::any_of(h.name.begin(), h.name.end(), [](char c) { return c < 0x20 || c > 0x7e; }))
    throw ConfigError(source + ": name must be 1 to 64 printable characters");
  h.description = j.contains("description") ? str("description") : "";
  h.source = j.contains("source") ? str("source") : "";
  const nlohmann::json& peak = object(j, "peak_flops", source);
  h.peak_flops_bf16 = in_range(peak, "bf16", source, "peak_flops.", 1e6, 1e18);  // FLOP/s
  h.peak_flops_fp32 = in_range(peak, "fp32", source, "peak_flops.", 1e6, 1e18);
  h.peak_flops_fp8 = peak.contains("fp8") ? in_range(peak, "fp8", source, "peak_flops.", 1e6, 1e18) : 0;
  h.memory_bandwidth = in_range(j, "memory_bandwidth_GBps", source, "", 1e-3, 1e6) * 1e9;
  h.memory_bytes = in_range(j, "memory_GB", source, "", 1e-3, 1e6) * 1e9;
  const double gpn = in_range(j, "gpus_per_node", source, "", 1, 1 << 20);
  if (gpn != std::floor(gpn)) throw ConfigError(source + ": gpus_per_node must be a whole number");
  h.gpus_per_node = int(gpn);
  const nlohmann::json& in = object(j, "intra_node", source);
  const nlohmann::json& out = object(j, "inter_node", source);
  h.intra_bandwidth = in_range(in, "bandwidth_GBps", source, "intra_node.", 1e-3, 1e6) * 1e9;
  h.inter_bandwidth = in_range(out, "bandwidth_GBps", source, "inter_node.", 1e-3, 1e6) * 1e9;
  h.intra_latency_s = in_range(in, "latency_us", source, "intra_node.", 0, 1e6) * 1e-6;  // 0: an ideal link
  h.inter_latency_s = in_range(out, "latency_us", source, "inter_node.", 0, 1e6) * 1e-6;
  if (j.contains("efficiency")) h.efficiency = parse_efficiency(j["efficiency"], source);
  if (h.efficiency.present && h.efficiency.gemm.fp8 > 0 && h.peak_flops_fp8 == 0)
    throw ConfigError(source + ": efficiency.gemm.fp8 needs peak_flops.fp8");
  for (const auto& [family, k] : h.efficiency.attention)
    for (const AttentionCurve* c : {&k.forward, &k.forward_causal, &k.backward, &k.backward_causal})
      if (c->rate > h.peak_flops_bf16)
        throw ConfigError(detail::concat(source, ": efficiency.attention.", family, ": ", c->rate / 1e12,
                                         " TFLOP/s is above the bf16 peak (", h.peak_flops_bf16 / 1e12, ")"));
  return h;
}

std::vector<std::string> hardware_names() {
  std::vector<std::string> names;
  for (const auto& [name, text] : kBuiltinProfiles) names.push_back(name);
  names.push_back("this-machine");
  return names;
}

Hardware load_hardware(const std::string& name_or_path) {
  for (const auto& [name, text] : kBuiltinProfiles)
    if (name == name_or_path) return parse_hardware(nlohmann::json::parse(text), name);
  if (name_or_path == "this-machine") return measure_this_machine();
  if (output::is_regular(name_or_path)) {
    // A profile is a few hundred bytes: anything past 1 MiB is not one (and is not read whole).
    const std::string text = output::read_input(name_or_path, "--hw", 1u << 20);
    try {
      return parse_hardware(parse_json(text, name_or_path), detail::shown_input(name_or_path, 200));
    } catch (const ConfigError&) {
      throw;
    } catch (const Error& e) {
      throw ConfigError(e.what());  // a profile that is not JSON is a bad --hw, before any work
    }
  }
  std::string names;
  for (const std::string& n : hardware_names()) names += (names.empty() ? "" : ", ") + n;
  throw ConfigError("--hw " + detail::shown_input(name_or_path) + ": not a profile (" + names + ") nor a JSON file");
}

Hardware measure_this_machine() {
  using clock = std::chrono::steady_clock;
  auto best_of = [](int reps, auto&& fn) {
    double best = 1e300;
    for (int i = 0; i < reps; ++i) {
      const auto t0 = clock::now();
      fn();
      best = std::min(best, std::chrono::duration<double>(clock::now() - t0).count());
    }
    return std::max(best, 1e-9);
  };
  Hardware h;
  h.name = "this-machine";
  h.description = "this machine, measured now: one core's sgemm, memcpy as memory and link, a local ping-pong";
  h.source = "measured by ringside (sgemm n = 1024 best of 3; memcpy 64 MiB best of 3; 200 round trips)";
  kernels::cpu::set_blas_single_threaded();
  const int64_t n = 1024;
  std::vector<float> a(size_t(n * n), 0.5f), b(a), c(a.size());
  const double gemm_s = best_of(3, [&] { kernels::cpu::gemm(false, false, n, n, n, 1.f, a.data(), n, b.data(), n, 0.f, c.data(), n); });
  h.peak_flops_fp32 = h.peak_flops_bf16 = 2.0 * double(n * n * n) / gemm_s;  // no bf16 units: the same
  const size_t bytes = 64u << 20;
  std::vector<char> src(bytes, 1), dst(bytes);
  const double copy_s = best_of(3, [&] { std::memcpy(dst.data(), src.data(), bytes); });
  h.memory_bandwidth = h.intra_bandwidth = h.inter_bandwidth = double(bytes) / copy_s;
  // Latency: half a round trip of an 8-byte message between two local ranks.
  double rtt = 0;
  run_local(2, [&](Communicator& comm) {
    int64_t v = 0;
    const auto t0 = clock::now();
    for (int i = 0; i < 200; ++i) {
      if (comm.rank() == 0) comm.send(&v, 8, 1, 7), comm.recv(&v, 8, 1, 7);
      else comm.recv(&v, 8, 0, 7), comm.send(&v, 8, 0, 7);
    }
    if (comm.rank() == 0) rtt = std::chrono::duration<double>(clock::now() - t0).count() / 200;
  });
  h.intra_latency_s = h.inter_latency_s = rtt / 2;
  h.memory_bytes = double(sysconf(_SC_PHYS_PAGES)) * double(sysconf(_SC_PAGESIZE));
  h.gpus_per_node = 1 << 20;  // one process: every rank in one "node"
  h.memory_shared = true;     // and one memory for all of them
  return h;
}

// ---- the dry run ------------------------------------------------------------------------------

trace::TraceData dry_run(const Strategy& st, const LayerConfig& cfg, int P, MemoryTracker& tracker,
                         std::vector<RankResult>* results) {
  trace::TraceData t;
  trace::Clock clock;
  clock.origin_ns = trace::Clock::steady_now_ns();
  TraceSink sink{clock, &t.ranks};
  LocalOptions lo;
  lo.dry_run = true;
  lo.timeout_s = 600;  // 2P threads on a few cores: a dry run is quick, but waits may be long
  std::vector<RankResult> r = run_strategy_local(st, cfg, P, DType::f32, tracker, lo, &sink);
  if (results) *results = std::move(r);
  t.other = {{"producer", "ringside model (dry run)"}, {"config", cfg.to_json()}, {"layout", to_string(cfg.cp_layout())},
             {"ranks", P}, {"backend", "dry run"}, {"dtype", "float32"}, {"clock", "dry run: program order only"}};
  return t;
}

// ---- the replay ------------------------------------------------------------------------------

namespace {

bool is_container(const std::string& cat) {
  return cat == "phase" || cat == "sublayer" || cat == "ring_step" || cat == "collective";
}

// A transfer, named by its sender, receiver, tag and seq (the same on both ends).
using Key = std::tuple<int, int, int, int64_t>;

struct Transfer {
  std::optional<int64_t> send_post, recv_post;  // modeled ns
  int64_t bytes = 0;                            // modeled (scaled) bytes
  std::optional<int64_t> start, end;
};

// "a send to rank 1, tag 5, seq 0": the transfer an event posts or waits for, for errors.
std::string transfer_of(const trace::Event& ev) {
  return detail::concat("a ", ev.direction, ev.direction == "send" ? " to" : " from", " rank ", ev.peer, ", tag ", ev.tag,
                        ", seq ", ev.seq);
}

// One point of a rank's program: an event begins or ends, or a transfer is posted.
struct Point {
  int64_t order = 0;
  enum Kind { begin, end, post } kind = begin;
  size_t event = 0;
};

// One strategy's ranks, replayed together.
class Replay {
 public:
  Replay(trace::TraceData& out, std::vector<size_t> procs, const Hardware& hw, double bytes_scale, const ModelOptions& o)
      : out_(out), procs_(std::move(procs)), hw_(hw), scale_(bytes_scale), options_(o), node_of_(o.node_of) {
    for (size_t p : procs_) rank_of_.push_back(out_.ranks[p].rank);
    ranks_.resize(procs_.size());
    for (size_t i = 0; i < procs_.size(); ++i) build(i);
  }

  void run() {
    for (;;) {
      bool progress = false, done = true;
      for (size_t i = 0; i < ranks_.size(); ++i) {
        progress |= advance(i);
        done &= ranks_[i].next == ranks_[i].points.size();
      }
      progress |= resolve();
      if (done) break;
      if (!progress) stuck();
    }
    finish();
  }

 private:
  struct RankState {
    std::vector<Point> points;
    size_t next = 0;
    int64_t t = 0;
    std::vector<int64_t> start, stop;  // per event: modeled begin and end
    std::vector<std::pair<int64_t, int64_t>> anchors;  // (measured ns, modeled ns), for memory
  };

  trace::RankTrace& trace_of(size_t i) { return out_.ranks[procs_[i]]; }

  void build(size_t i) {
    trace::RankTrace& r = trace_of(i);
    RankState& s = ranks_[i];
    s.start.assign(r.events.size(), -1), s.stop.assign(r.events.size(), -1);
    std::vector<std::pair<int64_t, Key>> sends;  // (post order, transfer)
    for (size_t e = 0; e < r.events.size(); ++e) {
      const trace::Event& ev = r.events[e];
      if (ev.order < 0 || ev.end_order < ev.order)
        throw Error(detail::concat("the trace has no program order (event '", ev.name, "' of ", r.strategy, " rank ", r.rank,
                                   "): record it again with this ringside to model it"));
      if (ev.stream == trace::Stream::comm) {
        s.points.push_back({ev.order, Point::post, e});
        const Key k = key(r.rank, ev);
        transfers_[k].bytes = int64_t(std::llround(double(ev.bytes) * scale_));
        if (ev.direction == "send") sends.push_back({ev.order, k});
      } else {
        s.points.push_back({ev.order, Point::begin, e});
        s.points.push_back({ev.end_order, Point::end, e});
      }
    }
    std::stable_sort(s.points.begin(), s.points.end(), [](const Point& a, const Point& b) { return a.order < b.order; });
    // Sends leave a rank's link in the order the rank posted them.
    std::stable_sort(sends.begin(), sends.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
    for (const auto& [order, k] : sends) senders_[r.rank].push_back(k);
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
    const bool send = ev.direction == "send";
    return {send ? rank : ev.peer, send ? ev.peer : rank, ev.tag, ev.seq};
  }

  // Runs rank i until it must wait for a transfer not yet modeled; returns whether it moved.
  bool advance(size_t i) {
    RankState& s = ranks_[i];
    trace::RankTrace& r = trace_of(i);
    bool moved = false;
    while (s.next < s.points.size()) {
      const Point& p = s.points[s.next];
      const trace::Event& ev = r.events[p.event];
      if (p.kind == Point::post) {
        Transfer& t = transfers_[key(r.rank, ev)];
        (ev.direction == "send" ? t.send_post : t.recv_post) = s.t;
        s.start[p.event] = s.t;
      } else if (p.kind == Point::begin) {
        s.start[p.event] = s.t;
        s.anchors.push_back({ev.ts_ns, s.t});
      } else {
        if (ev.cat == "wait") {
          if (ev.seq >= 0) {
            const auto it = transfers_.find(key(r.rank, ev));
            if (it == transfers_.end())
              throw Error(detail::concat("the trace is incomplete: ", r.strategy, " rank ", r.rank, " waits for '", ev.name,
                                         "' (", transfer_of(ev), ") that neither end posted"));
            if (!it->second.end) return moved;  // blocked: its transfer is not modeled yet
            s.t = std::max(s.t, *it->second.end);
          }
        } else if (!is_container(ev.cat)) {
          // A compute op, at the rate this GPU achieves for its kind and shape.
          const double sec = op_seconds(ev, double(ev.bytes) * scale_, hw_, options_);
          s.t = std::max(s.t, after(s.start[p.event], sec, [&] {
                               return detail::concat("op '", ev.name, "' of ", r.strategy, " rank ", r.rank);
                             }));
        }
        s.stop[p.event] = s.t;
        s.anchors.push_back({ev.end_ns(), s.t});
      }
      ++s.next;
      moved = true;
    }
    return moved;
  }

  // Models every transfer whose two ends are posted and whose sender's link is free.
  bool resolve() {
    bool any = false;
    for (auto& [sender, q] : senders_) {
      while (!q.empty()) {
        Transfer& t = transfers_[q.front()];
        if (!t.send_post || !t.recv_post) break;  // FIFO: later sends wait behind this one
        const int receiver = std::get<1>(q.front());
        const bool same_node = node(sender) == node(receiver);
        const int64_t start = std::max({*t.send_post, *t.recv_post, link_free_[sender]});
        t.start = start;
        t.end = after(start, transfer_seconds(double(t.bytes), same_node, hw_, options_), [&] {
          return detail::concat("the transfer from rank ", sender, " to rank ", receiver, " (tag ", std::get<2>(q.front()),
                                ", seq ", std::get<3>(q.front()), ", ", t.bytes, " bytes)");
        });
        link_free_[sender] = *t.end;
        q.pop_front();
        any = true;
      }
    }
    return any;
  }

  [[noreturn]] void stuck() {
    for (size_t i = 0; i < ranks_.size(); ++i) {
      const RankState& s = ranks_[i];
      if (s.next == s.points.size()) continue;
      const trace::Event& ev = trace_of(i).events[s.points[s.next].event];
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
  // A rank's node: the placement given, else consecutive ranks fill each node.
  int node(int rank) const {
    return size_t(rank) < node_of_.size() ? node_of_[size_t(rank)] : rank / hw_.gpus_per_node;
  }

  const Hardware& hw_;
  double scale_;
  const ModelOptions& options_;
  const std::vector<int>& node_of_;
  std::vector<RankState> ranks_;
  std::map<Key, Transfer> transfers_;
  std::map<int, std::deque<Key>> senders_;
  std::map<int, int64_t> link_free_;
};

}  // namespace

void check_model_options(const Hardware& hw, const ModelOptions& o) {
  if (o.dtype != "bf16" && o.dtype != "fp32" && o.dtype != "fp8") throw ConfigError("--dtype " + o.dtype + ": bf16, fp32 or fp8");
  if (o.merge != "fused" && o.merge != "unfused") throw ConfigError("--merge " + o.merge + ": fused or unfused");
  if (o.efficiency != "achieved" && o.efficiency != "ideal")
    throw ConfigError("--efficiency " + o.efficiency + ": achieved or ideal");
  if (o.dtype == "fp8" && hw.peak_flops_fp8 == 0)
    throw ConfigError("--dtype fp8: " + hw.name + " has no FP8 tensor cores (its profile has no peak_flops.fp8)");
  if (o.dtype == "fp8" && o.efficiency == "achieved" && hw.efficiency.present && hw.efficiency.gemm.fp8 == 0)
    throw ConfigError("--dtype fp8: " + hw.name + "'s profile has no achieved FP8 GEMM fraction (efficiency.gemm.fp8)");
  if (!o.attention_kernel.empty()) {
    if (o.attention_kernel != "fa2" && o.attention_kernel != "fa3" && o.attention_kernel != "cudnn")
      throw ConfigError("--attention-kernel " + o.attention_kernel + ": fa2, fa3 or cudnn");
    if (o.efficiency == "achieved" && hw.efficiency.present && !hw.efficiency.attention.contains(o.attention_kernel)) {
      std::string have;
      for (const auto& [family, k] : hw.efficiency.attention) have += (have.empty() ? "" : ", ") + family;
      throw ConfigError("--attention-kernel " + o.attention_kernel + ": " + hw.name + " has no published rates for it (it has " +
                        have + ")");
    }
  }
}

std::string attention_kernel_of(const Hardware& hw, const ModelOptions& o) {
  if (o.efficiency == "ideal" || !hw.efficiency.present) return "";
  return o.attention_kernel.empty() ? hw.efficiency.default_kernel : o.attention_kernel;
}

std::string rates_summary(const Hardware& hw, const ModelOptions& o, const std::string& wrap) {
  const bool achieved = o.efficiency != "ideal" && hw.efficiency.present;
  const Efficiency& e = hw.efficiency;
  auto link = [&](double line, double fraction, double latency) {
    return achieved ? detail::concat(std::lround(100 * fraction), "% of ", line / 1e9, " GB/s + ", latency * 1e6, " us")
                    : detail::concat(line / 1e9, " GB/s + ", latency * 1e6, " us");
  };
  const std::string across = link(hw.inter_bandwidth, e.inter_link, hw.inter_latency_s) + " across nodes";
  const std::string links =
      hw.gpus_per_node == 1 ? across + " (one GPU per node)"
                            : detail::concat(link(hw.intra_bandwidth, e.intra_link, hw.intra_latency_s), " inside a node of ",
                                             hw.gpus_per_node, " GPUs, ", across);
  const double peak = hw.peak_flops(o.dtype);
  if (!achieved)
    return detail::concat("ops at ", peak / 1e12, " TFLOP/s or ", hw.memory_bandwidth / 1e9, " GB/s;", wrap, "transfers at ", links,
                          o.efficiency == "ideal" ? " (the roofline: --efficiency ideal)" : " (the roofline: the profile states no efficiency)");
  return detail::concat("GEMMs up to ", std::lround(100 * e.gemm.of(o.dtype)), "% of ", peak / 1e12, " TFLOP/s ", o.dtype == "fp8" ? "FP8 " : "",
                        "(by shape), attention at ", attention_kernel_of(hw, o), "'s published rates,", wrap, "memory-bound ops at ",
                        std::lround(100 * e.memory_fraction), "% of ", hw.memory_bandwidth / 1e9, " GB/s + ", e.launch_s * 1e6,
                        " us a kernel;", wrap, "transfers at ", links);
}

namespace {

// The shapes the traced backend writes into an op's detail ("m=8192 n=6144 k=4096",
// "b=1 sq=4096 sk=8192 H=32 Hkv=8 d=128 causal ..."); false when the trace does not give them.
bool gemm_shape(const std::string& detail, long long& m, long long& n, long long& k) {
  return std::sscanf(detail.c_str(), "m=%lld n=%lld k=%lld", &m, &n, &k) == 3 && m > 0 && n > 0 && k > 0;
}

bool attention_call(const trace::Event& ev, AttentionCall& call) {
  long long b, sq, sk, H, Hkv, d;
  if (std::sscanf(ev.detail.c_str(), "b=%lld sq=%lld sk=%lld H=%lld Hkv=%lld d=%lld", &b, &sq, &sk, &H, &Hkv, &d) != 6 ||
      b <= 0 || sq <= 0 || sk <= 0 || H <= 0 || d <= 0)
    return false;
  call.b = b, call.sq = sq, call.sk = sk, call.H = H, call.d = d;
  call.backward = ev.name == "attention_backward";
  // The visible pairs, from the FLOPs (4 d per pair a head; the backward counts 2.5 forwards).
  const double pairs = ev.flops / (call.backward ? 2.5 : 1.0) / (4.0 * double(d) * double(b) * double(H));
  call.keys_per_query = pairs / double(sq);
  call.masked = pairs < double(sq) * double(sk) - 0.5;
  return true;
}

}  // namespace

double op_seconds(const trace::Event& ev, double bytes, const Hardware& hw, const ModelOptions& o) {
  if (ev.stream != trace::Stream::compute || ev.cat == "wait" || is_container(ev.cat)) return 0;
  // Only GEMMs run in FP8 (TransformerEngine's recipe): every other op at bf16's rates.
  const std::string dtype = o.dtype == "fp8" && ev.cat != "gemm" ? "bf16" : o.dtype;
  const double peak = hw.peak_flops(dtype);
  const Efficiency& e = hw.efficiency;
  if (o.efficiency == "ideal" || !e.present) return std::max(ev.flops / peak, bytes / hw.memory_bandwidth);
  // Achieved: memory-bound ops at the achievable fraction of HBM; GEMMs and attention at their
  // shape's rate, and never faster than their bytes allow; every kernel pays its launch.
  double kernels = 1;
  if (ev.sublayer == "attention" && (ev.name == "lse_merge" || ev.name == "add") && o.dtype != "fp32") {
    // The running output, lse and gradients a ring step merges into are fp32 accumulators in
    // every implementation (ring-flash-attention, TransformerEngine), the block's own in bf16:
    // per element 4 read + 4 written + 2 read, not the 2 + 2 + 2 of a bf16 merge.
    bytes *= 10.0 / 6.0;
    if (ev.name == "lse_merge" && o.merge == "unfused") bytes *= 3.8, kernels = 9;  // 38 bytes an element
  }
  const double memory_s = bytes / (hw.memory_bandwidth * e.memory_fraction);
  double compute_s = 0;
  if (ev.flops > 0 && ev.cat == "gemm") {
    const double mamf = e.gemm.of(dtype);
    long long m = 0, n = 0, k = 0;
    const bool shaped = gemm_shape(ev.detail, m, n, k);
    compute_s = ev.flops / (shaped ? gemm_rate(e, peak, mamf, m, n, k) : peak * mamf);
  } else if (ev.flops > 0 && ev.cat == "attention") {
    const AttentionKernel& kernel = e.attention.at(attention_kernel_of(hw, o));
    AttentionCall call;
    double rate = 0;
    if (attention_call(ev, call)) {
      rate = attention_rate(kernel, call, e.sms);
    } else {
      const bool backward = ev.name == "attention_backward";
      rate = (backward ? kernel.backward : kernel.forward).rate;
    }
    // The kernels' rates are bf16's; fp32 (which no fused attention kernel runs) scales by the peaks.
    compute_s = ev.flops / (rate * (o.dtype == "fp32" ? hw.peak_flops_fp32 / hw.peak_flops_bf16 : 1.0));
  } else if (ev.flops > 0) {
    compute_s = ev.flops / peak;
  }
  return std::max(compute_s, memory_s) + kernels * e.launch_s;
}

RingThreshold ring_threshold(const Hardware& hw, const ModelOptions& o, bool same_node, double kv_per_q) {
  const double B = same_node ? hw.intra_bandwidth : hw.inter_bandwidth;
  const double bytes = o.dtype == "fp32" ? 4.0 : 2.0;  // of K and V; fp8 keeps bf16's
  const double F = hw.peak_flops(o.dtype == "fp32" ? "fp32" : "bf16");
  if (o.efficiency == "ideal" || !hw.efficiency.present) return {kv_per_q * F / B * bytes / 2, "(Hkv/H) F/B"};
  const AttentionCurve& k = hw.efficiency.attention.at(attention_kernel_of(hw, o)).forward;
  const double B_nccl = B * (same_node ? hw.efficiency.intra_link : hw.efficiency.inter_link);
  const double R = k.rate * F / hw.peak_flops_bf16;  // the kernels' rates are bf16's
  return {std::max(0.0, kv_per_q * R / B_nccl * bytes / 2 - k.k_half), "(Hkv/H) R/B_nccl - k_half"};
}

double transfer_seconds(double bytes, bool same_node, const Hardware& hw, const ModelOptions& o) {
  const bool achieved = o.efficiency != "ideal" && hw.efficiency.present;
  const double line = same_node ? hw.intra_bandwidth : hw.inter_bandwidth;
  const double link = achieved ? (same_node ? hw.efficiency.intra_link : hw.efficiency.inter_link) : 1.0;
  return (same_node ? hw.intra_latency_s : hw.inter_latency_s) + bytes / (line * link);
}

double schedule_events_bound(int P, const LayerConfig& cfg) {
  const double documents = per_document(cfg.cp_layout()) ? double(cfg.docs.size()) + 1 : 0;
  return 64.0 * P * P + 256.0 * P + 24.0 * P * P * documents;
}

double schedule_bytes(int P, const LayerConfig& cfg) { return 1024.0 * schedule_events_bound(P, cfg); }

trace::TraceData model_trace(const trace::TraceData& schedule, const Hardware& hw, const ModelOptions& o) {
  check_model_options(hw, o);
  // A modeled trace's times and bytes are the model's already: model the recorded one.
  if (const auto m = schedule.other.find("modeled"); m != schedule.other.end() && m->is_boolean() && m->get<bool>())
    throw ConfigError("this trace is already modeled (otherData.modeled): model the trace the run recorded, or a dry run");
  // Traces record fp32 runs (otherData.dtype); bf16 halves every byte.
  const auto dt = schedule.other.find("dtype");
  const bool f64 = dt != schedule.other.end() && dt->is_string() && dt->get<std::string>() == "float64";
  const double recorded = f64 ? 8 : 4, modeled = o.dtype == "fp32" ? 4 : 2;
  trace::TraceData out = schedule;
  out.flows.clear();
  // A measured trace with its modeled twins: model what was recorded, not the twins.
  std::erase_if(out.ranks, [&](const trace::RankTrace& r) { return is_modeled_twin(schedule.other, r.strategy); });
  out.other.erase("modeled_groups");
  out.other.erase("modeled_hardware");
  std::map<std::string, std::vector<size_t>> groups;
  for (size_t p = 0; p < out.ranks.size(); ++p) groups[out.ranks[p].strategy].push_back(p);
  for (auto& [strategy, procs] : groups)
    Replay(out, procs, hw, modeled / recorded, o).run();
  out.other["modeled"] = true;
  out.other["hardware"] = hw.to_json();
  out.other["model_dtype"] = o.dtype;
  out.other["model_efficiency"] = o.efficiency;
  if (const std::string k = attention_kernel_of(hw, o); !k.empty()) out.other["model_attention_kernel"] = k;
  out.other["dtype"] = o.dtype == "fp32" ? "float32" : "bfloat16";
  out.other["device"] = hw.name + " (modeled)";
  return out;
}

std::string modeled_label(const std::string& strategy, const std::string& hw_name) {
  return strategy + " (modeled, " + hw_name + ")";
}

bool is_modeled_twin(const nlohmann::json& other, const std::string& strategy) {
  const auto g = other.find("modeled_groups");
  if (g == other.end() || !g->is_object()) return false;
  const auto twin = g->find(strategy);
  return twin != g->end() && twin->is_object();  // as the viewer reads it (viz::group_tag)
}

namespace {

// Where a group's layer starts: its first `phase` event (its forward), or its first event.
std::optional<int64_t> layer_start(const std::vector<trace::RankTrace>& ranks, const std::string& strategy) {
  std::optional<int64_t> phase, any;
  for (const trace::RankTrace& r : ranks) {
    if (r.strategy != strategy) continue;
    for (const trace::Event& e : r.events) {
      any = std::min(any.value_or(e.ts_ns), e.ts_ns);
      if (e.cat == "phase") phase = std::min(phase.value_or(e.ts_ns), e.ts_ns);
    }
  }
  return phase ? phase : any;
}

}  // namespace

nlohmann::json& insert_modeled_group(trace::TraceData& t, std::vector<trace::RankTrace> ranks, const std::string& of,
                                     const Hardware& hw, const std::string& dtype, size_t at) {
  const std::string label = modeled_label(of, hw.name);
  for (trace::RankTrace& r : ranks) r.strategy = label;
  at = std::min(at, t.ranks.size());
  t.ranks.insert(t.ranks.begin() + std::ptrdiff_t(at), std::make_move_iterator(ranks.begin()), std::make_move_iterator(ranks.end()));
  t.flows.clear();  // the writer derives them again
  if (!t.other.contains("modeled_groups") || !t.other["modeled_groups"].is_object())
    t.other["modeled_groups"] = nlohmann::json::object();
  nlohmann::json& entry = t.other["modeled_groups"][label];
  entry = {{"of", of}, {"hardware", hw.name}, {"dtype", dtype}};
  return entry;
}

void add_modeled_twins(trace::TraceData& t, const Hardware& hw, const ModelOptions& o, const std::string& only) {
  if (!t.other.contains("modeled_groups") || !t.other["modeled_groups"].is_object())
    t.other["modeled_groups"] = nlohmann::json::object();
  nlohmann::json& groups = t.other["modeled_groups"];
  // The recorded groups, in file order, that have no twin on this profile yet.
  std::vector<std::string> todo;
  for (const trace::RankTrace& r : t.ranks) {
    if (is_modeled_twin(t.other, r.strategy) || (!only.empty() && r.strategy != only)) continue;
    if (std::find(todo.begin(), todo.end(), r.strategy) != todo.end()) continue;
    if (!groups.contains(modeled_label(r.strategy, hw.name))) todo.push_back(r.strategy);
  }
  for (const std::string& strategy : todo) {
    trace::TraceData one;
    one.other = t.other;
    for (const trace::RankTrace& r : t.ranks)
      if (r.strategy == strategy) one.ranks.push_back(r);
    trace::TraceData modeled = model_trace(one, hw, o);
    const int64_t shift = layer_start(one.ranks, strategy).value_or(0) - layer_start(modeled.ranks, strategy).value_or(0);
    // The twin goes right after its recorded group and the twins it has already.
    size_t at = 0;
    for (size_t i = 0; i < t.ranks.size(); ++i) {
      const std::string& s = t.ranks[i].strategy;
      if (s == strategy || (groups.contains(s) && groups[s].value("of", "") == strategy)) at = i + 1;
    }
    for (trace::RankTrace& r : modeled.ranks) {
      for (trace::Event& e : r.events) e.ts_ns += shift;
      for (trace::MemorySample& m : r.memory) m.ts_ns += shift;
    }
    insert_modeled_group(t, std::move(modeled.ranks), strategy, hw, o.dtype, at)["efficiency"] = o.efficiency;
  }
  t.other["modeled_hardware"] = hw.to_json();
}

trace::TraceData with_modeled_twin(trace::TraceData measured, const Hardware& hw, const ModelOptions& o) {
  add_modeled_twins(measured, hw, o);
  return measured;
}

}  // namespace ringside::model

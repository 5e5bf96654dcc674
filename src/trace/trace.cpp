#include "trace/trace.h"

#include <algorithm>
#include <cstring>
#include <limits>

#include <nlohmann/json.hpp>

#include "comm/communicator.h"
#include "device/gpu.h"

namespace ringside::trace {

namespace {
thread_local Tracer* t_tracer = nullptr;
}  // namespace

Tracer* current_tracer() {
  Tracer* t = t_tracer;
  return t && t->recording() ? t : nullptr;
}

TraceScope::TraceScope(Tracer* t) : previous_(t_tracer) { t_tracer = t; }
TraceScope::~TraceScope() { t_tracer = previous_; }

Tracer::Tracer(std::string strategy, int rank, Clock clock) : clock_(clock) {
  trace_.strategy = std::move(strategy);
  trace_.rank = rank;
  trace_.clock_offset_ns = clock.offset_ns;
  trace_.clock_uncertainty_ns = clock.uncertainty_ns;
}

void Tracer::record(Event e) {
  if (!recording_) return;
  if (e.phase.empty()) e.phase = phase;
  if (e.sublayer.empty()) e.sublayer = sublayer;
  if (e.step < 0) e.step = step;
  std::lock_guard lock(mu_);
  trace_.events.push_back(std::move(e));
}

void Tracer::begin_sublayer(const char* name) {
  if (!recording_) return;
  const int64_t now = clock_.now();
  if (!sublayer.empty()) {
    Event e;
    e.name = sublayer, e.cat = "sublayer", e.sublayer = sublayer;
    e.ts_ns = sublayer_start_, e.dur_ns = now - sublayer_start_;
    e.order = sublayer_order_, e.end_order = tick();
    const int64_t mark = device_clock_ ? device_clock_->mark() : -1;
    e.mark_begin = sublayer_mark_, e.mark_end = mark;
    record(std::move(e));
  }
  sublayer = name ? name : "";
  sublayer_start_ = now;
  sublayer_order_ = tick();
  sublayer_mark_ = device_clock_ && name ? device_clock_->mark() : -1;
}

void Tracer::memory(const std::array<int64_t, kNumMemCategories>& live) {
  if (!recording_) return;
  std::lock_guard lock(mu_);
  trace_.memory.push_back(MemorySample{clock_.now(), live});
}

int64_t Tracer::next_seq(int peer, int tag, bool send) {
  for (auto& s : seqs_)
    if (s[0] == peer && s[1] == tag && s[2] == send) return s[3]++;
  seqs_.push_back({peer, tag, send, 1});
  return 0;
}

RankTrace Tracer::snapshot() const {
  std::lock_guard lock(mu_);
  return trace_;
}

RankTrace Tracer::take() {
  std::lock_guard lock(mu_);
  if (device_clock_)
    for (Event& e : trace_.events) {
      if (e.mark_begin < 0 || e.mark_end < 0) continue;
      const int64_t begin = device_clock_->steady_ns(e.mark_begin), end = device_clock_->steady_ns(e.mark_end);
      e.ts_ns = clock_.to_shared(begin);
      e.dur_ns = std::max<int64_t>(0, end - begin);
      e.mark_begin = e.mark_end = -1;
    }
  RankTrace out = std::move(trace_);
  trace_ = RankTrace{out.strategy, out.rank, {}, {}, out.clock_offset_ns, out.clock_uncertainty_ns};
  return out;
}

Span::Span(const char* name, const char* cat, Opens opens, int step) : t_(current_tracer()), opens_(opens) {
  if (!t_) return;
  e_.emplace();
  e_->name = name;
  e_->cat = cat;
  e_->ts_ns = t_->clock().now();
  e_->order = t_->tick();
  if (DeviceClock* dc = t_->device_clock()) e_->mark_begin = dc->mark();
  if (opens == Opens::step) {
    e_->name += " " + std::to_string(step);
    saved_step_ = t_->step;
    t_->step = step;
    e_->step = step;
  }
}

Span::~Span() {
  if (!t_) return;
  e_->dur_ns = t_->clock().now() - e_->ts_ns;
  e_->end_order = t_->tick();
  if (DeviceClock* dc = t_->device_clock()) e_->mark_end = dc->mark();
  if (opens_ == Opens::step) t_->step = saved_step_;
  t_->record(std::move(*e_));
}

namespace {
class GpuClock final : public DeviceClock {
 public:
  GpuClock() { gpu::require_bound("the GPU trace clock"); }
  int64_t mark() override {
    marks_.push_back(gpu::Event::record());
    return static_cast<int64_t>(marks_.size()) - 1;
  }
  int64_t steady_ns(int64_t id) override { return marks_.at(static_cast<size_t>(id))->steady_ns(); }

 private:
  std::vector<std::shared_ptr<gpu::Event>> marks_;
};
}  // namespace

std::unique_ptr<DeviceClock> make_gpu_clock() { return std::make_unique<GpuClock>(); }

Clock align_clocks(Communicator& comm, int rounds) {
  const int P = comm.size(), r = comm.rank();
  constexpr int kTag = (1 << 20) + 100;  // above the strategies' and collectives' tags
  Clock c;
  if (comm.backend() == "local") {
    // One process, one steady clock: no offset to estimate; share rank 0's zero.
    int64_t origin = Clock::steady_now_ns();
    if (r == 0) {
      for (int p = 1; p < P; ++p) comm.send(&origin, sizeof origin, p, kTag);
    } else {
      comm.recv(&origin, sizeof origin, 0, kTag);
    }
    c.origin_ns = origin;
    return c;
  }
  // Rank 0 answers each other rank in turn; each ping carries nothing, each pong rank 0's time.
  if (r == 0) {
    for (int p = 1; p < P; ++p)
      for (int i = 0; i < rounds; ++i) {
        char ping = 0;
        comm.recv(&ping, 1, p, kTag);
        const int64_t now = Clock::steady_now_ns();
        comm.send(&now, sizeof now, p, kTag);
      }
  } else {
    int64_t best_rtt = std::numeric_limits<int64_t>::max();
    for (int i = 0; i < rounds; ++i) {
      const char ping = 0;
      const int64_t t_send = Clock::steady_now_ns();
      comm.send(&ping, 1, 0, kTag);
      int64_t t_root = 0;
      comm.recv(&t_root, sizeof t_root, 0, kTag);
      const int64_t t_recv = Clock::steady_now_ns();
      if (t_recv - t_send < best_rtt) {
        best_rtt = t_recv - t_send;
        c.offset_ns = t_root - (t_send + t_recv) / 2;  // rank 0's clock minus ours
        c.uncertainty_ns = best_rtt / 2;
      }
    }
  }
  // The zero: rank 0's clock once everyone is synchronised.
  int64_t origin = Clock::steady_now_ns();
  if (r == 0) {
    for (int p = 1; p < P; ++p) comm.send(&origin, sizeof origin, p, kTag + 1);
  } else {
    comm.recv(&origin, sizeof origin, 0, kTag + 1);
  }
  c.origin_ns = origin;
  return c;
}

// ---- RankTrace to bytes and back, for gathering over MPI (CBOR: compact, exact integers).
namespace {

nlohmann::json to_json(const RankTrace& t) {
  nlohmann::json j;
  j["strategy"] = t.strategy, j["rank"] = t.rank;
  j["offset"] = t.clock_offset_ns, j["uncertainty"] = t.clock_uncertainty_ns;
  auto& ev = j["events"] = nlohmann::json::array();
  for (const Event& e : t.events)
    ev.push_back({e.name, e.cat, e.ts_ns, e.dur_ns, int(e.stream), e.phase, e.step, e.peer, e.bytes, e.flops,
                  e.collective, e.direction, e.tag, e.seq, e.detail, e.sublayer, e.order, e.end_order});
  auto& mem = j["memory"] = nlohmann::json::array();
  for (const MemorySample& m : t.memory) mem.push_back({m.ts_ns, m.bytes});
  return j;
}

RankTrace from_json(const nlohmann::json& j) {
  RankTrace t;
  t.strategy = j.at("strategy"), t.rank = j.at("rank");
  t.clock_offset_ns = j.at("offset"), t.clock_uncertainty_ns = j.at("uncertainty");
  for (const auto& a : j.at("events")) {
    Event e;
    e.name = a[0], e.cat = a[1], e.ts_ns = a[2], e.dur_ns = a[3], e.stream = Stream(a[4].get<int>());
    e.phase = a[5], e.step = a[6], e.peer = a[7], e.bytes = a[8], e.flops = a[9];
    e.collective = a[10], e.direction = a[11], e.tag = a[12], e.seq = a[13], e.detail = a[14], e.sublayer = a[15];
    e.order = a[16], e.end_order = a[17];
    t.events.push_back(std::move(e));
  }
  for (const auto& a : j.at("memory")) t.memory.push_back(MemorySample{a[0], a[1]});
  return t;
}

}  // namespace

std::vector<RankTrace> gather_to_root(Communicator& comm, RankTrace mine) {
  constexpr int kTag = (1 << 20) + 102;
  const int P = comm.size();
  std::vector<RankTrace> all;
  if (comm.rank() != 0) {
    const std::vector<uint8_t> bytes = nlohmann::json::to_cbor(to_json(mine));
    const int64_t n = static_cast<int64_t>(bytes.size());
    comm.send(&n, sizeof n, 0, kTag);
    comm.send(bytes.data(), n, 0, kTag);
    return all;
  }
  all.push_back(std::move(mine));
  for (int p = 1; p < P; ++p) {
    int64_t n = 0;
    comm.recv(&n, sizeof n, p, kTag);
    std::vector<uint8_t> bytes(static_cast<size_t>(n));
    comm.recv(bytes.data(), n, p, kTag);
    all.push_back(from_json(nlohmann::json::from_cbor(bytes)));
  }
  return all;
}

}  // namespace ringside::trace

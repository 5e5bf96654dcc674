#include "trace/trace.h"

#include <algorithm>
#include <cstring>
#include <iterator>
#include <limits>

#include <nlohmann/json.hpp>


namespace ringside::trace {

namespace {
thread_local Tracer* t_tracer = nullptr;

// The file's names, in Kind's order.
constexpr const char* kKindNames[] = {"attention", "gemm", "norm",      "elementwise",    "memory",
                                      "wait",      "collective", "phase", "sublayer",       "ring_step",
                                      "p2p",       "all_gather", "reduce_scatter", "all_reduce", "all_to_all",
                                      "other"};
static_assert(std::size(kKindNames) == size_t(Kind::other) + 1);
}  // namespace

const char* to_string(Kind kind) { return kKindNames[size_t(kind)]; }

const char* to_string(Direction direction) {
  return direction == Direction::send ? "send" : direction == Direction::recv ? "recv" : "";
}

Kind kind_of(std::string_view cat) {
  for (size_t k = 0; k < size_t(Kind::other); ++k)
    if (cat == kKindNames[k]) return Kind(k);
  return Kind::other;
}

Direction direction_of(std::string_view text) {
  return text == "send" ? Direction::send : text == "recv" ? Direction::recv : Direction::none;
}

Tracer* current_tracer() {
  Tracer* t = t_tracer;
  return t && t->recording() ? t : nullptr;
}

TraceScope::TraceScope(Tracer* t) : previous_(t_tracer), previous_listener_(set_thread_memory_listener(t)) { t_tracer = t; }
TraceScope::~TraceScope() {
  t_tracer = previous_;
  set_thread_memory_listener(previous_listener_);
}

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
    e.name = sublayer, e.kind = Kind::sublayer, e.sublayer = sublayer;
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
  trace_ = RankTrace{out.strategy, out.tile_map, out.rank, {}, {}, out.clock_offset_ns, out.clock_uncertainty_ns};
  return out;
}

RecomputeScope::RecomputeScope() : t_(current_tracer()) {
  if (t_) previous_ = t_->phase, t_->phase = "recompute";
}
RecomputeScope::~RecomputeScope() {
  if (t_) t_->phase = previous_;
}

Span::Span(const char* name, Kind kind, Opens opens, int step) : t_(current_tracer()), opens_(opens) {
  if (!t_) return;
  e_.emplace();
  e_->name = name;
  e_->kind = kind;
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

}  // namespace ringside::trace

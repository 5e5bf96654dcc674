// The timeline: what every rank computed, sent, waited for and held, on one clock.
//
// A Tracer belongs to one rank and is written by that rank's own thread only, so recording
// takes no lock. The rank thread installs it with TraceScope; from then on the instrumented
// code (the traced backend's ops, the communicator's transfers, collectives and waits, the
// memory tracker's allocations, the strategies' phases and ring steps) finds it through
// current_tracer(), a thread-local pointer. With no tracer installed every hook is one
// thread-local load and a branch: tracing off costs almost nothing (`ringside bench trace`
// measures it).
//
// Two streams per rank, as on a GPU: `compute` (the rank's thread: ops, collectives as spans,
// waits) and `comm` (transfers, timed by the thread that moves them: the local backend's comm
// thread, or from posting to completion under MPI). A transfer that runs under compute shows
// as comm-lane time covered by compute-lane time: that is overlap.
#pragma once
#include <array>
#include <chrono>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "core/memory_tracker.h"

namespace ringside {
class Backend;
class Communicator;
}  // namespace ringside

namespace ringside::trace {

enum class Stream : int { compute = 0, comm = 1 };

/// One (query run x key run) pair of attention a ring step computed: the queries at global slots
/// q_first, q_first + q_stride, ... (q_len of them) against the keys at k_first, k_first +
/// k_stride, ... (k_len), and whether the mask hides some of their pairs (partial) or none.
/// The tile map draws what ran from these (trace/tile_map.h).
struct TilePair {
  int64_t q_first = 0, q_len = 0, q_stride = 1, k_first = 0, k_len = 0, k_stride = 1;
  bool partial = false;
  bool operator==(const TilePair&) const = default;
};
/// The most pairs one ring step records; a step of more (a pack of many documents) records none
/// and says so (Event::tiles_complete false).
inline constexpr size_t kMaxTilePairs = 256;

/// What an event is, for colours, metrics and the model. Strings only at the file boundary (the
/// trace's `cat`, and `args.direction` below), through to_string and kind_of.
enum class Kind : uint8_t {
  // compute stream, work: an op
  attention, gemm, norm, elementwise, memory,
  // compute stream, no work of its own: blocked on a transfer, or a span that encloses others
  wait, collective, phase, sublayer, ring_step,
  // comm stream: a transfer, by what moved it
  p2p, all_gather, reduce_scatter, all_reduce, all_to_all,
  other,  ///< a foreign trace's category that ringside does not know (work, on the compute stream)
};
/// A transfer's side (and a wait's, for the transfer it waits for); none for everything else.
enum class Direction : uint8_t { none, send, recv };

/// The file's name of a kind ("ring_step") or direction ("send"; "" for none).
const char* to_string(Kind kind);
const char* to_string(Direction direction);
/// The kind a file's category names; Kind::other for one ringside does not know.
Kind kind_of(std::string_view cat);
/// The direction a file's "send" or "recv" names; Direction::none for anything else.
Direction direction_of(std::string_view text);

/// Whether an event of this kind encloses others rather than doing work itself: a phase, a
/// sublayer, a ring step, or a collective call's span (its transfers are the comm stream's).
inline bool is_container(Kind k) {
  return k == Kind::phase || k == Kind::sublayer || k == Kind::ring_step || k == Kind::collective;
}
/// Whether a kind is a transfer's (what the comm stream holds).
inline bool is_comm_kind(Kind k) { return k >= Kind::p2p && k <= Kind::all_to_all; }
/// Whether a compute-stream event of this kind is work of its own: an op (or a foreign trace's
/// other), not a wait nor a span that encloses others.
inline bool is_work(Kind k) { return k != Kind::wait && !is_container(k); }

/// One interval on a rank's timeline (a Chrome trace `X` event). Times are nanoseconds on the
/// run's shared clock.
struct Event {
  std::string name;  ///< "matmul", "attention_forward", "send k", "all_gather", "wait recv k"
  Kind kind = Kind::other;  ///< the file's `cat`
  int64_t ts_ns = 0, dur_ns = 0;
  Stream stream = Stream::compute;
  std::string phase;        ///< "forward", "backward", "recompute" (RecomputeScope), or "" outside them
  std::string sublayer;     ///< ln1, qkv, attention, out_proj, ln2, mlp, grad_sync; "" outside them
  int step = -1;            ///< ring step (ring attention), -1 when none
  int peer = -1;            ///< comm and wait: the other rank
  int64_t bytes = 0;        ///< comm: payload bytes; compute: bytes read + written
  double flops = 0;         ///< compute: floating-point operations (0 when not meaningful)
  int64_t collective = -1;  ///< comm: this rank's collective call number (equal on every rank), -1 for p2p
  Direction direction = Direction::none;  ///< comm, and a wait for a transfer: its side
  int tag = -1;             ///< comm: message tag
  int64_t seq = -1;         ///< comm: index among messages of (sender, receiver, tag): pairs a send with its receive
  int group_size = 0;       ///< comm: the ranks of the collective's group (busbw's n); 0: not said (the run's ranks)
  std::string detail;       ///< free text: shapes, what a wait was for
  std::vector<TilePair> tiles;  ///< ring_step: the attention pairs it computed
  bool tiles_complete = true;   ///< false: the step computed more than kMaxTilePairs pairs, `tiles` holds none
  /// Program order on the rank (the schedule the what-if model replays): a counter taken when
  /// the event begins and when it ends. A transfer's order is when it was posted (end_order
  /// equal); a wait names its transfer by direction, peer, tag and seq. -1: not recorded.
  int64_t order = -1, end_order = -1;
  /// On a GPU rank: the DeviceClock marks at the event's start and end, resolved into ts_ns and
  /// dur_ns when the trace is taken (-1: none; never in the file).
  int64_t mark_begin = -1, mark_end = -1;
  int64_t end_ns() const { return ts_ns + dur_ns; }
};

/// Bytes live per MemCategory at one instant (a Chrome trace `C` counter sample).
struct MemorySample {
  int64_t ts_ns = 0;
  std::array<int64_t, kNumMemCategories> bytes{};
  int64_t total() const {
    int64_t s = 0;
    for (int64_t b : bytes) s += b;
    return s;
  }
};

/// The tile maps a run records (RankTrace::tile_map): each tile coloured by the rank and ring step
/// that computed it, from the step records; or every rank computing every tile, for its heads.
inline constexpr const char* kTileMapRingSteps = "ring_steps";
inline constexpr const char* kTileMapEveryRank = "every_rank";

/// Everything one rank of one strategy recorded.
struct RankTrace {
  std::string strategy;  ///< "ring", "tp-sp", ...; "" for a foreign trace
  /// How the tile map draws this rank's run (tile_map.h): "ring_steps", "every_rank", or ""
  /// (no map). The run's attention scheme says (parallel/cp_scheme.h), and the runner records it.
  std::string tile_map;
  int rank = 0;
  std::vector<Event> events;
  std::vector<MemorySample> memory;
  /// How this rank's clock maps onto rank 0's, as estimated at the start (0 on one process):
  /// offset added to local time, and the estimate's half round-trip uncertainty.
  int64_t clock_offset_ns = 0, clock_uncertainty_ns = 0;
};

/// Maps a process-local steady clock onto the run's shared timeline: shared = local + offset - origin.
struct Clock {
  int64_t origin_ns = 0;  ///< the shared timeline's zero, in rank 0's steady-clock ns
  int64_t offset_ns = 0;  ///< rank 0's steady clock minus ours (0 when all ranks share a process or host clock)
  int64_t uncertainty_ns = 0;
  int64_t now() const { return steady_now_ns() + offset_ns - origin_ns; }
  int64_t to_shared(int64_t local_steady_ns) const { return local_steady_ns + offset_ns - origin_ns; }
  static int64_t steady_now_ns() {
    return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch())
        .count();
  }
};


/// On a GPU rank ops run asynchronously on the rank's compute stream: the host's clock says when
/// an op was launched, not when it ran. A DeviceClock marks points of that stream (CUDA events)
/// and reads, later, when the stream reached them, in steady-clock ns.
class DeviceClock {
 public:
  virtual ~DeviceClock() = default;
  /// A mark at this point of the compute stream; returns its id.
  virtual int64_t mark() = 0;
  /// When the stream reached mark `id` (waits until it has), steady-clock ns.
  virtual int64_t steady_ns(int64_t id) = 0;
};

/// One rank's recorder. Only the rank's thread writes to it; snapshot() may be called from
/// another thread (a live flush), so appends take a lock nobody else holds in a normal run.
class Tracer : public MemoryListener {
 public:
  Tracer(std::string strategy, int rank, Clock clock);

  int rank() const { return trace_.rank; }
  const Clock& clock() const { return clock_; }
  /// Records how the tile map draws this rank's run (RankTrace::tile_map).
  void set_tile_map(std::string kind) { trace_.tile_map = std::move(kind); }
  /// Stops recording (the strategy's result gathering after the backward is not part of the
  /// layer); hooks become no-ops.
  void stop() { recording_ = false; }
  bool recording() const { return recording_; }

  /// Appends an event, stamping it with the current phase, ring step and collective context
  /// where it has none.
  void record(Event e);
  /// A memory sample of `live` now (called by MemoryTracker on every change for this rank).
  void memory(const std::array<int64_t, kNumMemCategories>& live);
  /// MemoryListener: this rank's changes become samples (another rank's are not ours).
  void memory_changed(int rank, const std::array<int64_t, kNumMemCategories>& live) override {
    if (rank == this->rank()) memory(live);
  }

  /// Ends the open sublayer span (if any) and opens `name` (nullptr: none). Strategies mark
  /// their sublayers in order with trace::sublayer(); a phase's end closes its last one.
  void begin_sublayer(const char* name);

  // Context the communicator and the ops pick up (set by the scopes below).
  std::string phase;
  std::string sublayer;
  int step = -1;
  std::optional<Kind> collective_kind;  ///< inside a collective: its kind
  int64_t collective_id = -1;
  int64_t next_collective = 0;  ///< collective calls so far on this rank
  /// Messages posted so far per (peer, tag, direction): the `seq` that pairs sends and receives.
  int64_t next_seq(int peer, int tag, bool send);
  /// The rank's program counter: each call returns the next position (Event::order).
  int64_t tick() { return pc_++; }

  /// Times events by `clock`'s marks instead of the host clock (a GPU rank's ops, waits and
  /// sublayers: when its stream ran them).
  void set_device_clock(std::unique_ptr<DeviceClock> clock) { device_clock_ = std::move(clock); }
  DeviceClock* device_clock() const { return device_clock_.get(); }
  /// The recorded trace, moved out (the tracer is empty afterwards). On a GPU rank it first
  /// waits for the stream and resolves every mark into times.
  RankTrace take();
  /// A copy of what has been recorded so far, from any thread.
  RankTrace snapshot() const;

 private:
  Clock clock_;
  mutable std::mutex mu_;  // guards trace_ against snapshot()
  RankTrace trace_;
  bool recording_ = true;
  int64_t sublayer_start_ = 0, sublayer_order_ = -1, sublayer_mark_ = -1;
  std::unique_ptr<DeviceClock> device_clock_;
  int64_t pc_ = 0;
  std::vector<std::array<int64_t, 4>> seqs_;  // (peer, tag, send, count), few entries: linear search
};

/// The tracer of the calling thread, or nullptr when tracing is off (or stopped).
Tracer* current_tracer();

/// Marks the start of a sublayer on the calling rank's timeline (ends the previous one): a
/// `sublayer` span, and the sublayer of every event inside. No-op when tracing is off.
inline void sublayer(const char* name) {
  if (Tracer* t = current_tracer()) t->begin_sublayer(name);
}

/// Marks everything the calling rank records in its scope as the backward's recomputation of
/// the forward (full activation recomputation): Event::phase "recompute" instead of
/// "backward", so that its ring steps and ops read apart from the backward's own (metrics and
/// the viewer count ring steps of the forward and the backward only). No-op when tracing is off.
class RecomputeScope {
 public:
  RecomputeScope();
  ~RecomputeScope();
  RecomputeScope(const RecomputeScope&) = delete;
  RecomputeScope& operator=(const RecomputeScope&) = delete;

 private:
  Tracer* t_;
  std::string previous_;
};

/// Installs `t` as the calling thread's tracer for the scope's lifetime (nullptr: none).
class TraceScope {
 public:
  explicit TraceScope(Tracer* t);
  ~TraceScope();
  TraceScope(const TraceScope&) = delete;
  TraceScope& operator=(const TraceScope&) = delete;

 private:
  Tracer* previous_;
  MemoryListener* previous_listener_;
};

/// An interval on the calling rank's compute stream, recorded when the scope ends: an op, a
/// collective or a ring step. Does nothing when tracing is off.
class Span {
 public:
  /// name and kind as in Event; flops and bytes as the op's cost (0 when unknown).
  Span(const char* name, Kind kind, double flops = 0, int64_t bytes = 0)
      : Span(name, kind, Opens::nothing, -1) {
    if (e_) e_->flops = flops, e_->bytes = bytes;
  }
  ~Span();
  Span(const Span&) = delete;
  Span& operator=(const Span&) = delete;
  /// The event being built (to add detail or bytes before it ends), or nullptr when off.
  Event* event() { return e_ ? &*e_ : nullptr; }

  /// A ring step span: the tracer's step is `step` for everything recorded until it ends.
  static Span ring_step(int step) { return Span("ring step", Kind::ring_step, Opens::step, step); }

 private:
  enum class Opens { nothing, step };
  Span(const char* name, Kind kind, Opens opens, int step);
  Tracer* t_ = nullptr;
  std::optional<Event> e_;  // built only when tracing: a hook that is off costs a check
  int saved_step_ = -1;
  Opens opens_ = Opens::nothing;
};



}  // namespace ringside::trace

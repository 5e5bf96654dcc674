// MemoryTracker: live and peak bytes per rank and per category.
//
// Every Tensor allocation is tagged with (rank, category), so that "how much does rank 3 hold
// for backward?" is a measurement, not an estimate. The categories are the ones the
// activation-memory literature uses (Korthikanti et al. 2022): weights, their gradients,
// activations saved for backward, transient workspace, and communication buffers.
#pragma once
#include <array>
#include <cstddef>
#include <cstdint>
#include <map>
#include <mutex>
#include <string_view>

namespace ringside {

enum class MemCategory : int { weights = 0, grads, activations, workspace, comm };
inline constexpr int kNumMemCategories = 5;

/// "weights", "grads", "activations", "workspace", "comm".
std::string_view to_string(MemCategory c);

/// Per-rank byte counters. Thread-safe: ranks that run as threads share one tracker.
class MemoryTracker {
 public:
  struct RankStats {
    std::array<int64_t, kNumMemCategories> live{};  ///< bytes allocated now, per category
    std::array<int64_t, kNumMemCategories> peak{};  ///< highest `live` ever seen, per category
    int64_t live_total = 0;                         ///< bytes allocated now, all categories
    int64_t peak_total = 0;                         ///< highest live_total ever seen
  };

  /// Records an allocation of `bytes` bytes.
  void on_alloc(int rank, MemCategory category, int64_t bytes);
  /// Records the release of an allocation of `bytes` bytes. Throws ringside::Error when more is
  /// freed than is live (an accounting bug).
  void on_free(int rank, MemCategory category, int64_t bytes);

  /// Live bytes of one rank and category.
  int64_t live(int rank, MemCategory category) const;
  /// Peak bytes of one rank and category since construction or the last reset_peaks().
  int64_t peak(int rank, MemCategory category) const;
  /// Snapshot of one rank's counters (zeros for a rank never seen).
  RankStats stats(int rank) const;
  /// Snapshot of every rank seen so far.
  std::map<int, RankStats> all() const;
  /// Sets every peak to the current live value (to measure one phase).
  void reset_peaks();
  /// The same for one rank only (ranks that run as threads reset theirs independently).
  void reset_peaks(int rank);

 private:
  void notify(int rank, const RankStats& r);
  mutable std::mutex mu_;
  std::map<int, RankStats> ranks_;
};

/// The tracker used when no other is given.
MemoryTracker& default_memory_tracker();

/// Hears of every change to a rank's live bytes made on the thread that installed it: the
/// timeline's memory counter (trace::Tracer) listens so. Called under the tracker's lock, in the
/// order of the changes.
class MemoryListener {
 public:
  virtual ~MemoryListener() = default;
  /// `live` is rank `rank`'s bytes per category after the change.
  virtual void memory_changed(int rank, const std::array<int64_t, kNumMemCategories>& live) = 0;
};
/// Installs the calling thread's listener (nullptr: none); returns the previous one.
MemoryListener* set_thread_memory_listener(MemoryListener* listener);

}  // namespace ringside

#include "core/memory_tracker.h"

#include <algorithm>

#include "core/error.h"

namespace ringside {

std::string_view to_string(MemCategory c) {
  switch (c) {
    case MemCategory::weights: return "weights";
    case MemCategory::grads: return "grads";
    case MemCategory::activations: return "activations";
    case MemCategory::workspace: return "workspace";
    case MemCategory::comm: return "comm";
  }
  return "?";
}

void MemoryTracker::on_alloc(int rank, MemCategory category, int64_t bytes) {
  std::lock_guard lock(mu_);
  RankStats& r = ranks_[rank];
  const int c = static_cast<int>(category);
  r.live[c] += bytes;
  r.peak[c] = std::max(r.peak[c], r.live[c]);
  r.live_total += bytes;
  r.peak_total = std::max(r.peak_total, r.live_total);
  notify(rank, r);
}

void MemoryTracker::on_free(int rank, MemCategory category, int64_t bytes) {
  std::lock_guard lock(mu_);
  RankStats& r = ranks_[rank];
  const int c = static_cast<int>(category);
  RS_CHECK(r.live[c] >= bytes, "MemoryTracker: rank ", rank, " frees ", bytes, " bytes of ",
           to_string(category), " but only ", r.live[c], " are live");
  r.live[c] -= bytes;
  r.live_total -= bytes;
  notify(rank, r);
}

namespace {
thread_local MemoryListener* t_listener = nullptr;
}  // namespace

MemoryListener* set_thread_memory_listener(MemoryListener* listener) {
  MemoryListener* previous = t_listener;
  t_listener = listener;
  return previous;
}

void MemoryTracker::notify(int rank, const RankStats& r) {
  // The timeline's memory counter: a sample at every change, taken under the lock so that the
  // samples are in the order of the changes.
  if (t_listener) t_listener->memory_changed(rank, r.live);
}

int64_t MemoryTracker::live(int rank, MemCategory category) const {
  return stats(rank).live[static_cast<int>(category)];
}

int64_t MemoryTracker::peak(int rank, MemCategory category) const {
  return stats(rank).peak[static_cast<int>(category)];
}

MemoryTracker::RankStats MemoryTracker::stats(int rank) const {
  std::lock_guard lock(mu_);
  auto it = ranks_.find(rank);
  return it == ranks_.end() ? RankStats{} : it->second;
}

std::map<int, MemoryTracker::RankStats> MemoryTracker::all() const {
  std::lock_guard lock(mu_);
  return ranks_;
}

void MemoryTracker::reset_peaks(int rank) {
  std::lock_guard lock(mu_);
  RankStats& r = ranks_[rank];
  r.peak = r.live;
  r.peak_total = r.live_total;
}

void MemoryTracker::reset_peaks() {
  std::lock_guard lock(mu_);
  for (auto& [rank, r] : ranks_) {
    r.peak = r.live;
    r.peak_total = r.live_total;
  }
}

MemoryTracker& default_memory_tracker() {
  static MemoryTracker tracker;
  return tracker;
}

}  // namespace ringside

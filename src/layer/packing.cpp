#include "layer/packing.h"

#include <algorithm>

#include "core/error.h"

namespace ringside {

namespace {
int64_t round_up(int64_t v, int64_t m) { return (v + m - 1) / m * m; }
}  // namespace

Packing::Packing(const LayerConfig& cfg, int64_t multiple, int64_t doc_multiple)
    : s(cfg.s), rope_(cfg.rope_positions) {
  RS_CHECK(multiple >= 1 && doc_multiple >= 1, "Packing: multiples must be >= 1");
  const std::vector<int64_t> docs = cfg.docs.empty() ? std::vector<int64_t>{cfg.s} : cfg.docs;
  int64_t slot = 0, real = 0;
  for (int64_t len : docs) {
    segments.push_back({slot, real, len, round_up(len, doc_multiple)});
    slot += segments.back().padded, real += len;
  }
  S = round_up(slot, multiple);
  if (S > slot) {
    if (doc_multiple > 1) segments.push_back({slot, real, 0, S - slot});  // padding alone, cut like a document
    else segments.back().padded += S - slot;
  }
  masked_ = cfg.masked() || S != s;
  for (const Segment& g : segments)
    if (g.len > 0) mask_.starts.push_back(g.slot), mask_.lengths.push_back(g.len);
  mask_.window = cfg.window;
}

const Segment& Packing::segment_of(int64_t slot) const {
  RS_CHECK(slot >= 0 && slot < S, "Packing: slot ", slot, " outside [0, ", S, ")");
  const auto after = std::upper_bound(segments.begin(), segments.end(), slot,
                                      [](int64_t t, const Segment& g) { return t < g.slot; });
  return *(after - 1);
}

std::vector<int64_t> Packing::real_of(const std::vector<int64_t>& slots) const {
  std::vector<int64_t> out;
  out.reserve(slots.size());
  for (int64_t t : slots) {
    if (identity()) {
      out.push_back(t);
      continue;
    }
    const Segment& g = segment_of(t);
    out.push_back(t - g.slot < g.len ? g.real + (t - g.slot) : -1);
  }
  return out;
}

std::vector<int64_t> Packing::real_slots() const {
  std::vector<int64_t> out;
  out.reserve(size_t(s));
  for (const Segment& g : segments)
    for (int64_t i = 0; i < g.len; ++i) out.push_back(g.slot + i);
  return out;
}

std::vector<int64_t> Packing::rope_positions(const std::vector<int64_t>& slots) const {
  std::vector<int64_t> out;
  out.reserve(slots.size());
  for (int64_t t : slots) {
    const Segment& g = segment_of(t);
    const int64_t i = t - g.slot;
    out.push_back(i >= g.len ? 0 : rope_ == RopePositions::document ? i : g.real + i);
  }
  return out;
}

}  // namespace ringside

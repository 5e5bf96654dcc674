#include "parallel/layout.h"

#include <algorithm>
#include <tuple>

#include "core/error.h"

namespace ringside {

std::vector<int64_t> layout_positions(Layout layout, int64_t s, int P, int r) {
  std::vector<int64_t> pos;
  const int64_t n = s / P;
  switch (layout) {
    case Layout::automatic:
    case Layout::contiguous:
    case Layout::zigzag_per_doc:  // over the whole sequence: RingLayout cuts documents
    case Layout::greedy:
      for (int64_t i = 0; i < n; ++i) pos.push_back(r * n + i);
      break;
    case Layout::zigzag: {
      const int64_t c = s / (2 * P);  // rank r holds chunks r and 2P-1-r
      for (int64_t i = 0; i < c; ++i) pos.push_back(r * c + i);
      for (int64_t i = 0; i < c; ++i) pos.push_back((2 * P - 1 - r) * c + i);
      break;
    }
    case Layout::striped:
      for (int64_t i = 0; i < n; ++i) pos.push_back(r + i * P);
      break;
  }
  return pos;
}

std::vector<Run> runs_of(const std::vector<int64_t>& pos) {
  std::vector<Run> runs;
  for (size_t i = 0; i < pos.size();) {
    Run run{int64_t(i), 1, pos[i], 1};
    if (i + 1 < pos.size()) {
      run.stride = pos[i + 1] - pos[i];
      while (i + run.len < pos.size() && pos[i + run.len] - pos[i + run.len - 1] == run.stride) ++run.len;
    }
    runs.push_back(run);
    i += run.len;
  }
  return runs;
}

std::vector<Run> layout_runs(Layout layout, int64_t s, int P, int rank) {
  const int64_t n = s / P;
  switch (layout) {
    case Layout::striped:  // r, r + P, ...: one run of stride P (one token: stride 1)
      return {Run{0, n, rank, n > 1 ? P : 1}};
    case Layout::zigzag: {
      const int64_t c = s / (2 * P), a = rank * c, z = (2 * int64_t(P) - 1 - rank) * c;
      if (c == 1) return {Run{0, 2, a, z - a}};     // two tokens: one run of stride z - a
      if (a + c == z) return {Run{0, 2 * c, a, 1}};  // chunks r and 2P-1-r adjacent (r = P - 1)
      return {Run{0, c, a, 1}, Run{c, c, z, 1}};
    }
    default:
      return {Run{0, n, rank * n, 1}};
  }
}

std::vector<std::array<int64_t, 4>> layout_run_list(Layout layout, int64_t s, int P, int rank, bool by_scanning) {
  std::vector<std::array<int64_t, 4>> out;
  for (const Run& r : by_scanning ? runs_of(layout_positions(layout, s, P, rank)) : layout_runs(layout, s, P, rank))
    out.push_back({r.start, r.len, r.first, r.stride});
  return out;
}

}  // namespace ringside

namespace ringside {

RingLayout::RingLayout(Layout layout, const Packing& packing, int ranks, bool causal)
    : layout_(layout), packing_(&packing), ranks_(ranks) {
  RS_CHECK(layout != Layout::automatic, "RingLayout: resolve the automatic layout first");
  const int64_t chunks = 2 * int64_t(ranks);
  if (per_document(layout))
    for (const Segment& g : packing.segments)
      RS_CHECK(g.padded % chunks == 0, "RingLayout: a segment of ", g.padded, " slots does not cut into ", chunks, " chunks");
  if (layout != Layout::greedy) return;
  // Each chunk's work: the keys each of its queries sees, over the whole padded sequence.
  kernels::cpu::AttentionParams p;
  p.sq = p.sk = packing.S, p.causal = causal, p.mask = packing.mask();
  std::vector<std::tuple<double, size_t, int64_t>> order;  // (-work, segment, chunk)
  for (size_t gi = 0; gi < packing.segments.size(); ++gi) {
    const Segment& g = packing.segments[gi];
    const int64_t c = g.padded / chunks;
    for (int64_t i = 0; i < chunks; ++i) {
      double work = 0;
      for (int64_t t = g.slot + i * c; t < g.slot + (i + 1) * c; ++t) work += double(kernels::cpu::visible_key_range(p, t).size());
      order.emplace_back(-work, gi, i);
    }
  }
  std::sort(order.begin(), order.end());
  owner_.assign(packing.segments.size(), std::vector<int>(size_t(chunks), -1));
  std::vector<double> load(size_t(ranks), 0);
  std::vector<std::vector<int>> held(packing.segments.size(), std::vector<int>(size_t(ranks), 0));
  for (const auto& [neg_work, gi, i] : order) {
    int best = -1;
    for (int r = 0; r < ranks; ++r)
      if (held[gi][size_t(r)] < 2 && (best < 0 || load[size_t(r)] < load[size_t(best)])) best = r;
    owner_[gi][size_t(i)] = best;
    held[gi][size_t(best)] += 1;
    load[size_t(best)] -= neg_work;
  }
}

std::vector<int64_t> RingLayout::positions(int j) const {
  if (!per_document(layout_)) return layout_positions(layout_, packing_->S, ranks_, j);
  std::vector<int64_t> pos;
  const int64_t chunks = 2 * int64_t(ranks_);
  for (size_t gi = 0; gi < packing_->segments.size(); ++gi) {
    const Segment& g = packing_->segments[gi];
    const int64_t c = g.padded / chunks;
    for (int64_t i = 0; i < chunks; ++i) {
      const bool mine = layout_ == Layout::greedy ? owner_[gi][size_t(i)] == j : (i == j || i == chunks - 1 - j);
      for (int64_t t = 0; mine && t < c; ++t) pos.push_back(g.slot + i * c + t);
    }
  }
  return pos;
}

std::vector<Run> RingLayout::runs(int j) const {
  return per_document(layout_) ? runs_of(positions(j)) : layout_runs(layout_, packing_->S, ranks_, j);
}

}  // namespace ringside

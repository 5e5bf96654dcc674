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

RingLayout::RingLayout(Layout layout, const Packing& packing, int ranks, bool causal)
    : layout_(layout), packing_(&packing), ranks_(ranks), causal_(causal) {
  RS_CHECK(layout != Layout::automatic, "RingLayout: resolve the automatic layout first");
  const int64_t chunks = 2 * int64_t(ranks);
  if (per_document(layout))
    for (const Segment& g : packing.segments)
      RS_CHECK(g.padded % chunks == 0, "RingLayout: a segment of ", g.padded, " slots does not cut into ", chunks, " chunks");
  if (layout == Layout::greedy) assign_greedy();
  for (int j = 0; j < ranks; ++j) {
    runs_.push_back(per_document(layout) ? runs_of(positions(j)) : layout_runs(layout, packing.S, ranks, j));
    const std::vector<Run>& runs = runs_.back();
    std::vector<size_t> order(runs.size());
    for (size_t i = 0; i < order.size(); ++i) order[i] = i;
    std::sort(order.begin(), order.end(), [&](size_t x, size_t y) { return runs[x].first < runs[y].first; });
    std::vector<int64_t> reach;
    for (size_t i : order) reach.push_back(std::max(reach.empty() ? runs[i].last() : reach.back(), runs[i].last()));
    by_first_.push_back(std::move(order));
    reach_.push_back(std::move(reach));
  }
}

std::vector<Run> RingLayout::chunks_of(const Run& run) const {
  if (run.stride != 1) {
    if (layout_ == Layout::striped) return {run};
    std::vector<Run> tokens;  // zigzag over 2R slots: a run of its two single-token chunks
    for (int64_t i = 0; i < run.len; ++i) tokens.push_back(Run{run.start + i, 1, run.first + i * run.stride, 1});
    return tokens;
  }
  if (layout_ != Layout::zigzag && !per_document(layout_)) return {run};
  const int64_t whole = packing_->S / (2 * int64_t(ranks_));  // zigzag's chunk
  std::vector<Run> pieces;
  for (int64_t at = run.first, end = run.first + run.len; at < end;) {
    int64_t chunk_start = at / whole * whole, chunk = whole;
    if (per_document(layout_)) {
      const Segment& g = packing_->segment_of(at);
      chunk = g.padded / (2 * int64_t(ranks_));
      chunk_start = g.slot + (at - g.slot) / chunk * chunk;
    }
    const int64_t piece_end = std::min(chunk_start + chunk, end);
    pieces.push_back(Run{run.start + (at - run.first), piece_end - at, at, 1});
    at = piece_end;
  }
  return pieces;
}

std::vector<size_t> RingLayout::runs_meeting(const Run& a, int j) const {
  // The key positions a's queries may see: their documents' slots, padding included.
  const Packing& packing = *packing_;
  int64_t lo = packing.segment_of(a.first).slot;
  const Segment& last = packing.segment_of(a.last());
  int64_t hi = last.slot + last.padded - 1;
  if (causal_) hi = std::min(hi, a.last());
  if (const DocumentMask* m = packing.mask(); m && m->window > 0) {
    lo = std::max(lo, a.first - m->window + 1);
    if (!causal_) hi = std::min(hi, a.last() + m->window - 1);
  }
  const std::vector<Run>& runs = runs_[size_t(j)];
  const std::vector<size_t>& order = by_first_[size_t(j)];
  const std::vector<int64_t>& reach = reach_[size_t(j)];
  std::vector<size_t> meeting;
  for (size_t i = size_t(std::lower_bound(reach.begin(), reach.end(), lo) - reach.begin());
       i < order.size() && runs[order[i]].first <= hi; ++i)
    if (runs[order[i]].last() >= lo) meeting.push_back(order[i]);
  std::sort(meeting.begin(), meeting.end());
  return meeting;
}

void RingLayout::assign_greedy() {
  const Packing& packing = *packing_;
  const int64_t chunks = 2 * int64_t(ranks_);
  // Each chunk's work: its queries against the whole padded sequence, as the FLOP count has it
  // (4 per visible pair with one head of d = 1).
  kernels::cpu::AttentionParams p;
  p.sk = packing.S, p.d = 1, p.causal = causal_, p.mask = packing.mask();
  std::vector<std::tuple<double, size_t, int64_t>> order;  // (-work, segment, chunk)
  for (size_t gi = 0; gi < packing.segments.size(); ++gi) {
    const Segment& g = packing.segments[gi];
    p.sq = g.padded / chunks;
    for (int64_t i = 0; i < chunks; ++i) {
      p.q_offset = g.slot + i * p.sq;
      order.emplace_back(-kernels::cpu::attention_forward_flops(p), gi, i);
    }
  }
  std::sort(order.begin(), order.end());
  owner_.assign(packing.segments.size(), std::vector<int>(size_t(chunks), -1));
  std::vector<double> load(size_t(ranks_), 0);
  std::vector<std::vector<int>> held(packing.segments.size(), std::vector<int>(size_t(ranks_), 0));
  for (const auto& [neg_work, gi, i] : order) {
    int best = -1;
    for (int r = 0; r < ranks_; ++r)
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

}  // namespace ringside

#include "parallel/layout.h"

namespace ringside {

std::vector<int64_t> layout_positions(Layout layout, int64_t s, int P, int r) {
  std::vector<int64_t> pos;
  const int64_t n = s / P;
  switch (layout) {
    case Layout::automatic:
    case Layout::contiguous:
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

// Human units for the CLI's tables: bytes in KiB/MiB/GiB (core/units.h), times in us/ms/s, rates.
#pragma once
#include <cstdint>
#include <cstdio>
#include <algorithm>
#include <string>
#include <utility>
#include <vector>

#include "core/units.h"  // format_bytes

namespace ringside::cli {

/// Seconds -> "850 us", "12.3 ms", "1.25 s".
inline std::string format_seconds(double s) {
  char buf[32];
  if (s < 1e-3) std::snprintf(buf, sizeof buf, "%.0f us", s * 1e6);
  else if (s < 1.0) std::snprintf(buf, sizeof buf, "%.1f ms", s * 1e3);
  else std::snprintf(buf, sizeof buf, "%.2f s", s);
  return buf;
}

/// FLOP/s -> "95.3 GFLOP/s".
inline std::string format_flops(double flops_per_s) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.1f GFLOP/s", flops_per_s / 1e9);
  return buf;
}

/// `s` padded with spaces to n characters, on the right (or, right-aligned, on the left).
inline std::string pad(const std::string& s, size_t n, bool right = false) {
  if (s.size() >= n) return s;
  return right ? std::string(n - s.size(), ' ') + s : s + std::string(n - s.size(), ' ');
}

/// A number in the tables' scientific form: 1.64e-06.
inline std::string sci(double v) {
  char b[32];
  std::snprintf(b, sizeof b, "%.2e", v);
  return b;
}

/// A plan's rows that do not fit, the `top` needing least first, each with its binding term:
/// (name, reason) pairs, already in that order.
inline void print_out_of_memory(const std::vector<std::pair<std::string, std::string>>& rows, size_t top) {
  if (rows.empty()) return;
  std::printf("\n  out of memory (%zu; the %zu needing least, with the binding term):\n", rows.size(), std::min(rows.size(), top));
  for (size_t i = 0; i < rows.size() && i < top; ++i) std::printf("    %s: %s\n", rows[i].first.c_str(), rows[i].second.c_str());
}

}  // namespace ringside::cli

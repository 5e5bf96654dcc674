// Human units for the CLI's tables: bytes in KiB/MiB/GiB (core/units.h), times in us/ms/s, rates.
#pragma once
#include <cstdint>
#include <cstdio>
#include <string>

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

}  // namespace ringside::cli

// Bytes and modeled times in human units, as every table, message and label of ringside prints them.
#pragma once
#include <cmath>
#include <cstdio>
#include <string>

namespace ringside {

/// How bytes are counted: in powers of 1024 (KiB, MiB, GiB: memory and traffic, everywhere), or
/// of 1000 (kB, MB, GB: a GPU's memory capacity as its datasheet and a profile state it, and
/// what is compared with it).
enum class ByteUnits { binary, decimal };

/// 1536 -> "1.50 KiB"; below 1 KiB, "512 B"; up to EiB. Decimal: 80e9 -> "80.00 GB".
inline std::string format_bytes(double bytes, ByteUnits units = ByteUnits::binary) {
  const char* binary[] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB"};
  const char* decimal[] = {"B", "kB", "MB", "GB", "TB", "PB", "EB"};
  const double base = units == ByteUnits::binary ? 1024.0 : 1000.0;
  int u = 0;
  while (bytes >= base && u < 6) bytes /= base, ++u;
  char buf[32];
  std::snprintf(buf, sizeof buf, u == 0 ? "%.0f %s" : "%.2f %s", bytes, (units == ByteUnits::binary ? binary : decimal)[u]);
  return buf;
}

/// A time in ns -> "850 ns", "6.9 us", "12.35 ms", "1.250 s" (negative times alike, by their
/// size): three significant digits or so, for the viewer's axis and labels and for modeled times
/// (deterministic, so worth their digits).
inline std::string format_ns(double ns) {
  char buf[32];
  const double a = std::fabs(ns);
  if (a < 1e3) std::snprintf(buf, sizeof buf, "%.0f ns", ns);
  else if (a < 1e6) std::snprintf(buf, sizeof buf, "%.1f us", ns / 1e3);
  else if (a < 1e9) std::snprintf(buf, sizeof buf, "%.2f ms", ns / 1e6);
  else std::snprintf(buf, sizeof buf, "%.3f s", ns / 1e9);
  return buf;
}

}  // namespace ringside

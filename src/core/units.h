// Bytes in human units, as every table, message and label of ringside prints them.
#pragma once
#include <cstdio>
#include <string>

namespace ringside {

/// 1536 -> "1.50 KiB"; below 1 KiB, "512 B"; up to EiB.
inline std::string format_bytes(double bytes) {
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB"};
  int u = 0;
  while (bytes >= 1024.0 && u < 6) bytes /= 1024.0, ++u;
  char buf[32];
  std::snprintf(buf, sizeof buf, u == 0 ? "%.0f %s" : "%.2f %s", bytes, units[u]);
  return buf;
}

}  // namespace ringside

// Reading one JSON event's fields with errors that say where and what ("t.json:
// traceEvents[12]: 'args.bytes' = -1 is out of range [0, 9.0072e+15]"): the ringside and the
// Kineto trace readers' shared field access. Internal to trace/.
#pragma once
#include <cmath>
#include <cstdint>
#include <string>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "trace/trace_file.h"

namespace ringside::trace {

// Field access with errors that say where and what.
class EventReader {
 public:
  EventReader(const nlohmann::json& e, std::string where) : e_(e), where_(std::move(where)) {}

  [[noreturn]] void fail(const std::string& what) const { throw Error(where_ + ": " + what); }

  const nlohmann::json* find(const nlohmann::json& obj, const char* key) const {
    auto it = obj.find(key);
    return it == obj.end() ? nullptr : &*it;
  }
  std::string str(const char* key, bool required) const { return str_in(e_, key, required, ""); }
  std::string str_in(const nlohmann::json& obj, const char* key, bool required, const char* prefix) const {
    const nlohmann::json* v = find(obj, key);
    if (!v) {
      if (required) fail(detail::concat("missing '", prefix, key, "'"));
      return {};
    }
    if (!v->is_string()) fail(detail::concat("'", prefix, key, "' must be a string, got ", v->type_name()));
    return v->get<std::string>();
  }
  // An integer in [lo, hi]: JSON integers only (1e3 or 2.5 are not ids).
  int64_t integer_in(const nlohmann::json& obj, const char* key, bool required, int64_t lo, int64_t hi, int64_t dflt,
                     const char* prefix = "") const {
    const nlohmann::json* v = find(obj, key);
    if (!v) {
      if (required) fail(detail::concat("missing '", prefix, key, "'"));
      return dflt;
    }
    if (v->is_number_unsigned()) {
      const uint64_t u = v->get<uint64_t>();
      if (u > uint64_t(hi) || (lo > 0 && u < uint64_t(lo))) fail(detail::concat("'", prefix, key, "' = ", u, " is out of range [", lo, ", ", hi, "]"));
      return int64_t(u);
    }
    if (!v->is_number_integer()) fail(detail::concat("'", prefix, key, "' must be an integer, got ", describe(*v)));
    const int64_t i = v->get<int64_t>();
    if (i < lo || i > hi) fail(detail::concat("'", prefix, key, "' = ", i, " is out of range [", lo, ", ", hi, "]"));
    return i;
  }
  // A finite number in [lo, hi].
  double number_in(const nlohmann::json& obj, const char* key, bool required, double lo, double hi,
                   const char* prefix = "") const {
    const nlohmann::json* v = find(obj, key);
    if (!v) {
      if (required) fail(detail::concat("missing '", prefix, key, "'"));
      return 0;
    }
    if (!v->is_number()) fail(detail::concat("'", prefix, key, "' must be a number, got ", describe(*v)));
    const double d = v->get<double>();
    if (!std::isfinite(d) || d < lo || d > hi)
      fail(detail::concat("'", prefix, key, "' = ", d, " is out of range [", lo, ", ", hi, "]"));
    return d;
  }
  // Microseconds in the file -> integer ns.
  int64_t time_ns(const char* key, bool required, double lo) const {
    return std::llround(number_in(e_, key, required, lo, kMaxTimeUs) * 1000.0);
  }
  // A Kineto timestamp in microseconds -> integer ns: relative to baseTimeNanoseconds (small),
  // or, as profilers before torch 2.1 wrote it, microseconds since the Unix epoch (1.7e15 in
  // 2024) up to kMaxEpochUs. Exact to the ns: the whole microseconds and the fraction apart, as
  // ts x 1000 in a double would round an epoch time to 256 ns.
  int64_t epoch_time_ns(const char* key) const {
    const double us = number_in(e_, key, true, -kMaxTimeUs, kMaxEpochUs);
    const double whole = std::floor(us);
    return int64_t(whole) * 1000 + std::llround((us - whole) * 1000.0);
  }
  const nlohmann::json& args() const {
    static const nlohmann::json empty = nlohmann::json::object();
    const nlohmann::json* a = find(e_, "args");
    if (!a) return empty;
    if (!a->is_object()) fail(detail::concat("'args' must be an object, got ", a->type_name()));
    return *a;
  }
  const nlohmann::json& json() const { return e_; }

 private:
  static std::string describe(const nlohmann::json& v) {
    if (v.is_number_float()) {
      const double d = v.get<double>();
      if (std::isfinite(d) && d == std::floor(d)) return detail::concat(d, " (written as a floating-point number, or beyond 64 bits)");
      return detail::concat("the non-integer ", d);
    }
    return v.type_name();
  }
  const nlohmann::json& e_;
  std::string where_;
};

}  // namespace ringside::trace

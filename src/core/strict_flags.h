// Command-line values as written, shared by `ringside` and `ringside-viewer`: one decimal
// number is a number; an empty value, a space, a sign where none belongs, hex (0x10), inf or a
// value that underflows to 0 (1e-400) is an error, never a silent reading (CLI11 and strtod take
// all of these). Flags take no value (--causal=false would run causal).
#pragma once
#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstdlib>
#include <set>
#include <string>

#include <CLI/CLI.hpp>

#include "core/error.h"

namespace ringside::cli {

// The number of decimal digits at v[at...], moving `at` past them. (Hand-written, not
// std::regex: its matcher recurses once per character, and a 30,000-digit value overflowed the
// stack.)
inline size_t skip_digits(const std::string& v, size_t& at) {
  const size_t from = at;
  while (at < v.size() && std::isdigit(static_cast<unsigned char>(v[at]))) ++at;
  return at - from;
}

/// An integer in decimal digits, with a leading minus if `negative` is allowed.
inline bool is_decimal_integer(const std::string& v, bool negative) {
  size_t at = negative && !v.empty() && v[0] == '-' ? 1 : 0;
  return skip_digits(v, at) > 0 && at == v.size();
}

/// A finite decimal number (1, -2.5, .5, 3e-7) that a double holds without overflow or underflow:
/// [-+]? (digits [.] digits? | . digits) ([eE] [-+]? digits)?.
inline bool is_decimal_number(const std::string& v) {
  size_t at = !v.empty() && (v[0] == '-' || v[0] == '+') ? 1 : 0;
  size_t mantissa = skip_digits(v, at);
  if (at < v.size() && v[at] == '.') ++at, mantissa += skip_digits(v, at);
  if (mantissa == 0) return false;
  if (at < v.size() && (v[at] == 'e' || v[at] == 'E')) {
    ++at;
    if (at < v.size() && (v[at] == '-' || v[at] == '+')) ++at;
    if (skip_digits(v, at) == 0) return false;
  }
  if (at != v.size()) return false;
  errno = 0;
  (void)std::strtod(v.c_str(), nullptr);
  return errno != ERANGE;
}

/// Makes every option of app and its subcommands mean what it says: an empty value is refused,
/// a number (by CLI11's type: INT, UINT, FLOAT) must be one decimal number as written, and a flag
/// takes no value. Its message comes first (a transform runs before the option's own checks).
/// Call once every option is added.
inline void strict_values(CLI::App& app) {
  for (CLI::Option* opt : app.get_options()) {
    if (opt->get_expected_max() == 0) {  // a flag
      opt->disable_flag_override();
      continue;
    }
    // CLI11 names the type first, then what a check added: "INT:INT in [1 - 256]".
    const std::string type = opt->get_type_name().substr(0, opt->get_type_name().find(':'));
    opt->transform(CLI::Validator(
        [type](std::string& v) -> std::string {
          if (v.empty()) return "needs a value, got an empty one";
          if (type == "INT" && !is_decimal_integer(v, true)) return "must be an integer, got '" + detail::shown_input(v) + "'";
          if (type == "UINT" && !is_decimal_integer(v, false)) return "must be an integer >= 0, got '" + detail::shown_input(v) + "'";
          if (type == "FLOAT" && !is_decimal_number(v)) return "must be a finite decimal number, got '" + detail::shown_input(v) + "'";
          // CLI11 reads a leading 0 as octal (--seq 064 was 52): decimal as written, so drop it.
          if (type == "INT" || type == "UINT") {
            const size_t sign = v[0] == '-' ? 1 : 0;
            const size_t first = std::min(v.find_first_not_of('0', sign), v.size() - 1);
            v.erase(sign, first - sign);
            if (v == "-0") v = "0";
            if (v.size() - sign > 20) return "must be an integer of 64 bits at most, got '" + detail::shown_input(v) + "'";
          }
          return "";
        },
        ""));
  }
  for (CLI::App* sub : app.get_subcommands({})) strict_values(*sub);
}

namespace detail_flags {
inline void collect_names(const CLI::App& app, std::set<std::string>& flags, std::set<std::string>& valued) {
  for (const CLI::Option* opt : app.get_options())
    for (const std::string& name : opt->get_lnames()) (opt->get_expected_max() == 0 ? flags : valued).insert("--" + name);
  for (const CLI::App* sub : app.get_subcommands([](const CLI::App*) { return true; })) collect_names(*sub, flags, valued);
}
}  // namespace detail_flags

/// Refuses `--flag=VALUE` for a flag (an option that takes no value), before parsing: CLI11
/// takes --causal=true and --collapse=true as the flag and refuses only values other than
/// "true", so a flag is written alone, everywhere. Throws CLI::ValidationError (exit 2).
inline void refuse_flag_values(const CLI::App& app, int argc, const char* const* argv) {
  std::set<std::string> flags, valued;
  detail_flags::collect_names(app, flags, valued);
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg == "--") break;
    const size_t eq = arg.find('=');
    if (!arg.starts_with("--") || eq == std::string::npos) continue;
    const std::string name = arg.substr(0, eq);
    if (flags.count(name) && !valued.count(name))
      throw CLI::ValidationError(detail::shown_input(arg, 48),
                                 name + " is a flag and takes no value: give " + name + " alone, or leave it out");
  }
}

}  // namespace ringside::cli

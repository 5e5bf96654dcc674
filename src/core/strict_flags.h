// Command-line values as written, shared by `ringside` and `ringside-viewer`: one decimal
// number is a number; an empty value, a space, a sign where none belongs, hex (0x10), inf or a
// value that underflows to 0 (1e-400) is an error, never a silent reading (CLI11 and strtod take
// all of these). Flags take no value (--causal=false would run causal).
#pragma once
#include <cerrno>
#include <cstdlib>
#include <regex>
#include <string>

#include <CLI/CLI.hpp>

namespace ringside::cli {

/// An integer in decimal digits, with a leading minus if `negative` is allowed.
inline bool is_decimal_integer(const std::string& v, bool negative) {
  static const std::regex with_sign("-?[0-9]+"), without("[0-9]+");
  return std::regex_match(v, negative ? with_sign : without);
}

/// A finite decimal number (1, -2.5, .5, 3e-7) that a double holds without overflow or underflow.
inline bool is_decimal_number(const std::string& v) {
  static const std::regex decimal(R"([-+]?([0-9]+\.?[0-9]*|\.[0-9]+)([eE][-+]?[0-9]+)?)");
  if (!std::regex_match(v, decimal)) return false;
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
          if (type == "INT" && !is_decimal_integer(v, true)) return "must be an integer, got '" + v + "'";
          if (type == "UINT" && !is_decimal_integer(v, false)) return "must be an integer >= 0, got '" + v + "'";
          if (type == "FLOAT" && !is_decimal_number(v)) return "must be a finite decimal number, got '" + v + "'";
          return "";
        },
        ""));
  }
  for (CLI::App* sub : app.get_subcommands({})) strict_values(*sub);
}

}  // namespace ringside::cli

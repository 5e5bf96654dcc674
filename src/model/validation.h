// `ringside validate`: the model held against published measurements.
//
// Each case (src/model/validation/*.json, compiled in; or a file given) is a published number
// with its source (a URL and the table or figure), the hardware profile and kernel that stand
// for the machine it ran on, the `ringside model` arguments of the same configuration, the
// measured value with its unit and definition, and a tolerance (15% unless the case says why it
// is looser). Cases of one `group` are one table's columns: the order the measurements put them
// in (zigzag faster than stripe faster than ring) must hold in the model too.
#pragma once
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace ringside::model {

struct ValidationCase {
  std::string name;
  std::string title, url, where;  ///< the source
  std::string profile;            ///< the hardware profile it maps to (a built-in one)
  std::string kernel, configuration, hardware_note;
  std::vector<std::string> args;  ///< `ringside model` arguments
  double measured_s = 0;          ///< the published value, in seconds
  std::string measured_text;      ///< as published: "57.47 ms"
  std::string quantity;           ///< a JSON pointer into `model --json`: /attention/total_s, /layer/total_s, ...
  std::string definition;
  std::string group;
  double tolerance = 0.15;        ///< |modeled / measured - 1| allowed
  std::string tolerance_reason;   ///< required past 0.15
};

/// The quantities a case may compare (pointers into `ringside model --json`).
const std::vector<std::string>& validation_quantities();

/// Parses one case; throws ConfigError naming `source` and the field (a missing source, an
/// unknown profile, a quantity not in validation_quantities, a unit other than s, ms or us, a
/// tolerance outside (0, 1] or past 0.15 without tolerance_reason, args without `--hw PROFILE`).
ValidationCase parse_validation_case(const nlohmann::json& j, const std::string& source);

/// The built-in cases, in name order.
std::vector<ValidationCase> builtin_validation_cases();

/// A case beside its modeled value.
struct ValidationRow {
  ValidationCase c;
  double modeled_s = 0;
  double error() const { return modeled_s / c.measured_s - 1; }  ///< signed: < 0, the model is too fast
  bool within() const;
};

/// One group's order: the case names from fastest to slowest, as measured and as modeled.
struct ValidationOrder {
  std::string group;
  std::vector<std::string> measured, modeled;
  /// Whether every pair measured faster is modeled faster (a pair measured equal, a tie,
  /// orders nothing).
  bool agrees = true;
  bool holds() const { return agrees; }
};
/// The orders of every group of two or more rows, in first-seen order.
std::vector<ValidationOrder> validation_orders(const std::vector<ValidationRow>& rows);

/// The median and the worst |error| of `rows` (0 for none).
double median_abs_error(const std::vector<ValidationRow>& rows);
double worst_abs_error(const std::vector<ValidationRow>& rows);

}  // namespace ringside::model

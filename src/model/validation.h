// `ringside validate`: the model held against published measurements, and the discipline that
// keeps the comparison honest.
//
// Each case (src/model/validation/*.json, compiled in; or a file given) is a published number
// with its source (an id shared by the cases of one publication, a URL, the table or figure),
// the hardware profile and kernel that stand for the machine it ran on, the `ringside model`
// arguments of the same configuration (its --stack among them), the measured value with its
// unit and definition (a time, tokens/s per GPU, or TFLOP/s per GPU with the FLOP count it
// used), and whether its figures informed any fitted parameter (model/parameters.h):
//
//   "fit": {"informs": ["attention.occupancy.forward", ...], "why": "..."}   the fit set
//   "fit": false                                                             held out
//
// A case enters held out; a parameter re-fitted with it moves it to the fit set, and the case
// says so. `validate` prints the two sets apart, each with its median and worst |error| and its
// mean signed error, and `--leave-out SOURCE` refits the parameters without one source's cases
// and predicts them. A case whose figure cannot be compared as published (a FLOP count the
// source does not state) is "status": "reference": shown, with its reason, and counted in
// neither set. Cases of one `group` are one table's columns: the order the measurements put
// them in must hold in the model too.
#pragma once
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "model/flops.h"

namespace ringside::model {

struct ValidationCase {
  std::string name;
  std::string source_id;          ///< the publication: its cases are left out together
  std::string title, url, where;  ///< the source
  std::string profile;            ///< the hardware profile it maps to (a built-in one)
  std::string kernel, configuration, hardware_note;
  std::vector<std::string> args;  ///< `ringside model` arguments
  double measured = 0;            ///< the published value in `unit` (a time in seconds)
  std::string unit;               ///< "s" (given in s, ms or us), "tokens/s/gpu" or "TFLOP/s/gpu"
  FlopCount convention = FlopCount::whole;  ///< of a TFLOP/s figure
  std::string measured_text;      ///< as published: "57.47 ms", "8532 tokens/s/gpu"
  std::string quantity;           ///< a JSON pointer into `model --json`: /attention/total_s, /step/step_s, ...
  std::string definition;
  std::string group;
  double tolerance = 0.20;        ///< |error| allowed
  std::string tolerance_reason;   ///< required past 0.20
  bool fit = false;               ///< its figures informed the parameters in `informs`
  std::vector<std::string> informs;
  std::string fit_why;
  bool counted = true;            ///< false: "status": "reference", in neither set
  std::string reference_reason;
  /// A rate (tokens/s, TFLOP/s: higher is faster) rather than a time.
  bool rate() const { return unit != "s"; }
};

/// The quantities a case may compare (pointers into `ringside model --json`, with
/// /step/tokens_per_s_per_gpu and /step/tflops_per_gpu for the rates).
const std::vector<std::string>& validation_quantities();

/// Parses one case; throws ConfigError naming `source` and the field: a missing source or source
/// id, an unknown profile, a quantity not in validation_quantities or not matching its unit, a
/// unit other than s, ms, us, tokens/s/gpu or TFLOP/s/gpu, a TFLOP/s figure without its
/// convention, a tolerance outside (0, 1] or past 0.20 without tolerance_reason, args without
/// `--hw PROFILE`, a "fit" that is neither false nor {"informs": [...]} naming known parameters
/// (model/parameters.h), a held-out case that names parameters, a reference case without its
/// reason.
ValidationCase parse_validation_case(const nlohmann::json& j, const std::string& source);

/// The built-in cases, in name order.
std::vector<ValidationCase> builtin_validation_cases();

struct Hardware;

/// "" where some built-in validation case ran on `hw`'s GPU part (its profile's "gpu", through its
/// base); else a clause for a trust line: "; none of them ran on a b200 GPU: its rates are its
/// sources', no whole run has tested them" (a Blackwell profile against Hopper's and Ampere's bands).
std::string unvalidated_gpu_note(const Hardware& hw);

/// A case beside its modeled value (in the case's unit).
struct ValidationRow {
  ValidationCase c;
  double modeled = 0;
  /// modeled time / measured time - 1 (for a rate, measured / modeled - 1): < 0, the model is
  /// too fast.
  double error() const { return c.rate() ? c.measured / modeled - 1 : modeled / c.measured - 1; }
  bool within() const;
};

/// How far apart two measurements of one group must be for their order to be held: 10%, about
/// the model's held-out median error.
inline constexpr double kOrderResolution = 0.10;

/// One group's order: the case names from fastest to slowest, as measured and as modeled.
struct ValidationOrder {
  std::string group;
  std::vector<std::string> measured, modeled;
  /// Whether every pair measured more than kOrderResolution faster is modeled faster (a pair
  /// measured closer than that orders nothing).
  bool agrees = true;
  bool holds() const { return agrees; }
};
/// The orders of every group of two or more rows, in first-seen order.
std::vector<ValidationOrder> validation_orders(const std::vector<ValidationRow>& rows);

/// A set's figures: how many, the median and worst |error|, and the mean signed error (all 0
/// for none).
struct ErrorSummary {
  size_t cases = 0;
  double median = 0, worst = 0, mean = 0;
};
ErrorSummary summarize(const std::vector<double>& errors);

}  // namespace ringside::model

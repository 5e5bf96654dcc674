// The model's fitted parameters: the few values that published end-to-end runs chose (the
// attention kernels' occupancy, a GPU's sustained clock, a software stack's per-step costs),
// each with its prior, its range and where it lives in the profile or stack files.
//
// Every other number of a profile or stack comes from a kernel- or link-level measurement with
// its source (docs/calibration.md); these alone are fitted to `ringside validate`'s cases, and
// the cases say which ones they informed (model/validation.h: "fit"). `ringside validate
// --leave-out SOURCE` refits them without one source's cases and predicts those: the fitting
// sets a parameter's value for a while (ScopedParameterValues), and every profile or stack
// loaded meanwhile reads it.
#pragma once
#include <map>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace ringside::model {

/// One fitted parameter (src/model/fits/parameters.json).
struct FittedParameter {
  std::string name;                 ///< "fa2.occupancy.forward"
  std::string what;                 ///< a line: what it stands for
  double prior = 0;                 ///< its value with no case to fit (the physical argument's)
  std::string prior_source;         ///< why that value
  double lo = 0, hi = 0;            ///< the range a fit searches
  /// Where its value lives: "h100-nvlink:/efficiency/attention/fa2/occupancy/forward" (a
  /// built-in profile) or "stack:megatron:/host/kernel_us"; every target holds the same value.
  std::vector<std::string> targets;
};

/// The registry, in file order. Throws ConfigError for a malformed file (a test reads it).
const std::vector<FittedParameter>& fitted_parameters();
/// The parameter named `name`, or nullptr.
const FittedParameter* fitted_parameter(const std::string& name);
/// A parameter's value as its targets hold it now (overrides included). Throws ConfigError when
/// the targets disagree or one does not exist.
double fitted_value(const FittedParameter& p);

/// Values set for the lifetime of the object, on this thread and every thread it starts
/// afterwards (the dry run's ranks load nothing): the fit's trial values. Nested scopes stack.
class ScopedParameterValues {
 public:
  explicit ScopedParameterValues(const std::map<std::string, double>& values);
  ~ScopedParameterValues();
  ScopedParameterValues(const ScopedParameterValues&) = delete;
  ScopedParameterValues& operator=(const ScopedParameterValues&) = delete;

 private:
  std::map<std::string, std::vector<double>> saved_;
};

/// `file`'s JSON (a built-in profile's name, or "stack:NAME") with the values set now in place.
nlohmann::json apply_parameter_overrides(const std::string& file, nlohmann::json j);

}  // namespace ringside::model

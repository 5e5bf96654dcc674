// The fitted parameters' registry and the values a fit sets for a while (parameters.h).
#include "model/parameters.h"

#include <cmath>
#include <mutex>

#include "core/error.h"

namespace ringside::model {

extern const std::vector<std::pair<std::string, std::string>> kFits;

nlohmann::json hardware_json(const std::string& name);  // hardware.cpp
nlohmann::json stack_json(const std::string& name);     // stack.cpp

namespace {

std::mutex g_mutex;
// file -> (JSON pointer -> value): what is set now.
std::map<std::string, std::map<std::string, double>> g_values;

std::pair<std::string, std::string> split_target(const std::string& target) {
  const size_t slash = target.find(":/");
  if (slash == std::string::npos) throw ConfigError("fitted parameter target " + target + " is not FILE:/POINTER");
  return {target.substr(0, slash), target.substr(slash + 1)};
}

std::vector<FittedParameter> parse_registry() {
  std::vector<FittedParameter> out;
  for (const auto& [name, text] : kFits) {
    if (name != "parameters") continue;
    const nlohmann::json j = nlohmann::json::parse(text);
    for (const nlohmann::json& p : j.at("parameters")) {
      FittedParameter f;
      f.name = p.at("name").get<std::string>();
      f.what = p.at("what").get<std::string>();
      f.prior = p.at("prior").get<double>();
      f.prior_source = p.at("prior_source").get<std::string>();
      f.lo = p.at("range").at(0).get<double>();
      f.hi = p.at("range").at(1).get<double>();
      for (const nlohmann::json& t : p.at("targets")) f.targets.push_back(t.get<std::string>());
      if (f.targets.empty() || !(f.lo < f.hi) || f.prior < f.lo || f.prior > f.hi)
        throw ConfigError("src/model/fits/parameters.json: " + f.name + ": needs targets, lo < hi and its prior inside");
      for (const std::string& t : f.targets) split_target(t);
      out.push_back(std::move(f));
    }
  }
  return out;
}

}  // namespace

const std::vector<FittedParameter>& fitted_parameters() {
  static const std::vector<FittedParameter> registry = parse_registry();
  return registry;
}

const FittedParameter* fitted_parameter(const std::string& name) {
  for (const FittedParameter& p : fitted_parameters())
    if (p.name == name) return &p;
  return nullptr;
}

double fitted_value(const FittedParameter& p) {
  double value = 0;
  for (size_t i = 0; i < p.targets.size(); ++i) {
    const auto [file, pointer] = split_target(p.targets[i]);
    const nlohmann::json j = file.rfind("stack:", 0) == 0 ? stack_json(file.substr(6)) : hardware_json(file);
    const nlohmann::json::json_pointer ptr(pointer);
    if (!j.contains(ptr) || !j.at(ptr).is_number())
      throw ConfigError("fitted parameter " + p.name + ": " + p.targets[i] + " holds no number");
    const double v = j.at(ptr).get<double>();
    if (i > 0 && v != value)
      throw ConfigError(detail::concat("fitted parameter ", p.name, ": ", p.targets[i], " holds ", v, ", ", p.targets[0], " ", value));
    value = v;
  }
  return value;
}

ScopedParameterValues::ScopedParameterValues(const std::map<std::string, double>& values) {
  std::lock_guard<std::mutex> lock(g_mutex);
  for (const auto& [name, value] : values) {
    const FittedParameter* p = fitted_parameter(name);
    if (!p) throw ConfigError("no fitted parameter " + name);
    for (const std::string& t : p->targets) {
      const auto [file, pointer] = split_target(t);
      auto& at = g_values[file];
      const auto it = at.find(pointer);
      // NaN marks "was not set": restored by erasing.
      saved_[t].push_back(it == at.end() ? std::nan("") : it->second);
      at[pointer] = value;
    }
  }
}

ScopedParameterValues::~ScopedParameterValues() {
  std::lock_guard<std::mutex> lock(g_mutex);
  for (auto& [target, stack] : saved_) {
    const auto [file, pointer] = split_target(target);
    for (auto it = stack.rbegin(); it != stack.rend(); ++it) {
      if (std::isnan(*it)) g_values[file].erase(pointer);
      else g_values[file][pointer] = *it;
    }
  }
}

nlohmann::json apply_parameter_overrides(const std::string& file, nlohmann::json j) {
  std::lock_guard<std::mutex> lock(g_mutex);
  const auto it = g_values.find(file);
  if (it == g_values.end()) return j;
  for (const auto& [pointer, value] : it->second) j[nlohmann::json::json_pointer(pointer)] = value;
  return j;
}

}  // namespace ringside::model

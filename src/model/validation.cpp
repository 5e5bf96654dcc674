// The validation cases and their comparison (validation.h).
#include "model/validation.h"

#include <algorithm>
#include <cmath>

#include "core/error.h"
#include "core/json_input.h"
#include "model/model.h"
#include "model/parameters.h"

namespace ringside::model {

extern const std::vector<std::pair<std::string, std::string>> kValidationCases;

const std::vector<std::string>& validation_quantities() {
  static const std::vector<std::string> q{"/layer/forward_s",     "/layer/backward_s",     "/layer/total_s",
                                          "/attention/forward_s", "/attention/backward_s", "/attention/total_s",
                                          "/step/step_s",         "/step/tokens_per_s_per_gpu", "/step/tflops_per_gpu"};
  return q;
}

ValidationCase parse_validation_case(const nlohmann::json& j, const std::string& source) {
  const std::string where = source + ": ";
  if (!j.is_object()) throw ConfigError(source + ": a validation case is a JSON object");
  ValidationCase c;
  c.name = json_text(j, "name", where);
  if (c.name.size() > 64 || std::any_of(c.name.begin(), c.name.end(), [](char ch) { return ch <= 0x20 || ch > 0x7e; }))
    throw ConfigError(where + "name must be 1 to 64 printable characters without spaces");
  const std::string at = where + "case " + c.name + ": ";
  if (!j.contains("source") || !j["source"].is_object())
    throw ConfigError(at + "source must say where the number was published ({id, title, url, where})");
  const nlohmann::json& src = j["source"];
  c.source_id = json_text(src, "id", at + "source.");
  if (c.source_id.size() > 64 || std::any_of(c.source_id.begin(), c.source_id.end(), [](char ch) { return ch <= 0x20 || ch > 0x7e; }))
    throw ConfigError(at + "source.id must be 1 to 64 printable characters without spaces");
  c.title = json_text(src, "title", at + "source.");
  c.url = json_text(src, "url", at + "source.");
  c.where = json_text(src, "where", at + "source.");
  if (c.url.rfind("https://", 0) != 0 && c.url.rfind("http://", 0) != 0)
    throw ConfigError(at + "source.url must be a URL (http:// or https://)");
  const nlohmann::json& hw = json_object(j, "hardware", at);
  c.profile = json_text(hw, "profile", at + "hardware.");
  const std::vector<std::string> names = hardware_names();
  if (c.profile == "this-machine" || std::find(names.begin(), names.end(), c.profile) == names.end()) {
    std::string list;
    for (const std::string& n : names)
      if (n != "this-machine") list += (list.empty() ? "" : ", ") + n;
    throw ConfigError(at + "hardware.profile " + detail::shown_input(c.profile) + " is not a built-in profile (" + list + ")");
  }
  c.hardware_note = hw.contains("note") ? json_text(hw, "note", at + "hardware.") : "";
  c.kernel = json_text(j, "kernel", at);
  c.configuration = json_text(j, "configuration", at);
  const auto args = j.find("args");
  if (args == j.end() || !args->is_array() || args->empty())
    throw ConfigError(at + "args must be the `ringside model` arguments (an array of strings)");
  for (const nlohmann::json& a : *args) {
    if (!a.is_string()) throw ConfigError(at + "args must be an array of strings");
    c.args.push_back(a.get<std::string>());
  }
  bool own_profile = false;
  for (size_t i = 0; i < c.args.size(); ++i) {
    if (c.args[i] == "--help" || c.args[i] == "-h") throw ConfigError(at + "args may not ask for --help");
    own_profile |= c.args[i] == "--hw=" + c.profile || (c.args[i] == "--hw" && i + 1 < c.args.size() && c.args[i + 1] == c.profile);
  }
  if (!own_profile) throw ConfigError(at + "args must model the case's own profile: --hw " + c.profile);
  const nlohmann::json& m = json_object(j, "measured", at);
  const auto value = m.find("value");
  if (value == m.end() || !value->is_number() || !std::isfinite(value->get<double>()) || value->get<double>() <= 0)
    throw ConfigError(at + "measured.value must be a positive number");
  const std::string unit = json_text(m, "unit", at + "measured.");
  const double v = value->get<double>();
  c.measured_text = detail::concat(v, " ", unit);
  const double scale = unit == "s" ? 1 : unit == "ms" ? 1e-3 : unit == "us" ? 1e-6 : 0;
  if (scale > 0) {
    c.unit = "s", c.measured = v * scale;
    // A GPU's layer or attention call: a microsecond to a day; outside it, a unit slip.
    if (!(c.measured >= 1e-6 && c.measured <= 86400))
      throw ConfigError(at + "measured.value must be between 1 us and 1 day (" + unit + " as given: check the unit)");
  } else if (unit == "tokens/s/gpu" || unit == "TFLOP/s/gpu") {
    c.unit = unit, c.measured = v;
    if (unit == "TFLOP/s/gpu" && !(v <= 1e5)) throw ConfigError(at + "measured.value: TFLOP/s per GPU past 100,000 (check the unit)");
  } else {
    throw ConfigError(at + "measured.unit must be s, ms, us, tokens/s/gpu or TFLOP/s/gpu");
  }
  c.quantity = json_text(m, "quantity", at + "measured.");
  const auto& known = validation_quantities();
  if (std::find(known.begin(), known.end(), c.quantity) == known.end()) {
    std::string list;
    for (const std::string& q : known) list += (list.empty() ? "" : ", ") + q;
    throw ConfigError(at + "measured.quantity " + detail::shown_input(c.quantity) + " is none of " + list);
  }
  const std::string wants = c.quantity == "/step/tokens_per_s_per_gpu" ? "tokens/s/gpu" : c.quantity == "/step/tflops_per_gpu" ? "TFLOP/s/gpu" : "s";
  if (wants != c.unit)
    throw ConfigError(at + "measured.quantity " + c.quantity + " is in " + (wants == "s" ? "s, ms or us" : wants) + ", not " + unit);
  if (c.unit == "TFLOP/s/gpu") {
    const std::string conv = json_text(m, "convention", at + "measured.");
    if (!parse_flop_count(conv, c.convention))
      throw ConfigError(at + "measured.convention " + detail::shown_input(conv) +
                        ": how the figure counts FLOPs: causal (attention causally halved), whole, or whole+recompute");
  }
  const bool gbs = std::any_of(c.args.begin(), c.args.end(), [](const std::string& a) { return a == "--gbs" || a.starts_with("--gbs="); });
  if (c.quantity.starts_with("/step/") && !gbs)
    throw ConfigError(at + "measured.quantity " + c.quantity + " is a whole step's: args need --gbs (the global batch)");
  if (!c.quantity.starts_with("/step/") && gbs)
    throw ConfigError(at + "measured.quantity " + c.quantity + " is one layer's: args model a whole step (--gbs): measure /step/...");
  c.definition = json_text(m, "definition", at + "measured.");
  c.group = j.contains("group") ? json_text(j, "group", at) : c.name;
  const auto tol = j.find("tolerance");
  if (tol != j.end()) {
    if (!tol->is_number() || !(tol->get<double>() > 0 && tol->get<double>() <= 1))
      throw ConfigError(at + "tolerance must be a fraction in (0, 1]");
    c.tolerance = tol->get<double>();
  }
  c.tolerance_reason = j.contains("tolerance_reason") ? json_text(j, "tolerance_reason", at) : "";
  if (c.tolerance > 0.20 && c.tolerance_reason.empty())
    throw ConfigError(at + "a tolerance past 0.20 needs tolerance_reason: why this case is held more loosely");
  // The fit: false (held out), or the parameters its figures informed.
  const auto fit = j.find("fit");
  if (fit == j.end() || !(fit->is_boolean() || fit->is_object()))
    throw ConfigError(at + "fit must be false (held out: no parameter saw it) or {\"informs\": [parameters], \"why\": ...}");
  if (fit->is_boolean()) {
    if (fit->get<bool>()) throw ConfigError(at + "fit: true must say which parameters it informed: {\"informs\": [...], \"why\": ...}");
  } else {
    c.fit = true;
    const auto informs = fit->find("informs");
    if (informs == fit->end() || !informs->is_array() || informs->empty())
      throw ConfigError(at + "fit.informs must list the fitted parameters the case informed");
    for (const nlohmann::json& p : *informs) {
      if (!p.is_string() || !fitted_parameter(p.get<std::string>())) {
        std::string list;
        for (const FittedParameter& f : fitted_parameters()) list += (list.empty() ? "" : ", ") + f.name;
        throw ConfigError(at + "fit.informs: " + detail::shown_input(p.is_string() ? p.get<std::string>() : p.dump()) +
                          " is not a fitted parameter (" + list + ")");
      }
      c.informs.push_back(p.get<std::string>());
    }
    c.fit_why = json_text(*fit, "why", at + "fit.");
  }
  if (j.contains("informs")) throw ConfigError(at + "informs belongs in fit: a held-out case informs no parameter");
  const std::string status = j.contains("status") ? json_text(j, "status", at) : "validation";
  if (status != "validation" && status != "reference") throw ConfigError(at + "status must be validation or reference");
  if (status == "reference") {
    c.counted = false;
    c.reference_reason = json_text(j, "reference_reason", at);
    if (c.fit) throw ConfigError(at + "a reference case informs no parameter");
  }
  return c;
}

std::vector<ValidationCase> builtin_validation_cases() {
  std::vector<ValidationCase> cases;
  for (const auto& [name, body] : kValidationCases)
    cases.push_back(parse_validation_case(parse_json(body, "src/model/validation/" + name + ".json"),
                                          "src/model/validation/" + name + ".json"));
  std::sort(cases.begin(), cases.end(), [](const auto& a, const auto& b) { return a.name < b.name; });
  return cases;
}

bool ValidationRow::within() const { return std::isfinite(modeled) && modeled > 0 && std::fabs(error()) <= c.tolerance + 1e-12; }

std::vector<ValidationOrder> validation_orders(const std::vector<ValidationRow>& rows) {
  std::vector<ValidationOrder> orders;
  std::vector<std::string> groups;
  for (const ValidationRow& r : rows)
    if (std::find(groups.begin(), groups.end(), r.c.group) == groups.end()) groups.push_back(r.c.group);
  for (const std::string& g : groups) {
    std::vector<const ValidationRow*> in;
    for (const ValidationRow& r : rows)
      if (r.c.group == g) in.push_back(&r);
    if (in.size() < 2) continue;
    ValidationOrder o{g, {}, {}};
    auto names = [&](auto key) {
      std::vector<const ValidationRow*> sorted = in;
      std::stable_sort(sorted.begin(), sorted.end(), [&](const auto* a, const auto* b) { return key(a) < key(b); });
      std::vector<std::string> n;
      for (const ValidationRow* r : sorted) n.push_back(r->c.name);
      return n;
    };
    // Fastest first: the shortest time, or the highest rate.
    auto time_of = [](const ValidationRow* r, double v) { return r->c.rate() ? 1 / v : v; };
    o.measured = names([&](const ValidationRow* r) { return time_of(r, r->c.measured); });
    o.modeled = names([&](const ValidationRow* r) { return time_of(r, r->modeled); });
    // Only a pair measured more than kOrderResolution apart orders anything: closer than the
    // model's held-out median error, which comes first is not the model's to say.
    for (const ValidationRow* a : in)
      for (const ValidationRow* b : in)
        if (time_of(a, a->c.measured) * (1 + kOrderResolution) < time_of(b, b->c.measured) &&
            !(time_of(a, a->modeled) < time_of(b, b->modeled)))
          o.agrees = false;
    orders.push_back(std::move(o));
  }
  return orders;
}

ErrorSummary summarize(const std::vector<double>& errors) {
  ErrorSummary s;
  s.cases = errors.size();
  if (errors.empty()) return s;
  std::vector<double> a;
  for (double e : errors) a.push_back(std::fabs(e)), s.mean += e / double(errors.size()), s.worst = std::max(s.worst, std::fabs(e));
  std::sort(a.begin(), a.end());
  const size_t n = a.size();
  s.median = n % 2 ? a[n / 2] : (a[n / 2 - 1] + a[n / 2]) / 2;
  return s;
}

std::string unvalidated_gpu_note(const Hardware& hw) {
  if (hw.gpu.empty()) return "";  // a measured or hand-written profile: no part to look for
  static const std::vector<std::string> tested = [] {
    std::vector<std::string> gpus;
    for (const ValidationCase& c : builtin_validation_cases()) {
      const nlohmann::json j = hardware_json(c.profile);
      if (j.contains("gpu") && j["gpu"].is_string()) gpus.push_back(j["gpu"]);
    }
    return gpus;
  }();
  if (std::find(tested.begin(), tested.end(), hw.gpu) != tested.end()) return "";
  return "; none of them ran on a " + hw.gpu + " GPU: its rates are its sources', no whole run has tested them";
}

}  // namespace ringside::model

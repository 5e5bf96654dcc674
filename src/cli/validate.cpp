// `ringside validate`: the model against published measurements (model/validation.h).
#include <sys/stat.h>

#include <algorithm>
#include <cmath>
#include <cstdio>

#include "cli/commands.h"
#include "cli/format.h"
#include "core/error.h"
#include "core/json_input.h"
#include "core/output.h"
#include "core/strict_flags.h"
#include "model/validation.h"

namespace ringside::cli {

CLI::App* add_validate(CLI::App& app, ValidateOptions& o) {
  CLI::App* v = app.add_subcommand(
      "validate", "The model against published measurements: modeled beside measured, the error per case, the orders");
  v->add_option("cases", o.cases, "case names (built-in) or case JSON files; none: every built-in case")->option_text("CASE...");
  v->add_option("--json", o.json, "write the table (seconds, errors, orders)")->option_text("FILE")->check(
      non_empty("--json needs a file name"));
  v->footer(
      "Examples:\n"
      "  ringside validate                          # every built-in case (src/model/validation/*.json)\n"
      "  ringside validate rfa-zigzag-fwd-bwd-h800  # one case\n"
      "  ringside validate my-case.json --json out/validate.json");
  return v;
}

namespace {

std::vector<model::ValidationCase> cases_of(const ValidateOptions& o) {
  std::vector<model::ValidationCase> all = model::builtin_validation_cases();
  if (o.cases.empty()) return all;
  std::vector<model::ValidationCase> chosen;
  for (const std::string& name : o.cases) {
    auto it = std::find_if(all.begin(), all.end(), [&](const auto& c) { return c.name == name; });
    if (it != all.end()) {
      chosen.push_back(*it);
    } else if (output::is_regular(name)) {
      const std::string text = output::read_input(name, "validate", 1u << 20);
      try {
        chosen.push_back(model::parse_validation_case(parse_json(text, name), detail::shown_input(name, 200)));
      } catch (const ConfigError&) {
        throw;
      } catch (const Error& e) {
        throw ConfigError(e.what());  // not JSON: a bad case, before any work
      }
    } else if (struct stat st {}; ::stat(name.c_str(), &st) == 0) {
      throw ConfigError("validate: " + detail::shown_input(name) + ": not a regular file (a case file is a regular JSON file)");
    } else if (name.find('/') != std::string::npos || name.find('.') != std::string::npos) {
      throw ConfigError("validate: " + detail::shown_input(name) + ": no such file (a case file is a regular JSON file)");
    } else {
      throw ConfigError("validate: " + detail::shown_input(name) +
                        " is neither a built-in case nor a file (`ringside validate` lists the built-in ones)");
    }
  }
  for (size_t i = 0; i < chosen.size(); ++i)
    for (size_t j = 0; j < i; ++j)
      if (chosen[i].name == chosen[j].name) throw ConfigError("validate: the case " + chosen[i].name + " is given twice");
  return chosen;
}

// The case's `ringside model` arguments, parsed by the model command's own parser.
ModelCommandOptions model_options_of(const model::ValidationCase& c) {
  CLI::App app;
  ModelCommandOptions mo;
  CLI::App* model = add_model(app, mo);
  strict_values(app);
  std::vector<std::string> argv{"model"};
  argv.insert(argv.end(), c.args.begin(), c.args.end());
  std::reverse(argv.begin(), argv.end());  // CLI11 parses a vector from its back
  try {
    app.parse(argv);
  } catch (const CLI::ParseError& e) {
    throw ConfigError("validate: case " + c.name + ": its args are not a `ringside model` command: " + e.what());
  }
  if (!model->parsed()) throw ConfigError("validate: case " + c.name + ": its args are not a `ringside model` command");
  if (!mo.trace.empty() || !mo.json.empty() || !mo.from.empty())
    throw ConfigError("validate: case " + c.name + ": its args may not read or write files (--from, --trace, --json)");
  return mo;
}

std::string command_of(const model::ValidationCase& c) {
  std::string s = "ringside model";
  for (const std::string& a : c.args) s += " " + a;
  return s;
}

}  // namespace

int validate_command(const ValidateOptions& o) {
  std::vector<output::Named> inputs;
  for (const std::string& c : o.cases)
    if (output::is_regular(c)) inputs.push_back({"a case", c});
  output::check_distinct({{"--json", o.json}}, inputs);  // the results never overwrite a case
  if (!o.json.empty()) output::check(o.json, "--json");
  const std::vector<model::ValidationCase> cases = cases_of(o);
  // Every case's arguments first, as `ringside model` checks them: a bad one is refused, by
  // name, before any case runs.
  std::vector<ModelCommandOptions> options;
  for (const model::ValidationCase& c : cases) {
    options.push_back(model_options_of(c));
    model::Hardware hw;
    try {
      hw = check_model_command(options.back());
    } catch (const ConfigError& e) {
      throw ConfigError("validate: case " + c.name + ": " + e.what());
    }
    // The rates the case is held at are the ones it names: its kernel field says which
    // attention kernel's rates model it, and a case at the ideal efficiency (no kernel) would
    // not be "at the rates real GPUs reach".
    const std::string kernel = model::attention_kernel_of(hw, model_options(options.back()));
    if (kernel.empty())
      throw ConfigError("validate: case " + c.name + ": validate models at the rates real GPUs reach, not --efficiency " +
                        options.back().efficiency);
    if (c.kernel.find(kernel) == std::string::npos)
      throw ConfigError("validate: case " + c.name + ": its args model attention at " + kernel + "'s rates, which its kernel (" +
                        detail::shown_input(c.kernel, 80) + ") does not name (give --attention-kernel, or name " + kernel + ")");
  }

  std::printf("ringside validate: the model, at the rates real GPUs reach, against %zu published measurement%s\n\n",
              cases.size(), cases.size() == 1 ? "" : "s");
  // The table is kept as text too: the README quotes it, drift-checked (`--json`'s /table).
  std::string table;
  auto add = [&table](const char* format, auto... args) {
    char line[256];
    std::snprintf(line, sizeof line, format, args...);
    table += line;
  };
  add("  %-28s %-12s %-6s %12s %12s %8s %6s\n", "case", "hardware", "kernel", "published", "modeled", "error", "within");
  std::vector<model::ValidationRow> rows;
  nlohmann::json out = {{"producer", "ringside validate"}, {"cases", nlohmann::json::array()}};
  for (size_t i = 0; i < cases.size(); ++i) {
    const model::ValidationCase& c = cases[i];
    ModelRun run;
    try {
      run_model(options[i], run);
    } catch (const ConfigError& e) {
      throw ConfigError("validate: case " + c.name + ": " + e.what());
    }
    if (run.reports.empty()) throw ConfigError("validate: case " + c.name + ": the model reported nothing");
    nlohmann::json report = model::report_json(run.reports.front(), options[i].only == "attention");
    if (run.step) report["step"] = step_row_json(*run.step, run.hw, 1);
    const nlohmann::json::json_pointer pointer(c.quantity);
    if (!report.contains(pointer)) {
      const bool step = c.quantity.rfind("/step/", 0) == 0;
      throw ConfigError("validate: case " + c.name + ": " + c.quantity + " is not in this model's report (" +
                        (!step ? std::string("--only attention has no /layer")
                         : !run.step ? std::string("a /step quantity needs --gbs in the case's args")
                                     : "the step does not fit: " + run.step->reason) + ")");
    }
    model::ValidationRow row{c, report.at(pointer).get<double>()};
    const std::string kernel = model::attention_kernel_of(run.hw, model_options(options[i]));
    add("  %-28s %-12s %-6s %12s %12s %+7.1f%% %6s\n", c.name.c_str(), c.profile.c_str(), kernel.c_str(),
                format_seconds(c.measured_s).c_str(), format_seconds(row.modeled_s).c_str(), 100 * row.error(),
                row.within() ? "yes" : "NO");
    out["cases"].push_back({{"name", c.name},
                            {"source", {{"title", c.title}, {"url", c.url}, {"where", c.where}}},
                            {"hardware", c.profile},
                            {"attention_kernel", kernel},
                            {"command", command_of(c)},
                            {"quantity", c.quantity},
                            {"published", c.measured_text},
                            {"published_s", c.measured_s},
                            {"modeled_s", row.modeled_s},
                            {"error", row.error()},
                            {"tolerance", c.tolerance},
                            {"within", row.within()}});
    rows.push_back(std::move(row));
  }
  size_t within = 0;
  for (const model::ValidationRow& r : rows) within += r.within();
  const double median = model::median_abs_error(rows), worst = model::worst_abs_error(rows);
  add("\n  %zu of %zu within tolerance; |error| median %.1f%%, worst %.1f%%\n", within, rows.size(), 100 * median, 100 * worst);
  out["within"] = within, out["median_abs_error"] = median, out["worst_abs_error"] = worst;
  out["orders"] = nlohmann::json::array();
  bool orders_hold = true;
  const std::vector<model::ValidationOrder> orders = model::validation_orders(rows);
  if (!orders.empty()) add("\n  orders (fastest first), as measured and as modeled:\n");
  for (const model::ValidationOrder& ord : orders) {
    auto joined = [](const std::vector<std::string>& v) {
      std::string s;
      for (const std::string& n : v) s += (s.empty() ? "" : " < ") + n;
      return s;
    };
    table += "  " + ord.group + ": " + (ord.holds() ? "holds: " : "DIFFERS: ") + joined(ord.measured) +
             (ord.holds() ? "" : "; modeled " + joined(ord.modeled)) + "\n";
    orders_hold &= ord.holds();
    out["orders"].push_back({{"group", ord.group}, {"measured", ord.measured}, {"modeled", ord.modeled}, {"holds", ord.holds()}});
  }
  std::fputs(table.c_str(), stdout);
  out["table"] = table;
  std::printf("\n  sources and commands: ringside validate --json FILE, or src/model/validation/*.json\n");
  if (!o.json.empty()) output::write(o.json, out.dump(2) + "\n", "--json");
  return within == rows.size() && orders_hold ? 0 : 1;
}

}  // namespace ringside::cli

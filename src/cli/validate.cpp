// `ringside validate`: the model against published measurements (model/validation.h), the fitted
// parameters refitted from the cases that inform them (model/parameters.h), and the error bands
// the held-out cases give (model/bands.h).
#include <sys/stat.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <map>
#include <optional>
#include <set>

#include "cli/commands.h"
#include "cli/format.h"
#include "core/error.h"
#include "core/json_input.h"
#include "core/output.h"
#include "core/progress.h"
#include "core/strict_flags.h"
#include "layer/presets.h"
#include "lessons/lesson.h"  // wrap
#include "model/bands.h"
#include "model/plan.h"
#include "model/parameters.h"
#include "model/validation.h"

namespace ringside::cli {

CLI::App* add_validate(CLI::App& app, ValidateOptions& o) {
  CLI::App* v = app.add_subcommand(
      "validate",
      "The model against published measurements: the fit set and the held-out set apart, each case's error, the fitted "
      "parameters, leave-one-source-out");
  v->add_option("cases", o.cases, "case names (built-in) or case JSON files; none: every built-in case")->option_text("CASE...");
  v->add_option("--json", o.json, "write the tables (values, errors, sets, orders, parameters)")->option_text("FILE")->check(
      non_empty("--json needs a file name"));
  v->add_option("--leave-out", o.leave_out,
                "refit the fitted parameters without one source's cases and predict them: a source id, or all (every source "
                "in turn: leave-one-source-out)")
      ->option_text("SOURCE|all")
      ->check(non_empty("--leave-out needs a source id or all"));
  v->add_flag("--refit", o.refit, "refit every fitted parameter on the fit set and print it beside the value the files hold");
  v->add_option("--bands", o.bands, "write the held-out cases' errors by kind (the content of src/model/fits/bands.json)")
      ->option_text("FILE")
      ->check(non_empty("--bands needs a file name"));
  v->footer(
      "Examples:\n"
      "  ringside validate                          # every built-in case (src/model/validation/*.json)\n"
      "  ringside validate --leave-out all          # each source predicted by parameters fitted without it\n"
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
  // A case is the model of what its file says, on its own profile and stack (which it may name
  // as files): it reads no recorded run and writes nothing, so that its figure is the same
  // wherever it is run and validate's --json and --bands are the only files written. What
  // `model` reads and writes is model_files' to say, whatever flags name them.
  const ModelFiles files = model_files(mo);
  std::string named;  // the options that name them, each once
  for (const auto* list : {&files.runs, &files.outputs})
    for (const output::Named& f : *list)
      if (!f.path.empty() && (", " + named + ",").find(", " + f.option + ",") == std::string::npos)
        named += (named.empty() ? "" : ", ") + f.option;
  if (!named.empty())
    throw ConfigError("validate: case " + c.name + ": its args may not read a recorded run or write files (" + named +
                      "): a case models its own profile and stack, and validate writes only its --json and --bands");
  return mo;
}

std::string command_of(const model::ValidationCase& c) {
  std::string s = "ringside model";
  for (const std::string& a : c.args) s += " " + a;
  return s;
}

// One case, ready to model (and model again, as a fit does).
struct Case {
  model::ValidationCase c;
  ModelCommandOptions options;
  std::optional<RunPlan> plan;  // the dry run's, as check_model_command resolved it
  model::RunKind kind;
  trace::ModelingInfo modeling;  // what its args model (model::modeling_info): its kernel, its stack, ...
  std::optional<trace::TraceData> schedule;  // the layer's dry run, recorded once
};

// The case's quantity as modeled now (the parameters' values as set), in its unit.
double model_value(Case& k) {
  const std::string& q = k.c.quantity;
  if (q.starts_with("/step/")) {
    // The step alone: model_step records its group's dry run once (model::ScheduleCacheScope).
    // The profile is loaded again: a fit sets its parameters (model::ScopedParameterValues).
    model::StepRow step;
    try {
      step = model_step(k.options, k.options.modeling.options(), *k.plan, model::load_hardware(k.options.hw));
    } catch (const ConfigError& e) {
      throw ConfigError("validate: case " + k.c.name + ": " + e.what());
    }
    if (step.status != model::PlanStatus::ranked) throw ConfigError("validate: case " + k.c.name + ": the step does not fit: " + step.reason);
    if (q == "/step/step_s") return step.cost.step_s;
    if (q == "/step/tokens_per_s_per_gpu") return step.tokens_per_s_per_gpu;
    const auto [layers, vocab] = step_depth(k.options);
    return step.tokens_per_s_per_gpu * model::flops_per_token_counted(k.options.cfg, layers, vocab, k.c.convention) / 1e12;
  }
  ModelRun run;
  try {
    run_model(k.options, run, &k.schedule);
  } catch (const ConfigError& e) {
    throw ConfigError("validate: case " + k.c.name + ": " + e.what());
  }
  if (run.reports.empty()) throw ConfigError("validate: case " + k.c.name + ": the model reported nothing");
  const nlohmann::json report = model::report_json(run.reports.front(), k.options.only == "attention");
  const nlohmann::json::json_pointer pointer(q);
  if (!report.contains(pointer))
    throw ConfigError("validate: case " + k.c.name + ": " + q + " is not in this model's report (--only attention has no /layer)");
  return report.at(pointer).get<double>();
}

// The time error of `modeled` against the case's published value.
double error_of(const Case& k, double modeled) {
  model::ValidationRow row{k.c, modeled};
  return row.error();
}

// ---- the fit ----------------------------------------------------------------------------------

struct FitResult {
  std::map<std::string, double> values;
  std::map<std::string, size_t> cases;  // informing cases used, per parameter
};

// Refits every parameter on the fit cases not from `left_out` (a source id, or "" for none):
// each by golden-section search of log(value) over its range, minimising the sum of squared log
// errors of the cases that inform it, the others at their values so far (from their priors),
// in three rounds. A parameter no case informs takes its prior.
FitResult fit_parameters(std::vector<Case>& cases, const std::string& left_out, ProgressReport& progress) {
  FitResult fit;
  // From the priors, so that the fit does not depend on the values the files hold now.
  for (const model::FittedParameter& p : model::fitted_parameters()) fit.values[p.name] = p.prior;
  // Three rounds: a parameter moves the cases that inform another (a clock under the occupancy's).
  for (int round = 0; round < 3; ++round)
    for (const model::FittedParameter& p : model::fitted_parameters()) {
      progress.advance();
      std::vector<Case*> informing;
      for (Case& k : cases)
        if (k.c.fit && k.c.source_id != left_out && std::count(k.c.informs.begin(), k.c.informs.end(), p.name))
          informing.push_back(&k);
      fit.cases[p.name] = informing.size();
      if (informing.empty()) {
        fit.values[p.name] = p.prior;
        continue;
      }
      auto cost = [&](double log_value) {
        std::map<std::string, double> trial = fit.values;
        trial[p.name] = std::exp(log_value);
        const model::ScopedParameterValues set(trial);
        double sum = 0;
        for (Case* k : informing) {
          const double e = std::log1p(error_of(*k, model_value(*k)));
          sum += e * e;
        }
        return sum;
      };
      const double phi = (std::sqrt(5.0) - 1) / 2;
      double a = std::log(p.lo), b = std::log(p.hi);
      double x1 = b - phi * (b - a), x2 = a + phi * (b - a), f1 = cost(x1), f2 = cost(x2);
      for (int i = 0; i < 22; ++i) {
        if (f1 < f2) b = x2, x2 = x1, f2 = f1, x1 = b - phi * (b - a), f1 = cost(x1);
        else a = x1, x1 = x2, f1 = f2, x2 = a + phi * (b - a), f2 = cost(x2);
      }
      // Three significant figures: what the files hold.
      const double v = std::exp((a + b) / 2);
      const double scale = std::pow(10.0, std::floor(std::log10(v)) - 2);
      fit.values[p.name] = std::round(v / scale) * scale;
    }
  return fit;
}

// ---- printing ----------------------------------------------------------------------------------

std::string value_text(const model::ValidationCase& c, double v) {
  char buf[48];
  if (c.unit == "s") return format_seconds(v);
  if (c.unit == "tokens/s/gpu") std::snprintf(buf, sizeof buf, "%.0f tok/s", v);
  else std::snprintf(buf, sizeof buf, "%.0f TF/s", v);
  return buf;
}

std::string pct(double e) {
  char buf[16];
  std::snprintf(buf, sizeof buf, "%+.1f%%", 100 * e);
  return buf;
}

// "met" or "MISSED (23.6% > 20%)", for the sets' targets.
std::string target(double value, double bound, bool two_sided = false) {
  const bool met = two_sided ? std::fabs(value) <= bound : value <= bound;
  if (met) return "met";
  char buf[64];
  std::snprintf(buf, sizeof buf, two_sided ? "MISSED (%+.1f%%)" : "MISSED (%.1f%%)", 100 * value);
  return buf;
}

struct Table {
  std::string text;
  void add(const char* format, auto... args) {
    char line[512];
    std::snprintf(line, sizeof line, format, args...);
    text += line;
  }
};

void add_rows(Table& t, const std::vector<model::ValidationRow>& rows, const std::vector<Case>& cases, bool counted, bool fit) {
  for (size_t i = 0; i < rows.size(); ++i) {
    const model::ValidationRow& r = rows[i];
    if (r.c.counted != counted || (counted && r.c.fit != fit)) continue;
    t.add("  %-28s %-14s %-5s %-20s %12s %12s %7s %2s\n", r.c.name.c_str(), r.c.profile.c_str(), cases[i].modeling.attention_kernel.c_str(),
          cases[i].modeling.stack.c_str(), value_text(r.c, r.c.measured).c_str(), value_text(r.c, r.modeled).c_str(), pct(r.error()).c_str(),
          r.within() ? "" : "NO");
  }
}

std::string summary_text(const model::ErrorSummary& s) {
  char buf[160];
  std::snprintf(buf, sizeof buf, "|error| median %.1f%%, worst %.1f%%, mean signed %+.1f%%", 100 * s.median, 100 * s.worst, 100 * s.mean);
  return buf;
}

nlohmann::json summary_json(const model::ErrorSummary& s) {
  return {{"cases", s.cases}, {"median_abs_error", s.median}, {"worst_abs_error", s.worst}, {"mean_signed_error", s.mean}};
}

}  // namespace

int validate_command(const ValidateOptions& o) {
  std::vector<output::Named> inputs;
  for (const std::string& c : o.cases)
    if (output::is_regular(c)) inputs.push_back({"the case file", c});
  output::check_distinct({{"--json", o.json}, {"--bands", o.bands}}, inputs);  // the results never overwrite a case
  if (!o.json.empty()) output::check(o.json, "--json");
  if (!o.bands.empty()) output::check(o.bands, "--bands");
  std::vector<Case> cases;
  for (model::ValidationCase& c : cases_of(o)) cases.push_back({std::move(c), {}, {}, {}, {}, {}});
  // Every case's arguments first, as `ringside model` checks them: a bad one is refused, by
  // name, before any case runs.
  std::set<std::string> sources;
  for (Case& k : cases) {
    const model::ValidationCase& c = k.c;
    k.options = model_options_of(c);
    // A case's stack file is an input too (the outputs were checked against the case files).
    const auto [stack_option, stack_file] = k.options.modeling.input();
    output::check_distinct({{"--json", o.json}, {"--bands", o.bands}}, {{"case " + c.name + "'s " + stack_option, stack_file}});
    model::Hardware hw;
    model::ModelOptions mo;
    try {
      hw = check_model_command(k.options, &k.plan, &mo);
    } catch (const ConfigError& e) {
      throw ConfigError("validate: case " + c.name + ": " + e.what());
    }
    k.modeling = model::modeling_info(hw, mo);
    const std::string& kernel = k.modeling.attention_kernel;
    // The rates the case is held at are the ones it names: its kernel field says which
    // attention kernel's rates model it, and a case at the ideal efficiency (no kernel) would
    // not be "at the rates real GPUs reach".
    if (kernel.empty())
      throw ConfigError("validate: case " + c.name + ": validate models at the rates real GPUs reach, not --efficiency " +
                        mo.efficiency);
    if (c.kernel.find(kernel) == std::string::npos)
      throw ConfigError("validate: case " + c.name + ": its args model attention at " + kernel + "'s rates, which its kernel (" +
                        detail::shown_input(c.kernel, 80) + ") does not name (give --attention-kernel or --stack, or name " +
                        kernel + ")");
    k.kind = model::run_kind(k.options.only == "attention", k.options.gbs > 0, k.plan->par, mo.dtype);
    if (c.counted) sources.insert(c.source_id);  // a reference case is predicted by no leave-out
  }
  if (!o.leave_out.empty() && o.leave_out != "all" && !sources.contains(o.leave_out)) {
    std::string list;
    for (const std::string& s : sources) list += (list.empty() ? "" : ", ") + s;
    throw ConfigError("validate: --leave-out " + detail::shown_input(o.leave_out) + " is none of the counted cases' sources (" + list +
                      ", or all)");
  }

  // A case's dry run, recorded once: the fits model it again and again.
  const model::ScheduleCacheScope cache;
  ProgressLine progress("validate");  // on stderr, every 2 s
  progress.phase("modeling each case", cases.size(), "cases");
  std::vector<model::ValidationRow> rows;
  for (Case& k : cases) {
    rows.push_back({k.c, model_value(k)});
    progress.advance();
  }
  progress.finish();
  const size_t searches = 3 * model::fitted_parameters().size();  // fit_parameters' rounds

  size_t fit_n = 0, held_n = 0, ref_n = 0;
  std::vector<double> fit_errors, held_errors;
  std::set<std::string> held_sources;
  for (const model::ValidationRow& r : rows) {
    if (!r.c.counted) ++ref_n;
    else if (r.c.fit) ++fit_n, fit_errors.push_back(r.error());
    else ++held_n, held_errors.push_back(r.error()), held_sources.insert(r.c.source_id);
  }
  const model::ErrorSummary fit_sum = model::summarize(fit_errors), held_sum = model::summarize(held_errors);

  std::printf("ringside validate: the model, at the rates real GPUs reach, against %zu published measurement%s from %zu source%s%s\n",
              fit_n + held_n, fit_n + held_n == 1 ? "" : "s", sources.size(), sources.size() == 1 ? "" : "s",
              ref_n ? detail::concat(" (and ", ref_n, " reference, not counted)").c_str() : "");
  std::printf("  error: modeled time / measured time - 1 (for a rate, measured / modeled - 1): negative, the model is faster\n"
              "  than measured (optimistic)\n\n");
  // The tables are kept as text too: the README quotes them, drift-checked (`--json`'s /table).
  Table t;
  const char* header = "  %-28s %-14s %-5s %-20s %12s %12s %7s %2s\n";
  if (fit_n) {
    t.add("  fit set: the %zu case%s whose figures chose a fitted parameter\n", fit_n, fit_n == 1 ? "" : "s");
    t.add(header, "case", "hardware", "kernel", "stack", "published", "modeled", "error", "");
    add_rows(t, rows, cases, true, true);
    t.add("  fit set: %s (target: median <= 5%%: %s)\n\n", summary_text(fit_sum).c_str(), target(fit_sum.median, 0.05).c_str());
  }
  if (held_n) {
    t.add("  held out: the %zu case%s no parameter saw, from %zu source%s\n", held_n, held_n == 1 ? "" : "s", held_sources.size(),
          held_sources.size() == 1 ? "" : "s");
    t.add(header, "case", "hardware", "kernel", "stack", "published", "modeled", "error", "");
    add_rows(t, rows, cases, true, false);
    t.add("  held out: %s\n", summary_text(held_sum).c_str());
    t.add("  held out's targets: median <= 10%% %s, worst <= 20%% %s, mean within +-5%% %s\n", target(held_sum.median, 0.10).c_str(),
          target(held_sum.worst, 0.20).c_str(), target(held_sum.mean, 0.05, true).c_str());
    // The worst three, by |error|, with the reason a case gives where it is held more loosely.
    std::vector<const model::ValidationRow*> held;
    for (const model::ValidationRow& r : rows)
      if (r.c.counted && !r.c.fit) held.push_back(&r);
    std::sort(held.begin(), held.end(), [](const auto* a, const auto* b) { return std::fabs(a->error()) > std::fabs(b->error()); });
    std::string worst;
    for (size_t i = 0; i < held.size() && i < 3; ++i) worst += (i ? ", " : "") + held[i]->c.name + " " + pct(held[i]->error());
    t.add("  held out's worst: %s\n", worst.c_str());
  }
  {
    bool any = false;
    for (const model::ValidationRow& r : rows) {
      if (!r.c.counted || r.c.tolerance_reason.empty()) continue;
      if (!any) t.add("\n  held more loosely than 20%%, and why:\n"), any = true;
      t.text += lessons::wrap(r.c.name + " (" + pct(r.c.tolerance).substr(1) + "): " + r.c.tolerance_reason, 100, "    ");
    }
  }
  if (ref_n) {
    t.add("\n  not counted (reference only):\n");
    add_rows(t, rows, cases, false, false);
    for (const model::ValidationRow& r : rows)
      if (!r.c.counted) t.text += lessons::wrap(r.c.name + ": " + r.c.reference_reason, 100, "    ");
  }
  size_t within = 0, counted = 0;
  for (const model::ValidationRow& r : rows)
    if (r.c.counted) within += r.within(), ++counted;
  t.add("\n  %zu of %zu counted cases within their tolerance (20%% unless the case says why)\n", within, counted);

  nlohmann::json out = {{"producer", "ringside validate"}, {"cases", nlohmann::json::array()}};
  for (size_t i = 0; i < rows.size(); ++i) {
    const model::ValidationRow& r = rows[i];
    const Case& k = cases[i];
    out["cases"].push_back({{"name", r.c.name},
                            {"source", {{"id", r.c.source_id}, {"title", r.c.title}, {"url", r.c.url}, {"where", r.c.where}}},
                            {"set", !r.c.counted ? "reference" : r.c.fit ? "fit" : "held_out"},
                            {"informs", r.c.informs},
                            {"hardware", r.c.profile},
                            {"attention_kernel", k.modeling.attention_kernel},
                            {"stack", k.modeling.stack},
                            {"modeling", k.modeling.to_json()},
                            {"kind", {{"scope", k.kind.scope}, {"cp", k.kind.cp}, {"dtype", k.kind.dtype}}},
                            {"command", command_of(r.c)},
                            {"quantity", r.c.quantity},
                            {"unit", r.c.unit},
                            {"published", r.c.measured_text},
                            {"published_value", r.c.measured},
                            {"modeled_value", r.modeled},
                            {"error", r.error()},
                            {"tolerance", r.c.tolerance},
                            {"tolerance_reason", r.c.tolerance_reason},
                            {"within", r.within()}});
  }
  out["fit_set"] = summary_json(fit_sum);
  out["held_out"] = summary_json(held_sum);
  out["within"] = within, out["counted"] = counted;
  {
    std::set<std::string> all, held;
    for (const model::ValidationRow& r : rows) {
      if (!r.c.counted) continue;
      all.insert(r.c.source_id);
      if (!r.c.fit) held.insert(r.c.source_id);
    }
    out["sources"] = all.size();
    out["held_out"]["sources"] = held.size();
    out["fitted_parameters"] = model::fitted_parameters().size();
  }

  // The orders each table's columns keep.
  bool orders_hold = true;
  out["orders"] = nlohmann::json::array();
  const std::vector<model::ValidationOrder> orders = model::validation_orders(rows);
  if (!orders.empty()) t.add("\n  orders (fastest first), as measured and as modeled:\n");
  for (const model::ValidationOrder& ord : orders) {
    auto joined = [](const std::vector<std::string>& v) {
      std::string s;
      for (const std::string& n : v) s += (s.empty() ? "" : " < ") + n;
      return s;
    };
    t.text += "  " + ord.group + ": " + (ord.holds() ? "holds: " : "DIFFERS: ") + joined(ord.measured) +
              (ord.holds() ? "" : "; modeled " + joined(ord.modeled)) + "\n";
    orders_hold &= ord.holds();
    out["orders"].push_back({{"group", ord.group}, {"measured", ord.measured}, {"modeled", ord.modeled}, {"holds", ord.holds()}});
  }

  // The fitted parameters: their values, priors and the cases behind them.
  out["parameters"] = nlohmann::json::array();
  t.add("\n  fitted parameters (src/model/fits/parameters.json), each from the fit set's cases that name it:\n");
  for (const model::FittedParameter& p : model::fitted_parameters()) {
    size_t n = 0;
    std::set<std::string> from;
    for (const Case& k : cases)
      if (k.c.fit && std::count(k.c.informs.begin(), k.c.informs.end(), p.name)) ++n, from.insert(k.c.source_id);
    const double value = model::fitted_value(p);
    t.add("  %-38s %6.3g  (prior %.3g; %zu case%s of %zu source%s)\n", p.name.c_str(), value, p.prior, n, n == 1 ? "" : "s", from.size(),
          from.size() == 1 ? "" : "s");
    out["parameters"].push_back({{"name", p.name}, {"value", value}, {"prior", p.prior}, {"cases", n}, {"what", p.what}});
  }
  std::fputs(t.text.c_str(), stdout);
  out["table"] = t.text;
  bool refit_holds = true;
  if (o.refit) {
    Table r;
    r.add("\n  refit on the fit set (golden-section search of each parameter's log over its range):\n");
    progress.phase("refitting every parameter on the fit set (3 rounds of a golden-section search each)", searches, "searches");
    const FitResult fit = fit_parameters(cases, "", progress);
    progress.finish();
    out["refit"] = nlohmann::json::array();
    for (const model::FittedParameter& p : model::fitted_parameters()) {
      const double stored = model::fitted_value(p), refit = fit.values.at(p.name);
      const size_t n = fit.cases.at(p.name);
      if (n == 0) {  // no case here informs it (a subset of the cases given): nothing to refit
        r.add("  %-38s stored %6.3g, not refitted: no case given informs it\n", p.name.c_str(), stored);
        out["refit"].push_back({{"name", p.name}, {"stored", stored}, {"refit", nullptr}, {"cases", 0}});
        continue;
      }
      const bool same = std::fabs(refit / stored - 1) <= 0.02;
      refit_holds &= same;
      r.add("  %-38s stored %6.3g, refit %6.3g on %zu case%s%s\n", p.name.c_str(), stored, refit, n, n == 1 ? "" : "s",
            same ? "" : "  DIFFERS (more than 2%: refit the files)");
      out["refit"].push_back({{"name", p.name}, {"stored", stored}, {"refit", refit}, {"cases", n}});
    }
    std::fputs(r.text.c_str(), stdout);
  }
  if (!o.leave_out.empty()) {
    // Each source's cases predicted by the parameters fitted without them.
    Table l;
    std::vector<std::string> left = o.leave_out == "all" ? std::vector<std::string>(sources.begin(), sources.end())
                                                         : std::vector<std::string>{o.leave_out};
    l.add("\n  leave-one-source-out: each source's cases predicted by the parameters refitted without them\n");
    l.add("  %-32s %-26s %9s %9s\n", "case", "source", "all fit", "left out");
    std::vector<double> errors;
    out["leave_out"] = nlohmann::json::array();
    progress.phase("leaving out each source (refitting without its cases, then predicting them)", left.size() * searches,
                   "searches");
    for (const std::string& source : left) {
      bool informs = false;
      for (const Case& k : cases) informs |= k.c.fit && k.c.source_id == source;
      // Only a source whose cases informed a parameter moves any: refit without it.
      std::optional<model::ScopedParameterValues> set;
      if (informs) set.emplace(fit_parameters(cases, source, progress).values);
      else progress.advance(searches);
      for (size_t i = 0; i < cases.size(); ++i) {
        if (cases[i].c.source_id != source || !cases[i].c.counted) continue;
        const double e = error_of(cases[i], informs ? model_value(cases[i]) : rows[i].modeled);
        errors.push_back(e);
        l.add("  %-32s %-26s %9s %9s\n", cases[i].c.name.c_str(), source.c_str(), pct(rows[i].error()).c_str(), pct(e).c_str());
        out["leave_out"].push_back({{"name", cases[i].c.name}, {"source", source}, {"error", e}});
      }
    }
    progress.finish();
    const model::ErrorSummary s = model::summarize(errors);
    l.add("  left out: %zu cases, %s (target: median <= 12%%)\n", s.cases, summary_text(s).c_str());
    out["leave_out_summary"] = summary_json(s);
    std::fputs(l.text.c_str(), stdout);
    out["leave_out_table"] = l.text;
  }
  std::printf("\n  sources and commands: ringside validate --json FILE, or src/model/validation/*.json\n");
  if (!o.bands.empty()) {
    nlohmann::json b = {{"about", "The held-out cases' errors by kind, written by `ringside validate --bands FILE` (do not edit: a test holds "
                                  "this file to what validate computes). error = modeled time / measured time - 1."},
                        {"held_out", nlohmann::json::array()}};
    for (size_t i = 0; i < rows.size(); ++i)
      if (rows[i].c.counted && !rows[i].c.fit)
        b["held_out"].push_back({{"name", rows[i].c.name}, {"scope", cases[i].kind.scope}, {"cp", cases[i].kind.cp},
                                 {"dtype", cases[i].kind.dtype}, {"error", std::round(rows[i].error() * 1e6) / 1e6}});
    output::write(o.bands, b.dump(2) + "\n", "--bands");
  }
  if (!o.json.empty()) output::write(o.json, out.dump(2) + "\n", "--json");
  return within == counted && orders_hold && refit_holds ? 0 : 1;
}

}  // namespace ringside::cli

// `ringside plan`: which parallel layout for this model, sequence length and cluster (model/plan.h).
#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <map>
#include <set>

#include "cli/commands.h"
#include "cli/format.h"
#include "core/error.h"
#include "core/output.h"
#include "core/progress.h"
#include "layer/presets.h"
#include "lessons/lesson.h"  // wrap
#include "model/emit.h"
#include "model/plan.h"
#include "model/validation.h"
#include "model/step_plan.h"
#include "parallel/run_plan.h"

namespace ringside::cli {

namespace {

// `w` as one word of a POSIX shell command: as it is when it needs no quoting, else in single quotes.
std::string shell_word(const std::string& w) {
  const bool plain = !w.empty() && std::all_of(w.begin(), w.end(), [](char c) {
    return std::isalnum(static_cast<unsigned char>(c)) || (c != '\0' && std::strchr("._:/,=+-@%", c) != nullptr);
  });
  if (plain) return w;
  std::string q = "'";
  for (char c : w) q += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return q + "'";
}

// The plan's own flags, which its rows' model commands do not repeat: what the plan weighs or
// prints, and the step's (the rows give them as model takes them).
bool plan_only(const std::string& name) {
  static const std::set<std::string> names{"--help", "--gpus", "--hw", "--recompute", "--cp-comm", "--layout", "--layers", "--top", "--trace",
                                           "--json", "--gbs", "--mbs", "--pp", "--vp", "--dp", "--zero",
                                           "--no-overlap-grad-reduce", "--exhaustive", "--max-seq", "--granularity", "--emit"};
  return names.contains(name);
}

}  // namespace

std::string plan_model_command(const PlanCommandOptions& o, const std::string& hw) {
  std::string c = "ringside model";
  for (const std::string& w : o.model_words)
    if (o.gbs == 0 || !w.starts_with("--batch ")) c += " " + w;  // a step's batch is its microbatch, below
  c += " --hw " + shell_word(hw);
  if (o.gbs > 0) {
    c += detail::concat(" --gbs ", o.gbs, " --batch ", o.mbs);
    if (o.layers) c += detail::concat(" --layers ", o.layers);
    if (!o.overlap_grad_reduce) c += " --no-overlap-grad-reduce";
  }
  return c;
}

std::string model_flags(const ParallelConfig& par, const std::string& order) {
  std::string f = detail::concat("--tp ", par.tp, " --cp ", par.cp);
  if (par.cp > 1) f += std::string(" --cp-comm ") + to_string(par.cp_comm);
  if (par.scheme().nested()) f += detail::concat(" --cp-a2a ", par.a2a_size());
  return f + " --order " + order + " --layout " + to_string(par.layout) + " --recompute " + to_string(par.recompute) +
         detail::concat(" --ranks ", par.tp * par.cp);
}

std::string model_flags(const model::StepCandidate& c) {
  return model_flags(c.layer.par, c.order_name()) + detail::concat(" --pp ", c.pp, " --vp ", c.vp, " --dp ", c.dp, " --zero ", c.zero);
}

CLI::App* add_plan(CLI::App& app, PlanCommandOptions& o) {
  std::string hw;
  for (const std::string& n : model::hardware_names()) hw += (hw.empty() ? "" : ", ") + n;
  CLI::App* p = app.add_subcommand(
      "plan", "Which layout for this model, sequence and cluster: every TP/CP split dry-run and modeled, ranked, with reasons");
  add_config_flags(*p, o.cfg, o.choices, false);
  p->get_option("--preset")->each([&o](const std::string& v) { o.preset = v; });
  p->add_option("--gpus", o.gpus, "number of GPUs P: up to 256 for a layer's split, up to 131072 for a whole step (--gbs)")
      ->capture_default_str()
      ->check(CLI::Range(1, 131072));
  // Split by profile_list, not by CLI11's delimiter, which drops an empty item ("a100-nvlink,").
  p->add_option("--hw", o.hw, "hardware profiles to plan for, comma-separated (each its own table): " + hw + ", or profile JSON files")
      ->capture_default_str()
      ->check(non_empty("--hw needs a profile"));
  p->add_option("--recompute", o.recompute, "recompute modes to weigh: any (the default: none, selective and full), none, selective, full")
      ->capture_default_str()
      ->check(CLI::IsMember({"any", "none", "selective", "full"}));
  std::string own;  // the schemes no framework runs, weighed only when named
  for (const CpScheme* s : cp_schemes())
    if (!s->none() && !s->planned_by_default()) own += (own.empty() ? "" : ", ") + std::string(s->name);
  p->add_option("--cp-comm", o.cp_comm,
                "context-parallel schemes to weigh, comma-separated: " + cp_comm_choices() +
                    ", or all (default: those TransformerEngine runs" + (own.empty() ? "" : ", not ringside's own " + own) + ")")
      ->group("Plan");
  p->add_option("--layers", o.layers, "L, the layers of a step (default: the preset's depth, or 1)")->check(CLI::Range(1, 1000));
  p->add_option("--top", o.top, "rows of the ranked table (and of each kind of rejection) to print")->capture_default_str()->check(CLI::Range(1, 100000));
  add_modeling_flags(*p, o.modeling, ModelingScope::plan);
  p->add_option("--trace", o.trace, "write the winner's and the runner-up's modeled timelines (ringside-viewer shows them side by side)")
      ->option_text("FILE")
      ->check(non_empty("--trace needs a file name"));
  p->add_option("--json", o.json, "write every candidate, ranked or rejected, with its numbers and reason")
      ->option_text("FILE")
      ->check(non_empty("--json needs a file name"));
  // The whole step: pipeline and data parallelism around the TP x CP group (model/step_plan.h).
  p->add_option("--gbs", o.gbs, "global batch in sequences: plan the whole training step (PP, DP, ZeRO around TP x CP)")
      ->check(CLI::Range(1, 1 << 24));
  p->add_option("--mbs", o.mbs, "microbatch in sequences (with --gbs)")->capture_default_str()->check(CLI::Range(1, 1 << 16));
  p->add_option("--pp", o.pp, "pipeline stages PP (with --gbs; default: every PP that fits)")->check(CLI::Range(1, 131072));
  p->add_option("--vp", o.vp, "model chunks a rank, interleaved 1F1B (with --gbs and --pp; default: every VP that fits)")
      ->check(CLI::Range(1, 1000));
  p->add_option("--dp", o.dp, "data-parallel replicas DP (with --gbs; default: every DP that fits)")->check(CLI::Range(1, 131072));
  p->add_option("--zero", o.zero, "ZeRO stage 0, 1, 2 or 3 (FSDP) (with --gbs; default: every stage)")->check(CLI::Range(0, 3));
  p->add_flag("!--no-overlap-grad-reduce", o.overlap_grad_reduce,
              "expose the gradient reduce-scatter or all-reduce instead of overlapping it with the backward (with --gbs)");
  std::vector<std::string> framework_names;
  for (const model::Framework& f : model::frameworks()) framework_names.push_back(f.name);
  p->add_option("--emit", o.emit,
                "print the winner's and the runner-up's settings for a framework, comma-separated or repeated: " +
                    model::framework_names() + " (with what it cannot express and the nearest it runs)")
      ->option_text("FRAMEWORK")
      ->delimiter(',')
      ->check(CLI::IsMember(framework_names));
  p->add_flag("--exhaustive", o.exhaustive,
              "with --gbs: dry-run every TP x CP group that fits, not only those whose bound or estimate could win (slower)");
  p->add_flag("--max-seq", o.max_seq,
              "the longest sequence whose whole step fits, per recompute mode and ZeRO stage, with its split (no --seq; "
              "--gbs default: each split's full pipeline)");
  p->add_option("--granularity", o.granularity, "with --max-seq: s in multiples of this many tokens (and of what each split needs)")
      ->capture_default_str()
      ->check(CLI::Range(int64_t{1}, int64_t{1} << 24));
  p->footer(
      "Examples:\n"
      "  ringside plan --preset llama3-8b --seq 131072 --gpus 16 --hw h100-nvlink\n"
      "  ringside plan --preset llama3-70b --seq 1048576 --gpus 64 --hw h100-nvlink,h100-ib --trace out/plan.json\n"
      "  ringside plan --preset llama3-8b --seq 32768 --gpus 8 --recompute none --layers 1 --top 5\n"
      "  ringside plan --preset llama3-405b --seq 131072 --gpus 16384 --hw h100-nvlink --gbs 128\n"
      "  ringside plan --preset llama3-8b --gpus 8 --hw h100-nvlink --max-seq");
  // The flags its rows' model commands repeat, as given (a flag without a value as its name).
  p->parse_complete_callback([&o, p] {
    check_seed_without_random_docs(*p);  // the one callback CLI11 keeps: refuse_seed_without_random_docs's check
    o.seq_given = p->get_option("--seq")->count() > 0;
    if (p->get_option("--granularity")->count() > 0 && !o.max_seq) throw CLI::ValidationError("--granularity", "goes with --max-seq");
    o.model_words.clear();
    for (const CLI::Option* opt : p->get_options()) {
      if (opt->count() == 0 || plan_only(opt->get_name())) continue;
      if (opt->get_expected_max() == 0) {
        o.model_words.push_back(opt->get_name());
        continue;
      }
      for (const std::string& v : opt->results()) o.model_words.push_back(opt->get_name() + " " + shell_word(v));
    }
  });
  return p;
}

namespace {

std::string pct(double p) { return std::isnan(p) ? "-" : std::to_string(int(std::lround(p))) + "%"; }

// A row's exposed time and its split by group, the parts in the total's unit: "312.6 ms = 9.8 +
// 80.6 + 222.2" (CP + TP + grads).
std::string exposed_split(const model::PlanRow& r) {
  const double total = r.exposed_s;
  const double unit = total >= 1.0 ? 1.0 : total >= 1e-3 ? 1e-3 : 1e-6;
  const char* fmt = total >= 1.0 ? "%.2f" : total >= 1e-3 ? "%.1f" : "%.0f";
  std::string s = format_seconds(total) + " =";
  const char* sep = " ";
  for (model::TimeClass c : {model::TimeClass::cp, model::TimeClass::tp, model::TimeClass::grads}) {
    char buf[32];
    std::snprintf(buf, sizeof buf, fmt, r.parts[c] / unit);
    s += sep + std::string(buf);
    sep = " + ";
  }
  return s;
}

nlohmann::json row_json(const model::PlanRow& r, const model::Hardware& hw, int place, const model::ModelOptions& mo) {
  const model::PlanCandidate& c = r.candidate;
  nlohmann::json j = {{"name", c.name()},
                      {"configuration", c.par.canonical_name()},
                      {"tp", c.par.tp},
                      {"cp", c.par.cp},
                      {"cp_comm", to_string(c.par.cp_comm)},
                      {"cp_a2a", c.par.a2a_size()},
                      {"order", to_string(c.par.order)},
                      {"layout", to_string(c.par.layout)},
                      {"recompute", to_string(c.par.recompute)},
                      {"status", model::to_string(r.status)},
                      {"reason", r.reason},
                      {"model_flags", model_flags(c.par, to_string(c.par.order))}};
  if (r.status == model::PlanStatus::ranked) {
    j["place"] = place;
    j["step_s"] = r.step_s, j["exposed_s"] = r.exposed_s;
    j["time_by_class"] = model::time_parts_json(r.parts);
    j["versus"] = r.versus;
    auto pct_json = [](double p) { return std::isnan(p) ? nlohmann::json(nullptr) : nlohmann::json(p); };
    j["overlap_pct"] = pct_json(r.overlap_pct), j["attention_hidden_pct"] = pct_json(r.attention_hidden_pct);
    nlohmann::json by_tier = nlohmann::json::object();
    for (size_t t = 0; t < r.tier_bytes.size(); ++t) by_tier[hw.tiers[t].name] = r.tier_bytes[t];
    j["bytes_by_tier"] = by_tier;
    const model::RunKind kind = model::run_kind(false, false, c.par, mo.dtype, model::at_roofline(hw, mo));
    j["band"] = model::band_json(model::error_band(kind), kind);
  }
  if (r.status != model::PlanStatus::invalid) {
    j["peak_bytes"] = r.peak_bytes, j["capacity_bytes"] = hw.memory_bytes;
    j["memory"] = memory_json(r.memory, hw);
  }
  return j;
}

void print_plan(const model::Plan& plan, const PlanCommandOptions& o, const model::ModelOptions& mo, int layers,
                const std::string& hw_given) {
  const model::Hardware& hw = plan.hw;
  std::printf("\n  on %s: %s\n", hw.name.c_str(), hw.description.c_str());
  std::printf("  %.4g TFLOP/s %s per GPU, %s each; %s (modeled)\n", hw.peak_flops(mo.dtype) / 1e12, mo.dtype.c_str(),
              format_bytes(hw.memory_bytes, ByteUnits::decimal).c_str(), model::tiers_words(hw.tiers).c_str());
  if (hw.tiers.size() > 1) std::printf("  placed: %s\n", hw.topology(plan.P).domain_words().c_str());
  std::printf("  modeled at %s\n", model::rates_summary(hw, mo, "\n  ").c_str());
  const size_t ranked = plan.ranked(), shown = std::min(ranked, size_t(o.top));
  size_t wname = 9;
  for (size_t i = 0; i < shown; ++i) wname = std::max(wname, plan.rows[i].candidate.name().size());
  const std::string step = "step (" + std::to_string(layers) + " layer" + (layers == 1 ? "" : "s") + ")";
  // Bytes on the innermost tier (NVLink) and beyond it (InfiniBand), the columns named for them.
  const std::string inside_name = hw.tiers.size() > 1 ? hw.tiers.front().name : "-";
  const std::string beyond_name = hw.tiers.back().name;
  std::printf("\n  %3s  %s  %14s  %26s  %7s  %48s  %11s  %11s  %s\n", "#", pad("candidate", wname).c_str(), step.c_str(),
              "exposed = CP + TP + grads",
              "overlap", "memory / GPU = w + g + opt + act", inside_name.c_str(), beyond_name.c_str(), "why");
  for (size_t i = 0; i < shown; ++i) {
    const model::PlanRow& r = plan.rows[i];
    const std::string why = r.versus.empty() ? r.reason : r.versus + "; " + r.reason;
    std::printf("  %3zu  %s  %14s  %26s  %7s  %48s  %11s  %11s  %s\n", i + 1, pad(r.candidate.name(), wname).c_str(),
                format_seconds(r.step_s).c_str(), exposed_split(r).c_str(), pct(r.overlap_pct).c_str(),
                model::memory_text(r.memory, hw.memory_bytes).c_str(),
                hw.tiers.size() > 1 ? format_bytes(r.tier_bytes.front()).c_str() : "-", format_bytes(r.beyond_domain_bytes()).c_str(),
                why.c_str());
  }
  if (shown < ranked) std::printf("  ... and %zu more that fit (--top %zu shows them)\n", ranked - shown, ranked);
  if (ranked > 0) {
    const model::RunKind kind =
        model::run_kind(false, false, plan.rows.front().candidate.par, mo.dtype, model::at_roofline(hw, mo));
    std::printf("  trust: for the winner's kind, %s%s\n", model::band_text(model::error_band(kind), kind).c_str(),
                model::unvalidated_gpu_note(hw).c_str());
    const model::PlanCandidate& win = plan.rows.front().candidate;
    std::printf("  #1 modeled alone (its layer's time, /layer/total_s in --json, x %d layer%s is its step; --json gives every\n"
                "  row's flags):\n    %s %s\n",
                layers, layers == 1 ? "" : "s", plan_model_command(o, hw_given).c_str(),
                model_flags(win.par, to_string(win.par.order)).c_str());
  }
  std::printf("  step: L layers' forward + backward on the slowest GPU; exposed: communication no compute hides, mean per GPU,\n"
              "  by group: CP's (attention's K/V, all-to-alls, gathers), TP's and the gradient all-reduce's over CP (grads);\n"
              "  why: where the row loses most time to #1 (#1: where it wins most over the runner-up), then its groups' formulas;\n"
              "  memory: the whole step's count (plan --gbs's and model --gbs's) for this group alone: PP 1, DP 1, one microbatch,\n"
              "  ZeRO %d over its CP ranks (the least it can train in), of %s (the --trace timeline is one layer: its\n"
              "  memory lane peaks at that layer's alone); %s;\n"
              "  %s, %s: the most any GPU sends inside its %s domain, and the most any sends beyond it (%s;\n"
              "  each column's busiest GPU, not always the same one)\n",
              model::kGroupZero, (format_bytes(hw.memory_bytes) + " (" + format_bytes(hw.memory_bytes, ByteUnits::decimal) + ")").c_str(), model::kMemoryTextLegend, inside_name.c_str(), beyond_name.c_str(),
              hw.tiers.front().name.c_str(), mo.dtype.c_str());

  // The rejected: the rules, grouped, and the least memory-hungry that do not fit.
  std::vector<std::pair<std::string, std::vector<std::string>>> rules;
  std::vector<const model::PlanRow*> oom;
  for (const model::PlanRow& r : plan.rows) {
    if (r.status == model::PlanStatus::out_of_memory) oom.push_back(&r);
    if (r.status != model::PlanStatus::invalid) continue;
    // The rule without the configuration's name it starts with ("tp16xring4 with P = 64: ..."):
    // one line per rule, naming every configuration that breaks it.
    const size_t colon = r.reason.find(": ");
    const std::string rule = colon == std::string::npos ? r.reason : r.reason.substr(colon + 2);
    auto it = std::find_if(rules.begin(), rules.end(), [&](const auto& g) { return g.first == rule; });
    if (it == rules.end()) rules.push_back({rule, {}}), it = rules.end() - 1;
    const std::string n = r.candidate.par.canonical_name();
    if (std::find(it->second.begin(), it->second.end(), n) == it->second.end()) it->second.push_back(n);
  }
  if (!rules.empty()) {
    std::printf("\n  invalid (the rule each breaks):\n");
    for (const auto& [rule, names] : rules) {
      std::string list;
      for (size_t i = 0; i < names.size() && i < 6; ++i) list += (i ? ", " : "") + names[i];
      if (names.size() > 6) list += ", and " + std::to_string(names.size() - 6) + " more";
      std::printf("    %s\n      %s\n", rule.c_str(), list.c_str());
    }
  }
  std::vector<std::pair<std::string, std::string>> oom_rows;
  for (const auto* r : oom) oom_rows.push_back({r->candidate.name(), r->reason});
  print_out_of_memory(oom_rows, size_t(o.top));
  std::printf("\n  verdict\n%s", lessons::wrap(plan.verdict, 104, "    ").c_str());
}

}  // namespace

std::vector<std::string> profile_list(const std::vector<std::string>& given) {
  if (given.size() > 1) throw ConfigError("--hw given more than once: list the profiles in one, comma-separated");
  std::vector<std::string> names;
  for (const std::string& list : given) {
    for (size_t at = 0;;) {
      const size_t comma = list.find(',', at);
      const std::string name = list.substr(at, comma == std::string::npos ? std::string::npos : comma - at);
      if (name.empty())
        throw ConfigError("--hw " + detail::shown_input(list) + ": an empty profile name in the list (profiles are separated by single commas)");
      if (std::find(names.begin(), names.end(), name) != names.end())
        throw ConfigError("--hw " + detail::shown_input(list) + ": " + detail::shown_input(name) + " is listed twice");
      names.push_back(name);
      if (comma == std::string::npos) break;
      at = comma + 1;
    }
  }
  return names;
}

int plan_command(const PlanCommandOptions& o) {
  // The inputs (profiles given as files) and the outputs, checked before any work.
  const std::vector<std::string> hw_names = profile_list(o.hw);
  std::vector<output::Named> inputs;
  for (const std::string& h : hw_names)
    if (output::is_regular(h)) inputs.push_back({"--hw", h});
  const auto [stack_option, stack_file] = o.modeling.input();
  inputs.push_back({stack_option, stack_file});
  output::check_distinct({{"--trace", o.trace}, {"--json", o.json}}, inputs);
  std::vector<model::Hardware> profiles;
  // Ranks that share one machine's memory (this-machine) fit in their share of it, not all of it.
  for (const std::string& h : hw_names) profiles.push_back(model::memory_per_rank(model::load_hardware(h), o.gpus));
  if (!o.trace.empty()) output::check(o.trace, "--trace");
  if (!o.json.empty()) output::check(o.json, "--json");
  // The one model options value of this plan: every candidate's dry run and replay on every profile.
  const model::ModelOptions modeling = o.modeling.checked(profiles);
  if (o.max_seq) return plan_max_seq_command(o, profiles, modeling);
  if (o.gbs > 0) return plan_step_command(o, profiles, modeling);
  if (o.mbs != 1 || o.pp || o.vp || o.dp || o.zero >= 0 || !o.overlap_grad_reduce || o.exhaustive || !o.modeling.grad_reduce.empty())
    throw ConfigError(
        "plan: --mbs, --pp, --vp, --dp, --zero, --grad-reduce, --no-overlap-grad-reduce and --exhaustive plan a whole step: give --gbs too");
  if (o.gpus > 256)
    throw ConfigError(detail::concat("plan: a layer's split is planned on up to 256 GPUs (", o.gpus,
                                     " given); a plan of more is a whole step: give --gbs, the global batch in sequences"));

  model::PlanOptions po;
  po.gpus = o.gpus;
  po.layers = o.layers ? o.layers : !o.preset.empty() ? find_preset(o.preset).layers : 1;
  po.vocab = !o.preset.empty() ? find_preset(o.preset).vocab : 0;
  po.modeling = modeling;
  if (o.recompute != "any") po.modes = {parse_recompute(o.recompute)};
  po.layout = o.choices.layout;
  po.schemes = cp_schemes_named(o.cp_comm);
  // A plan of more than a few seconds says on stderr what it does, how far it is and about how
  // long is left, every 2 s.
  ProgressLine progress("plan");
  po.progress = &progress;
  const ParallelConfig given = o.choices.applied_to({});
  resolve_one_rank(o.cfg);
  // The dry runs: each rank lists its tokens' global positions, and the schedule (model.h).
  require_memory(32.0 * double(o.cfg.tokens()) + model::schedule_bytes(o.gpus, o.cfg, given.requested_layout(o.cfg)),
                 detail::concat("the plan's dry runs on ", o.gpus, " ranks"), "--gpus, --seq or --batch", 0, 2 * o.gpus);

  std::printf("ringside plan: %s%s on %d GPU%s, %d layer%s, recompute %s\n", o.preset.empty() ? "" : (o.preset + ": ").c_str(),
              o.cfg.summary().c_str(), o.gpus, o.gpus == 1 ? "" : "s", po.layers, po.layers == 1 ? "" : "s", o.recompute.c_str());
  std::fflush(stdout);
  model::PlanStats stats;
  const std::vector<model::Plan> plans = model::make_plan(o.cfg, po, profiles, &stats);
  progress.finish();
  std::printf("  %zu candidates (%zu invalid); %zu dry runs, each replayed for its orders and profiles (%zu replays reused one), "
              "%zu rejected by the memory formulas before any; %.1f s\n",
              stats.candidates, stats.invalid, stats.dry_runs, stats.reused, stats.memory_rejects, stats.seconds);
  std::printf("  modeled, not measured: L layers back to back; weights, gradients and activations in %s; no pipeline or data\n"
              "  parallelism, optimizer step or overlap between layers in the time; the memory with the optimizer state and\n"
              "  %s (docs/model.md)\n",
              modeling.dtype == "fp8" ? "bf16 (the GEMMs in FP8)" : modeling.dtype.c_str(),
              po.vocab ? detail::concat("the embedding and head, V = ", po.vocab).c_str() : "no embedding or head (no preset's V)");
  for (size_t p = 0; p < plans.size(); ++p) print_plan(plans[p], o, modeling, po.layers, hw_names[p]);
  print_framework_flags(plans, o, o.cfg, modeling);

  if (!o.trace.empty()) {
    trace::TraceData t;
    progress.phase("dry-running the winners and runners-up for --trace", 2 * plans.size(), "timelines");
    for (const model::Plan& plan : plans) {
      if (plan.ranked() == 0) continue;
      const model::PlanRow* second = model::runner_up(plan);
      for (const model::PlanRow* row : {&plan.rows[0], second}) {
        progress.advance();
        if (!row) continue;
        const std::string of = std::string(row == second ? "runner-up " : "winner ") + row->candidate.name();
        std::vector<trace::RankTrace> ranks = model::candidate_timeline(row->candidate, o.cfg, o.gpus, plan.hw, modeling, of);
        if (t.run.producer.empty()) {
          t.run.producer = "ringside plan", t.run.config = config_json(o.cfg, given), t.run.ranks = o.gpus;
          model::mark_modeled(t.run, plan.hw, modeling);
        }
        model::insert_modeled_group(t, std::move(ranks), of, plan.hw, modeling, t.ranks.size()).layers = po.layers;
      }
    }
    trace::write_trace(o.trace, t);
    progress.finish();
    std::printf("\n  trace: %s (each profile's winner and runner-up, modeled, one layer each; ringside-viewer %s)\n", o.trace.c_str(),
                o.trace.c_str());
  }
  if (!o.json.empty()) {
    // The layer without what the plan varies: each row says its layout and recompute mode.
    nlohmann::json config = o.cfg.to_json();
    if (given.layout != Layout::automatic) config["layout"] = to_string(given.requested_layout(o.cfg));
    nlohmann::json js = {{"config", config}, {"preset", o.preset}, {"gpus", o.gpus}, {"layers", po.layers},
                         {"dtype", modeling.dtype}, {"recompute", o.recompute},
                         {"software", software_json(model::modeling_info(profiles.front(), modeling))}};
    js["stats"] = {{"candidates", stats.candidates}, {"invalid", stats.invalid}, {"dry_runs", stats.dry_runs},
                   {"reused", stats.reused}, {"memory_rejects", stats.memory_rejects}, {"seconds", stats.seconds}};
    for (size_t i = 0; i < plans.size(); ++i) {
      const model::Plan& plan = plans[i];
      nlohmann::json p = {{"hardware", plan.hw.to_json()}, {"modeling", model::modeling_info(plan.hw, modeling).to_json()},
                          {"verdict", plan.verdict}, {"model_command", plan_model_command(o, hw_names[i])},
                          {"rows", nlohmann::json::array()}};
      int place = 0;
      for (const model::PlanRow& r : plan.rows) p["rows"].push_back(row_json(r, plan.hw, ++place, modeling));
      js["plans"].push_back(p);
    }
    output::write(o.json, js.dump(2) + "\n", "--json");
  }
  return 0;
}

CLI::App* add_bench_plan(CLI::App& bench, BenchPlanOptions& o) {
  apply_preset(find_preset(o.plan.preset), o.plan.cfg);
  CLI::App* b = bench.add_subcommand("plan",
                                     "The planner's speed: a layer plan of Llama 3 70B at 1M tokens on 64 H100s, or with --gbs a whole-step "
                                     "plan of Llama 3 405B at 128K on 16,384 GPUs (target under 30 s) and on 131,072 (under 60 s)");
  b->add_option("--gpus", o.plan.gpus, "GPUs P (--gbs: default both 16,384 and 131,072)")->check(CLI::Range(1, 131072));
  b->add_option("--gbs", o.gbs, "plan the whole step with this global batch in sequences (Llama 3 405B at 128K on 16,384 GPUs: 128)")
      ->check(CLI::Range(1, 1 << 24));
  b->add_option("--seq", o.plan.cfg.s, "sequence length s")->capture_default_str()->check(CLI::Range(int64_t{1}, int64_t{1} << 31));
  b->add_option("--hw", o.plan.hw, "hardware profiles, comma-separated")->capture_default_str();
  return b;
}

namespace {

// The whole-step case: the plan of Llama 3 405B at 128K on 16,384 GPUs (target 30 s) and on
// 131,072 (today's largest clusters, 60 s), unless --seq or --gpus say otherwise.
int bench_step_plan(const BenchPlanOptions& o) {
  LayerConfig cfg;
  apply_preset(find_preset("llama3-405b"), cfg);
  cfg.s = o.plan.cfg.s == int64_t{1} << 20 ? 131072 : o.plan.cfg.s;
  std::vector<std::pair<int, double>> cases{{16384, 30}, {131072, 60}};  // GPUs, target seconds
  if (o.plan.gpus != 64) cases = {{o.plan.gpus, o.plan.gpus <= 16384 ? 30.0 : 60.0}};
  std::vector<model::Hardware> profiles;
  for (const std::string& h : profile_list(o.plan.hw)) profiles.push_back(model::load_hardware(h));
  resolve_one_rank(cfg);
  for (const auto& [gpus, target_s] : cases) {
    model::StepPlanOptions so;
    so.gpus = gpus, so.layers = find_preset("llama3-405b").layers, so.vocab = find_preset("llama3-405b").vocab, so.gbs = o.gbs;
    std::printf("ringside bench plan: the whole step of llama3-405b, s = %lld, on %d GPUs of %s, GBS %d, every recompute mode "
                "(target: under %.0f s)\n",
                (long long)cfg.s, gpus, profiles.front().name.c_str(), o.gbs, target_s);
    std::fflush(stdout);
    model::StepPlanStats st;
    ProgressLine progress("bench plan");  // on stderr, every 2 s
    so.progress = &progress;
    const std::vector<model::StepPlan> plans = model::make_step_plan(cfg, so, profiles, &st);
    progress.finish();
    std::printf("  %zu configurations of %zu TP x CP groups: %zu invalid, %zu out of memory, %zu not dry-run (bound or estimate)\n",
                st.candidates, st.groups, st.invalid, st.memory_rejects, st.bounded);
    std::printf("  %zu dry runs of at most %d ranks each\n", st.dry_runs, so.max_group);
    for (const model::StepPlan& p : plans)
      if (p.ranked())
        std::printf("  winner on %s (%s): %s, %.0f tokens/s per GPU (modeled)\n", p.hw.name.c_str(),
                    p.hw.topology(gpus).domain_words().c_str(), p.rows.front().candidate.name().c_str(), p.rows.front().tokens_per_s_per_gpu);
    const bool met = st.seconds < target_s;
    std::printf("  verdict: %s (%.1f s against the %.0f s target; CPU seconds vary with the machine)\n", met ? "MET" : "NOT MET",
                st.seconds, target_s);
  }
  return 0;  // a benchmark reports; it does not fail on a slow machine
}

}  // namespace

int bench_plan(const BenchPlanOptions& o) {
  if (o.gbs > 0) return bench_step_plan(o);
  if (o.plan.gpus > 256) throw ConfigError("bench plan: a layer plan takes up to 256 GPUs; give --gbs for the whole step");
  model::PlanOptions po;
  po.gpus = o.plan.gpus;
  po.layers = find_preset(o.plan.preset).layers;
  std::vector<model::Hardware> profiles;
  for (const std::string& h : profile_list(o.plan.hw)) profiles.push_back(model::load_hardware(h));
  resolve_one_rank(o.plan.cfg);
  require_memory(32.0 * double(o.plan.cfg.tokens()) + model::schedule_bytes(po.gpus, o.plan.cfg, o.plan.choices.applied_to({}).requested_layout(o.plan.cfg)),
                 detail::concat("the plan's dry runs on ", po.gpus, " ranks"), "--gpus or --seq", 0, 2 * po.gpus);
  std::printf("ringside bench plan: %s, s = %lld, on %d GPUs of %s, %d layers, every recompute mode (target: under %.0f s)\n",
              o.plan.preset.c_str(), (long long)o.plan.cfg.s, po.gpus, o.plan.hw.front().c_str(), po.layers, o.target_s);
  std::fflush(stdout);
  model::PlanStats st;
  ProgressLine progress("bench plan");  // on stderr, every 2 s
  po.progress = &progress;
  const std::vector<model::Plan> plans = model::make_plan(o.plan.cfg, po, profiles, &st);
  progress.finish();
  const double per_dry_run = st.dry_runs ? st.seconds / double(st.dry_runs) : 0;
  const size_t valid = st.candidates - st.invalid;
  std::printf("  %zu candidates, %zu valid; %zu rejected by the formulas before any dry run\n", st.candidates, valid, st.memory_rejects);
  std::printf("  %zu dry runs; %zu replays reused one recorded for another order or profile\n", st.dry_runs, st.reused);
  std::printf("  plan: %.1f s (%.2f s a dry run and its replays); one dry run per valid candidate would take about %.0f s (%.1fx)\n",
              st.seconds, per_dry_run, per_dry_run * double(valid * profiles.size()), st.seconds > 0 ? per_dry_run * double(valid * profiles.size()) / st.seconds : 0.0);
  std::printf("  winner on %s: %s\n", plans.front().hw.name.c_str(),
              plans.front().ranked() ? plans.front().rows.front().candidate.name().c_str() : "none fits");
  std::printf("  verdict: %s (%.1f s against the %.0f s target; CPU seconds vary with the machine)\n",
              st.seconds < o.target_s ? "MET" : "NOT MET", st.seconds, o.target_s);
  return 0;
}

}  // namespace ringside::cli

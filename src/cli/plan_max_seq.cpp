// `ringside plan --max-seq`: the longest sequence whose whole training step fits (model/max_seq.h),
// per recompute mode and ZeRO stage, printed as a table with each cell's split, and in --json.
#include <algorithm>
#include <cstdio>

#include "cli/commands.h"
#include "cli/format.h"
#include "core/error.h"
#include "core/output.h"
#include "core/progress.h"
#include "layer/presets.h"
#include "model/max_seq.h"
#include "parallel/run_plan.h"

namespace ringside::cli {

namespace {

// 75776 -> "75,776 (74K)": the tokens, and in units of 1024 (the newcomer's "74K").
std::string tokens_text(int64_t s) {
  std::string digits = std::to_string(s), grouped;
  for (size_t i = 0; i < digits.size(); ++i) grouped += (i > 0 && (digits.size() - i) % 3 == 0 ? "," : "") + digits.substr(i, 1);
  return grouped + " (" + std::to_string(s / 1024) + "K)";
}

// The `ringside model` command that counts a cell's memory at its s (the same count).
std::string check_command(const PlanCommandOptions& o, const model::MaxSeqCell& c, const std::string& hw) {
  PlanCommandOptions at = o;
  at.gbs = int(c.gbs), at.layers = o.layers;
  return plan_model_command(at, hw) + detail::concat(" --seq ", c.s, " ") + model_flags(c.split);
}

void print_max_seq(const model::MaxSeqPlan& plan, const PlanCommandOptions& o, const std::string& hw_given) {
  const model::Hardware& hw = plan.hw;
  std::printf("\n  on %s: %s, %s (%s) a GPU\n", hw.name.c_str(), hw.description.c_str(), format_bytes(hw.memory_bytes).c_str(),
              format_bytes(hw.memory_bytes, ByteUnits::decimal).c_str());
  size_t wname = 5;
  for (const model::MaxSeqCell& c : plan.cells) wname = std::max(wname, c.split.name().size());
  std::printf("\n  %-9s  %4s  %-17s  %s  %6s  %-15s  %s\n", "recompute", "ZeRO", "longest s", pad("split", wname).c_str(), "GBS",
              "binding", "memory / GPU at the limit = w + g + opt + act");
  const model::MaxSeqCell* longest = nullptr;
  for (const model::MaxSeqCell& c : plan.cells) {
    if (c.s > 0 && (!longest || c.s > longest->s)) longest = &c;
    if (c.s == 0) {
      std::printf("  %-9s  %4d  %-17s  %s  %6s  %-15s  needs at least %s at s = %lld\n", to_string(c.recompute), c.zero, "nothing fits",
                  pad(c.split.name(), wname).c_str(), "-", c.binding.c_str(), model::memory_text(c.memory, hw.memory_bytes).c_str(),
                  (long long)c.unit);
      continue;
    }
    std::printf("  %-9s  %4d  %-17s  %s  %6lld  %-15s  %s\n", to_string(c.recompute), c.zero, tokens_text(c.s).c_str(),
                pad(c.split.name(), wname).c_str(), (long long)c.gbs, c.binding.c_str(), model::memory_text(c.memory, hw.memory_bytes).c_str());
  }
  std::printf("  longest s: the longest that fits, a multiple of %lld tokens and of what its split needs (T C, and 2 R for\n"
              "  zigzag over a ring of R): s + that unit does not fit the same split; both confirmed by the dry run's count.\n"
              "  split: the one reaching furthest (ties: the first by its formulas' bound); memory: its fullest stage's, as plan\n"
              "  --gbs and model --gbs count it;\n  %s\n",
              (long long)o.granularity, model::kMemoryTextLegend);
  // ZeRO shards over DP x CP: a split with neither (TP or PP alone) is the same at every stage.
  if (std::any_of(plan.cells.begin(), plan.cells.end(),
                  [](const model::MaxSeqCell& c) { return c.s > 0 && c.split.dp * c.split.layer.par.cp == 1; }))
    std::printf("  ZeRO shards the weights, gradients and Adam's state over DP x CP: a split with DP x CP = 1 (TP or PP\n"
                "  alone) holds the same at every stage, so its rows repeat\n");
  if (longest)
    std::printf("  the longest, counted by model --gbs (the same memory):\n    %s\n", check_command(o, *longest, hw_given).c_str());
}

nlohmann::json cell_json(const model::MaxSeqCell& c, const model::Hardware& hw, const PlanCommandOptions& o, const std::string& hw_given) {
  const ParallelConfig& par = c.split.layer.par;
  nlohmann::json j = {{"recompute", to_string(c.recompute)}, {"zero", c.zero}, {"fits", c.s > 0}, {"s", c.s}, {"unit", c.unit},
                      {"split", c.split.name()}, {"tp", par.tp}, {"cp", par.cp}, {"cp_comm", to_string(par.cp_comm)},
                      {"cp_a2a", par.a2a_size()}, {"layout", to_string(par.layout)}, {"pp", c.split.pp}, {"vp", c.split.vp},
                      {"dp", c.split.dp}, {"gbs", c.gbs}, {"microbatches", c.split.microbatches}, {"binding", c.binding},
                      {"memory", memory_json(c.memory, hw)}, {"model_flags", model_flags(c.split)}};
  if (c.s > 0) j["model_command"] = check_command(o, c, hw_given);
  return j;
}

}  // namespace

int plan_max_seq_command(const PlanCommandOptions& o, const std::vector<model::Hardware>& profiles, const model::ModelOptions& modeling) {
  if (o.seq_given)
    throw ConfigError("plan --max-seq finds the longest s that fits: give no --seq (--granularity sets its step, 1024 by default)");
  if (!o.trace.empty()) throw ConfigError("plan --max-seq: --trace draws a plan's winner at one s; plan at the s it finds for a timeline");
  if (!o.emit.empty())
    throw ConfigError("plan --max-seq: --emit prints a plan's winner's flags; each cell's are in --json (model_flags), or plan at its s");
  if (o.exhaustive) throw ConfigError("plan --max-seq weighs every split by its memory alone: --exhaustive is plan --gbs's");
  if (o.cfg.b != 1)
    throw ConfigError(detail::concat("plan --max-seq: the microbatch is --mbs (MBS = ", o.mbs, "); --batch is the layer plan's b"));
  model::MaxSeqOptions mo;
  model::StepPlanOptions& so = mo.step;
  const ModelPreset* preset = o.preset.empty() ? nullptr : &find_preset(o.preset);
  so.gpus = o.gpus;
  so.layers = o.layers ? o.layers : preset ? preset->layers : 1;
  so.vocab = preset ? preset->vocab : 0;
  so.gbs = o.gbs, so.mbs = o.mbs, so.pp = o.pp, so.vp = o.vp, so.dp = o.dp, so.zero = o.zero;
  so.modeling = modeling;
  if (o.recompute != "any") so.modes = {parse_recompute(o.recompute)};
  so.layout = o.choices.layout;
  so.schemes = cp_schemes_named(o.cp_comm);
  mo.granularity = o.granularity;
  LayerConfig cfg = o.cfg;
  cfg.b = o.mbs, cfg.s = o.granularity;
  if (cfg.docs.empty()) resolve_one_rank(cfg);  // the layer's own rules (max_seq_plan refuses documents)
  std::string shape = cfg.summary();
  if (const size_t at = shape.find(" s="); at != std::string::npos) shape.erase(at, shape.find(' ', at + 1) - at);  // s is the answer
  std::printf("ringside plan --max-seq: %s%s on %d GPUs, the whole step: %d layers, V = %lld, MBS = %d, recompute %s\n",
              o.preset.empty() ? "" : (o.preset + ": ").c_str(), shape.c_str(), o.gpus, so.layers, (long long)so.vocab, o.mbs,
              o.recompute.c_str());
  std::printf("  GBS %s\n", o.gbs ? detail::concat("= ", o.gbs, " sequences (--gbs)").c_str()
                                    : "not given: each split's fewest microbatches that fill its pipeline (m = PP; more when interleaved),\n"
                                      "  as many in flight on its first stage as any larger batch");
  std::fflush(stdout);
  model::MaxSeqStats stats;
  const std::vector<model::MaxSeqPlan> plans = model::max_seq_plan(o.cfg.docs.empty() ? cfg : o.cfg, mo, profiles, &stats);
  std::printf("  %zu splits weighed: each bounded by the formulas (%zu counts), %zu searched with dry runs (%zu dry runs); %.1f s\n",
              stats.splits, stats.bounds, stats.confirmed, stats.dry_runs, stats.seconds);
  std::printf("  modeled, not measured: the memory of the whole step (plan --gbs's count); no time is modeled here: plan --gbs at\n"
              "  the s found ranks the splits that fit by their speed\n");
  const std::vector<std::string> hw_given = profile_list(o.hw);
  for (size_t p = 0; p < plans.size(); ++p) print_max_seq(plans[p], o, hw_given[p]);
  if (!o.json.empty()) {
    nlohmann::json js = {{"max_seq", true}, {"config", cfg.to_json()}, {"preset", o.preset}, {"gpus", o.gpus}, {"layers", so.layers},
                         {"vocab", so.vocab}, {"mbs", o.mbs}, {"gbs", o.gbs ? nlohmann::json(o.gbs) : nlohmann::json(nullptr)},
                         {"granularity", o.granularity}, {"dtype", modeling.dtype}, {"recompute", o.recompute}};
    js["config"].erase("s");
    js["stats"] = {{"splits", stats.splits}, {"bounds", stats.bounds}, {"confirmed", stats.confirmed},
                   {"dry_runs", stats.dry_runs}, {"seconds", stats.seconds}};
    for (size_t p = 0; p < plans.size(); ++p) {
      nlohmann::json cells = nlohmann::json::array();
      for (const model::MaxSeqCell& c : plans[p].cells) cells.push_back(cell_json(c, plans[p].hw, o, hw_given[p]));
      js["plans"].push_back({{"hardware", plans[p].hw.to_json()}, {"cells", cells}});
    }
    output::write(o.json, js.dump(2) + "\n", "--json");
    std::printf("\n  json: %s\n", o.json.c_str());
  }
  return 0;
}

}  // namespace ringside::cli

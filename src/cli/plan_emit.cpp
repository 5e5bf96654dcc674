// `ringside plan --emit FRAMEWORK`: the winner's and the runner-up's settings in each framework's
// own terms (model/emit.h), printed after the plan's tables.
#include <algorithm>
#include <cstdio>
#include <string>
#include <vector>

#include "cli/commands.h"
#include "lessons/lesson.h"  // wrap
#include "model/emit.h"
#include "model/plan.h"

namespace ringside::cli {

namespace {

// The frameworks asked for, each once, in the order given.
std::vector<const model::Framework*> asked(const std::vector<std::string>& names) {
  std::vector<const model::Framework*> fs;
  for (const std::string& n : names) {
    const model::Framework* f = &model::framework(n);
    if (std::find(fs.begin(), fs.end(), f) == fs.end()) fs.push_back(f);
  }
  return fs;
}

// The settings as lines of at most about 100 characters: flags ("--x 4") packed side by side,
// never split; keys ("config.a = 4") and files one a line.
void print_settings(const std::vector<std::string>& settings) {
  std::string line;
  auto flush = [&line] {
    if (!line.empty()) std::printf("      %s\n", line.c_str());
    line.clear();
  };
  for (const std::string& s : settings) {
    if (!s.starts_with("--")) {
      flush();
      std::printf("      %s\n", s.c_str());
      continue;
    }
    if (!line.empty() && line.size() + 1 + s.size() > 100) flush();
    line += (line.empty() ? "" : " ") + s;
  }
  flush();
}

// One framework's answer for one row, labelled "winner <name>" or "runner-up <name>".
void print_row(const model::Framework& f, const std::string& label, const model::FrameworkSplit& split) {
  const model::FrameworkFlags flags = f.emit(split);
  std::printf("    %s:\n", label.c_str());
  print_settings(flags.settings);
  for (const std::string& c : flags.cannot) std::printf("%s", lessons::wrap(c, 104, "      ").c_str());
  for (const std::string& n : flags.notes) std::printf("%s", lessons::wrap("note: " + n, 104, "      ").c_str());
}

void print_header(const model::Framework& f, const std::string& hw) {
  std::printf("\n%s", lessons::wrap(std::string("--emit ") + f.name + ": " + f.title + "'s settings for the winner and the runner-up on " +
                                        hw + " (names checked against " + f.source + ")",
                                    106, "  ").c_str());
}

}  // namespace

void print_framework_flags(const std::vector<model::Plan>& plans, const PlanCommandOptions& o, const LayerConfig& cfg,
                           const model::ModelOptions& mo) {
  for (const model::Framework* f : asked(o.emit))
    for (const model::Plan& plan : plans) {
      if (plan.ranked() == 0) continue;
      print_header(*f, plan.hw.name);
      print_row(*f, "winner " + plan.rows.front().candidate.name(), model::framework_split(plan.rows.front().candidate, cfg, mo));
      if (const model::PlanRow* second = model::runner_up(plan))
        print_row(*f, "runner-up " + second->candidate.name(), model::framework_split(second->candidate, cfg, mo));
    }
}

void print_framework_flags(const std::vector<model::StepPlan>& plans, const PlanCommandOptions& o, const LayerConfig& cfg,
                           const model::StepPlanOptions& so) {
  for (const model::Framework* f : asked(o.emit))
    for (const model::StepPlan& plan : plans) {
      if (plan.ranked() == 0) continue;
      print_header(*f, plan.hw.name);
      print_row(*f, "winner " + plan.rows.front().candidate.name(), model::framework_split(plan.rows.front().candidate, cfg, so));
      const model::StepRow* second = model::step_runner_up(plan);
      if (second && second->status == model::PlanStatus::ranked)
        print_row(*f, "runner-up " + second->candidate.name(), model::framework_split(second->candidate, cfg, so));
    }
}

}  // namespace ringside::cli

// `ringside lesson NN`: runs a lesson's scenario, writes its trace, and steps through it.
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>

#include <unistd.h>

#include "cli/commands.h"
#include "core/error.h"
#include "core/output.h"
#include "lessons/lesson.h"

namespace ringside::cli {

CLI::App* add_lesson(CLI::App& app, LessonOptions& o) {
  CLI::App* sub = app.add_subcommand("lesson", "Step through a lesson: run its scenario, say what every rank holds and does");
  // No range check here: lessons::find_lesson names the lessons that exist.
  sub->add_option("number", o.number,
                  detail::concat("the lesson, 1 to ", lessons::all_lessons().size(), " (none: list them)"));
  sub->add_flag("--no-pause", o.no_pause, "run straight through, without waiting for Enter (scripts)");
  sub->add_option("--trace", o.trace, "write the lesson's trace here (default out/lessons/NN-name.trace.json)")
      ->option_text("FILE")
      ->check(non_empty("--trace needs a file name"));
  sub->add_option("--json", o.json, "also write the numbers the lesson states and its steps as JSON")
      ->option_text("FILE")
      ->check(non_empty("--json needs a file name"));
  sub->footer(
      "Between steps, Enter goes on and q quits. The trace opens in the viewer at the lesson:\n"
      "  ringside lesson 3 && ringside-viewer --lesson 3");
  return sub;
}

int lesson_command(const LessonOptions& o, const std::string& viewer) {
  if (!o.number) {
    std::printf("The lessons (run one with: ringside lesson N):\n");
    for (const lessons::Lesson& l : lessons::all_lessons())
      std::printf("  %d  %-30s lessons/%s/README.md\n", l.number, l.title, l.slug);
    return 0;
  }
  const int n = *o.number;
  lessons::find_lesson(n);  // an unknown lesson is an error before anything else
  const std::string trace_path = o.trace.empty() ? lessons::default_trace_path(n) : o.trace;
  output::check_distinct({{"--trace", trace_path}, {"--json", o.json}});
  // Each scenario runs small layers on up to 4 ranks (a comm thread each, and the main thread):
  // at most 400 MB resident, measured, and the threads' stacks and BLAS buffers.
  require_memory(512.0 * (1 << 20), "lesson " + std::to_string(n), "", 5, 4);
  // The default trace goes to out/lessons/: create it; a path the user gave must exist.
  if (o.trace.empty()) {
    std::error_code ec;
    const std::filesystem::path dir = std::filesystem::path(trace_path).parent_path();
    std::filesystem::create_directories(dir, ec);
    if (ec) throw ConfigError("--trace: cannot create the directory " + dir.string() + " for the lesson's trace: " + ec.message() +
                              " (give --trace FILE elsewhere)");
  }
  output::check(trace_path, "--trace");
  if (!o.json.empty()) output::check(o.json, "--json");

  std::printf("Running lesson %d's scenario (a few seconds)...\n", n);
  std::fflush(stdout);
  const lessons::Script s = lessons::build_lesson(n);
  trace::write_trace(trace_path, s.trace);
  if (!o.json.empty()) {
    nlohmann::json j = lessons::lesson_json(s);
    j["numbers"] = s.numbers;
    output::write(o.json, j.dump(2) + "\n", "--json");
  }
  const bool pause = !o.no_pause;
  const size_t shown = lessons::present(s, std::cin, std::cout, pause);
  std::cout << "\nThe trace of this lesson: " << trace_path << "\nStep through it beside the timeline: " << viewer
            << " --lesson " << n << (o.trace.empty() ? "" : " " + trace_path) << "\n";
  if (shown == s.steps.size() && n < int(lessons::all_lessons().size()))
    std::cout << "Next: ringside lesson " << n + 1 << " (" << lessons::find_lesson(n + 1).title << ")\n";
  return 0;
}

}  // namespace ringside::cli

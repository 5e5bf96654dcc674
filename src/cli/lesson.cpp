// `ringside lesson NN`: runs a lesson's scenario, writes its trace, and steps through it.
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
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
  sub->add_option("--hw", o.hw,
                  std::string("the GPU profile the lesson's times are modeled on (default: the one its chapter quotes, ") +
                      model::kDefaultTwinHardware + "; lesson 8's h100-nvlink)")
      ->option_text("PROFILE")
      ->check(non_empty("--hw needs a profile"));
  sub->add_option("--update-chapter", o.update_chapter,
                  "rewrite the marked tables and numbers of this chapter (lessons/NN-name/README.md) from the run")
      ->option_text("FILE")
      ->check(non_empty("--update-chapter needs a file name"));
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
  const std::string quoted = lessons::find_lesson(n).hw;  // an unknown lesson is an error before anything else
  const std::string trace_path = o.trace.empty() ? lessons::default_trace_path(n) : o.trace;
  // The chapter is read and rewritten: an output, and no other output may be it.
  output::check_distinct({{"--trace", trace_path}, {"--json", o.json}, {"--update-chapter", o.update_chapter}},
                         {{"--hw", output::is_regular(o.hw) ? o.hw : ""}});

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
  std::string chapter;
  if (!o.update_chapter.empty()) {
    if (!o.hw.empty() && o.hw != quoted)
      throw ConfigError("--update-chapter: chapter " + std::to_string(n) + " quotes the times on " + quoted + ": leave out --hw " + o.hw);
    // A chapter is tens of KiB; 4 MiB is far past any, and keeps the scan quick.
    chapter = output::read_input(o.update_chapter, "--update-chapter", 4u << 20);
    // The marks' syntax before the scenario runs: a malformed mark costs nothing.
    if (const std::vector<std::string> bad = lessons::chapter_syntax(chapter); !bad.empty())
      throw ConfigError("--update-chapter " + o.update_chapter + ": " + bad.front());
    if (lessons::chapter_marks(chapter) == 0)
      throw ConfigError("--update-chapter " + o.update_chapter + ": it has no marks (<!-- step N table K -->, <!--n:KEY-->)");
    output::check(o.update_chapter, "--update-chapter");
  }

  std::printf("Running lesson %d's scenario (%s)...\n", n, n == 8 ? "it plans 256 GPUs: 15 to 25 s" : "a few seconds");
  std::fflush(stdout);
  const lessons::Script s = lessons::build_lesson(n, o.hw);
  if (s.hw.name != quoted)
    std::printf("Times are modeled on %s; the chapter quotes them on %s.\n", s.hw.name.c_str(), quoted.c_str());
  // The chapter's marks against the run first: one that names nothing fails before any write.
  const std::string updated = o.update_chapter.empty() ? "" : lessons::update_chapter(chapter, s.numbers, s.steps);
  trace::write_trace(trace_path, s.trace);
  if (!o.json.empty()) {
    nlohmann::json j = lessons::lesson_json(s);
    j["numbers"] = s.numbers;
    output::write(o.json, j.dump(2) + "\n", "--json");
  }
  if (!o.update_chapter.empty()) {
    output::write(o.update_chapter, updated, "--update-chapter");
    std::printf("%s: %s\n", o.update_chapter.c_str(), updated == chapter ? "already says what this run says" : "updated from this run");
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

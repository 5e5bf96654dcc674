// The lessons themselves: the catalogue of the eleven, where each one's chapter and trace live, and
// building a lesson's script. The rest of lesson.h is beside it: text.cpp (fmt, wrap, Table),
// script.cpp (the Script's steps and traced runs), present.cpp (otherData.lesson and the
// terminal) and chapter.cpp (the chapters' drift marks). The scenarios themselves are
// lessons/NN-name/scenario.cpp.
#include "lessons/lesson.h"

#include "core/error.h"

namespace ringside::lessons {

// The eleven scenarios (lessons/NN-name/scenario.cpp).
void memory_wall(Script& s);
void megatron_sp(Script& s);
void ring_attention(Script& s);
void load_balance(Script& s);
void ulysses(Script& s);
void choosing(Script& s);
void combining(Script& s);
void whole_step(Script& s);
void all_gather_cp(Script& s);
void grad_all_reduce(Script& s);
void the_rack(Script& s);

const std::vector<Lesson>& all_lessons() {
  static const std::vector<Lesson> lessons = {
      {1, "01-memory-wall", "The activation memory wall", memory_wall},
      {2, "02-megatron-sp", "Megatron sequence parallelism", megatron_sp},
      {3, "03-ring-attention", "Ring attention", ring_attention},
      {4, "04-load-balance", "Causal load balance", load_balance},
      {5, "05-ulysses", "DeepSpeed-Ulysses", ulysses},
      {6, "06-choosing", "Choosing a strategy", choosing},
      {7, "07-combining", "Combining strategies", combining},
      {8, "08-whole-step", "The whole step", whole_step, "h100-nvlink"},
      {9, "09-all-gather", "All-gather context parallelism", all_gather_cp},
      {10, "10-grad-all-reduce", "The weight-gradient all-reduce", grad_all_reduce},
      {11, "11-the-rack", "The rack", the_rack, "h100-nvlink"},
  };
  return lessons;
}

const Lesson& find_lesson(int n) {
  for (const Lesson& l : all_lessons())
    if (l.number == n) return l;
  throw ConfigError(detail::concat("there is no lesson ", n, ": the lessons are 1 to ", all_lessons().size(),
                                   " (ringside lesson lists them)"));
}

std::string default_trace_path(int n) { return "out/lessons/" + std::string(find_lesson(n).slug) + ".trace.json"; }
std::string readme_path(int n) { return "lessons/" + std::string(find_lesson(n).slug) + "/README.md"; }

Script build_lesson(int n, const std::string& hw) {
  const Lesson& l = find_lesson(n);
  Script s;
  s.number = l.number, s.slug = l.slug, s.title = l.title;
  s.hw = model::load_hardware(hw.empty() ? l.hw : hw);
  l.build(s);
  model::add_modeled_twins(s.trace, s.hw);  // every run's twin, also of those no step asked about
  s.trace.other["lesson"] = lesson_json(s);
  return s;
}

}  // namespace ringside::lessons

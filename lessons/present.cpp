// Presenting a lesson's steps: in the trace's otherData.lesson (the viewer reads them back with
// steps_of) and on the terminal, a step at a time.
#include "lessons/lesson.h"

#include <istream>
#include <ostream>

#include "core/error.h"

namespace ringside::lessons {

// ---- otherData.lesson ----------------------------------------------------------------------

nlohmann::json lesson_json(const Script& s) {
  nlohmann::json j;
  j["number"] = s.number, j["slug"] = s.slug, j["title"] = s.title, j["readme"] = readme_path(s.number);
  j["steps"] = nlohmann::json::array();
  for (const Step& st : s.steps) {
    nlohmann::json o{{"title", st.title}, {"text", st.text}};
    if (st.focus) o["focus"] = {{"strategy", st.focus->strategy}, {"begin_ns", st.focus->begin_ns}, {"end_ns", st.focus->end_ns}};
    j["steps"].push_back(std::move(o));
  }
  return j;
}

std::vector<Step> steps_of(const nlohmann::json& other) {
  std::vector<Step> out;
  const auto l = other.find("lesson");
  if (l == other.end()) return out;
  auto bad = [](const std::string& what) { return Error("otherData.lesson: " + what); };
  if (!l->is_object()) throw bad("not an object");
  const auto steps = l->find("steps");
  if (steps == l->end() || !steps->is_array()) throw bad("no steps array");
  for (size_t i = 0; i < steps->size(); ++i) {
    const nlohmann::json& j = (*steps)[i];
    const std::string where = "steps[" + std::to_string(i) + "]";
    if (!j.is_object()) throw bad(where + " is not an object");
    const auto title = j.find("title"), text = j.find("text");
    if (title == j.end() || !title->is_string() || text == j.end() || !text->is_string())
      throw bad(where + " needs the strings title and text");
    Step s{title->get<std::string>(), text->get<std::string>(), std::nullopt, {}};
    if (const auto f = j.find("focus"); f != j.end()) {
      const auto st = f->is_object() ? f->find("strategy") : j.end();
      const auto b = f->is_object() ? f->find("begin_ns") : j.end();
      const auto e = f->is_object() ? f->find("end_ns") : j.end();
      if (!f->is_object() || st == f->end() || !st->is_string() || b == f->end() || !b->is_number_integer() ||
          e == f->end() || !e->is_number_integer() || e->get<int64_t>() < b->get<int64_t>())
        throw bad(where + ".focus needs strategy, and integers begin_ns <= end_ns");
      s.focus = Focus{st->get<std::string>(), b->get<int64_t>(), e->get<int64_t>()};
    }
    out.push_back(std::move(s));
  }
  return out;
}

// ---- the terminal ----------------------------------------------------------------------------

size_t present(const Script& s, std::istream& in, std::ostream& out, bool pause) {
  const size_t n = s.steps.size();
  out << "Lesson " << s.number << ": " << s.title << ", " << n << " steps\n"
      << "The chapter: " << readme_path(s.number) << "\n";
  if (pause) out << "Enter goes to the next step, q quits.\n";
  for (size_t i = 0; i < n; ++i) {
    const Step& st = s.steps[i];
    const std::string head = fmt("Step %zu/%zu: %s ", i + 1, n, st.title.c_str());
    out << "\n== " << head << std::string(head.size() < 86 ? 86 - head.size() : 2, '=') << "\n\n" << st.text;
    out.flush();
    if (pause && i + 1 < n) {
      out << "\n[Enter: next step, q: quit] " << std::flush;
      std::string line;
      if (!std::getline(in, line)) {
        pause = false;  // the end of the input: go straight through
        out << '\n';
      } else if (line == "q" || line == "Q") {
        out << "Stopped at step " << i + 1 << " of " << n << ".\n";
        return i + 1;
      }
    }
  }
  return n;
}

}  // namespace ringside::lessons

// A lesson beside its timeline: the steps of `ringside lesson N` (from the trace's
// otherData.lesson), each framing the part of the run it is about.
#include <algorithm>

#include "viz/app.h"

namespace ringside::viz {

void App::open_lesson() {
  if (traces_.empty()) return;  // the load error is already in errors_
  const Loaded& t = traces_.front();
  try {
    lesson_steps_ = lessons::steps_of(t.data.other);
  } catch (const std::exception& e) {
    errors_.push_back(t.path + ": " + e.what());
    return;
  }
  const auto l = t.data.other.find("lesson");
  const auto n = l != t.data.other.end() ? l->find("number") : t.data.other.end();
  if (lesson_steps_.empty() || n == l->end() || !n->is_number_integer() || n->get<int>() != *opt_.lesson) {
    errors_.push_back(t.path + " is not the trace of lesson " + std::to_string(*opt_.lesson) + " (run: ringside lesson " +
                      std::to_string(*opt_.lesson) + ")");
    lesson_steps_.clear();
    return;
  }
  const auto title = l->find("title");
  lesson_title_ = "Lesson " + std::to_string(*opt_.lesson) + (title != l->end() && title->is_string() ? ": " + title->get<std::string>() : "");
  const int k = opt_.lesson_step.value_or(1);
  if (k < 1 || size_t(k) > lesson_steps_.size()) {
    errors_.push_back("--lesson-step " + std::to_string(k) + ": lesson " + std::to_string(*opt_.lesson) + " has steps 1 to " +
                      std::to_string(lesson_steps_.size()));
    return;
  }
  go_to_lesson_step(size_t(k - 1));
}

// Shows a lesson step: zoom to its focus (in its strategy's group time) with the play head at
// its end, so that the timeline shows the run up to the end of what the step is about.
void App::go_to_lesson_step(size_t i) {
  if (i >= lesson_steps_.size()) return;
  lesson_step_ = i;
  replay_.playing = false;
  const std::optional<lessons::Focus>& f = lesson_steps_[i].focus;
  const Group* g = nullptr;
  if (f && !traces_.empty())
    for (const Group& gr : traces_.front().layout.groups)
      if (gr.strategy == f->strategy) g = &gr;
  if (!g) {
    fit();  // and every group on its family's clock
    reveal_ = false;
    return;
  }
  scroll_to_ = g->y;  // bring the step's strategy into view (the timeline applies it)
  const Loaded& t = traces_.front();
  const double k = scale_of(t, g->strategy);  // the focus in the group's time; the axis in its own
  const double b = double(f->begin_ns - g->zero_ns) / k, e = std::max(double(f->end_ns - g->zero_ns) / k, b + 1.0);
  axis_.fit(b, e);
  replay_.head_ns = int64_t(e);
  reveal_ = true;
  // Every other group shows the same part of its own run (its twin's ring step 0 for the run's,
  // another layout's forward for this one's) on the same pixels, [b, e] of the axis: a twin's
  // clock is modeled ns, a thousand times faster than the measured run's, so one shared clock
  // left the twins' rows empty.
  const Landmarks focused = landmarks(t.data, *g);
  const trace::Interval focus{f->begin_ns, f->end_ns};
  frames_.clear();
  framed_group_ = g->strategy;
  for (const Group& other : t.layout.groups) {
    if (other.strategy == g->strategy) {
      frames_[other.strategy] = Frame{0, k, ""};
      continue;
    }
    const Correspondence c = corresponding_window(focused, focus, landmarks(t.data, other));
    const double scale = double(std::max<int64_t>(c.window.end - c.window.begin, 1)) / (e - b);
    frames_[other.strategy] = Frame{double(c.window.begin - other.zero_ns) - b * scale, scale, c.landmark};
  }
}

void App::lesson_panel(float height) {
  ImGui::BeginChild("lesson", ImVec2(0, height), true, ImGuiWindowFlags_HorizontalScrollbar);
  ImGui::TextColored(ImVec4(1, 0.85f, 0.4f, 1), "%s", lesson_title_.c_str());
  if (ImGui::Button("< prev (Left)")) go_to_lesson_step(lesson_step_ - (lesson_step_ > 0));
  ImGui::SameLine();
  if (ImGui::Button("next (Right) >")) go_to_lesson_step(lesson_step_ + 1);
  ImGui::SameLine();
  ImGui::Text("step %zu of %zu", lesson_step_ + 1, lesson_steps_.size());
  const lessons::Step& st = lesson_steps_[lesson_step_];
  ImGui::TextColored(ImVec4(0.6f, 0.85f, 1, 1), "%s", st.title.c_str());
  ImGui::Separator();
  ImGui::TextUnformatted(st.text.c_str());
  ImGui::EndChild();
}

}  // namespace ringside::viz

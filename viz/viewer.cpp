// ringside-viewer: replays ringside traces with Dear ImGui (GLFW + OpenGL 3).
//
// Everything it shows is computed in view_model.cpp; this file draws it. One group of lanes
// per strategy (aligned at the strategy's start, so strategies and traces compare side by
// side), per GPU a compute lane (nesting: phase, sublayer, ring step, op), its comm lanes with
// exposed (red) and hidden (green) communication marked, and its memory by category with the
// peak marked. Panels: stats (the trace's metrics, and over a dragged selection), the
// attention tile map, pinned details, load errors. --screenshot renders once and exits.
#include <GLFW/glfw3.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <optional>
#include <regex>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include "imgui.h"
#include "imgui_impl_glfw.h"
#include "imgui_impl_opengl3.h"
#include "stb_image_write.h"
#include "core/strict_flags.h"
#include "core/output.h"
#include "core/memory_limits.h"
#include "lessons/lesson.h"
#include "viz/view_model.h"

namespace ringside::viz {
namespace {

namespace fs = std::filesystem;
using trace::Event;
using trace::RankTrace;

std::string pct(double p) {
  if (std::isnan(p)) return "-";
  char b[16];
  std::snprintf(b, sizeof b, "%.0f%%", p);
  return b;
}

// A loaded trace and everything derived from it.
struct Loaded {
  std::string path;
  trace::TraceData data;
  TimelineLayout layout;
  std::vector<trace::StrategyMetrics> metrics;
  std::vector<StepMark> steps;                   // relative to their group's start
  std::vector<std::vector<trace::Interval>> exposed;  // per process
  std::vector<MemorySeries> memory;              // per process
  int64_t memory_scale = 1;                      // the highest total of any process: one scale for all
  std::vector<int64_t> group_begin;              // per process: its group's start (the zero)
  std::string summary;                           // "s=4096 h=512 H=8 P=4 (measured)": trace_tag
  std::map<std::string, std::string> tag, comm;  // per group: group_tag and comm_summary
  fs::file_time_type mtime{};
};

Loaded load(const std::string& path) {
  Loaded l;
  l.path = path;
  l.data = trace::read_trace(path);
  l.layout = make_layout(l.data);
  l.metrics = trace::compute_metrics(l.data);
  l.group_begin.resize(l.data.ranks.size());
  for (const Group& g : l.layout.groups)
    for (size_t p : g.processes) l.group_begin[p] = g.zero_ns;
  std::map<std::string, int64_t> begin_of;
  for (const Group& g : l.layout.groups) begin_of[g.strategy] = g.zero_ns;
  for (StepMark m : step_marks(l.data)) {
    m.ts_ns -= begin_of[m.strategy];
    l.steps.push_back(m);
  }
  std::sort(l.steps.begin(), l.steps.end(), [](const StepMark& a, const StepMark& b) { return a.ts_ns < b.ts_ns; });
  for (const RankTrace& r : l.data.ranks) {
    l.exposed.push_back(exposed_intervals(r));
    l.memory.push_back(memory_series(r));
    for (int64_t v : l.memory.back().total) l.memory_scale = std::max(l.memory_scale, v);
  }
  // The run's description, read defensively: otherData is free-form in foreign files.
  const nlohmann::json& o = l.data.other;
  auto field = [](const nlohmann::json& obj, const char* k) -> std::string {
    const auto it = obj.find(k);
    return it != obj.end() && it->is_number() ? it->dump() : "?";
  };
  if (const auto c = o.find("config"); c != o.end() && c->is_object())
    l.summary = "s=" + field(*c, "s") + " h=" + field(*c, "h") + " H=" + field(*c, "H") + " ";
  size_t P = 0;
  for (const auto& m : l.metrics) P = std::max(P, m.ranks.size());
  l.summary += "P=" + std::to_string(P) + " " + trace_tag(o);
  for (const trace::StrategyMetrics& m : l.metrics) l.tag[m.strategy] = group_tag(o, m.strategy), l.comm[m.strategy] = comm_summary(m);
  std::error_code ec;
  l.mtime = fs::last_write_time(path, ec);
  return l;
}

struct Options {
  std::vector<std::string> files;
  std::string live;
  std::string screenshot;
  bool screenshot_given = false;
  std::string size = "1600x1000";
  std::optional<double> at_s;
  std::optional<int> step;
  std::string layout_json;  // tests: where the lanes were drawn
  std::optional<int> lesson;       // --lesson N: the lesson's steps beside the timeline
  std::optional<int> lesson_step;  // --lesson-step K: open at step K (1-based)
  std::string fit = "all";         // --fit: the groups the first view frames
};

class App {
 public:
  explicit App(Options o) : opt_(std::move(o)) {
    for (const std::string& f : opt_.files) open(f);
    // Live: the file may not exist yet (the run has not written it); poll_live opens it then.
    if (!opt_.live.empty() && fs::exists(opt_.live)) open(opt_.live);
    fit();
    // --fit names groups: bring the first of them to the top of the timeline.
    if (opt_.fit != "all" && !traces_.empty())
      if (const auto g = groups_to_fit(traces_.front().layout, traces_.front().data.other, opt_.fit); !g.empty())
        scroll_to_ = g.front()->y;
    if (opt_.at_s) replay_.head_ns = int64_t(*opt_.at_s * 1e9), reveal_ = true;
    if (opt_.step) {
      // Ring step N of the first trace with ring steps: F0.. then B0.. of its first ring group.
      std::vector<int64_t> marks;
      for (const Loaded& t : traces_)
        if (!t.steps.empty() && marks.empty())
          for (const StepMark& m : t.steps)
            if (m.strategy == t.steps.front().strategy) marks.push_back(m.ts_ns);
      if (*opt_.step < 0 || size_t(*opt_.step) >= marks.size())
        errors_.push_back("--step " + std::to_string(*opt_.step) + ": the trace has " + std::to_string(marks.size()) +
                          " ring steps (forward and backward), numbered from 0");
      else
        replay_.head_ns = marks[size_t(*opt_.step)] + 1, reveal_ = true;
    }
    if (opt_.lesson) open_lesson();
  }

  const std::vector<std::string>& errors() const { return errors_; }
  bool any_trace() const { return !traces_.empty(); }
  bool any_event() const {
    for (const Loaded& t : traces_)
      for (const RankTrace& r : t.data.ranks)
        if (!r.events.empty()) return true;
    return false;
  }

  void open(const std::string& path) {
    try {
      traces_.push_back(load(path));
      ++generation_;
    } catch (const std::exception& e) {
      errors_.push_back(e.what());
    }
  }

  // --lesson: the steps come from the trace's otherData.lesson (written by `ringside lesson`).
  void open_lesson() {
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

  // Shows a lesson step: zoom to its focus (in its strategy's group time) with the play head
  // at its end, so that the timeline shows the run up to the end of what the step is about.
  void go_to_lesson_step(size_t i) {
    if (i >= lesson_steps_.size()) return;
    lesson_step_ = i;
    replay_.playing = false;
    const std::optional<lessons::Focus>& f = lesson_steps_[i].focus;
    const Group* g = nullptr;
    if (f && !traces_.empty())
      for (const Group& gr : traces_.front().layout.groups)
        if (gr.strategy == f->strategy) g = &gr;
    if (!g) {
      fit();
      reveal_ = false;
      return;
    }
    scroll_to_ = g->y;  // bring the step's strategy into view (the timeline applies it)
    const double b = double(f->begin_ns - g->zero_ns), e = double(f->end_ns - g->zero_ns);
    axis_.fit(b, std::max(e, b + 1.0));
    replay_.head_ns = f->end_ns - g->zero_ns;
    reveal_ = true;
  }

  void lesson_panel(float height) {
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

  void fit() {
    int64_t end = 1;
    for (const Loaded& t : traces_)
      for (const Group& g : t.layout.groups) end = std::max(end, g.end_ns - g.zero_ns);
    // The groups to frame; when --fit names none (yet, when live), all of them.
    auto framed = [&](const std::string& what) {
      std::vector<const Group*> gs;
      for (const Loaded& t : traces_)
        for (const Group* g : groups_to_fit(t.layout, t.data.other, what)) gs.push_back(g);
      return gs;
    };
    std::vector<const Group*> groups = framed(opt_.fit);
    if (groups.empty() && opt_.fit != "all") {
      if (!fit_warned_ && !traces_.empty())
        errors_.push_back("--fit " + opt_.fit + ": no group matches (all, modeled, measured, or a group's name)");
      fit_warned_ = true;
      groups = framed("all");
    }
    int64_t lo = 0, span = 1;
    for (const Group* g : groups) lo = std::min(lo, g->begin_ns - g->zero_ns), span = std::max(span, g->end_ns - g->zero_ns);
    axis_.fit(double(lo), double(span));
    end_ns_ = end;
  }

  // Live mode: reread the file when it changes; keep the last good copy while it is half-written.
  void poll_live() {
    if (opt_.live.empty()) return;
    std::error_code ec;
    const auto m = fs::last_write_time(opt_.live, ec);
    if (ec) return;
    for (Loaded& t : traces_)
      if (t.path == opt_.live && t.mtime != m) {
        try {
          t = load(opt_.live);
          ++generation_;
          fit();
          live_note_.clear();
        } catch (const std::exception& e) {
          t.mtime = m;  // try again at the next change
          live_note_ = std::string("waiting for a complete trace: ") + e.what();
        }
      }
    const bool have = std::any_of(traces_.begin(), traces_.end(), [&](const Loaded& t) { return t.path == opt_.live; });
    if (!have && fs::exists(opt_.live, ec)) {
      try {
        traces_.push_back(load(opt_.live));
        ++generation_;
        fit();
        live_note_.clear();
      } catch (const std::exception& e) {
        live_note_ = std::string("waiting for a complete trace: ") + e.what();
      }
    } else if (!have) {
      live_note_ = "waiting for " + opt_.live + " to appear";
    }
  }

  void frame(float width, float height) {
    ImGui::SetNextWindowPos(ImVec2(0, 0));
    ImGui::SetNextWindowSize(ImVec2(width, height));
    ImGui::Begin("ringside-viewer", nullptr,
                 ImGuiWindowFlags_NoTitleBar | ImGuiWindowFlags_NoResize | ImGuiWindowFlags_NoMove |
                     ImGuiWindowFlags_NoCollapse | ImGuiWindowFlags_NoBringToFrontOnFocus);
    toolbar();
    // A lesson's text is tables of up to ~110 columns: give the side panel room for them.
    const float side = lesson_steps_.empty() ? std::min(640.0f, width * 0.40f) : std::min(820.0f, width * 0.48f);
    ImGui::BeginChild("timeline", ImVec2(width - side - 24, 0), true, ImGuiWindowFlags_NoMove);
    timeline();
    ImGui::EndChild();
    ImGui::SameLine();
    ImGui::BeginChild("side", ImVec2(0, 0), true);
    if (!lesson_steps_.empty()) lesson_panel(std::max(200.0f, height * 0.55f));
    side_panel();
    ImGui::EndChild();
    ImGui::End();
    file_dialog();
    error_panel();
    const double now = ImGui::GetTime();
    if (replay_.advance(now - last_time_, end_ns_)) reveal_ = true;
    last_time_ = now;
  }

  // Where lanes were drawn on the last frame (for tests): x range, time range, lane tops.
  nlohmann::json layout_json() const {
    nlohmann::json j;
    j["x0"] = axis_.x0, j["x1"] = axis_.x1, j["t0_ns"] = axis_.t0, j["t1_ns"] = axis_.t1;
    for (const auto& [label, y] : drawn_lanes_) j["lanes"][label] = y;
    return j;
  }

 private:
  void toolbar() {
    if (ImGui::Button("Open...")) dialog_open_ = true, dialog_dir_ = fs::current_path().string();
    ImGui::SameLine();
    if (ImGui::Button("Fit (F)")) fit();
    ImGui::SameLine();
    if (ImGui::Button(replay_.playing ? "Pause (space)" : "Play (space)")) toggle_play();
    ImGui::SameLine();
    if (ImGui::Button("< step")) step(-1);
    ImGui::SameLine();
    if (ImGui::Button("step >")) step(+1);
    ImGui::SameLine();
    ImGui::SetNextItemWidth(120);
    float speed = float(replay_.speed);
    if (ImGui::SliderFloat("speed", &speed, 0.01f, 2.0f, "%.2fx", ImGuiSliderFlags_Logarithmic)) replay_.speed = speed;
    ImGui::SameLine();
    ImGui::Checkbox("replay", &reveal_);
    ImGui::SameLine();
    ImGui::Checkbox("arrows", &arrows_);
    ImGui::SameLine();
    ImGui::TextDisabled("wheel/W/S zoom, drag/A/D pan, shift-drag select, click pins");
    if (!live_note_.empty()) ImGui::TextColored(ImVec4(1, 0.7f, 0.3f, 1), "%s", live_note_.c_str());
    // Keys (when no text field has focus); ImGui 1.86 indexes keys by GLFW key code.
    if (!ImGui::GetIO().WantTextInput) {
      if (ImGui::IsKeyPressed(GLFW_KEY_SPACE)) toggle_play();
      if (ImGui::IsKeyPressed(GLFW_KEY_F)) fit();
      // In a lesson Left/Right step through the lesson; the buttons still step the ring.
      if (ImGui::IsKeyPressed(GLFW_KEY_RIGHT)) lesson_steps_.empty() ? step(+1) : go_to_lesson_step(lesson_step_ + 1);
      if (ImGui::IsKeyPressed(GLFW_KEY_LEFT)) lesson_steps_.empty() ? step(-1) : go_to_lesson_step(lesson_step_ - (lesson_step_ > 0));
      const float mid = 0.5f * (axis_.x0 + axis_.x1);
      if (ImGui::IsKeyDown(GLFW_KEY_W)) axis_.zoom(1.04, mid);
      if (ImGui::IsKeyDown(GLFW_KEY_S)) axis_.zoom(1 / 1.04, mid);
      if (ImGui::IsKeyDown(GLFW_KEY_A)) axis_.pan(12);
      if (ImGui::IsKeyDown(GLFW_KEY_D)) axis_.pan(-12);
    }
  }

  void toggle_play() {
    if (!replay_.playing && replay_.head_ns >= end_ns_) replay_.head_ns = 0;
    replay_.playing = !replay_.playing;
    reveal_ = true;
  }

  void step(int dir) {
    std::vector<StepMark> all;
    for (const Loaded& t : traces_) all.insert(all.end(), t.steps.begin(), t.steps.end());
    std::sort(all.begin(), all.end(), [](const StepMark& a, const StepMark& b) { return a.ts_ns < b.ts_ns; });
    if (auto t = step_after(all, replay_.head_ns - (dir > 0 ? 0 : 1), dir)) replay_.head_ns = *t + 1, reveal_ = true;
    replay_.playing = false;
  }

  void timeline() {
    if (scroll_to_) ImGui::SetScrollY(*scroll_to_), scroll_to_.reset();
    ImDrawList* dl = ImGui::GetWindowDrawList();
    const ImVec2 origin = ImGui::GetCursorScreenPos();
    const float label_w = 150, width = ImGui::GetContentRegionAvail().x;
    axis_.x0 = origin.x + label_w;
    axis_.x1 = origin.x + width - 4;
    drawn_lanes_.clear();
    // Time ruler.
    const float ruler = 18;
    draw_ruler(dl, origin.y, ruler);
    float y = origin.y + ruler;
    const ImVec2 mouse = ImGui::GetIO().MousePos;
    std::optional<std::pair<size_t, Hit>> hover;
    for (size_t ti = 0; ti < traces_.size(); ++ti) {
      const Loaded& t = traces_[ti];
      if (traces_.size() > 1) {
        const std::string title = std::string(1, char('A' + ti % 26)) + ": " + fs::path(t.path).filename().string();
        dl->AddText(ImVec2(origin.x, y), IM_COL32(255, 255, 255, 255), title.c_str());
        y += 18;
      }
      const std::string prefix = traces_.size() > 1 ? std::string(1, char('A' + ti % 26)) + "/" : std::string();
      for (const Group& g : t.layout.groups) draw_group(dl, t, g, y, origin.x, prefix);
      if (ImGui::IsWindowHovered())
        if (auto h = hit_test(t.data, t.layout, shifted_axis(0), mouse.x, mouse.y, y)) hover = std::make_pair(ti, *h);
      if (arrows_) draw_flows(dl, t, y);
      y += t.layout.height + 10;
    }
    // Play head and selection.
    if (reveal_) {
      const float x = axis_.x_of(double(replay_.head_ns));
      dl->AddLine(ImVec2(x, origin.y), ImVec2(x, y), IM_COL32(255, 255, 255, 200), 1.5f);
    }
    if (selection_) {
      const float a = axis_.x_of(selection_->begin), b = axis_.x_of(selection_->end);
      dl->AddRectFilled(ImVec2(std::min(a, b), origin.y), ImVec2(std::max(a, b), y), IM_COL32(255, 255, 255, 28));
    }
    ImGui::Dummy(ImVec2(width, y - origin.y));
    // Mouse: zoom, pan, select, hover, pin.
    if (ImGui::IsWindowHovered()) {
      ImGuiIO& io = ImGui::GetIO();
      if (io.MouseWheel != 0 && !io.KeyCtrl) axis_.zoom(std::pow(1.15, io.MouseWheel), mouse.x), ImGui::SetScrollY(ImGui::GetScrollY());
      if (ImGui::IsMouseDragging(ImGuiMouseButton_Left)) {
        if (io.KeyShift) {
          if (!drag_start_) drag_start_ = axis_.t_of(io.MouseClickedPos[0].x);
          selection_ = trace::Interval{int64_t(std::min(*drag_start_, axis_.t_of(mouse.x))), int64_t(std::max(*drag_start_, axis_.t_of(mouse.x)))};
        } else {
          axis_.pan(io.MouseDelta.x);
        }
      }
      if (ImGui::IsMouseReleased(ImGuiMouseButton_Left)) {
        if (!drag_start_ && std::fabs(io.MouseDragMaxDistanceSqr[0]) < 9) pinned_ = hover;
        drag_start_.reset();
      }
      if (hover) {
        const Event& e = traces_[hover->first].data.ranks[hover->second.process].events[hover->second.event];
        ImGui::BeginTooltip();
        ImGui::Text("GPU %d (%s)", traces_[hover->first].data.ranks[hover->second.process].rank,
                    traces_[hover->first].data.ranks[hover->second.process].strategy.c_str());
        for (const std::string& line : describe_event(e)) ImGui::TextUnformatted(line.c_str());
        ImGui::EndTooltip();
      }
    }
  }

  // The axis for a process: its group's start is the zero.
  TimeAxis shifted_axis(int64_t zero) const {
    TimeAxis a = axis_;
    a.t0 += double(zero), a.t1 += double(zero);
    return a;
  }

  void draw_ruler(ImDrawList* dl, float y, float h) {
    const double span = axis_.t1 - axis_.t0;
    // At most one label per 90 px.
    const double most = std::max(1.0, double(axis_.x1 - axis_.x0) / 90.0);
    double tick = std::pow(10.0, std::floor(std::log10(span / most)));
    if (span / tick > most * 5) tick *= 10;
    else if (span / tick > most * 2) tick *= 5;
    else if (span / tick > most) tick *= 2;
    for (double t = std::ceil(axis_.t0 / tick) * tick; t <= axis_.t1; t += tick) {
      if (std::fabs(t) < tick * 1e-6) t = 0;  // no "-0 ns"
      const float x = axis_.x_of(t);
      dl->AddLine(ImVec2(x, y + h - 5), ImVec2(x, y + h), IM_COL32(200, 200, 200, 255));
      dl->AddText(ImVec2(x + 2, y), IM_COL32(200, 200, 200, 255), format_ns(t).c_str());
    }
  }

  bool revealed(const Event& e, int64_t zero) const { return !reveal_ || e.ts_ns - zero <= replay_.head_ns; }

  void draw_group(ImDrawList* dl, const Loaded& t, const Group& g, float top, float left, const std::string& prefix) {
    const float gy = top + g.y;
    dl->AddRectFilled(ImVec2(left, gy), ImVec2(axis_.x1, gy + 20), IM_COL32(45, 45, 55, 255));
    const std::string& comm = t.comm.count(g.strategy) ? t.comm.at(g.strategy) : std::string();
    const std::string title = (g.strategy.empty() ? std::string("(unnamed)") : g.strategy) + "   " + std::to_string(g.processes.size()) + " GPUs, " +
                              format_ns(double(g.end_ns - g.zero_ns)) + (comm.empty() ? "" : "; " + comm);
    const std::string tag = t.tag.count(g.strategy) ? t.tag.at(g.strategy) : std::string();
    dl->AddText(ImVec2(left + 4, gy + 3), IM_COL32(255, 255, 255, 255), title.c_str());
    // Ring step labels start right of the title (and of the MODELED tag), never over them.
    float last_label = left + ImGui::CalcTextSize(title.c_str()).x - 20;
    if (!tag.empty()) {  // a modeled timeline must not pass for a measured one, nor the reverse
      const float x = left + 12 + ImGui::CalcTextSize(title.c_str()).x, x1 = x + ImGui::CalcTextSize(tag.c_str()).x + 3;
      const bool modeled = tag.starts_with("MODELED");
      dl->AddRectFilled(ImVec2(x - 3, gy + 2), ImVec2(x1, gy + 18),
                        modeled ? IM_COL32(200, 120, 20, 255) : IM_COL32(150, 150, 160, 255));
      dl->AddText(ImVec2(x, gy + 3), IM_COL32(0, 0, 0, 255), tag.c_str());
      last_label = x1 - 24;
    }
    // Ring step starts: ticks and labels in the group header.
    for (const StepMark& m : t.steps)
      if (m.strategy == g.strategy) {
        const float x = axis_.x_of(double(m.ts_ns));
        if (x < axis_.x0 || x > axis_.x1 || x - last_label < 26) continue;  // no labels on top of each other
        last_label = x;
        dl->AddLine(ImVec2(x, gy + 12), ImVec2(x, gy + 20), IM_COL32(140, 190, 255, 255));
        const std::string s = (m.phase == "forward" ? "F" : "B") + std::to_string(m.step);
        dl->AddText(ImVec2(x + 2, gy + 8), IM_COL32(140, 190, 255, 255), s.c_str());
      }
    dl->PushClipRect(ImVec2(left, gy), ImVec2(axis_.x1 + 1, gy + g.height), true);
    for (size_t li : g.lanes) {
      const Lane& lane = t.layout.lanes[li];
      const RankTrace& r = t.data.ranks[lane.process];
      const int64_t zero = g.zero_ns;
      const float ly = top + lane.y;
      drawn_lanes_[prefix + g.strategy + "/" + lane.label] = ly;
      if (lane.kind != Lane::comm || lane.comm_lane == 0)
        dl->AddText(ImVec2(left + 4, ly), IM_COL32(190, 190, 190, 255), lane.label.c_str());
      dl->AddLine(ImVec2(axis_.x0, ly), ImVec2(axis_.x1, ly), IM_COL32(50, 50, 58, 255));
      if (lane.kind == Lane::memory) {
        draw_memory(dl, t, lane.process, g, lane, ly);
        continue;
      }
      for (size_t k = 0; k < lane.events.size(); ++k) {
        const Event& e = r.events[lane.events[k]];
        if (!revealed(e, zero)) continue;
        float x0 = axis_.x_of(double(e.ts_ns - zero)), x1 = axis_.x_of(double(e.end_ns() - zero));
        if (reveal_) x1 = std::min(x1, axis_.x_of(double(replay_.head_ns)));  // what has happened so far
        if (x1 < axis_.x0 || x0 > axis_.x1) continue;
        x0 = std::max(x0, axis_.x0), x1 = std::max(std::min(x1, axis_.x1), x0 + 1);
        const float y0 = ly + (lane.kind == Lane::compute ? lane.row * float(lane.depth[k]) : 0);
        const float h = lane.kind == Lane::compute ? lane.row : lane.height;
        dl->AddRectFilled(ImVec2(x0, y0 + 1), ImVec2(x1, y0 + h - 1), color_of(e));
        if (x1 - x0 > 40) {
          dl->PushClipRect(ImVec2(x0, y0), ImVec2(x1, y0 + h), true);
          dl->AddText(ImVec2(x0 + 2, y0), IM_COL32(0, 0, 0, 255), e.name.c_str());
          dl->PopClipRect();
        }
      }
      // Under the first comm lane: exposed (red) and hidden (green) communication.
      if (lane.kind == Lane::comm && lane.comm_lane == 0) {
        const float sy = ly + lane.height - 5;
        // A strip for [b, e] ns of group time, clipped to the view and to the play head.
        auto strip = [&](int64_t b, int64_t e, Color c) {
          float x0 = axis_.x_of(double(b - zero)), x1 = axis_.x_of(double(e - zero)) + 1;
          if (reveal_) x1 = std::min(x1, axis_.x_of(double(replay_.head_ns)));
          x0 = std::max(x0, axis_.x0), x1 = std::min(x1, axis_.x1);
          if (x1 > x0) dl->AddRectFilled(ImVec2(x0, sy), ImVec2(x1, sy + 5), c);
        };
        for (const Event& e : r.events)
          if (e.stream == trace::Stream::comm && revealed(e, zero)) strip(e.ts_ns, e.end_ns(), kHiddenColor);
        for (const trace::Interval& iv : t.exposed[lane.process]) strip(iv.begin, iv.end, kExposedColor);
      }
    }
    dl->PopClipRect();
  }

  void draw_memory(ImDrawList* dl, const Loaded& t, size_t process, const Group& g, const Lane& lane, float ly) {
    const MemorySeries& m = t.memory[process];
    if (m.ts.empty()) return;
    // One scale for the whole trace: GPUs and strategies compare at a glance (a strategy that
    // needs half the memory draws half as high); the peak GPU fills its plot.
    const int64_t scale = t.memory_scale;
    const float h = lane.height - 4, base = ly + lane.height - 2;
    for (size_t i = 0; i < m.ts.size(); ++i) {
      if (reveal_ && m.ts[i] - g.zero_ns > replay_.head_ns) break;
      const float x0 = std::max(axis_.x0, axis_.x_of(double(m.ts[i] - g.zero_ns)));
      // Each sample holds until the next; the last until the trace's end.
      int64_t until = i + 1 < m.ts.size() ? m.ts[i + 1] : std::max(m.ts[i], g.end_ns);
      if (reveal_) until = std::min(until, replay_.head_ns + g.zero_ns);  // nothing after the play head
      const float x1 = std::min(axis_.x1, axis_.x_of(double(until - g.zero_ns)));
      if (x1 < axis_.x0 || x0 > axis_.x1) continue;
      float y = base;
      for (int c = 0; c < kNumMemCategories; ++c) {
        const float dh = h * float(double(m.by_category[c][i]) / double(scale));
        dl->AddRectFilled(ImVec2(x0, y - dh), ImVec2(std::max(x1, x0 + 1), y), memory_color(c));
        y -= dh;
      }
    }
    if (!reveal_ || m.peak_ts - g.zero_ns <= replay_.head_ns) {
      const float px = axis_.x_of(double(m.peak_ts - g.zero_ns)), py = base - h * float(double(m.peak) / double(scale));
      dl->AddTriangleFilled(ImVec2(px - 4, py - 7), ImVec2(px + 4, py - 7), ImVec2(px, py - 1), IM_COL32(255, 255, 255, 255));
      const std::string label = "peak " + format_bytes(double(m.peak)) + " (fwd+bwd)";
      const float tw = ImGui::CalcTextSize(label.c_str()).x;
      const float lx = px + 6 + tw <= axis_.x1 ? px + 6 : std::max(axis_.x0, px - 6 - tw);
      dl->AddRectFilled(ImVec2(lx - 1, ly), ImVec2(lx + tw + 1, ly + 13), IM_COL32(24, 24, 28, 200));
      dl->AddText(ImVec2(lx, ly - 1), IM_COL32(255, 255, 255, 255), label.c_str());
    }
  }

  void draw_flows(ImDrawList* dl, const Loaded& t, float top) {
    // The first comm lane of each process, and its group's zero.
    std::map<size_t, std::pair<float, int64_t>> at;
    for (const Group& g : t.layout.groups)
      for (size_t li : g.lanes) {
        const Lane& lane = t.layout.lanes[li];
        if (lane.kind == Lane::comm && lane.comm_lane == 0) at[lane.process] = {top + lane.y + lane.height * 0.5f, g.zero_ns};
      }
    for (const trace::Flow& f : t.data.flows) {
      const auto a = at.find(f.from), b = at.find(f.to);
      if (a == at.end() || b == at.end()) continue;
      if (reveal_ && f.to_ts_ns - b->second.second > replay_.head_ns) continue;
      const float x0 = axis_.x_of(double(f.from_ts_ns - a->second.second)), x1 = axis_.x_of(double(f.to_ts_ns - b->second.second));
      if (std::max(x0, x1) < axis_.x0 || std::min(x0, x1) > axis_.x1) continue;
      const ImVec2 p0(x0, a->second.first), p1(x1, b->second.first);
      dl->AddLine(p0, p1, IM_COL32(255, 255, 255, 60), 1.0f);
      dl->AddTriangleFilled(ImVec2(p1.x - 2, p1.y - (p1.y > p0.y ? 4 : -4)), ImVec2(p1.x + 2, p1.y - (p1.y > p0.y ? 4 : -4)), p1,
                            IM_COL32(255, 255, 255, 110));
    }
  }

  void tile_maps() {
    for (size_t ti = 0; ti < traces_.size(); ++ti)
      for (const Group& g : traces_[ti].layout.groups)
        if (auto m = tile_map(traces_[ti].data, g.strategy))
          draw_tile_map(traces_[ti], *m, g.zero_ns, traces_.size() > 1 ? std::string(1, char('A' + ti % 26)) + ": " : std::string());
  }

  void side_panel() {
    // In a lesson the tile maps come first: lessons 3 to 5 are about them.
    if (!lesson_steps_.empty()) tile_maps();
    std::vector<std::pair<std::string, std::vector<trace::StrategyMetrics>>> stats, selected;
    for (size_t ti = 0; ti < traces_.size(); ++ti) {
      const Loaded& t = traces_[ti];
      // Compared traces are A, B, ... in the tables.
      const std::string name = traces_.size() > 1 ? std::string(1, char('A' + ti % 26)) : std::string();
      ImGui::Text("%s%s%s", name.c_str(), name.empty() ? "" : ": ", fs::path(t.path).filename().c_str());
      ImGui::SameLine();
      ImGui::TextDisabled("%s", t.summary.c_str());
      stats.emplace_back(name, t.metrics);
      if (selection_ && !selection_cached()) {
        // The selection is relative to each group's zero: shift it per strategy.
        std::vector<trace::StrategyMetrics> sel;
        for (const Group& g : t.layout.groups)
          for (auto& m : trace::compute_metrics(t.data, trace::Interval{selection_->begin + g.zero_ns, selection_->end + g.zero_ns}))
            if (m.strategy == g.strategy) sel.push_back(m);
        selected.emplace_back(name, sel);
      }
    }
    stats_table(stats, "stats");
    if (selection_) {
      // Metrics over the selection: computed when it (or a trace) changes, not every frame.
      if (!selection_cached()) selected_cache_ = std::move(selected), cached_for_ = std::make_pair(*selection_, generation_);
      ImGui::Text("selection: %s to %s", format_ns(double(selection_->begin)).c_str(), format_ns(double(selection_->end)).c_str());
      stats_table(selected_cache_, "selection");
    }
    if (lesson_steps_.empty()) tile_maps();
    ImGui::Separator();
    if (pinned_) {
      const Loaded& t = traces_[pinned_->first];
      const RankTrace& r = t.data.ranks[pinned_->second.process];
      ImGui::Text("pinned: GPU %d (%s)", r.rank, r.strategy.c_str());
      for (const std::string& line : describe_event(r.events[pinned_->second.event])) ImGui::TextUnformatted(line.c_str());
      if (ImGui::SmallButton("unpin")) pinned_.reset();
    }
    ImGui::Separator();
    ImGui::TextDisabled("colours");
    for (const char* k : {"attention", "gemm", "norm", "elementwise", "memory", "wait", "p2p", "all_gather", "reduce_scatter",
                          "all_reduce", "all_to_all"}) {
      const ImU32 c = color_of_kind(k);
      ImGui::ColorButton(k, ImGui::ColorConvertU32ToFloat4(c), ImGuiColorEditFlags_NoTooltip, ImVec2(10, 10));
      ImGui::SameLine();
      ImGui::TextUnformatted(k);
    }
    auto swatch = [](const char* id, Color c, const char* text) {
      ImGui::ColorButton(id, ImGui::ColorConvertU32ToFloat4(c), ImGuiColorEditFlags_NoTooltip, ImVec2(10, 10));
      ImGui::SameLine();
      ImGui::TextUnformatted(text);
    };
    swatch("exposed", kExposedColor, "exposed comm (strip under the comm lane)");
    swatch("hidden", kHiddenColor, "comm hidden under compute");
    swatch("phase", color_of_kind("phase"), "phase, sublayer (grey), ring step (blue)");
    ImGui::TextDisabled("memory (stacked)");
    const char* cats[kNumMemCategories] = {"weights", "grads", "activations", "workspace", "comm buffers"};
    for (int c = 0; c < kNumMemCategories; ++c) swatch(("mem" + std::to_string(c)).c_str(), memory_color(c), cats[c]);
  }

  // One table for every trace: compared traces side by side, row for row.
  bool selection_cached() const {
    return cached_for_ && cached_for_->first.begin == selection_->begin && cached_for_->first.end == selection_->end &&
           cached_for_->second == generation_;
  }

  void stats_table(const std::vector<std::pair<std::string, std::vector<trace::StrategyMetrics>>>& all, const char* id) {
    const bool several = all.size() > 1;
    if (!ImGui::BeginTable(id, several ? 9 : 8, ImGuiTableFlags_Borders | ImGuiTableFlags_SizingFixedFit)) return;
    if (several) ImGui::TableSetupColumn("trace");
    for (const char* h : {"strategy", "GPU", "compute", "comm", "overlap", "exposed", "idle", "peak mem"}) ImGui::TableSetupColumn(h);
    ImGui::TableHeadersRow();
    for (const auto& [name, ms] : all)
      for (const auto& s : ms) {
        int64_t peak = 0;
        for (const auto& r : s.ranks) peak = std::max(peak, r.peak_memory_bytes);
        auto lead = [&] {
          ImGui::TableNextRow();
          if (several) ImGui::TableNextColumn(), ImGui::TextUnformatted(name.c_str());
          ImGui::TableNextColumn(), ImGui::TextUnformatted(s.strategy.c_str());
        };
        for (const auto& r : s.ranks) {
          lead();
          ImGui::TableNextColumn(), ImGui::Text("%d", r.rank);
          ImGui::TableNextColumn(), ImGui::TextUnformatted(format_ns(double(r.time.compute_ns)).c_str());
          ImGui::TableNextColumn(), ImGui::TextUnformatted(format_ns(double(r.time.comm_ns)).c_str());
          ImGui::TableNextColumn(), ImGui::TextUnformatted(pct(r.time.overlap_pct()).c_str());
          ImGui::TableNextColumn(), ImGui::TextUnformatted(format_ns(double(r.time.exposed_comm_ns)).c_str());
          ImGui::TableNextColumn(), ImGui::TextUnformatted(format_ns(double(r.time.idle_ns)).c_str());
          ImGui::TableNextColumn();
          if (peak > 0 && r.peak_memory_bytes == peak) ImGui::TextColored(ImVec4(1, 0.8f, 0.3f, 1), "%s max", format_bytes(double(r.peak_memory_bytes)).c_str());
          else ImGui::TextUnformatted(format_bytes(double(r.peak_memory_bytes)).c_str());
        }
        lead();
        ImGui::TableNextColumn(), ImGui::TextUnformatted("sum");
        ImGui::TableNextColumn(), ImGui::TextUnformatted(format_ns(double(s.total.compute_ns)).c_str());
        ImGui::TableNextColumn(), ImGui::TextUnformatted(format_ns(double(s.total.comm_ns)).c_str());
        ImGui::TableNextColumn(), ImGui::TextUnformatted(pct(s.total.overlap_pct()).c_str());
        ImGui::TableNextColumn(), ImGui::TextUnformatted(format_ns(double(s.total.exposed_comm_ns)).c_str());
        ImGui::TableNextColumn(), ImGui::TextUnformatted(format_ns(double(s.total.idle_ns)).c_str());
        ImGui::TableNextColumn(), ImGui::Text("imbalance %.2f", s.compute_imbalance);
      }
    ImGui::EndTable();
    for (const auto& [name, ms] : all)
      for (const auto& s : ms)
        if (!s.steps.empty())
          ImGui::TextDisabled("%s%s%s: %zu ring step%s per pass (F0.. forward, B0.. backward in the group header)",
                              several ? name.c_str() : "", several ? " " : "", s.strategy.c_str(), s.steps.size() / 2,
                              s.steps.size() / 2 == 1 ? "" : "s");
  }

  void draw_tile_map(const Loaded& t, const TileMap& m, int64_t zero, const std::string& prefix) {
    if (m.strategy == "ulysses")
      ImGui::Text("%sulysses attention tiles (%dx%d): every GPU computes every tile, for its H/P heads", prefix.c_str(), m.blocks, m.blocks);
    else
      ImGui::Text("%s%s attention tiles (%s, %dx%d): colour = GPU, label = ring step", prefix.c_str(), m.strategy.c_str(), m.layout.c_str(),
                  m.blocks, m.blocks);
    const std::vector<bool> done = tiles_done(t.data, m, reveal_ ? replay_.head_ns + zero : INT64_MAX);
    const float cell = std::min(28.0f, 220.0f / float(m.blocks));
    ImDrawList* dl = ImGui::GetWindowDrawList();
    const ImVec2 o = ImGui::GetCursorScreenPos();
    for (int q = 0; q < m.blocks; ++q)
      for (int k = 0; k < m.blocks; ++k) {
        const Tile& tile = m.at(q, k);
        const ImVec2 a(o.x + float(k) * cell, o.y + float(q) * cell), b(a.x + cell - 1, a.y + cell - 1);
        if (tile.masked) {
          dl->AddRectFilled(a, b, IM_COL32(40, 40, 40, 255));
          continue;
        }
        Color c = rank_color(tile.rank);
        if (!done[size_t(q) * m.blocks + k]) c = (c & 0x00ffffff) | 0x50000000;
        dl->AddRectFilled(a, b, c);
        if (tile.diagonal) dl->AddTriangleFilled(ImVec2(a.x, a.y), ImVec2(b.x, a.y), ImVec2(b.x, b.y), IM_COL32(40, 40, 40, 200));
        if (cell >= 14 && tile.rank >= 0)
          dl->AddText(ImVec2(a.x + 2, b.y - 13), IM_COL32(0, 0, 0, 255), std::to_string(tile.step).c_str());
      }
    ImGui::Dummy(ImVec2(cell * float(m.blocks), cell * float(m.blocks)));
    ImGui::TextDisabled("rows: query blocks, columns: key blocks; dark: masked; faint: not yet computed");
    if (m.strategy != "ulysses") {
      int P = 0;
      for (const Tile& tile : m.tiles) P = std::max(P, tile.rank + 1);
      for (int r = 0; r < std::min(P, 16); ++r) {
        ImGui::ColorButton(("gpu" + std::to_string(r)).c_str(), ImGui::ColorConvertU32ToFloat4(rank_color(r)), ImGuiColorEditFlags_NoTooltip,
                           ImVec2(10, 10));
        ImGui::SameLine();
        ImGui::Text("GPU %d", r);
        if (r % 8 != 7 && r + 1 < std::min(P, 16)) ImGui::SameLine();
      }
    }
  }

  void file_dialog() {
    if (!dialog_open_) return;
    ImGui::SetNextWindowSize(ImVec2(520, 420), ImGuiCond_FirstUseEver);
    if (!ImGui::Begin("Open a trace", &dialog_open_)) {
      ImGui::End();
      return;
    }
    ImGui::TextUnformatted(dialog_dir_.c_str());
    std::error_code ec;
    if (ImGui::Selectable("..")) dialog_dir_ = fs::path(dialog_dir_).parent_path().string();
    std::vector<fs::directory_entry> entries;
    for (auto it = fs::directory_iterator(dialog_dir_, ec); !ec && it != fs::directory_iterator(); it.increment(ec)) entries.push_back(*it);
    std::sort(entries.begin(), entries.end(), [](auto& a, auto& b) { return a.path().filename() < b.path().filename(); });
    for (const auto& e : entries) {
      const bool dir = e.is_directory(ec);
      const std::string name = e.path().filename().string() + (dir ? "/" : "");
      if (!dir && e.path().extension() != ".json") continue;
      if (ImGui::Selectable(name.c_str())) {
        if (dir) {
          dialog_dir_ = e.path().string();
        } else {
          open(e.path().string());
          fit();
          dialog_open_ = false;
        }
      }
    }
    ImGui::End();
  }

  void error_panel() {
    if (errors_.empty()) return;
    ImGui::SetNextWindowPos(ImVec2(40, 80), ImGuiCond_FirstUseEver);
    ImGui::Begin("Could not open", nullptr, ImGuiWindowFlags_AlwaysAutoResize);
    for (const std::string& e : errors_) ImGui::TextColored(ImVec4(1, 0.45f, 0.4f, 1), "%s", e.c_str());
    if (ImGui::Button("Dismiss")) errors_.clear();
    ImGui::End();
  }

 public:
  void drop(int count, const char** paths) {
    for (int i = 0; i < count; ++i) open(paths[i]);
    fit();
  }

 private:
  Options opt_;
  std::vector<Loaded> traces_;
  std::vector<std::string> errors_;
  std::vector<lessons::Step> lesson_steps_;  // empty unless --lesson
  size_t lesson_step_ = 0;
  std::optional<float> scroll_to_;  // the timeline's next scroll position (pixels), once
  std::string lesson_title_;
  TimeAxis axis_;
  Replay replay_;
  bool reveal_ = false, arrows_ = true;
  int64_t end_ns_ = 1;
  bool fit_warned_ = false;  // --fit that matches nothing is said once
  double last_time_ = 0;
  std::optional<trace::Interval> selection_;
  uint64_t generation_ = 0;  // bumped whenever the set of traces or their contents change
  std::optional<std::pair<trace::Interval, uint64_t>> cached_for_;
  std::vector<std::pair<std::string, std::vector<trace::StrategyMetrics>>> selected_cache_;
  std::optional<double> drag_start_;
  std::optional<std::pair<size_t, Hit>> pinned_;
  bool dialog_open_ = false;
  std::string dialog_dir_;
  std::string live_note_;
  std::map<std::string, float> drawn_lanes_;
};

App* g_app = nullptr;

void on_drop(GLFWwindow*, int count, const char** paths) {
  if (g_app) g_app->drop(count, paths);
}

int run(Options o) {
  int w = 1600, h = 1000;
  char extra = 0;
  if (!std::regex_match(o.size, std::regex("[0-9]{1,5}x[0-9]{1,5}")) || std::sscanf(o.size.c_str(), "%dx%d%c", &w, &h, &extra) != 2 ||
      w < 200 || h < 150 || w > 8192 || h > 8192)
    throw ConfigError("--size " + o.size + ": expected WxH, each between 200 and 8192 pixels");
  const bool headless = o.screenshot_given;
  if (headless && o.screenshot.empty()) throw ConfigError("--screenshot needs a file name");
  if (o.at_s && o.step) throw ConfigError("--at and --step both place the play head: give one");
  if (!o.layout_json.empty() && !headless) throw ConfigError("--layout-json goes with --screenshot");
  if (o.lesson_step && !o.lesson) throw ConfigError("--lesson-step goes with --lesson");
  if (headless) {
    // The outputs, before any work: never an input, never each other, and writable.
    std::vector<output::Named> inputs{{"--live", o.live}};
    for (const std::string& f : o.files) inputs.push_back({"", f});
    output::check_distinct({{"--screenshot", o.screenshot}, {"--layout-json", o.layout_json}}, inputs);
    output::check(o.screenshot, "--screenshot");
    if (!o.layout_json.empty()) output::check(o.layout_json, "--layout-json");
  }
  if (o.lesson) {
    if (o.files.size() > 1 || !o.live.empty()) throw ConfigError("--lesson shows one trace: give at most one file and no --live");
    lessons::find_lesson(*o.lesson);  // "there is no lesson 9: the lessons are 1 to 7"
    if (o.files.empty()) {
      const std::string path = lessons::default_trace_path(*o.lesson);
      if (!fs::exists(path))
        throw std::runtime_error("no trace for lesson " + std::to_string(*o.lesson) + " at " + path +
                                 ": run `ringside lesson " + std::to_string(*o.lesson) + "` first (in this directory)");
      o.files.push_back(path);
    }
  }
  App app(o);
  // A file that cannot be read: headless runs fail with the message; windows show it.
  if (headless && app.errors().empty() && app.any_trace() && !app.any_event()) {
    std::fprintf(stderr, "ringside-viewer: the trace holds no events to draw\n");
    return 1;
  }
  if (headless && (!app.errors().empty() || !app.any_trace())) {
    for (const std::string& e : app.errors()) std::fprintf(stderr, "ringside-viewer: %s\n", e.c_str());
    if (app.errors().empty())
      std::fprintf(stderr, "ringside-viewer: %s\n",
                   o.live.empty() ? "--screenshot needs a trace file" : ("--live " + o.live + ": no such file yet").c_str());
    return 1;
  }
  // The OpenGL driver maps much beside the traces (Mesa's software renderer: about 700 MiB of
  // address space under Xvfb, measured) and crashes rather than fail when it cannot.
  require_memory(768.0 * (1 << 20), "the viewer's window and OpenGL driver", "", 0, 0);
  glfwSetErrorCallback([](int code, const char* what) { std::fprintf(stderr, "ringside-viewer: GLFW error %d: %s\n", code, what); });
  if (!glfwInit()) throw std::runtime_error("cannot initialise GLFW (is there a display? for headless use run under xvfb-run)");
  glfwWindowHint(GLFW_CONTEXT_VERSION_MAJOR, 3);
  glfwWindowHint(GLFW_CONTEXT_VERSION_MINOR, 3);
  glfwWindowHint(GLFW_OPENGL_PROFILE, GLFW_OPENGL_CORE_PROFILE);
  if (headless) glfwWindowHint(GLFW_VISIBLE, GLFW_FALSE);
  GLFWwindow* window = glfwCreateWindow(w, h, "ringside-viewer", nullptr, nullptr);
  if (!window) {
    glfwTerminate();
    throw std::runtime_error("cannot create an OpenGL 3.3 window");
  }
  glfwMakeContextCurrent(window);
  glfwSwapInterval(1);
  IMGUI_CHECKVERSION();
  ImGui::CreateContext();
  ImGui::GetIO().IniFilename = nullptr;  // no imgui.ini beside the user's files
  ImGui::StyleColorsDark();
  ImGui_ImplGlfw_InitForOpenGL(window, true);
  ImGui_ImplOpenGL3_Init("#version 330");
  g_app = &app;
  glfwSetDropCallback(window, on_drop);
  int frames = 0, status = 0;
  auto last_poll = std::chrono::steady_clock::now();
  while (!glfwWindowShouldClose(window)) {
    glfwPollEvents();
    if (std::chrono::steady_clock::now() - last_poll > std::chrono::milliseconds(500)) app.poll_live(), last_poll = std::chrono::steady_clock::now();
    ImGui_ImplOpenGL3_NewFrame();
    ImGui_ImplGlfw_NewFrame();
    ImGui::NewFrame();
    int fw = 0, fh = 0;
    glfwGetFramebufferSize(window, &fw, &fh);
    app.frame(float(fw), float(fh));
    ImGui::Render();
    glViewport(0, 0, fw, fh);
    const Color bg = kBackground;
    glClearColor(float(bg & 0xff) / 255.f, float(bg >> 8 & 0xff) / 255.f, float(bg >> 16 & 0xff) / 255.f, 1.f);
    glClear(GL_COLOR_BUFFER_BIT);
    ImGui_ImplOpenGL3_RenderDrawData(ImGui::GetDrawData());
    // Headless: the third frame has a settled layout (ImGui sizes windows and tables from the
    // frames before); read it back and stop.
    if (headless && ++frames == 3) {
      std::vector<unsigned char> px(size_t(fw) * size_t(fh) * 4), flipped(px.size());
      glReadBuffer(GL_BACK);
      glPixelStorei(GL_PACK_ALIGNMENT, 1);
      glReadPixels(0, 0, fw, fh, GL_RGBA, GL_UNSIGNED_BYTE, px.data());
      for (int y = 0; y < fh; ++y)
        std::copy_n(px.data() + size_t(fh - 1 - y) * size_t(fw) * 4, size_t(fw) * 4, flipped.data() + size_t(y) * size_t(fw) * 4);
      // Encoded in memory, then written whole (core/output.h): never half a PNG.
      std::string png;
      const auto append = [](void* to, void* data, int size) { static_cast<std::string*>(to)->append(static_cast<char*>(data), size_t(size)); };
      try {
        if (!stbi_write_png_to_func(append, &png, fw, fh, 4, flipped.data(), fw * 4))
          throw std::runtime_error("--screenshot: cannot encode the PNG");
        output::write(o.screenshot, png, "--screenshot");
        if (!o.layout_json.empty()) output::write(o.layout_json, app.layout_json().dump(2) + "\n", "--layout-json");
      } catch (const std::exception& e) {
        std::fprintf(stderr, "ringside-viewer: %s\n", e.what());
        status = 1;
      }
      break;
    }
    glfwSwapBuffers(window);
  }
  ImGui_ImplOpenGL3_Shutdown();
  ImGui_ImplGlfw_Shutdown();
  ImGui::DestroyContext();
  glfwDestroyWindow(window);
  glfwTerminate();
  return status;
}

}  // namespace
}  // namespace ringside::viz

int main(int argc, char** argv) {
  ringside::restart_within_limits(argv);  // OpenBLAS loads with the lessons' code
  ringside::viz::Options o;
  CLI::App cli{"ringside-viewer: replay ringside traces (lanes per GPU, ring steps, overlap, memory per GPU)"};
  cli.add_option("files", o.files, "trace files (ringside compare/run --trace); two or more are compared side by side");
  cli.add_option("--live", o.live, "show this trace and reload it whenever it changes (while a run writes it)")->option_text("FILE");
  cli.add_option("--screenshot", o.screenshot, "render once to this PNG and exit (headless: under xvfb-run)")
      ->option_text("PNG")
      ->each([&o](const std::string&) { o.screenshot_given = true; });
  cli.add_option("--size", o.size, "window or screenshot size")->capture_default_str()->option_text("WxH");
  cli.add_option("--fit", o.fit, "the first view frames these groups in time and scrolls to the first: all, "
                 "modeled (the GPU twins), measured, or one group's name (as its header shows it)")
      ->capture_default_str()
      ->option_text("GROUPS");
  cli.add_option("--at", o.at_s, "replay: show the run up to this many seconds after each strategy's start")
      ->check([](const std::string& v) {
        char* end = nullptr;
        const double x = std::strtod(v.c_str(), &end);
        return v.empty() || *end || !std::isfinite(x) || x < 0 || x > 1e6 ? std::string("must be a number of seconds in [0, 1e6]") : std::string();
      })
      ->option_text("SECONDS");
  cli.add_option("--step", o.step, "replay: show the run up to the start of ring step N (0: the first)")
      ->check(CLI::Range(0, 1 << 30))
      ->option_text("N");
  cli.add_option("--lesson", o.lesson, "step through lesson N beside its timeline (the trace `ringside lesson N` wrote, "
                 "out/lessons/NN-name.trace.json, unless a file is given)")
      ->check(CLI::Range(1, 1 << 30))
      ->option_text("N");
  cli.add_option("--lesson-step", o.lesson_step, "with --lesson: open at step K (1: the first)")
      ->check(CLI::Range(1, 1 << 30))
      ->option_text("K");
  cli.add_option("--layout-json", o.layout_json, "with --screenshot: also write where the lanes were drawn (tests)")->option_text("FILE");
  ringside::cli::strict_values(cli);
  try {
    cli.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return cli.exit(e) == 0 ? 0 : 2;  // --help is 0; a flag the parser refuses is a usage error
  }
  try {
    return ringside::viz::run(o);
  } catch (const ringside::ConfigError& e) {  // a bad option or output, before any work
    std::fprintf(stderr, "ringside-viewer: %s\n", e.what());
    return 2;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "ringside-viewer: %s\n", e.what());
    return 1;
  }
}

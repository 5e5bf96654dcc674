// The App's frame: loading a trace, framing the first view (which groups collapse so that every
// strategy is on screen, which time range shows), the toolbar and its keys.
#include "viz/app.h"

#include "model/model.h"

#include <GLFW/glfw3.h>

#include <algorithm>
#include <cmath>

namespace ringside::viz {

namespace fs = std::filesystem;
using trace::Event;
using trace::RankTrace;

Loaded load(const std::string& path, trace::ClockAlign align) {
  Loaded l;
  l.path = path;
  l.data = trace::read_trace(path, align);
  l.relayout();
  l.metrics = trace::compute_metrics(l.data);
  std::map<std::string, int64_t> zero_of;
  for (const Group& g : l.layout.groups) zero_of[g.strategy] = g.zero_ns;
  for (StepMark m : step_marks(l.data)) {
    m.ts_ns -= zero_of[m.strategy], m.end_ns -= zero_of[m.strategy];
    l.steps.push_back(m);
  }
  std::sort(l.steps.begin(), l.steps.end(), [](const StepMark& a, const StepMark& b) { return a.ts_ns < b.ts_ns; });
  for (const RankTrace& r : l.data.ranks) {
    l.exposed.push_back(exposed_intervals(r));
    l.activity.push_back(activity(r, l.exposed.back()));
    l.memory.push_back(memory_series(r));
    for (int64_t v : l.memory.back().total) l.memory_scale = std::max(l.memory_scale, v);
  }
  // The run's description (the reader's RunInfo; its config read defensively, as a foreign
  // file may hold anything there).
  const trace::RunInfo& info = l.data.run;
  auto field = [](const nlohmann::json& obj, const char* k) -> std::string {
    const auto it = obj.find(k);
    return it != obj.end() && it->is_number() ? it->dump() : "?";
  };
  if (info.config) l.summary = "s=" + field(*info.config, "s") + " h=" + field(*info.config, "h") + " H=" + field(*info.config, "H") + " ";
  size_t P = 0;
  for (const auto& m : l.metrics) P = std::max(P, m.ranks.size());
  // A modeled step's rows are its pipeline stages, each standing for its stage's GPUs.
  const bool stages = info.backend == trace::kPipelineStages;
  l.summary += (stages ? std::to_string(P) + " pipeline stages" : "P=" + std::to_string(P)) + " " + trace_tag(info);
  l.clock = clock_words(l.data);
  l.exposed_ns.assign(l.data.ranks.size(), 0);
  for (const trace::StrategyMetrics& m : l.metrics)  // once: the map reads every ring step's pairs
    if (!info.group(m.strategy)) l.tiles[m.strategy] = tile_map(l.data, m.strategy);  // a twin's map is its run's
  const std::string& device = info.device;
  for (const trace::StrategyMetrics& m : l.metrics) {
    l.tag[m.strategy] = group_tag(info, m.strategy), l.comm[m.strategy] = comm_summary(m, row_unit(info), stages ? "PP and DP comm" : "all comm");
    if (l.tag[m.strategy] == "MEASURED" && !device.empty()) l.tag[m.strategy] += device == "cpu" ? " on CPU" : " on " + device;
    // Its bytes' element type: a twin's own, a modeled trace's, else the run's.
    std::string dt = info.dtype;
    if (const trace::GroupInfo* twin = info.group(m.strategy)) dt = twin->dtype;
    else if (!info.model_dtype.empty()) dt = info.model_dtype;
    l.dtype[m.strategy] = dt == "float32" ? "fp32" : dt == "float64" ? "fp64" : dt == "bfloat16" ? "bf16" : dt;
    for (const trace::RankMetrics& r : m.ranks) {
      l.sent[m.strategy] = std::max(l.sent[m.strategy], r.bytes_sent);
      for (size_t p = 0; p < l.data.ranks.size(); ++p)
        if (l.data.ranks[p].strategy == m.strategy && l.data.ranks[p].rank == r.rank) l.exposed_ns[p] = r.time.exposed_comm_ns;
    }
  }
  for (size_t p = 0; p < l.data.ranks.size(); ++p) {
    const bool family = l.modeled(l.data.ranks[p].strategy);
    l.top_peak[family] = std::max(l.top_peak[family], l.memory[p].peak);
  }
  for (const auto& [strategy, sent] : l.sent) l.top_sent[l.modeled(strategy)] = std::max(l.top_sent[l.modeled(strategy)], sent);
  std::error_code ec;
  l.mtime = fs::last_write_time(path, ec);
  return l;
}

std::string shown_path(const std::string& path) {
  const fs::path p(path);
  std::error_code ec;
  if (!fs::is_directory(p, ec)) return p.filename().string();
  const fs::path dir = p.has_filename() ? p : p.parent_path();  // "ring4/" names ring4
  return dir.filename().empty() ? dir.string() : dir.filename().string() + "/";
}

std::string shown_name(const Loaded& t, const std::string& strategy) {
  const std::string of = twin_of(t.data.run, strategy);
  return !of.empty() ? of : strategy.empty() ? "(unnamed)" : strategy;
}

App::App(Options o) : opt_(std::move(o)) {
  for (const std::string& f : opt_.files) open(f);
  // Live: the file may not exist yet (the run has not written it); poll_live opens it then.
  if (!opt_.live.empty() && fs::exists(opt_.live)) open(opt_.live);
  fit();
  if (opt_.at_s) replay_.head_ns = int64_t(*opt_.at_s * 1e9), reveal_ = true;
  if (opt_.step) {
    // Ring step N of the first trace with ring steps: F0.. then B0.. of its first ring group.
    std::vector<int64_t> marks;
    for (const Loaded& t : traces_)
      if (!t.steps.empty() && marks.empty())
        for (const StepMark& m : t.steps)
          if (m.strategy == t.steps.front().strategy) marks.push_back(int64_t(double(m.ts_ns) / scale_of(t, m.strategy)));
    if (*opt_.step < 0 || size_t(*opt_.step) >= marks.size()) {
      errors_.push_back("--step " + std::to_string(*opt_.step) + ": the trace has " + std::to_string(marks.size()) +
                        " ring steps (forward and backward), numbered from 0");
      ++option_errors_;
    } else
      replay_.head_ns = marks[size_t(*opt_.step)] + 1, reveal_ = true;
  }
  if (opt_.lesson) open_lesson();
}

bool App::any_event() const {
  for (const Loaded& t : traces_)
    for (const RankTrace& r : t.data.ranks)
      if (!r.events.empty()) return true;
  return false;
}

void App::open(const std::string& path) {
  try {
    traces_.push_back(load(path, opt_.align));
    ++generation_;
    arranged_ = false;
  } catch (const std::exception& e) {
    errors_.push_back(e.what());
  }
}

// Collapse: `--collapse` collapses every group, `--expand` none; by default the groups collapse
// when the traces in full would not fit the timeline's height, and their rows thin until every
// group is on screen (down to 3 px a GPU), or, with room to spare, grow (up to 33 px). The
// groups' titles wrap at the timeline's width, unless then not every group fits even so: then
// each title is one row, cut with "..." (its header's tooltip gives it whole).
void App::arrange(float timeline_height) {
  arranged_ = true;
  abbreviated_ = false;
  fit_titles();
  const bool wrapped = std::any_of(traces_.begin(), traces_.end(), [](const Loaded& t) { return t.layout_options.title_rows > 1; });
  if (arrange_rows(timeline_height) || !wrapped) return;
  abbreviated_ = true;
  fit_titles();
  arrange_rows(timeline_height);
}

// Whether every group is on screen (or the collapse was given: no need to).
bool App::arrange_rows(float timeline_height) {
  auto total = [&] {
    float h = 0;
    for (const Loaded& t : traces_) h += t.layout.height + 10 + (traces_.size() > 1 ? 18 : 0);
    return h;
  };
  for (Loaded& t : traces_) {
    t.layout_options.collapse_all = opt_.collapse == Options::Collapse::all;
    t.relayout();
  }
  if (opt_.collapse != Options::Collapse::automatic || total() <= timeline_height) return true;
  auto collapse = [&](float row) {
    for (Loaded& t : traces_) {
      LayoutOptions& o = t.layout_options;
      o.collapse_all = true;
      o.summary = row, o.group_memory = std::max(24.0f, 2.7f * row);
      o.collapsed_header = 16, o.gap = 4;
      t.relayout();
    }
  };
  // Few GPUs whose lanes in full do not fit (a PyTorch profiler run's many comm lanes): taller
  // rows while there is room, up to three times the default, rather than a strip at the top.
  float row = LayoutOptions{}.summary;
  collapse(row);
  if (total() <= timeline_height) {
    while (row < 3 * LayoutOptions{}.summary && (collapse(row + 1), total() <= timeline_height)) row += 1;
    collapse(row);
    return true;
  }
  // Thinner rows first; the memory plots keep 24 px, so that half the memory shows as half the height.
  for (row -= 1; row >= 3; row -= 1) {
    collapse(row);
    if (total() <= timeline_height) return true;
  }
  return false;
}

double App::scale_of(const Loaded& t, const std::string& strategy) const {
  return mixed_ && !t.modeled(strategy) ? measured_scale_ : 1.0;
}

App::Frame App::frame_of(const Loaded& t, const std::string& strategy) const {
  if (!traces_.empty() && &t == &traces_.front())
    if (const auto it = frames_.find(strategy); it != frames_.end()) return it->second;
  return Frame{0, scale_of(t, strategy), ""};
}

App::View App::view_of(const Loaded& t, const Group& g) const {
  const Frame f = frame_of(t, g.strategy);
  const double zero = double(g.zero_ns) + f.offset, k = f.scale;
  View v{axis_, reveal_ ? zero + double(replay_.head_ns) * k : INFINITY};
  v.axis.t0 = zero + axis_.t0 * k, v.axis.t1 = zero + axis_.t1 * k;
  return v;
}

// The first view: the layer (forward + backward) of the groups --fit names, or --zoom's range.
void App::fit() {
  frames_.clear(), framed_group_.clear();  // every group on its family's clock again
  // The scales: the measured family drawn so that its longest layer spans what the modeled one's does.
  double modeled = 0, measured = 0;
  for (const Loaded& t : traces_)
    for (const Group& g : t.layout.groups) {
      double& longest = t.modeled(g.strategy) ? modeled : measured;
      longest = std::max(longest, double(g.layer_end_ns - g.zero_ns));
    }
  mixed_ = modeled > 0 && measured > 0;
  measured_scale_ = mixed_ ? measured / modeled : 1.0;
  double begin = 0, end = 1;
  for (const Loaded& t : traces_)
    for (const Group& g : t.layout.groups) {
      begin = std::min(begin, double(g.begin_ns - g.zero_ns) / scale_of(t, g.strategy));
      end = std::max(end, double(g.end_ns - g.zero_ns) / scale_of(t, g.strategy));
    }
  end_ns_ = int64_t(end);
  // --zoom must show the run: a window in which the groups' events take less than a
  // thousandth (-9e15ns,0 around a run of milliseconds) would draw an empty view.
  if (opt_.zoom && !traces_.empty()) {
    const double w0 = double(opt_.zoom->begin), w1 = double(opt_.zoom->end);
    const double shown = std::min(w1, end) - std::max(w0, begin);
    if (shown < 1e-3 * (w1 - w0)) {
      errors_.push_back(detail::concat("--zoom ", format_ns(opt_.zoom->begin), ",", format_ns(opt_.zoom->end), ": ",
                                       shown <= 0 ? "that window misses the run" : "the run takes less than a thousandth of that window",
                                       " (its events run from ", format_ns(int64_t(begin)), " to ", format_ns(int64_t(end)),
                                       " after each group's start)"));
      ++option_errors_;
      opt_.zoom.reset();
    }
  }
  // WHAT[:PHASE]: each group's window in its own time, in axis time.
  std::optional<Window> w;
  auto widen = [&](const std::string& what) {
    for (const Loaded& t : traces_)
      if (const auto tw = fit_window(t.layout, t.data.run, what, [&](const Group& g) { return scale_of(t, g.strategy); }))
        w = w ? Window{std::min(w->begin, tw->begin), std::max(w->end, tw->end)} : *tw;
  };
  widen(opt_.fit);
  if (!w && opt_.fit != "all") {
    if (!fit_warned_ && !traces_.empty()) {
      errors_.push_back("--fit " + opt_.fit + ": no group matches (all, modeled, measured, or a group's full name, such as "
                        "\"ring (modeled, a100-nvlink)\", each with an optional :forward or :backward)");
      ++option_errors_;
    }
    fit_warned_ = true;
    widen("all");
  }
  if (opt_.zoom) axis_.t0 = double(opt_.zoom->begin), axis_.t1 = double(opt_.zoom->end);  // --fit still checked
  else if (w) axis_.fit(w->begin, w->end);
  else axis_.fit(0, end);
}

void App::drop(int count, const char** paths) {
  for (int i = 0; i < count; ++i) open(paths[i]);
  fit();
}

void App::frame(float width, float height) {
  window_w_ = width, window_h_ = height;
  ImGui::SetNextWindowPos(ImVec2(0, 0));
  ImGui::SetNextWindowSize(ImVec2(width, height));
  ImGui::Begin("ringside-viewer", nullptr,
               ImGuiWindowFlags_NoTitleBar | ImGuiWindowFlags_NoResize | ImGuiWindowFlags_NoMove | ImGuiWindowFlags_NoCollapse |
                   ImGuiWindowFlags_NoBringToFrontOnFocus);
  toolbar();
  // A lesson's text is tables of up to ~110 columns: give the side panel room for them.
  const float side = lesson_steps_.empty() ? std::min(640.0f, width * 0.40f) : std::min(820.0f, width * 0.48f);
  const float ruler_h = kKeyHeight + (mixed_ ? 32 : 18);  // the colour key; two rows for two time scales
  ImGui::BeginGroup();
  ImGui::BeginChild("ruler", ImVec2(width - side - 24, ruler_h), false, ImGuiWindowFlags_NoScrollbar);
  ruler(ruler_h);
  ImGui::EndChild();
  ImGui::BeginChild("timeline", ImVec2(width - side - 24, 0), true, ImGuiWindowFlags_NoMove);
  if (!arranged_) {
    arrange(ImGui::GetContentRegionAvail().y);
    if (!lesson_steps_.empty()) go_to_lesson_step(lesson_step_);  // its group's place may have moved
    else if (!framed_) fit();
    framed_ = true;
    // --fit names groups: bring the first of them into view.
    if (opt_.fit != "all" && !traces_.empty()) {
      const Loaded& t = traces_.front();
      const auto groups = groups_to_fit(t.layout, t.data.run, split_fit(t.layout, t.data.run, opt_.fit).first);
      if (!groups.empty() && t.layout.height > ImGui::GetContentRegionAvail().y) scroll_to_ = groups.front()->y;
    }
  }
  timeline();
  ImGui::EndChild();
  ImGui::EndGroup();
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

nlohmann::json App::layout_json() const {
  nlohmann::json j;
  j["x0"] = axis_.x0, j["x1"] = axis_.x1, j["t0_ns"] = axis_.t0, j["t1_ns"] = axis_.t1;
  j["width"] = window_w_, j["height"] = window_h_;
  for (const auto& [label, y] : drawn_lanes_) j["lanes"][label] = y;
  // Each lane's box (y0, y1), its label's text box (label_y0, label_y1; none where it has no
  // label), and what it drew: marks, and their extent (ink_y0, ink_y1) when any.
  j["lane_boxes"] = drawn_lane_boxes_;
  j["groups"] = drawn_groups_;
  j["step_labels"] = drawn_labels_;
  j["gauges"] = drawn_gauges_;  // a collapsed group's per-GPU exposed-comm cells
  j["gauge_column"] = {{"x0", axis_.x0 - kGaugeGap - kGaugeWidth}, {"x1", axis_.x0 - kGaugeGap}, {"heading", "exposed"}};
  j["tile_maps"] = drawn_tile_maps_;  // in the order the side panel shows them
  j["timeline"] = {{"y0", timeline_y0_}, {"y1", timeline_y1_}};
  j["traces"] = nlohmann::json::array();  // what the side panel says of each: its name, summary, clocks
  for (const Loaded& t : traces_) j["traces"].push_back({{"name", shown_path(t.path)}, {"summary", t.summary}, {"clock", t.clock}});
  return j;
}

void App::toolbar() {
  if (ImGui::Button("Open...")) dialog_open_ = true, dialog_dir_ = fs::current_path().string();
  ImGui::SameLine();
  if (ImGui::Button("Fit (F)")) fit();
  ImGui::SameLine();
  const bool any_collapsed = std::any_of(traces_.begin(), traces_.end(), [](const Loaded& t) {
    return std::any_of(t.layout.groups.begin(), t.layout.groups.end(), [](const Group& g) { return g.collapsed; });
  });
  if (ImGui::Button(any_collapsed ? "Expand all (E)" : "Collapse all (C)") ||
      (!ImGui::GetIO().WantTextInput && ImGui::IsKeyPressed(any_collapsed ? GLFW_KEY_E : GLFW_KEY_C))) {
    for (Loaded& t : traces_) {
      t.layout_options.collapse_all = !any_collapsed;
      t.layout_options.collapsed.clear(), t.layout_options.expanded.clear();
      t.relayout();
    }
  }
  ImGui::SameLine();
  if (ImGui::Button(replay_.playing ? "Pause (space)" : "Play (space)")) toggle_play();
  ImGui::SameLine();
  if (ImGui::Button("< step")) step(-1);
  ImGui::SameLine();
  if (ImGui::Button("step >")) step(+1);
  ImGui::SameLine();
  ImGui::SetNextItemWidth(110);
  float speed = float(replay_.speed);
  if (ImGui::SliderFloat("speed", &speed, 0.01f, 2.0f, "%.2fx", ImGuiSliderFlags_Logarithmic)) replay_.speed = speed;
  ImGui::SameLine();
  ImGui::Checkbox("replay", &reveal_);
  ImGui::SameLine();
  ImGui::Checkbox("arrows", &arrows_);
  ImGui::SameLine();
  ImGui::TextDisabled("wheel/W/S zoom, drag/A/D pan, shift-drag select, click: pin, header: collapse, GPU row: open");
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

void App::toggle_play() {
  if (!replay_.playing && replay_.head_ns >= end_ns_) replay_.head_ns = 0;
  replay_.playing = !replay_.playing;
  reveal_ = true;
}

void App::step(int dir) {
  std::vector<StepMark> all;
  for (const Loaded& t : traces_)
    for (StepMark m : t.steps) {
      const Frame f = frame_of(t, m.strategy);
      m.ts_ns = int64_t((double(m.ts_ns) - f.offset) / f.scale);  // in axis time
      all.push_back(m);
    }
  std::sort(all.begin(), all.end(), [](const StepMark& a, const StepMark& b) { return a.ts_ns < b.ts_ns; });
  if (auto t = step_after(all, replay_.head_ns - (dir > 0 ? 0 : 1), dir)) replay_.head_ns = *t + 1, reveal_ = true;
  replay_.playing = false;
}

}  // namespace ringside::viz

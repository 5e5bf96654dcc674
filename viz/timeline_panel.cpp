// The timeline panel: the time ruler, and per trace each strategy's group of lanes, aligned at
// the group's zero (the forward's start). A group's header names it, says whether it was
// measured or modeled, what it sent and how much of its communication hid, and holds a band per
// ring step. In full, a GPU has a compute lane (nesting: phase, sublayer, ring step, op), comm
// lanes with exposed and hidden communication marked beneath, and a memory plot; collapsed, one
// summary row (compute, exposed comm, idle) and the group's one memory plot.
#include <algorithm>
#include <cmath>
#include <filesystem>

#include "viz/app.h"

namespace ringside::viz {

using trace::Event;
using trace::RankTrace;

namespace {

float text_width(const std::string& s) { return ImGui::CalcTextSize(s.c_str()).x; }

// The first process of `l` whose row is under y (pixels from the layout's top), and its group.
std::optional<std::pair<size_t, const Lane*>> summary_row_at(const TimelineLayout& l, float y) {
  for (size_t gi = 0; gi < l.groups.size(); ++gi)
    for (size_t li : l.groups[gi].lanes) {
      const Lane& lane = l.lanes[li];
      if (lane.kind == Lane::summary && y >= lane.y && y < lane.y + lane.height) return std::make_pair(gi, &lane);
    }
  return std::nullopt;
}

template <class T>
void toggle(std::vector<T>& v, const T& x) {
  const auto it = std::find(v.begin(), v.end(), x);
  if (it == v.end()) v.push_back(x);
  else v.erase(it);
}

}  // namespace

// The ruler stays above the lanes when they scroll. With measured and modeled groups, two rows:
// the modeled groups' time, and the measured groups' (their own scale).
void App::ruler(float h) {
  ImDrawList* dl = ImGui::GetWindowDrawList();
  // First a colour key, so that a screenshot explains itself: exposed and hidden comm, then the
  // compute kinds, then the communication kinds.
  float kx = axis_.x0 - kLabelWidth + 4;
  const float ky = ImGui::GetCursorScreenPos().y;
  auto key = [&](Color c, const std::string& text) {
    dl->AddRectFilled(ImVec2(kx, ky + 3), ImVec2(kx + 8, ky + 11), c);
    dl->AddText(ImVec2(kx + 10, ky), IM_COL32(200, 200, 200, 255), text.c_str());
    kx += 10 + ImGui::CalcTextSize(text.c_str()).x + 5;
  };
  key(kExposedColor, "exposed comm");
  key(kHiddenColor, "hidden");
  for (trace::Kind k : compute_kinds()) key(color_of_kind(k), trace::to_string(k));
  for (trace::Kind k : comm_kinds()) key(color_of_kind(k), trace::to_string(k));
  const float y = ky + kKeyHeight;
  h -= kKeyHeight;
  // In a lesson step one row, the time of the step's group (every other group shows the same
  // part of its own run: its header says which).
  const bool framed = !frames_.empty() && frames_.count(framed_group_);
  const bool framed_modeled = framed && !traces_.empty() && traces_.front().modeled(framed_group_);
  const int rows = mixed_ && !framed ? 2 : 1;
  const float rh = h / float(rows);
  for (int row = 0; row < rows; ++row) {
    const double k = framed ? frames_.at(framed_group_).scale : row == 0 ? 1.0 : measured_scale_;
    const double t0 = axis_.t0 * k, t1 = axis_.t1 * k, span = t1 - t0;
    const float ry = y + rh * float(row);
    // At most one label per 90 px.
    const double most = std::max(1.0, double(axis_.x1 - axis_.x0) / 90.0);
    double tick = std::pow(10.0, std::floor(std::log10(span / most)));
    if (span / tick > most * 5) tick *= 10;
    else if (span / tick > most * 2) tick *= 5;
    else if (span / tick > most) tick *= 2;
    // Ticks by index, not by adding: far from zero, t + tick can equal t.
    const double first = std::ceil(t0 / tick);
    for (int i = 0; i <= int(most) * 10 + 2; ++i) {
      double t = (first + i) * tick;
      if (t > t1) break;
      if (std::fabs(t) < tick * 1e-6) t = 0;  // no "-0 ns"
      const float x = axis_.x0 + float((t - t0) / span * double(axis_.x1 - axis_.x0));
      dl->AddLine(ImVec2(x, ry + rh - 4), ImVec2(x, ry + rh), IM_COL32(200, 200, 200, 255));
      // Right of its tick, or left of it where it would run past the panel's edge (the last, "5.0 s").
      const std::string text = format_ns(t);
      const float w = ImGui::CalcTextSize(text.c_str()).x;
      const float right = ImGui::GetWindowPos().x + ImGui::GetWindowContentRegionMax().x;
      dl->AddText(ImVec2(x + 2 + w > right ? x - 2 - w : x + 2, ry), IM_COL32(200, 200, 200, 255), text.c_str());
    }
    // Time runs from each group's first phase: the forward, or a PyTorch profiler run's ProfilerStep.
    const bool profiled = !traces_.empty() && std::all_of(traces_.begin(), traces_.end(), [](const Loaded& t) { return from_profiler(t.data.run); });
    const char* what = framed ? (framed_modeled ? "MODELED time" : "MEASURED time")
                       : !mixed_ ? (profiled ? "from ProfilerStep" : "time, from forward") : row == 0 ? "MODELED time" : "MEASURED time";
    const bool orange = framed ? framed_modeled : row == 0 && mixed_;
    dl->AddText(ImVec2(axis_.x0 - kLabelWidth + 4, ry), orange ? IM_COL32(230, 159, 0, 255) : IM_COL32(170, 170, 170, 255), what);
  }
  // The heading of the collapsed groups' gauge column, a table's header cell over its cells.
  const bool any_collapsed = std::any_of(traces_.begin(), traces_.end(), [](const Loaded& t) {
    return std::any_of(t.layout.groups.begin(), t.layout.groups.end(), [](const Group& g) { return g.collapsed; });
  });
  if (any_collapsed) {
    const float x0 = axis_.x0 - kGaugeGap - kGaugeWidth, x1 = axis_.x0 - kGaugeGap, hy = y + h - 15;
    dl->AddRectFilled(ImVec2(x0, hy), ImVec2(x1, hy + 15), kGaugeTrack);
    const float w = ImGui::CalcTextSize("exposed").x;
    dl->AddText(ImVec2(x0 + (kGaugeWidth - w) * 0.5f, hy + 1), IM_COL32(230, 230, 240, 255), "exposed");
  }
}

void App::timeline() {
  if (scroll_to_) ImGui::SetScrollY(*scroll_to_), scroll_to_.reset();
  ImDrawList* dl = ImGui::GetWindowDrawList();
  const ImVec2 origin = ImGui::GetCursorScreenPos();
  const float width = ImGui::GetContentRegionAvail().x;
  axis_.x0 = origin.x + kLabelWidth;
  axis_.x1 = origin.x + width - 4;
  fit_titles();  // the window may have changed: the headers' rows before the lanes below them
  drawn_lanes_.clear();
  drawn_groups_ = nlohmann::json::array(), drawn_labels_ = nlohmann::json::array(), drawn_gauges_ = nlohmann::json::array();
  drawn_lane_boxes_ = nlohmann::json::array();
  timeline_y0_ = ImGui::GetWindowPos().y, timeline_y1_ = timeline_y0_ + ImGui::GetWindowSize().y;
  float y = origin.y;
  const ImVec2 mouse = ImGui::GetIO().MousePos;
  std::optional<std::pair<size_t, Hit>> hover;
  std::vector<float> tops;
  for (size_t ti = 0; ti < traces_.size(); ++ti) {
    const Loaded& t = traces_[ti];
    if (traces_.size() > 1) {
      const std::string title = std::string(1, char('A' + ti % 26)) + ": " + shown_path(t.path);
      dl->AddText(ImVec2(origin.x, y), IM_COL32(255, 255, 255, 255), title.c_str());
      y += 18;
    }
    tops.push_back(y);
    const std::string prefix = traces_.size() > 1 ? std::string(1, char('A' + ti % 26)) + "/" : std::string();
    for (const Group& g : t.layout.groups) draw_group(dl, ti, g, y, origin.x, prefix);
    if (ImGui::IsWindowHovered()) {
      std::vector<TimeAxis> axes;
      for (const Group& g : t.layout.groups) axes.push_back(view_of(t, g).axis);
      if (auto h = hit_test(t.data, t.layout, axes, mouse.x, mouse.y, y)) hover = std::make_pair(ti, *h);
    }
    if (arrows_) draw_flows(dl, t, y);
    y += t.layout.height + 10;
  }
  // Play head and selection.
  if (reveal_) {
    const float x = axis_.x_of(double(replay_.head_ns));
    dl->AddLine(ImVec2(x, origin.y), ImVec2(x, y), IM_COL32(255, 255, 255, 200), 1.5f);
  }
  if (selection_) {
    const float a = axis_.x_of(double(selection_->begin)), b = axis_.x_of(double(selection_->end));
    dl->AddRectFilled(ImVec2(std::min(a, b), origin.y), ImVec2(std::max(a, b), y), IM_COL32(255, 255, 255, 28));
  }
  ImGui::Dummy(ImVec2(width, y - origin.y));
  if (!ImGui::IsWindowHovered()) return;
  // Mouse: zoom, pan, select, hover, pin; a click on a header collapses or expands its group,
  // on a collapsed group's GPU row opens that GPU's lanes (or closes them).
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
    if (!drag_start_ && std::fabs(io.MouseDragMaxDistanceSqr[0]) < 9) {
      pinned_ = hover;
      for (size_t ti = 0; ti < traces_.size(); ++ti) {
        Loaded& t = traces_[ti];
        const float ly = mouse.y - tops[ti];
        LayoutOptions& o = t.layout_options;
        for (size_t gi = 0; gi < t.layout.groups.size(); ++gi) {
          const Group& g = t.layout.groups[gi];
          if (ly < g.y || ly >= g.y + g.header) continue;
          if (o.collapse_all) {  // from "all" to a list, without this one
            o.collapse_all = false;
            for (size_t k = 0; k < t.layout.groups.size(); ++k) o.collapsed.push_back(k);
          }
          toggle(o.collapsed, gi);
          t.relayout();
          break;
        }
        if (const auto row = summary_row_at(t.layout, ly)) {
          toggle(o.expanded, std::make_pair(row->first, t.data.ranks[row->second->process].rank));
          t.relayout();
        }
      }
    }
    drag_start_.reset();
  }
  if (hover) {
    const Loaded& t = traces_[hover->first];
    const RankTrace& r = t.data.ranks[hover->second.process];
    ImGui::BeginTooltip();
    ImGui::Text("%s (%s)", row_name(t.data.run, r.rank).c_str(), r.strategy.c_str());
    for (const std::string& line : describe_event(r.events[hover->second.event])) ImGui::TextUnformatted(line.c_str());
    ImGui::EndTooltip();
  }
}

// "4 GPUs, 286.5 us": its rows and its layer's time. A modeled step's rows are its pipeline
// stages (each stands for its stage's GPUs); a PyTorch profiler run's, the job's ranks.
std::string App::extent_words(const Loaded& t, const Group& g) {
  const bool stages = t.data.run.backend == kPipelineStages;
  const std::string unit = stages ? " pipeline stage" : " " + row_unit(t.data.run);
  return std::to_string(g.processes.size()) + unit + (g.processes.size() == 1 ? ", " : "s, ") + format_ns(double(g.layer_end_ns - g.zero_ns));
}

std::vector<TitlePiece> App::title_pieces(const Loaded& t, const Group& g) const {
  const std::string& comm = t.comm.count(g.strategy) ? t.comm.at(g.strategy) : std::string();
  const int64_t sent = t.sent.count(g.strategy) ? t.sent.at(g.strategy) : 0;
  // "[+] ring [MODELED on a100-nvlink] 4 GPUs, 286.5 us, sent 18.27 MiB/GPU in bf16; attention
  // comm 59% hidden, 39.8 us exposed/GPU; all comm 87.0 us exposed/GPU": the tag first, so
  // that it is never cut off.
  const std::string tag = t.tag.count(g.strategy) ? t.tag.at(g.strategy) : std::string();
  const std::string name = std::string(g.collapsed ? "[+] " : "[-] ") + shown_name(t, g.strategy);
  const std::string per = row_unit(t.data.run), time = extent_words(t, g);
  const std::string dtype = t.dtype.count(g.strategy) && !t.dtype.at(g.strategy).empty() ? " in " + t.dtype.at(g.strategy) : "";
  // Sends: a modeled step's are its pipeline's alone (its gradient collectives record payloads).
  const std::string sends = t.data.run.backend == kPipelineStages ? "PP sends " : "sent ";
  const std::string sent_text = sent > 0 ? sends + format_bytes(double(sent)) + "/" + per + dtype : "";
  const Color white = IM_COL32(255, 255, 255, 255);
  std::vector<TitlePiece> pieces{{name, white, 0, 0}};
  // A modeled timeline must not pass for a measured one, nor the reverse.
  if (!tag.empty()) pieces.push_back({tag, IM_COL32(0, 0, 0, 255), t.modeled(g.strategy) ? IM_COL32(230, 159, 0, 255) : IM_COL32(150, 150, 160, 255), 7});
  // In a lesson step, a group other than the step's shows the same part of its own run.
  const Frame frame = frame_of(t, g.strategy);
  if (!frame.landmark.empty()) pieces.push_back({"(here: its " + landmark_words(frame.landmark) + ") ", IM_COL32(150, 200, 255, 255), 0, 0});
  pieces.push_back({time + (sent_text.empty() ? "" : ", "), white, 0, 0});
  pieces[std::min<size_t>(2, pieces.size() - 1)].gap = 10;  // the words after the name and its tag
  // The most bytes sent per GPU of its family (measured or modeled) in gold.
  const bool most = sent > 0 && sent == t.top_sent.at(t.modeled(g.strategy));
  if (!sent_text.empty()) pieces.push_back({sent_text + (most ? " (the most)" : ""), most ? IM_COL32(255, 204, 77, 255) : white, 0, 0});
  if (!comm.empty()) pieces.push_back({"; " + comm, white, 0, 0});
  return pieces;
}


// The timeline's content less a scrollbar, whether one shows or not (so that the scrollbar a tall
// layout brings does not wrap the titles again), less 4 px each side of a header's text.
float App::title_width() const {
  const ImGuiStyle& style = ImGui::GetStyle();
  return ImGui::GetWindowWidth() - 2 * style.WindowPadding.x - style.ScrollbarSize - 12;
}

// Each trace's titles wrapped to title_width (one row each when abbreviated_): the rows of its
// longest title, for every group of the trace alike; relaid out when that changes.
void App::fit_titles() {
  for (Loaded& t : traces_) {
    int rows = 1;
    for (const Group& g : t.layout.groups) {
      const std::vector<PlacedWord> words = flow_title(title_pieces(t, g), title_width(), text_width, abbreviated_ ? 1 : 0);
      if (!words.empty()) rows = std::max(rows, words.back().row + 1);
    }
    if (rows != t.layout_options.title_rows) t.layout_options.title_rows = rows, t.relayout();
  }
}

void App::draw_header(ImDrawList* dl, const Loaded& t, const Group& g, const View& v, float gy, float left, const std::string& prefix) {
  const float title_h = g.header - (g.ring_steps ? LayoutOptions{}.step_row : 0);
  dl->AddRectFilled(ImVec2(left, gy), ImVec2(axis_.x1, gy + g.header - 1), IM_COL32(45, 45, 55, 255));
  const Frame frame = frame_of(t, g.strategy);
  // The title, wrapped to the header's width, its rows centred in the title's height.
  const float row_h = t.layout_options.title_row, x0 = left + 4;
  const std::vector<TitlePiece> pieces = title_pieces(t, g);
  const std::vector<PlacedWord> words = flow_title(pieces, title_width(), text_width, abbreviated_ ? 1 : 0);
  const int rows = words.empty() ? 1 : words.back().row + 1;
  const float ty = gy + std::max(0.0f, (title_h - 14 - row_h * float(rows - 1)) * 0.5f);
  float title_x1 = x0;  // where its longest row's ink ends
  for (const PlacedWord& w : words) {
    const float x = x0 + w.x, y = ty + row_h * float(w.row);
    if (w.box) dl->AddRectFilled(ImVec2(x - 3, y - 1), ImVec2(x + w.width + 3, y + 14), w.box);
    dl->AddText(ImVec2(x, y), w.color, w.text.c_str());
    title_x1 = std::max(title_x1, x + w.width + (w.box ? 3 : 0));
  }
  std::string title;  // its words in one line: the tooltip of a title cut short, and --layout-json's
  for (const TitlePiece& p : pieces) title += (p.gap > 0 ? " " : "") + p.text;
  const ImVec2 mouse = ImGui::GetIO().MousePos;
  if (abbreviated_ && ImGui::IsWindowHovered() && mouse.x >= left && mouse.x < axis_.x1 && mouse.y >= gy && mouse.y < gy + title_h)
    ImGui::SetTooltip("%s", title.c_str());
  const std::string tag = t.tag.count(g.strategy) ? t.tag.at(g.strategy) : std::string();
  drawn_groups_.push_back({{"name", prefix + g.strategy}, {"y0", gy}, {"y1", gy + g.height}, {"collapsed", g.collapsed},
                           {"extent", extent_words(t, g)}, {"t0_ns", v.axis.t0}, {"t1_ns", v.axis.t1}, {"frame", frame.landmark},
                           {"tag", tag}, {"title", title}, {"title_rows", rows}, {"title_x1", title_x1}, {"header_x1", axis_.x1},
                           {"title_cut", abbreviated_ && words.back().text == "..."}});
  if (!g.ring_steps) return;
  // The ring steps' row: a band per step, forward in blues and backward in purples, alternating.
  std::vector<StepMark> marks;
  for (const StepMark& m : t.steps)
    if (m.strategy == g.strategy) marks.push_back(m);
  TimeAxis group_time = v.axis;  // the marks are in group time
  group_time.t0 -= double(g.zero_ns), group_time.t1 -= double(g.zero_ns);
  const StepStrip strip = step_strip(marks, group_time, ImGui::CalcTextSize("0").x);
  const float by = gy + title_h, bh = LayoutOptions{}.step_row - 2;
  dl->PushClipRect(ImVec2(axis_.x0, by), ImVec2(axis_.x1, by + bh + 1), true);
  for (const StepBand& b : strip.bands) {
    const bool fwd = b.phase == "forward", odd = b.step % 2;
    const ImU32 c = fwd ? (odd ? IM_COL32(50, 80, 125, 255) : IM_COL32(70, 110, 165, 255))
                        : (odd ? IM_COL32(90, 60, 120, 255) : IM_COL32(120, 85, 155, 255));
    dl->AddRectFilled(ImVec2(b.x0, by), ImVec2(std::max(b.x1, b.x0 + 1), by + bh), c);
  }
  for (const StepLabel& l : strip.labels) {
    dl->AddText(ImVec2(l.x0, by - 1), IM_COL32(255, 255, 255, 255), l.text.c_str());
    if (l.x1 >= axis_.x0 && l.x0 <= axis_.x1)
      drawn_labels_.push_back({{"group", prefix + g.strategy}, {"text", l.text}, {"x0", l.x0}, {"x1", l.x1}, {"y0", by}, {"y1", by + bh}});
  }
  dl->PopClipRect();
}

namespace {

// The height of the comm rows from the group's lane `li` (a first comm row) on, of its GPU.
float comm_rows_height(const Loaded& t, const Group& g, size_t li) {
  const Lane& first = t.layout.lanes[li];
  float h = 0;
  for (auto it = std::find(g.lanes.begin(), g.lanes.end(), li); it != g.lanes.end(); ++it) {
    const Lane& l = t.layout.lanes[*it];
    if (l.kind != Lane::comm || l.process != first.process) break;
    h += l.height;
  }
  return h;
}

}  // namespace

void App::draw_group(ImDrawList* dl, size_t ti, const Group& g, float top, float left, const std::string& prefix) {
  const Loaded& t = traces_[ti];
  const float gy = top + g.y;
  const View v = view_of(t, g);
  draw_header(dl, t, g, v, gy, left, prefix);
  // A summary row's gauge: its exposed comm against the group's most.
  int64_t most_exposed = 1;
  for (size_t p : g.processes) most_exposed = std::max(most_exposed, t.exposed_ns[p]);
  float rows_y0 = INFINITY, rows_y1 = -INFINITY;  // the summary rows, for the gauge column's edge
  dl->PushClipRect(ImVec2(left, gy), ImVec2(axis_.x1 + 1, gy + g.height), true);
  struct {
    size_t process = SIZE_MAX;
    std::string text;
    float y0 = 0, y1 = 0;
  } comm_label;  // the label drawn on the last GPU's first comm row, which its further rows share
  for (size_t li : g.lanes) {
    const Lane& lane = t.layout.lanes[li];
    const float ly = top + lane.y;
    drawn_lanes_[prefix + g.strategy + "/" + lane.label] = ly;
    const RankTrace& r = t.data.ranks[lane.process];
    // Labels: every lane's, but a thin summary row's only every few GPUs ("GPU 0", "GPU 4", ...),
    // and when that would leave one label, the group's range on its first row ("GPU 0-3").
    const int every = lane.kind == Lane::summary ? int(std::ceil(14.0f / lane.height)) : 1;
    std::string label = lane.label;
    if (every > 1 && size_t(every) * 2 > g.processes.size() && g.processes.size() > 1)
      label = r.rank == t.data.ranks[g.processes.front()].rank
                  ? row_name(t.data.run, r.rank) + "-" + std::to_string(t.data.ranks[g.processes.back()].rank)
                  : "";
    const bool collapsed_memory = lane.kind == Lane::memory && g.collapsed;  // draw_memory labels it
    static const char* const kinds[] = {"compute", "comm", "memory", "summary"};
    nlohmann::json box = {{"lane", prefix + g.strategy + "/" + lane.label}, {"kind", kinds[lane.kind]}, {"y0", ly}, {"y1", ly + lane.height}};
    if (lane.kind == Lane::comm && lane.comm_lane > 0 && comm_label.process == lane.process) {
      // A GPU's further comm rows (transfers at once: a pipeline send under the gradients'
      // reduce-scatter) carry the label of its first, drawn once across them all.
      box["label"] = comm_label.text, box["label_y0"] = comm_label.y0, box["label_y1"] = comm_label.y1;
    } else if (r.rank % every == 0 && !collapsed_memory && !label.empty()) {
      const std::string& text = label;  // a first comm row's ("stage 1 comm") is its GPU's comm rows' label
      const float height = lane.kind == Lane::comm ? comm_rows_height(t, g, li) : lane.height;  // centred on them
      const float label_y = ly + std::max(0.0f, (height - 13) * 0.5f);  // 13 px: the font's
      dl->AddText(ImVec2(left + 4, label_y), IM_COL32(190, 190, 190, 255), text.c_str());
      box["label"] = text, box["label_y0"] = label_y, box["label_y1"] = label_y + ImGui::GetTextLineHeight();
      if (lane.kind == Lane::comm) comm_label = {lane.process, text, label_y, label_y + ImGui::GetTextLineHeight()};
    }
    if (lane.kind != Lane::summary || lane.height >= 6)
      dl->AddLine(ImVec2(axis_.x0, ly), ImVec2(axis_.x1, ly), IM_COL32(50, 50, 58, 255));
    if (lane.kind == Lane::summary) {
      draw_gauge(dl, t, lane, most_exposed, ly, prefix + g.strategy + "/" + lane.label);
      rows_y0 = std::min(rows_y0, ly), rows_y1 = std::max(rows_y1, ly + lane.height);
    }
    const Ink ink = lane.kind == Lane::memory    ? draw_memory(dl, t, g, lane, v, ly)
                    : lane.kind == Lane::summary ? draw_summary(dl, t, lane, v, ly)
                                                 : draw_events(dl, t, lane, v, ly);
    box["marks"] = ink.marks;
    if (ink.marks) box["ink_y0"] = ink.y0, box["ink_y1"] = ink.y1;
    drawn_lane_boxes_.push_back(std::move(box));
  }
  // The gauge column ends in a rule, halfway to the time axis: what is left of it is a table.
  if (rows_y1 > rows_y0)
    dl->AddLine(ImVec2(axis_.x0 - kGaugeGap * 0.5f, rows_y0), ImVec2(axis_.x0 - kGaugeGap * 0.5f, rows_y1), IM_COL32(110, 110, 125, 255));
  dl->PopClipRect();
}

// Beside a collapsed group's GPU row, in the gauge column under the ruler's "exposed" heading
// (per-row numbers beside the row's name, as Nsight Systems' and Perfetto's track labels carry
// them, and never in the timeline's area or colours): the GPU's exposed communication over its
// layer as a bar against the group's most, so that the GPUs that wait stand out, and its value
// where the row is tall enough for text.
void App::draw_gauge(ImDrawList* dl, const Loaded& t, const Lane& lane, int64_t most, float ly, const std::string& name) {
  const float x0 = axis_.x0 - kGaugeGap - kGaugeWidth, x1 = axis_.x0 - kGaugeGap;
  const float pad = lane.height >= 6 ? 1 : 0, y0 = ly + pad, y1 = ly + lane.height - pad;
  const int64_t exposed = t.exposed_ns[lane.process];
  const float fill = x0 + kGaugeWidth * float(double(exposed) / double(most));
  dl->AddRectFilled(ImVec2(x0, y0), ImVec2(x1, y1), kGaugeTrack);
  if (fill > x0) dl->AddRectFilled(ImVec2(x0, y0), ImVec2(fill, y1), kGaugeFill);
  const std::string value = format_ns(double(exposed));
  if (lane.height >= 11) {  // the default row: its digits fit
    const float w = ImGui::CalcTextSize(value.c_str()).x;
    dl->AddText(ImVec2(x1 - 2 - w, ly + (lane.height - 13) * 0.5f), IM_COL32(255, 255, 255, 255), value.c_str());
  }
  const ImVec2 mouse = ImGui::GetIO().MousePos;
  if (ImGui::IsWindowHovered() && mouse.x >= x0 && mouse.x < x1 && mouse.y >= y0 && mouse.y < y1)
    ImGui::SetTooltip("%s: %s of exposed communication over its layer (the bar: against the group's most, %s)", name.c_str(),
                      value.c_str(), format_ns(double(most)).c_str());
  drawn_gauges_.push_back({{"lane", name}, {"x0", x0}, {"x1", x1}, {"y0", y0}, {"y1", y1}, {"fill_x1", fill}, {"exposed_ns", exposed}});
}

App::Ink App::draw_events(ImDrawList* dl, const Loaded& t, const Lane& lane, const View& v, float ly) {
  Ink ink;
  const RankTrace& r = t.data.ranks[lane.process];
  const TimeAxis& a = v.axis;
  const float head = std::isinf(v.head) ? a.x1 : a.x_of(v.head);
  for (size_t k = 0; k < lane.events.size(); ++k) {
    const Event& e = r.events[lane.events[k]];
    if (!v.revealed(e)) continue;
    float x0 = a.x_of(double(e.ts_ns)), x1 = std::min(a.x_of(double(e.end_ns())), head);  // what has happened so far
    if (x1 < a.x0 || x0 > a.x1) continue;
    x0 = std::max(x0, a.x0), x1 = std::max(std::min(x1, a.x1), x0 + 1);
    const float y0 = ly + (lane.kind == Lane::compute ? lane.row * float(lane.depth[k]) : 0);
    const float h = lane.kind == Lane::compute ? lane.row : lane.height;
    dl->AddRectFilled(ImVec2(x0, y0 + 1), ImVec2(x1, y0 + h - 1), color_of(e));
    ink.add(y0 + 1, y0 + h - 1);
    if (x1 - x0 > 40) {
      dl->PushClipRect(ImVec2(x0, y0), ImVec2(x1, y0 + h), true);
      dl->AddText(ImVec2(x0 + 2, y0), IM_COL32(0, 0, 0, 255), e.name.c_str());
      dl->PopClipRect();
    }
  }
  if (lane.kind != Lane::comm || lane.comm_lane != 0) return ink;
  // Under the first comm lane, 5 px: exposed (vermillion) and hidden (green) communication.
  const float sy = ly + lane.height - 5;
  auto strip = [&](int64_t b, int64_t e, Color c) {  // [b, e] ns, clipped to the view and the play head
    const float x0 = std::max(a.x_of(double(b)), a.x0), x1 = std::min({a.x_of(double(e)) + 1, a.x1, head});
    if (x1 > x0) dl->AddRectFilled(ImVec2(x0, sy), ImVec2(x1, sy + 5), c), ink.add(sy, sy + 5);
  };
  for (const Event& e : r.events)
    if (e.stream == trace::Stream::comm && v.revealed(e)) strip(e.ts_ns, e.end_ns(), kHiddenColor);
  for (const trace::Interval& iv : t.exposed[lane.process]) strip(iv.begin, iv.end, kExposedColor);
  return ink;
}

// A summary row: what the GPU does, pixel by pixel. Runs of one colour closer than a pixel are
// drawn as one rectangle, and what a drawn pixel already covers is skipped, so a 64-rank trace of
// a quarter of a million events draws at the speed of a few thousand.
App::Ink App::draw_summary(ImDrawList* dl, const Loaded& t, const Lane& lane, const View& v, float ly) {
  Ink ink;
  const TimeAxis& a = v.axis;
  const float y0 = ly + (lane.height >= 6 ? 1 : 0), y1 = ly + lane.height - (lane.height >= 6 ? 1 : 0);
  const float head = std::isinf(v.head) ? a.x1 : std::min(a.x1, a.x_of(v.head));
  float run_x0 = 0, run_x1 = -1e9f;
  Color run = 0;
  auto flush = [&] {
    if (run_x1 > run_x0) dl->AddRectFilled(ImVec2(run_x0, y0), ImVec2(std::max(run_x1, run_x0 + 1), y1), run), ink.add(y0, y1);
  };
  for (const Activity& act : t.activity[lane.process]) {
    float x0 = a.x_of(double(act.begin)), x1 = std::min(a.x_of(double(act.end)), head);
    if (x1 < a.x0 || x0 > head) continue;
    x0 = std::max(x0, a.x0);
    if (act.color == run && x0 <= run_x1 + 1) {
      run_x1 = std::max(run_x1, x1);
      continue;
    }
    if (x1 - x0 < 1 && x1 <= run_x1 + 1 && act.color != kExposedColor) continue;  // inside a pixel already drawn
    flush();
    run = act.color, run_x0 = x0, run_x1 = x1;
  }
  flush();
  return ink;
}

void App::draw_flows(ImDrawList* dl, const Loaded& t, float top) {
  // Inside the time axis: a flow from or to a time out of view is cut at its edge, never drawn
  // over the lanes' labels.
  dl->PushClipRect(ImVec2(axis_.x0, top), ImVec2(axis_.x1, top + t.layout.height), true);
  // The first comm lane of each process, and its group's view.
  std::map<size_t, std::pair<float, View>> at;
  for (const Group& g : t.layout.groups)
    for (size_t li : g.lanes) {
      const Lane& lane = t.layout.lanes[li];
      if (lane.kind == Lane::comm && lane.comm_lane == 0) at.emplace(lane.process, std::make_pair(top + lane.y + lane.height * 0.5f, view_of(t, g)));
    }
  for (const trace::Flow& f : t.data.flows) {
    const auto a = at.find(f.from), b = at.find(f.to);
    if (a == at.end() || b == at.end()) continue;
    if (double(f.to_ts_ns) > b->second.second.head) continue;
    const float x0 = a->second.second.axis.x_of(double(f.from_ts_ns)), x1 = b->second.second.axis.x_of(double(f.to_ts_ns));
    if (std::max(x0, x1) < axis_.x0 || std::min(x0, x1) > axis_.x1) continue;
    const ImVec2 p0(x0, a->second.first), p1(x1, b->second.first);
    dl->AddLine(p0, p1, IM_COL32(255, 255, 255, 60), 1.0f);
    dl->AddTriangleFilled(ImVec2(p1.x - 2, p1.y - (p1.y > p0.y ? 4 : -4)), ImVec2(p1.x + 2, p1.y - (p1.y > p0.y ? 4 : -4)), p1,
                          IM_COL32(255, 255, 255, 110));
  }
  dl->PopClipRect();
}

}  // namespace ringside::viz

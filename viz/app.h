// ringside-viewer's application: the traces it holds and what the user sees of them.
//
// Everything it shows is computed in view_model.cpp; the App draws it with Dear ImGui, one
// file per panel of the screen:
//   app.cpp             loading a trace, framing (fit, zoom, collapse), the toolbar, a frame
//   timeline_panel.cpp  the ruler and each strategy's group: its header with the ring steps,
//                       per GPU a compute lane, comm lanes with exposed and hidden comm marked,
//                       or in a collapsed group one summary row per GPU; the flows
//   memory_lanes.cpp    the memory plots, stacked by category, peak marked
//   tile_map_panel.cpp  the attention tile maps
//   stats_panel.cpp     the stats tables (per GPU, or min/median/max and outliers over many GPUs),
//                       pinned details, the colour key
//   lesson_panel.cpp    a lesson's steps beside its timeline
//   files_panel.cpp     the Open dialog, dropped files, live reload, load errors
#pragma once
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <filesystem>
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "imgui.h"
#include "lessons/lesson.h"
#include "trace/run_info.h"
#include "viz/view_model.h"

namespace ringside::viz {

inline constexpr float kKeyHeight = 15;  // the colour key's row above the ruler
// The timeline's left column: the lanes' labels, and at its right edge the column of a collapsed
// group's per-GPU gauges, kGaugeGap px before the time axis begins.
inline constexpr float kLabelWidth = 210, kGaugeWidth = 64, kGaugeGap = 10;

// A loaded trace and everything derived from it.
struct Loaded {
  std::string path;
  trace::TraceData data;
  LayoutOptions layout_options;  // which groups are collapsed, which GPUs drilled into
  TimelineLayout layout;
  std::vector<trace::StrategyMetrics> metrics;
  std::vector<StepMark> steps;                        // relative to their group's zero
  std::vector<std::vector<trace::Interval>> exposed;  // per process
  std::vector<std::vector<Activity>> activity;        // per process: its summary row
  std::vector<MemorySeries> memory;                   // per process
  int64_t memory_scale = 1;                           // the highest total of any process: one scale for all
  // Per family (modeled groups, measured ones): the highest forward + backward peak of any
  // process, and the most bytes any group sends per GPU: the answers the picture marks in gold.
  std::map<bool, int64_t> top_peak, top_sent;
  std::map<std::string, std::optional<TileMap>> tiles;  // per recorded group, its tile map (found at load)
  bool modeled(const std::string& strategy) const { return data.run.is_modeled(strategy); }
  std::string summary;                                // "s=4096 h=512 H=8 P=4 (measured)": trace_tag
  std::string clock;                                  // how its ranks' clocks were aligned (clock_words)
  std::map<std::string, std::string> tag, comm;       // per group: group_tag (MEASURED says on what) and comm_summary
  std::map<std::string, std::string> dtype;           // per group: the element type of its bytes ("fp32", "bf16")
  std::map<std::string, int64_t> sent;                // per group: bytes sent per GPU (the most of any)
  std::vector<int64_t> exposed_ns;                    // per process: its exposed comm over its layer
  std::filesystem::file_time_type mtime{};
  void relayout() { layout = make_layout(data, layout_options); }
};
/// Reads and derives; throws ringside::Error for a file it cannot read. `path` is a trace file
/// or a folder of PyTorch profiler traces, one per rank, whose clocks `align` puts together.
Loaded load(const std::string& path, trace::ClockAlign align = trace::ClockAlign::automatic);
/// A trace's name as the viewer shows it: the file's name, or a folder's with a slash ("ring4/").
std::string shown_path(const std::string& path);
/// A group's name as its header shows it: a modeled twin's "ring (modeled, a100-nvlink)" is
/// "ring" (twin_of), since its tag says the rest.
std::string shown_name(const Loaded& t, const std::string& strategy);

struct Options {
  std::vector<std::string> files;
  std::string live;
  std::string screenshot;
  bool screenshot_given = false;
  std::string size = "1600x1000";
  std::optional<double> at_s;
  std::optional<int> step;
  std::string layout_json;         // tests: where the lanes, groups and labels were drawn
  std::optional<int> lesson;       // --lesson N: the lesson's steps beside the timeline
  std::optional<int> lesson_step;  // --lesson-step K: open at step K (1-based)
  std::string fit = "all";         // --fit GROUPS[:PHASE]: what the first view frames
  std::optional<trace::Interval> zoom;  // --zoom START,END (group time, ns)
  enum class Collapse { automatic, all, none } collapse = Collapse::automatic;
  trace::ClockAlign align = trace::ClockAlign::automatic;  // --align: a PyTorch profiler run's clocks
};

class App {
 public:
  explicit App(Options o);

  const std::vector<std::string>& errors() const { return errors_; }
  /// Whether every error is an option that the trace read shows wrong: --fit naming no group,
  /// --step past the last ring step (a usage error: exit 2 when headless).
  bool option_error() const { return option_errors_ > 0 && size_t(option_errors_) == errors_.size(); }
  bool any_trace() const { return !traces_.empty(); }
  bool any_event() const;
  void open(const std::string& path);
  void drop(int count, const char** paths);
  /// Live mode: rereads the file when it changes, keeping the last good copy while it is half-written.
  void poll_live();
  /// One frame of the whole window.
  void frame(float width, float height);
  /// Where the last frame drew its lanes, groups and ring step labels (for tests).
  nlohmann::json layout_json() const;

 private:
  // app.cpp: framing and the toolbar.
  void arrange(float timeline_height);
  bool arrange_rows(float timeline_height);
  void fit();
  void toolbar();
  void toggle_play();
  void step(int dir);
  // Time scales. A trace with modeled twins holds groups on two clocks about a thousand times
  // apart (a CPU's milliseconds, a GPU's microseconds). Each family is drawn on its own scale so
  // that both fit: the modeled groups on the axis (the ruler's first row), the measured ones
  // measured_scale_ times slower (its second row). A time on the axis, the play head and the
  // selection are the axis's time; a group's own time is that times scale_of(group).
  struct View {
    TimeAxis axis;  ///< in the trace's own ns: the group's zero and scale applied
    double head;    ///< the play head in the trace's own ns; +inf when not replaying
    bool revealed(const trace::Event& e) const { return double(e.ts_ns) <= head; }
  };
  double scale_of(const Loaded& t, const std::string& strategy) const;
  // A lesson step frames its group's focus, and every other group of the lesson's trace the same
  // part of its own run (corresponding_window: the measured run's ring step 0 is its twin's ring
  // step 0), on the same pixels: a group's time (ns after its zero) = offset + axis time * scale.
  // Outside a lesson step a group's frame is its family's: offset 0, scale scale_of(group).
  struct Frame {
    double offset = 0, scale = 1;
    std::string landmark;  ///< the landmark the frame maps (Correspondence::landmark); "" when none
  };
  Frame frame_of(const Loaded& t, const std::string& strategy) const;
  View view_of(const Loaded& t, const Group& g) const;
  // timeline_panel.cpp
  void ruler(float height);
  void timeline();
  void draw_group(ImDrawList* dl, size_t trace, const Group& g, float top, float left, const std::string& prefix);
  void draw_header(ImDrawList* dl, const Loaded& t, const Group& g, const View& v, float gy, float left, const std::string& prefix);
  // A group's header: its rows and time ("4 GPUs, 286.5 us"), and its title's pieces (flow_title wraps them).
  static std::string extent_words(const Loaded& t, const Group& g);
  std::vector<TitlePiece> title_pieces(const Loaded& t, const Group& g) const;
  // The width the titles wrap at, in the timeline's window (timeline_panel.cpp), and their rows.
  float title_width() const;
  void fit_titles();
  // What a lane drew (for --layout-json): its marks (event boxes, activity runs, memory bars) and
  // their vertical extent, pixels.
  struct Ink {
    int marks = 0;
    float y0 = INFINITY, y1 = -INFINITY;
    void add(float top, float bottom) { ++marks, y0 = std::min(y0, top), y1 = std::max(y1, bottom); }
  };
  Ink draw_events(ImDrawList* dl, const Loaded& t, const Lane& lane, const View& v, float ly);
  Ink draw_summary(ImDrawList* dl, const Loaded& t, const Lane& lane, const View& v, float ly);
  void draw_gauge(ImDrawList* dl, const Loaded& t, const Lane& lane, int64_t most, float ly, const std::string& name);
  void draw_flows(ImDrawList* dl, const Loaded& t, float top);
  // memory_lanes.cpp
  Ink draw_memory(ImDrawList* dl, const Loaded& t, const Group& g, const Lane& lane, const View& v, float ly);
  // tile_map_panel.cpp
  void tile_maps();
  void draw_tile_map(const Loaded& t, const TileMap& m, double head, const std::string& prefix);
  // stats_panel.cpp
  void side_panel();
  using NamedMetrics = std::vector<std::pair<std::string, std::vector<trace::StrategyMetrics>>>;
  void stats_table(const NamedMetrics& all, const char* id);
  void colour_key();
  bool selection_cached() const;
  // lesson_panel.cpp
  void open_lesson();
  void go_to_lesson_step(size_t i);
  void lesson_panel(float height);
  // files_panel.cpp
  void file_dialog();
  void error_panel();

  Options opt_;
  std::vector<Loaded> traces_;
  std::vector<std::string> errors_;
  std::vector<lessons::Step> lesson_steps_;  // empty unless --lesson
  size_t lesson_step_ = 0;
  std::string lesson_title_;
  std::optional<float> scroll_to_;  // the timeline's next scroll position (pixels), once
  bool arranged_ = false;           // collapse decided for the window's height (first frame, new traces)
  bool abbreviated_ = false;        // the groups' titles cut to one row each (arrange: else not all on screen)
  bool framed_ = false;             // the first view framed (after the first arrangement)
  TimeAxis axis_;
  double measured_scale_ = 1;
  std::map<std::string, Frame> frames_;  // a lesson step's, per group of the first trace; empty otherwise
  std::string framed_group_;             // the group whose focus the lesson step frames
  bool mixed_ = false;  // some trace holds measured and modeled groups
  Replay replay_;
  bool reveal_ = false, arrows_ = true;
  int64_t end_ns_ = 1;
  bool fit_warned_ = false;  // --fit that matches nothing is said once
  int option_errors_ = 0;  // of errors_, those of options (option_error())
  double last_time_ = 0;
  std::optional<trace::Interval> selection_;
  uint64_t generation_ = 0;  // bumped whenever the set of traces or their contents change
  std::optional<std::pair<trace::Interval, uint64_t>> cached_for_;
  NamedMetrics selected_cache_;
  std::optional<double> drag_start_;
  std::optional<std::pair<size_t, Hit>> pinned_;
  bool dialog_open_ = false;
  std::string dialog_dir_;
  std::string live_note_;
  // What the last frame drew, for layout_json().
  std::map<std::string, float> drawn_lanes_;
  nlohmann::json drawn_groups_ = nlohmann::json::array(), drawn_labels_ = nlohmann::json::array();
  nlohmann::json drawn_lane_boxes_ = nlohmann::json::array();  // each lane's box, its label's and its ink's
  nlohmann::json drawn_gauges_ = nlohmann::json::array(), drawn_tile_maps_ = nlohmann::json::array();
  float timeline_y0_ = 0, timeline_y1_ = 0;  // the timeline's visible rows, pixels
  float window_w_ = 0, window_h_ = 0;
};

}  // namespace ringside::viz

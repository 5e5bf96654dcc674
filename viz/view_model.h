// What the viewer draws, computed without a window: the lanes of every strategy and GPU, the
// time axis, colours, exposed communication, ring steps, the attention tile map, replay and
// selection metrics. viewer.cpp only turns this into ImGui draw calls, so everything here is
// unit-tested (tests/test_viewer.cpp) and the picture can be reasoned about from the numbers.
#pragma once
#include <array>
#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <utility>
#include <string>
#include <vector>

#include "core/units.h"
#include "trace/metrics.h"
#include "trace/run_info.h"
#include "trace/tile_map.h"
#include "trace/trace_file.h"

namespace ringside::viz {

/// RGBA, 8 bits per channel, as ImGui's IM_COL32 packs it (R in the low byte).
using Color = uint32_t;
constexpr Color rgba(uint8_t r, uint8_t g, uint8_t b, uint8_t a = 255) {
  return Color(r) | Color(g) << 8 | Color(b) << 16 | Color(a) << 24;
}

/// The colour of an event's kind: compute kinds (attention, gemm, norm, elementwise, memory),
/// waits, and communication by collective (p2p, all_gather, reduce_scatter, all_reduce,
/// all_to_all). Exposed communication is drawn in its own colour under the comm lane.
///
/// The communication kinds and exposed/hidden comm are the Okabe-Ito palette (Okabe and Ito,
/// "Color Universal Design", 2008), chosen to stay apart for the common colour-vision
/// deficiencies; the compute kinds are lighter tones of other hues. tests/test_viewer.cpp holds
/// every pair at least kMinColorDistance apart, with normal vision and the three dichromacies.
Color color_of_kind(trace::Kind kind);
/// An event's colour: its kind's, and for a collective's span on the compute lane, that
/// collective's (its name).
Color color_of(const trace::Event& e);
inline constexpr Color kExposedColor = rgba(213, 94, 0);   // Okabe-Ito vermillion
inline constexpr Color kHiddenColor = rgba(0, 158, 115);   // Okabe-Ito bluish green
inline constexpr Color kBackground = rgba(24, 24, 28);
/// A collapsed group's per-GPU gauge (its exposed communication against the group's most): a
/// cell in a column of its own beside the lane labels, in greys that no event is drawn in, so
/// that it never reads as part of the timeline.
inline constexpr Color kGaugeTrack = rgba(44, 44, 52);
inline constexpr Color kGaugeFill = rgba(112, 112, 132);
inline constexpr Color kStepForward = rgba(0xc8, 0xe6, 0x96);   // a modeled step's forward blocks (pale lime)
inline constexpr Color kStepBackward = rgba(0x7a, 0x8c, 0x3c);  // and its backward blocks (olive): no kind's colour
using trace::kPipelineStages;  // RunInfo::backend of a modeled step's timeline, whose rows are pipeline stages
/// Whether a trace is a PyTorch profiler (Kineto) run (trace/kineto.h): the user's own job, whose
/// rows are its ranks (on CPUs or GPUs), whose memory is the allocator's one total, and which has
/// no ringside configuration (no tile map, no lesson).
bool from_profiler(const trace::RunInfo& run);
/// What a row stands for: "GPU"; "stage" in a modeled step (its rows are pipeline stages);
/// "rank" in a PyTorch profiler run.
std::string row_unit(const trace::RunInfo& run);
/// A row's name: row_unit and rank, "GPU 3", "stage 3", "rank 3".
std::string row_name(const trace::RunInfo& run, int rank);
/// What a memory plot shows, for its lane's label: "memory" (ringside's categories, stacked),
/// or "allocated (PyTorch)" (the allocator's "Total Allocated", one series).
std::string memory_words(const trace::RunInfo& run);
/// The memory categories (MemCategory) that some sample of the trace holds bytes in, in order:
/// what its memory plots draw (a PyTorch profiler run's one series is one of them).
std::vector<int> memory_categories(const trace::TraceData& t);
/// The kinds the colour key lists: compute kinds, then wait, then communication kinds.
const std::vector<trace::Kind>& compute_kinds();
const std::vector<trace::Kind>& comm_kinds();

/// How a colour is seen: with normal vision, or with one of the dichromacies simulated.
enum class Vision { normal, protanopia, deuteranopia, tritanopia };
/// The CIE76 colour difference (Delta E*ab, CIELAB under D65) between a and b as seen with `v`.
/// Dichromacies are simulated with the matrices of Machado, Oliveira and Fernandes, "A
/// Physiologically-based Model for Simulation of Color Vision Deficiency" (IEEE TVCG 2009),
/// severity 1.0, applied to linear sRGB.
double color_distance(Color a, Color b, Vision v = Vision::normal);
/// The least Delta E the palette keeps between kinds that share a lane (about where two flat
/// swatches side by side are told apart at a glance).
inline constexpr double kMinColorDistance = 15;
/// Colour of rank r (tile map): 12 hues apart from the event colours' saturation, repeating
/// after 12 (the tile labels and the key say which is which).
Color rank_color(int r);
/// The hues rank_color has before it repeats.
inline constexpr int kRankColors = 12;
/// The key's words for hue `hue` among P ranks: "GPU 3", or every GPU that shares it ("GPU 3,
/// 15, 27"), cut with "..." past six ("GPU 0, 12, 24, ..., 252, every 12th").
std::string rank_color_key(int hue, int P);
/// One colour per memory category (weights, grads, activations, workspace, comm).
Color memory_color(int category);

/// Maps time (ns on the trace's clock) to pixels and back: [t0, t1] onto [x0, x1].
struct TimeAxis {
  double t0 = 0, t1 = 1;  ///< visible time range, ns
  float x0 = 0, x1 = 1;   ///< pixels
  float x_of(double t) const { return x0 + float((t - t0) / (t1 - t0) * double(x1 - x0)); }
  double t_of(float x) const { return t0 + double(x - x0) / double(x1 - x0) * (t1 - t0); }
  /// Zooms by `factor` (> 1: in) keeping the time under pixel x where it is.
  void zoom(double factor, float x);
  /// Moves the view by dx pixels (content follows the mouse: dx > 0 shows earlier times).
  void pan(float dx);
  /// Shows [begin, end] with a 2% margin each side.
  void fit(double begin, double end);
};

/// One horizontal lane: a GPU's compute stream, one of its comm lanes, or its memory plot; or,
/// in a collapsed group, a GPU's summary row (what it does over time: compute, exposed comm,
/// idle) and the group's one memory plot (its GPU of highest peak).
struct Lane {
  enum Kind { compute, comm, memory, summary } kind = compute;
  size_t process = 0;  ///< index into TraceData::ranks
  int comm_lane = 0;   ///< for comm lanes: 0, 1, ...
  float y = 0, height = 0;
  float row = 0;       ///< compute lanes: the height of one nesting level (depth d at y + d row)
  std::string label;   ///< "GPU 2 compute", "GPU 2 comm", "GPU 2 memory"
  /// Events drawn in this lane (indices into the process's events), in start order; for the
  /// compute lane with their nesting depth (phase 0, sublayer 1, ...).
  std::vector<size_t> events;
  std::vector<int> depth;
};

/// One strategy's block of lanes.
struct Group {
  std::string strategy;
  float y = 0, height = 0;            ///< including its header
  std::vector<size_t> processes;      ///< in rank order
  std::vector<size_t> lanes;          ///< indices into TimelineLayout::lanes
  int64_t begin_ns = 0, end_ns = 0;   ///< extent of its events
  /// The group's time zero: the start of its first forward phase (the layer's start; setup
  /// before it shows at negative times), or begin_ns when it has no phases. Groups and
  /// traces are drawn aligned at their zeros.
  int64_t zero_ns = 0;
  /// The end of its last phase (the layer's end), or end_ns when it has no phases.
  int64_t layer_end_ns = 0;
  /// Each phase's extent over the group's ranks ("forward", "backward"), ns on the trace's clock.
  std::vector<std::pair<std::string, trace::Interval>> phases;
  /// Drawn collapsed: one summary row per GPU and one memory plot.
  bool collapsed = false;
  /// Its header's height: a title row, and below it a row of ring step bands when it has ring steps.
  float header = 0;
  bool ring_steps = false;
};

/// The vertical layout of a trace (pixels from the top of the timeline).
struct TimelineLayout {
  std::vector<Group> groups;
  std::vector<Lane> lanes;
  float height = 0;
  int64_t begin_ns = 0, end_ns = 0;  ///< extent of all events
};

struct LayoutOptions {
  float header = 22, row = 15, memory = 46, gap = 6;
  int max_depth = 7;  ///< compute-lane nesting shown (phase, sublayer, step or collective, op, wait, ...)
  /// Collapsed groups: a summary row per GPU of `summary` px (thinner with many GPUs, so that
  /// all of them take at most `overview` px, but never under 2 px), a memory plot of
  /// `group_memory` px, and a header of `collapsed_header` px.
  float summary = 11, overview = 256, group_memory = 30, collapsed_header = 20;
  float step_row = 15;  ///< the header's ring step row
  /// The rows a group's title takes (its words wrapped to the timeline's width: header_flow),
  /// each `title_row` px beyond the first.
  int title_rows = 1;
  float title_row = 14;
  /// Which groups are collapsed (by index; all when `collapse_all`), and which GPUs of a
  /// collapsed group are drilled into, shown with all their lanes: (group index, rank).
  bool collapse_all = false;
  std::vector<size_t> collapsed;
  std::vector<std::pair<size_t, int>> expanded;
};

/// Lays out every strategy, GPU and stream. Comm events go to lanes so that none overlap in
/// a lane (first free lane, as the file writer does). A compute lane is as many rows high as its
/// events nest deep; a lane with nothing to draw (a GPU without communication, a memory plot of
/// no bytes: a modeled step records none) is left out.
TimelineLayout make_layout(const trace::TraceData& t, const LayoutOptions& o = {});

/// What a rank does over time, for its summary row: each compute op in its kind's colour and
/// its exposed communication (exposed_intervals) in kExposedColor, in time order; what neither
/// covers is idle (waiting with nothing in flight, or done).
struct Activity {
  int64_t begin = 0, end = 0;
  Color color = 0;
};
std::vector<Activity> activity(const trace::RankTrace& r, const std::vector<trace::Interval>& exposed);

/// A piece of a group's title as its header draws it: its text in `color`, after `gap` px of
/// space, on a filled box of colour `box` when not 0 (the MODELED or MEASURED tag), which is
/// never broken.
struct TitlePiece {
  std::string text;
  Color color = 0, box = 0;
  float gap = 0;
};
/// A word of a title where it is drawn: `x` px from the title's left, on row `row` (0: the first).
struct PlacedWord {
  std::string text;
  Color color = 0, box = 0;
  float x = 0, width = 0;
  int row = 0;
};
/// The title's words wrapped to `width` px: each word (a piece's text split after its spaces; a
/// boxed piece whole, with 3 px of box each side) goes on the current row while it ends within
/// `width`, else starts the next; a word wider than `width` has a row to itself. With `max_rows`
/// (> 0), the words past that many rows are cut and the last row ends in "..." within `width`
/// (the words before it dropped as needed). `text_width` measures a string in px. The rows are
/// `back().row + 1`.
std::vector<PlacedWord> flow_title(const std::vector<TitlePiece>& pieces, float width,
                                   const std::function<float(const std::string&)>& text_width, int max_rows = 0);

/// What a group's header says it is: "MODELED on a100-nvlink" for a modeled twin (a group that
/// otherData.modeled_groups lists) or any group of a modeled trace (otherData.modeled), "MEASURED"
/// for a recorded group of a trace that holds twins beside it, "MEASURED on CPU, gloo (PyTorch
/// profiler)" for a PyTorch profiler run (its device and backend), and "" otherwise.
std::string group_tag(const trace::RunInfo& run, const std::string& strategy);
/// The recorded group a modeled twin replays ("ring" for "ring (modeled, a100-nvlink)", as
/// otherData.modeled_groups says), or "" for a group that is not a twin.
std::string twin_of(const trace::RunInfo& run, const std::string& strategy);
/// What a whole trace is, for the stats panel: "(MODELED on h100-nvlink)" for a modeled trace,
/// "(measured, and modeled on a100-nvlink)" for one with modeled twins, "(measured by the
/// PyTorch profiler)" for a PyTorch profiler run, else "(measured)".
std::string trace_tag(const trace::RunInfo& run);
/// How a trace's ranks were put on one clock, for the side panel: "clocks: " and RunInfo::clock
/// ("one host (vm), one clock: not shifted"), then each shifted rank's offset and its
/// uncertainty ("rank 1 shifted by -1234.567 us (+- 0 us)", the first four). Said for a PyTorch
/// profiler run, whose files may come from several hosts, and for a run whose ranks were
/// shifted (MPI); "" otherwise, or when the trace does not say.
std::string clock_words(const trace::TraceData& t);
/// A group's communication in a few words, for its header: "attention comm 59% hidden, 40 us
/// exposed/GPU; all comm 87 us exposed/GPU" (attention's own traffic, as the sublayer table
/// gives it, then all of it, as compare's exposed column; without attention traffic, all of it
/// alone: "all comm 0% hidden, ..."); "" for a group with no communication. `per`: what a row
/// is (row_unit); `all`: what all of it is ("PP and DP comm" for a modeled step, whose trace
/// draws the pipeline's sends and the gradient collectives, its TP and CP inside the chunks).
std::string comm_summary(const trace::StrategyMetrics& m, const std::string& per = "GPU", const std::string& all = "all comm");
/// The groups `--fit WHAT` frames: "all", "modeled" (the modeled groups: RunInfo::is_modeled),
/// "measured" (the others), or one group's label. Empty when nothing matches.
std::vector<const Group*> groups_to_fit(const TimelineLayout& layout, const trace::RunInfo& run, const std::string& what);

/// `--fit`'s WHAT[:PHASE] split: the whole text when it names groups (a group's name may hold a
/// colon), else what precedes the last colon and the phase after it ("" when none).
std::pair<std::string, std::string> split_fit(const TimelineLayout& layout, const trace::RunInfo& run, const std::string& what);
/// What `--fit WHAT[:PHASE]` frames: the groups of WHAT (groups_to_fit) over their layer
/// (forward + backward), or over one phase ("forward", "backward"), in group time (ns after
/// each group's zero) divided by `scale(group)` when given (the viewer's time scale of each
/// group's family). nullopt when no group matches or none has that phase.
struct Window {
  double begin = 0, end = 0;
};
std::optional<Window> fit_window(const TimelineLayout& layout, const trace::RunInfo& run, const std::string& what,
                                 const std::function<double(const Group&)>& scale = {});

/// A group's landmarks, ns on the trace's clock, by name: "all" (the extent of its events),
/// "layer" (its zero to its layer's end), each phase ("forward"), each sublayer of a phase
/// ("forward/attention") and each ring step of a phase ("forward/step 2"), each from the
/// earliest start over the group's ranks to the latest end.
using Landmarks = std::map<std::string, trace::Interval>;
Landmarks landmarks(const trace::TraceData& t, const Group& g);
/// Where a window of one group lies in another (a lesson step frames one group; every other
/// shows the same part of its own timeline, on its own clock): `landmark`, the innermost
/// landmark of `from` that holds `focus` and that `to` has too ("forward/step 0"; "all" when
/// no other does), and `window`, `focus` placed in `to`'s landmark in proportion. The measured
/// run's forward ring step 0 is its modeled twin's forward ring step 0, though the one takes
/// milliseconds on a CPU and the other microseconds on a modeled GPU.
struct Correspondence {
  std::string landmark;
  trace::Interval window;
};
Correspondence corresponding_window(const Landmarks& from, const trace::Interval& focus, const Landmarks& to);
/// A landmark in words, for a group's header: "forward/step 0" is "forward ring step 0",
/// "forward/attention" "forward attention", "all" "whole run"; others as they are ("layer").
std::string landmark_words(const std::string& landmark);

/// `--zoom START,END`: two times in group time (negative: before the forward), each a decimal
/// number with a unit (ns, us, ms, s; a bare number is seconds, as --at), START < END, within
/// +-9e15 ns. Throws ConfigError naming the problem.
trace::Interval parse_zoom(const std::string& text);

/// The exposed parts of a process's communication: comm intervals not covered by compute.
std::vector<trace::Interval> exposed_intervals(const trace::RankTrace& r);

/// Ring steps in time order: the earliest start of each (phase, step) over a strategy's ranks,
/// and the latest end.
struct StepMark {
  std::string strategy, phase;
  int step = 0;
  int64_t ts_ns = 0, end_ns = 0;
};
std::vector<StepMark> step_marks(const trace::TraceData& t);

/// A group header's ring steps: a band per step, from its start to the next step's start (the
/// last to its end), and labels that are never dropped. Each label, "F2" or "B0", starts at its
/// band and ends before the next band starts; when some does not fit so, every label of the
/// phase is its step's number alone ("2"); when some does not fit even so, the phase's bands get
/// one label, "F0-F62 (63 steps)" (moved right of the forward's when that one runs past the
/// backward's start). Labels never overlap.
struct StepBand {
  float x0 = 0, x1 = 0;
  std::string phase;
  int step = 0;
};
struct StepLabel {
  std::string text;
  float x0 = 0, x1 = 0;  ///< the text's box, pixels
};
struct StepStrip {
  std::vector<StepBand> bands;
  std::vector<StepLabel> labels;
};
/// `marks`: one group's steps, times in group time; `char_width`: pixels per character.
StepStrip step_strip(const std::vector<StepMark>& marks, const TimeAxis& axis, float char_width);

/// Over a group's ranks, a value's least, median and greatest, and which ranks hold the ends.
struct Spread {
  double min = 0, median = 0, max = 0;
  int min_rank = 0, max_rank = 0;
};
Spread spread(const std::vector<double>& values, const std::vector<int>& ranks);
/// The ranks whose value lies outside Tukey's fences, [Q1 - k, Q3 + k] with k = 1.5 IQR (at
/// least 5% of the median, so that ranks equal to the ns are not outliers of one another).
std::vector<int> outlier_ranks(const std::vector<double>& values, const std::vector<int>& ranks);
/// The next (dir > 0) or previous (dir < 0) step start after/before time t; nullopt at the ends.
std::optional<int64_t> step_after(const std::vector<StepMark>& marks, int64_t t, int dir);

// The attention matrix in tiles (trace/tile_map.h), as the viewer draws it.
using trace::Tile;
using trace::TileMap;
using trace::tile_map;
using trace::tiles_done;

/// Replay: the play head moves at `speed` (trace time per wall time) and stops at the end.
struct Replay {
  bool playing = false;
  double speed = 0.25;
  int64_t head_ns = 0;
  /// Advances by wall seconds; returns whether the head moved.
  bool advance(double wall_s, int64_t end_ns);
};

/// The event under (x, y), if any: a process index and event index. `axes`: each group's time
/// axis (indexed as layout.groups), in the trace's own ns (the group's zero and scale applied).
struct Hit {
  size_t process = 0, event = 0;
};
std::optional<Hit> hit_test(const trace::TraceData& t, const TimelineLayout& l, const std::vector<TimeAxis>& axes, float x, float y,
                            float lane_top);

using ringside::format_ns;     // 1234567 -> "1.23 ms"; 512 -> "512 ns" (core/units.h)
using ringside::format_bytes;  // 1536 -> "1.50 KiB" (core/units.h)

/// One line of a hovered event's details: "attention_forward  forward/attention step 2
/// 1.23 ms  4.30 GFLOP  3.49 GFLOP/s" and the like, as shown in the tooltip.
std::vector<std::string> describe_event(const trace::Event& e);

/// The memory of a process: samples of the total and of each category, and the peak over its
/// forward + backward (the whole trace when it has no phases), as the metrics count it.
struct MemorySeries {
  std::vector<int64_t> ts;
  std::vector<int64_t> total;
  std::array<std::vector<int64_t>, kNumMemCategories> by_category;
  int64_t peak = 0, peak_ts = 0;
};
MemorySeries memory_series(const trace::RankTrace& r);

}  // namespace ringside::viz

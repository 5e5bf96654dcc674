// Step-through lessons. Each lesson is a chapter (lessons/NN-name/README.md) and a scenario:
// it runs the real strategies on small sizes, traced, and turns what they did into steps that
// say what every rank holds and does (shapes, tokens, chunks, bytes). `ringside lesson NN`
// prints the steps and pauses between them; the trace it writes carries the same steps in
// otherData.lesson, so that `ringside-viewer --lesson NN` shows each step's text beside the
// part of the timeline it is about.
//
// Every number a step states is also recorded by name (Script::record), so that the tests can
// assert it against its formula or the paper it comes from.
#pragma once
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "comm/communicator.h"
#include "core/units.h"
#include "layer/config.h"
#include "model/bands.h"
#include "model/model.h"
#include "check/check.h"
#include "run/runner.h"
#include "trace/metrics.h"
#include "trace/trace_file.h"

namespace ringside::lessons {

/// The part of the trace a step is about: the events of one strategy (its label in the trace)
/// in [begin_ns, end_ns] on the trace's clock. The viewer zooms there and puts its play head at
/// end_ns.
struct Focus {
  std::string strategy;
  int64_t begin_ns = 0, end_ns = 0;
};

/// A question of a lesson's "Check yourself" step: asked in the lesson's own terms, answered with
/// a number the lesson computes from its runs or formulas (recorded as check.N, from 1, so that
/// the tests assert it against an independent formula and the chapter quotes it with a mark).
struct Question {
  std::string question;  ///< what is asked, one sentence
  double answer = 0;     ///< the number
  std::string shown;     ///< the answer as printed, e.g. "96 MiB" (formatted from `answer`)
  std::string why;       ///< how to get it: the formula with the lesson's symbols
};

struct Step {
  std::string title;
  std::string text;  ///< what the terminal prints and the viewer shows, lines ending in '\n'
  std::optional<Focus> focus;
  std::vector<std::string> tables;  ///< the step's tables (Table::str), in order: chapters quote them
};

/// A column-aligned text table: the first column left-aligned, the others right-aligned.
class Table {
 public:
  explicit Table(std::vector<std::string> header);
  Table& row(std::vector<std::string> cells);
  std::string str() const;  ///< with two spaces of indent and a rule under the header

 private:
  std::vector<std::vector<std::string>> rows_;
};

/// `text` broken at spaces into lines of at most `width` characters, each starting with
/// `indent` and ending in '\n' (a word longer than the width gets a line of its own).
std::string wrap(const std::string& text, size_t width, const std::string& indent = "");
/// printf into a std::string.
std::string fmt(const char* format, ...) __attribute__((format(printf, 1, 2)));
using ringside::format_bytes;  // 1536 -> "1.50 KiB" (core/units.h); exact counts are printed beside
using ringside::format_ns;     // 6900 -> "6.9 us" (core/units.h): modeled times
/// 1234567 -> "1,234,567".
std::string grouped(int64_t n);
/// Sorted token positions as their runs: {0..63, 448..511} -> "[0, 64) [448, 512)".
std::string token_runs(const std::vector<int64_t>& positions);

/// One lesson's scenario, built: its steps, the numbers they state and the trace of its runs.
struct Script {
  int number = 0;
  std::string slug, title;
  std::vector<Step> steps;
  nlohmann::json numbers = nlohmann::json::object();
  trace::TraceData trace;
  /// The runs' memory trackers: they outlive the tensors of the results run() returns.
  std::vector<std::shared_ptr<MemoryTracker>> trackers;
  /// The GPU profile the lesson's times are modeled on (`ringside lesson --hw`; the chapter
  /// quotes Lesson::hw). Every statement about time comes from it, except where a step says it
  /// compares named profiles (lesson 6's NVLink against InfiniBand, lesson 7's placement, lesson 11's
  /// GB200 NVL72 rack beside it).
  model::Hardware hw;
  /// The metrics of the modeled groups, by label, as modeled() and dry_run() computed them.
  std::map<std::string, trace::StrategyMetrics> modeled_metrics;

  /// Begins a step; what say() and table() add goes into it.
  Step& step(const std::string& title, std::optional<Focus> focus = std::nullopt);
  void say(const char* format, ...) __attribute__((format(printf, 2, 3)));
  /// `text` as one paragraph, wrapped at spaces to the side panel's 92 columns (text whose
  /// words vary with the profile, and trust's).
  void paragraph(const std::string& text);
  /// The layer's configuration line (LayerConfig::summary) and `after`, indented two spaces and
  /// wrapped to the side panel's 92 columns.
  void say_config(const LayerConfig& cfg, const char* after = "");
  void table(const Table& t);
  /// Adds a block of preformatted lines (a tile map) to the step, as a table: chapters quote it.
  void block(const std::string& lines);
  void blank();  ///< an empty line
  /// How far to trust the step's modeled times: the held-out error band of their kind
  /// (model/bands.h), one wrapped paragraph, recorded as band_low / band_high when there is one;
  /// with `hw`, it also says when no validation case ran on hw's GPU (model/validation.h).
  void trust(const model::RunKind& kind, const model::Hardware* hw = nullptr);
  /// Records a number the lesson states under `key` (the tests assert it) and returns it.
  double record(const std::string& key, double value);
  /// The lesson's last two steps: "Check yourself" asks the questions (the terminal pauses
  /// there, so the reader can work them out), "Answers" gives each answer and why, each as the
  /// step's one block (its table 1, which the chapter quotes). Each answer is recorded as
  /// check.1, check.2, ... Throws Error when there are fewer than three questions.
  void check_yourself(const std::vector<Question>& questions);

  /// Runs the plan forward and backward on its P local ranks (threads), traced; the ranks'
  /// timelines are added to `trace` under `label` (the name the viewer and the focus use). The
  /// first run's configuration is the trace's (RunInfo::config); a later run of another one
  /// records its own (RunInfo::group_configs), which its tile map is drawn from.
  /// Returns every rank's record. Throws whatever the run throws.
  std::vector<RunRecord> run(const RunPlan& plan, const std::string& label, const LocalOptions& local = {},
                             const RankOptions& rank = {});
  /// The modeled twin of the run `label`: its recorded schedule replayed on `hw` in bf16 (it
  /// joins the trace as the group modeled_name(label), right after the run), and its metrics.
  /// Deterministic: the same on every run and machine.
  const trace::StrategyMetrics& modeled(const std::string& label);
  /// A dry run of the plan at any size (model::dry_run: the strategy's own code, no math, no
  /// memory) modeled on `hw`; the modeled timeline joins the trace as modeled_name(label).
  /// Returns its metrics. With `on`, modeled on that profile instead of `hw`; with `options`,
  /// at its efficiency (the default: the rates real GPUs reach; "ideal": the datasheet roofline).
  /// With options.overlap_grad_reduce the dry run posts the gradient all-reduce in buckets and the
  /// model overlaps them with the backward (lesson 10); `rank` is the dry run's options (no
  /// grad_sync: the layer without its all-reduce).
  const trace::StrategyMetrics& dry_run(const RunPlan& plan, const std::string& label,
                                        const model::Hardware* on = nullptr, const model::ModelOptions& options = {},
                                        const RankOptions& rank = {});
  /// Puts `ranks`, a timeline modeled on `profile` (a dry run's replay, model::step_timeline's),
  /// at the end of the trace as the group modeled_name(label, profile), listed in
  /// otherData.modeled_groups with that profile and the `options` it was modeled under
  /// (model::insert_modeled_group); on `hw` itself, otherData's modeled_hardware names it too.
  /// Returns the group's entry, for more fields.
  trace::GroupInfo& add_modeled(std::vector<trace::RankTrace> ranks, const std::string& label, const model::Hardware& profile,
                                const model::ModelOptions& options);
  /// The trace label of `label`'s modeled timeline: "ring (modeled, a100-nvlink)".
  std::string modeled_name(const std::string& label, const model::Hardware* on = nullptr) const {
    return model::modeled_label(label, (on ? *on : hw).name);
  }

  /// The window of the events of `label` that match `pred`; nullopt when none does.
  std::optional<Focus> window(const std::string& label, const std::function<bool(const trace::Event&)>& pred) const;
  /// The window of a phase ("forward", "backward"; "": both) of `label`, over all its ranks.
  std::optional<Focus> phase(const std::string& label, const std::string& phase = "") const;
};

/// The plan of the configuration called `name` (parallel/config.h: "ring", "tp2xring2") for cfg on
/// P ranks, in `layout` (automatic: zigzag when causal). Throws ConfigError as resolve does.
RunPlan plan_of(const std::string& name, const LayerConfig& cfg, int P, Layout layout = Layout::automatic);

/// The worst relative (Frobenius) error over out, dx and every parameter gradient against `ref`
/// (check/check.h's errors_against).
double worst_error(const Tensor& out, const Tensor& dx, const LayerWeights& grads, const ReferenceRun& ref);

/// A lesson: its number, folder name ("03-ring-attention"), title and scenario, and the GPU
/// profile its chapter quotes the times on (what `ringside lesson N` models on without --hw).
struct Lesson {
  int number = 0;
  const char* slug = "";
  const char* title = "";
  void (*build)(Script&) = nullptr;
  const char* hw = model::kDefaultTwinHardware;
};

/// Lessons 1 to 11, in order.
const std::vector<Lesson>& all_lessons();
/// Lesson n; throws ConfigError naming the lessons that exist otherwise.
const Lesson& find_lesson(int n);

/// Runs lesson n's scenario (a few seconds on 2 cores) with its times modeled on `hw` ("": the
/// profile its chapter quotes, Lesson::hw) and returns its steps, numbers and trace
/// (otherData.lesson holds the steps; every run has its modeled twin on `hw` beside it). Throws
/// ConfigError for an unknown lesson or profile, or a profile the lesson's scenario cannot run on.
Script build_lesson(int n, const std::string& hw = "");

using trace::layer_ns;  // the slowest rank's forward + backward, ns (trace/metrics.h)
/// The share of attention's own traffic that runs under compute (its sublayer's overlap), %;
/// NaN when attention sends nothing.
double attention_hidden_pct(const trace::StrategyMetrics& m);

/// Where `ringside lesson n` writes its trace and the viewer looks for it, relative to the
/// working directory: "out/lessons/03-ring-attention.trace.json".
std::string default_trace_path(int n);
/// The lesson's chapter, relative to the repository: "lessons/03-ring-attention/README.md".
std::string readme_path(int n);

/// otherData.lesson of a lesson's trace: {number, slug, title, readme, steps: [{title, text,
/// focus: {strategy, begin_ns, end_ns} (absent when the step has none)}]}.
nlohmann::json lesson_json(const Script& s);
/// The steps of a trace's otherData.lesson; throws ringside::Error naming the field when it is
/// there but malformed, and returns nothing when the trace is not a lesson's.
std::vector<Step> steps_of(const nlohmann::json& other);

/// Where a chapter (or any Markdown file) has drifted from the run it quotes. It holds two kinds
/// of marks, both invisible when the Markdown is rendered:
///   <!-- step N table K -->   on the line before a fenced block: the block is table K (from 1)
///                             of step N, verbatim
///   <!-- text POINTER -->      the same for a string of doc (a JSON pointer: compare's tables)
///   <!--n:KEY-->VALUE         the number VALUE as written ("1,040", "4.048587", "5.3e-07", "59")
///                             is doc[KEY] rounded to the digits written; KEY/SCALE compares
///                             doc[KEY] / SCALE; KEY< says only that doc[KEY] is below VALUE (for
///                             what varies between machines). A KEY starting with '/' is a JSON
///                             pointer into doc (its scale after '//': /a/b//1e3), else a key.
/// Returns one line per mismatch naming the mark's line (empty: the text says what the run
/// said); a mark whose key, step or table does not exist is a mismatch too.
std::vector<std::string> chapter_drift(const std::string& markdown, const nlohmann::json& doc, const std::vector<Step>& steps);
/// The text with every mark rewritten from the run: the tables replaced, the numbers printed again
/// in the form they are written in (decimals, commas, exponent); `<` marks are left as they are.
/// Throws ConfigError for a malformed mark or one that names nothing in the run.
std::string update_chapter(const std::string& markdown, const nlohmann::json& doc, const std::vector<Step>& steps);
/// How many marks a text holds (a chapter without any is not checked against anything).
size_t chapter_marks(const std::string& markdown);
/// The problems of the marks' syntax alone, without a run: a comment that starts like a mark
/// (step, text, n:) but is not one, a block mark with no closed fenced block after it, a scale
/// that is not a finite positive number, marks whose spans overlap (a mark inside a block, two
/// marks on one block). chapter_drift and update_chapter report these too.
std::vector<std::string> chapter_syntax(const std::string& markdown);

/// Prints the script's steps to `out`. With `pause`, waits after each step for a line on `in`:
/// empty goes on, "q" quits; at the end of `in` it goes on without pausing. Returns the number
/// of steps shown.
size_t present(const Script& s, std::istream& in, std::ostream& out, bool pause);

}  // namespace ringside::lessons

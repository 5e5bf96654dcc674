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
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "comm/communicator.h"
#include "core/units.h"
#include "layer/config.h"
#include "parallel/harness.h"
#include "trace/trace_file.h"

namespace ringside::lessons {

/// The part of the trace a step is about: the events of one strategy (its label in the trace)
/// in [begin_ns, end_ns] on the trace's clock. The viewer zooms there and puts its play head at
/// end_ns.
struct Focus {
  std::string strategy;
  int64_t begin_ns = 0, end_ns = 0;
};

struct Step {
  std::string title;
  std::string text;  ///< what the terminal prints and the viewer shows, lines ending in '\n'
  std::optional<Focus> focus;
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
/// 1234567 -> "1,234,567".
std::string grouped(int64_t n);

/// One lesson's scenario, built: its steps, the numbers they state and the trace of its runs.
struct Script {
  int number = 0;
  std::string slug, title;
  std::vector<Step> steps;
  nlohmann::json numbers = nlohmann::json::object();
  trace::TraceData trace;
  /// The runs' memory trackers: they outlive the tensors of the results run() returns.
  std::vector<std::shared_ptr<MemoryTracker>> trackers;

  /// Begins a step; what say() and table() add goes into it.
  Step& step(const std::string& title, std::optional<Focus> focus = std::nullopt);
  void say(const char* format, ...) __attribute__((format(printf, 2, 3)));
  void table(const Table& t);
  void blank();  ///< an empty line
  /// Records a number the lesson states under `key` (the tests assert it) and returns it.
  double record(const std::string& key, double value);

  /// Runs `st` forward and backward on P local ranks (threads), traced; the ranks' timelines
  /// are added to `trace` under `label` (the name the viewer and the focus use). Returns every
  /// rank's result. Throws whatever the run throws (ConfigError for a bad configuration).
  std::vector<RankResult> run(const Strategy& st, const LayerConfig& cfg, int P, const std::string& label,
                              const LocalOptions& local = {});
  /// The single-device reference layer, forward and backward, in dtype dt (untraced).
  struct Reference {
    Tensor out, dx;
    LayerWeights grads;
    int64_t peak_saved = 0;  ///< bytes of saved activations at the forward's end (measured)
  };
  Reference reference(const LayerConfig& cfg, DType dt);
  /// The window of the events of `label` that match `pred`; nullopt when none does.
  std::optional<Focus> window(const std::string& label, const std::function<bool(const trace::Event&)>& pred) const;
  /// The window of a phase ("forward", "backward"; "": both) of `label`, over all its ranks.
  std::optional<Focus> phase(const std::string& label, const std::string& phase = "") const;
};

/// The worst relative (Frobenius) error over out, dx and every parameter gradient against `ref`.
double worst_error(const Tensor& out, const Tensor& dx, const LayerWeights& grads, const Script::Reference& ref);

/// A lesson: its number, folder name ("03-ring-attention"), title and scenario.
struct Lesson {
  int number = 0;
  const char* slug = "";
  const char* title = "";
  void (*build)(Script&) = nullptr;
};

/// Lessons 1 to 7, in order.
const std::vector<Lesson>& all_lessons();
/// Lesson n; throws ConfigError naming the lessons that exist otherwise.
const Lesson& find_lesson(int n);

/// Runs lesson n's scenario (a few seconds on 2 cores) and returns its steps, numbers and trace
/// (otherData.lesson holds the steps). Throws ConfigError for an unknown lesson.
Script build_lesson(int n);

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

/// Prints the script's steps to `out`. With `pause`, waits after each step for a line on `in`:
/// empty goes on, "q" quits; at the end of `in` it goes on without pausing. Returns the number
/// of steps shown.
size_t present(const Script& s, std::istream& in, std::ostream& out, bool pause);

}  // namespace ringside::lessons

// The lessons' common parts: the script builder, traced runs, the trace's otherData.lesson,
// and the terminal presenter. The scenarios themselves are lessons/NN-name/scenario.cpp.
#include "lessons/lesson.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <cctype>
#include <cstdarg>
#include <cstdlib>
#include <cstdio>
#include <istream>
#include <memory>
#include <ostream>

#include "core/error.h"
#include "device/backend.h"
#include "kernels/philox.h"
#include "layer/reference.h"
#include "layer/weights.h"

namespace ringside::lessons {

// The six scenarios (lessons/NN-name/scenario.cpp).
void memory_wall(Script& s);
void megatron_sp(Script& s);
void ring_attention(Script& s);
void load_balance(Script& s);
void ulysses(Script& s);
void choosing(Script& s);
void combining(Script& s);

const std::vector<Lesson>& all_lessons() {
  static const std::vector<Lesson> lessons = {
      {1, "01-memory-wall", "The activation memory wall", memory_wall},
      {2, "02-megatron-sp", "Megatron sequence parallelism", megatron_sp},
      {3, "03-ring-attention", "Ring attention", ring_attention},
      {4, "04-load-balance", "Causal load balance", load_balance},
      {5, "05-ulysses", "DeepSpeed-Ulysses", ulysses},
      {6, "06-choosing", "Choosing a strategy", choosing},
      {7, "07-combining", "Combining strategies", combining},
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

// ---- text ------------------------------------------------------------------------------

namespace {
std::string vformat(const char* format, va_list args) {
  va_list again;
  va_copy(again, args);
  const int n = std::vsnprintf(nullptr, 0, format, args);
  std::string out(size_t(std::max(n, 0)), '\0');
  std::vsnprintf(out.data(), out.size() + 1, format, again);
  va_end(again);
  return out;
}
}  // namespace

std::string fmt(const char* format, ...) {
  va_list args;
  va_start(args, format);
  std::string out = vformat(format, args);
  va_end(args);
  return out;
}

std::string wrap(const std::string& text, size_t width, const std::string& indent) {
  std::string out, line;
  size_t start = 0;
  while (start < text.size()) {
    size_t end = text.find(' ', start);
    if (end == std::string::npos) end = text.size();
    const std::string word = text.substr(start, end - start);
    if (!line.empty() && indent.size() + line.size() + 1 + word.size() > width) out += indent + line + '\n', line.clear();
    line += (line.empty() ? "" : " ") + word;
    start = end + 1;
  }
  if (!line.empty()) out += indent + line + '\n';
  return out;
}

namespace {
// "1234567" -> "1,234,567": the digits of a whole number in groups of three.
std::string group_digits(const std::string& digits) {
  std::string out;
  for (size_t i = 0; i < digits.size(); ++i) {
    if (i > 0 && (digits.size() - i) % 3 == 0) out += ',';
    out += digits[i];
  }
  return out;
}
}  // namespace

std::string grouped(int64_t n) {
  const std::string out = group_digits(std::to_string(n < 0 ? -n : n));
  return n < 0 ? "-" + out : out;
}

Table::Table(std::vector<std::string> header) { rows_.push_back(std::move(header)); }

Table& Table::row(std::vector<std::string> cells) {
  rows_.push_back(std::move(cells));
  return *this;
}

std::string Table::str() const {
  std::vector<size_t> width;
  for (const auto& r : rows_)
    for (size_t c = 0; c < r.size(); ++c) {
      if (width.size() <= c) width.push_back(0);
      width[c] = std::max(width[c], r[c].size());
    }
  std::string out;
  for (size_t i = 0; i < rows_.size(); ++i) {
    std::string line = " ";
    for (size_t c = 0; c < rows_[i].size(); ++c) {
      const std::string& cell = rows_[i][c];
      const std::string pad(width[c] - cell.size(), ' ');
      line += "  " + (c == 0 ? cell + pad : pad + cell);
    }
    while (!line.empty() && line.back() == ' ') line.pop_back();
    out += line + '\n';
    if (i == 0) {
      size_t total = 0;
      for (size_t w : width) total += w + 2;
      out += " " + std::string(total, '-') + '\n';
    }
  }
  return out;
}

// ---- the script ------------------------------------------------------------------------

Step& Script::step(const std::string& title, std::optional<Focus> focus) {
  steps.push_back(Step{title, "", std::move(focus)});
  return steps.back();
}

void Script::say(const char* format, ...) {
  RS_CHECK(!steps.empty(), "lesson ", number, ": say() before the first step");
  va_list args;
  va_start(args, format);
  steps.back().text += vformat(format, args) + '\n';
  va_end(args);
}

void Script::table(const Table& t) {
  RS_CHECK(!steps.empty(), "lesson ", number, ": table() before the first step");
  steps.back().text += t.str();
  steps.back().tables.push_back(t.str());
}

void Script::block(const std::string& lines) {
  RS_CHECK(!steps.empty(), "lesson ", number, ": block() before the first step");
  steps.back().text += lines;
  steps.back().tables.push_back(lines);
}

void Script::blank() {
  RS_CHECK(!steps.empty(), "lesson ", number, ": blank() before the first step");
  steps.back().text += '\n';
}

double Script::record(const std::string& key, double value) {
  numbers[key] = value;
  return value;
}

std::vector<RankResult> Script::run(const Strategy& st, const LayerConfig& cfg, int P, const std::string& label,
                                    const LocalOptions& local) {
  for (const trace::RankTrace& r : trace.ranks)
    RS_CHECK(r.strategy != label, "lesson ", number, ": two runs labelled ", label);
  if (trace.ranks.empty()) {
    // The first run describes the trace (the viewer's header and tile map read these).
    trace.other["producer"] = "ringside lesson " + std::to_string(number);
    trace.other["config"] = cfg.to_json();
    trace.other["layout"] = to_string(cfg.cp_layout());
    trace.other["ranks"] = P;
    trace.other["backend"] = "local";
    trace.other["dtype"] = "float32";
    trace.other["device"] = "cpu";
    trace.other["clock"] = "steady_clock, one process";
  }
  static const int64_t origin = trace::Clock::steady_now_ns();
  trace::Clock clock;
  clock.origin_ns = origin;
  const size_t first = trace.ranks.size();
  TraceSink sink{clock, &trace.ranks};
  trackers.push_back(std::make_shared<MemoryTracker>());  // outlives the results' tensors
  std::vector<RankResult> out = run_strategy_local(st, cfg, P, DType::f32, *trackers.back(), local, &sink);
  for (size_t i = first; i < trace.ranks.size(); ++i) trace.ranks[i].strategy = label;
  return out;
}

namespace {

// The metrics of one group of a trace, computed on that group alone.
trace::StrategyMetrics metrics_of(const trace::TraceData& t, const std::string& label) {
  trace::TraceData one;
  one.other = t.other;
  for (const trace::RankTrace& r : t.ranks)
    if (r.strategy == label) one.ranks.push_back(r);
  std::vector<trace::StrategyMetrics> m = trace::compute_metrics(one);
  RS_CHECK(m.size() == 1, "no timeline labelled ", label);
  return m[0];
}

}  // namespace

const trace::StrategyMetrics& Script::modeled(const std::string& label) {
  const std::string name = modeled_name(label);
  if (const auto it = modeled_metrics.find(name); it != modeled_metrics.end()) return it->second;
  model::add_modeled_twins(trace, hw, {}, label);
  return modeled_metrics[name] = metrics_of(trace, name);
}

const trace::StrategyMetrics& Script::dry_run(const Strategy& st, const LayerConfig& cfg, int P, const std::string& label,
                                              const model::Hardware* on, const model::ModelOptions& options) {
  const model::Hardware& profile = on ? *on : hw;
  const std::string name = modeled_name(label, on);
  for (const trace::RankTrace& r : trace.ranks) RS_CHECK(r.strategy != name, "lesson ", number, ": two runs labelled ", name);
  st.validate(cfg, P);
  const Strategy resolved = resolve_strategy(st, P);
  trackers.push_back(std::make_shared<MemoryTracker>());
  trace::TraceData modeled = model::model_trace(model::dry_run(resolved, cfg, P, *trackers.back()), profile, options);
  nlohmann::json& entry = model::insert_modeled_group(trace, std::move(modeled.ranks), label, profile, options.dtype, trace.ranks.size());
  entry["dry_run"] = cfg.to_json();
  entry["efficiency"] = options.efficiency;
  if (!on) trace.other["modeled_hardware"] = hw.to_json();
  return modeled_metrics[name] = metrics_of(trace, name);
}

double attention_hidden_pct(const trace::StrategyMetrics& m) {
  const std::optional<trace::Breakdown> b = trace::sublayer_comm(m, "attention");
  return b ? b->overlap_pct() : std::nan("");
}

double worst_error(const Tensor& out, const Tensor& dx, const LayerWeights& grads, const Script::Reference& ref) {
  double worst = std::max(relative_error(out, ref.out), relative_error(dx, ref.dx));
  const auto mine = grads.named(), theirs = ref.grads.named();
  for (size_t i = 0; i < mine.size(); ++i) worst = std::max(worst, relative_error(*mine[i].second, *theirs[i].second));
  return worst;
}

Script::Reference Script::reference(const LayerConfig& cfg, DType dt) {
  trackers.push_back(std::make_shared<MemoryTracker>());
  const AllocTag tag{0, MemCategory::workspace, trackers.back().get()};
  auto be = make_cpu_backend();
  const LayerWeights w = init_weights(cfg, dt, tag);
  const Tensor x = random_input(cfg, static_cast<uint32_t>(RngSite::input_x), dt, tag);
  const Tensor dout = random_input(cfg, static_cast<uint32_t>(RngSite::input_dout), dt, tag);
  Reference r;
  ForwardResult fwd = dt == DType::f64 ? reference_forward<double>(cfg, w, x, *be, tag) : reference_forward<float>(cfg, w, x, *be, tag);
  r.peak_saved = trackers.back()->peak(0, MemCategory::activations);
  Gradients g = dt == DType::f64 ? reference_backward<double>(cfg, w, fwd.saved, dout, *be, tag)
                                 : reference_backward<float>(cfg, w, fwd.saved, dout, *be, tag);
  r.out = std::move(fwd.out), r.dx = std::move(g.dx), r.grads = std::move(g.grads);
  return r;
}

std::optional<Focus> Script::window(const std::string& label, const std::function<bool(const trace::Event&)>& pred) const {
  std::optional<Focus> f;
  for (const trace::RankTrace& r : trace.ranks) {
    if (r.strategy != label) continue;
    for (const trace::Event& e : r.events)
      if (pred(e)) {
        if (!f) f = Focus{label, e.ts_ns, e.end_ns()};
        f->begin_ns = std::min(f->begin_ns, e.ts_ns);
        f->end_ns = std::max(f->end_ns, e.end_ns());
      }
  }
  return f;
}

std::optional<Focus> Script::phase(const std::string& label, const std::string& name) const {
  return window(label, [&](const trace::Event& e) { return e.cat == "phase" && (name.empty() || e.name == name); });
}

Script build_lesson(int n, const std::string& hw) {
  const Lesson& l = find_lesson(n);
  Script s;
  s.number = l.number, s.slug = l.slug, s.title = l.title;
  s.hw = model::load_hardware(hw);
  l.build(s);
  model::add_modeled_twins(s.trace, s.hw);  // every run's twin, also of those no step asked about
  s.trace.other["lesson"] = lesson_json(s);
  return s;
}

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
    Step s{title->get<std::string>(), text->get<std::string>(), std::nullopt};
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

// ---- chapters and their runs ----------------------------------------------------------------

namespace {

// A number as a text writes it: its value, and the half-unit of its last digit.
struct Written {
  double value = 0, half_unit = 0;
  bool commas = false, exponent = false;
  int decimals = 0;
};

std::optional<Written> parse_written(const std::string& text) {
  Written w;
  std::string digits;
  for (char ch : text)
    if (ch == ',') w.commas = true;
    else digits += ch;
  char* end = nullptr;
  w.value = std::strtod(digits.c_str(), &end);
  if (digits.empty() || *end) return std::nullopt;
  const size_t e = digits.find_first_of("eE"), dot = digits.find('.');
  const std::string mantissa = digits.substr(0, e);
  w.decimals = dot == std::string::npos || dot > mantissa.size() ? 0 : int(mantissa.size() - dot - 1);
  w.exponent = e != std::string::npos;
  const int exp10 = w.exponent ? std::atoi(digits.c_str() + e + 1) : 0;
  w.half_unit = 0.5 * std::pow(10.0, exp10 - w.decimals);
  return w;
}

std::string rewrite(double v, const Written& like) {
  if (like.exponent) return fmt("%.*e", like.decimals, v);
  std::string out = fmt("%.*f", like.decimals, v);
  if (!like.commas) return out;
  const size_t dot = out.find('.');
  std::string whole = out.substr(0, dot), frac = dot == std::string::npos ? "" : out.substr(dot);
  const bool negative = !whole.empty() && whole[0] == '-';
  if (negative) whole.erase(0, 1);
  return (negative ? "-" : "") + group_digits(whole) + frac;
}

// The value a mark's key names in doc, or an explanation of why there is none.
std::optional<double> lookup(const nlohmann::json& doc, const std::string& key, std::string& why) {
  const nlohmann::json* j = nullptr;
  try {
    if (!key.empty() && key[0] == '/') {
      const nlohmann::json::json_pointer ptr(key);
      if (doc.contains(ptr)) j = &doc.at(ptr);
    } else if (doc.is_object() && doc.contains(key)) {
      j = &doc.at(key);
    }
  } catch (const std::exception& e) {
    why = e.what();
    return std::nullopt;
  }
  if (!j || !j->is_number()) {
    why = "the run has no number " + key;
    return std::nullopt;
  }
  return j->get<double>();
}

// One mark in a text: where it is, and what it says.
struct Mark {
  size_t begin = 0, end = 0;  // the span update_chapter rewrites: the number, or the block's lines
  size_t line = 0;
  bool table = false;
  int step = 0, index = 0;    // table marks
  std::string key;            // number marks
  double scale = 1;
  bool below = false;
  std::string written;        // the number, or the block, as the text has it
};

// What a block mark says the block must be: a step's table, or a string of the document.
std::optional<std::string> block_of(const Mark& m, const nlohmann::json& doc, const std::vector<Step>& steps, std::string& why) {
  if (!m.key.empty()) {
    try {
      const nlohmann::json::json_pointer ptr(m.key);
      if (doc.contains(ptr) && doc.at(ptr).is_string()) return doc.at(ptr).get<std::string>();
    } catch (const std::exception& e) {
      why = fmt("line %zu: %s", m.line, e.what());
      return std::nullopt;
    }
    why = fmt("line %zu: the run has no text %s", m.line, m.key.c_str());
    return std::nullopt;
  }
  if (m.step < 1 || size_t(m.step) > steps.size() || m.index < 1 || size_t(m.index) > steps[size_t(m.step - 1)].tables.size()) {
    why = fmt("line %zu: step %d has no table %d", m.line, m.step, m.index);
    return std::nullopt;
  }
  return steps[size_t(m.step - 1)].tables[size_t(m.index - 1)];
}

// The fenced block on the line after a block mark (whose comment closes at `close`): its content
// lines become the mark's span. False, with the problem said, when there is none or it is open.
bool fenced_block(const std::string& text, size_t close, Mark& m, std::vector<std::string>& problems) {
  const size_t eol = text.find('\n', close);
  if (eol == std::string::npos || text.compare(eol + 1, 3, "```") != 0) {
    problems.push_back(fmt("line %zu: a block mark must be followed by a fenced block", m.line));
    return false;
  }
  const size_t opened = text.find('\n', eol + 1);  // the end of the opening fence's line
  const size_t fence = opened == std::string::npos ? opened : text.find("\n```", opened);
  if (fence == std::string::npos) {
    problems.push_back(fmt("line %zu: the fenced block is not closed", m.line));
    return false;
  }
  m.begin = opened + 1, m.end = fence + 1;
  m.written = text.substr(m.begin, m.end - m.begin);
  return true;
}

std::vector<Mark> find_marks(const std::string& text, std::vector<std::string>& problems) {
  std::vector<Mark> marks;
  size_t line = 1, counted = 0;  // the line of text[counted], counted as the scan moves on
  auto line_of = [&](size_t pos) {
    line += size_t(std::count(text.begin() + std::ptrdiff_t(counted), text.begin() + std::ptrdiff_t(pos), '\n'));
    counted = pos;
    return line;
  };
  size_t covered = 0;  // the end of the last mark's span: the next mark must start after it
  for (size_t at = text.find("<!--"); at != std::string::npos; at = text.find("<!--", at + 4)) {
    const size_t close = text.find("-->", at);
    if (close == std::string::npos) break;
    const std::string body = text.substr(at + 4, close - at - 4);
    const size_t first = body.find_first_not_of(' ');
    const std::string word = first == std::string::npos ? "" : body.substr(first, body.find_first_of(" :", first) - first);
    const bool number = body.rfind("n:", 0) == 0;
    if (!number && word != "step" && word != "text") continue;  // a comment of the chapter's own
    Mark m;
    m.line = line_of(at);
    if (at < covered) {
      problems.push_back(fmt("line %zu: a mark inside another mark's block or number, or two marks on one block", m.line));
      continue;
    }
    char tail = 0;
    if (int step = 0, index = 0; word == "step") {
      if (std::sscanf(body.c_str(), " step %9d table %9d %c", &step, &index, &tail) != 2 || step < 1 || index < 1) {
        problems.push_back(fmt("line %zu: '%s' is not a mark (<!-- step N table K -->, N and K from 1)", m.line,
                               detail::shown_input(body).c_str()));
        continue;
      }
      m.table = true, m.step = step, m.index = index;
      if (!fenced_block(text, close, m, problems)) continue;
    } else if (char pointer[256]; word == "text") {
      if (std::sscanf(body.c_str(), " text %255s %c", pointer, &tail) != 1 || pointer[0] != '/') {
        problems.push_back(fmt("line %zu: '%s' is not a mark (<!-- text /json/pointer -->)", m.line,
                               detail::shown_input(body).c_str()));
        continue;
      }
      // A fenced block that is a string of the run's document, verbatim (compare's tables).
      m.table = true, m.key = pointer;
      if (!fenced_block(text, close, m, problems)) continue;
    } else {
      std::string key = body.substr(2);
      if (!key.empty() && key.back() == '<') m.below = true, key.pop_back();
      // A scale: KEY/SCALE, or for a pointer /a/b//SCALE.
      const size_t cut = !key.empty() && key[0] == '/' ? key.find("//") : key.rfind('/');
      if (cut != std::string::npos && cut > 0) {
        const std::string scale = key.substr(cut + (key[0] == '/' ? 2 : 1));
        char* end = nullptr;
        m.scale = std::strtod(scale.c_str(), &end);
        if (scale.empty() || *end || !std::isfinite(m.scale) || !(m.scale >= 1e-30) || m.scale > 1e30) {
          problems.push_back(fmt("line %zu: the scale of %s is not a finite positive number", m.line, detail::shown_input(body).c_str()));
          continue;
        }
        key = key.substr(0, cut);
      }
      if (key.empty()) {
        problems.push_back(fmt("line %zu: a number mark needs a key (<!--n:KEY-->)", m.line));
        continue;
      }
      m.key = key;
      m.begin = close + 3;
      m.end = m.begin;
      while (m.end < text.size() && (std::isdigit(static_cast<unsigned char>(text[m.end])) || text[m.end] == '.' ||
                                     text[m.end] == ',' || text[m.end] == '-' || text[m.end] == 'e' || text[m.end] == '+'))
        ++m.end;
      while (m.end > m.begin && (text[m.end - 1] == ',' || text[m.end - 1] == '.')) --m.end;  // the sentence's own
      m.written = text.substr(m.begin, m.end - m.begin);
    }
    covered = std::max(close + 3, m.end);
    marks.push_back(m);
  }
  return marks;
}

}  // namespace

std::vector<std::string> chapter_syntax(const std::string& markdown) {
  std::vector<std::string> problems;
  find_marks(markdown, problems);
  return problems;
}

size_t chapter_marks(const std::string& markdown) {
  std::vector<std::string> ignored;
  return find_marks(markdown, ignored).size();
}

std::vector<std::string> chapter_drift(const std::string& markdown, const nlohmann::json& doc, const std::vector<Step>& steps) {
  std::vector<std::string> problems;
  for (const Mark& m : find_marks(markdown, problems)) {
    if (m.table) {
      std::string why;
      const std::optional<std::string> want = block_of(m, doc, steps, why);
      if (!want) problems.push_back(why);
      else if (m.written != *want)
        problems.push_back(m.key.empty() ? fmt("line %zu: step %d table %d is now\n%s", m.line, m.step, m.index, want->c_str())
                                         : fmt("line %zu: the text %s is now\n%s", m.line, m.key.c_str(), want->c_str()));
      continue;
    }
    std::string why;
    const std::optional<double> v = lookup(doc, m.key, why);
    const std::optional<Written> w = parse_written(m.written);
    if (!v) {
      problems.push_back(fmt("line %zu: %s", m.line, why.c_str()));
    } else if (!w) {
      problems.push_back(fmt("line %zu: '%s' after the mark of %s is not a number", m.line, m.written.c_str(), m.key.c_str()));
    } else if (m.below ? !(*v / m.scale < w->value)
                       : !(std::fabs(*v / m.scale - w->value) <= w->half_unit * (1 + 1e-9) + 1e-12 * std::fabs(w->value))) {
      problems.push_back(fmt("line %zu: %s is %s, the run says %s", m.line, m.key.c_str(), m.written.c_str(),
                             m.below ? fmt("%.3g (not below it)", *v / m.scale).c_str() : rewrite(*v / m.scale, *w).c_str()));
    }
  }
  return problems;
}

std::string update_chapter(const std::string& markdown, const nlohmann::json& doc, const std::vector<Step>& steps) {
  std::vector<std::string> problems;
  std::vector<Mark> marks = find_marks(markdown, problems);
  if (!problems.empty()) throw ConfigError(problems.front());
  std::string out = markdown;
  for (auto it = marks.rbegin(); it != marks.rend(); ++it) {  // from the end: earlier offsets stay valid
    const Mark& m = *it;
    std::string with;
    if (m.table) {
      std::string why;
      const std::optional<std::string> block = block_of(m, doc, steps, why);
      if (!block) throw ConfigError(why);
      with = *block;
    } else {
      std::string why;
      const std::optional<double> v = lookup(doc, m.key, why);
      if (!v) throw ConfigError(fmt("line %zu: %s", m.line, why.c_str()));
      const std::optional<Written> w = parse_written(m.written);
      if (!w) throw ConfigError(fmt("line %zu: '%s' is not a number", m.line, m.written.c_str()));
      if (m.below) continue;
      if (!std::isfinite(*v / m.scale)) throw ConfigError(fmt("line %zu: %s / the scale is not a finite number", m.line, m.key.c_str()));
      with = rewrite(*v / m.scale, *w);
    }
    out.replace(m.begin, m.end - m.begin, with);
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

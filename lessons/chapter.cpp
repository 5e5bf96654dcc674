// The chapters' drift marks: finding them in a Markdown text, checking each against the run it
// quotes (chapter_drift) and rewriting them from the run (update_chapter). lesson.h gives the
// marks' syntax.
#include "lessons/lesson.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdio>
#include <cstdlib>

#include "core/error.h"
#include "lessons/text.h"

namespace ringside::lessons {

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

}  // namespace ringside::lessons

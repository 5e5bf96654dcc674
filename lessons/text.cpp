// The lessons' text: printf into a string, word wrap, digit groups and column-aligned tables.
#include "lessons/text.h"

#include <algorithm>
#include <cstdio>

#include "lessons/lesson.h"

namespace ringside::lessons {

std::string vformat(const char* format, va_list args) {
  va_list again;
  va_copy(again, args);
  const int n = std::vsnprintf(nullptr, 0, format, args);
  std::string out(size_t(std::max(n, 0)), '\0');
  std::vsnprintf(out.data(), out.size() + 1, format, again);
  va_end(again);
  return out;
}

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

// "1234567" -> "1,234,567": the digits of a whole number in groups of three.
std::string group_digits(const std::string& digits) {
  std::string out;
  for (size_t i = 0; i < digits.size(); ++i) {
    if (i > 0 && (digits.size() - i) % 3 == 0) out += ',';
    out += digits[i];
  }
  return out;
}

std::string grouped(int64_t n) {
  const std::string out = group_digits(std::to_string(n < 0 ? -n : n));
  return n < 0 ? "-" + out : out;
}

std::string token_runs(const std::vector<int64_t>& positions) {
  std::string out;
  for (size_t i = 0; i < positions.size();) {
    size_t j = i;
    while (j + 1 < positions.size() && positions[j + 1] == positions[j] + 1) ++j;
    out += (out.empty() ? "" : " ") + fmt("[%lld, %lld)", (long long)positions[i], (long long)(positions[j] + 1));
    i = j + 1;
  }
  return out;
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

}  // namespace ringside::lessons

// The text helpers that lessons/*.cpp share beyond lesson.h (private to the lessons' files).
#pragma once
#include <cstdarg>
#include <string>

namespace ringside::lessons {

/// vprintf into a std::string (fmt and Script::say).
std::string vformat(const char* format, va_list args);
/// "1234567" -> "1,234,567": the digits of a whole number in groups of three (grouped, and the
/// chapters' numbers rewritten with commas).
std::string group_digits(const std::string& digits);

}  // namespace ringside::lessons

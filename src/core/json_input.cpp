#include "core/json_input.h"

#include <cmath>

#include "core/error.h"

namespace ringside {

namespace {

// One pass over the text, skipping strings: fails at the first bracket past the limit.
void check_nesting(std::string_view text, const std::string& source) {
  int depth = 0;
  bool in_string = false;
  for (size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (in_string) {
      if (c == '\\') ++i;  // an escaped character, perhaps a quote
      else if (c == '"') in_string = false;
    } else if (c == '"') {
      in_string = true;
    } else if (c == '[' || c == '{') {
      if (++depth > kMaxJsonNesting)
        throw Error(detail::concat(source, ": JSON nested more than ", kMaxJsonNesting, " levels deep (at byte ", i, ")"));
    } else if (c == ']' || c == '}') {
      --depth;
    }
  }
}

}  // namespace

nlohmann::json parse_json(std::string_view text, const std::string& source) {
  check_nesting(text, source);
  try {
    return nlohmann::json::parse(text.begin(), text.end());
  } catch (const nlohmann::json::exception& e) {
    // nlohmann says where: "[json.exception.parse_error.101] parse error at line 1, column 812: ...".
    std::string what = e.what();
    if (auto p = what.find("] "); what.starts_with("[json.exception") && p != std::string::npos) what = what.substr(p + 2);
    throw Error(source + ": not valid JSON (truncated or corrupt?): " + what);
  }
}

std::string json_text(const nlohmann::json& j, const std::string& key, const std::string& where) {
  const auto it = j.find(key);
  if (it == j.end() || !it->is_string() || it->get<std::string>().empty())
    throw ConfigError(where + key + " must be a non-empty string");
  return it->get<std::string>();
}

const nlohmann::json& json_object(const nlohmann::json& j, const std::string& key, const std::string& where) {
  const auto it = j.find(key);
  if (it == j.end() || !it->is_object()) throw ConfigError(where + key + " must be an object");
  return *it;
}

double json_number(const nlohmann::json& j, const std::string& key, const std::string& where, double lo, double hi) {
  const auto it = j.find(key);
  if (it == j.end() || !it->is_number() || !std::isfinite(it->get<double>()) || it->get<double>() < lo || it->get<double>() > hi)
    throw ConfigError(detail::concat(where, key, " must be a number in [", lo, ", ", hi, "]"));
  return it->get<double>();
}

}  // namespace ringside

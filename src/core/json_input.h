// JSON that comes from outside (a trace file, a hardware profile): parsed with its nesting
// bounded, so that no input can recurse a reader off its stack.
#pragma once
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

namespace ringside {

/// Arrays and objects nested deeper than this are refused. ringside's own files nest 4 deep;
/// copying, comparing or printing a nlohmann::json recurses once per level.
inline constexpr int kMaxJsonNesting = 64;

/// Parses `text`. Throws ringside::Error naming `source`: "<source>: not valid JSON (truncated
/// or corrupt?): parse error at line 1, column 812: ..." or "<source>: JSON nested more than
/// 64 levels deep (at byte N)".
nlohmann::json parse_json(std::string_view text, const std::string& source);

/// The fields of an input file's object, checked. `where` prefixes the message ("case x: source.").
/// Each throws ConfigError: "<where><key> must be a non-empty string", "... must be an object",
/// "... must be a number in [lo, hi]" (finite).
std::string json_text(const nlohmann::json& j, const std::string& key, const std::string& where);
const nlohmann::json& json_object(const nlohmann::json& j, const std::string& key, const std::string& where);
double json_number(const nlohmann::json& j, const std::string& key, const std::string& where, double lo, double hi);

}  // namespace ringside

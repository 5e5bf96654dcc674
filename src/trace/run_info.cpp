#include "trace/run_info.h"

namespace ringside::trace {

namespace {

const char* const kGroups = "modeled_groups";

std::string text(const nlohmann::json& obj, const char* key) {
  const auto it = obj.find(key);
  return it != obj.end() && it->is_string() ? it->get<std::string>() : "";
}

// A profile's name where otherData keeps it: a string, or an object's "name" ("" when neither).
std::string profile_name(const nlohmann::json& obj, const char* key) {
  const auto h = obj.find(key);
  if (h == obj.end()) return "";
  if (h->is_string()) return h->get<std::string>();
  if (h->is_object()) return text(*h, "name");
  return "";
}

}  // namespace

const GroupInfo* RunInfo::group(const std::string& label) const {
  const auto it = groups.find(label);
  return it == groups.end() ? nullptr : &it->second;
}

RunInfo run_info(const nlohmann::json& other) {
  RunInfo info;
  if (!other.is_object()) return info;
  info.producer = text(other, "producer");
  if (const auto c = other.find("config"); c != other.end() && c->is_object()) info.config = *c;
  info.layout = text(other, "layout");
  info.device = text(other, "device");
  info.dtype = text(other, "dtype");
  if (const auto m = other.find("modeled"); m != other.end() && m->is_boolean()) info.modeled = m->get<bool>();
  info.hardware = profile_name(other, "hardware");
  info.model_dtype = text(other, "model_dtype");
  info.twins_hardware = profile_name(other, "modeled_hardware");
  if (const auto g = other.find(kGroups); g != other.end() && g->is_object())
    for (const auto& [label, entry] : g->items()) {
      if (!entry.is_object()) continue;
      GroupInfo group{text(entry, "of"), profile_name(entry, "hardware"), text(entry, "dtype"), std::nullopt};
      if (const auto d = entry.find("dry_run"); d != entry.end() && d->is_object()) group.dry_run = *d;
      info.groups.emplace(label, std::move(group));
    }
  return info;
}

nlohmann::json& put_group(nlohmann::json& other, const std::string& label, const GroupInfo& group) {
  if (!other.contains(kGroups) || !other[kGroups].is_object()) other[kGroups] = nlohmann::json::object();
  nlohmann::json& entry = other[kGroups][label];
  entry = {{"of", group.of}, {"hardware", group.hardware}, {"dtype", group.dtype}};
  if (group.dry_run) entry["dry_run"] = *group.dry_run;
  return entry;
}

void drop_groups(nlohmann::json& other) {
  if (!other.is_object()) return;  // a trace without otherData has none
  other.erase(kGroups);
  other.erase("modeled_hardware");
}

}  // namespace ringside::trace

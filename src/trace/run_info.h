// What a trace's otherData says about its run, typed. otherData is the Chrome trace's free-form
// object, and a foreign or hand-edited file may hold anything there: run_info reads it once,
// defensively (a field of the wrong type is absent), and every reader (the model, compare, the
// tile map, the viewer) asks the RunInfo instead of the JSON. The modeled groups (the twins
// compare and the lessons put beside a recorded run) are written by put_group alone.
#pragma once
#include <map>
#include <optional>
#include <string>

#include <nlohmann/json.hpp>

namespace ringside::trace {

/// A modeled group of a trace: otherData.modeled_groups[label].
struct GroupInfo {
  std::string of;        ///< the recorded group it replays ("ring" for "ring (modeled, a100-nvlink)")
  std::string hardware;  ///< the profile it is modeled on
  std::string dtype;     ///< the element type it is modeled in ("bf16")
  std::optional<nlohmann::json> dry_run;  ///< a dry run's configuration (the layer, its layout), when it is one
};

struct RunInfo {
  std::string producer;  ///< "ringside compare", "ringside model (dry run)", ...
  std::optional<nlohmann::json> config;  ///< the layer and its run's layout and recompute (RunPlan::config_json)
  std::string layout;    ///< the context-parallel layout the run asked for
  std::string device;    ///< "cpu", "cuda", "h100-nvlink (modeled)"
  std::string dtype;     ///< "float32", "bfloat16"
  bool modeled = false;  ///< the whole trace is a model's (ringside model, plan)
  std::string hardware;  ///< a modeled trace's profile
  std::string model_dtype;     ///< a modeled trace's element type ("bf16")
  std::string twins_hardware;  ///< the profile of the twins beside a recorded run (otherData.modeled_hardware)
  std::map<std::string, GroupInfo> groups;  ///< the modeled groups, by label

  /// The modeled group called `label`, or null for a recorded one.
  const GroupInfo* group(const std::string& label) const;
  /// Whether the group called `label` is modeled: a twin, or any group of a modeled trace.
  bool is_modeled(const std::string& label) const { return modeled || group(label) != nullptr; }
};

/// otherData read into a RunInfo (never throws: what is missing or mistyped is left empty).
RunInfo run_info(const nlohmann::json& other);

/// Lists a modeled group in otherData.modeled_groups as {of, hardware, dtype} (and dry_run),
/// replacing any entry of that label; returns the entry, for more fields of its producer's.
nlohmann::json& put_group(nlohmann::json& other, const std::string& label, const GroupInfo& group);

/// otherData without its modeled groups and their profile: what a model of the recorded run keeps.
void drop_groups(nlohmann::json& other);

}  // namespace ringside::trace

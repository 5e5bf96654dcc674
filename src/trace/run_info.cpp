#include "trace/run_info.h"

#include <algorithm>
#include <iterator>

#include "core/error.h"

namespace ringside::trace {

namespace {

// What an otherData key a RunInfo owns holds, as run_info reads it and check_run_info requires.
enum class Holds {
  text,           // a string
  count,          // an integer >= 1
  flag,           // a boolean
  profile,        // a hardware profile: its name, or an object (Hardware::to_json) with a string "name"
  configuration,  // a run's configuration (RunPlan::config_json): an object, the fields readers use typed
  configs,        // group label -> configuration
  groups,         // modeled group label -> its description (GroupInfo)
  modeling,       // the options a run was modeled under (ModelingInfo)
};
struct Key {
  const char* name;
  Holds holds;
};
// The otherData keys a RunInfo owns (ringside_version is the writer's own): the one list both the
// reader's checks and without_run_info go by.
constexpr Key kKeys[] = {{"producer", Holds::text},          {"ringside_version", Holds::text},
                         {"config", Holds::configuration},   {"layout", Holds::text},
                         {"ranks", Holds::count},            {"backend", Holds::text},
                         {"device", Holds::text},            {"dtype", Holds::text},
                         {"clock", Holds::text},             {"modeled", Holds::flag},
                         {"hardware", Holds::profile},       {"model_dtype", Holds::text},
                         {"model_efficiency", Holds::text},  {"model_attention_kernel", Holds::text},
                         {"modeled_hardware", Holds::profile}, {"modeled_groups", Holds::groups},
                         {"group_configs", Holds::configs},  {"modeling", Holds::modeling}};
// The fields of one modeled group (otherData.modeled_groups[label]): GroupInfo's.
constexpr Key kGroupKeys[] = {{"of", Holds::text},      {"hardware", Holds::profile},         {"dtype", Holds::text},
                              {"dry_run", Holds::configuration}, {"efficiency", Holds::text}, {"layers", Holds::count},
                              {"modeling", Holds::modeling}};
// The fields of ModelingInfo as otherData (and --json) holds them: the strings (the two that are
// null when they do not apply marked so) and the booleans.
struct ModelingText {
  const char* name;
  std::string ModelingInfo::*field;
  bool nullable;
};
constexpr ModelingText kModelingTexts[] = {{"dtype", &ModelingInfo::dtype, false},       {"efficiency", &ModelingInfo::efficiency, false},
                                           {"attention_kernel", &ModelingInfo::attention_kernel, true},
                                           {"stack", &ModelingInfo::stack, false},       {"merge", &ModelingInfo::merge, false},
                                           {"fp8_recipe", &ModelingInfo::fp8_recipe, true}};
struct ModelingFlag {
  const char* name;
  bool ModelingInfo::*field;
};
constexpr ModelingFlag kModelingFlags[] = {{"tp_comm_overlap", &ModelingInfo::tp_comm_overlap},
                                           {"grad_reduce_fp32", &ModelingInfo::grad_reduce_fp32},
                                           {"overlap_grad_reduce", &ModelingInfo::overlap_grad_reduce}};

std::string text(const nlohmann::json& obj, const char* key) {
  const auto it = obj.find(key);
  return it != obj.end() && it->is_string() ? it->get<std::string>() : "";
}

// A profile as otherData keeps it: an object (Hardware::to_json) or a name; null when neither.
nlohmann::json profile(const nlohmann::json& obj, const char* key) {
  const auto h = obj.find(key);
  return h != obj.end() && (h->is_string() || h->is_object()) ? *h : nlohmann::json();
}

// A profile's name: the string, or an object's "name" ("" when neither).
std::string name_of(const nlohmann::json& p) {
  if (p.is_string()) return p.get<std::string>();
  return p.is_object() ? text(p, "name") : "";
}

void put_text(nlohmann::json& other, const char* key, const std::string& value) {
  if (!value.empty()) other[key] = value;
}

// otherData's (or a group's) "modeling", read defensively: none when it is not an object.
std::optional<ModelingInfo> modeling_of(const nlohmann::json& obj) {
  const auto m = obj.find("modeling");
  if (m == obj.end() || !m->is_object()) return std::nullopt;
  ModelingInfo info;
  for (const ModelingText& t : kModelingTexts) info.*t.field = text(*m, t.name);
  for (const ModelingFlag& f : kModelingFlags)
    if (const auto v = m->find(f.name); v != m->end() && v->is_boolean()) info.*f.field = v->get<bool>();
  return info;
}

}  // namespace

nlohmann::json ModelingInfo::to_json() const {
  nlohmann::json j = nlohmann::json::object();
  for (const ModelingText& t : kModelingTexts)
    j[t.name] = t.nullable && (this->*t.field).empty() ? nlohmann::json(nullptr) : nlohmann::json(this->*t.field);
  for (const ModelingFlag& f : kModelingFlags) j[f.name] = this->*f.field;
  return j;
}

const GroupInfo* RunInfo::group(const std::string& label) const {
  const auto it = groups.find(label);
  return it == groups.end() ? nullptr : &it->second;
}

const nlohmann::json* RunInfo::config_of(const std::string& label) const {
  if (const auto own = group_configs.find(label); own != group_configs.end()) return &own->second;
  if (const GroupInfo* twin = group(label)) {
    if (twin->dry_run) return &*twin->dry_run;
    // One step only: the run a twin replays is recorded (a file naming twins of twins in a
    // circle must not send this round it for ever).
    if (const auto run = group_configs.find(twin->of); run != group_configs.end()) return &run->second;
  }
  return config ? &*config : nullptr;
}

std::string RunInfo::hardware_name() const { return name_of(hardware); }
std::string RunInfo::twins_hardware_name() const { return name_of(twins_hardware); }

RunInfo run_info(const nlohmann::json& other) {
  RunInfo info;
  if (!other.is_object()) return info;
  info.producer = text(other, "producer");
  info.version = text(other, "ringside_version");
  if (const auto c = other.find("config"); c != other.end() && c->is_object()) info.config = *c;
  info.layout = text(other, "layout");
  if (const auto r = other.find("ranks"); r != other.end() && r->is_number_integer() && r->get<int64_t>() > 0 &&
                                          r->get<int64_t>() <= INT32_MAX)
    info.ranks = r->get<int>();
  info.backend = text(other, "backend");
  info.device = text(other, "device");
  info.dtype = text(other, "dtype");
  info.clock = text(other, "clock");
  if (const auto m = other.find("modeled"); m != other.end() && m->is_boolean()) info.modeled = m->get<bool>();
  info.hardware = profile(other, "hardware");
  info.model_dtype = text(other, "model_dtype");
  info.model_efficiency = text(other, "model_efficiency");
  info.model_attention_kernel = text(other, "model_attention_kernel");
  info.modeling = modeling_of(other);
  info.twins_hardware = profile(other, "modeled_hardware");
  if (const auto g = other.find("group_configs"); g != other.end() && g->is_object())
    for (const auto& [label, config] : g->items())
      if (config.is_object()) info.group_configs.emplace(label, config);
  if (const auto g = other.find("modeled_groups"); g != other.end() && g->is_object())
    for (const auto& [label, entry] : g->items()) {
      if (!entry.is_object()) continue;
      GroupInfo group{text(entry, "of"), name_of(profile(entry, "hardware")), text(entry, "dtype"), std::nullopt,
                      text(entry, "efficiency"), 0, modeling_of(entry)};
      if (const auto d = entry.find("dry_run"); d != entry.end() && d->is_object()) group.dry_run = *d;
      if (const auto l = entry.find("layers"); l != entry.end() && l->is_number_integer() && l->get<int64_t>() > 0 &&
                                               l->get<int64_t>() <= INT32_MAX)
        group.layers = l->get<int>();
      info.groups.emplace(label, std::move(group));
    }
  return info;
}

void put_run_info(nlohmann::json& other, const RunInfo& info) {
  if (!other.is_object()) other = nlohmann::json::object();
  other = without_run_info(std::move(other));
  put_text(other, "producer", info.producer);
  if (info.config) other["config"] = *info.config;
  put_text(other, "layout", info.layout);
  if (info.ranks > 0) other["ranks"] = info.ranks;
  put_text(other, "backend", info.backend);
  put_text(other, "device", info.device);
  put_text(other, "dtype", info.dtype);
  put_text(other, "clock", info.clock);
  if (info.modeled) other["modeled"] = true;
  if (!info.hardware.is_null()) other["hardware"] = info.hardware;
  put_text(other, "model_dtype", info.model_dtype);
  put_text(other, "model_efficiency", info.model_efficiency);
  put_text(other, "model_attention_kernel", info.model_attention_kernel);
  if (info.modeling) other["modeling"] = info.modeling->to_json();
  if (!info.twins_hardware.is_null()) other["modeled_hardware"] = info.twins_hardware;
  if (!info.group_configs.empty()) other["group_configs"] = info.group_configs;
  if (!info.groups.empty()) {
    nlohmann::json& groups = other["modeled_groups"] = nlohmann::json::object();
    for (const auto& [label, g] : info.groups) {
      nlohmann::json& entry = groups[label] = {{"of", g.of}, {"hardware", g.hardware}, {"dtype", g.dtype}};
      if (g.dry_run) entry["dry_run"] = *g.dry_run;
      if (!g.efficiency.empty()) entry["efficiency"] = g.efficiency;
      if (g.layers > 0) entry["layers"] = g.layers;
      if (g.modeling) entry["modeling"] = g.modeling->to_json();
    }
  }
}

namespace {

// A value as a message shows it: a scalar itself (cut to 40 characters), else its type.
std::string shown(const nlohmann::json& v) { return v.is_primitive() ? v.dump().substr(0, 40) : std::string(v.type_name()); }

[[noreturn]] void refuse(const std::string& at, const char* what, const nlohmann::json& v) {
  throw Error(at + " must be " + what + ", got " + shown(v));
}

// An integer >= least (within int64).
bool whole(const nlohmann::json& v, int64_t least) {
  return v.is_number_integer() && !(v.is_number_unsigned() && v.get<uint64_t>() > uint64_t(INT64_MAX)) && v.get<int64_t>() >= least;
}

// A configuration's fields that the readers use (the tile map: causal, layout, s, window, docs;
// the model: recompute), typed; the others are the run's own.
void check_configuration(const nlohmann::json& config, const std::string& at) {
  if (!config.is_object()) refuse(at, "an object (a configuration)", config);
  auto field = [&](const char* key, bool ok, const char* what) {
    if (config.contains(key) && !ok) refuse(at + "." + key, what, config.at(key));
  };
  auto count = [&](const char* key) {
    const auto v = config.find(key);
    return v == config.end() || whole(*v, 0);
  };
  field("causal", config.value("causal", nlohmann::json(true)).is_boolean(), "a boolean");
  // The layout as ringside writes it (RunPlan::requested_layout: auto is resolved first).
  const nlohmann::json layout = config.value("layout", nlohmann::json(kLayoutNames[0]));
  field("layout", layout.is_string() && std::count(std::begin(kLayoutNames), std::end(kLayoutNames), layout.get<std::string>()),
        "one of contiguous, zigzag, striped, zigzag-per-doc, greedy");
  field("recompute", config.value("recompute", nlohmann::json("")).is_string(), "a string");
  field("s", count("s"), "an integer >= 0");
  field("window", count("window"), "an integer >= 0");
  bool docs_ok = true;
  if (const auto d = config.find("docs"); d != config.end()) {
    docs_ok = d->is_array();
    for (const nlohmann::json& len : docs_ok ? *d : nlohmann::json::array()) docs_ok = docs_ok && whole(len, 1);
  }
  field("docs", docs_ok, "an array of positive integers (document lengths)");
  // Documents pack the sequence: their lengths sum to s (each at most 2^40, so no sum wraps).
  if (const auto d = config.find("docs"); d != config.end() && config.contains("s")) {
    int64_t total = 0;
    for (const nlohmann::json& len : *d) total += std::min<int64_t>(len.get<int64_t>(), int64_t(1) << 40);
    if (total != config.at("s").get<int64_t>())
      throw Error(detail::concat(at, ".docs sum to ", total, " tokens, not s = ", config.at("s").get<int64_t>()));
  }
}

void check_value(const nlohmann::json& v, Holds holds, const std::string& at) {
  switch (holds) {
    case Holds::text:
      if (!v.is_string()) refuse(at, "a string", v);
      return;
    case Holds::count:
      if (!whole(v, 1) || v.get<int64_t>() > INT32_MAX) refuse(at, "an integer from 1 to 2^31 - 1", v);
      return;
    case Holds::flag:
      if (!v.is_boolean()) refuse(at, "a boolean", v);
      return;
    case Holds::profile:
      if (!v.is_string() && !(v.is_object() && v.contains("name") && v.at("name").is_string()))
        refuse(at, "a hardware profile: its name, or an object with a string \"name\"", v);
      return;
    case Holds::configuration: return check_configuration(v, at);
    case Holds::configs:
      if (!v.is_object()) refuse(at, "an object (group label: configuration)", v);
      for (const auto& [label, config] : v.items()) check_configuration(config, at + "[\"" + label + "\"]");
      return;
    case Holds::groups:
      if (!v.is_object()) refuse(at, "an object (modeled group label: {of, hardware, dtype, ...})", v);
      for (const auto& [label, entry] : v.items()) {
        const std::string where = at + "[\"" + label + "\"]";
        if (!entry.is_object()) refuse(where, "an object (a modeled group: of, hardware, dtype, ...)", entry);
        for (const Key& k : kGroupKeys)
          if (const auto f = entry.find(k.name); f != entry.end()) check_value(*f, k.holds, where + "." + k.name);
        // A twin names the recorded group it replays, never itself (config_of follows it one step).
        if (entry.contains("of") && entry.at("of") == label) throw Error(where + ".of names the group itself");
      }
      return;
    case Holds::modeling:
      if (!v.is_object()) refuse(at, "an object (the model's options: dtype, efficiency, stack, merge, ...)", v);
      for (const ModelingText& t : kModelingTexts)
        if (const auto f = v.find(t.name); f != v.end() && !f->is_string() && !(t.nullable && f->is_null()))
          refuse(at + "." + t.name, t.nullable ? "a string or null" : "a string", *f);
      for (const ModelingFlag& b : kModelingFlags)
        if (const auto f = v.find(b.name); f != v.end() && !f->is_boolean()) refuse(at + "." + b.name, "a boolean", *f);
      return;
  }
}

}  // namespace

void check_run_info(const nlohmann::json& other, const std::string& source) {
  if (!other.is_object()) return;  // none: parse_trace refuses otherData that is not an object
  for (const Key& k : kKeys)
    if (const auto v = other.find(k.name); v != other.end()) check_value(*v, k.holds, source + ": otherData." + k.name);
}

nlohmann::json without_run_info(nlohmann::json other) {
  if (!other.is_object()) return nlohmann::json::object();
  for (const Key& k : kKeys) other.erase(k.name);
  return other;
}

}  // namespace ringside::trace

// The software stacks (stack.h): the built-in ones and a stack file.
#include "model/stack.h"

#include <algorithm>
#include <cmath>

#include "core/error.h"
#include "core/json_input.h"
#include "core/output.h"
#include "model/efficiency.h"
#include "model/fp8.h"
#include "model/parameters.h"

namespace ringside::model {

extern const std::vector<std::pair<std::string, std::string>> kBuiltinStacks;

nlohmann::json Stack::to_json() const {
  return {{"name", name},
          {"description", description},
          {"source", source},
          {"attention", {{"kernels", attention_kernels}, {"rate", attention_rate}, {"source", attention_source}}},
          {"ring_merge", {{"kind", merge}, {"bytes", merge_bytes}, {"kernels", merge_kernels}, {"source", merge_source}}},
          {"tp_comm_overlap", {{"default", tp_comm_overlap}, {"sms", tp_overlap_sms}, {"source", tp_overlap_source}}},
          {"selective_recompute", {{"every_second_gemm", selective_recomputes_every_second_gemm}, {"source", recompute_source}}},
          {"grad_reduce", {{"dtype", grad_reduce_fp32 ? "fp32" : "weights"}, {"source", grad_reduce_source}}},
          {"fp8", {{"recipe", fp8_recipe}, {"source", fp8_source}}},
          {"host", {{"kernel_us", host_kernel_s * 1e6}, {"comm_us", host_comm_s * 1e6}, {"source", host_source}}}};
}

namespace {

// A stack file names only the fields it knows: a misspelt one is an error, not a silent default.
void only_known(const nlohmann::json& j, std::initializer_list<const char*> known, const std::string& where) {
  for (const auto& [key, value] : j.items())
    if (std::none_of(known.begin(), known.end(), [&](const char* k) { return key == k; })) {
      std::string list;
      for (const char* k : known) list += (list.empty() ? "" : ", ") + std::string(k);
      throw ConfigError(where + detail::shown_input(key, 40) + " is not a field of a stack here (" + list + ")");
    }
}

int whole(const nlohmann::json& j, const std::string& key, const std::string& where, double lo, double hi) {
  const double v = json_number(j, key, where, lo, hi);
  if (v != std::floor(v)) throw ConfigError(where + key + " must be a whole number");
  return int(v);
}

}  // namespace

Stack parse_stack(const nlohmann::json& j, const std::string& source) {
  const std::string where = source + ": ";
  if (!j.is_object()) throw ConfigError(source + ": a stack is a JSON object");
  Stack s;
  s.name = json_text(j, "name", where);
  if (s.name.size() > 64 || std::any_of(s.name.begin(), s.name.end(), [](char c) { return c <= 0x20 || c > 0x7e; }))
    throw ConfigError(where + "name must be 1 to 64 printable characters without spaces");
  only_known(j, {"name", "description", "source", "attention", "ring_merge", "tp_comm_overlap", "selective_recompute", "grad_reduce", "fp8", "host"},
             where);
  s.description = json_text(j, "description", where);
  s.source = json_text(j, "source", where);
  const nlohmann::json& a = json_object(j, "attention", where);
  only_known(a, {"kernels", "rate", "source"}, where + "attention.");
  const auto kernels = a.find("kernels");
  if (kernels == a.end() || !kernels->is_array() || kernels->empty())
    throw ConfigError(where + "attention.kernels must list kernel families in order of preference (" + attention_family_names() + ")");
  for (const nlohmann::json& k : *kernels) {
    if (!k.is_string() || !attention_family_known(k.get<std::string>()))
      throw ConfigError(where + "attention.kernels: a kernel family is " + attention_family_names());
    s.attention_kernels.push_back(k.get<std::string>());
  }
  s.attention_rate = a.contains("rate") ? json_number(a, "rate", where + "attention.", 0.05, 1) : 1.0;
  s.attention_source = json_text(a, "source", where + "attention.");
  const nlohmann::json& m = json_object(j, "ring_merge", where);
  only_known(m, {"kind", "bytes", "kernels", "source"}, where + "ring_merge.");
  s.merge = json_text(m, "kind", where + "ring_merge.");
  if (s.merge != "fused" && s.merge != "unfused") throw ConfigError(where + "ring_merge.kind must be fused or unfused");
  s.merge_bytes = json_number(m, "bytes", where + "ring_merge.", 1, 1000);
  s.merge_kernels = whole(m, "kernels", where + "ring_merge.", 1, 100);
  s.merge_source = json_text(m, "source", where + "ring_merge.");
  const nlohmann::json& t = json_object(j, "tp_comm_overlap", where);
  only_known(t, {"default", "sms", "source"}, where + "tp_comm_overlap.");
  const auto def = t.find("default");
  if (def == t.end() || !def->is_boolean()) throw ConfigError(where + "tp_comm_overlap.default must be true or false");
  s.tp_comm_overlap = def->get<bool>();
  s.tp_overlap_sms = whole(t, "sms", where + "tp_comm_overlap.", 0, 64);
  s.tp_overlap_source = json_text(t, "source", where + "tp_comm_overlap.");
  const nlohmann::json& rc = json_object(j, "selective_recompute", where);
  only_known(rc, {"every_second_gemm", "source"}, where + "selective_recompute.");
  const auto gemms = rc.find("every_second_gemm");
  if (gemms == rc.end() || !gemms->is_boolean())
    throw ConfigError(where + "selective_recompute.every_second_gemm must be true or false");
  s.selective_recomputes_every_second_gemm = gemms->get<bool>();
  s.recompute_source = json_text(rc, "source", where + "selective_recompute.");
  const nlohmann::json& gr = json_object(j, "grad_reduce", where);
  only_known(gr, {"dtype", "source"}, where + "grad_reduce.");
  const std::string grad_dtype = json_text(gr, "dtype", where + "grad_reduce.");
  if (grad_dtype != "fp32" && grad_dtype != "weights") throw ConfigError(where + "grad_reduce.dtype must be fp32 or weights");
  s.grad_reduce_fp32 = grad_dtype == "fp32";
  s.grad_reduce_source = json_text(gr, "source", where + "grad_reduce.");
  const nlohmann::json& f = json_object(j, "fp8", where);
  only_known(f, {"recipe", "source"}, where + "fp8.");
  s.fp8_recipe = json_text(f, "recipe", where + "fp8.");
  if (!fp8_recipe_known(s.fp8_recipe)) throw ConfigError(where + "fp8.recipe " + detail::shown_input(s.fp8_recipe) + ": " + fp8_recipe_names());
  s.fp8_source = json_text(f, "source", where + "fp8.");
  const nlohmann::json& h = json_object(j, "host", where);
  only_known(h, {"kernel_us", "comm_us", "source"}, where + "host.");
  s.host_kernel_s = json_number(h, "kernel_us", where + "host.", 0, 1e4) * 1e-6;
  s.host_comm_s = json_number(h, "comm_us", where + "host.", 0, 1e4) * 1e-6;
  s.host_source = json_text(h, "source", where + "host.");
  return s;
}

std::vector<std::string> stack_names() {
  std::vector<std::string> names;
  for (const auto& [name, text] : kBuiltinStacks) names.push_back(name);
  std::sort(names.begin(), names.end());
  return names;
}

nlohmann::json stack_json(const std::string& name) {
  for (const auto& [builtin, text] : kBuiltinStacks)
    if (builtin == name) return apply_parameter_overrides("stack:" + builtin, nlohmann::json::parse(text));
  throw ConfigError("no built-in stack " + detail::shown_input(name));
}

Stack load_stack(const std::string& name_or_path) {
  for (const std::string& name : stack_names())
    if (name == name_or_path) return parse_stack(stack_json(name), name);
  if (output::is_regular(name_or_path)) {
    const std::string text = output::read_input(name_or_path, "--stack", 1u << 20);
    const std::string source = detail::shown_input(name_or_path, 200);
    try {
      return parse_stack(parse_json(text, name_or_path), source);
    } catch (const ConfigError&) {
      throw;
    } catch (const Error& e) {
      throw ConfigError(e.what());
    }
  }
  std::string names;
  for (const std::string& n : stack_names()) names += (names.empty() ? "" : ", ") + n;
  throw ConfigError("--stack " + detail::shown_input(name_or_path) + ": not a stack (" + names + ") nor a JSON file");
}

Stack default_stack() { return load_stack("megatron"); }

}  // namespace ringside::model

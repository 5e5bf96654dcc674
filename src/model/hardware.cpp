// The what-if model's hardware profiles: the built-in ones, a profile file, and this machine.
#include "model/model.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <deque>
#include <functional>
#include <map>
#include <optional>
#include <tuple>

#include <unistd.h>

#include "comm/communicator.h"
#include "core/error.h"
#include "core/json_input.h"
#include "core/output.h"
#include "core/units.h"
#include "kernels/cpu/blas.h"
#include "model/parameters.h"

namespace ringside::model {

// The built-in profiles, embedded from src/model/hardware/*.json by CMake, and the parts they
// are built from: GPUs (gpus/*.json: compute, memory, kernel efficiencies) and systems
// (systems/*.json: link tiers).
extern const std::vector<std::pair<std::string, std::string>> kBuiltinProfiles, kBuiltinGpus, kBuiltinSystems;

// ---- profiles ------------------------------------------------------------------------------

namespace {

// A number in [lo, hi]: the ranges keep every modeled time finite and catch unit slips (a
// peak of 989 meant as TFLOP/s is 989 FLOP/s).
double in_range(const nlohmann::json& j, const std::string& key, const std::string& source, const std::string& where,
                double lo, double hi) {
  const auto it = j.find(key);
  if (it == j.end() || !it->is_number() || !std::isfinite(it->get<double>()) || it->get<double>() < lo || it->get<double>() > hi)
    throw ConfigError(detail::concat(source, ": ", where, key, " must be a number in [", lo, ", ", hi, "]"));
  return it->get<double>();
}

const nlohmann::json& object(const nlohmann::json& j, const std::string& key, const std::string& source) {
  const auto it = j.find(key);
  if (it == j.end() || !it->is_object()) throw ConfigError(source + ": " + key + " must be an object");
  return *it;
}

}  // namespace

nlohmann::json Hardware::to_json() const {
  nlohmann::json peaks = {{"bf16", peak_flops_bf16}, {"fp32", peak_flops_fp32}};
  if (peak_flops_fp8 > 0) peaks["fp8"] = peak_flops_fp8;
  nlohmann::json j = {{"name", name},
          {"description", description},
          {"peak_flops", peaks},
          {"memory_bandwidth_GBps", memory_bandwidth / 1e9},
          {"memory_GB", memory_bytes / 1e9},
          {"tiers", tiers_json(tiers)},
          {"source", source}};
  if (!gpu.empty()) j["gpu"] = gpu;
  if (!system.empty()) j["system"] = system;
  if (mxfp8) j["mxfp8"] = true;
  if (efficiency.present) j["efficiency"] = efficiency_json(efficiency);
  return j;
}

namespace {

// A number of a legacy link object ("intra_node", "inter_node"), set onto a tier's field.
void legacy_link(const nlohmann::json& j, const char* object, nlohmann::json& tier, const std::string& source, bool required) {
  const auto it = j.find(object);
  if (it == j.end()) {
    if (required) throw ConfigError(source + ": " + object + " must be an object");
    return;
  }
  if (!it->is_object()) throw ConfigError(source + ": " + object + " must be an object");
  const std::string where = std::string(object) + ".";
  if (required || it->contains("bandwidth_GBps")) tier["bandwidth_GBps"] = in_range(*it, "bandwidth_GBps", source, where, 1e-3, 1e6);
  if (required || it->contains("latency_us")) tier["latency_us"] = in_range(*it, "latency_us", source, where, 0, 1e6);
}

// The first profile format, a node of gpus_per_node GPUs with one link inside (intra_node) and
// one across (inter_node) and NCCL's share of each under efficiency.links, as two tiers; or,
// over a profile that has tiers (a file with a built-in base), a patch of its innermost tier
// and its outermost: lesson 6's "gpus_per_node": 4 over h100-nvlink keeps working.
nlohmann::json legacy_as_tiers(nlohmann::json j, const std::string& source) {
  const bool legacy = j.contains("gpus_per_node") || j.contains("intra_node") || j.contains("inter_node") ||
                      (j.contains("efficiency") && j["efficiency"].is_object() && j["efficiency"].contains("links"));
  if (!legacy) return j;
  const bool fresh = !j.contains("tiers");
  if (fresh && j.contains("efficiency") && j["efficiency"].is_object() && !j["efficiency"].contains("links"))
    throw ConfigError(source + ": efficiency.links must be an object (NCCL's share of intra_node and inter_node), or give tiers");
  if (fresh) j["tiers"] = {{{"name", "intra-node"}}, {{"name", "inter-node"}}};
  nlohmann::json& tiers = j["tiers"];
  if (!tiers.is_array() || tiers.empty()) throw ConfigError(source + ": tiers must be a list of at least one link tier, innermost first");
  nlohmann::json& inner = tiers.front();
  nlohmann::json& outer = tiers.back();
  if (fresh || j.contains("gpus_per_node")) {
    const double gpn = in_range(j, "gpus_per_node", source, "", 1, 1 << 20);
    if (gpn != std::floor(gpn)) throw ConfigError(source + ": gpus_per_node must be a whole number");
    if (tiers.size() < 2) throw ConfigError(source + ": gpus_per_node: its system has one tier, no node to size");
    inner["gpus"] = int(gpn);
    inner.erase("unit");
  }
  legacy_link(j, "intra_node", inner, source, fresh);
  legacy_link(j, "inter_node", outer, source, fresh);
  if (j.contains("efficiency") && j["efficiency"].is_object() && j["efficiency"].contains("links")) {
    const nlohmann::json links = j["efficiency"]["links"];
    if (!links.is_object()) throw ConfigError(source + ": efficiency.links must be an object");
    for (const auto& [key, tier] : {std::pair<const char*, nlohmann::json*>{"intra_node", &inner}, {"inter_node", &outer}}) {
      if (links.contains(key)) (*tier)["efficiency"] = in_range(links, key, source, "efficiency.links.", 1e-9, 1);
      else if (fresh) throw ConfigError(source + ": efficiency.links." + key + " must be a number in (0, 1]");
      if (links.contains("source")) (*tier)["source"] = links["source"];
    }
    j["efficiency"].erase("links");
  }
  j.erase("gpus_per_node"), j.erase("intra_node"), j.erase("inter_node");
  return j;
}

}  // namespace

Hardware parse_hardware(const nlohmann::json& given, const std::string& source) {
  if (!given.is_object()) throw ConfigError(source + ": a hardware profile is a JSON object");
  const nlohmann::json j = legacy_as_tiers(given, source);
  Hardware h;
  auto str = [&](const char* k) {
    const auto it = j.find(k);
    if (it == j.end() || !it->is_string()) throw ConfigError(source + ": " + k + " must be a string");
    return it->get<std::string>();
  };
  h.name = str("name");
  // The name labels tables, traces and the viewer's groups: short, and printable.
  if (h.name.empty() || h.name.size() > 64 ||
      std::any_of(h.name.begin(), h.name.end(), [](char c) { return c < 0x20 || c > 0x7e; }))
    throw ConfigError(source + ": name must be 1 to 64 printable characters");
  h.description = j.contains("description") ? str("description") : "";
  h.source = j.contains("source") ? str("source") : "";
  h.gpu = j.contains("gpu") ? str("gpu") : "";
  h.system = j.contains("system") ? str("system") : "";
  const nlohmann::json& peak = object(j, "peak_flops", source);
  h.peak_flops_bf16 = in_range(peak, "bf16", source, "peak_flops.", 1e6, 1e18);  // FLOP/s
  h.peak_flops_fp32 = in_range(peak, "fp32", source, "peak_flops.", 1e6, 1e18);
  h.peak_flops_fp8 = peak.contains("fp8") ? in_range(peak, "fp8", source, "peak_flops.", 1e6, 1e18) : 0;
  h.memory_bandwidth = in_range(j, "memory_bandwidth_GBps", source, "", 1e-3, 1e6) * 1e9;
  h.memory_bytes = in_range(j, "memory_GB", source, "", 1e-3, 1e6) * 1e9;
  if (!j.contains("tiers")) throw ConfigError(source + ": tiers must be a list of at least one link tier, innermost first (or the "
                                              "first format's gpus_per_node, intra_node and inter_node)");
  h.tiers = parse_tiers(j["tiers"], source);
  if (j.contains("mxfp8")) {
    if (!j["mxfp8"].is_boolean()) throw ConfigError(source + ": mxfp8 must be true or false");
    h.mxfp8 = j["mxfp8"].get<bool>();
  }
  if (j.contains("efficiency")) h.efficiency = parse_efficiency(j["efficiency"], source);
  // FP8 runs only the GEMMs; every other op at bf16's rates. An FP8 peak below bf16's would make
  // FP8 slower than bf16 and its MFU (over the FP8 peak) pass 100% on the bf16 ops alone.
  if (h.peak_flops_fp8 > 0 && h.peak_flops_fp8 < h.peak_flops_bf16)
    throw ConfigError(detail::concat(source, ": peak_flops.fp8 (", h.peak_flops_fp8 / 1e12, " TFLOP/s) is below peak_flops.bf16 (",
                                     h.peak_flops_bf16 / 1e12, "): FP8 tensor cores are at least as fast as bf16's"));
  if (h.efficiency.present && h.efficiency.gemm.fp8 > 0 && h.peak_flops_fp8 == 0)
    throw ConfigError(source + ": efficiency.gemm.fp8 needs peak_flops.fp8");
  for (const auto& [family, k] : h.efficiency.attention)
    for (const AttentionCurve* c : {&k.forward, &k.forward_causal, &k.backward, &k.backward_causal})
      if (c->rate > h.peak_flops_bf16)
        throw ConfigError(detail::concat(source, ": efficiency.attention.", family, ": ", c->rate / 1e12,
                                         " TFLOP/s is above the bf16 peak (", h.peak_flops_bf16 / 1e12, ")"));
  return h;
}

std::vector<std::string> hardware_names() {
  std::vector<std::string> names;
  for (const auto& [name, text] : kBuiltinProfiles) names.push_back(name);
  names.push_back("this-machine");
  return names;
}

namespace {

// A profile's JSON with its base applied: "base": NAME takes the built-in profile NAME and
// replaces what this file gives (RFC 7386 merge patch: an object merges, anything else replaces,
// null removes), so a variant (another link, memory or power cap) states only what differs.
nlohmann::json with_base(nlohmann::json j, const std::string& source, int depth = 0) {
  if (!j.is_object() || !j.contains("base")) return j;
  const nlohmann::json& base = j["base"];
  if (!base.is_string()) throw ConfigError(source + ": base must name a built-in profile");
  if (depth > 4) throw ConfigError(source + ": base: more than 4 profiles deep (a cycle?)");
  const std::string name = base.get<std::string>();
  // A patch is another GPU or setup: it names itself, or its tables and plans would carry the base's name.
  const auto own = j.find("name");
  if (own == j.end() || !own->is_string() || *own == name)
    throw ConfigError(source + ": a profile with base " + detail::shown_input(name) + " gives its own name");
  for (const auto& [builtin, text] : kBuiltinProfiles)
    if (builtin == name) {
      nlohmann::json merged = with_base(apply_parameter_overrides(builtin, nlohmann::json::parse(text)), builtin, depth + 1);
      j.erase("base");
      merged.merge_patch(j);
      return merged;
    }
  std::string names;
  for (const auto& [builtin, text] : kBuiltinProfiles) names += (names.empty() ? "" : ", ") + builtin;
  throw ConfigError(source + ": base " + detail::shown_input(name) + " is not a built-in profile (" + names + ")");
}

// A built-in part, "gpu" or "system", by name.
nlohmann::json part_json(const char* kind, const nlohmann::json& name, const std::string& source) {
  const auto& table = std::string(kind) == "gpu" ? kBuiltinGpus : kBuiltinSystems;
  std::string names;
  for (const auto& [builtin, text] : table) {
    if (name.is_string() && builtin == name.get<std::string>()) return nlohmann::json::parse(text);
    names += (names.empty() ? "" : ", ") + builtin;
  }
  throw ConfigError(detail::concat(source, ": ", kind, " ", name.is_string() ? detail::shown_input(name.get<std::string>()) : name.dump(),
                                   " is not a built-in ", kind, " (", names, ")",
                                   std::string(kind) == "system" ? "; a profile's own links go in \"tiers\" (docs/model.md, Topology)" : ""));
}

// A profile built from parts: "gpu": NAME takes that GPU's compute, memory and efficiencies,
// "system": NAME that system's link tiers, and what the profile itself gives replaces either
// (a merge patch), so that h100-ib is H100's GPU on another system, not a copy.
nlohmann::json with_parts(const nlohmann::json& j, const std::string& source) {
  if (!j.is_object() || (!j.contains("gpu") && !j.contains("system"))) return j;
  nlohmann::json merged = j.contains("gpu") ? part_json("gpu", j["gpu"], source) : nlohmann::json::object();
  merged.erase("name");  // the part's own name is not the profile's
  std::string system_words;
  if (j.contains("system")) {
    const nlohmann::json system = part_json("system", j["system"], source);
    if (!system.contains("tiers")) throw ConfigError(source + ": system " + j["system"].dump() + " gives no tiers");
    merged["tiers"] = system["tiers"];
    if (system.contains("description") && system["description"].is_string()) system_words = system["description"];
  }
  // A profile that does not describe itself is its parts': the GPU's words, then the system's.
  if (!j.contains("description") && !system_words.empty())
    merged["description"] = (merged.contains("description") && merged["description"].is_string()
                                 ? merged["description"].get<std::string>() + "; "
                                 : std::string()) + system_words;
  merged.merge_patch(j);
  return merged;
}

// A file states its links one way: a whole first-format node (gpus_per_node, intra_node and
// inter_node) or a system or tiers. A node key alone patches the tiers it is given with (lesson
// 6's "gpus_per_node": 4 over h100-nvlink's file); a whole node beside a system would silently
// replace that system's tiers.
void check_one_link_format(const nlohmann::json& j, const std::string& source) {
  if (!j.is_object() || (!j.contains("system") && !j.contains("tiers"))) return;
  if (j.contains("gpus_per_node") && j.contains("intra_node") && j.contains("inter_node"))
    throw ConfigError(detail::concat(source, ": gpus_per_node, intra_node and inter_node (the first format's node) and ",
                                     j.contains("tiers") ? "tiers" : "a system",
                                     " in one file; give the links one way, or only the node keys that patch them"));
}

}  // namespace

nlohmann::json hardware_json(const std::string& name) {
  for (const auto& [builtin, text] : kBuiltinProfiles)
    if (builtin == name) return with_parts(with_base(apply_parameter_overrides(builtin, nlohmann::json::parse(text)), builtin), builtin);
  throw ConfigError("no built-in profile " + detail::shown_input(name));
}

Hardware load_hardware_json(const nlohmann::json& j, const std::string& source) {
  check_one_link_format(j, source);
  nlohmann::json based = with_base(j, source);
  // Another GPU, system or links over a base, without words of its own: the base's words
  // describe the base's parts, not these.
  const bool own_links = j.is_object() && (j.contains("tiers") || j.contains("gpus_per_node") || j.contains("intra_node") || j.contains("inter_node"));
  const bool own_parts = j.is_object() && (j.contains("gpu") || j.contains("system"));
  if ((own_parts || own_links) && !j.contains("description")) based.erase("description");
  Hardware hw = parse_hardware(with_parts(based, source), source);
  if (own_links && !j.contains("description"))  // its GPU's words, then its own links
    hw.description = (hw.description.empty() ? hw.name : hw.description.substr(0, hw.description.find(';'))) + "; its links: " +
                     tiers_words(hw.tiers);
  return hw;
}

Hardware load_hardware(const std::string& name_or_path) {
  for (const auto& [name, text] : kBuiltinProfiles)
    if (name == name_or_path) return parse_hardware(hardware_json(name), name);
  if (name_or_path == "this-machine") return measure_this_machine();
  if (output::is_regular(name_or_path)) {
    // A profile is a few hundred bytes: anything past 1 MiB is not one (and is not read whole).
    const std::string text = output::read_input(name_or_path, "--hw", 1u << 20);
    const std::string source = detail::shown_input(name_or_path, 200);
    try {
      return load_hardware_json(parse_json(text, name_or_path), source);
    } catch (const ConfigError&) {
      throw;
    } catch (const Error& e) {
      throw ConfigError(e.what());  // a profile that is not JSON is a bad --hw, before any work
    }
  }
  std::string names;
  for (const std::string& n : hardware_names()) names += (names.empty() ? "" : ", ") + n;
  throw ConfigError("--hw " + detail::shown_input(name_or_path) + ": not a profile (" + names + ") nor a JSON file");
}

Hardware measure_this_machine() {
  using clock = std::chrono::steady_clock;
  auto best_of = [](int reps, auto&& fn) {
    double best = 1e300;
    for (int i = 0; i < reps; ++i) {
      const auto t0 = clock::now();
      fn();
      best = std::min(best, std::chrono::duration<double>(clock::now() - t0).count());
    }
    return std::max(best, 1e-9);
  };
  Hardware h;
  h.name = "this-machine";
  h.description = "this machine, measured now: one core's sgemm, memcpy as memory and link, a local ping-pong";
  h.source = "measured by ringside (sgemm n = 1024 best of 3; memcpy 64 MiB best of 3; 200 round trips)";
  kernels::cpu::set_blas_single_threaded();
  const int64_t n = 1024;
  std::vector<float> a(size_t(n * n), 0.5f), b(a), c(a.size());
  const double gemm_s = best_of(3, [&] { kernels::cpu::gemm(false, false, n, n, n, 1.f, a.data(), n, b.data(), n, 0.f, c.data(), n); });
  h.peak_flops_fp32 = h.peak_flops_bf16 = 2.0 * double(n * n * n) / gemm_s;  // no bf16 units: the same
  const size_t bytes = 64u << 20;
  std::vector<char> src(bytes, 1), dst(bytes);
  const double copy_s = best_of(3, [&] { std::memcpy(dst.data(), src.data(), bytes); });
  h.memory_bandwidth = double(bytes) / copy_s;
  // Latency: half a round trip of an 8-byte message between two local ranks.
  double rtt = 0;
  run_local(2, [&](Communicator& comm) {
    int64_t v = 0;
    const auto t0 = clock::now();
    for (int i = 0; i < 200; ++i) {
      if (comm.rank() == 0) comm.send(&v, 8, 1, 7), comm.recv(&v, 8, 1, 7);
      else comm.recv(&v, 8, 0, 7), comm.send(&v, 8, 0, 7);
    }
    if (comm.rank() == 0) rtt = std::chrono::duration<double>(clock::now() - t0).count() / 200;
  });
  h.memory_bytes = double(sysconf(_SC_PHYS_PAGES)) * double(sysconf(_SC_PAGESIZE));
  // One process: every rank joined by the same link, this machine's memory.
  Tier local;
  local.name = "local memory", local.bandwidth = h.memory_bandwidth, local.latency_s = rtt / 2;
  local.source = h.source;
  h.tiers = {local};
  h.memory_shared = true;     // and one memory for all of them
  return h;
}

Hardware memory_per_rank(Hardware hw, int ranks) {
  if (ranks < 1) throw ConfigError(detail::concat("memory_per_rank: ", ranks, " ranks"));
  if (!hw.memory_shared || ranks == 1) return hw;
  hw.description += detail::concat("; its ", format_bytes(hw.memory_bytes), " shared by ", ranks, " ranks: ",
                                   format_bytes(hw.memory_bytes / ranks), " each");
  hw.memory_bytes /= ranks;
  hw.memory_shared = false;  // now per rank, as every other profile's
  return hw;
}

}  // namespace ringside::model

// What a trace's otherData says about its run, typed. otherData is the Chrome trace's free-form
// object, and a foreign or hand-edited file may hold anything there: the reader parses it once
// into TraceData::run (run_info: defensively, a field of the wrong type is absent), and the
// writer writes it once from there (put_run_info). Every producer (compare, model, plan, the
// lessons) fills a RunInfo and every reader (the model, compare, the tile map, the viewer) asks
// one, instead of the JSON. What RunInfo does not type (a lesson's steps, a GPU's description)
// stays in TraceData::other.
#pragma once
#include <map>
#include <optional>
#include <string>

#include <nlohmann/json.hpp>

namespace ringside::trace {

/// The options a run was modeled under, each as the model resolved it (model::modeling_info: the
/// stack's choice where no flag overrode it, the attention kernel the profile runs): what tells
/// two models of one schedule apart. A modeled trace keeps it in otherData.modeling, a modeled
/// group in otherData.modeled_groups[label].modeling, and model's, plan's, compare's, run's and
/// validate's --json write the same object under "modeling" (to_json).
struct ModelingInfo {
  std::string dtype;                 ///< the element type modeled: bf16, fp32 or fp8
  std::string efficiency;            ///< achieved or ideal (the rates asked for)
  std::string attention_kernel;      ///< the kernel family whose rates model attention (fa2, fa3, fa4, cudnn); "" at the roofline
  std::string stack;                 ///< the software stack's name (model/stack.h)
  std::string merge;                 ///< how a ring merges each step: fused or unfused
  std::string fp8_recipe;            ///< under fp8 the recipe (delayed, current, block, mxfp8); "" otherwise
  bool tp_comm_overlap = false;      ///< TP's collectives in chunks under their GEMMs
  bool grad_reduce_fp32 = false;     ///< gradients reduced over DP x CP in fp32
  bool overlap_grad_reduce = false;  ///< the layer's gradient all-reduce in buckets under its backward
  bool operator==(const ModelingInfo&) const = default;
  /// {dtype, efficiency, attention_kernel (null at the roofline), stack, merge, fp8_recipe (null
  /// unless fp8), tp_comm_overlap, grad_reduce_fp32, overlap_grad_reduce}.
  nlohmann::json to_json() const;
};

/// A modeled group of a trace: otherData.modeled_groups[label].
struct GroupInfo {
  std::string of;        ///< the recorded group it replays ("ring" for "ring (modeled, a100-nvlink)")
  std::string hardware;  ///< the profile it is modeled on
  std::string dtype;     ///< the element type it is modeled in ("bf16")
  std::optional<nlohmann::json> dry_run;  ///< a dry run's configuration (the layer, its layout), when it is one
  std::string efficiency;  ///< the model's rates ("achieved", "ideal"); "" when not said
  int layers = 0;          ///< the layers of the plan it stands for (ringside plan), 0 when not one
  std::optional<ModelingInfo> modeling;  ///< every option it was modeled under (none in a trace before them)
};

/// RunInfo::backend of a modeled step's timeline (model::step_timeline), whose rows are
/// pipeline stages: its processes are named "stage 3", not "GPU 3".
inline constexpr const char* kPipelineStages = "pipeline stages";

struct RunInfo {
  std::string producer;  ///< "ringside compare", "ringside model (dry run)", ...
  std::string version;   ///< the ringside that wrote the file (the writer writes its own)
  std::optional<nlohmann::json> config;  ///< the layer and its run's layout and recompute (RunPlan::config_json)
  /// Recorded groups that ran another configuration than `config` (a lesson's later runs, on
  /// packed documents or in another layout), by label: otherData.group_configs. A group not
  /// listed ran `config`.
  std::map<std::string, nlohmann::json> group_configs;
  std::string layout;    ///< the context-parallel layout the run asked for
  int ranks = 0;         ///< P (0: not said)
  std::string backend;   ///< "local", "mpi", "nccl", "dry run"; kPipelineStages for a modeled step
  std::string device;    ///< "cpu", "cuda", "h100-nvlink (modeled)"
  std::string dtype;     ///< "float32", "bfloat16"
  std::string clock;     ///< how the ranks' clocks were taken and aligned
  // A modeled trace (ringside model, plan).
  bool modeled = false;
  nlohmann::json hardware;  ///< its profile (model::Hardware::to_json, or a name); null when none
  std::string model_dtype;  ///< its element type ("bf16")
  std::string model_efficiency, model_attention_kernel;
  std::optional<ModelingInfo> modeling;  ///< every option it was modeled under (none in a trace before them)
  // Twins: modeled groups beside the recorded ones.
  nlohmann::json twins_hardware;  ///< their profile (otherData.modeled_hardware); null when none
  std::map<std::string, GroupInfo> groups;  ///< the modeled groups, by label

  /// The modeled group called `label`, or null for a recorded one.
  const GroupInfo* group(const std::string& label) const;
  /// The configuration the group called `label` ran: its own (group_configs), a twin's dry run's
  /// or the configuration of the run it replays, else the trace's `config`; null when none.
  const nlohmann::json* config_of(const std::string& label) const;
  /// Whether the group called `label` is modeled: a twin, or any group of a modeled trace.
  bool is_modeled(const std::string& label) const { return modeled || group(label) != nullptr; }
  /// The names of `hardware` and `twins_hardware` ("" when none).
  std::string hardware_name() const;
  std::string twins_hardware_name() const;
  /// Forgets the modeled groups and their profile: what a model of the recorded run keeps.
  void drop_groups() { groups.clear(), twins_hardware = nullptr; }
};

/// otherData read into a RunInfo (never throws: what is missing or mistyped is left empty; the
/// trace reader checks otherData first, check_run_info).
RunInfo run_info(const nlohmann::json& other);
/// The context-parallel layouts a configuration may name, as ringside writes them
/// (parallel/layout.h's to_string; "auto" is resolved before a trace is written).
inline constexpr const char* kLayoutNames[] = {"contiguous", "zigzag", "striped", "zigzag-per-doc", "greedy"};
/// Throws Error, naming `source` and the field ("t.json: otherData.modeled_groups must be an
/// object (...), got \"ring\""), when a key RunInfo reads holds the wrong type, so that no
/// reader takes a mistyped field for an absent one (a modeled twin for a recorded run, a
/// modeled trace for a measured one): producer, ringside_version, layout, backend, device, dtype,
/// clock, model_dtype, model_efficiency and model_attention_kernel strings; ranks an integer
/// >= 1; modeled a boolean; hardware and modeled_hardware a profile (a name, or an object with a
/// string "name"); modeling an object whose fields are ModelingInfo's types (attention_kernel and
/// fp8_recipe a string or null; a field missing is read as empty or false); modeled_groups an
/// object of objects whose of, hardware, dtype, dry_run, efficiency, layers and modeling are
/// typed so too (of never the group itself); config, each of
/// group_configs and each dry_run a configuration whose fields the readers use are right:
/// "causal" a boolean, "layout" one of kLayoutNames, "recompute" a string, "s" and "window"
/// integers >= 0, "docs" an array of positive integers summing to s. Absent keys are fine (a
/// trace written before them, or a foreign one); otherData that is not an object is the
/// caller's to refuse.
void check_run_info(const nlohmann::json& other, const std::string& source);
/// Writes `info` into otherData (the fields it has; replacing those keys).
void put_run_info(nlohmann::json& other, const RunInfo& info);
/// otherData without the keys RunInfo owns: what TraceData::other keeps.
nlohmann::json without_run_info(nlohmann::json other);

}  // namespace ringside::trace

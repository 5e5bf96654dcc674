// The what-if model: a recorded schedule (a dry run's trace, or a real one) replayed on named
// hardware, as a discrete-event simulation of every rank's compute and comm streams.
//
//   compute op   max(FLOPs / peak FLOP/s, bytes / memory bandwidth)       (a roofline)
//   transfer     latency + bytes / link bandwidth, inside or across nodes, starting when both
//                ends have posted it and the sender's link is free (one message at a time)
//   wait         until its transfer has arrived: a step waits for its receive
//
// The schedule is the trace's program order (Event::order): ops, posts and waits in the order
// each rank issued them. The modeled trace holds the same events in the same order with the
// modeled times, and otherData.modeled = true; the viewer shows it like a measured one.
#pragma once
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "parallel/harness.h"
#include "trace/trace_file.h"

namespace ringside::model {

/// A machine, per GPU: what a profile JSON file holds (src/model/hardware/*.json).
struct Hardware {
  std::string name, description, source;
  double peak_flops_bf16 = 0, peak_flops_fp32 = 0;  ///< FLOP/s
  double memory_bandwidth = 0;                       ///< bytes/s
  double memory_bytes = 0;                           ///< capacity per GPU
  int gpus_per_node = 1;
  double intra_bandwidth = 0, intra_latency_s = 0;  ///< bytes/s and seconds, inside a node
  double inter_bandwidth = 0, inter_latency_s = 0;  ///< across nodes
  bool memory_shared = false;  ///< this-machine: all ranks share one memory (the verdict sums them)

  /// The profile as JSON, in the file format (GB/s, us, GB).
  nlohmann::json to_json() const;
};

/// Parses a profile (fields as in src/model/hardware/*.json); throws ConfigError naming the
/// field that is missing, of the wrong type, or outside its range (peaks 1e6 to 1e18 FLOP/s,
/// bandwidths 1e-3 to 1e6 GB/s, latency 0 to 1e6 us, memory 1e-3 to 1e6 GB, 1 to 2^20 GPUs
/// per node), which keeps every modeled time finite and catches unit slips.
Hardware parse_hardware(const nlohmann::json& j, const std::string& source);
/// The built-in profiles' names: a100-nvlink, h100-ib, h100-nvlink, h200 (and this-machine).
std::vector<std::string> hardware_names();
/// A built-in profile by name, "this-machine" (measured now, see measure_this_machine), or a
/// JSON file's path. Throws ConfigError listing the names for anything else.
Hardware load_hardware(const std::string& name_or_path);
/// This machine as `ringside bench` measures it, in about a second: one core's OpenBLAS sgemm
/// (n = 1024, best of 3) as its peak, memcpy of 64 MiB as its memory and link bandwidth, a
/// local ping-pong as its link latency, physical memory as its capacity; every rank one node.
Hardware measure_this_machine();

/// The dry run: `st` on P local ranks with tensors that hold no memory, a backend without math
/// and transfers that move nothing; returns its schedule (every rank's trace; otherData names the
/// run). Allocations are counted in `tracker`, which must outlive `results` (every rank's
/// result, whose tensors hold no data). Throws ConfigError for a configuration st refuses.
trace::TraceData dry_run(const Strategy& st, const LayerConfig& cfg, int P, MemoryTracker& tracker,
                         std::vector<RankResult>* results = nullptr);

/// An upper bound on the events a dry run of any strategy records on P ranks: each rank's
/// schedule has O(P) steps (its ring's P steps, P - 1 for each ring collective), so the whole
/// is O(P^2); measured, the ring (the largest) records 61.5 P^2 + 22 P (4,005,366 at P = 256),
/// and test_model holds every strategy below this bound. A per-document layout (zigzag-per-doc,
/// greedy) gives each rank two runs a document, and each ring step four (query run, key run)
/// pairs a document, two or three events each: 24 P^2 (N + 1) more for N documents (measured,
/// the ring at P = 2 records 16.4 P^2 N).
double schedule_events_bound(int P, const LayerConfig& cfg);
/// Bytes a dry run, its model and the modeled trace's writing hold at once on P ranks: about
/// 1 KiB per event of schedule_events_bound (the recorded schedule, the model's copy, the
/// metrics; 3.4 GB peak measured for the ring's 4.0 million events at P = 256), for the memory
/// check before a dry run.
double schedule_bytes(int P, const LayerConfig& cfg);

struct ModelOptions {
  /// The element type to model: "bf16" halves the bytes of an fp32 trace (ops, transfers and
  /// memory) and uses the bf16 peak; "fp32" keeps them and uses the fp32 peak.
  std::string dtype = "bf16";
  /// The node of each rank, by rank (empty: rank / gpus_per_node, the schedule's own order): a
  /// placement other than the recorded one, such as the same schedule with its groups placed
  /// in cp-tp order (the planner's reuse of a dry run). Ranks past its end: rank / gpus_per_node.
  std::vector<int> node_of;
};

/// Replays every strategy of `schedule` on `hw` and returns the modeled trace (a trace that is
/// already modeled is refused: ConfigError; the modeled twins of a measured trace, the groups
/// otherData.modeled_groups lists, are left out: the recorded groups are modeled): the same events,
/// in the same order, with modeled times (each strategy's ranks start at 0), memory samples
/// scaled and moved to their modeled times, and otherData {..., modeled: true, hardware,
/// model_dtype}. Throws ringside::Error for a trace without program order (recorded before
/// ringside 0.7 or by another tool) or a schedule that cannot finish (a wait whose transfer is
/// never posted), naming the rank and the transfer.
trace::TraceData model_trace(const trace::TraceData& schedule, const Hardware& hw, const ModelOptions& o = {});

/// The label of `strategy`'s modeled twin on the profile `hw_name`: "ring (modeled, a100-nvlink)".
std::string modeled_label(const std::string& strategy, const std::string& hw_name);

/// A measured trace with its modeled twin beside it: every strategy group of `measured` is
/// replayed on `hw` (model_trace, with `o`), relabelled modeled_label and moved so that its first
/// forward starts when the measured group's does (so that any viewer shows them aligned); each
/// twin follows its measured group, and otherData.modeled_groups maps each twin's label to
/// {of: strategy, hardware: profile name, dtype}, otherData.modeled_hardware holds the profile.
/// Throws what model_trace throws.
trace::TraceData with_modeled_twin(trace::TraceData measured, const Hardware& hw, const ModelOptions& o = {});

/// with_modeled_twin in place, for the recorded groups that have no twin on `hw` yet (only the
/// group `only` when it is given): a lesson adds each twin when it needs its numbers.
void add_modeled_twins(trace::TraceData& t, const Hardware& hw, const ModelOptions& o = {}, const std::string& only = "");

/// Puts `ranks`, a modeled timeline of the group `of` on `hw` (model_trace's, or a dry run's),
/// into `t` at index `at` of t.ranks (past the end: at the end) as the group modeled_label(of,
/// hw.name), and lists it in otherData.modeled_groups as {of, hardware, dtype}. Returns that
/// entry, for more fields (a dry run's config).
nlohmann::json& insert_modeled_group(trace::TraceData& t, std::vector<trace::RankTrace> ranks, const std::string& of,
                                     const Hardware& hw, const std::string& dtype, size_t at);

/// Whether a trace process is a modeled twin (its strategy is in otherData.modeled_groups).
bool is_modeled_twin(const nlohmann::json& other, const std::string& strategy);

/// The default profile of the modeled twins of compare, run and lesson: a100-nvlink. The demo's
/// default layer (P = 4, s 4096, Hkv/H 1/2, zigzag steps of 512 x 1024 tokens) sits near its
/// threshold c* = (Hkv/H) F/B = 520 tokens in bf16, so the ring's K/V transfer is partly hidden:
/// the lesson of c >= F/B is visible in the demo itself.
inline constexpr const char* kDefaultTwinHardware = "a100-nvlink";

}  // namespace ringside::model

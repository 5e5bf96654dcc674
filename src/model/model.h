// The what-if model: a recorded schedule (a dry run's trace, or a real one) replayed on named
// hardware, as a discrete-event simulation of every rank's compute and comm streams.
//
//   compute op   at the rate this GPU achieves for its kind and shape (efficiency.h: a GEMM by
//                its waves and k, an attention call by its kernel family, block length, mask and
//                head dim, a memory-bound op at the achievable fraction of HBM, each plus a
//                launch); with --efficiency ideal, max(FLOPs / peak, bytes / HBM) (the roofline)
//   transfer     latency + bytes / (link line rate x NCCL's efficiency), inside or across
//                nodes, starting when both ends have posted it and the sender's link is free
//                (one message at a time); ideal: the line rate
//   wait         until its transfer has arrived: a step waits for its receive
//
// The schedule is the trace's program order (Event::order): ops, posts and waits in the order
// each rank issued them. The modeled trace holds the same events in the same order with the
// modeled times, and otherData.modeled = true; the viewer shows it like a measured one.
#pragma once
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/progress.h"
#include "model/efficiency.h"
#include "model/stack.h"
#include "model/topology.h"
#include "run/runner.h"
#include "trace/run_info.h"
#include "trace/trace_file.h"

namespace ringside::model {

/// A machine, per GPU: what a profile JSON file holds (src/model/hardware/*.json).
struct Hardware {
  std::string name, description, source;
  std::string gpu, system;  ///< the parts it is built from (gpus/, systems/), where it names them
  double peak_flops_bf16 = 0, peak_flops_fp32 = 0;  ///< FLOP/s
  double peak_flops_fp8 = 0;                         ///< FLOP/s; 0: no FP8 tensor cores
  double memory_bandwidth = 0;                       ///< bytes/s
  double memory_bytes = 0;                           ///< capacity per GPU
  /// Its system's link tiers, innermost first (topology.h): NVLink in a node or a rack, then
  /// InfiniBand. Placement is the Topology's alone: topology(P).
  std::vector<Tier> tiers;
  bool memory_shared = false;  ///< this-machine: all ranks share one memory (the verdict sums them)
  bool mxfp8 = false;          ///< MXFP8 tensor cores (Blackwell): --fp8-recipe mxfp8
  Efficiency efficiency;       ///< what it achieves, with sources (absent: the roofline only)

  /// The peak of a --dtype's GEMMs: bf16, fp32 or fp8 (0 where the GPU has no FP8).
  double peak_flops(const std::string& dtype) const {
    return dtype == "fp32" ? peak_flops_fp32 : dtype == "fp8" ? peak_flops_fp8 : peak_flops_bf16;
  }

  /// Its tiers as a job of `world` GPUs fills them: where each rank sits, which tier each link
  /// and each group uses. Throws ConfigError for world < 1.
  Topology topology(int world) const { return Topology(tiers, world); }
  /// The innermost tier's domain size: the GPUs one NVLink domain holds (a node's 8, a rack's 72).
  /// 1 where one tier joins every GPU (no placement matters).
  int domain_gpus() const { return tiers.size() > 1 ? tiers.front().gpus : 1; }

  /// The profile as JSON, in the file format (GB/s, us, GB).
  nlohmann::json to_json() const;
};

/// Parses a profile (fields as in src/model/hardware/*.json, "efficiency" optional:
/// parse_efficiency); throws ConfigError naming the
/// field that is missing, of the wrong type, or outside its range (peaks 1e6 to 1e18 FLOP/s,
/// bandwidths 1e-3 to 1e6 GB/s, latency 0 to 1e6 us, memory 1e-3 to 1e6 GB, 1 to 2^20 GPUs
/// per node), which keeps every modeled time finite and catches unit slips.
Hardware parse_hardware(const nlohmann::json& j, const std::string& source);
/// A built-in profile's JSON with its base applied ("base": NAME, a merge patch over that
/// profile) and any fitted parameter values set now (model/parameters.h). Throws ConfigError for
/// an unknown name.
nlohmann::json hardware_json(const std::string& name);
/// A profile file's JSON (`source` names it in errors) with its base and its parts applied
/// ("gpu": a built-in GPU, "system": a built-in system's tiers), parsed. Throws ConfigError for
/// an unknown base, GPU or system (listing the built-in ones) and what parse_hardware throws.
Hardware load_hardware_json(const nlohmann::json& j, const std::string& source);
/// The built-in profiles' names: a100-nvlink, a800-nvlink, h100-ib, h100-nvlink, h200,
/// h800-nvlink (and this-machine).
std::vector<std::string> hardware_names();
/// A built-in profile by name, "this-machine" (measured now, see measure_this_machine), or a
/// JSON file's path. Throws ConfigError listing the names for anything else.
Hardware load_hardware(const std::string& name_or_path);
/// This machine as `ringside bench` measures it, in about a second: one core's OpenBLAS sgemm
/// (n = 1024, best of 3) as its peak, memcpy of 64 MiB as its memory and link bandwidth, a
/// local ping-pong as its link latency, physical memory as its capacity; every rank one node.
Hardware measure_this_machine();
/// The profile as `ranks` ranks see it: where they share one memory (this-machine), each rank's
/// capacity is its share, memory_bytes / ranks (a whole step's fit is per rank, so 16 ranks of
/// 23 GiB each do not fit in one 24 GiB machine), and the description says so; any other profile
/// unchanged. Throws ConfigError for ranks < 1.
Hardware memory_per_rank(Hardware hw, int ranks);

/// The dry run: the plan on its P local ranks with tensors that hold no memory, a backend
/// without math and transfers that move nothing; returns its schedule (every rank's trace;
/// otherData names the run). Allocations are counted in `tracker`, which must outlive
/// `results` (every rank's record, whose tensors hold no data).
trace::TraceData dry_run(const RunPlan& plan, MemoryTracker& tracker, std::vector<RunRecord>* results = nullptr,
                         const RankOptions& rank_opts = {});

/// An upper bound on the events a dry run of any strategy records on P ranks: each rank's
/// schedule has O(P) steps (its ring's P steps, P - 1 for each ring collective), so the whole
/// is O(P^2); measured, the ring (the largest) records 61.5 P^2 + 22 P (4,005,366 at P = 256),
/// and test_model holds every strategy below this bound. A per-document layout (zigzag-per-doc,
/// greedy) gives each rank two runs a document, and each ring step four (query run, key run)
/// pairs a document, two or three events each: 24 P^2 (N + 1) more for N documents (measured,
/// the ring at P = 2 records 16.4 P^2 N).
double schedule_events_bound(int P, const LayerConfig& cfg, Layout layout);
/// Bytes a dry run, its model and the modeled trace's writing hold at once on P ranks: about
/// 1 KiB per event of schedule_events_bound (the recorded schedule, the model's copy, the
/// metrics; 3.4 GB peak measured for the ring's 4.0 million events at P = 256), for the memory
/// check before a dry run.
double schedule_bytes(int P, const LayerConfig& cfg, Layout layout);

struct ModelOptions {
  /// The element type to model: "bf16" halves the bytes of an fp32 trace (ops, transfers and
  /// memory) and uses the bf16 peak; "fp32" keeps them and uses the fp32 peak; "fp8" is bf16
  /// with the GEMMs at the FP8 rate after quantizing their inputs (model/fp8.h: attention and
  /// communication stay bf16, so the bytes stay bf16's).
  std::string dtype = "bf16";
  /// "achieved": the rates of the profile's efficiency (a profile without one: the roofline);
  /// "ideal": the roofline of datasheet peaks and line rates, whatever the profile holds.
  std::string efficiency = "achieved";
  /// The software stack the schedule runs on (model/stack.h): its attention kernels, ring merge,
  /// TP overlap, FP8 recipe and host costs, unless the options below say otherwise.
  Stack stack = default_stack();
  /// The attention kernel family: fa2, fa3, fa4 or cudnn; "" is the stack's first the profile has.
  std::string attention_kernel;
  /// How a ring merges each step's partial output into the running one (achieved only):
  /// "fused", one kernel a merge (ringside's lse_merge, TransformerEngine's correction kernels);
  /// "unfused", ring-flash-attention's update_out_and_lse: a cast of the block's output to fp32
  /// and four elementwise torch ops, each a pass over the fp32 output (3.8x the fused bytes,
  /// 9 kernels); "" the stack's.
  std::string merge;
  /// The FP8 recipe under --dtype fp8 (model/fp8.h); "" the stack's.
  std::string fp8_recipe;
  /// TP's all-gathers and reduce-scatters split into chunks under their GEMMs (Megatron's
  /// --tp-comm-overlap, torch's async TP: model/tp_overlap.h); unset, the stack's.
  std::optional<bool> tp_comm_overlap;
  /// The GPU of each rank, by rank (empty: rank r on GPU r, the schedule's own order): a
  /// placement other than the recorded one, such as the same schedule with its groups placed
  /// in cp-tp order (the planner's reuse of a dry run). Ranks past its end: their own number.
  std::vector<int> gpu_of;
  /// The job's GPUs, which set how the system's domains are filled (Topology): a group's
  /// schedule replayed as part of a larger job (the step planner's). 0: the schedule's ranks.
  int job_gpus = 0;
  /// The gradient all-reduce (sublayer grad_sync) overlapped with the backward, as Megatron's
  /// --overlap-grad-reduce runs it: each rank's grad_sync events run on a stream of their own, in
  /// their order, each starting once the rank's backward has passed the point where it was posted
  /// (a bucket's gradients are complete), and its transfers on a lane of their own (NCCL's
  /// channels beside the attention's point-to-point: the two do not share the link's rate here,
  /// optimistic where both send at once). The backward ends when its compute and every bucket
  /// have finished, so only what outlasts the backward is exposed. A schedule recorded with
  /// RankOptions::overlap_grad_reduce posts the buckets where their gradients are ready
  /// (parallel_layer.h); one recorded without it has one all-reduce at the end, which nothing
  /// is left to hide. false: grad_sync runs where it was posted, exposed.
  bool overlap_grad_reduce = false;
};

/// The ring merge, FP8 recipe and TP overlap `o` models: its own, else its stack's.
std::string merge_of(const ModelOptions& o);
std::string fp8_recipe_of(const ModelOptions& o);
bool tp_comm_overlap_of(const ModelOptions& o);

/// What `o` models on `hw`, every option as the model resolves it: the element type, the
/// efficiency asked for, the attention kernel whose rates it runs ("" at the roofline:
/// attention_kernel_of), the stack's name, its merge, FP8 recipe (under fp8 only), TP overlap and
/// gradient reduction type unless `o` overrides them, and the layer's overlapped gradient
/// all-reduce. The record a modeled trace and each modeled group keep (otherData.modeling) and
/// every command that models writes in its --json; gpu_of, a candidate's placement, is not an
/// option of the run and is not in it.
trace::ModelingInfo modeling_info(const Hardware& hw, const ModelOptions& o);

/// Checks `o` against `hw` (dtype, efficiency, merge, FP8 recipe and kernel known; fp8 only where
/// the profile has an FP8 peak, mxfp8 only where it has MXFP8; the kernel one the profile has);
/// throws ConfigError naming the option.
void check_model_options(const Hardware& hw, const ModelOptions& o);

/// Whether `o` models `hw` at the roofline of datasheet peaks: --efficiency ideal, or a profile
/// that states no efficiency. Otherwise at the rates real kernels and NCCL reach.
bool at_roofline(const Hardware& hw, const ModelOptions& o);

/// The kernel family `o` runs on `hw` ("" under the roofline or a profile without efficiency): the
/// one asked for, else the stack's first that the profile has rates for, else the profile's default.
std::string attention_kernel_of(const Hardware& hw, const ModelOptions& o);

/// The rates `o` models on `hw`, in a line or two for a report's header: "GEMMs up to 87% of
/// 312 TFLOP/s (by shape), attention at fa2's published rates, memory-bound ops at 85% of 2039
/// GB/s + 3 us a kernel; transfers at 78% of 300 GB/s + 3 us inside a node of 8 GPUs, ...", or
/// the roofline's peaks and line rates.
/// `wrap` goes between the ops' rates and the transfers' ("\n  " to break the line).
std::string rates_summary(const Hardware& hw, const ModelOptions& o, const std::string& wrap = " ");

/// Lesson 3's threshold: the tokens c a ring block needs for its compute to hide its K/V
/// transfer, for `kv_per_q` K/V heads a query head (Hkv/H), on a link of tier `link`.
/// The roofline (--efficiency ideal, or a profile without efficiency): (Hkv/H) F / B (Liu et al.
/// 2023). Achieved: the attention kernel's forward rate R c / (c + k_half) against NCCL's share
/// of the link gives (Hkv/H) R / B_nccl - k_half (at least 0). fp32 moves twice the bytes; fp8
/// runs attention in bf16. Under a causal mask (`causal`) a balanced step (zigzag, striped)
/// computes half of its c x c query-key pairs while it still moves all c tokens' K/V, so the
/// first term doubles: 2 (Hkv/H) F / B, or 2 (Hkv/H) R / B_nccl - k_half. `formula` names the
/// one used, after its factor kv_per_q (the caller names that: Hkv/H, or what a rank reads after
/// Ulysses), and `doubling` is "2 " under a causal mask (printed before the factor), else "".
struct RingThreshold {
  double tokens = 0;
  const char* formula = "";
  const char* doubling = "";
};
RingThreshold ring_threshold(const Hardware& hw, const ModelOptions& o, const Tier& link, double kv_per_q, bool causal = false);

/// Lesson 3's threshold with each ring step's fixed costs: the smallest c where a step's compute
/// (the attention kernel's c x c block of H heads at its achieved rate, occupancy included, its
/// launch, and the merge of the block's output into the fp32 running one, by the stack's bytes
/// and kernels) lasts as long as its transfer (K and V: two messages of b c Hkv d elements, each
/// paying the link's latency). Found by bisection; the roofline's (Hkv/H) F/B under --efficiency
/// ideal. Unmasked, as every step after the first is under the contiguous layout.
double ring_threshold_with_fixed_costs(const Hardware& hw, const ModelOptions& o, const Tier& link, int64_t b, int64_t H, int64_t Hkv,
                                       int64_t d);

/// The modeled seconds of one compute event `ev` of a recorded trace (its bytes already scaled
/// to the modeled element type: `bytes`), under `o` on `hw`: the formulas at the top of this file
/// and efficiency.h. A GEMM or attention call whose shape the trace does not give (ev.detail)
/// runs at the long-shape rate. Containers, waits and comm events are not ops: 0.
double op_seconds(const trace::Event& ev, double bytes, const Hardware& hw, const ModelOptions& o);
/// The kernels op_seconds charges `ev` for (each pays the profile's launch, and the host's issue
/// under the stack's host costs): 1 for most ops, the unfused merge's 9, an FP8 GEMM's
/// quantizations; 0 for what is not an op.
int op_kernels(const trace::Event& ev, const Hardware& hw, const ModelOptions& o);

/// The guard against modeled rates above the hardware, asserted by the replay on every op and
/// transfer: throws Error (a bug in the model or an inconsistent profile, never a result to
/// print) naming `what` (the op or transfer) and the numbers when `ev` at `seconds` does more
/// FLOP/s than the peak of the type it runs in (hw.peak_flops: FP8 GEMMs fp8's, every other op
/// bf16's or fp32's), or moves more than the memory bandwidth (bytes/s); or when a transfer of
/// `bytes` in `seconds` passes its link's line rate. A relative 1e-9 allows the roofline's
/// rounding. Units: seconds, bytes.
void check_op_within_hardware(const trace::Event& ev, double bytes, double seconds, const Hardware& hw, const ModelOptions& o,
                              const std::function<std::string()>& what);
void check_transfer_within_hardware(double bytes, double seconds, const Tier& link, const Hardware& hw,
                                    const std::function<std::string()>& what);

/// Bytes an element of the modeled type `dtype` holds: fp32 4, bf16 2, fp8 2 (only the GEMMs
/// run in FP8: its tensors keep bf16's bytes, ModelOptions::dtype).
double element_bytes(const std::string& dtype);

/// The modeled seconds of a `bytes` transfer on a link of tier `link`: latency + bytes / (line
/// rate x the tier's NCCL efficiency); ideal: / line rate.
double transfer_seconds(double bytes, const Tier& link, const Hardware& hw, const ModelOptions& o);

/// Replays every strategy of `schedule` on `hw` and returns the modeled trace (a trace that is
/// already modeled is refused: ConfigError; the modeled twins of a measured trace, the groups
/// otherData.modeled_groups lists, are left out: the recorded groups are modeled): the same events,
/// in the same order, with modeled times (each strategy's ranks start at 0), memory samples
/// scaled and moved to their modeled times, and otherData {..., modeled: true, hardware,
/// model_dtype, ..., modeling} (mark_modeled). Throws ringside::Error for a trace without program order (recorded before
/// ringside 0.7 or by another tool) or a schedule that cannot finish (a wait whose transfer is
/// never posted), naming the rank and the transfer. With `progress`, reports its two phases
/// (core/progress.h): "preparing the replay on <hw>", counted in ranks, and "replaying the
/// schedule on <hw>", in its events' starts and ends.
trace::TraceData model_trace(const trace::TraceData& schedule, const Hardware& hw, const ModelOptions& o = {},
                             ProgressReport* progress = nullptr);

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
/// group `only` when it is given): a lesson adds each twin when it needs its numbers. Sets
/// otherData.modeled_hardware to `hw` when it adds a twin (a trace with no recorded group is left
/// as it is: it names no profile its groups are not on).
void add_modeled_twins(trace::TraceData& t, const Hardware& hw, const ModelOptions& o = {}, const std::string& only = "");

/// Puts `ranks`, a modeled timeline of the group `of` on `hw` under `o` (model_trace's, or a dry
/// run's), into `t` at index `at` of t.ranks (past the end: at the end) as the group
/// modeled_label(of, hw.name), and lists it in t.run.groups as {of, hardware, dtype, efficiency,
/// modeling: modeling_info(hw, o)}. Returns that entry, for more fields (a dry run's config, a
/// plan's layers).
trace::GroupInfo& insert_modeled_group(trace::TraceData& t, std::vector<trace::RankTrace> ranks, const std::string& of,
                                       const Hardware& hw, const ModelOptions& o, size_t at);

/// Marks `run` as a modeled run's, on `hw` under `o`: modeled, hardware (the profile),
/// model_dtype, model_efficiency, model_attention_kernel and modeling (modeling_info), as every
/// modeled trace says it (model_trace's, a plan's, a step's timeline).
void mark_modeled(trace::RunInfo& run, const Hardware& hw, const ModelOptions& o);

/// The default profile of the modeled twins of compare, run and lesson: a100-nvlink. The demo's
/// default layer (P = 4, s 4096, Hkv/H 1/2, zigzag steps of 512 x 1024 tokens) sits near its
/// threshold c* = (Hkv/H) F/B = 520 tokens in bf16, so the ring's K/V transfer is partly hidden:
/// the lesson of c >= F/B is visible in the demo itself.
inline constexpr const char* kDefaultTwinHardware = "a100-nvlink";

}  // namespace ringside::model

// The trace file: Chrome Trace Event JSON (the "JSON Object Format" of the Trace Event Format
// document, which Perfetto and chrome://tracing open):
//
//   {"traceEvents": [...], "displayTimeUnit": "ns", "otherData": {...}}
//
//   pid   one process per (strategy, rank): pid = strategy index * 1000 + rank, named with an
//         `M` process_name event "GPU r" (one strategy) or "<strategy>: GPU r" (several)
//   tid   0 = the compute stream; 1, 2, ... = comm lanes (transfers that overlap in time go to
//         separate lanes, since a thread's slices must nest), named with `M` thread_name
//   X     every op, collective, wait, phase, ring step and transfer that took time: ts and
//         dur in microseconds (ns resolution); cat: the event's Kind by its name (trace.h's
//         to_string: "attention", "ring_step", "all_gather", ...; one ringside does not know
//         reads as "other"); args: phase, step, peer, bytes, flops,
//         collective, direction, tag, seq, group_size, order, end_order, detail (only those
//         that apply).
//         A thread's slices are written by start, ties in program order (`order`), so that
//         viewers, which break ties by file order, nest them as the program did.
//   i     an event of no duration (a wait that found its data there): a process-scoped
//         instant ("s": "p"), which no viewer nests inside a slice; its tid and args as for X
//   C     "memory": bytes live per category (weights, grads, activations, workspace, comm),
//         the series a viewer stacks; "memory total": their sum, a counter of its own
//   s, f  a flow from each send to its receive (same id), each end 1 ns inside its slice (a
//         viewer binds an end to the slice holding its time, edges included); f has bp "e"
//   otherData  the run (trace/run_info.h): ringside_version, producer, config, layout, ranks,
//         backend, device, dtype, clock; a modeled trace's hardware, model_dtype, ..., modeling
//         (every model option: trace::ModelingInfo); the modeled groups beside a recorded run
//         (modeled_groups, each with its modeling; modeled_hardware); strategies;
//         `processes` [{pid, strategy, rank, clock_offset_ns, clock_uncertainty_ns}]; and a
//         producer's own fields (a lesson's steps)
#pragma once
#include <cstdint>
#include <ostream>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "trace/run_info.h"
#include "trace/trace.h"

namespace ringside::trace {

/// The range of values the reader accepts, which the writer holds to as well, so that ringside
/// never writes a file it then refuses: times within +-9e12 us (about 104 days; ns stay exact in
/// int64 and double), bytes up to 2^53 (8 PiB: exact in a double, sums of a few stay in int64),
/// FLOPs up to 1e24.
inline constexpr double kMaxTimeUs = 9e12;
inline constexpr int64_t kMaxTimeNs = 9'000'000'000'000'000;
/// The latest Kineto timestamp the reader takes: microseconds since the Unix epoch (older
/// profilers' clock) up to 9e15 (the year 2255), whose ns stay in int64; each run is moved to
/// start at 0 once read, inside kMaxTimeUs.
inline constexpr double kMaxEpochUs = 9e15;
/// The memory counter's series, by MemCategory, as the file names them.
inline constexpr const char* kCategoryNames[kNumMemCategories] = {"weights", "grads", "activations", "workspace", "comm"};
inline constexpr double kMaxBytes = 9007199254740992.0;
inline constexpr double kMaxFlops = 1e24;
/// Ranks the writer can name, 0 to kMaxRanks - 1: pid = strategy index * kMaxRanks + rank.
inline constexpr int kMaxRanks = 1000;

/// A send bound to its receive, by process index and time (ns), as the file's flow events say.
struct Flow {
  int64_t id = 0;
  size_t from = 0, to = 0;  ///< indices into TraceData::ranks
  int64_t from_ts_ns = 0, to_ts_ns = 0;
};

/// What a trace file holds.
struct TraceData {
  RunInfo run;  ///< otherData's description of the run, typed (the reader parses it, the writer writes it)
  nlohmann::json other = nlohmann::json::object();  ///< the rest of otherData: a producer's own fields
  std::vector<RankTrace> ranks;                     ///< one per (strategy, rank), strategies in run order
  std::vector<Flow> flows;                          ///< filled by the reader (the writer derives its own)
};

/// Writes the Chrome trace JSON of `t` to `os`, one event at a time (a million-event trace is
/// never one JSON tree in memory). Flows pair the k-th send from rank a to rank b with tag g
/// with the k-th receive at b from a with tag g (MPI's non-overtaking order), per strategy.
/// Throws ringside::Error naming the event and rank for a value outside the reader's range.
void write_chrome_json(std::ostream& os, const TraceData& t);
/// The same document as a JSON value (for tests and small traces).
nlohmann::json to_chrome_json(const TraceData& t);
/// Writes the trace to `path` through core/output.h: a temporary of this writer's own, renamed
/// over the file once whole, so that a reader polling it never sees half of one; a device or
/// pipe is written through. Throws ringside::Error when it cannot.
void write_trace(const std::string& path, const TraceData& t);

/// How the ranks' clocks are put on one timeline.
///   automatic    ranks whose files name one host and one baseTimeNanoseconds share a clock
///                and are not shifted; otherwise as `collectives`
///   collectives  each rank is shifted so that its collectives end with rank 0's: the median
///                over the collectives common to all ranks (the k-th of each rank, same kind)
///                of rank 0's end minus its own. Its uncertainty is the largest deviation of
///                one collective's difference from that median (unknown with one collective)
///   none         the files' clocks as they are
enum class ClockAlign { automatic, collectives, none };
/// The --align values, in ClockAlign's order, and what they do (the ringside and viewer
/// commands' help).
inline constexpr const char* kClockAlignNames[] = {"auto", "collectives", "none"};
inline constexpr const char* kClockAlignHelp =
    "PyTorch profiler (Kineto) traces: how to put the ranks' clocks together: auto (one host's files share a "
    "clock, else as collectives), collectives (shift each rank so that its collectives end with rank 0's, as HTA "
    "lines ranks up), none";
/// The ClockAlign a --align value names (one of kClockAlignNames; anything else is automatic).
inline ClockAlign clock_align_named(std::string_view name) {
  return name == "collectives" ? ClockAlign::collectives : name == "none" ? ClockAlign::none : ClockAlign::automatic;
}

/// Parses and validates Chrome trace JSON: ringside's, or a PyTorch profiler (Kineto) trace of
/// one rank (trace/kineto.h), told apart by content (is_kineto). Throws ringside::Error naming `source`, the event
/// index and the problem for anything malformed: not JSON or truncated, wrong types, numbers
/// out of range (times beyond 9e12 us, negative durations or bytes, ids beyond int32), JSON
/// nested more than 64 levels deep (core/json_input.h), unknown
/// or unsupported phases (ringside reads X, i, C, M, s, f; global instants are skipped), flows
/// without their other end; and for what the model and the metrics rely on: an otherData key
/// RunInfo reads of the wrong type (check_run_info), args.order without args.end_order or after
/// it, two points of one process's program at one order, compute-stream points whose times run
/// against their order (phases aside: a GPU rank's are the host's), a transfer's or wait's
/// direction other than send or recv, a peer that is the event's own rank or no rank of its
/// strategy in the file, one message (sender, receiver, tag, seq) sent or received twice.
TraceData parse_trace(std::string_view text, const std::string& source = "trace");
/// parse_trace of a file's contents (gunzipped when it is gzip, by its magic bytes), or, for a folder,
/// the Kineto traces of its ranks (read_kineto of kineto_files). Throws ringside::Error when it
/// cannot be read, or is too large for memory (core/text_file.h).
TraceData read_trace(const std::string& path, ClockAlign align = ClockAlign::automatic);
/// read_trace of one path; of several (files, or folders whose files are taken), the Kineto
/// traces of one run, one file per rank.
TraceData read_traces(const std::vector<std::string>& paths, ClockAlign align = ClockAlign::automatic);

}  // namespace ringside::trace

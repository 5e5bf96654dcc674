// PyTorch profiler (Kineto) traces: the user's own distributed job, one Chrome trace JSON per
// rank as torch.profiler's export_chrome_trace writes it (tensorboard_trace_handler names them
// <host>_<pid>.<time>.pt.trace.json), read into the same TraceData as ringside's own traces, so
// that trace-stats, the viewer and `model --compare` serve it as they serve ringside's runs.
//
// What the reader takes from each file (tests/fixtures/kineto/README.md has the schema as
// torch 2.15 writes it, and the hand-made GPU fixture the documented GPU fields):
//
//   rank        distributedInfo.rank (else the file name's "rank<N>", else its place in the
//               list); world_size, backend and the process groups from distributedInfo
//   clock       ts/dur in us relative to baseTimeNanoseconds; ranks on one host share it
//   compute     a rank with GPU activity: its kernels (`kernel`, not NCCL's) and copies
//               (`gpu_memcpy`, `gpu_memset`), every stream merged, as HTA counts them; a CPU-only
//               rank: its `cpu_op`s, except those inside a communication op
//   comm        the transfers: NCCL kernels ("nccl..."), gloo/nccl Work spans (`user_annotation`
//               "gloo:send", "gloo:all_reduce", ...), with bytes from "In msg nelems" / "Out msg
//               nelems" and "dtype", or from the tensor's "Input Dims" and "Input type"; the
//               calls that start them (c10d::*, record_param_comms) on a CPU-only rank; the
//               peer of a send or receive from its call's "Concrete Inputs" (gloo)
//   phases      ProfilerStep#N is the window (widened on a GPU rank to the kernels launched in
//               it); record_function ranges are spans (Kind::sublayer) naming what they hold
//               (on a GPU rank their gpu_user_annotation twins, where the GPU ran them);
//               an event inside a range or autograd op named "backward" is in the backward,
//               inside one named "forward" in the forward
//   ring steps  found from the sends and receives: when every rank sends to one peer and
//               receives from another and these form one ring, each round of posts (sends and
//               receives posted with no compute between them) opens a ring step, which lasts
//               until the next round (the phase's last, until the phase ends); rounds inside
//               one record_function range of the user's below the phase's (a step's range) are
//               one step
//   memory      `[memory]` instants' "Total Allocated" (the GPU's on a GPU rank, else the CPU's)
//   left out    python_function, cuda_runtime/driver (used only to find a kernel's launch by
//               "correlation"), flow (`s`/`f`/`t`: launch links) and async
//               (`b`/`e`: paired and read as spans) events' links, the profiler's own events
#pragma once
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "trace/trace_file.h"

namespace ringside::trace {

/// Whether a parsed JSON document is a Kineto trace: an object with "traceEvents" and one of
/// the top-level keys only Kineto writes ("schemaVersion", which every PyTorch profiler trace
/// carries, "deviceProperties", "distributedInfo", "baseTimeNanoseconds", "traceName"). Other
/// Chrome trace JSON (even of Kineto's event categories) is read as ringside's reader reads
/// any foreign trace.
bool is_kineto(const nlohmann::json& doc);

/// RunInfo::producer of a run read from Kineto traces, and its ranks' strategy.
inline constexpr const char* kKinetoProducer = "PyTorch profiler (Kineto)";
inline constexpr const char* kKinetoStrategy = "pytorch";


/// One rank's file: a name for errors (its path) and its JSON text (gzip already undone).
struct KinetoText {
  std::string source;
  std::string text;
};

/// The Kineto files of a run folder: rank*.json, *.pt.trace.json and either gzipped (.gz),
/// sorted by name. Throws Error when `dir` cannot be listed or holds none.
std::vector<std::string> kineto_files(const std::string& dir);

/// The files `paths` stand for: each folder's Kineto files (kineto_files), a folder without
/// any as itself, other paths as they are. What a command checks its outputs against, so that
/// no output replaces a trace it reads from a folder.
std::vector<std::string> trace_input_files(const std::vector<std::string>& paths);

/// A shifted rank's line: "shifted by -1234.567 us (+- 2.100 us)", or "(uncertainty unknown:
/// one collective)" where a single collective set the shift (RunInfo::clock says so).
std::string clock_shift_text(const RunInfo& run, const RankTrace& rank);

/// Reads the ranks' files (one per rank, any order) into one run: strategy "pytorch", ranks
/// by distributedInfo.rank, times in ns from the earliest window start, flows from each send
/// to its receive (the k-th send from a to b with tag t to the k-th receive at b from a with
/// tag t), RankTrace::clock_offset_ns / clock_uncertainty_ns and RunInfo::clock saying how
/// the clocks were aligned. Each file is converted and its JSON dropped before the next is
/// parsed. Throws Error naming the file (and event index) for: not JSON, not a Kineto trace,
/// wrong types or out-of-range values in a field it reads, two files of one rank or of one
/// process (same host and pid), CPU ops of two processes in one file, a rank missing from
/// distributedInfo.world_size's, files that disagree on world_size, an async begin without
/// its end, a peer (a c10d call's "Concrete Inputs" [tensors, group, peer, tag], or "Dst Rank",
/// "Src Rank", ...) that is not a rank of the world (world_size's, else the files') or is the
/// rank's own in a send or receive, a "Concrete Inputs" peer or tag that is not an integer.
TraceData parse_kineto(const std::vector<KinetoText>& files, ClockAlign align = ClockAlign::automatic);
/// One rank's parsed Kineto document, as a run of that one rank (parse_trace's Kineto branch).
TraceData kineto_trace(const nlohmann::json& doc, const std::string& source);
/// parse_kineto of files on disk (each read, and gunzipped when it is gzip, only when its
/// turn comes). Refuses before reading when the files' total size needs more memory than the
/// machine has (require_memory), or one file is over 4 GiB (or unzips past it).
TraceData read_kineto(const std::vector<std::string>& paths, ClockAlign align = ClockAlign::automatic);

}  // namespace ringside::trace

// The GPU kernels of a PyTorch profiler (Kineto) run as measurements: each kernel tied to the CPU
// op that launched it (the kernel's "correlation" names its cudaLaunchKernel, whose enclosing
// cpu_ops on that thread are the op and its callers), and read as a sample of one rate the model
// has a parameter for (`ringside calibrate`, model/calibrate.h):
//
//   gemm       aten::mm, addmm, linear, matmul (2-D), _scaled_mm: m, n, k from "Input Dims",
//              the element type from "Input type"; every kernel the op launched (a split-K GEMM's
//              reduction too) is its time
//   attention  the fused attention ops (SDPA's flash and cuDNN backends, aten::_flash_attention_*,
//              flash_attn's own ops): b, sq, sk, H, Hkv, d from the tensors' dims ([b, s, H, d] or
//              SDPA's [b, H, s, d]), the mask from the op's is_causal ("Concrete Inputs"), the
//              kernel family from the kernel's name (FlashAttention 2: flash_fwd/flash_bwd,
//              pytorch_flash; 3: FlashAttn*Sm90; 4: *Sm100; cuDNN: cudnn/sdpa/fmha)
//   memory     one-kernel elementwise ops and norms (add, mul, copy_, silu, native_layer_norm, ...):
//              the bytes their tensors read and write
//   comm       NCCL kernels with their record_param_comms: the collective, its whole buffer S
//              (nccl-tests' size: an all-gather's output, a reduce-scatter's input, a send's
//              message), its group's ranks and, for a send or receive, the peer
//   gap        two kernels in a row on one stream: the idle time between them, "queued" when the
//              second was launched before the first ended (the GPU's own launch gap, not the host's),
//              and left out when a kernel of another stream ended in between (a wait on it)
//
// What a sample cannot be read from (no shapes, a mask not recorded, a collective without sizes)
// is counted by reason, never guessed.
#pragma once
#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace ringside::trace {

/// A GEMM op's kernels: an m x n x k product in `dtype` ("bf16", "fp16", "fp32", "fp8").
struct GemmSample {
  int rank = 0;
  int64_t m = 0, n = 0, k = 0;
  std::string dtype, op, kernel;  ///< the op ("aten::mm") and its longest kernel's name
  double seconds = 0;             ///< the op's kernels' durations summed
};

/// A fused attention call: b x H heads of sq queries against sk keys (Hkv key/value heads) of
/// head dim d, causal (bottom-right aligned, as FlashAttention masks sq != sk) or not.
struct AttentionSample {
  int rank = 0;
  std::string family;  ///< fa2, fa3, fa4 or cudnn
  bool backward = false, causal = false;
  int64_t b = 0, sq = 0, sk = 0, H = 0, Hkv = 0, d = 0;
  std::string op, kernel;
  double seconds = 0;
};

/// A memory-bound op of one kernel and the bytes its tensors read and write.
struct MemoryBoundSample {
  int rank = 0;
  double bytes = 0;
  std::string op;
  double seconds = 0;
};

/// What a NCCL kernel runs, as the model's forms tell them apart.
enum class NcclCall { all_gather, reduce_scatter, all_reduce, all_to_all, send, recv };
/// "all_gather", ..., "recv": for keys and messages.
const char* nccl_call_name(NcclCall c);

/// A NCCL kernel: `collective` of `bytes` (S) over `ranks` (global ranks, the group's), or to or
/// from `peer`.
struct CommSample {
  int run = 0;  ///< which of the runs given (their calls are matched within one run)
  int rank = 0;
  NcclCall collective = NcclCall::all_reduce;
  double bytes = 0;
  std::vector<int> ranks;  ///< the group's members; empty where the trace does not say
  int peer = -1;           ///< send and recv: the other rank
  std::string group;       ///< the process group's name, "" if not recorded
  int64_t call = -1;       ///< the call's number in its group ("Seq", else its order on the rank)
  double seconds = 0;
};

/// One run's samples, the files they came from and what could not be read.
struct ProfiledRun {
  std::vector<std::string> files;
  int runs = 0;            ///< the runs given: each folder one, the loose files together one
  std::string device;      ///< deviceProperties' GPU name ("" if not recorded)
  int sms = 0;             ///< its SMs (0 if not recorded)
  int host_gpus = 0;       ///< GPUs deviceProperties lists (those its host showed the process), 0 if none
  int world_size = 0;      ///< distributedInfo's (the files' count if not recorded)
  std::map<int, std::string> host;  ///< rank -> host name, where the files say
  int64_t kernels = 0;     ///< GPU kernels read, all kinds
  bool shapes = false;     ///< some cpu_op carries "Input Dims" (record_shapes=True)
  std::vector<GemmSample> gemms;
  std::vector<AttentionSample> attention;
  std::vector<MemoryBoundSample> memory;
  std::vector<CommSample> comms;
  std::vector<double> queued_gaps, host_gaps;  ///< seconds, see the file's comment
  std::map<std::string, int64_t> skipped;      ///< kernels not read as samples, by reason
};

/// Reads the profiler traces `paths` (files or folders of them, trace/kineto.h's kineto_files;
/// several runs may be given together, each file one rank of one run) into samples. Throws Error
/// naming the file (and "traceEvents[i]" for an event) for: a file that is not JSON, not a
/// Kineto trace, a field of the wrong type or out of range, a kernel without its correlation.
ProfiledRun read_profiled_run(const std::vector<std::string>& paths);

}  // namespace ringside::trace

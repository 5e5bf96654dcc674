// The software stack as an input, like the hardware: which implementation runs the schedule.
//
// The same schedule costs different times under different software: the attention kernel family
// a framework calls, how its ring merges each step's output, whether its TP all-gathers and
// reduce-scatters run under their GEMMs, its FP8 recipe, and what its host spends issuing each
// kernel and NCCL call. A stack file (src/model/stacks/*.json, or your own with --stack FILE) says
// each, with its source; `--stack` picks one (megatron, the default: Megatron-Core with
// TransformerEngine), and --attention-kernel, --merge, --fp8-recipe and --tp-comm-overlap
// override its choices one by one.
#pragma once
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace ringside::model {

struct Stack {
  std::string name, description, source;
  /// Attention kernel families in the stack's order of preference: the first the profile has
  /// published rates for runs (TransformerEngine on Hopper: cuDNN, then FlashAttention).
  std::vector<std::string> attention_kernels;
  /// The fraction of the family's published rates the stack's build of it reaches (PyTorch's
  /// bundled FlashAttention 2 behind SDPA is not flash_attn's own): 1 for the library itself.
  double attention_rate = 1;
  std::string attention_source;
  std::string merge = "fused";  ///< the ring's merge of each step: fused or unfused (ModelOptions::merge)
  double merge_bytes = 10;      ///< bytes an output element costs in one step's merge (fp32 accumulators)
  int merge_kernels = 1;        ///< kernels a step's merge launches
  std::string merge_source;
  bool tp_comm_overlap = false;  ///< TP's collectives under their GEMMs unless told otherwise
  int tp_overlap_sms = 0;        ///< SMs an overlapped reduce-scatter takes from its GEMM chunks
  std::string tp_overlap_source;
  /// Its --recompute selective also runs every second forward matmul again in the backward
  /// (torchtitan's per-op policy: model/schedule_passes.h), beside the norms and activations.
  bool selective_recomputes_every_second_gemm = false;
  std::string recompute_source;
  /// Gradients reduced over DP x CP in fp32 (4 bytes) rather than the weights' type.
  bool grad_reduce_fp32 = false;
  std::string grad_reduce_source;
  std::string fp8_recipe = "delayed";  ///< delayed, current, block or mxfp8 (model/fp8.h)
  std::string fp8_source;
  /// The host: CPU time to issue one kernel, and one NCCL call (a batched send/recv is one), in
  /// seconds. A GPU whose kernels are shorter than this waits for its host (model.h).
  double host_kernel_s = 0, host_comm_s = 0;
  std::string host_source;

  nlohmann::json to_json() const;
};

/// Parses a stack file; throws ConfigError naming the field (a kernel family other than fa2,
/// fa3, fa4, cudnn; a merge other than fused, unfused; an unknown FP8 recipe; a host cost outside 0 to
/// 10,000 us; a missing source).
Stack parse_stack(const nlohmann::json& j, const std::string& source);
/// The built-in stacks' names: deepspeed, megatron, ring-flash-attention, torchtitan.
std::vector<std::string> stack_names();
/// A built-in stack by name, or a JSON file's path; throws ConfigError listing the names.
Stack load_stack(const std::string& name_or_path);
/// The default stack, megatron.
Stack default_stack();
/// A built-in stack's JSON, with any fitted parameter values set now (model/parameters.h).
nlohmann::json stack_json(const std::string& name);

}  // namespace ringside::model

// Megatron-LM tensor parallelism with sequence parallelism (Korthikanti et al. 2022).
#pragma once
#include "parallel/strategy.h"

namespace ringside {

/// TP+SP as a Strategy: name "tp-sp".
Strategy tp_sp_strategy();

/// Throws ConfigError unless H, Hkv, f and s all divide by P (heads and the MLP are split
/// across ranks, the sequence between the tensor-parallel blocks).
void validate_tp_sp(const LayerConfig& cfg, int P);

/// Saved-activation bytes per rank: the reference's divided by P, exactly,
///   sizeof(T) (N/P) (6 h + 2 Hkv d + 2 f + 4 + H),  N = b s.
/// Every saved tensor is split by P: the LayerNorm and dropout region by sequence, the
/// attention and MLP by heads and by f. Korthikanti et al. 2022, eq. 4 (their (sbh/t)(34 + 5as/h)
/// for 16-bit with the s x s softmax stored; here attention is blockwise and stores lse).
int64_t tp_sp_saved_bytes(const LayerConfig& cfg, int P, int rank, DType dt);

/// Bytes rank `rank` sends. Forward: 2 all-gathers + 2 reduce-scatters of N h elements,
/// 4 N h (P-1)/P, the same as plain TP's 2 all-reduces (design.md; Korthikanti et al. 2022,
/// section 4.2.2). Backward: the same 4 in reverse plus 2 all-gathers that re-gather the
/// LayerNorm outputs for the weight gradients (Megatron keeps them sharded), 6 N h (P-1)/P,
/// plus one ring all-reduce of the 6 h sequence-parallel parameter gradients (LayerNorms,
/// o.bias, fc2.bias).
CommBytes tp_sp_comm_bytes(const LayerConfig& cfg, int P, int rank, DType dt);

/// One rank of TP+SP, forward and backward (see strategy.h).
RankResult tp_sp_run(const LayerConfig& cfg, Communicator& comm, Backend& be, MemoryTracker& tracker, DType dt);

}  // namespace ringside

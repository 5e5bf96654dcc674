// DeepSpeed-Ulysses (Jacobs et al. 2023): sequence parallelism by all-to-all on heads.
#pragma once
#include "parallel/strategy.h"

namespace ringside {

/// Ulysses as a Strategy: name "ulysses".
Strategy ulysses_strategy();

/// Throws ConfigError unless s % P == 0, H % P == 0, and Hkv either divides by P or divides
/// P (then each K/V head is replicated P / Hkv times so that every rank has the head its
/// query heads read).
void validate_ulysses(const LayerConfig& cfg, int P);

/// K/V heads after replication: max(Hkv, P) when P % Hkv == 0, else Hkv.
int64_t ulysses_kv_heads(const LayerConfig& cfg, int P);

/// Saved-activation bytes per rank, with Hkv' = ulysses_kv_heads and N = b s:
///   sizeof(T) ((N/P) (7 h + 2 f + 4 + H) + 2 N (Hkv'/P) d).
/// Everything outside attention is on s/P tokens; attention keeps q, k, v, out and lse for
/// H/P heads of the whole sequence, and the output projection's input in sequence layout.
int64_t ulysses_saved_bytes(const LayerConfig& cfg, int P, int rank, DType dt);

/// Bytes rank `rank` sends. Forward: all-to-alls of q, k, v and the attention output, each
/// sending (P-1)/P of the rank's share: (2 + 2 Hkv'/H) N h (P-1)/P^2 (the DeepSpeed-Ulysses
/// paper's 4Nh/P per link for Hkv' = H). Backward: the same four all-to-alls, plus a ring
/// all-reduce of every weight gradient (weights are replicated; each rank saw s/P tokens).
CommBytes ulysses_comm_bytes(const LayerConfig& cfg, int P, int rank, DType dt);

/// One rank of Ulysses, forward and backward (see strategy.h).
RankResult ulysses_run(const LayerConfig& cfg, Communicator& comm, Backend& be, MemoryTracker& tracker, DType dt);

}  // namespace ringside

// The layer split T x C ways: tensor parallelism with sequence parallelism over T ranks, and
// context parallelism over C, by any of the attention algorithms (groups.h). Every strategy is
// a configuration of it: tp-sp = T P, ring = C P p2p, ulysses = C P a2a, all-gather = C P
// all_gather, and the hybrids (TP x CP, Ulysses x ring). What a rank of it saves, sends and
// computes is predicted by parallel/formulas.h; the tests hold the measured values to them.
#pragma once
#include "parallel/strategy.h"

namespace ringside {

/// One rank of the layer under `par` (resolved for comm.size()), forward and backward (see
/// Strategy::run). Validates on every rank before any communication.
RankResult parallel_layer_run(const ParallelConfig& par, const LayerConfig& cfg, Communicator& comm, Backend& be,
                              MemoryTracker& tracker, DType dt);

}  // namespace ringside

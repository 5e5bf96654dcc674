// Traces across processes: one timeline for ranks on different clocks, and every rank's trace
// brought to rank 0 to be written.
#pragma once
#include <vector>

#include "comm/communicator.h"
#include "trace/trace.h"

namespace ringside::trace {

/// Estimates how the caller's steady clock maps onto rank 0's (collective over comm), and
/// fixes the shared timeline's zero at rank 0's clock now. On the local backend (one process,
/// one clock) the offset is 0 exactly. Across processes, each rank r > 0 exchanges `rounds`
/// ping-pongs with rank 0 (Cristian's algorithm): offset = t0 - (t_send + t_recv) / 2 from the
/// round with the shortest round trip, uncertainty = half that round trip.
Clock align_clocks(Communicator& comm, int rounds = 8);

/// Every rank's trace, collected on rank 0 (in rank order); other ranks get an empty vector.
/// Collective over comm.
std::vector<RankTrace> gather_to_root(Communicator& comm, RankTrace mine);

}  // namespace ringside::trace

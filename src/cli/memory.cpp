// Memory before the work: what a job will need (the limits it is held to: core/memory_limits.h).
#include <algorithm>

#include "cli/commands.h"
#include "cli/format.h"
#include "core/error.h"
#include "core/memory_limits.h"
#include "layer/reference.h"

namespace ringside::cli {

double reference_peak_bytes(const LayerConfig& c, DType dt) {
  const double es = double(dtype_size(dt)), N = double(c.tokens()), params = double(c.param_count());
  const double saved = double(saved_activation_bytes(c, dt));
  const double mlp = double(c.fc1_width()) + double(c.f);  // the backward's du and dg
  return 2 * params * es + saved + N * es * (double(c.qkv_width()) + mlp + 8.0 * c.h);
}

void check_memory(const LayerConfig& c, int P, int local_ranks, bool with_references) {
  const double params = double(c.param_count());
  const double strategy = reference_peak_bytes(c, DType::f32) + 4 * (P * (2 * params + 3 * double(c.tokens()) * c.h) - 2 * params);
  // The ranks' threads and the main thread (the references) call BLAS; each rank's comm thread
  // (or MPI's progress thread) does not.
  require_memory(with_references ? std::max(reference_peak_bytes(c, DType::f64), strategy) : strategy, "this job",
                 "--seq, --batch, --hidden, --ffn or --ranks", local_ranks + 1, local_ranks);
}

}  // namespace ringside::cli

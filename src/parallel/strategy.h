// A strategy: one way of splitting the layer over P ranks (a parallel configuration, see
// groups.h), what a rank's run of it returns, and the registry of the named ones.
#pragma once
#include <string>
#include <vector>

#include "comm/communicator.h"
#include "device/backend.h"
#include "layer/config.h"
#include "layer/weights.h"
#include "parallel/attention.h"
#include "parallel/groups.h"

namespace ringside {

/// Bytes one rank sends, per phase, as a strategy's analytic formula predicts them.
struct CommBytes {
  int64_t forward = 0, backward = 0;
};

/// One rank's run of a strategy: the gathered results (identical on every rank) and what the
/// rank measured about itself.
struct RankResult {
  double attention_flops = 0;     ///< forward attention FLOPs this rank computed
  std::vector<StepRecord> steps;  ///< per ring step, forward then backward (configurations with a ring)
  Tensor out, dx;      ///< [b, s, h], full
  LayerWeights grads;  ///< full shapes, as the reference's
  int64_t peak_saved = 0;  ///< peak bytes of MemCategory::activations on this rank
  int64_t peak_bytes = 0;  ///< peak bytes of all categories on this rank during forward + backward
  int64_t peak_comm_forward = 0;  ///< peak bytes of MemCategory::comm in the forward (transfer buffers: the
                                  ///< ring's blocks in flight, all_gather's whole K/V)
  CommStats forward, backward;  ///< bytes this rank moved in each phase
  double forward_s = 0, backward_s = 0;
  LayerWeights local_grads;  ///< this rank's own gradient shards, before any gathering
  /// With TP (T > 1): the sequence-parallel parameters' gradients (LayerNorms, o.bias,
  /// fc2.bias) before their all-reduce over TP, i.e. over this rank's share of the tokens alone.
  LayerWeights partial_grads;
};

/// A parallel configuration, named, with what it does and what its formulas predict.
struct Strategy {
  std::string name;     ///< "tp-sp", "ring", "ulysses", "all-gather", "tp2xring2", ...
  std::string summary;  ///< one line for --help and the table
  ParallelConfig parallel;  ///< degrees; 0 takes the rest of P

  /// Throws ConfigError, identically on every rank, before any communication: the broken rule.
  void validate(const LayerConfig& cfg, int P) const { parallel.validate(cfg, P); }
  /// The same, and the device's own rule: the CUDA kernels know the causal mask alone, so on
  /// Device::cuda a run that needs packed documents, a window or padding (a length its shards
  /// do not divide) is refused, naming why and --device cpu.
  void validate(const LayerConfig& cfg, int P, Device device) const;
  /// Runs forward and backward as rank comm.rank() of comm.size(), in dtype dt, on inputs
  /// drawn from cfg.seed exactly as the reference draws them.
  RankResult run(const LayerConfig& cfg, Communicator& comm, Backend& be, MemoryTracker& tracker, DType dt) const;
  /// Saved-activation bytes of `rank` (analytic), and its bytes sent per phase (analytic).
  int64_t saved_bytes(const LayerConfig& cfg, int P, int rank, DType dt) const;
  CommBytes comm_bytes(const LayerConfig& cfg, int P, int rank, DType dt) const;
};

/// The named strategies, in the order compare runs them: tp-sp, ring, ulysses, all-gather.
const std::vector<Strategy>& strategies();
/// The strategies compare runs by default on P ranks: the named ones, then one of each hybrid
/// whose degrees fit P (at P 4: tp2xring2, ulysses2xring2).
std::vector<Strategy> default_strategies(int P);
/// The strategy called `name`: a named one, or a configuration's name (groups.h). Throws
/// ConfigError naming the grammar otherwise.
Strategy find_strategy(const std::string& name);
/// The strategy of a configuration.
Strategy make_strategy(const ParallelConfig& par);
/// `st` with its degrees resolved for P ranks and its canonical name ("tp2xring" on 4 ranks is
/// "tp2xring2"; "ring4" is "ring"). Throws ConfigError as ParallelConfig::resolved does.
Strategy resolve_strategy(const Strategy& st, int P);

}  // namespace ringside

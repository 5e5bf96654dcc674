// A hardware profile fitted to the user's own profiler run (`ringside calibrate`): the rates the
// model's profile holds, each re-fitted, with the model's own functional forms (efficiency.h), to
// the kernels of the run that measure it (trace/kineto_kernels.h), and the base profile's value
// kept, and said, wherever the run has too few of them.
//
//   efficiency.gemm.<dtype>      MAMF fraction: flops / min(peak x fraction x waves(m, n) x
//                                k / (k + k_half) (normalised at the best shape) x clock, peak)
//   efficiency.gemm.k_half       the k term's half point, where the run's k spans 4x or more
//   attention.<family>.<curve>   R and k_half of R e / (e + k_half) x head dim x occupancy, per
//                                direction and mask (e: the keys a query sees)
//   efficiency.memory.fraction   bytes / (HBM x fraction), on ops of 16 MiB or more
//   efficiency.memory.launch_us  the median gap between two kernels in a row on one stream, the
//                                second launched before the first ended (the GPU's, not the host's)
//   tiers[t].latency_us, .efficiency   each NCCL call in one tier (a group inside one node: the
//                                innermost; one GPU a node: the outermost) as the model's ring
//                                runs it: steps x latency + steps x (S / n) / (line rate x
//                                efficiency), steps n - 1 (all-gather, reduce-scatter, all-to-all),
//                                2 (n - 1) (all-reduce), 1 (send, receive S); a collective's time
//                                the least over its ranks (the others waited for the last to join)
//
//   efficiency.gemm.sustained    1 where a GEMM fraction is fitted (the run's kernels are what its
//                                steps sustain), else the base's
//
// Every fit minimises the squared log error (time predicted / measured) over its samples, each
// shape once with the weight of its count: golden-section on each parameter's range (fractions
// in (0, 1], rates at most the peak: no fitted efficiency passes 1), closed form for the links.
// The base's value is kept, and why said, for: fewer than min_samples; a half point without 3
// values spanning 4x, a latency without 3 sizes spanning 8x; a fit still more than 5% off at its
// bound (an efficiency of 1, the peak); a median error past 25%; a parameter the samples' times
// do not move; a latency past 1 ms or a link under 5% of its line rate (kernels that waited).
// Samples more than 2x off a first fit are left out (counted), GEMMs and attention calls under
// 2 us at the peak are not samples, and every fitted value is written to 4 significant digits.
#pragma once
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "model/model.h"
#include "trace/kineto_kernels.h"

namespace ringside::model {

struct CalibrateOptions {
  /// The software the run used (stack.h): its attention rate factor is undone, so the fitted R is
  /// the kernel's own.
  std::string stack = "megatron";
  /// GPUs a node; 0: the most of the ranks a host name holds and the GPUs deviceProperties lists,
  /// else the base profile's innermost domain.
  int gpus_per_node = 0;
  /// Fewest samples a parameter is fitted from; below it the base's value is kept.
  int min_samples = 3;
};

/// One parameter of the profile as the run measured it.
struct CalibratedParameter {
  std::string name;  ///< its place in the profile: "efficiency.gemm.bf16", "tiers[0].latency_us"
  std::string unit;  ///< "", "TFLOP/s", "us", "tokens"
  double base = 0, fitted = 0;
  int samples = 0;           ///< the run's samples of it (kernels, gaps, calls)
  bool kept = true;          ///< true: the base's value is written (`why` says why)
  std::string why;
  double median_error = 0;   ///< |predicted / measured - 1|, median over its samples at the written value
  double worst_error = 0;
  bool spread = false;       ///< the errors are the samples' spread about their median (the launch gap), not a fit's
};

/// A calibration: the base profile with the fitted values, and what was fitted from what.
struct Calibration {
  Hardware hw;
  std::vector<CalibratedParameter> parameters;
  int gpus_per_node = 0;
  std::string gpus_per_node_source;  ///< "the files' host names", "--gpus-per-node", "the base profile"
  double host_gap_s = -1;            ///< median gap where the GPU waited for the host (-1: none seen)
  int host_gaps = 0;
  std::vector<std::string> skipped_links;  ///< NCCL kernels no tier's fit could use, and why
};

/// Fits `base`'s parameters to `run` (the file's header). Throws ConfigError when the run holds no
/// GPU kernel (a CPU-only profile), when nothing at all can be fitted (every parameter below
/// min_samples: the reasons per kind of kernel), for a stack that does not exist, and for
/// gpus_per_node < 0.
Calibration calibrate(const trace::ProfiledRun& run, const Hardware& base, const CalibrateOptions& o);

/// The profile file: the base's, fitted values in, named `name`, its source "calibrated from RUN
/// on DATE" and a "calibration" object listing every parameter (base, fitted, samples, kept and
/// why). `model --hw FILE` reads it as any profile.
nlohmann::json calibrated_profile(const Calibration& c, const std::string& name, const std::string& run_text, const std::string& date);

}  // namespace ringside::model

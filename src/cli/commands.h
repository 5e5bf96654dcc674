// Subcommands of the `ringside` command, each registered on the CLI11 app.
#pragma once
#include <CLI/CLI.hpp>

#include "layer/config.h"

namespace ringside::cli {

/// The layer flags every subcommand shares: --batch --seq --hidden --heads --kv-heads --ffn
/// --causal/--no-causal --rope/--no-rope --dropout --seed, bound to cfg (defaults from LayerConfig).
void add_config_flags(CLI::App& app, LayerConfig& cfg);

struct BenchKernelsOptions {
  int64_t s = 4096, H = 8, d = 64;
  bool causal = true;
  double min_time = 0.3;  ///< seconds per repetition (Google Benchmark's min_time)
  int repetitions = 3;    ///< the best repetition is reported
};

/// Adds `ringside bench` and its subcommand `kernels`; returns the `kernels` subcommand.
CLI::App* add_bench(CLI::App& app, BenchKernelsOptions& o);

/// `ringside bench kernels`: attention forward and backward GFLOP/s at (s, H, d) against
/// OpenBLAS sgemm measured in the same run on one thread, with each ratio's verdict against
/// its target (forward 0.6, backward 0.45). Returns 0.
int bench_kernels(const BenchKernelsOptions& o);

}  // namespace ringside::cli

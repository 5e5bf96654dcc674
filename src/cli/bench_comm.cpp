// `ringside bench comm`: every collective and the ring's send/recv over a range of sizes, on the
// backend the ranks run on, with algbw and busbw as nccl-tests defines them, beside memcpy
// measured in the same run.
#include <algorithm>
#include <chrono>
#include <cstring>
#include <cmath>
#include <cstdio>
#include <map>
#include <sstream>
#include <vector>

#include <unistd.h>

#include <benchmark/benchmark.h>

#include "cli/commands.h"
#include "cli/format.h"
#include "comm/communicator.h"
#include "device/backend.h"
#include "kernels/cpu/attention.h"
#include "kernels/cpu/blas.h"
#include "kernels/cpu/isa.h"
#include "kernels/philox.h"
#include "model/model.h"
#include "run/runner.h"
#include "trace/metrics.h"
#include <thread>


namespace ringside::cli {

namespace {

struct CommRow {
  std::string op;
  int64_t bytes;
  double seconds, memcpy_gbps;
};

// nccl-tests' bus bandwidth factors (PERFORMANCE.md; trace/comm_stats.h): what each rank's link
// must carry relative to the buffer size, so that busbw is comparable with the hardware's peak.
double bus_factor(const std::string& op, int P) {
  return trace::busbw_factor(op == "sendrecv" ? trace::Kind::p2p : trace::kind_of(op), P);
}

// One rank's part; rank 0 returns the rows.
std::vector<CommRow> bench_comm_rank(Communicator& c, const BenchCommOptions& o) {
  const int P = c.size(), r = c.rank();
  std::vector<CommRow> rows;
  const char* ops[] = {"all_gather", "reduce_scatter", "all_reduce", "all_to_all", "sendrecv"};
  for (const char* op : ops)
    for (int64_t S = o.min_bytes; S <= o.max_bytes; S *= 4) {
      const int64_t n = S / 4;  // float32 elements in the full buffer
      const auto counts = even_counts(n, P);
      // all_to_all: block j (counts[j] elements) to rank j, so rank j's block to us is counts[r].
      const std::vector<int64_t> a2a_recv(P, counts[r]);
      std::vector<float> full(n, 1.0f), part(counts[r] + 1, 1.0f), out(n + P, 0.0f);
      auto once = [&] {
        const std::string o_ = op;
        if (o_ == "all_gather") c.all_gather(part.data(), out.data(), counts, DType::f32);
        else if (o_ == "reduce_scatter") c.reduce_scatter(full.data(), part.data(), counts, DType::f32);
        else if (o_ == "all_reduce") c.all_reduce(full.data(), n, DType::f32);
        else if (o_ == "all_to_all") c.all_to_all(full.data(), counts, out.data(), a2a_recv, DType::f32);
        else {  // ring send/recv: every rank sends S bytes right and receives S bytes from the left
          auto rr = c.irecv(out.data(), n * 4, (r + P - 1) % P, 9);
          auto sr = c.isend(full.data(), n * 4, (r + 1) % P, 9);
          c.wait(rr);
          c.wait(sr);
        }
      };
      const int iters = static_cast<int>(std::clamp<int64_t>((int64_t{256} << 20) / S, 2, 100));
      once();  // warm-up
      c.barrier();
      const auto t0 = std::chrono::steady_clock::now();
      for (int i = 0; i < iters; ++i) once();
      const double mine = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() / iters;
      std::vector<double> all(P);
      c.all_gather(&mine, all.data(), std::vector<int64_t>(P, 1), DType::f64);
      if (r != 0) continue;
      // memcpy of the same S bytes, in this run, on this rank.
      const auto m0 = std::chrono::steady_clock::now();
      for (int i = 0; i < iters; ++i) {
        std::memcpy(out.data(), full.data(), static_cast<size_t>(S));
        benchmark::DoNotOptimize(out.data());
      }
      const double mt = std::chrono::duration<double>(std::chrono::steady_clock::now() - m0).count() / iters;
      rows.push_back({op, S, *std::max_element(all.begin(), all.end()), double(S) / mt / 1e9});
    }
  return rows;
}

}  // namespace

int bench_comm(const BenchCommOptions& o) {
  const bool mpi = o.backend == "mpi" || (o.backend.empty() && launched_by_mpirun());
  std::vector<CommRow> rows;
  int P = o.ranks;
  if (mpi && !launched_by_mpirun()) throw ConfigError("--backend mpi: this process was not started by mpirun");
  Communicator* world = mpi ? &mpi_world(o.timeout_s) : nullptr;
  if (world) {
    world->timeout_s = o.timeout_s;
    P = world->size();
    check_ranks_agree(*world, "bench comm", o.given);
  }
  checked_on_every_rank(world, [&] {
    if (o.min_bytes > o.max_bytes) throw ConfigError("--min-bytes must not exceed --max-bytes");
    if (world && o.ranks_given && o.ranks != P)
      throw ConfigError(detail::concat("--ranks ", o.ranks, " but mpirun started ", P, " processes (use -np ", o.ranks, ")"));
    // Each rank holds a send and a receive buffer of the largest size, P times over for all_gather.
    require_memory(double(o.max_bytes) * (P + 2) * (world ? 1 : P), "bench comm", "--max-bytes or --ranks");
  });
  if (mpi) {
    Communicator& w = *world;
    rows = bench_comm_rank(w, o);
    if (w.rank() != 0) return 0;
  } else {
    LocalOptions local;
    local.timeout_s = o.timeout_s;
    run_local(P, [&](Communicator& c) {
      auto mine = bench_comm_rank(c, o);
      if (c.rank() == 0) rows = std::move(mine);
    }, local);
  }
  std::printf("ringside bench comm: %d ranks, %s backend, float32; time = slowest rank, mean over the iterations\n",
              P, mpi ? "mpi" : "local");
  std::printf("  algbw = size / time; busbw = algbw x (P-1)/P = %.3f (all_gather, reduce_scatter, all_to_all),\n"
              "  2(P-1)/P = %.3f (all_reduce), 1 (sendrecv): nccl-tests' PERFORMANCE.md. memcpy: the same bytes, one thread.\n\n",
              double(P - 1) / P, 2.0 * (P - 1) / P);
  std::printf("  %-15s %10s %11s %12s %12s %12s %8s\n", "op", "size", "time", "algbw", "busbw", "memcpy", "bus/mem");
  std::string last;
  for (const CommRow& row : rows) {
    if (row.op != last && !last.empty()) std::printf("\n");
    last = row.op;
    const double alg = double(row.bytes) / row.seconds / 1e9, bus = alg * bus_factor(row.op, P);
    std::printf("  %-15s %10s %11s %8.2f GB/s %7.2f GB/s %7.2f GB/s %8.2f\n", row.op.c_str(),
                format_bytes(double(row.bytes)).c_str(), format_seconds(row.seconds).c_str(), alg, bus,
                row.memcpy_gbps, bus / row.memcpy_gbps);
  }
  return 0;
}

}  // namespace ringside::cli

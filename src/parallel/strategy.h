// What every strategy provides, and the helpers they share for splitting the layer's tensors
// over ranks and putting the results back together.
#pragma once
#include <chrono>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "comm/communicator.h"
#include "device/backend.h"
#include "layer/config.h"
#include "layer/weights.h"

namespace ringside {

/// Bytes one rank sends, per phase, as a strategy's analytic formula predicts them.
struct CommBytes {
  int64_t forward = 0, backward = 0;
};

/// One step of a rank's schedule (ring steps for now): what it computed and what it sent.
struct StepRecord {
  std::string phase;     ///< "forward" or "backward"
  int step = 0;          ///< ring step i: the K/V block of rank (r - i) mod P
  int block_of = 0;      ///< the rank whose K/V block was computed on
  std::string computed;  ///< "q[0:64] x k[128:192] ..." (global token ranges or strided sets), or "skipped"
  double flops = 0;      ///< attention FLOPs of this step (forward convention: 4 d per visible pair per head)
  int64_t bytes_sent = 0;
  double compute_s = 0, wait_s = 0;  ///< time computing, and waiting for this step's transfers after it
};

/// One rank's run of a strategy: the gathered results (identical on every rank) and what the
/// rank measured about itself.
struct RankResult {
  double attention_flops = 0;     ///< forward attention FLOPs this rank computed
  std::vector<StepRecord> steps;  ///< per ring step (ring only)
  Tensor out, dx;      ///< [b, s, h], full
  LayerWeights grads;  ///< full shapes, as the reference's
  int64_t peak_saved = 0;  ///< peak bytes of MemCategory::activations on this rank
  int64_t peak_bytes = 0;  ///< peak bytes of all categories on this rank during forward + backward
  CommStats forward, backward;  ///< bytes this rank moved in each phase
  double forward_s = 0, backward_s = 0;
  LayerWeights local_grads;  ///< this rank's own gradient shards, before any gathering
  /// TP+SP only: the sequence-parallel parameters' gradients (LayerNorms, o.bias, fc2.bias)
  /// before their all-reduce, i.e. over this rank's s/P tokens alone. Empty otherwise.
  LayerWeights partial_grads;
};

struct Strategy {
  std::string name;     ///< "tp-sp", "ulysses", "ring"
  std::string summary;  ///< one line for --help and the table
  /// Throws ConfigError, identically on every rank, before any communication.
  std::function<void(const LayerConfig&, int P)> validate;
  /// Runs forward and backward as rank comm.rank() of comm.size(), in dtype dt, on inputs
  /// drawn from cfg.seed exactly as the reference draws them.
  std::function<RankResult(const LayerConfig&, Communicator&, Backend&, MemoryTracker&, DType)> run;
  /// Saved-activation bytes of `rank` (analytic), and its bytes sent per phase (analytic).
  std::function<int64_t(const LayerConfig&, int P, int rank, DType)> saved_bytes;
  std::function<CommBytes(const LayerConfig&, int P, int rank, DType)> comm_bytes;
};

/// Every strategy this build has, in the order compare runs them.
const std::vector<Strategy>& strategies();
/// The strategy called `name`; throws ConfigError listing the names otherwise.
const Strategy& find_strategy(const std::string& name);

/// A GPU rank's result with every tensor copied to the host (same tags): call on the rank.
RankResult results_to_host(RankResult r);

/// Where a traced run puts its timeline: every rank records on `clock` and its trace is
/// appended to `out` (rank order).
struct TraceSink {
  TraceSink(trace::Clock c, std::vector<trace::RankTrace>* o) : clock(c), out(o) {}
  trace::Clock clock;
  std::vector<trace::RankTrace>* out = nullptr;
  /// Live: every flush_every_s seconds while the ranks run, called (from another thread) with
  /// every rank's trace so far, so that a viewer can follow the run.
  std::function<void(const std::vector<trace::RankTrace>&)> flush;
  double flush_every_s = 1.0;
};

/// Runs `st` forward and backward on P local ranks (threads, the local communicator), with
/// every rank's allocations counted in `tracker`. Returns every rank's result, in rank order.
/// With a sink, every rank is traced (ops, transfers, waits, memory) from its start to the end
/// of its backward. With opts.dry_run, a dry run: no math and no memory, only the schedule
/// (the trace) and the memory tracker's counts; the results' tensors hold no data.
/// With opts.device cuda, the ranks are GPU ranks (virtual ranks on GPU 0, or one GPU each
/// with opts.nccl), on the CUDA backend, f32 only; their results come back to the host, and
/// their traced ops and waits are timed by CUDA events on the ranks' streams.
/// A failing rank fails the whole run (ringside::Error naming the rank).
std::vector<RankResult> run_strategy_local(const Strategy& st, const LayerConfig& cfg, int P, DType dt,
                                           MemoryTracker& tracker, const LocalOptions& opts = {},
                                           const TraceSink* sink = nullptr);

// ---- the token-wise parts of the layer, on a rank's own tokens -----------------------------
// Ring and Ulysses hold whole tokens (s/P of them, all weights): around attention every op is
// token-wise and runs on those tokens alone, exactly as the reference does on all of them.
// Positions are the tokens' global positions (RoPE, dropout). Shapes: x, dout [b, n, h].

/// What the token-wise parts keep for backward (tagged activations by the caller's `act`).
struct TokenwiseSaved {
  Tensor x, mean1, rstd1, h1, x2, mean2, rstd2, h2, u, g;
};

/// LayerNorm 1, the QKV projection and RoPE: fills q [b, n, H, d], k and v [b, n, Hkv, d]
/// (allocated with `qkv_tag`). Saves x, mean1, rstd1, h1.
void qkv_forward(const LayerConfig& cfg, const LayerWeights& w, Backend& be, const Tensor& x,
                 const std::vector<int64_t>& pos, TokenwiseSaved& sv, Tensor& q, Tensor& k, Tensor& v, AllocTag act,
                 AllocTag qkv_tag, AllocTag ws);
/// From the attention output a [b, n, H, d] to the layer's output: W_o, dropout 1, residual,
/// LayerNorm 2, the MLP, dropout 2, residual. Saves x2, mean2, rstd2, h2, u, g.
Tensor post_attention_forward(const LayerConfig& cfg, const LayerWeights& w, Backend& be, const Tensor& a,
                              const std::vector<int64_t>& pos, TokenwiseSaved& sv, AllocTag act, AllocTag ws);
/// Its backward from dout: adds the o, ln2, fc1 and fc2 gradients into gw, sets dx2 (the
/// gradient reaching the first residual) and returns da [b, n, H, d].
Tensor post_attention_backward(const LayerConfig& cfg, const LayerWeights& w, Backend& be, const Tensor& a,
                               const Tensor& dout, const std::vector<int64_t>& pos, const TokenwiseSaved& sv,
                               LayerWeights& gw, Tensor& dx2, AllocTag ws);
/// The backward of qkv_forward from dq, dk, dv (RoPE undone in place): adds the qkv and ln1
/// gradients into gw and returns dx = LayerNorm 1's backward + dx2.
Tensor qkv_backward(const LayerConfig& cfg, const LayerWeights& w, Backend& be, Tensor& dq, Tensor& dk, const Tensor& dv,
                    const std::vector<int64_t>& pos, const TokenwiseSaved& sv, const Tensor& dx2, LayerWeights& gw,
                    AllocTag ws);

// ---- shared helpers ---------------------------------------------------------------------

/// Sums the tensors over all ranks, in place, with one ring all-reduce of their concatenation
/// (one message stream, not one per tensor). The staging buffer is tagged `tag` (comm).
void all_reduce_packed(Communicator& comm, const std::vector<Tensor*>& tensors, AllocTag tag);

/// Measures a strategy's two phases: construct it where the forward starts (it first waits at
/// a barrier for every rank, so that the ranks start the layer together), call
/// forward_done() and backward_done() at their ends; fill() writes the bytes, seconds, the
/// peak of saved activations and the peak of all memory into a RankResult. The memory peaks
/// are this rank's from construction on. When tracing, the phases are `phase` events on the
/// compute stream, and tracing stops at backward_done() (what follows is not the layer).
class PhaseMeter {
 public:
  PhaseMeter(Communicator& comm, MemoryTracker& tracker);
  void forward_done();
  void backward_done();
  void fill(RankResult& r) const;

 private:
  void end_phase(const char* name, int64_t start_ns, int64_t start_order, const char* next);
  Communicator& comm_;
  MemoryTracker& tracker_;
  CommStats s0_, s1_, s2_;
  std::chrono::steady_clock::time_point t0_, t1_, t2_;
  int64_t trace_t0_ = 0, trace_t1_ = 0;
  int64_t order0_ = -1, order1_ = -1;  // the phases' starts in the rank's program order
};

/// Tokens [s0, s0 + n) of every batch row of t [b, s, ...] -> [b, n, ...], tagged `tag`.
Tensor slice_seq(const Tensor& t, int64_t s0, int64_t n, AllocTag tag);
/// The inverse for a contiguous sequence split: every rank holds [b, s/P, ...] (its tokens
/// in rank order); returns [b, s, ...] on every rank.
Tensor gather_seq(Communicator& comm, const Tensor& shard, AllocTag tag);

/// The sum over ranks of t [b, s, ...], of which rank r keeps tokens [r s/P, (r+1) s/P):
/// a reduce-scatter along the sequence. Returns [b, s/P, ...].
Tensor reduce_scatter_seq(Communicator& comm, const Tensor& t, AllocTag tag);

/// The tokens at global positions `pos` (sorted) of every batch row of t [b, s, ...] -> [b, n, ...].
Tensor take_tokens(const Tensor& t, const std::vector<int64_t>& pos, AllocTag tag);
/// The inverse of take_tokens over all ranks: rank r holds the tokens positions_of(r); returns
/// the full [b, s, ...] on every rank.
Tensor gather_tokens(Communicator& comm, const Tensor& shard, const std::function<std::vector<int64_t>(int)>& positions_of,
                     int64_t s, AllocTag tag);
/// Copies src [b, n, ...] into tokens [s0, s0 + n) of dst [b, s, ...].
void put_seq(Tensor& dst, const Tensor& src, int64_t s0);

/// Column segments [begin, end) of a matrix, concatenated -> [rows, sum of widths].
Tensor slice_cols(const Tensor& m, const std::vector<std::pair<int64_t, int64_t>>& segments, AllocTag tag);
/// Every rank holds slice_cols(full, segments_of(rank)); returns the full [rows, cols].
Tensor gather_cols(Communicator& comm, const Tensor& local, int64_t cols,
                   const std::function<std::vector<std::pair<int64_t, int64_t>>(int)>& segments_of, AllocTag tag);
/// Rows [r0, r0 + n) of m [rows, cols].
Tensor slice_rows(const Tensor& m, int64_t r0, int64_t n, AllocTag tag);

/// Bytes a ring all_gather / reduce_scatter / all_reduce makes rank `rank` send when n elements
/// are split as even_counts(n, P) (communicator.h derives these): exact also for uneven splits.
int64_t ring_all_gather_bytes(int64_t n, int P, int rank, DType dt);
int64_t ring_reduce_scatter_bytes(int64_t n, int P, int rank, DType dt);
int64_t ring_all_reduce_bytes(int64_t n, int P, int rank, DType dt);

/// Test hook: when RINGSIDE_INJECT_FAILURE is "RANK:PHASE" (PHASE forward or backward), that
/// rank throws at the start of that phase, to show that a failure takes the job down.
void maybe_inject_failure(int rank, int P, const char* phase);
/// Throws ConfigError, before any work, when RINGSIDE_INJECT_FAILURE is set but malformed (or
/// names a rank outside [0, P)): a bad spec is the command's error, not a rank's failure.
void check_failure_injection(int P);

}  // namespace ringside

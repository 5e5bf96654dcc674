// Attention over a sequence that is split across ranks: what the context-parallel algorithms
// (the ring, the all-to-all, the all-gather) have in common, so that a layer, or another
// algorithm (Ulysses around a ring), can call any of them.
//
// Shapes, on one rank holding n of the sequence's tokens:
//   q, out, dq, dout  [b, n, Hq, d]      k, v, dk, dv  [b, n, Hkv, d]      lse [b, Hq, n]
// (query head i reads kv head i / (Hq / Hkv); kernels/attention_params.h).
#pragma once
#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "comm/communicator.h"
#include "device/backend.h"
#include "parallel/layout.h"

namespace ringside {

/// What a rank computes with: its backend, the element type, and where its allocations are
/// counted (workspace, saved activations, communication buffers).
struct RankContext {
  Backend& be;
  DType dt;
  AllocTag ws, act, comm;
};

/// The attention every rank computes: causal or not, the scale of the scores, and the mask of
/// documents, window and padding over the padded sequence's slots (layer/packing.h; null: none).
struct AttentionSpec {
  bool causal = true;
  double softmax_scale = 1;
  const DocumentMask* mask = nullptr;
};

/// The run of a whole sequence of n tokens in order: local tokens [0, n) at global slots 0, 1, ...
inline Run whole_sequence(int64_t n) { return Run{0, n, 0, 1}; }

/// The kernels' parameters (kernels/attention_params.h) for attention between query run `q_run`
/// and key run `k_run`: the one place where a (query run x key run) block of a sequence
/// becomes a call. Its fields:
///   b, H, Hkv, d         batch, query heads, kv heads (query head i reads kv head i / (H / Hkv)),
///                        dimension per head: the shapes given
///   sq, sk               q_run.len queries against k_run.len keys
///   causal, softmax_scale, mask   the spec's (the mask over the padded sequence's slots)
///   q_offset, q_stride   query row i sits at global slot q_run.first + i * q_run.stride
///   k_offset, k_stride   key j at global slot k_run.first + j * k_run.stride
/// block_q and block_k keep the kernels' defaults. Shapes alone, without tensors, serve the
/// FLOP counts of a dry run and of the formulas; whole_sequence(n) is a run of all n tokens.
AttentionParams params_for(const AttentionSpec& spec, int64_t b, int64_t H, int64_t Hkv, int64_t d, const Run& q_run,
                           const Run& k_run);
/// The same, with b, H and d read from q [b, ., H, d] and Hkv from k [b, ., Hkv, d]: the
/// rank's tensors or the runs' slices of them alike, since their lengths are not read.
AttentionParams params_for(const AttentionSpec& spec, const Tensor& q, const Tensor& k, const Run& q_run,
                           const Run& k_run);

struct AttentionOut {
  Tensor out, lse;
};
struct AttentionGrads {
  Tensor dq, dk, dv;
};

/// One step of a rank's ring: what it computed and what it sent.
struct StepRecord {
  std::string phase;     ///< "forward" or "backward"
  int step = 0;          ///< ring step i: the block of ring rank (r - i) mod R
  /// the world rank whose block was computed on (ring rank (r - i) mod R): its K/V block in the
  /// K/V ring, its query block in the pass-Q ring (ring_q_attention.h)
  int block_of = 0;
  /// what that block is, as StepProbe was told: "K/V block", or the pass-Q ring's "query block"
  std::string block;
  /// "q[0:64] x k[128:192], ..." (global token ranges or strided sets), or "skipped": the
  /// first StepProbe::kNamedPairs pairs by name, then ", and N more"
  std::string computed;
  std::string skipped;   ///< the (query run x key run) pairs the mask hid wholly, named as computed is
  int64_t computed_pairs = 0, skipped_pairs = 0;
  double flops = 0;      ///< attention FLOPs of this step (forward convention: 4 d per visible pair per head)
  int64_t bytes_sent = 0;
  double compute_s = 0, wait_s = 0;  ///< time computing, and waiting for this step's transfers after it
};

/// Attention over this rank's share of a sequence split across ranks. forward returns the
/// rank's out and lse; backward, given them and dout, returns dq, dk, dv of the rank's tokens.
/// An algorithm that keeps its own copies for the backward (the all-to-all keeps the head
/// layout) says so with keeps_inputs() false: then its forward's lse is empty, and its
/// backward reads neither q, k, v nor out.
class SequenceAttention {
 public:
  virtual ~SequenceAttention() = default;
  virtual AttentionOut forward(const Tensor& q, const Tensor& k, const Tensor& v) = 0;
  virtual AttentionGrads backward(const Tensor& q, const Tensor& k, const Tensor& v, const AttentionOut& fwd,
                                  const Tensor& dout) = 0;
  /// The forward again, for the backward of full recomputation: the same out, lse and saved
  /// state, its work and transfers done again, but flops and steps stay the forward's (the
  /// trace counts the recomputation; the per-rank table counts the layer's own attention).
  virtual AttentionOut recompute(const Tensor& q, const Tensor& k, const Tensor& v);
  /// Releases what the forward kept inside the algorithm for the backward (full
  /// recomputation, whose recompute() makes it again); nothing for those that keep no state.
  virtual void drop_saved() {}
  /// Whether the backward reads the caller's q, k, v (which the caller then saves).
  virtual bool keeps_inputs() const { return true; }
  double flops = 0;                ///< forward attention FLOPs this rank computed
  std::vector<StepRecord> steps;   ///< per ring step (algorithms with a ring)
};

/// Plain attention on one rank that holds the whole sequence, in order (no communication):
/// TP's heads, or Ulysses's heads after the all-to-all.
class LocalAttention : public SequenceAttention {
 public:
  LocalAttention(const AttentionSpec& spec, const RankContext& ctx) : spec_(spec), ctx_(ctx) {}
  AttentionOut forward(const Tensor& q, const Tensor& k, const Tensor& v) override;
  AttentionGrads backward(const Tensor& q, const Tensor& k, const Tensor& v, const AttentionOut& fwd,
                          const Tensor& dout) override;

 private:
  AttentionSpec spec_;
  RankContext ctx_;
};

/// The tokens of run r of t [b, n, ...]: t itself when the run is all of it, else a copy
/// tagged `tag`.
Tensor run_of(const Tensor& t, const Run& r, AllocTag tag);
/// Copies `len` columns of lse: dst [b, H, n] columns [dst_at, dst_at + len) from src [b, H, m]
/// columns [src_at, ...) (a dry run moves no data).
void lse_columns(Tensor& dst, int64_t dst_at, const Tensor& src, int64_t src_at, int64_t len);

/// Tensors that travel around a ring one hop per step while each rank computes on them: the
/// K/V ring's K/V block, the pass-Q ring's query block and what rides with it. It holds the
/// block computed on now, and two receive buffers of each tensor (ctx.comm) used in turn, so
/// that the block computed on is never the one being overwritten. Step i's tensor j of m goes
/// under tag m i + j.
class TravellingBlock {
 public:
  /// Starts holding `block`, this rank's own, each tensor sent under its label in `labels`.
  TravellingBlock(Communicator& ring, std::vector<Tensor> block, std::vector<const char*> labels,
                  const RankContext& ctx);
  /// Tensor j of the block held now.
  const Tensor& operator[](size_t j) const { return held_[j]; }
  /// Posts step i's hop (none at the last step): the next block from the left into free
  /// buffers, the one we hold to the right.
  void pass_on(int i);
  /// Waits for step i's hop; the block received is the one held from now on.
  void arrive(int i);

 private:
  Communicator& ring_;
  std::vector<Tensor> held_, buf_[2];
  std::vector<const char*> labels_;
  int right_, left_;
  std::vector<RequestPtr> reqs_;
};

/// What travels one hop behind a ring's block, accumulating on every rank it visits: the K/V
/// ring's dK/dV, the pass-Q ring's running (out, lse) and its dQ. acc[i % 2] holds step i's;
/// its receive was posted a step earlier, so each hop moves during the next step's compute.
/// After the hop of step R - 1 each rank holds its own block's result, home.
class TravellingResult {
 public:
  /// `start` (ctx.comm) is where step `first` (0 or 1) accumulates: the result over no keys, or
  /// zeros; the other buffer takes its shapes. Tensor j of m goes under tag first_tag + m i + j
  /// at step i, each sent under its label in `labels`.
  TravellingResult(Communicator& ring, std::vector<Tensor> start, std::vector<const char*> labels, int first, int first_tag,
                   const RankContext& ctx);
  /// Step i's result (i >= first), once it has come from the left: add this step's part to it.
  std::vector<Tensor>& arrive(int i);
  /// Passes step i's result to the right and posts the receive of the next one from the left
  /// (after step R - 1: our own block's, home); nothing on a ring of one rank.
  void pass_on(int i);
  /// After the last hop: our own block's result.
  const std::vector<Tensor>& home();

 private:
  Communicator& ring_;
  std::vector<Tensor> acc_[2];
  std::vector<const char*> labels_;
  int first_, first_tag_, right_, left_;
  std::vector<RequestPtr> send_, recv_;
};

/// Measures one ring step beside the algorithm (not inside it): opens the step's span on the
/// timeline, and, given a record list, times the compute and the wait after it and counts the
/// bytes sent.
class StepProbe {
 public:
  /// Step `step` of `phase` on the ring `comm` over `layout`, computing on the `block` ("K/V
  /// block", or the pass-Q ring's "query block") of ring rank `block_of` (recorded, and named in
  /// the trace, by its world rank); `carried` names what travels with the block ("" or
  /// " and its dK/dV").
  StepProbe(Communicator& comm, const RingLayout& layout, std::vector<StepRecord>* records, const char* phase, int step,
            int block_of, const char* carried = "", const char* block = "K/V block");
  ~StepProbe();
  /// Pairs a record names before it counts the rest (a pack of many documents has many).
  static constexpr int64_t kNamedPairs = 8;
  /// The (query run x key run) pair of `p` (its offsets, strides and lengths) computed in this
  /// step, whose forward costs `forward_flops` (kernels' attention_forward_flops), at `times`
  /// that (the backward: 2.5): named in the record, and on the timeline as the TilePairs of the
  /// layout's chunks it is made of (RingLayout::chunks_of) that the mask leaves some pair of.
  void computed(const AttentionParams& p, double forward_flops, double times = 1.0);
  /// A pair the mask hid wholly: no work.
  void skipped(const Run& q, const Run& k);
  /// `count` more such pairs, not named.
  void skipped(int64_t count) { rec_.skipped_pairs += count; }
  /// Whether the next skipped pair would still be named.
  bool names_skipped() const { return named_skipped_ < kNamedPairs; }
  /// The step's compute is queued: on a GPU wait for it, then time the wait that follows.
  void compute_done();
  double flops() const { return rec_.flops; }

 private:
  void record_tiles(const AttentionParams& p, double forward_flops);
  Communicator& comm_;
  const RingLayout& layout_;
  std::vector<StepRecord>* records_;
  std::unique_ptr<trace::Span> span_;
  StepRecord rec_;
  int64_t named_computed_ = 0, named_skipped_ = 0;
  CommStats before_;
  std::chrono::steady_clock::time_point t0_;
};

/// Whether the mask (causal, documents, window, padding) hides every key of the pair's key run
/// from every query of its query run: no visible pair, no work at all.
bool hidden(const AttentionParams& p);

/// The key runs of rank `keys_of`'s block that query run `a` may see (RingLayout::runs_meeting),
/// in order; `step` records the others as skipped, the mask hiding them wholly. The K/V ring
/// asks it for the block it holds, the pass-Q ring for its own keys.
std::vector<Run> runs_to_visit(const RingLayout& layout, const Run& a, int keys_of, StepProbe& step);

}  // namespace ringside

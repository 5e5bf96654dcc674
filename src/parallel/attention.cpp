#include "parallel/attention.h"

#include <exception>
#include <sstream>

#include "comm/tensor_comm.h"
#include "core/gpu.h"
#include "kernels/attention_params.h"
#include "parallel/shares.h"

namespace ringside {

Tensor run_of(const Tensor& t, const Run& r, AllocTag tag) {
  return r.len == t.dim(1) ? t : slice_seq(t, r.start, r.len, tag);
}

void lse_columns(Tensor& dst, int64_t dst_at, const Tensor& src, int64_t src_at, int64_t len) {
  if (dst.is_dry()) return;
  const int64_t es = dtype_size(dst.dtype()), rows = dst.dim(0) * dst.dim(1);
  copy_rows(static_cast<char*>(dst.raw_data()) + dst_at * es, dst.dim(2) * es,
            static_cast<const char*>(src.raw_data()) + src_at * es, src.dim(2) * es, len * es, rows);
}

AttentionParams params_for(const AttentionSpec& spec, int64_t b, int64_t H, int64_t Hkv, int64_t d, const Run& q_run,
                           const Run& k_run) {
  AttentionParams p;
  p.b = b, p.sq = q_run.len, p.sk = k_run.len, p.H = H, p.Hkv = Hkv, p.d = d;
  p.causal = spec.causal, p.softmax_scale = spec.softmax_scale, p.mask = spec.mask;
  p.q_offset = q_run.first, p.q_stride = q_run.stride;
  p.k_offset = k_run.first, p.k_stride = k_run.stride;
  return p;
}

AttentionParams params_for(const AttentionSpec& spec, const Tensor& q, const Tensor& k, const Run& q_run,
                           const Run& k_run) {
  return params_for(spec, q.dim(0), q.dim(2), k.dim(2), q.dim(3), q_run, k_run);
}

AttentionOut LocalAttention::forward(const Tensor& q, const Tensor& k, const Tensor& v) {
  const AttentionParams p = params_for(spec_, q, k, whole_sequence(q.dim(1)), whole_sequence(k.dim(1)));
  AttentionOut res{ctx_.be.empty(q.shape(), ctx_.dt, ctx_.act), ctx_.be.empty({p.b, p.H, p.sq}, ctx_.dt, ctx_.act)};
  ctx_.be.attention_forward(p, q, k, v, res.out, res.lse);
  flops += kernels::attention_forward_flops(p);
  return res;
}

AttentionOut SequenceAttention::recompute(const Tensor& q, const Tensor& k, const Tensor& v) {
  const double forward_flops = flops;
  std::vector<StepRecord> forward_steps = steps;
  AttentionOut out = forward(q, k, v);
  flops = forward_flops, steps = std::move(forward_steps);
  return out;
}

AttentionGrads LocalAttention::backward(const Tensor& q, const Tensor& k, const Tensor& v, const AttentionOut& fwd,
                                        const Tensor& dout) {
  AttentionGrads g{ctx_.be.zeros(q.shape(), ctx_.dt, ctx_.ws), ctx_.be.zeros(k.shape(), ctx_.dt, ctx_.ws),
                   ctx_.be.zeros(v.shape(), ctx_.dt, ctx_.ws)};
  const AttentionParams p = params_for(spec_, q, k, whole_sequence(q.dim(1)), whole_sequence(k.dim(1)));
  ctx_.be.attention_backward(p, q, k, v, fwd.out, dout, fwd.lse, g.dq, g.dk, g.dv);
  return g;
}

StepProbe::StepProbe(Communicator& comm, const RingLayout& layout, std::vector<StepRecord>* records, const char* phase,
                     int step, int block_of, const char* carried, const char* block)
    : comm_(comm), layout_(layout), records_(records), span_(new trace::Span(trace::Span::ring_step(step))),
      rec_{phase, step, comm.world_rank(block_of), block, "", "", 0, 0, 0, 0, 0, 0}, before_(comm.stats()),
      t0_(std::chrono::steady_clock::now()) {
  if (trace::Event* e = span_->event()) e->detail = detail::concat(block, " of rank ", rec_.block_of, carried);
}

namespace {

// "q[0:64] x k[128:192]", a stride after a second colon: the pair's global slots.
std::string describe(const Run& q, const Run& k) {
  std::ostringstream os;
  auto one = [&](const char* n, const Run& r) {
    os << n << "[" << r.first << ":" << r.last() + 1;
    if (r.stride != 1) os << ":" << r.stride;
    os << "]";
  };
  one("q", q);
  os << " x ";
  one("k", k);
  return os.str();
}

}  // namespace

void StepProbe::computed(const AttentionParams& p, double forward_flops, double times) {
  rec_.flops += times * forward_flops;
  rec_.computed_pairs += 1;
  const Run q{0, p.sq, p.q_offset, p.q_stride}, k{0, p.sk, p.k_offset, p.k_stride};
  if (named_computed_ < kNamedPairs) rec_.computed += (named_computed_++ ? ", " : "") + describe(q, k);
  record_tiles(p, forward_flops);
}

void StepProbe::record_tiles(const AttentionParams& p, double forward_flops) {
  trace::Event* e = span_->event();
  if (!e || !e->tiles_complete) return;
  const std::vector<Run> qs = layout_.chunks_of(Run{0, p.sq, p.q_offset, p.q_stride});
  const std::vector<Run> ks = layout_.chunks_of(Run{0, p.sk, p.k_offset, p.k_stride});
  const AttentionSpec spec{p.causal, p.softmax_scale, p.mask};  // the pair's, for each chunk pair of it
  for (const Run& q : qs)
    for (const Run& k : ks) {
      const AttentionParams chunk = params_for(spec, p.b, p.H, p.Hkv, p.d, q, k);
      const double flops = qs.size() * ks.size() == 1 ? forward_flops : kernels::attention_forward_flops(chunk);
      if (flops == 0) continue;  // the mask hides this chunk pair wholly
      if (e->tiles.size() == trace::kMaxTilePairs) {
        e->tiles.clear(), e->tiles_complete = false;
        return;
      }
      // Partly masked when the visible pairs are fewer than all of them (4 d per pair per head).
      const double all = 4.0 * double(p.b) * double(p.H) * double(p.d) * double(q.len) * double(k.len);
      e->tiles.push_back({q.first, q.len, q.stride, k.first, k.len, k.stride, flops < all});
    }
}

void StepProbe::skipped(const Run& q, const Run& k) {
  rec_.skipped_pairs += 1;
  if (names_skipped()) rec_.skipped += (named_skipped_++ ? ", " : "") + describe(q, k);
}

void StepProbe::compute_done() {
  gpu::synchronize();  // on a GPU the kernels were only queued: time them, not their launch
  const auto now = std::chrono::steady_clock::now();
  rec_.compute_s = std::chrono::duration<double>(now - t0_).count();
  t0_ = now;
}

StepProbe::~StepProbe() {
  if (!records_ || std::uncaught_exceptions()) return;  // a failing step records nothing
  rec_.wait_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0_).count();
  rec_.bytes_sent = comm_.stats().bytes_sent - before_.bytes_sent;
  if (rec_.computed.empty()) rec_.computed = "none";  // every pair wholly masked: the skipped list says which
  if (rec_.computed_pairs > named_computed_) rec_.computed += detail::concat(", and ", rec_.computed_pairs - named_computed_, " more");
  if (rec_.skipped_pairs > named_skipped_) rec_.skipped += detail::concat(", and ", rec_.skipped_pairs - named_skipped_, " more");
  records_->push_back(std::move(rec_));
}

TravellingBlock::TravellingBlock(Communicator& ring, std::vector<Tensor> block, std::vector<const char*> labels,
                                 const RankContext& ctx)
    : ring_(ring), held_(std::move(block)), labels_(std::move(labels)), right_((ring.rank() + 1) % ring.size()),
      left_((ring.rank() + ring.size() - 1) % ring.size()) {
  for (int j = 0; j < 2; ++j)
    for (const Tensor& t : held_) buf_[j].push_back(ctx.be.empty(t.shape(), ctx.dt, ctx.comm));
}

void TravellingBlock::pass_on(int i) {
  if (i == ring_.size() - 1) return;
  const size_t m = held_.size();
  const int tag = int(m) * i;  // then one per tensor
  for (size_t j = 0; j < m; ++j)
    reqs_.push_back(ring_.irecv(buf_[i % 2][j].raw_data(), held_[j].nbytes(), left_, tag + int(j), labels_[j]));
  for (size_t j = 0; j < m; ++j)
    reqs_.push_back(ring_.isend(held_[j].raw_data(), held_[j].nbytes(), right_, tag + int(j), labels_[j]));
  ring_.start();
}

void TravellingBlock::arrive(int i) {
  ring_.wait_all(reqs_);
  reqs_.clear();
  if (i < ring_.size() - 1) held_ = buf_[i % 2];
}

TravellingResult::TravellingResult(Communicator& ring, std::vector<Tensor> start, std::vector<const char*> labels, int first,
                                   int first_tag, const RankContext& ctx)
    : ring_(ring), labels_(std::move(labels)), first_(first), first_tag_(first_tag), right_((ring.rank() + 1) % ring.size()),
      left_((ring.rank() + ring.size() - 1) % ring.size()) {
  for (const Tensor& t : start) acc_[1 - first % 2].push_back(ctx.be.empty(t.shape(), ctx.dt, ctx.comm));
  acc_[first % 2] = std::move(start);
}

std::vector<Tensor>& TravellingResult::arrive(int i) {
  if (i > first_) ring_.wait_all(recv_);
  return acc_[i % 2];
}

void TravellingResult::pass_on(int i) {
  ring_.wait_all(send_);  // the previous hop out of the other buffer: free to receive into
  if (ring_.size() == 1) return;
  const int a = i % 2, m = int(acc_[a].size()), tag = first_tag_ + m * i;  // then one per tensor
  send_.clear(), recv_.clear();
  for (int j = 0; j < m; ++j)
    send_.push_back(ring_.isend(acc_[a][j].raw_data(), acc_[a][j].nbytes(), right_, tag + j, labels_[j]));
  for (int j = 0; j < m; ++j)
    recv_.push_back(ring_.irecv(acc_[1 - a][j].raw_data(), acc_[a][j].nbytes(), left_, tag + j, labels_[j]));
  ring_.start();
}

const std::vector<Tensor>& TravellingResult::home() {
  ring_.wait_all(recv_);
  ring_.wait_all(send_);
  return acc_[ring_.size() > 1 ? ring_.size() % 2 : first_ % 2];  // on one rank: where step `first` put it
}

bool hidden(const AttentionParams& p) { return kernels::attention_forward_flops(p) == 0; }

std::vector<Run> runs_to_visit(const RingLayout& layout, const Run& a, int keys_of, StepProbe& step) {
  const std::vector<Run>& all = layout.runs(keys_of);
  const std::vector<size_t> meeting = layout.runs_meeting(a, keys_of);
  std::vector<Run> visit;
  for (size_t ci : meeting) visit.push_back(all[ci]);
  int64_t unnamed = int64_t(all.size() - meeting.size());
  for (size_t ci = 0, m = 0; ci < all.size() && unnamed > 0 && step.names_skipped(); ++ci) {
    if (m < meeting.size() && meeting[m] == ci) {
      ++m;
      continue;
    }
    step.skipped(a, all[ci]);
    --unnamed;
  }
  step.skipped(unnamed);
  return visit;
}

// ---- the scheme without context parallelism: attention on whole sequences (TP's heads)

namespace {

std::unique_ptr<SequenceAttention> make_local(const ProcessGroups&, const RingLayout&, const AttentionSpec& spec,
                                              const RankContext& ctx) {
  return std::make_unique<LocalAttention>(spec, ctx);
}

}  // namespace

const CpScheme& no_cp_scheme() {
  static const CpScheme scheme{
      .name = "none",
      .summary = "Megatron tensor + sequence parallelism: all-gather / reduce-scatter around the TP blocks",
      .group_words = "no context parallelism",
      .collective_words = "CP group",
      .family = "none",
      .make = make_local,
      .saved_elems = kept_inputs_elems,
      .bytes_sent = [](const Shares&, DType) { return CommBytes{}; },
      .comm_peak = [](const Shares&, DType) { return int64_t(0); },
      .flops = whole_sequence_flops,
      .hop_bytes = [](const Shares&, DType) { return int64_t(0); },
  };
  return scheme;
}

}  // namespace ringside

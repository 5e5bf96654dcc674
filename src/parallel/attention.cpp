#include "parallel/attention.h"

#include <exception>

#include "comm/tensor_comm.h"
#include "core/gpu.h"
#include "kernels/cpu/attention.h"

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

AttentionParams LocalAttention::params(const Tensor& q, const Tensor& k) const {
  AttentionParams p;
  p.b = q.dim(0), p.sq = q.dim(1), p.sk = k.dim(1), p.H = q.dim(2), p.Hkv = k.dim(2), p.d = q.dim(3);
  p.causal = spec_.causal, p.softmax_scale = spec_.softmax_scale, p.mask = spec_.mask;
  return p;
}

AttentionOut LocalAttention::forward(const Tensor& q, const Tensor& k, const Tensor& v) {
  const AttentionParams p = params(q, k);
  AttentionOut res{ctx_.be.empty(q.shape(), ctx_.dt, ctx_.act), ctx_.be.empty({p.b, p.H, p.sq}, ctx_.dt, ctx_.act)};
  ctx_.be.attention_forward(p, q, k, v, res.out, res.lse);
  flops += kernels::cpu::attention_forward_flops(p);
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
  ctx_.be.attention_backward(params(q, k), q, k, v, fwd.out, dout, fwd.lse, g.dq, g.dk, g.dv);
  return g;
}

StepProbe::StepProbe(Communicator& comm, std::vector<StepRecord>* records, const char* phase, int step, int block_of,
                     const char* carried)
    : comm_(comm), records_(records), span_(new trace::Span(trace::Span::ring_step(step))),
      rec_{phase, step, comm.world_rank(block_of), "", "", 0, 0, 0, 0, 0, 0}, before_(comm.stats()),
      t0_(std::chrono::steady_clock::now()) {
  if (trace::Event* e = span_->event()) e->detail = detail::concat("K/V block of rank ", rec_.block_of, carried);
}

void StepProbe::computed(const std::string& what, double flops) {
  rec_.flops += flops;
  rec_.computed_pairs += 1;
  if (named_computed_ < kNamedPairs) rec_.computed += (named_computed_++ ? ", " : "") + what;
}

void StepProbe::skipped(const std::string& what) {
  rec_.skipped_pairs += 1;
  if (names_skipped()) rec_.skipped += (named_skipped_++ ? ", " : "") + what;
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
  if (rec_.computed.empty()) rec_.computed = "skipped (wholly masked)";
  if (rec_.computed_pairs > named_computed_) rec_.computed += detail::concat(", and ", rec_.computed_pairs - named_computed_, " more");
  if (rec_.skipped_pairs > named_skipped_) rec_.skipped += detail::concat(", and ", rec_.skipped_pairs - named_skipped_, " more");
  records_->push_back(std::move(rec_));
}

}  // namespace ringside

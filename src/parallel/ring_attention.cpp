// Ring attention context parallelism, read top to bottom (Liu, Zaharia & Abbeel 2023, "Ring
// Attention with Blockwise Transformers for Near-Infinite Context"; lessons 3 and 4).
//
// Every rank holds s/P tokens of the sequence and every weight. Everything but attention is
// token-wise and runs on the local tokens. For attention, each rank keeps its queries and the
// K/V blocks travel around a ring: at step i rank r holds the block of rank (r - i) mod P,
// computes its queries against it, and merges the partial result into its running (out, lse)
// with the log-sum-exp merge. While it computes, the block for step i+1 is already on its way
// (posted before the compute: double buffering), so the transfer hides behind the compute
// when a block's compute outlasts its transfer (c >= F/B tokens per block).
// Backward runs the ring again, recomputing each block's probabilities from the saved global
// lse: dQ accumulates at home, while the dK/dV accumulators travel with their block (each hop
// moving during the next step's compute) and come home after P hops.
// Causal masking makes the plain contiguous split lopsided (rank P-1 sees every block, rank 0
// only its own): the zigzag and striped layouts give every rank the same amount of work.
#include "parallel/ring_attention.h"

#include "device/gpu.h"

#include <chrono>
#include <cstring>
#include <numeric>
#include <sstream>

#include "kernels/cpu/attention.h"
#include "kernels/philox.h"
#include "layer/reference.h"

namespace ringside {

std::vector<int64_t> layout_positions(Layout layout, int64_t s, int P, int r) {
  std::vector<int64_t> pos;
  const int64_t n = s / P;
  switch (layout) {
    case Layout::automatic:
    case Layout::contiguous:
      for (int64_t i = 0; i < n; ++i) pos.push_back(r * n + i);
      break;
    case Layout::zigzag: {
      const int64_t c = s / (2 * P);  // rank r holds chunks r and 2P-1-r
      for (int64_t i = 0; i < c; ++i) pos.push_back(r * c + i);
      for (int64_t i = 0; i < c; ++i) pos.push_back((2 * P - 1 - r) * c + i);
      break;
    }
    case Layout::striped:
      for (int64_t i = 0; i < n; ++i) pos.push_back(r + i * P);
      break;
  }
  return pos;
}

void validate_ring(const LayerConfig& cfg, int P) {
  cfg.validate();
  const Layout l = cfg.cp_layout();
  const int64_t parts = l == Layout::zigzag ? 2 * int64_t(P) : P;
  if (P < 1 || cfg.s % parts != 0)
    throw ConfigError(detail::concat("ring with P = ", P, " and the ", to_string(l), " layout: sequence length s = ", cfg.s,
                                     " must be divisible by ", l == Layout::zigzag ? "2P = " : "P = ", parts,
                                     l == Layout::zigzag ? " (zigzag cuts the sequence into 2P chunks)" : ""));
}

int64_t ring_saved_bytes(const LayerConfig& c, int P, int /*rank*/, DType dt) { return saved_activation_bytes(c, dt) / P; }

CommBytes ring_comm_bytes(const LayerConfig& c, int P, int rank, DType dt) {
  if (P == 1) return {0, 0};
  const int64_t kv = c.b * (c.s / P) * c.Hkv * c.d() * dtype_size(dt);
  int64_t params = 0;
  for (auto& [name, shape] : weight_shapes(c)) params += numel(shape);
  return {2 * kv * (P - 1), 2 * kv * (P - 1) + 2 * kv * P + ring_all_reduce_bytes(params, P, rank, dt)};
}

namespace {

// A maximal arithmetic run of a rank's sorted positions: local tokens [start, start + len)
// sit at global positions first, first + stride, ... Contiguous and striped give one run,
// zigzag two; the attention kernel takes one run per call.
struct Run {
  int64_t start, len, first, stride;
  int64_t last() const { return first + (len - 1) * stride; }
};

std::vector<Run> runs_of(const std::vector<int64_t>& pos) {
  std::vector<Run> runs;
  for (size_t i = 0; i < pos.size();) {
    Run run{int64_t(i), 1, pos[i], 1};
    if (i + 1 < pos.size()) {
      run.stride = pos[i + 1] - pos[i];
      while (i + run.len < pos.size() && pos[i + run.len] - pos[i + run.len - 1] == run.stride) ++run.len;
    }
    runs.push_back(run);
    i += run.len;
  }
  return runs;
}

// runs_of(layout_positions(layout, s, P, rank)) without listing the positions: O(1), so that a
// ring step costs the same at any s (a dry run of a million tokens takes the same steps as one of
// a thousand). A test checks the two agree for every layout, rank and small size.
std::vector<Run> layout_runs(Layout layout, int64_t s, int P, int rank) {
  const int64_t n = s / P;
  switch (layout) {
    case Layout::striped:  // r, r + P, ...: one run of stride P (one token: stride 1)
      return {Run{0, n, rank, n > 1 ? P : 1}};
    case Layout::zigzag: {
      const int64_t c = s / (2 * P), a = rank * c, z = (2 * int64_t(P) - 1 - rank) * c;
      if (c == 1) return {Run{0, 2, a, z - a}};     // two tokens: one run of stride z - a
      if (a + c == z) return {Run{0, 2 * c, a, 1}};  // chunks r and 2P-1-r adjacent (r = P - 1)
      return {Run{0, c, a, 1}, Run{c, c, z, 1}};
    }
    default:
      return {Run{0, n, rank * n, 1}};
  }
}

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

// The parameters of attention between query run a and key run c (their global positions).
AttentionParams pair_params(const LayerConfig& cfg, const Run& a, const Run& c) {
  AttentionParams p;
  p.b = cfg.b, p.sq = a.len, p.sk = c.len, p.H = cfg.H, p.Hkv = cfg.Hkv, p.d = cfg.d(), p.causal = cfg.causal;
  p.softmax_scale = cfg.softmax_scale();
  p.q_offset = a.first, p.q_stride = a.stride, p.k_offset = c.first, p.k_stride = c.stride;
  return p;
}

// Whether the causal mask hides every key of run c from every query of run a: skip the pair.
bool hidden(const LayerConfig& cfg, const Run& a, const Run& c) { return cfg.causal && c.first > a.last(); }

// Tokens of one run of t [b, n, ...]: t itself when the run is all of it.
Tensor run_of(const Tensor& t, const Run& r, AllocTag tag) {
  return r.len == t.dim(1) ? t : slice_seq(t, r.start, r.len, tag);
}

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

}  // namespace

std::vector<std::array<int64_t, 4>> layout_run_list(Layout layout, int64_t s, int P, int rank, bool by_scanning) {
  std::vector<std::array<int64_t, 4>> out;
  for (const Run& r : by_scanning ? runs_of(layout_positions(layout, s, P, rank)) : layout_runs(layout, s, P, rank))
    out.push_back({r.start, r.len, r.first, r.stride});
  return out;
}

double ring_attention_flops(const LayerConfig& cfg, int P, int rank) {
  const Layout l = cfg.cp_layout();
  double flops = 0;
  for (const Run& a : layout_runs(l, cfg.s, P, rank))
    for (int src = 0; src < P; ++src)
      for (const Run& c : layout_runs(l, cfg.s, P, src))
        if (!hidden(cfg, a, c)) flops += kernels::cpu::attention_forward_flops(pair_params(cfg, a, c));
  return flops;
}

RankResult ring_run(const LayerConfig& cfg, Communicator& comm, Backend& be, MemoryTracker& tracker, DType dt) {
  const int P = comm.size(), r = comm.rank();
  validate_ring(cfg, P);  // every rank, before any communication
  const int64_t b = cfg.b, s = cfg.s, H = cfg.H, d = cfg.d(), sl = s / P;
  const Layout layout = cfg.cp_layout();
  const AllocTag ws{r, MemCategory::workspace, &tracker}, act{r, MemCategory::activations, &tracker},
      wt{r, MemCategory::weights, &tracker}, cm{r, MemCategory::comm, &tracker};
  comm.tracker = &tracker;
  using clock = std::chrono::steady_clock;
  const int right = (r + 1) % P, left = (r + P - 1) % P;

  // The layout decides which global tokens we hold. RoPE, dropout and the causal mask all
  // use these global positions: nothing below uses a local index as a position.
  auto positions_of = [&](int rank) { return layout_positions(layout, s, P, rank); };
  const std::vector<int64_t> my_pos = positions_of(r);
  const std::vector<Run> my_runs = layout_runs(layout, s, P, r);

  const LayerWeights w = init_weights(cfg, dt, wt);
  const Tensor x = take_tokens(random_input(cfg, static_cast<uint32_t>(RngSite::input_x), dt, ws), my_pos, act);
  const Tensor dout = take_tokens(random_input(cfg, static_cast<uint32_t>(RngSite::input_dout), dt, ws), my_pos, ws);

  RankResult res;
  PhaseMeter meter(comm, tracker);
  maybe_inject_failure(r, P, "forward");

  // ================================ forward ================================
  // LayerNorm 1, QKV and RoPE on our tokens; q, k, v are saved for the ring backward.
  TokenwiseSaved sv;
  Tensor q, k, v;
  qkv_forward(cfg, w, be, x, my_pos, sv, q, k, v, act, act, ws);
  trace::sublayer("attention");

  // ---- the ring, forward. Per query run: the running (out, lse), starting empty (0, -inf).
  std::vector<Tensor> q_runs, out_runs, lse_runs;
  for (const Run& a : my_runs) {
    q_runs.push_back(run_of(q, a, ws));
    out_runs.push_back(be.zeros({b, a.len, H, d}, dt, ws));
    Tensor l = be.empty({b, H, a.len}, dt, ws);
    fill(l, -std::numeric_limits<double>::infinity());
    lse_runs.push_back(l);
  }
  // Two receive buffers in turn: the block we compute on is never the one being overwritten.
  Tensor kbuf[2] = {be.empty(k.shape(), dt, cm), be.empty(k.shape(), dt, cm)};
  Tensor vbuf[2] = {be.empty(v.shape(), dt, cm), be.empty(v.shape(), dt, cm)};
  Tensor cur_k = k, cur_v = v;
  for (int i = 0; i < P; ++i) {
    const int src = (r - i + P) % P;  // whose block we hold at step i
    trace::Span step_span = trace::Span::ring_step(i);
    if (trace::Event* e = step_span.event()) e->detail = detail::concat("K/V block of rank ", src);
    StepRecord rec{"forward", i, src, "", 0, 0, 0, 0};
    const CommStats before = comm.stats();
    // Post the next block's transfer first, so it moves while we compute on this one.
    std::vector<RequestPtr> reqs;
    if (i < P - 1) {
      reqs.push_back(comm.irecv(kbuf[i % 2].raw_data(), k.nbytes(), left, 2 * i, "k"));
      reqs.push_back(comm.irecv(vbuf[i % 2].raw_data(), v.nbytes(), left, 2 * i + 1, "v"));
      reqs.push_back(comm.isend(cur_k.raw_data(), k.nbytes(), right, 2 * i, "k"));
      reqs.push_back(comm.isend(cur_v.raw_data(), v.nbytes(), right, 2 * i + 1, "v"));
      comm.start();
    }
    const auto tc = clock::now();
    const std::vector<Run> src_runs = layout_runs(layout, s, P, src);
    for (size_t ai = 0; ai < my_runs.size(); ++ai)
      for (const Run& c : src_runs) {
        if (hidden(cfg, my_runs[ai], c)) continue;  // wholly masked: no work at all
        const AttentionParams p = pair_params(cfg, my_runs[ai], c);
        Tensor part = be.empty(out_runs[ai].shape(), dt, ws), part_lse = be.empty(lse_runs[ai].shape(), dt, ws);
        be.attention_forward(p, q_runs[ai], run_of(cur_k, c, ws), run_of(cur_v, c, ws), part, part_lse);
        be.lse_merge(out_runs[ai], lse_runs[ai], part, part_lse);
        const double f = kernels::cpu::attention_forward_flops(p);
        rec.flops += f;
        rec.computed += (rec.computed.empty() ? "" : ", ") + describe(my_runs[ai], c);
      }
    if (rec.computed.empty()) rec.computed = "skipped (wholly masked)";
    gpu::synchronize();  // on a GPU the kernels were only queued: time them, not their launch
    rec.compute_s = seconds_since(tc);
    const auto tw = clock::now();
    comm.wait_all(reqs);
    rec.wait_s = seconds_since(tw);
    rec.bytes_sent = comm.stats().bytes_sent - before.bytes_sent;
    res.attention_flops += rec.flops;
    res.steps.push_back(rec);
    if (i < P - 1) cur_k = kbuf[i % 2], cur_v = vbuf[i % 2];
  }
  // Back into the local layout: a [b, s/P, H, d] and lse [b, H, s/P] for the backward.
  Tensor a = be.empty({b, sl, H, d}, dt, act), lse = be.empty({b, H, sl}, dt, act);
  for (size_t ai = 0; ai < my_runs.size(); ++ai) {
    put_seq(a, out_runs[ai], my_runs[ai].start);
    // lse [b, H, len] rows into [b, H, s/P] columns.
    const int64_t es = dtype_size(dt), len = my_runs[ai].len;
    if (!lse.is_dry())  // (a dry run moves no data)
      copy_rows(static_cast<char*>(lse.raw_data()) + my_runs[ai].start * es, sl * es, lse_runs[ai].raw_data(),
                len * es, len * es, b * H);
  }
  out_runs.clear();
  lse_runs.clear();

  // Everything after attention is token-wise, on our tokens.
  const Tensor out = post_attention_forward(cfg, w, be, a, my_pos, sv, act, ws);

  meter.forward_done();
  maybe_inject_failure(r, P, "backward");

  // ================================ backward ================================
  LayerWeights gw = zero_grads(cfg, dt, {r, MemCategory::grads, &tracker});
  Tensor dx2;
  const Tensor da = post_attention_backward(cfg, w, be, a, dout, my_pos, sv, gw, dx2, ws);
  trace::sublayer("attention");

  // ---- the ring, backward. dQ stays home; each block travels with its dK/dV accumulators.
  std::vector<Tensor> a_runs, da_runs, lse_runs_b, dq_runs;
  for (const Run& ar : my_runs) {
    a_runs.push_back(run_of(a, ar, ws));
    da_runs.push_back(run_of(da, ar, ws));
    Tensor l = be.empty({b, H, ar.len}, dt, ws);
    const int64_t es = dtype_size(dt);
    if (!l.is_dry())
      copy_rows(l.raw_data(), ar.len * es, static_cast<const char*>(lse.raw_data()) + ar.start * es, sl * es,
                ar.len * es, b * H);
    lse_runs_b.push_back(l);
    dq_runs.push_back(be.zeros({b, ar.len, H, d}, dt, ws));
  }
  // dK/dV of a block accumulate as the block travels. At step i we compute this block's
  // contribution into a fresh partial, add it to the accumulators that came from the left
  // (their receive was posted a step earlier, so they moved during this step's compute) and
  // pass them to the right, where they move during the next step's compute: the schedule of
  // ring-flash-attention, which hides the dK/dV transfer as the forward hides K/V. After P
  // hops every block's accumulators are home. acc[i % 2] holds those of step i's block.
  Tensor acc_k[2] = {be.zeros(k.shape(), dt, cm), be.empty(k.shape(), dt, cm)};
  Tensor acc_v[2] = {be.zeros(v.shape(), dt, cm), be.empty(v.shape(), dt, cm)};
  std::vector<RequestPtr> acc_recv, acc_send;  // posted at the previous step
  cur_k = k, cur_v = v;
  for (int i = 0; i < P; ++i) {
    const int src = (r - i + P) % P;
    trace::Span step_span = trace::Span::ring_step(i);
    if (trace::Event* e = step_span.event()) e->detail = detail::concat("K/V block of rank ", src, " and its dK/dV");
    StepRecord rec{"backward", i, src, "", 0, 0, 0, 0};
    const CommStats before = comm.stats();
    std::vector<RequestPtr> reqs;
    if (i < P - 1) {  // the next K/V block, as in the forward
      reqs.push_back(comm.irecv(kbuf[i % 2].raw_data(), k.nbytes(), left, 2 * i, "k"));
      reqs.push_back(comm.irecv(vbuf[i % 2].raw_data(), v.nbytes(), left, 2 * i + 1, "v"));
      reqs.push_back(comm.isend(cur_k.raw_data(), k.nbytes(), right, 2 * i, "k"));
      reqs.push_back(comm.isend(cur_v.raw_data(), v.nbytes(), right, 2 * i + 1, "v"));
      comm.start();
    }
    const auto tc = clock::now();
    const int a = i % 2;
    // Step 0 starts our own block's accumulators: compute straight into them.
    Tensor dk_part = i == 0 ? acc_k[0] : be.zeros(k.shape(), dt, ws);
    Tensor dv_part = i == 0 ? acc_v[0] : be.zeros(v.shape(), dt, ws);
    for (size_t ai = 0; ai < my_runs.size(); ++ai)
      for (const Run& c : layout_runs(layout, s, P, src)) {
        if (hidden(cfg, my_runs[ai], c)) continue;
        const AttentionParams p = pair_params(cfg, my_runs[ai], c);
        Tensor dk_run = run_of(dk_part, c, ws), dv_run = run_of(dv_part, c, ws);
        be.attention_backward(p, q_runs[ai], run_of(cur_k, c, ws), run_of(cur_v, c, ws), a_runs[ai], da_runs[ai],
                              lse_runs_b[ai], dq_runs[ai], dk_run, dv_run);
        if (c.len != k.dim(1)) {  // a slice was copied: put the accumulated gradient back
          put_seq(dk_part, dk_run, c.start);
          put_seq(dv_part, dv_run, c.start);
        }
        rec.flops += 2.5 * kernels::cpu::attention_forward_flops(p);
        rec.computed += (rec.computed.empty() ? "" : ", ") + describe(my_runs[ai], c);
      }
    if (rec.computed.empty()) rec.computed = "skipped (wholly masked)";
    gpu::synchronize();  // on a GPU the kernels were only queued: time them, not their launch
    rec.compute_s = seconds_since(tc);
    const auto tw = clock::now();
    comm.wait_all(reqs);
    if (i > 0) {  // the block's accumulators, from the left: add our part
      comm.wait_all(acc_recv);
      be.add(acc_k[a], dk_part, acc_k[a]);
      be.add(acc_v[a], dv_part, acc_v[a]);
    }
    comm.wait_all(acc_send);  // the previous step's send out of acc[1 - a]: free to receive into
    if (P > 1) {              // on to the right; the next block's accumulators from the left
      acc_send = {comm.isend(acc_k[a].raw_data(), k.nbytes(), right, 1000 + 2 * i, "dk"),
                  comm.isend(acc_v[a].raw_data(), v.nbytes(), right, 1000 + 2 * i + 1, "dv")};
      acc_recv = {comm.irecv(acc_k[1 - a].raw_data(), k.nbytes(), left, 1000 + 2 * i, "dk"),
                  comm.irecv(acc_v[1 - a].raw_data(), v.nbytes(), left, 1000 + 2 * i + 1, "dv")};
      comm.start();
    }
    rec.wait_s = seconds_since(tw);
    rec.bytes_sent = comm.stats().bytes_sent - before.bytes_sent;
    res.steps.push_back(rec);
    if (i < P - 1) cur_k = kbuf[i % 2], cur_v = vbuf[i % 2];
  }
  // The last hop brings our own block's accumulators home: dK and dV of our tokens.
  comm.wait_all(acc_recv);
  comm.wait_all(acc_send);
  const int home = P > 1 ? P % 2 : 0;
  Tensor dk = acc_k[home], dv = acc_v[home];
  Tensor dq = be.empty({b, sl, H, d}, dt, ws);
  for (size_t ai = 0; ai < my_runs.size(); ++ai) put_seq(dq, dq_runs[ai], my_runs[ai].start);
  q_runs.clear(), a_runs.clear(), da_runs.clear(), dq_runs.clear();
  const Tensor dx = qkv_backward(cfg, w, be, dq, dk, dv, my_pos, sv, dx2, gw, ws);

  // Weights are replicated and each rank saw only its tokens: all-reduce every gradient over
  // the context-parallel group.
  {
    std::vector<Tensor*> all;
    for (auto& [name, t] : gw.named()) all.push_back(t);
    trace::sublayer("grad_sync");
    all_reduce_packed(comm, all, cm);
  }

  meter.backward_done();
  meter.fill(res);

  res.out = gather_tokens(comm, out, positions_of, s, ws);
  res.dx = gather_tokens(comm, dx, positions_of, s, ws);
  res.grads = gw;
  res.local_grads = gw;
  return res;
}

Strategy ring_strategy() {
  return {"ring", "ring attention context parallelism: K/V blocks around a ring, overlapped with compute",
          validate_ring, ring_run, ring_saved_bytes, ring_comm_bytes};
}

}  // namespace ringside

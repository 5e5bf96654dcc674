// The layer split T x C ways, read top to bottom. Every strategy runs this function; what
// differs is the TP group's size (1: no TP) and the attention algorithm over the CP group.
//
//   forward:  LayerNorm 1 -> [g] -> QKV (our heads) -> attention over the CP group -> W_o -> [g-bar]
//             -> dropout, residual, LayerNorm 2 -> [g] -> MLP -> [g-bar] -> dropout, residual
//   backward: the same in reverse, then the gradients summed over the ranks that share them
//
// ([g] and [g-bar]: Megatron's all-gather and reduce-scatter over TP, layer/tokenwise.h.)
#include "parallel/parallel_layer.h"

#include "comm/tensor_comm.h"
#include "kernels/philox.h"
#include "layer/tokenwise.h"
#include "parallel/allgather_attention.h"
#include "parallel/harness.h"
#include "parallel/ring_attention.h"
#include "parallel/ulysses_attention.h"

namespace ringside {

namespace {

// The attention algorithm of this configuration, over this rank's groups.
std::unique_ptr<SequenceAttention> make_attention(const ProcessGroups& groups, const LayerConfig& cfg,
                                                  const RankContext& ctx) {
  const ParallelConfig& par = groups.par;
  const AttentionSpec spec{cfg.causal, cfg.softmax_scale()};
  const RingLayout layout{par.layout(cfg), cfg.s};
  switch (par.cp_comm) {
    case CpComm::none: return std::make_unique<LocalAttention>(spec, ctx);
    case CpComm::p2p: return std::make_unique<RingAttention>(*groups.ring, layout, spec, ctx);
    case CpComm::all_gather: return std::make_unique<AllGatherAttention>(*groups.cp, layout, spec, ctx);
    case CpComm::a2a:
      return std::make_unique<UlyssesAttention>(*groups.a2a, std::make_unique<LocalAttention>(spec, ctx), ctx);
    case CpComm::a2a_p2p:
      return std::make_unique<UlyssesAttention>(
          *groups.a2a, std::make_unique<RingAttention>(*groups.ring, layout, spec, ctx), ctx);
  }
  throw Error("unknown cp_comm");
}

std::vector<Tensor*> all_of(LayerWeights& w) {
  std::vector<Tensor*> all;
  for (auto& [name, t] : w.named()) all.push_back(t);
  return all;
}

}  // namespace

RankResult parallel_layer_run(const ParallelConfig& config, const LayerConfig& cfg, Communicator& world, Backend& be,
                              MemoryTracker& tracker, DType dt) {
  const int P = world.size(), rank = world.rank();
  config.validate(cfg, P);  // every rank, before any communication
  world.tracker = &tracker;
  const ProcessGroups groups(world, config);
  const ParallelConfig& par = groups.par;
  Communicator& tp = *groups.tp;
  const RankContext ctx{be, dt, {rank, MemCategory::workspace, &tracker}, {rank, MemCategory::activations, &tracker},
                        {rank, MemCategory::comm, &tracker}};

  // The tokens we hold (global positions: RoPE, dropout and the mask never see a local index),
  // our share of the weights, and the reference's inputs at our tokens.
  auto own_positions = [&](int r) { return rank_positions(par, cfg, r); };
  const TokenPositions pos{own_positions(rank), cp_positions(par, cfg, groups.at.c)};
  const LayerWeights w = tp_shard_weights(cfg, par.tp, groups.at.t, dt, {rank, MemCategory::weights, &tracker});
  const Tensor x = random_input_tokens(cfg, static_cast<uint32_t>(RngSite::input_x), pos.own, dt, ctx.act);
  const Tensor dout = random_input_tokens(cfg, static_cast<uint32_t>(RngSite::input_dout), pos.own, dt, ctx.ws);
  const std::unique_ptr<SequenceAttention> attention = make_attention(groups, cfg, ctx);

  RankResult res;
  PhaseMeter meter(world, tracker);
  maybe_inject_failure(rank, P, "forward");

  // ================================ forward ================================
  TokenwiseSaved sv;
  Tensor q, k, v;
  qkv_forward(cfg, w, be, tp, x, pos, sv, q, k, v, ctx.act, attention->keeps_inputs() ? ctx.act : ctx.ws, ctx.ws);
  trace::sublayer("attention");
  const AttentionOut attn = attention->forward(q, k, v);
  if (!attention->keeps_inputs()) q = k = v = Tensor();
  const Tensor out = post_attention_forward(cfg, w, be, tp, attn.out, pos, sv, ctx.act, ctx.ws);

  meter.forward_done();
  maybe_inject_failure(rank, P, "backward");

  // ================================ backward ================================
  LayerWeights gw = w;  // our shards' shapes
  for (Tensor* g : all_of(gw)) *g = Tensor::zeros(g->shape(), dt, {rank, MemCategory::grads, &tracker}, be.device());
  Tensor dx2;
  const Tensor da = post_attention_backward(cfg, w, be, tp, attn.out, dout, pos, sv, gw, dx2, ctx.ws);
  trace::sublayer("attention");
  AttentionGrads g = attention->backward(q, k, v, attn, da);
  const Tensor dx = qkv_backward(cfg, w, be, tp, g.dq, g.dk, g.dv, pos, sv, dx2, gw, ctx.ws);

  // Every weight is replicated over CP and each CP rank saw only its tokens: sum every gradient
  // over CP. The sequence-parallel parameters (LayerNorms, o.bias, fc2.bias) are whole on every
  // TP rank too, which saw only its share of the tokens: sum those over TP as well, or every rank
  // updates them differently (the classic SP bug). One packed all-reduce per group.
  trace::sublayer("grad_sync");
  if (par.cp > 1) all_reduce_packed(*groups.cp, all_of(gw), ctx.comm);
  if (par.tp > 1) {
    const std::vector<Tensor*> sp_grads = sequence_parallel_params(gw), partial = sequence_parallel_params(res.partial_grads);
    for (size_t i = 0; i < sp_grads.size(); ++i)
      *partial[i] = sp_grads[i]->clone(ctx.ws);  // kept for lesson 2, which shows what forgetting the all-reduce gives
    all_reduce_packed(tp, sp_grads, ctx.comm);
  }

  meter.backward_done();
  meter.fill(res);
  res.attention_flops = attention->flops;
  res.steps = attention->steps;

  // ---- Results, gathered on every rank in the reference's layout (outside the timing).
  res.out = gather_tokens(world, out, own_positions, cfg.s, ctx.ws);
  res.dx = gather_tokens(world, dx, own_positions, cfg.s, ctx.ws);
  res.grads = gather_tp_grads(cfg, tp, gw, ctx.ws);
  res.local_grads = gw;
  return res;
}

namespace {

int64_t param_count(const LayerConfig& c, int T) {
  const int64_t d = c.d(), qkv = (c.H + 2 * c.Hkv) / T * d, Hd = c.H / T * d, fl = c.f / T;
  return c.h * qkv + qkv + Hd * c.h + c.h + c.h * fl + fl + fl * c.h + c.h + 4 * c.h;
}

// The layer's shapes on one rank of a resolved configuration.
struct Shares {
  ParallelConfig par;
  GroupCoords at;
  int64_t b, n_c, n_t, H_t, Hkv_t, f_t, d;
  HeadShare heads;  // a2a: this rank's heads of its TP share
  Shares(const ParallelConfig& p, const LayerConfig& c, int P, int rank)
      : par(p.resolved(P)), at(coords_of(par, rank)), b(c.b), n_c(c.s / par.cp), n_t(c.s / par.cp / par.tp),
        H_t(c.H / par.tp), Hkv_t(c.Hkv / par.tp), f_t(c.f / par.tp), d(c.d()),
        heads(ulysses_head_share(H_t, Hkv_t, par.a2a_size(), at.u)) {}
  bool a2a() const { return par.cp_comm == CpComm::a2a || par.cp_comm == CpComm::a2a_p2p; }
};

}  // namespace

int64_t parallel_saved_bytes(const ParallelConfig& par, const LayerConfig& c, int P, int rank, DType dt) {
  const Shares sh(par, c, P, rank);
  const int64_t U = sh.par.a2a_size();
  int64_t elems = sh.b * sh.n_t * (4 * c.h + 4) + 2 * sh.b * sh.n_c * sh.f_t;
  if (!sh.a2a())
    elems += sh.b * sh.n_c * (2 * sh.H_t * sh.d + 2 * sh.Hkv_t * sh.d + sh.H_t);
  else
    elems += sh.b * sh.n_c * sh.H_t * sh.d +
             U * sh.b * sh.n_c * (sh.heads.q_count * (2 * sh.d + 1) + 2 * sh.heads.kv_attended() * sh.d);
  return elems * dtype_size(dt);
}

CommBytes parallel_comm_bytes(const ParallelConfig& par, const LayerConfig& c, int P, int rank, DType dt) {
  const Shares sh(par, c, P, rank);
  const int T = sh.par.tp, C = sh.par.cp, U = sh.par.a2a_size(), R = sh.par.ring_size();
  const int64_t es = dtype_size(dt);
  CommBytes cb;
  // TP: g and g-bar around both blocks.
  const int64_t Nh = sh.b * sh.n_c * c.h;
  const int64_t ag = ring_all_gather_bytes(Nh, T, sh.at.t, dt), rs = ring_reduce_scatter_bytes(Nh, T, sh.at.t, dt);
  cb.forward += 2 * ag + 2 * rs;
  cb.backward += 4 * ag + 2 * rs + ring_all_reduce_bytes(6 * c.h, T, sh.at.t, dt);
  // The attention algorithm.
  auto ring_hops = [&](int64_t kv_bytes) {
    if (R == 1) return;
    cb.forward += 2 * kv_bytes * (R - 1);
    cb.backward += 2 * kv_bytes * (R - 1) + 2 * kv_bytes * R;
  };
  switch (sh.par.cp_comm) {
    case CpComm::none: break;
    case CpComm::p2p: ring_hops(sh.b * sh.n_c * sh.Hkv_t * sh.d * es); break;
    case CpComm::all_gather: {
      const int64_t kv = sh.b * c.s * sh.Hkv_t * sh.d;  // the whole sequence's K (or V)
      const int64_t kv_ag = ring_all_gather_bytes(kv, C, sh.at.c, dt), kv_rs = ring_reduce_scatter_bytes(kv, C, sh.at.c, dt);
      cb.forward += 2 * kv_ag;
      cb.backward += 2 * kv_ag + 2 * kv_rs;
      break;
    }
    case CpComm::a2a:
    case CpComm::a2a_p2p: {
      const int64_t tok = sh.b * sh.n_c * sh.d * es;  // one head of our tokens
      int64_t kv_out = 0;                            // K heads we send: each rank reads its own
      for (int j = 0; j < U; ++j)
        if (j != sh.at.u) kv_out += ulysses_head_share(sh.H_t, sh.Hkv_t, U, j).kv_count * tok;
      const int64_t q_blocks = (U - 1) * sh.heads.q_count * tok;
      cb.forward += 2 * q_blocks + 2 * kv_out;                                    // q, k, v; out back
      cb.backward += 2 * q_blocks + 2 * (U - 1) * sh.heads.kv_count * tok;        // dout; dq, dk, dv back
      ring_hops(U * sh.b * sh.n_c * sh.heads.kv_attended() * sh.d * es);          // a2a+p2p: the ring inside
      break;
    }
  }
  cb.backward += ring_all_reduce_bytes(param_count(c, T), C, sh.at.c, dt);  // gradients over CP
  return cb;
}

double parallel_attention_flops(const ParallelConfig& par, const LayerConfig& c, int P, int rank) {
  const Shares sh(par, c, P, rank);
  const AttentionSpec spec{c.causal, c.softmax_scale()};
  const Layout l = sh.par.layout(c);
  switch (sh.par.cp_comm) {
    case CpComm::p2p:
      return ring_attention_flops({l, c.s}, spec, sh.par.cp, sh.at.c, c.b, sh.H_t, sh.Hkv_t, sh.d);
    case CpComm::a2a_p2p:
      return ring_attention_flops({l, c.s}, spec, sh.par.ring_size(), sh.at.r, c.b, sh.heads.q_count,
                                  sh.heads.kv_attended(), sh.d);
    case CpComm::all_gather: {
      double f = 0;  // each query run against the whole sequence
      for (const Run& a : layout_runs(l, c.s, sh.par.cp, sh.at.c)) {
        AttentionParams p;
        p.b = c.b, p.sq = a.len, p.sk = c.s, p.H = sh.H_t, p.Hkv = sh.Hkv_t, p.d = sh.d, p.causal = c.causal;
        p.q_offset = a.first, p.q_stride = a.stride;
        f += kernels::cpu::attention_forward_flops(p);
      }
      return f;
    }
    case CpComm::none:
    case CpComm::a2a: {
      AttentionParams p;  // whole sequences, our heads
      p.b = c.b, p.sq = p.sk = c.s, p.H = sh.heads.q_count, p.Hkv = sh.heads.kv_attended(), p.d = sh.d;
      p.causal = c.causal;
      return kernels::cpu::attention_forward_flops(p);
    }
  }
  return 0;
}

RankResult Strategy::run(const LayerConfig& cfg, Communicator& comm, Backend& be, MemoryTracker& tracker,
                         DType dt) const {
  return parallel_layer_run(parallel, cfg, comm, be, tracker, dt);
}
int64_t Strategy::saved_bytes(const LayerConfig& cfg, int P, int rank, DType dt) const {
  return parallel_saved_bytes(parallel, cfg, P, rank, dt);
}
CommBytes Strategy::comm_bytes(const LayerConfig& cfg, int P, int rank, DType dt) const {
  return parallel_comm_bytes(parallel, cfg, P, rank, dt);
}

// ---- the named strategies' formulas

void validate_ring(const LayerConfig& cfg, int P) { find_strategy("ring").validate(cfg, P); }
void validate_ulysses(const LayerConfig& cfg, int P) { find_strategy("ulysses").validate(cfg, P); }
int64_t ring_saved_bytes(const LayerConfig& cfg, int P, int rank, DType dt) {
  return find_strategy("ring").saved_bytes(cfg, P, rank, dt);
}
CommBytes ring_comm_bytes(const LayerConfig& cfg, int P, int rank, DType dt) {
  return find_strategy("ring").comm_bytes(cfg, P, rank, dt);
}
double ring_attention_flops(const LayerConfig& cfg, int P, int rank) {
  return parallel_attention_flops(find_strategy("ring").parallel, cfg, P, rank);
}
CommBytes ulysses_comm_bytes(const LayerConfig& cfg, int P, int rank, DType dt) {
  return find_strategy("ulysses").comm_bytes(cfg, P, rank, dt);
}
int64_t ulysses_kv_heads(const LayerConfig& cfg, int P) { return cfg.Hkv % P == 0 ? cfg.Hkv : P; }

}  // namespace ringside

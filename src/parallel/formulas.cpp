// The formulas of parallel/formulas.h, one function per quantity, from the shapes one rank of a
// configuration holds.
#include "parallel/formulas.h"

#include <algorithm>

#include "comm/tensor_comm.h"
#include "kernels/attention_params.h"
#include "layer/tokenwise.h"
#include "parallel/allgather_attention.h"
#include "parallel/ring_attention.h"
#include "parallel/ulysses_attention.h"

namespace ringside {

namespace {

// A TP rank's parameters: the column- and row-parallel matrices (and column-parallel biases)
// by T, the sequence-parallel ones whole.
int64_t param_count(const LayerConfig& c, int T) {
  const int64_t d = c.d(), qkv = (c.H + 2 * c.Hkv) / T * d, Hd = c.H / T * d, fl = c.f / T, F = c.fc1_width() / T;
  const int64_t matrices = c.h * qkv + Hd * c.h + c.h * F + fl * c.h;
  return matrices + (c.bias ? qkv + F : 0) + sequence_parallel_param_count(c);
}

// The layer's shapes on one rank of a resolved configuration.
struct Shares {
  ParallelConfig par;
  GroupCoords at;
  int64_t b, S, n_c, n_t, H_t, Hkv_t, f_t, d;
  HeadShare heads;  // a2a: this rank's heads of its TP share
  Shares(const RunPlan& plan, int rank)
      : par(plan.par), at(plan.coords(rank)), b(plan.layer.b), S(plan.packing->S), n_c(S / par.cp),
        n_t(S / par.cp / par.sequence_split()),
        H_t(plan.layer.H / par.tp), Hkv_t(plan.layer.Hkv / par.tp), f_t(plan.layer.f / par.tp), d(plan.layer.d()),
        heads(ulysses_head_share(H_t, Hkv_t, par.a2a_size(), at.u)) {}
  bool a2a() const { return par.cp_comm == CpComm::a2a || par.cp_comm == CpComm::a2a_p2p; }
};

}  // namespace

int64_t parallel_saved_bytes(const RunPlan& plan, int rank, DType dt) {
  const LayerConfig& c = plan.layer;
  const Shares mine(plan, rank);
  const int64_t U = mine.par.a2a_size();
  // Full recomputation keeps the layer's input alone (Korthikanti et al. 2022, 5: 2 s b h bytes
  // in 16-bit, here s b h elements, 1/(T C) of them on a rank).
  if (plan.recompute() == Recompute::full) return mine.b * mine.n_t * c.h * dtype_size(dt);
  // Selective keeps x and x2 and u, not the norms' outputs and statistics nor the activation g.
  const int64_t u_t = c.fc1_width() / mine.par.tp;  // W_1's output: f_t, or SwiGLU's gate and up, 2 f_t
  int64_t elems = plan.recompute() == Recompute::selective
                      ? mine.b * mine.n_t * 2 * c.h + mine.b * mine.n_c * u_t
                      : mine.b * mine.n_t * (4 * c.h + 2 * c.norm_stats()) + mine.b * mine.n_c * (u_t + mine.f_t);
  if (!mine.a2a())
    elems += mine.b * mine.n_c * (2 * mine.H_t * mine.d + 2 * mine.Hkv_t * mine.d + mine.H_t);
  else
    elems += mine.b * mine.n_c * mine.H_t * mine.d +
             U * mine.b * mine.n_c * (mine.heads.q_count * (2 * mine.d + 1) + 2 * mine.heads.kv_attended() * mine.d);
  return elems * dtype_size(dt);
}

CommBytes parallel_comm_bytes(const RunPlan& plan, int rank, DType dt) {
  const LayerConfig& c = plan.layer;
  const Shares mine(plan, rank);
  const int T = mine.par.tp, C = mine.par.cp, U = mine.par.a2a_size(), R = mine.par.ring_size();
  const int64_t elem_bytes = dtype_size(dt);
  CommBytes sent;
  // TP: g and g-bar around both blocks.
  const int64_t Nh = mine.b * mine.n_c * c.h;
  if (mine.par.sequence_parallel) {
    const int64_t ag = ring_all_gather_bytes(Nh, T, mine.at.t, dt), rs = ring_reduce_scatter_bytes(Nh, T, mine.at.t, dt);
    sent.forward += 2 * ag + 2 * rs;
    sent.backward += 4 * ag + 2 * rs + ring_all_reduce_bytes(sequence_parallel_param_count(c), T, mine.at.t, dt);
  } else {  // plain TP: an all-reduce leaving each block forward, entering each backward
    sent.forward += 2 * ring_all_reduce_bytes(Nh, T, mine.at.t, dt);
    sent.backward += 2 * ring_all_reduce_bytes(Nh, T, mine.at.t, dt);
  }
  // The attention algorithm.
  auto ring_hops = [&](int64_t kv_bytes) {
    if (R == 1) return;
    sent.forward += 2 * kv_bytes * (R - 1);
    sent.backward += 2 * kv_bytes * (R - 1) + 2 * kv_bytes * R;
  };
  switch (mine.par.cp_comm) {
    case CpComm::none: break;
    case CpComm::p2p: ring_hops(mine.b * mine.n_c * mine.Hkv_t * mine.d * elem_bytes); break;
    case CpComm::all_gather: {
      const int64_t kv = mine.b * mine.S * mine.Hkv_t * mine.d;  // the whole (padded) sequence's K (or V)
      const int64_t kv_ag = ring_all_gather_bytes(kv, C, mine.at.c, dt), kv_rs = ring_reduce_scatter_bytes(kv, C, mine.at.c, dt);
      sent.forward += 2 * kv_ag;
      sent.backward += 2 * kv_ag + 2 * kv_rs;
      break;
    }
    case CpComm::a2a:
    case CpComm::a2a_p2p: {
      const int64_t tok = mine.b * mine.n_c * mine.d * elem_bytes;  // one head of our tokens
      int64_t kv_out = 0;                            // K heads we send: each rank reads its own
      for (int j = 0; j < U; ++j)
        if (j != mine.at.u) kv_out += ulysses_head_share(mine.H_t, mine.Hkv_t, U, j).kv_count * tok;
      const int64_t q_blocks = (U - 1) * mine.heads.q_count * tok;
      sent.forward += 2 * q_blocks + 2 * kv_out;                                    // q, k, v; out back
      sent.backward += 2 * q_blocks + 2 * (U - 1) * mine.heads.kv_count * tok;        // dout; dq, dk, dv back
      ring_hops(U * mine.b * mine.n_c * mine.heads.kv_attended() * mine.d * elem_bytes);          // a2a+p2p: the ring inside
      break;
    }
  }
  // Full recomputation runs the forward again in the backward, its transfers included.
  if (plan.recompute() == Recompute::full) sent.backward += sent.forward;
  sent.backward += ring_all_reduce_bytes(param_count(c, T), C, mine.at.c, dt);  // gradients over CP
  return sent;
}

int64_t parallel_param_count(const RunPlan& plan) { return param_count(plan.layer, plan.par.tp); }

int64_t parallel_forward_comm_peak(const RunPlan& plan, int rank, DType dt) {
  const LayerConfig& c = plan.layer;
  const Shares mine(plan, rank);
  const int64_t elem_bytes = dtype_size(dt);
  // TP's g-bar: the ring reduce-scatter's incoming chunk and two partial sums, N_c h / T each
  // (N_t h with SP; plain TP's all-reduce begins with the same reduce-scatter).
  const int64_t T = mine.par.tp, chunk = (mine.b * mine.n_c * c.h + T - 1) / T;
  const int64_t tp = T > 1 ? 3 * chunk * elem_bytes : 0;
  // The all-to-all of q (and of the output back): its send and receive buffers, N_c H_t d each;
  // k's and v's are no larger.
  const int64_t a2a = 2 * mine.b * mine.n_c * mine.H_t * mine.d * elem_bytes;
  int64_t attention = 0;
  switch (mine.par.cp_comm) {
    case CpComm::none: break;
    case CpComm::a2a: attention = a2a; break;
    case CpComm::p2p: attention = 4 * mine.b * mine.n_c * mine.Hkv_t * mine.d * elem_bytes; break;
    case CpComm::a2a_p2p:  // the all-to-all, then the ring of head-layout K/V blocks
      attention = std::max(a2a, 4 * mine.par.a2a_size() * mine.b * mine.n_c * mine.heads.kv_attended() * mine.d * elem_bytes);
      break;
    case CpComm::all_gather:
      attention = allgather_kv_bytes(c.b, mine.S, mine.Hkv_t, mine.d, dt) * 3 / 2;  // K, V, and V's gather buffer
      break;
  }
  return std::max(tp, attention);
}

double parallel_attention_flops(const RunPlan& plan, int rank) {
  const LayerConfig& c = plan.layer;
  const Shares mine(plan, rank);
  const RingLayout& layout = *plan.ring;
  const AttentionSpec spec{c.causal, c.softmax_scale(), plan.packing->mask()};
  switch (mine.par.cp_comm) {
    case CpComm::p2p:
      return ring_attention_flops(layout, spec, mine.at.c, c.b, mine.H_t, mine.Hkv_t, mine.d);
    case CpComm::a2a_p2p:
      return ring_attention_flops(layout, spec, mine.at.r, c.b, mine.heads.q_count, mine.heads.kv_attended(), mine.d);
    case CpComm::all_gather:
      return allgather_attention_flops(layout, spec, mine.at.c, c.b, mine.H_t, mine.Hkv_t, mine.d);
    case CpComm::none:
    case CpComm::a2a: {
      const Run all = whole_sequence(mine.S);  // whole sequences, our heads
      return kernels::attention_forward_flops(
          params_for(spec, c.b, mine.heads.q_count, mine.heads.kv_attended(), mine.d, all, all));
    }
  }
  return 0;
}

// ---- Ulysses

int64_t ulysses_kv_heads(const LayerConfig& cfg, int P) { return cfg.Hkv % P == 0 ? cfg.Hkv : P; }

}  // namespace ringside

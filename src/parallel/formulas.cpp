// The formulas of parallel/formulas.h, one function per quantity, from the shapes one rank of a
// configuration holds.
#include "parallel/formulas.h"

#include <algorithm>

#include "comm/tensor_comm.h"
#include "layer/tokenwise.h"
#include "parallel/shares.h"

namespace ringside {

namespace {

// A TP rank's parameters: the column- and row-parallel matrices (and column-parallel biases)
// by T, the sequence-parallel ones whole.
int64_t param_count(const LayerConfig& c, int T) {
  const int64_t d = c.d(), qkv = (c.H + 2 * c.Hkv) / T * d, Hd = c.H / T * d, fl = c.f / T, F = c.fc1_width() / T;
  const int64_t matrices = c.h * qkv + Hd * c.h + c.h * F + fl * c.h;
  return matrices + (c.bias ? qkv + F : 0) + sequence_parallel_param_count(c);
}

}  // namespace

int64_t parallel_saved_bytes(const RunPlan& plan, int rank, DType dt) {
  const LayerConfig& c = plan.layer;
  const Shares mine(plan, rank);
  // Full recomputation keeps the layer's input alone (Korthikanti et al. 2022, 5: 2 s b h bytes
  // in 16-bit, here s b h elements, 1/(T C) of them on a rank).
  if (plan.recompute() == Recompute::full) return mine.b * mine.n_t * c.h * dtype_size(dt);
  // Selective keeps x and x2 and u, not the norms' outputs and statistics nor the activation g.
  const int64_t u_t = c.fc1_width() / mine.par.tp;  // W_1's output: f_t, or SwiGLU's gate and up, 2 f_t
  int64_t elems = plan.recompute() == Recompute::selective
                      ? mine.b * mine.n_t * 2 * c.h + mine.b * mine.n_c * u_t
                      : mine.b * mine.n_t * (4 * c.h + 2 * c.norm_stats()) + mine.b * mine.n_c * (u_t + mine.f_t);
  elems += mine.par.scheme().saved_elems(mine);  // the attention's: its scheme's formula
  return elems * dtype_size(dt);
}

std::vector<ClassBytes> parallel_comm_bytes_by_class(const RunPlan& plan, int rank, DType dt) {
  const LayerConfig& c = plan.layer;
  const Shares mine(plan, rank);
  const int T = mine.par.tp, C = mine.par.cp;
  ClassBytes all_gather{CommClass::tp_all_gather, {}}, reduce_scatter{CommClass::tp_reduce_scatter, {}},
      all_reduce{CommClass::tp_all_reduce, {}};
  // TP: g and g-bar around both blocks.
  const int64_t Nh = mine.b * mine.n_c * c.h;
  if (mine.par.sequence_parallel) {
    const int64_t ag = ring_all_gather_bytes(Nh, T, mine.at.t, dt), rs = ring_reduce_scatter_bytes(Nh, T, mine.at.t, dt);
    all_gather.bytes = {2 * ag, 4 * ag};
    reduce_scatter.bytes = {2 * rs, 2 * rs};
    all_reduce.bytes.backward = ring_all_reduce_bytes(sequence_parallel_param_count(c), T, mine.at.t, dt);
  } else {  // plain TP: an all-reduce leaving each block forward, entering each backward
    all_reduce.bytes = {2 * ring_all_reduce_bytes(Nh, T, mine.at.t, dt), 2 * ring_all_reduce_bytes(Nh, T, mine.at.t, dt)};
  }
  // The attention: its scheme's formula.
  ClassBytes attention{CommClass::cp_attention, mine.par.scheme().bytes_sent(mine, dt)};
  std::vector<ClassBytes> classes{all_gather, reduce_scatter, all_reduce, attention};
  // Full recomputation runs the forward again in the backward, its transfers included.
  if (plan.recompute() == Recompute::full)
    for (ClassBytes& k : classes) k.bytes.backward += k.bytes.forward;
  classes.push_back({CommClass::grad_all_reduce, {0, ring_all_reduce_bytes(param_count(c, T), C, mine.at.c, dt)}});  // gradients over CP
  return classes;
}

CommBytes parallel_comm_bytes(const RunPlan& plan, int rank, DType dt) {
  CommBytes sent;
  for (const ClassBytes& k : parallel_comm_bytes_by_class(plan, rank, dt))
    sent.forward += k.bytes.forward, sent.backward += k.bytes.backward;
  return sent;
}

const char* to_string(CommClass k) {
  switch (k) {
    case CommClass::tp_all_gather: return "TP all-gather";
    case CommClass::tp_reduce_scatter: return "TP reduce-scatter";
    case CommClass::tp_all_reduce: return "TP all-reduce";
    case CommClass::cp_attention: return "CP attention";
    case CommClass::grad_all_reduce: return "gradient all-reduce over CP";
  }
  return "?";
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
  const int64_t attention = mine.par.scheme().comm_peak(mine, dt);  // its scheme's formula
  return std::max(tp, attention);
}

double parallel_attention_flops(const RunPlan& plan, int rank) {
  const Shares mine(plan, rank);
  return mine.par.scheme().flops(mine);
}

// ---- Ulysses

int64_t ulysses_kv_heads(const LayerConfig& cfg, int P) { return cfg.Hkv % P == 0 ? cfg.Hkv : P; }

}  // namespace ringside

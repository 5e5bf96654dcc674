// The layer's shapes on one rank of a resolved configuration: what every formula (formulas.h and
// each CpScheme's, parallel/cp_scheme.h) is written over.
#pragma once
#include <cstdint>

#include "kernels/attention_params.h"
#include "parallel/attention.h"
#include "parallel/run_plan.h"
#include "parallel/ulysses_attention.h"

namespace ringside {

/// World rank `rank`'s share of a RunPlan's layer, in tokens and heads:
///   b, S       batch, the padded sequence's slots (plan.packing->S)
///   n_c        S / C tokens in its CP shard; n_t = n_c / T between the TP blocks (n_c without SP)
///   H_t, Hkv_t, f_t   query heads, kv heads and ffn width of its TP shard (H/T, Hkv/T, f/T)
///   d          the head dimension
///   heads      under an all-to-all, this rank's heads of its TP share (HeadShare); else all H_t
struct Shares {
  const RunPlan& plan;
  ParallelConfig par;
  GroupCoords at;
  int64_t b, S, n_c, n_t, H_t, Hkv_t, f_t, d;
  HeadShare heads;
  Shares(const RunPlan& p, int rank)
      : plan(p), par(p.par), at(p.coords(rank)), b(p.layer.b), S(p.packing->S), n_c(S / par.cp),
        n_t(S / par.cp / par.sequence_split()), H_t(p.layer.H / par.tp), Hkv_t(p.layer.Hkv / par.tp),
        f_t(p.layer.f / par.tp), d(p.layer.d()), heads(ulysses_head_share(H_t, Hkv_t, par.a2a_size(), at.u)) {}
  /// The attention's spec: the layer's mask over the padded sequence.
  AttentionSpec spec() const { return {plan.layer.causal, plan.layer.softmax_scale(), plan.packing->mask()}; }
};

/// What an attention that keeps its inputs saves (q, k, v, out and lse of the rank's tokens):
/// N_c (2 H_t d + 2 Hkv_t d + H_t) elements (N_c = b n_c).
inline int64_t kept_inputs_elems(const Shares& mine) {
  return mine.b * mine.n_c * (2 * mine.H_t * mine.d + 2 * mine.Hkv_t * mine.d + mine.H_t);
}

/// Forward attention FLOPs over the whole (padded) sequence for this rank's heads (its all-to-all
/// share, or all H_t): what TP alone and Ulysses compute.
inline double whole_sequence_flops(const Shares& mine) {
  const Run all = whole_sequence(mine.S);
  return kernels::attention_forward_flops(
      params_for(mine.spec(), mine.b, mine.heads.q_count, mine.heads.kv_attended(), mine.d, all, all));
}

}  // namespace ringside

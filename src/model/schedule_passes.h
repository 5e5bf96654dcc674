// Passes over a recorded schedule before the model replays it: what the implementations the
// model stands for do differently from ringside's own code, though they compute the same thing.
#pragma once

#include "trace/trace_file.h"

namespace ringside::model {

/// One kernel a ring step. ringside's ring computes a step as (query run, key run) pairs, each
/// merged on its own (two under zigzag: ring_attention.cpp); TransformerEngine and
/// ring-flash-attention launch one call a step instead (zigzag: the whole local Q against the
/// first half of the block, or its second half against the whole block) and merge once. So that
/// the model costs the call they make, each attention op of a step with several gets
/// " step_call sq=S sk=K kpq=E" appended to its detail: the one call's queries, keys and keys a
/// query sees, which set its rate and occupancy (efficiency.h); and every attention op and merge
/// after a step's first gets " launch_shared": no launch, no host issue of its own. The FLOPs and
/// bytes stay each op's.
void join_step_calls(trace::TraceData& schedule);

/// TP's communication under its GEMMs (Megatron's --tp-comm-overlap with userbuffers' ring
/// exchange, torch's async TP; Wang et al. 2022, "Overlap communication with dependent
/// computation via decomposition"). Each all-gather before a GEMM (TP's sublayers qkv,
/// out_proj, mlp; not attention's or the gradients') runs as its T - 1 ring steps with the GEMM
/// split into T row chunks: the own chunk first, each next one as soon as its rows have arrived,
/// while the following step's transfer moves. Each reduce-scatter after a GEMM likewise: the
/// chunk the first step sends is computed first, the next while that transfer moves, and each
/// received partial sum is added before it travels on. What stays exposed is one chunk's
/// transfer (or compute) at either end. The chunks that run beside a reduce-scatter's transfers
/// lose `reduce_scatter_sms` SMs to it (userbuffers' reduction kernels: " sms_taken=S" in their
/// detail, costs.cpp); a weight gradient's GEMM (a^T) splits its k, the others their m. The
/// events get new program orders (every order times 8, the chunks between).
void overlap_tp_comm(trace::TraceData& schedule, int reduce_scatter_sms);

/// FP8 under sequence parallelism: TransformerEngine and torchao quantize a column-parallel
/// layer's input on its own rank, then all-gather it in FP8. So each GEMM fed by one of TP's
/// all-gathers quantizes its local rows only (" fp8_input=E" in its detail: the E = m k / T
/// elements its rank quantized; costs.cpp), and the all-gather moves one byte an element, half
/// of bf16's (the transfers' bytes halved). Run before overlap_tp_comm, which passes the mark to
/// its own chunk only. Only for --dtype fp8.
void quantize_before_gather(trace::TraceData& schedule);

/// torchtitan's selective activation checkpointing (its "op" policy, parallelize_llama.py
/// @9dec370: "saves output of all compute ops, except every second mm"): every second
/// matmul of each rank's forward is run again in the backward, before the backward of its
/// sublayer, as a recompute (phase "recompute"). Run on a schedule recorded with --recompute
/// selective, whose recompute has no GEMM of its own.
void recompute_every_second_gemm(trace::TraceData& schedule);

}  // namespace ringside::model

// Megatron-LM's command-line flags for a planned split (emit.h).
//
// Every flag below is in Megatron-LM's parser at NVIDIA/Megatron-LM
// d98e8a64ddf34856e74b24714e3bedb2f5a39553: megatron/training/arguments.py's add_argument calls,
// and the flags its ArgumentGroupFactory makes of the dataclasses' fields (--field-name, or the
// field's argparse_meta arg_names: TransformerConfig's fp8 is --fp8-format) in
// megatron/core/model_parallel_config.py, megatron/core/transformer/transformer_config.py and
// megatron/training/config/*.py. tests/test_emit.cpp holds the list.
//   --cp-comm-type            TransformerEngine's cp_comm_type: p2p, all_gather, a2a, a2a+p2p
//   --hierarchical-context-parallel-sizes   a2a+p2p's [a2a size, p2p size], the a2a groups of
//                             consecutive CP ranks (parallel_state.py create_hierarchical_groups)
//   --account-for-{embedding,loss}-in-pipeline-split   the embedding and the loss counted as a
//                             layer of the first and last virtual stage: Llama 3's rule
//   --use-megatron-fsdp --data-parallel-sharding-strategy optim_grads(_params): ZeRO 2 (3); it
//                             asserts --ckpt-format fsdp_dtensor (arguments.py validate_args)
#include <string>

#include "core/error.h"
#include "model/emit.h"

namespace ringside::model {

namespace {

constexpr const char* kTitle = "Megatron-LM";

std::string flag(const std::string& name, int64_t value) { return detail::concat(name, " ", value); }

// TP with its sequence parallelism, and CP with its TransformerEngine scheme.
void tensor_and_context(const FrameworkSplit& s, FrameworkFlags& f) {
  const ParallelConfig& p = s.par;
  f.settings.push_back(flag("--tensor-model-parallel-size", p.tp));
  if (p.tp > 1 && p.sequence_parallel) f.settings.push_back("--sequence-parallel");
  if (p.cp > 1) {
    f.settings.push_back(flag("--context-parallel-size", p.cp));
    const CpScheme* scheme = p.cp_comm;
    if (*scheme->te_name == '\0') {
      scheme = &cp_scheme("p2p");
      f.cannot.push_back(cannot_express(kTitle, std::string("ringside's ") + p.cp_comm->name + " scheme",
                                        "TransformerEngine's cp_comm_type has no such kind", "the K/V ring, --cp-comm-type p2p"));
    }
    f.settings.push_back(std::string("--cp-comm-type ") + scheme->te_name);
    if (scheme->nested()) f.settings.push_back(detail::concat("--hierarchical-context-parallel-sizes ", p.a2a_size(), " ", p.ring_size()));
  }
  if (p.order == RankOrder::cp_tp && p.tp > 1 && p.cp > 1)
    f.cannot.push_back(cannot_express(kTitle, "the cp-tp rank order",
                                      "it numbers ranks tp-cp-ep-dp-pp or tp-cp-ep-pp-dp, TP always innermost",
                                      "tp-cp, its default, TP on neighbouring GPUs"));
}

// The token layout of the CP shards: Megatron-LM's is zigzag, chosen by the data, not a flag.
void layout(const FrameworkSplit& s, FrameworkFlags& f) {
  const ParallelConfig& p = s.par;
  if (p.cp == 1 || !p.layout_matters(s.cfg)) return;
  const char* why = "it gives CP rank r chunks r and 2C-1-r of 2C, per sequence or per packed document "
                    "(megatron/core/utils.py get_batch_on_this_cp_rank), and has no flag for another";
  if (p.layout == Layout::zigzag || p.layout == Layout::zigzag_per_doc)
    f.notes.push_back(std::string("layout ") + to_string(p.layout) + ": Megatron-LM's own, no flag (" + why + ")");
  else
    f.cannot.push_back(cannot_express(kTitle, std::string("the ") + to_string(p.layout) + " layout", why,
                                      per_document(p.layout) ? "zigzag-per-doc, its per-document zigzag" : "zigzag"));
}

void recompute(const FrameworkSplit& s, FrameworkFlags& f) {
  switch (s.par.recompute) {
    case Recompute::none: return;
    case Recompute::selective:
      f.settings.push_back("--recompute-granularity selective");
      f.settings.push_back("--recompute-modules core_attn layernorm");
      f.cannot.push_back(cannot_express(kTitle, "ringside's selective recomputation of the MLP's activation",
                                        "--recompute-modules recomputes a dense MLP only whole (mlp); moe_act is the MoE's",
                                        "core_attn and layernorm, the activation's output kept (more memory)"));
      return;
    case Recompute::full:
      for (const char* w : {"--recompute-granularity full", "--recompute-method uniform", "--recompute-num-layers 1"})
        f.settings.push_back(w);
      return;
  }
}

// ringside's FP8 recipes by Megatron-LM's --fp8-recipe names.
std::string fp8_recipe_name(const std::string& recipe) {
  if (recipe == "current") return "tensorwise";
  if (recipe == "block") return "blockwise";
  return recipe;  // delayed, mxfp8
}

void precision(const FrameworkSplit& s, FrameworkFlags& f) {
  if (s.dtype == "fp32") {
    f.notes.push_back("fp32: Megatron-LM's default, no --bf16");
  } else {
    f.settings.push_back("--bf16");
    if (s.dtype == "fp8") {
      f.settings.push_back("--fp8-format hybrid");
      f.settings.push_back("--fp8-recipe " + fp8_recipe_name(s.fp8_recipe));
    }
  }
  if (s.tp_comm_overlap) f.settings.push_back("--tp-comm-overlap");
}

// The pipeline, its chunks and Llama 3's short first and last stages; the rank order outside the
// group; data parallelism and ZeRO; the batch.
void whole_step(const FrameworkSplit& s, FrameworkFlags& f) {
  const StepShape& st = *s.step;
  f.settings.push_back(flag("--num-layers", st.layers));
  f.settings.push_back(flag("--pipeline-model-parallel-size", st.pp));
  if (st.pp > 1) {
    const PipelineChunks chunks = pipeline_chunks(st.layers, st.pp, st.vp);
    if (chunks.short_layers == 2) f.settings.push_back("--account-for-embedding-in-pipeline-split");
    if (chunks.short_layers >= 1) f.settings.push_back("--account-for-loss-in-pipeline-split");
    if (st.vp > 1) f.settings.push_back(flag("--num-layers-per-virtual-pipeline-stage", chunks.chunk_layers));
    if (st.dp > 1 && st.order == OuterOrder::pp_dp) f.settings.push_back("--use-tp-pp-dp-mapping");
  }
  const bool replicated = st.dp * s.par.cp > 1;  // the weights' DP x CP group
  if (replicated && st.zero >= 1) f.settings.push_back("--use-distributed-optimizer");
  if (replicated && st.zero >= 2) {
    f.settings.push_back("--use-megatron-fsdp");
    f.settings.push_back(std::string("--data-parallel-sharding-strategy ") + (st.zero == 2 ? "optim_grads" : "optim_grads_params"));
    f.settings.push_back("--ckpt-format fsdp_dtensor");
  }
  if (replicated && st.overlap_grad_reduce) f.settings.push_back("--overlap-grad-reduce");
  f.settings.push_back(flag("--micro-batch-size", st.mbs));
  f.settings.push_back(flag("--global-batch-size", st.gbs));
  f.notes.push_back(detail::concat("DP = ", st.dp, ": Megatron-LM's data parallelism is the GPUs left, world size / (TP CP PP)",
                                   replicated && st.zero == 0 ? "; ZeRO 0 is its DDP, no --use-distributed-optimizer" : ""));
}

}  // namespace

FrameworkFlags megatron_flags(const FrameworkSplit& s) {
  FrameworkFlags f;
  tensor_and_context(s, f);
  layout(s, f);
  recompute(s, f);
  if (s.step) whole_step(s, f);
  else
    f.settings.push_back(flag("--micro-batch-size", s.cfg.b));
  f.settings.push_back(flag("--seq-length", s.cfg.s));
  precision(s, f);
  if (!s.step)
    f.notes.push_back("the layer plan is TP x CP alone: the pipeline, data parallelism, the optimizer's sharding and the "
                      "global batch stay at Megatron-LM's defaults (plan --gbs plans them)");
  return f;
}

}  // namespace ringside::model

// plan --emit (model/emit.h): every flag or key an emitter can print is one its framework's parser
// defines (the lists below, taken from the parsers at the commits named), the splits of the issue
// in each framework's words, and what each framework cannot express with the nearest it runs.
#include <catch2/catch.hpp>

#include <algorithm>
#include <regex>
#include <set>
#include <string>

#include "core/error.h"
#include "layer/presets.h"
#include "model/emit.h"

using namespace ringside;
using namespace ringside::model;

namespace {

// Megatron-LM's flags, from NVIDIA/Megatron-LM d98e8a64ddf34856e74b24714e3bedb2f5a39553: the
// add_argument names of megatron/training/arguments.py and the --field-name flags its
// ArgumentGroupFactory makes of TransformerConfig (with ModelParallelConfig) and
// megatron/training/config/*.py (argparse_meta arg_names where given: fp8 is --fp8-format),
// read by an AST walk of those files (scripts/megatron_flags.py lists all 865); the parallelism,
// batch, recompute and precision ones.
const std::set<std::string> kMegatronFlags{
    "--account-for-embedding-in-pipeline-split", "--account-for-loss-in-pipeline-split", "--bf16", "--ckpt-format",
    "--context-parallel-size", "--cp-comm-type", "--data-parallel-sharding-strategy", "--decoder-first-pipeline-num-layers",
    "--decoder-last-pipeline-num-layers", "--fp16", "--fp8-format", "--fp8-recipe", "--global-batch-size",
    "--hierarchical-context-parallel-sizes", "--micro-batch-size", "--num-layers", "--num-layers-per-virtual-pipeline-stage",
    "--num-virtual-stages-per-pipeline-rank", "--overlap-grad-reduce", "--overlap-param-gather",
    "--pipeline-model-parallel-layout", "--pipeline-model-parallel-size", "--recompute-activations",
    "--recompute-granularity", "--recompute-method", "--recompute-modules", "--recompute-num-layers", "--seq-length",
    "--sequence-parallel", "--tensor-model-parallel-size", "--tp-comm-overlap", "--use-distributed-optimizer",
    "--use-megatron-fsdp", "--use-torch-fsdp2", "--use-tp-pp-dp-mapping"};

// torchtitan's keys, from pytorch/torchtitan b5bcd76c1b2d55ec4bf0b0b21a00bc9d8b29f7bf: the fields
// of torchtitan/config/configs.py's ParallelismConfig, TrainingConfig and CompileConfig, and
// torchtitan/trainer.py's Trainer.Config.activation_checkpoint.
const std::set<std::string> kTorchtitanKeys{
    "parallelism.data_parallel_replicate_degree", "parallelism.data_parallel_shard_degree",
    "parallelism.fsdp_reshard_after_forward", "parallelism.enable_fsdp_symm_mem", "parallelism.tensor_parallel_degree",
    "parallelism.enable_sequence_parallel", "parallelism.spmd_backend", "parallelism.pipeline_parallel_degree",
    "parallelism.module_fqns_per_model_part", "parallelism.pipeline_parallel_first_stage_less_layers",
    "parallelism.pipeline_parallel_last_stage_less_layers", "parallelism.pipeline_parallel_layers_per_stage",
    "parallelism.pipeline_parallel_schedule", "parallelism.pipeline_parallel_schedule_csv", "parallelism.num_pp_microbatches",
    "parallelism.context_parallel_degree", "parallelism.context_parallel_load_balancer",
    "parallelism.context_parallel_ptrr_mask_key", "parallelism.expert_parallel_degree",
    "training.num_tokens_per_microbatch_per_dp_rank", "training.num_tokens_per_train_step", "training.max_context_length",
    "training.max_norm", "training.steps", "training.enable_cpu_offload", "training.disable_cuda_graphs", "training.dtype",
    "training.mixed_precision_param", "training.mixed_precision_reduce", "training.gc_freq", "training.gc_debug",
    "compile.enable", "compile.enable_async_tensor_parallel", "compile.components", "compile.backend",
    "activation_checkpoint"};

// DeepSpeed's: deepspeedai/Megatron-DeepSpeed 4efb479d5317ce9b86096b9d8e3e8030b0b5263b's
// megatron/arguments.py flags, and deepspeedai/DeepSpeed edaa7221267243c7be7fb49c5d5f5c4fb97b4641's
// deepspeed/__init__.py (--deepspeed, --deepspeed_config), runtime/constants.py and
// runtime/zero/config.py (the ds_config keys; stage is zero_optimization's, enabled bf16's).
const std::set<std::string> kDeepspeedFlags{
    "--deepspeed", "--deepspeed_config", "--bf16", "--ds-sequence-parallel-size", "--fp16", "--global-batch-size",
    "--micro-batch-size", "--num-layers", "--num-layers-per-virtual-pipeline-stage", "--pipeline-model-parallel-size",
    "--recompute-granularity", "--recompute-method", "--recompute-num-layers", "--seq-length", "--sequence-parallel",
    "--tensor-model-parallel-size", "--zero-stage"};
const std::set<std::string> kDeepspeedKeys{"train_batch_size", "train_micro_batch_size_per_gpu", "gradient_accumulation_steps",
                                           "zero_optimization", "stage", "bf16", "enabled"};

// The names a setting uses: its flags, its config.<section>.<key> keys, its JSON keys.
std::vector<std::string> names_in(const std::string& setting) {
  std::vector<std::string> names;
  static const std::regex flag(R"((?:^| )(--[A-Za-z0-9_-]+))"), key(R"(^config\.([a-z_.]+) = )"), json(R"re("([a-z_0-9]+)":)re");
  for (const std::regex* r : {&flag, &key, &json})
    for (auto it = std::sregex_iterator(setting.begin(), setting.end(), *r); it != std::sregex_iterator(); ++it)
      names.push_back((*it)[1]);
  return names;
}

LayerConfig preset_layer(const std::string& name, int64_t s) {
  LayerConfig cfg;
  apply_preset(find_preset(name), cfg);
  cfg.s = s;
  return cfg;
}

// A split of degrees T x C with `scheme` (U for a2a+p2p), on the preset's layer.
FrameworkSplit split(const LayerConfig& cfg, int tp, int cp, const std::string& scheme = "p2p", int u = 1,
                     Layout layout = Layout::zigzag, Recompute r = Recompute::none) {
  FrameworkSplit s;
  s.cfg = cfg;
  s.par.tp = tp, s.par.cp = cp;
  s.par.cp_comm = cp > 1 ? &cp_scheme(scheme) : &no_cp_scheme();
  s.par.cp_a2a = u;
  s.par.layout = layout, s.par.recompute = r;
  return s;
}

StepShape step(int layers, int pp, int vp, int dp, int zero, int gbs, OuterOrder order = OuterOrder::pp_dp) {
  StepShape st;
  st.layers = layers, st.pp = pp, st.vp = vp, st.dp = dp, st.zero = zero, st.gbs = gbs, st.mbs = 1;
  st.microbatches = gbs / dp, st.order = order;
  return st;
}

bool has(const std::vector<std::string>& v, const std::string& s) { return std::find(v.begin(), v.end(), s) != v.end(); }
bool any_contains(const std::vector<std::string>& v, const std::string& s) {
  return std::any_of(v.begin(), v.end(), [&](const std::string& x) { return x.find(s) != std::string::npos; });
}

}  // namespace

TEST_CASE("plan --emit: every flag and key each framework's emitter prints is in its parser's list", "[emit]") {
  const LayerConfig cfg = preset_layer("llama3-8b", 131072);
  std::vector<FrameworkSplit> splits;
  for (int tp : {1, 2, 4, 8})
    for (int cp : {1, 2, 4, 8})
      for (const CpScheme* scheme : cp_schemes()) {
        if (scheme->none() != (cp == 1)) continue;
        for (int u : scheme->nested() ? std::vector<int>{2, cp / 2} : std::vector<int>{1}) {
          if (scheme->nested() && (u < 2 || cp / u < 2)) continue;
          for (Layout layout : {Layout::contiguous, Layout::zigzag, Layout::striped, Layout::greedy})
            for (Recompute r : {Recompute::none, Recompute::selective, Recompute::full}) {
              FrameworkSplit s = split(cfg, tp, cp, scheme->name, u, layout, r);
              s.par.order = (tp + cp) % 2 ? RankOrder::cp_tp : RankOrder::tp_cp;
              s.dtype = r == Recompute::full ? "fp8" : r == Recompute::selective ? "fp32" : "bf16";
              s.fp8_recipe = "current", s.tp_comm_overlap = tp > 1;
              splits.push_back(s);
              for (const StepShape& st : {step(32, 4, 2, 2, 0, 16), step(126, 16, 8, 8, 1, 128), step(31, 4, 1, 1, 2, 8),
                                          step(30, 2, 2, 4, 3, 16, OuterOrder::dp_pp), step(32, 1, 1, 2, 2, 6)}) {
                splits.push_back(s);
                splits.back().step = st;
              }
            }
        }
      }
  REQUIRE(splits.size() > 1000);
  std::map<std::string, std::set<std::string>> printed;
  for (const FrameworkSplit& s : splits)
    for (const Framework& f : frameworks())
      for (const std::string& setting : f.emit(s).settings)
        for (const std::string& n : names_in(setting)) printed[f.name].insert(n);
  for (const std::string& n : printed["megatron"]) CHECK(kMegatronFlags.contains(n));
  for (const std::string& n : printed["torchtitan"]) CHECK(kTorchtitanKeys.contains(n));
  for (const std::string& n : printed["deepspeed"]) CHECK((kDeepspeedFlags.contains(n) || kDeepspeedKeys.contains(n)));
  // The enumeration reaches the names that matter (so the checks above are not vacuous).
  for (const char* n : {"--hierarchical-context-parallel-sizes", "--account-for-embedding-in-pipeline-split",
                        "--num-layers-per-virtual-pipeline-stage", "--use-megatron-fsdp", "--fp8-recipe", "--tp-comm-overlap"})
    CHECK(printed["megatron"].contains(n));
  for (const char* n : {"parallelism.pipeline_parallel_layers_per_stage", "parallelism.context_parallel_load_balancer",
                        "compile.enable_async_tensor_parallel", "activation_checkpoint"})
    CHECK(printed["torchtitan"].contains(n));
  for (const char* n : {"--ds-sequence-parallel-size", "gradient_accumulation_steps", "stage"}) CHECK(printed["deepspeed"].contains(n));
}

TEST_CASE("plan --emit megatron: tp4xring8 zigzag selective pp4 vp20 dp2 zero2 pp-dp on Llama 3 70B", "[emit]") {
  FrameworkSplit s = split(preset_layer("llama3-70b", 131072), 4, 8, "p2p", 1, Layout::zigzag, Recompute::selective);
  s.step = step(80, 4, 20, 2, 2, 16);
  const FrameworkFlags f = megatron_flags(s);
  // 80 layers on 4 stages of 20 chunks: --num-layers-per-virtual-pipeline-stage L / (PP VP) = 1.
  CHECK(f.settings == std::vector<std::string>{
                          "--tensor-model-parallel-size 4", "--sequence-parallel", "--context-parallel-size 8",
                          "--cp-comm-type p2p", "--recompute-granularity selective", "--recompute-modules core_attn layernorm",
                          "--num-layers 80", "--pipeline-model-parallel-size 4", "--num-layers-per-virtual-pipeline-stage 1",
                          "--use-tp-pp-dp-mapping", "--use-distributed-optimizer", "--use-megatron-fsdp",
                          "--data-parallel-sharding-strategy optim_grads", "--ckpt-format fsdp_dtensor", "--overlap-grad-reduce",
                          "--micro-batch-size 1", "--global-batch-size 16", "--seq-length 131072", "--bf16"});
  CHECK(any_contains(f.notes, "layout zigzag: Megatron-LM's own, no flag"));
  // The same split in dp-pp order is Megatron-LM's default: no mapping flag; VP 5 gives 4 layers a chunk.
  s.step = step(80, 4, 5, 2, 2, 16, OuterOrder::dp_pp);
  const FrameworkFlags g = megatron_flags(s);
  CHECK_FALSE(has(g.settings, "--use-tp-pp-dp-mapping"));
  CHECK(has(g.settings, "--num-layers-per-virtual-pipeline-stage 4"));
}

TEST_CASE("plan --emit: Llama 3's short first and last stages (126 layers, PP 16, VP 8) in Megatron-LM and torchtitan", "[emit]") {
  FrameworkSplit s = split(preset_layer("llama3-405b", 131072), 8, 16, "all_gather", 1, Layout::zigzag, Recompute::selective);
  s.step = step(126, 16, 8, 8, 1, 128);
  const FrameworkFlags m = megatron_flags(s);
  CHECK(has(m.settings, "--cp-comm-type all_gather"));
  CHECK(has(m.settings, "--account-for-embedding-in-pipeline-split"));
  CHECK(has(m.settings, "--account-for-loss-in-pipeline-split"));
  CHECK(has(m.settings, "--num-layers-per-virtual-pipeline-stage 1"));  // (126 + 2) / (16 x 8)
  CHECK(has(m.settings, "--use-distributed-optimizer"));
  CHECK_FALSE(has(m.settings, "--use-megatron-fsdp"));
  const FrameworkFlags t = torchtitan_flags(s);
  for (const char* k : {"config.parallelism.pipeline_parallel_degree = 16", "config.parallelism.pipeline_parallel_schedule = \"Interleaved1F1B\"",
                        "config.parallelism.pipeline_parallel_layers_per_stage = 1",
                        "config.parallelism.pipeline_parallel_first_stage_less_layers = 1",
                        "config.parallelism.pipeline_parallel_last_stage_less_layers = 1", "config.parallelism.num_pp_microbatches = 16",
                        "config.parallelism.context_parallel_degree = 16", "config.training.num_tokens_per_train_step = 16777216"})
    CHECK(has(t.settings, k));
  CHECK(t.cannot.size() == 2);  // ZeRO 1 (FSDP's sharding) and the pp-dp order; all-gather CP is its own
  CHECK(any_contains(t.cannot, "torchtitan cannot express the pp-dp order"));
  // 31 layers on 4 stages: the last one short, the loss counted as its layer.
  s.step = step(31, 4, 1, 1, 1, 8);
  const FrameworkFlags one = megatron_flags(s);
  CHECK(has(one.settings, "--account-for-loss-in-pipeline-split"));
  CHECK_FALSE(has(one.settings, "--account-for-embedding-in-pipeline-split"));
  CHECK(pipeline_chunks(31, 4, 1).short_layers == 1);
  CHECK(pipeline_chunks(30, 2, 2).chunk_layers == 8);  // 15 + 15 read as 16 - 1 each
}

TEST_CASE("plan --emit: a split each framework cannot express, said so with the nearest it runs", "[emit]") {
  const LayerConfig cfg = preset_layer("llama3-8b", 131072);
  SECTION("Megatron-LM: the cp-tp order, the pass-Q ring, the striped layout") {
    FrameworkSplit s = split(cfg, 2, 4, "p2p-q", 1, Layout::striped);
    s.par.order = RankOrder::cp_tp;
    const FrameworkFlags f = megatron_flags(s);
    CHECK(has(f.settings, "--cp-comm-type p2p"));
    CHECK(any_contains(f.cannot, "Megatron-LM cannot express ringside's p2p-q scheme (TransformerEngine's cp_comm_type has no such "
                                 "kind); nearest: the K/V ring, --cp-comm-type p2p"));
    CHECK(any_contains(f.cannot, "Megatron-LM cannot express the cp-tp rank order"));
    CHECK(any_contains(f.cannot, "Megatron-LM cannot express the striped layout"));
    CHECK(any_contains(f.cannot, "nearest: zigzag"));
  }
  SECTION("Megatron-LM expresses Ulysses x ring: a2a+p2p with its hierarchical sizes, the a2a group first") {
    const FrameworkFlags f = megatron_flags(split(cfg, 1, 16, "a2a+p2p", 8));
    CHECK(has(f.settings, "--cp-comm-type a2a+p2p"));
    CHECK(has(f.settings, "--hierarchical-context-parallel-sizes 8 2"));
    CHECK(f.cannot.empty());
  }
  SECTION("torchtitan: Ulysses, and the striped layout") {
    const FrameworkFlags f = torchtitan_flags(split(cfg, 1, 8, "a2a"));
    CHECK(has(f.settings, "config.parallelism.context_parallel_degree = 8"));
    CHECK(any_contains(f.cannot, "torchtitan cannot express the a2a scheme's all-to-all (Ulysses)"));
    CHECK(any_contains(f.cannot, "nearest: context parallelism of 8 that all-gathers K/V"));
    const FrameworkFlags g = torchtitan_flags(split(cfg, 1, 8, "p2p", 1, Layout::striped));
    CHECK(has(g.settings, "config.parallelism.context_parallel_load_balancer = \"headtail\""));
    CHECK(any_contains(g.cannot, "torchtitan cannot express the striped layout"));
    const FrameworkFlags h = torchtitan_flags(split(cfg, 1, 8, "p2p", 1, Layout::contiguous));
    CHECK(has(h.settings, "config.parallelism.context_parallel_load_balancer = None"));
  }
  SECTION("DeepSpeed: TP x ring becomes Ulysses over the group; VP and ZeRO 2 under its pipeline") {
    FrameworkSplit s = split(cfg, 4, 8, "p2p", 1, Layout::zigzag, Recompute::full);
    s.step = step(32, 4, 2, 1, 2, 16);
    const FrameworkFlags f = deepspeed_flags(s);
    CHECK(any_contains(f.cannot, "DeepSpeed cannot express tp4xring8 (it has Ulysses alone, DistributedAttention's all-to-all: no K/V ring; "
                                 "Megatron-DeepSpeed refuses --sequence-parallel"));
    CHECK(any_contains(f.cannot, "nearest: Ulysses over the group's 32 GPUs"));
    CHECK(any_contains(f.cannot, "DeepSpeed cannot express VP = 2 model chunks a rank"));
    CHECK(any_contains(f.cannot, "nearest: ZeRO 1 with the same pipeline"));
    CHECK(has(f.settings, "--ds-sequence-parallel-size 32"));
    CHECK(has(f.settings, "--tensor-model-parallel-size 1"));
    CHECK(has(f.settings, "ds_config.json: {\"train_batch_size\": 16, \"train_micro_batch_size_per_gpu\": 1, "
                          "\"gradient_accumulation_steps\": 16, \"zero_optimization\": {\"stage\": 1}, \"bf16\": {\"enabled\": true}}"));
    CHECK(has(f.settings, "--recompute-granularity full"));
  }
  SECTION("DeepSpeed: Ulysses alone is its own; where the heads do not split, the most that do") {
    const FrameworkFlags f = deepspeed_flags(split(cfg, 1, 8, "a2a"));
    CHECK(f.cannot.empty());
    CHECK(has(f.settings, "--ds-sequence-parallel-size 8"));
    LayerConfig odd = cfg;
    odd.H = 12, odd.Hkv = 12, odd.h = 12 * 128;
    FrameworkSplit s = split(odd, 1, 8, "p2p");
    s.step = step(32, 1, 1, 1, 1, 8);
    const FrameworkFlags g = deepspeed_flags(s);
    CHECK(has(g.settings, "--ds-sequence-parallel-size 4"));
    CHECK(any_contains(g.cannot, "nearest: Ulysses over 4 GPUs (the most that split the heads), the group's other 2 as more data parallelism"));
    CHECK(any_contains(g.settings, "\"gradient_accumulation_steps\": 4"));  // 8 sequences over 2 replicas
  }
}

TEST_CASE("plan --emit: the layer plan says what it leaves at the framework's defaults, and an unknown framework is refused", "[emit]") {
  const LayerConfig cfg = preset_layer("llama3-8b", 131072);
  for (const Framework& f : frameworks()) CHECK(any_contains(f.emit(split(cfg, 4, 4)).notes, "plan --gbs plans them"));
  CHECK(framework("torchtitan").emit == &torchtitan_flags);
  CHECK_THROWS_WITH(framework("nemo"), Catch::Contains("--emit nemo: not a framework (megatron, torchtitan, deepspeed)"));
}

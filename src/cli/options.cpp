// What the command line may say: the layer flags every subcommand shares, values checked as
// written (no empty value read as 0, no seed that saturates), flags that contradict each other
// refused, and the options a rank was given, for comparing ranks under mpirun.
#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <limits>

#include "cli/commands.h"

#include "layer/presets.h"
#include "model/efficiency.h"
#include "parallel/groups.h"
#include "parallel/run_plan.h"
#include "core/strict_flags.h"
#include "core/error.h"
#include "core/output.h"

namespace ringside::cli {


std::function<std::string(const std::string&)> integer_in(int64_t lo, int64_t hi) {
  return [lo, hi](const std::string& v) {
    if (!is_decimal_integer(v, true)) return "must be an integer, got '" + detail::shown_input(v) + "'";
    errno = 0;
    const long long x = std::strtoll(v.c_str(), nullptr, 10);
    if (errno == ERANGE || x < lo || x > hi) return detail::concat("must be in [", lo, ", ", hi, "], got ", detail::shown_input(v));
    return std::string();
  };
}

std::function<std::string(const std::string&)> number_in(double lo, double hi) {
  return [lo, hi](const std::string& v) {
    if (!is_decimal_number(v)) return "must be a finite number, got '" + detail::shown_input(v) + "'";
    const double x = std::strtod(v.c_str(), nullptr);
    if (x < lo || x > hi) return detail::concat("must be in [", lo, ", ", hi, "], got ", detail::shown_input(v));
    return std::string();
  };
}

namespace {

// A setting's on and off flags (in the Layer group). Separate flags: CLI11's "--x,!--no-x" form
// prints a confusing "{false}" in --help. Given together they contradict each other: an error,
// not a silent winner.
void on_off(CLI::App& app, const char* on, const char* off, bool& value, const char* on_help, const char* off_help) {
  CLI::Option* yes = app.add_flag_callback(on, [&value] { value = true; }, on_help);
  CLI::Option* no = app.add_flag_callback(off, [&value] { value = false; }, off_help);
  yes->excludes(no)->group("Layer");
  no->group("Layer");
}

}  // namespace

void add_config_flags(CLI::App& app, LayerConfig& cfg, RunChoices& choices, bool with_recompute) {
  // The sizes' own rules (>= 1, divisibility, BLAS's int) are LayerConfig::validate's, which
  // names them; here only what the value is: one integer that fits.
  const auto any_int64 = integer_in(std::numeric_limits<int64_t>::min(), std::numeric_limits<int64_t>::max());
  auto size = [&](const char* flag, int64_t& value, const char* help) {
    app.add_option(flag, value, help)->capture_default_str()->check(any_int64)->group("Layer");
  };
  // A published model's shape first: the size flags below, given too, override its values
  // (CLI11 runs the options' callbacks in the order they are defined).
  app.add_option_function<std::string>(
         "--preset", [&cfg](const std::string& v) { apply_preset(find_preset(v), cfg); },
         "a published model's layer (h, H, Hkv, f, its norm, MLP, biases, RoPE base and dropout: 0 for the Llama, "
             "Qwen and Mistral models, which train without it): " + preset_names() + "; one layer of the model (docs/cli.md)")
      ->check([](const std::string& v) {
        try {
          find_preset(v);
        } catch (const ConfigError& e) {
          return std::string(e.what());
        }
        return std::string();
      })
      ->option_text("MODEL")
      ->group("Layer");
  size("--batch", cfg.b, "batch size b");
  size("--seq", cfg.s, "sequence length s (tokens)");
  size("--hidden", cfg.h, "hidden size h");
  size("--heads", cfg.H, "query heads H (head dim d = h / H)");
  size("--kv-heads", cfg.Hkv, "key/value heads Hkv (GQA; H % Hkv == 0)");
  size("--ffn", cfg.f, "MLP width f");
  app.add_option_function<std::string>(
         "--norm", [&cfg](const std::string& v) { cfg.norm = parse_norm(v); },
         "the layer's norm: layernorm (GPT's, the default) or rmsnorm (Llama's: no mean, no beta)")
      ->check(CLI::IsMember({"layernorm", "rmsnorm"}))
      ->group("Layer");
  app.add_option_function<std::string>(
         "--mlp", [&cfg](const std::string& v) { cfg.mlp = parse_mlp(v); },
         "the MLP: gelu (GeLU(x W1) W2, GPT's, the default) or swiglu ((SiLU(x Wg) * x Wu) Wd, Llama's: three "
         "h x f matrices)")
      ->check(CLI::IsMember({"gelu", "swiglu"}))
      ->group("Layer");
  on_off(app, "--bias", "--no-bias", cfg.bias, "biases on the linear layers (qkv, o, fc1, fc2; the default)",
         "no biases on the linear layers (Llama; Megatron's --disable-bias-linear)");
  on_off(app, "--causal", "--no-causal", cfg.causal, "causal mask (the default)", "full attention, no mask");
  on_off(app, "--rope", "--no-rope", cfg.rope, "rotary position embedding on q and k (the default)",
         "no rotary position embedding");
  app.add_option("--dropout", cfg.dropout, "dropout probability p in [0, 1)")
      ->capture_default_str()
      ->check(number_in(-std::numeric_limits<double>::max(), std::numeric_limits<double>::max()))
      ->group("Layer");
  app.add_option_function<std::string>(
         "--layout", [&choices](const std::string& v) { choices.layout = parse_layout(v); },
         "how context parallelism (ring, all_gather, USP) maps tokens to ranks: contiguous, zigzag, striped, "
         "zigzag-per-doc (each document in 2R chunks, TransformerEngine's THD), greedy (each document's chunks "
         "by work), auto (zigzag for one causal sequence, striped for causal packed documents, contiguous otherwise)")
      ->check(CLI::IsMember({"auto", "contiguous", "zigzag", "striped", "zigzag-per-doc", "greedy"}))
      ->group("Layer");
  if (with_recompute)
    app.add_option_function<std::string>(
         "--recompute", [&choices](const std::string& v) { choices.recompute = parse_recompute(v); },
         "activation recomputation, as Megatron's: none (the default), selective (both norms and the GeLU or "
         "SwiGLU product again in the backward), full (keep only the layer input; the backward runs the forward again)")
      ->check(CLI::IsMember({"none", "selective", "full"}))
      ->group("Layer");
  app.add_option("--seed", cfg.seed, "seed of weights, inputs and dropout (Philox), 0 to 2^64 - 1")
      ->capture_default_str()
      ->check([](const std::string& v) {
        errno = 0;
        if (!is_decimal_integer(v, false) || (std::strtoull(v.c_str(), nullptr, 10), errno == ERANGE))
          return "must be an integer in [0, 2^64 - 1], got '" + detail::shown_input(v) + "'";
        return std::string();
      })
      ->group("Layer");
  // After --seq and --seed, whose values random:N reads (callbacks run in definition order).
  app.add_option_function<std::string>(
         "--docs", [&cfg](const std::string& v) { cfg.docs = parse_docs(v, cfg.s, cfg.seed); },
         "packed documents: their lengths, summing to --seq (700,2000,299,1097), or random:N (N random lengths "
         "from --seed); each attends only within itself (FlashAttention's varlen cu_seqlens)")
      ->option_text("LENGTHS|random:N")
      ->group("Layer");
  app.add_option("--window", cfg.window, "sliding-window attention: each query sees its W most recent keys of its document (|i - j| < W without causal)")
      ->check([](const std::string& v) {
        const std::string e = integer_in(1, std::numeric_limits<int64_t>::max())(v);
        return e.empty() ? e : "the window W " + e + " (a query sees its W most recent keys, itself included)";
      })
      ->option_text("W")
      ->group("Layer");
  app.add_option_function<std::string>(
         "--rope-positions", [&cfg](const std::string& v) { cfg.rope_positions = parse_rope_positions(v); },
         "RoPE's positions in a packed sequence: document (each document from 0, the default, as packed training "
         "does) or global (the index in the sequence)")
      ->check(CLI::IsMember({"document", "global"}))
      ->group("Layer");
}

void refuse_flag(CLI::App& app, const std::string& flag, const std::string& why) {
  app.get_option(flag)->check(CLI::Validator([why](const std::string&) { return why; }, ""));
}

void check_seed_without_random_docs(const CLI::App& app) {
  const CLI::Option* docs = app.get_option("--docs");
  const bool random_docs = docs->count() > 0 && docs->results().front().rfind("random:", 0) == 0;
  if (app.get_option("--seed")->count() > 0 && !random_docs)
    throw CLI::ValidationError("--seed", "a dry run draws no numbers (no weights, inputs or dropout masks): here --seed "
                                         "draws only --docs random:N's lengths, so leave it out");
}

void refuse_seed_without_random_docs(CLI::App& app) {
  app.parse_complete_callback([&app] { check_seed_without_random_docs(app); });
}

model::ModelOptions ModelingFlags::options() const {
  model::ModelOptions o;
  o.dtype = dtype;
  o.efficiency = efficiency;
  o.attention_kernel = attention_kernel;
  o.merge = merge;
  o.stack = model::load_stack(stack);
  o.fp8_recipe = fp8_recipe;
  o.tp_comm_overlap = tp_comm_overlap;
  if (!grad_reduce.empty()) o.stack.grad_reduce_fp32 = grad_reduce == "fp32";
  o.overlap_grad_reduce = overlap_grad_reduce;
  return o;
}

model::ModelOptions ModelingFlags::checked(const std::vector<model::Hardware>& profiles) const {
  const model::ModelOptions o = options();
  for (const model::Hardware& hw : profiles) model::check_model_options(hw, o);  // fp8 on an A100: refused now
  // Flags that would change nothing are refused, not ignored.
  if (!fp8_recipe.empty() && dtype != "fp8") throw ConfigError("--fp8-recipe " + fp8_recipe + " quantizes FP8 GEMMs: give --dtype fp8 too");
  const bool achieved = std::any_of(profiles.begin(), profiles.end(), [&](const model::Hardware& hw) { return !model::at_roofline(hw, o); });
  if (!achieved && !profiles.empty() && (!attention_kernel.empty() || !merge.empty())) {
    std::string names;
    for (const model::Hardware& hw : profiles) names += (names.empty() ? "" : ", ") + hw.name;
    throw ConfigError(std::string(attention_kernel.empty() ? "--merge" : "--attention-kernel") + " has no effect " +
                      (efficiency == "ideal" ? "under --efficiency ideal (the roofline)"
                       : profiles.size() == 1 ? "on " + names + ", whose profile states no efficiency (the roofline)"
                                              : "on " + names + ", whose profiles state no efficiency (the roofline)"));
  }
  return o;
}

std::pair<std::string, std::string> ModelingFlags::input() const {
  return {"--stack", output::is_regular(stack) ? stack : ""};
}

nlohmann::json software_json(const trace::ModelingInfo& m) {
  const nlohmann::json all = m.to_json();
  nlohmann::json j = nlohmann::json::object();
  for (const char* key : {"stack", "merge", "tp_comm_overlap", "fp8_recipe", "grad_reduce_fp32"}) j[key] = all.at(key);
  return j;
}

void add_modeling_flags(CLI::App& app, ModelingFlags& f, ModelingScope scope) {
  if (scope != ModelingScope::twin)
    app.add_option("--dtype", f.dtype,
                   "the element type modeled: bf16 (bytes halved, bf16 rates), fp32, or fp8 (bf16 with the GEMMs in FP8, their "
                   "inputs quantized first by the recipe, as TransformerEngine runs them)")
        ->capture_default_str()
        ->check(CLI::IsMember({"bf16", "fp32", "fp8"}))
        ->group("Model");
  app.add_option("--efficiency", f.efficiency,
                 "achieved: the rates real GPUs and NCCL reach (the profile's efficiency, with sources); ideal: the roofline of "
                 "datasheet peaks and line rates")
      ->capture_default_str()
      ->check(CLI::IsMember({"achieved", "ideal"}))
      ->group("Model");
  app.add_option("--attention-kernel", f.attention_kernel,
                 "the attention kernel's published rates: fa2, fa3, fa4 or cudnn (default: the stack's first the GPU has rates for; "
                 "Megatron's: cuDNN on Hopper, FA2 on Ampere)")
      ->check(CLI::IsMember(std::vector<std::string>(model::kAttentionFamilies.begin(), model::kAttentionFamilies.end())))
      ->group("Model");
  app.add_option("--merge", f.merge,
                 "how a ring merges each step's output: fused (one kernel, as ringside and TransformerEngine) or unfused "
                 "(ring-flash-attention's five fp32 torch ops a step); default: the stack's")
      ->check(CLI::IsMember({"fused", "unfused"}))
      ->group("Model");
  std::string names;
  for (const std::string& n : model::stack_names()) names += (names.empty() ? "" : ", ") + n;
  app.add_option("--stack", f.stack,
                 "the software the schedule runs on: " + names +
                     ", or a stack JSON file (its attention kernels, ring merge, TP overlap, FP8 recipe and host costs, each with "
                     "its source; docs/model.md)")
      ->capture_default_str()
      ->check(non_empty("--stack needs a stack"))
      ->group("Model");
  CLI::Option* on = app.add_flag_callback("--tp-comm-overlap", [&f] { f.tp_comm_overlap = true; },
                                          "TP's all-gathers and reduce-scatters in chunks under their GEMMs (Megatron's "
                                          "--tp-comm-overlap, torch's async TP; default: the stack's)");
  CLI::Option* off = app.add_flag_callback("--no-tp-comm-overlap", [&f] { f.tp_comm_overlap = false; },
                                           "TP's collectives between their GEMMs, exposed");
  on->excludes(off)->group("Model");
  off->group("Model");
  if (scope == ModelingScope::twin) return;
  app.add_option("--fp8-recipe", f.fp8_recipe,
                 "with --dtype fp8: how the GEMMs' inputs are quantized: delayed, current (tensorwise), block or mxfp8 "
                 "(default: the stack's)")
      ->check(CLI::IsMember({"delayed", "current", "tensorwise", "block", "mxfp8"}))
      ->group("Model");
  app.add_option("--grad-reduce", f.grad_reduce,
                 "with --gbs: the type gradients are reduced in over DP x CP: fp32 (Megatron-LM's default with bf16) or weights "
                 "(bf16; NeMo 2.0's performance recipes) (default: the stack's)")
      ->check(CLI::IsMember({"fp32", "weights"}))
      ->group("Model");
  if (scope != ModelingScope::model) return;
  app.add_flag("--overlap-grad-reduce", f.overlap_grad_reduce,
               "the one layer: all-reduce the weight gradients over CP in buckets as the backward finishes them, under the rest "
               "of the backward (Megatron's --overlap-grad-reduce), not after it (the whole step, --gbs, overlaps already)")
      ->group("Model");
}

void add_parallel_flags(CLI::App& app, ParallelFlags& p, bool step_orders) {
  app.add_option("--tp", p.tp, "tensor-parallel degree T (Megatron TP with SP; left out: the rest of P)")
      ->check(integer_in(1, kMaxRanks))
      ->group("Parallel");
  app.add_option("--cp", p.cp, "context-parallel degree C (T x C = P; left out: the rest of P)")
      ->check(integer_in(1, kMaxRanks))
      ->group("Parallel");
  std::string schemes;  // "p2p (ring), all_gather, a2a (ulysses), ...": each with its configuration name
  for (const CpScheme* s : cp_schemes()) {
    if (s->none()) continue;
    std::string named, dashed = s->name;
    for (const char* g : s->strategy) named += (named.empty() ? "" : " x ") + std::string(g);
    for (char& ch : dashed) ch = ch == '_' ? '-' : ch;
    schemes += (schemes.empty() ? "" : ", ") + std::string(s->name) + (named != dashed ? " (" + named + ")" : "");
  }
  app.add_option("--cp-comm", p.cp_comm, "context parallelism's attention: " + schemes)
      ->check(CLI::IsMember(cp_comm_names()))
      ->group("Parallel");
  app.add_option("--cp-a2a", p.cp_a2a, "a2a+p2p: the all-to-all degree U (U divides C; the ring spans C / U)")
      ->check(integer_in(1, kMaxRanks))
      ->group("Parallel");
  if (!step_orders) {
    app.add_option("--order", p.order, "rank order: tp-cp (TP innermost, Megatron's; the default) or cp-tp")
        ->check(CLI::IsMember({"tp-cp", "cp-tp"}))
        ->group("Parallel");
    return;
  }
  app.add_option("--order", p.order,
                 "rank order, innermost first: tp-cp (TP innermost, Megatron's; the default) or cp-tp; with --gbs also where "
                 "PP and DP go around the group, as plan --gbs prints it: tp-cp-pp-dp (Llama 3's, the default), tp-cp-dp-pp "
                 "(Megatron's), cp-tp-pp-dp or cp-tp-dp-pp")
      ->check(CLI::IsMember({"tp-cp", "cp-tp", "tp-cp-pp-dp", "tp-cp-dp-pp", "cp-tp-pp-dp", "cp-tp-dp-pp"}))
      ->group("Parallel");
}

bool ParallelFlags::given() const { return tp || cp || !cp_comm.empty() || cp_a2a || !order.empty(); }

std::string ParallelFlags::group_order() const { return order.substr(0, 5); }

model::OuterOrder ParallelFlags::outer_order() const {
  return order.size() > 5 ? model::parse_order_name(order).second : model::OuterOrder::pp_dp;
}

ParallelConfig strategy_from(const std::string& strategy, const ParallelFlags& p, int P) {
  if (!strategy.empty() && p.given())
    throw ConfigError("give --strategy NAME or the degrees (--tp, --cp, --cp-comm, --cp-a2a, --order), not both");
  if (!p.given()) {
    if (strategy.empty()) throw ConfigError("give --strategy NAME or the degrees (--tp T --cp C --cp-comm ...)");
    return parse_parallel_config(strategy);
  }
  if (!p.tp && !p.cp && p.cp_comm.empty())
    throw ConfigError("--cp-a2a and --order need the degrees: --tp T and/or --cp C (with --cp-comm)");
  // A degree not given takes the rest of P, and so does C when only --cp-comm says there is
  // context parallelism (then T is 1 unless given). With no --cp-comm, a C above 1 runs the ring
  // (p2p, TransformerEngine's default cp_comm_type); --tp P alone is TP alone.
  if (p.tp && !p.cp && P % p.tp != 0)
    throw ConfigError(detail::concat("--tp ", p.tp, " does not divide P = ", P, " (T x C = P; C takes the rest)"));
  ParallelConfig par;
  par.tp = p.tp ? p.tp : p.cp ? 0 : 1;
  par.cp = p.cp ? p.cp : p.tp && p.cp_comm.empty() ? P / p.tp : p.cp_comm.empty() ? 1 : 0;
  par.cp_comm = !p.cp_comm.empty() ? parse_cp_comm(p.cp_comm) : par.cp > 1 || par.cp == 0 ? &default_cp_scheme() : &no_cp_scheme();
  if (par.cp_comm->none() && par.cp != 1) throw ConfigError(detail::concat("--cp ", par.cp, " needs a --cp-comm"));
  // The all-to-all degree U is a degree of its own only where a scheme nests an all-to-all and a ring.
  std::string nested;
  for (const CpScheme* s : cp_schemes())
    if (s->nested()) nested += (nested.empty() ? "" : " or ") + std::string(s->name);
  if (par.cp_comm->nested() && !p.cp_a2a)
    throw ConfigError(detail::concat("--cp-comm ", par.cp_comm->name,
                                     " needs --cp-a2a U, the all-to-all degree (U divides C; the ring spans C / U)"));
  if (!par.cp_comm->nested() && p.cp_a2a)
    throw ConfigError(detail::concat("--cp-a2a ", p.cp_a2a, " is the all-to-all degree of --cp-comm ", nested, ", but --cp-comm is ",
                                     p.cp_comm.empty() ? "not given" : p.cp_comm));
  if (p.cp_a2a && p.cp && p.cp % p.cp_a2a != 0)
    throw ConfigError(detail::concat("--cp-a2a ", p.cp_a2a, " must divide --cp ", p.cp,
                                     " (a2a+p2p runs the ring over C / U groups of U ranks)"));
  if (p.cp_a2a) par.cp_a2a = p.cp_a2a;
  if (!p.order.empty()) par.order = parse_rank_order(p.group_order());
  return par;
}

GivenOptions given_options(const CLI::App& app) {
  GivenOptions given;
  for (const CLI::Option* opt : app.get_options()) {
    if (opt->count() == 0) continue;
    std::string value;
    for (const std::string& r : opt->results()) value += (value.empty() ? "" : " ") + r;
    given.emplace_back(opt->get_name(), value);
  }
  return given;
}

}  // namespace ringside::cli

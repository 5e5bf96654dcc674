// Subcommands of the `ringside` command, each registered on the CLI11 app.
#pragma once
#include <CLI/CLI.hpp>

#include <functional>
#include <optional>
#include <tuple>
#include <string>
#include <utility>

#include "comm/communicator.h"
#include "core/output.h"
#include "core/memory_limits.h"
#include "layer/config.h"
#include "layer/packing.h"
#include "check/check.h"
#include "parallel/run_plan.h"
#include "run/runner.h"
#include "layer/weights.h"
#include "model/bands.h"
#include "model/bubble.h"
#include "model/bytes_sent.h"
#include "model/model.h"
#include "model/report.h"
#include "model/step_plan.h"
#include "trace/metrics.h"

namespace ringside::model {
struct Hardware;
}  // namespace ringside::model

namespace ringside::cli {

/// A CLI11 validator refusing an empty value with `message` ("--json needs a file name").
inline std::function<std::string(const std::string&)> non_empty(std::string message) {
  return [message](const std::string& v) { return v.empty() ? message : std::string(); };
}

/// A CLI11 check: one integer in [lo, hi], digits only (an optional leading minus): no empty
/// value, space, 1e3 or overflow.
std::function<std::string(const std::string&)> integer_in(int64_t lo, int64_t hi);
/// A CLI11 check: one finite number in [lo, hi], as strtod reads the whole value (no empty value,
/// no leading space).
std::function<std::string(const std::string&)> number_in(double lo, double hi);

/// The two choices of how a configuration runs that the layer flags carry, --layout and
/// --recompute: ParallelConfig's layout and recompute (parallel/config.h).
struct RunChoices {
  Layout layout = Layout::automatic;
  Recompute recompute = Recompute::none;
  /// `par` with these choices.
  ParallelConfig applied_to(ParallelConfig par) const {
    par.layout = layout, par.recompute = recompute;
    return par;
  }
};

/// The layer flags every subcommand shares: --batch --seq --hidden --heads --kv-heads --ffn
/// --causal/--no-causal --rope/--no-rope --dropout --seed --docs --window --rope-positions,
/// bound to cfg (defaults from LayerConfig), and --layout and (with_recompute) --recompute,
/// bound to `choices`. Each value must be one number as written (a seed 0 to 2^64 - 1); a flag
/// and its opposite together are an error.
void add_config_flags(CLI::App& app, LayerConfig& cfg, RunChoices& choices, bool with_recompute = true);

/// Refuses `flag`, one of the shared flags `app` has, with "FLAG: why" (exit 2): for a command
/// where it would change nothing (the reference's --layout), so that no flag is said but not used.
void refuse_flag(CLI::App& app, const std::string& flag, const std::string& why);
/// Refuses --seed on a command that dry-runs (model, plan, bench model) unless --docs draws
/// random lengths from it: a dry run draws no weights, inputs or dropout masks. Sets `app`'s
/// parse_complete_callback (CLI11 keeps one: a command with a callback of its own calls
/// check_seed_without_random_docs from it instead). Throws CLI::ValidationError.
void refuse_seed_without_random_docs(CLI::App& app);
void check_seed_without_random_docs(const CLI::App& app);

/// What the model models, as the flags say it: one set for every command that models (model,
/// plan, the modeled twin of compare and run; validate's cases are model's arguments, parsed by
/// model's parser). options() is the one place a model::ModelOptions is built from flags: a
/// command builds it once (a validate case once for each time it is modeled, the fitted
/// parameters as set then) and every dry run, replay and plan of it receives that value; a plan's
/// candidates each a copy placed on their own nodes (ModelOptions::node_of), which is not an option.
struct ModelingFlags {
  std::string dtype = "bf16";           ///< --dtype: bf16, fp32 or fp8 (the twin: bf16, not a flag)
  std::string efficiency = "achieved";  ///< --efficiency: achieved or ideal
  std::string attention_kernel;         ///< --attention-kernel: fa2, fa3, fa4, cudnn; "": the stack's first the profile has
  std::string merge;                    ///< --merge: fused or unfused; "": the stack's
  std::string stack = "megatron";       ///< --stack: a built-in stack or a stack JSON file
  std::string fp8_recipe;               ///< --fp8-recipe; "": the stack's (model/fp8.h)
  std::optional<bool> tp_comm_overlap;  ///< --tp-comm-overlap / --no-tp-comm-overlap; unset: the stack's
  std::string grad_reduce;              ///< --grad-reduce: "fp32" or "weights"; "": the stack's
  /// model's --overlap-grad-reduce: the one layer's gradient all-reduce in buckets under its
  /// backward (model::ModelOptions::overlap_grad_reduce; its dry run posts the buckets too).
  bool overlap_grad_reduce = false;
  /// The model options these flags say, the stack loaded with the fitted parameters as set now
  /// (ConfigError for an unknown stack or a bad stack file).
  model::ModelOptions options() const;
  /// options(), checked before any work against every profile it will model on: each option
  /// known and possible there (model::check_model_options: fp8 needs an FP8 peak, a kernel the
  /// profile has rates for), and no flag that changes nothing: --fp8-recipe without --dtype fp8,
  /// --attention-kernel or --merge where every profile is modeled at the roofline (--efficiency
  /// ideal, or profiles without an efficiency). Throws ConfigError naming the flag.
  model::ModelOptions checked(const std::vector<model::Hardware>& profiles) const;
  /// The stack file, an input no output may replace: {"--stack", path}, the path "" for a
  /// built-in stack.
  std::pair<std::string, std::string> input() const;
};
/// Which of the modeling flags a command takes: model all of them; plan all but the one layer's
/// --overlap-grad-reduce (a plan's whole step overlaps already: --no-overlap-grad-reduce); the
/// modeled twin of compare and run, one recorded layer in bf16, all but --dtype, --fp8-recipe,
/// --grad-reduce (a whole step's) and --overlap-grad-reduce.
enum class ModelingScope { model, plan, twin };
/// Adds the modeling flags `scope` takes (group "Model"), each setting its field of `f`.
void add_modeling_flags(CLI::App& app, ModelingFlags& f, ModelingScope scope);
/// The software part of the record `m` (model::modeling_info), as the JSON of model and plan
/// have written it since before "modeling": {stack, merge, tp_comm_overlap, fp8_recipe (null
/// unless fp8), grad_reduce_fp32}.
nlohmann::json software_json(const trace::ModelingInfo& m);

/// A parallel configuration given as degrees (--tp, --cp, --cp-comm, --cp-a2a, --order)
/// instead of a --strategy name.
struct ParallelFlags {
  int tp = 0, cp = 0, cp_a2a = 0;  ///< 0: not given
  /// --order: the group's tp-cp or cp-tp, or (a whole step's, `model --gbs`) with its outer
  /// order, as the step plan spells it: tp-cp-pp-dp, cp-tp-dp-pp (model::parse_order_name).
  std::string cp_comm, order;
  bool given() const;  ///< any of them
  /// The group's order of --order ("tp-cp" of "tp-cp-dp-pp"); "" when not given.
  std::string group_order() const;
  /// The outer order of a whole step's --order, pp-dp when --order names none.
  model::OuterOrder outer_order() const;
};
/// Adds --tp, --cp, --cp-comm, --cp-a2a and --order (group "Parallel"); `step_orders`: --order
/// also takes a whole step's four orders (model, with --gbs).
void add_parallel_flags(CLI::App& app, ParallelFlags& p, bool step_orders = false);
/// The configuration named `strategy`, or the one the flags give for P ranks (parallel/config.h;
/// a degree left out takes the rest of P, and with no --cp-comm a C above 1 is the ring). Throws
/// ConfigError when both or neither are given, or the flags contradict (a2a+p2p without
/// --cp-a2a, --cp-a2a without a2a+p2p or not dividing --cp, --tp not dividing P).
ParallelConfig strategy_from(const std::string& strategy, const ParallelFlags& p, int P);

/// The options given on a command line, by name, with their values as given ("--seq", "4096").
using GivenOptions = std::vector<std::pair<std::string, std::string>>;
/// The options given to `app` (a parsed subcommand).
GivenOptions given_options(const CLI::App& app);

/// Under mpirun, the first communication of a job: every rank shows rank 0 it is there (a
/// process that joined MPI but never gets here is named by rank 0 alone, CommError after
/// world.timeout_s), then compares its subcommand and its options with rank 0's, so that ranks
/// started with different options (an MPMD launch) fail at once with one line naming the first
/// that differs and both values, instead of waiting out --timeout. Throws ConfigError on every
/// rank.
void check_ranks_agree(Communicator& world, const std::string& command, const GivenOptions& given);
/// Runs `checks` and, under mpirun (world not null), agrees on the outcome before the job's
/// other communication: if any rank throws a ConfigError, every rank throws one, and the lowest
/// such rank says it ("rank 2: ..."; ConfigError::reporting_rank). Alone, it runs the checks.
void checked_on_every_rank(Communicator* world, const std::function<void()>& checks);

/// Bytes the reference run holds at its peak, roughly (weights and grads, saved activations,
/// the backward's workspace, inputs and outputs), of a valid layer (resolve's limits keep every
/// count within int64).
double reference_peak_bytes(const LayerConfig& cfg, DType dt);
/// require_memory for a strategy run on P ranks, `local_ranks` of them in this process (and a
/// comm thread each), with the references beside it or not.
void check_memory(const LayerConfig& c, int P, int local_ranks, bool with_references);

/// Creates DIR and checks, before any compute, every file a dump of cfg will write there as
/// any output is checked (core/output.h); throws ConfigError otherwise (also when DIR names
/// something that is not a directory).
void prepare_dump_dir(const std::string& dir, const LayerConfig& cfg);
/// Writes a run's tensors as fp32 .npy in C order with DIR/manifest.json (config, producer,
/// each tensor's file and shape, and the attention mask: cu_seqlens, window, RoPE positions and
/// the padding the run's shards needed, from `packing`, so that another program can rebuild the
/// mask): x, dout, the weights and the dropout masks (drawn from cfg's seed), and out, grad.x
/// and grad.<param>, all over the s real tokens. Whole or not at all: written into a fresh
/// directory inside DIR, then moved in under a lock on DIR, the manifest last. Throws
/// ringside::Error on any write failure (DIR then as it was). A parameter's files that a dump of
/// another layer left in DIR (ln1.beta.npy beside an RMSNorm dump, say) are removed with the
/// last rename, so DIR holds one dump. Returns the number of .npy files written.
/// `config` is the manifest's "config" (a run's RunPlan::config_json, or the layer's).
size_t write_dump(const std::string& dir, const LayerConfig& cfg, const nlohmann::json& config, const Packing& packing,
                const Tensor& out, const Tensor& dx, const LayerWeights& grads, const std::string& producer);

/// Options of `ringside compare` and `ringside run`.
struct CompareOptions {
  LayerConfig cfg;
  RunChoices choices;  ///< --layout, --recompute
  std::string strategies;  ///< comma-separated; empty: all
  std::string strategy;    ///< for run
  ParallelFlags parallel;  ///< the configuration as degrees (run: instead of --strategy; compare: of --strategies)
  int ranks = 4;
  bool ranks_given = false;
  std::string backend;  ///< "", "local", "mpi" or "nccl"
  std::string device = "cpu";  ///< "cpu" or "cuda"
  std::string json;
  std::string trace;  ///< write the timeline here (Chrome trace JSON)
  std::optional<std::string> dump;
  double timeout_s = 60;
  double link_gbps = 0, link_latency_us = 0;  ///< local backend: an artificial link (0: memcpy speed)
  std::string hw = model::kDefaultTwinHardware;  ///< the modeled twin's profile
  ModelingFlags modeling;                         ///< the modeled twin's (ModelingScope::twin)
  GivenOptions given;  ///< the command line, for check_ranks_agree
};

/// `ringside compare` and `ringside run`: add both subcommands; returns them.
std::pair<CLI::App*, CLI::App*> add_compare_and_run(CLI::App& app, CompareOptions& o);
int compare_command(CompareOptions& o);
int run_command(CompareOptions& o);

struct BenchCudaOptions {
  int64_t s = 4096, H = 16, d = 128;  ///< the attention kernels' shape (causal, b = 1)
  int64_t gemm_n = 4096;              ///< the sgemm reference, n x n x n
  LayerConfig ring = [] {              ///< the ring's layer: 4 virtual ranks of 4096 tokens
    LayerConfig c;
    c.b = 1, c.s = 16384, c.h = 2048, c.H = 16, c.Hkv = 16, c.f = 8192;
    return c;
  }();
  int ranks = 4;
  int repetitions = 3;
};

/// `ringside bench cuda` under `bench`.
void add_bench_cuda(CLI::App& bench, BenchCudaOptions& o);
/// `ringside bench cuda`: cuBLAS sgemm TFLOP/s, the CUDA attention kernels' TFLOP/s and their
/// ratio to it, and the ring on virtual ranks: overlap % and exposed comm from its CUDA-event
/// timeline. Throws ConfigError without a GPU or a CUDA build.
int bench_cuda(const BenchCudaOptions& o);

struct BenchKernelsOptions {
  int64_t s = 4096, H = 8, d = 64;
  bool causal = true;
  double min_time = 0.3;  ///< seconds per benchmark in each round (Google Benchmark's min_time)
  int repetitions = 3;    ///< rounds of every benchmark, interleaved; the best of each is reported
  std::string isa;        ///< "" (the active path), "avx512", "avx2", "generic" or "all"
  bool all_shapes = true;  ///< also d 128 and the other mask (issue 20)
  double forward_target = 0.80, backward_target = 0.75;  ///< of same-run sgemm (issue 20)
};

struct BenchCommOptions {
  std::string backend;  ///< "", "local", "mpi" or "nccl"
  std::string device = "cpu";  ///< "cpu" or "cuda"
  int ranks = 4;
  bool ranks_given = false;
  int64_t min_bytes = 1024, max_bytes = 64 << 20;
  double timeout_s = 60;  ///< under mpirun: MPI_Init's and each wait's bound
  GivenOptions given;  ///< the command line, for check_ranks_agree
};

struct BenchTraceOptions {
  LayerConfig cfg;
  RunChoices choices;
  std::string strategy = "ring";
  int ranks = 4;
  int repetitions = 3;
};

struct BenchModelOptions {
  /// The layer at 1M tokens: 64 heads (d = 64), 8 kv heads, f 16384. TP+SP alone cannot
  /// split its 8 kv heads 64 ways (it says so); the rest, hybrids included, can.
  LayerConfig cfg = [] {
    LayerConfig c;
    c.s = 1 << 20, c.h = 4096, c.H = 64, c.Hkv = 8, c.f = 16384;
    return c;
  }();
  RunChoices choices;
  int ranks = 64;
  std::string hw = "h100-nvlink";
  double target_s = 30;  ///< issue 8: a dry run plus model under 30 s on the 2-core machine
};

/// Adds `ringside bench` and its subcommands `kernels`, `comm`, `trace` and `model`; returns them.
std::tuple<CLI::App*, CLI::App*, CLI::App*, CLI::App*> add_bench(CLI::App& app, BenchKernelsOptions& o, BenchCommOptions& c,
                                                                 BenchTraceOptions& t, BenchModelOptions& m);

/// `ringside bench model`: the seconds of a dry run plus model of each strategy (that can split
/// the layer P ways), against the 30 s target. Returns 0.
int bench_model(const BenchModelOptions& o);

/// `ringside bench trace`: the cost of one tracing hook when off (Google Benchmark) times the
/// hooks a run passes, as a fraction of the untraced run (target < 2%); and traced against
/// untraced wall time, best of N each. Returns 0.
int bench_trace(const BenchTraceOptions& o);

/// `ringside bench comm`: all_gather, reduce_scatter, all_reduce, all_to_all and ring
/// send/recv from min_bytes to max_bytes (x4 per step), time on the slowest rank, algbw and
/// busbw as nccl-tests defines them, beside memcpy bandwidth measured in the same run.
int bench_comm(const BenchCommOptions& o);

/// `ringside bench kernels`: attention (version 2) forward and backward GFLOP/s at (s, H, d),
/// and at d 128 and the other mask, on each chosen kernel path, against OpenBLAS sgemm measured
/// in the same run on one thread, with each ratio's verdict against its target (forward 0.80,
/// backward 0.75), and the OpenBLAS kernel set in use. Throws ringside::Error for a path this
/// CPU lacks. Returns 0.
int bench_kernels(const BenchKernelsOptions& o);

struct BenchLayerOptions {
  LayerConfig cfg;
  RunChoices choices;  ///< unused: the reference layer has no layout (--layout is refused)
  int repetitions = 5;  ///< runs of each, interleaved; the best counts
  double forward_target = 0.75, backward_target = 0.70;  ///< of same-run sgemm (issue 20)
  std::string peer;    ///< --peer: "pytorch" runs the same layers in PyTorch eager (cli/peer_pytorch.h); "" none
  std::string python;  ///< --python: the peer's Python ("": $RINGSIDE_PYTHON, else python3)
};

/// A benchmark's input: n values in [-1, 1) from Philox (seed 42, `site`), the same every run.
std::vector<float> random_floats(int64_t n, uint32_t site);

/// The label of a benchmark's reference sgemm: "sgemm 2048^3, SkylakeX (best)" (the kernel set
/// of this CPU's widest vector units), or "sgemm 2048^3, Prescott (fallback)" where OpenBLAS runs
/// narrower ones (sgemm_fallback_note says which set is the CPU's best and how to get it).
std::string sgemm_reference_label();
/// The verdict of a ratio to that sgemm against its target: "ok" or "BELOW TARGET", or, where
/// the sgemm ran on a fallback, "vs fallback": a ratio against a slow sgemm judges nothing.
std::string sgemm_verdict(double ratio, double target);
/// The line printed under a table whose sgemm ran on a fallback ("" otherwise).
std::string sgemm_fallback_note();

/// Adds `ringside bench layer` under `bench`.
CLI::App* add_bench_layer(CLI::App& bench, BenchLayerOptions& o);
/// `ringside bench layer`: the reference layer (fp32, one thread) forward and backward,
/// seconds and GFLOP/s (layer_forward_flops / layer_backward_flops), as ratios to OpenBLAS
/// sgemm 2048^3 measured in the same run, against the targets (0.75 / 0.70). With --peer pytorch,
/// the same layers in PyTorch eager in the same rounds (cli/peer_pytorch.h), or a line saying why
/// it is skipped. Throws ConfigError for an invalid layer, ringside::Error for a peer that built
/// another layer, hung or died. Returns 0.
int bench_layer(const BenchLayerOptions& o);

struct TraceStatsOptions {
  std::vector<std::string> files;  ///< one trace, a folder of Kineto traces, or one Kineto file per rank
  std::string json;
  std::string align = "auto";      ///< Kineto clocks: auto, collectives, none (trace::ClockAlign)
};

/// The --align option of commands that read PyTorch (Kineto) traces (its value: trace::clock_align_named).
void add_align_option(CLI::App& c, std::string& align);
/// `ringside trace-stats`: adds the subcommand; returns it.
CLI::App* add_trace_stats(CLI::App& app, TraceStatsOptions& o);
/// Reads the trace (ringside::Error on a bad file), prints per strategy the per-rank table,
/// the totals, communication by sublayer and by collective kind, and the per-ring-step table;
/// writes them as JSON with --json. Returns 0.
int trace_stats_command(const TraceStatsOptions& o);
/// The per-rank timeline table (compute, comm, overlap %, exposed, idle, peak memory, sent)
/// of each strategy and its communication by sublayer; with_kinds the communication by
/// collective kind (calls, size, time, algbw, busbw: trace/comm_stats.h), with_steps the
/// per-ring-step tables.
void print_timeline(const std::vector<trace::StrategyMetrics>& metrics, bool with_steps, bool with_kinds = false);
/// One strategy's metrics as JSON (microseconds; overlap_pct null without communication).
nlohmann::json metrics_json(const trace::StrategyMetrics& s);

struct ModelCommandOptions {
  LayerConfig cfg;
  RunChoices choices;
  std::string strategy;  ///< a dry run of this strategy (or of `parallel`), or
  ParallelFlags parallel;
  std::string from;      ///< a recorded trace to model
  /// A measured run to print beside the dry run, phase by phase (model_compare.cpp): a folder of
  /// PyTorch (Kineto) traces, one file per rank, or any trace; empty: none.
  std::vector<std::string> compare;
  std::string align = "auto";  ///< --compare's Kineto clocks: auto, collectives, none (trace::ClockAlign)
  int ranks = 4;
  std::string hw = "h100-nvlink";
  ModelingFlags modeling;  ///< --dtype, --efficiency, --attention-kernel, --merge, the stack's, --overlap-grad-reduce
  std::string only;                     ///< "attention": the strategy's attention alone
  std::string trace;
  std::string json;                     ///< the report (model/report.h) as JSON
  /// The whole step around the dry run's group (model/step_plan.h), with --gbs: the global batch
  /// in sequences (the microbatch is --batch), PP, VP, DP, the ZeRO stage, L and V (a preset
  /// gives L and V).
  int gbs = 0;
  int pp = 1, vp = 1, dp = 1, zero = 1, layers = 0;
  int64_t vocab = -1;
  bool overlap_grad_reduce = true;
  std::string preset;
};

/// The files `ringside model` with `o` reads and writes, each with the option that names it
/// (empty paths: not given): the one list model_command checks its outputs against its inputs
/// by, and validate holds its cases to (model_options_of).
struct ModelFiles {
  std::vector<output::Named> outputs;        ///< --trace, --json
  std::vector<output::Named> runs;           ///< recorded runs read: --from, --compare's files (a folder's each)
  std::vector<output::Named> configuration;  ///< --hw and --stack where they name a file (a profile, a stack)
};
ModelFiles model_files(const ModelCommandOptions& o);

/// L and V of `o`'s step: --layers and --vocab, else the preset's (1 and 0 without one).
std::pair<int, int64_t> step_depth(const ModelCommandOptions& o);

struct ModelRun;
/// The kind of `run` (model/bands.h): its scope (attention, layer, step), CP and element type;
/// for a recorded trace (--from), the CP of its `strategy`'s name.
model::RunKind run_kind_of(const ModelCommandOptions& o, const ModelRun& run, const std::string& strategy = "");

/// One modeled run: the dry run (or the trace read) replayed on its profile.
struct ModelRun {
  model::Hardware hw;
  model::ModelOptions modeling;  ///< o.modeling.options(), built once: what every part of the run models under
  trace::TraceData modeled;
  size_t events = 0;                              ///< in `modeled`
  std::vector<trace::StrategyMetrics> metrics;    ///< of `modeled`, per strategy
  std::vector<model::StrategyReport> reports;     ///< the same order
  std::optional<RunPlan> plan;       ///< the dry run's (none for --from)
  MemoryTracker tracker;             ///< declared before `results`, so that it outlives them
  std::vector<RunRecord> results;    ///< the dry run's per rank (tensors without data)
  double dry_s = 0, model_s = 0;     ///< measured seconds of this machine (varying)
  std::optional<model::ModeledStep> step;  ///< with --gbs: the step around the group
  model::BubbleParts bubble;              ///< with --gbs: its bubble against the formula (model/bubble.h)
  std::vector<model::SentClass> step_sent;  ///< with --gbs: what a GPU sends a step, by class
  /// With --compare: the measured run, its one recorded group (read_measured).
  std::optional<trace::TraceData> measured;
};

/// The run --compare names (o.compare, its clocks put together by o.align), cut to the one
/// recorded group to compare with the dry run of `plan`: the only one, or the one named as the
/// plan is. Throws ConfigError (one line) when the trace holds no events, is a modeled trace,
/// holds several groups none of which is named as the plan, has another number of ranks than
/// o.ranks (naming both), or has no forward nor backward phase (a PyTorch run needs
/// record_function ranges named forward and backward, or autograd's backward ops); ringside::Error
/// when it cannot be read.
trace::TraceData read_measured(const ModelCommandOptions& o, const RunPlan& plan);
/// Prints the measured run beside the model, phase by phase (forward, backward, then the rest
/// by name) and for the whole window: the time, the compute and the communication of each, as
/// trace::phase_metrics and trace::compute_metrics give them for both, each figure its slowest
/// rank's, and the ratio measured / modeled.
void print_comparison(const ModelCommandOptions& o, const ModelRun& run);

/// The step `model --gbs` models around the dry run's group `plan` on `hw`, under `modeling`
/// (o.modeling.options()), with what it was simulated from (the pipeline `--trace` draws).
model::ModeledStep modeled_step(const ModelCommandOptions& o, const model::ModelOptions& modeling, const RunPlan& plan,
                                const model::Hardware& hw);
/// Its row alone: the time, throughput and memory.
model::StepRow model_step(const ModelCommandOptions& o, const model::ModelOptions& modeling, const RunPlan& plan,
                          const model::Hardware& hw);

/// `model`'s lines of what each rank sends per layer, by class (model::layer_bytes_sent in `dtype`),
/// and whether the dry run's `results` counted the same.
void print_layer_bytes_sent(const RunPlan& plan, const std::string& dtype, const std::vector<RunRecord>& results);
/// `model --gbs`'s bubble against its formula (PP > 1) and what a GPU sends a step, by class.
void print_step_sent_and_bubble(const model::BubbleParts& bubble, const std::vector<model::SentClass>& sent);
/// The classes as --json writes them: class, most_bytes, and where given forward_most_bytes,
/// backward_most_bytes, all_ranks_bytes.
nlohmann::json bytes_sent_json(const std::vector<model::SentClass>& classes);
/// The bubble's parts as --json writes them (fractions of the ideal time) and their words.
nlohmann::json bubble_json(const model::BubbleParts& b);

/// A step row as `plan --json` and `model --json` write it: the configuration, its status and
/// reason; ranked rows their time, throughput, MFU both ways, exposed communication and error band
/// (model/bands.h, for `mo`'s type and efficiency); every fitting or oversized row its memory (plan_step.cpp).
nlohmann::json step_row_json(const model::StepRow& r, const model::Hardware& hw, int place, const model::ModelOptions& mo);
/// A step's memory count as every --json writes it: its fullest stage, the four terms, the total,
/// the capacity of `hw` and memory_text's words ("memory": plan, plan --gbs, --max-seq, model).
nlohmann::json memory_json(const model::StepCost& s, const model::Hardware& hw);

/// Checks `o` as `ringside model` does before any work (the layer, the strategy on its ranks,
/// the profile and the model options, flags that would have no effect); throws ConfigError.
/// Returns the profile, with `plan` the dry run's plan (resolved once, here), and with `modeling`
/// the model options (o.modeling.checked: built once, here).
model::Hardware check_model_command(const ModelCommandOptions& o, std::optional<RunPlan>* plan = nullptr,
                                    model::ModelOptions* modeling = nullptr);

/// Runs `o` as `ringside model` does, printing nothing: validates, dry-runs (or reads --from),
/// cuts to attention with --only attention, models. Throws ConfigError for bad options and
/// what model_trace throws.
/// `schedule_cache`, when given, holds the dry run's schedule for these options across calls (a
/// fit models one case many times): the first call records it there, the later ones skip the dry
/// run (not with --from). `progress`, when given, is told each phase (the dry run, the replay,
/// the step).
void run_model(const ModelCommandOptions& o, ModelRun& run, std::optional<trace::TraceData>* schedule_cache = nullptr,
               ProgressReport* progress = nullptr);

/// `ringside model`: adds the subcommand; returns it.
CLI::App* add_model(CLI::App& app, ModelCommandOptions& o);
/// Dry-runs the strategy (or reads --from), models it on --hw, prints per rank the time,
/// compute, comm, overlap, exposed comm and peak memory with an out-of-memory verdict against
/// the profile (exit 0 either way), and writes the modeled trace with --trace. Throws
/// ConfigError for a bad configuration, profile or option pair.
int model_command(const ModelCommandOptions& o);

struct ValidateOptions {
  std::vector<std::string> cases;  ///< case names (built-in) or JSON files; empty: every built-in case
  std::string json;
  /// Refit the fitted parameters without a source's cases and predict those (model/validation.h):
  /// a source id, or "all" for every source in turn (leave-one-source-out).
  std::string leave_out;
  bool refit = false;   ///< refit every parameter on the fit set, beside its stored value
  std::string bands;    ///< write the held-out errors by kind here (src/model/fits/bands.json's content)
};

/// `ringside validate`: adds the subcommand; returns it.
CLI::App* add_validate(CLI::App& app, ValidateOptions& o);
/// Models every case (model/validation.h) with its `ringside model` arguments and prints the fit
/// set and the held-out set apart, each case's error and each set's median, worst and mean
/// signed error, the reference cases, the orders and the fitted parameters; with --leave-out,
/// each left-out source's cases predicted by parameters refitted without them. Exit 0 when
/// every counted case is within its tolerance and every order holds, 1 otherwise. Throws
/// ConfigError (exit 2) for a case that is malformed, names an unknown profile or parameter,
/// lacks a source, or whose arguments `ringside model` refuses, and for an unknown source.
int validate_command(const ValidateOptions& o);

struct CalibrateCommandOptions {
  std::vector<std::string> runs;  ///< the profiler run: folders of Kineto traces, or the files
  std::string out, name;
  std::string base = "h100-nvlink";
  std::string stack = "megatron";
  int gpus_per_node = 0;  ///< 0: from the files' host names, else the base's
  int min_samples = 3;
};

/// `ringside calibrate`: adds the subcommand; returns it.
CLI::App* add_calibrate(CLI::App& app, CalibrateCommandOptions& o);
/// Reads the run's kernels (trace/kineto_kernels.h), fits the base profile's parameters to them
/// (model/calibrate.h), prints each fitted one beside the base's with its samples and errors and
/// the kept ones with why, and writes the profile to --out. Exit 0. Throws ConfigError (exit 2) for
/// an unknown base or stack, an --out that cannot be written or is one of the run's files, a run
/// on a GPU of other SMs than the base's, one without GPU kernels or with nothing to fit; Error
/// for a trace that cannot be read (naming the file and the event).
int calibrate_command(const CalibrateCommandOptions& o);

struct PlanCommandOptions {
  LayerConfig cfg;
  RunChoices choices;  ///< --layout (--recompute is the planner's own, below)
  int gpus = 8;
  std::vector<std::string> hw{"h100-nvlink"};  ///< profiles: names or JSON files
  std::string recompute = "any";               ///< any, none, selective or full
  std::string cp_comm;  ///< the CP schemes to weigh, comma-separated, or "all"; "": those a framework runs
  int layers = 0;                              ///< L; 0: the preset's depth, or 1 without a preset
  int top = 10;
  ModelingFlags modeling;  ///< --dtype, --efficiency, --attention-kernel, --merge and the stack's
  std::string trace, json;
  std::string preset;  ///< the --preset given, for its depth
  /// The whole step (model/step_plan.h), planned when --gbs is given: the global batch and
  /// microbatch in sequences; PP, VP, DP and the ZeRO stage fixed when given, else weighed.
  int gbs = 0;
  int mbs = 1, pp = 0, vp = 0, dp = 0, zero = -1;
  bool overlap_grad_reduce = true;
  bool exhaustive = false;  ///< model::StepPlanOptions::exhaustive
  /// --max-seq: the longest s that fits (model/max_seq.h) instead of a plan at --seq, to a
  /// multiple of `granularity` tokens; seq_given: whether --seq was given (refused with it).
  bool max_seq = false;
  int64_t granularity = 1024;
  bool seq_given = false;
  /// --emit: the frameworks (model/emit.h) whose settings for the winner and the runner-up to print.
  std::vector<std::string> emit;
  /// The flags given to plan that `ringside model` takes the same way, as given (the layer's,
  /// --dtype, the software's), each a shell word: what its rows' model commands repeat.
  std::vector<std::string> model_words;
};

/// The `ringside model` command a plan's rows share on the profile given as `hw` (an item of
/// --hw): the plan's model_words, --hw, and for a whole step --gbs, --batch (the microbatch),
/// --layers where given and --no-overlap-grad-reduce where given. A row's model_flags complete it.
std::string plan_model_command(const PlanCommandOptions& o, const std::string& hw);
/// The flags that give `ringside model` a plan row's TP x CP group on its T C ranks: --tp, --cp,
/// --cp-comm (--cp-a2a for the hybrid), --order `order` (the layer plan's tp-cp or cp-tp, a
/// step's full order), --layout and --recompute; a step row adds --pp, --vp, --dp and --zero.
std::string model_flags(const ParallelConfig& par, const std::string& order);
std::string model_flags(const model::StepCandidate& c);

/// `ringside plan --gbs ...`: the whole-step plan's tables, verdict and --json (plan_step.cpp),
/// every candidate modeled under `modeling` (o.modeling.checked on `profiles`).
int plan_step_command(const PlanCommandOptions& o, const std::vector<model::Hardware>& profiles,
                      const model::ModelOptions& modeling);

/// `ringside plan --max-seq`: the longest sequence that fits, per recompute mode and ZeRO stage,
/// with its split, binding term and memory; --json too (plan_max_seq.cpp). Throws ConfigError
/// (exit 2) for --seq, --trace or --exhaustive beside it and as model::max_seq_plan throws.
int plan_max_seq_command(const PlanCommandOptions& o, const std::vector<model::Hardware>& profiles,
                         const model::ModelOptions& modeling);
/// --emit: each framework's settings (model/emit.h) for each plan's winner and runner-up, with
/// what it cannot express and the nearest it runs (plan_emit.cpp); nothing when o.emit is empty.
/// The layer plan's rows on `cfg` modeled with `mo`; a step's with its options `so`.
void print_framework_flags(const std::vector<model::Plan>& plans, const PlanCommandOptions& o, const LayerConfig& cfg,
                           const model::ModelOptions& mo);
void print_framework_flags(const std::vector<model::StepPlan>& plans, const PlanCommandOptions& o, const LayerConfig& cfg,
                           const model::StepPlanOptions& so);

/// The profile names of --hw values, each a comma-separated list ("h100-nvlink,h100-ib");
/// throws ConfigError for an empty item ("a100-nvlink,", ",a100-nvlink", "a,,b"), a profile
/// listed twice, or --hw given more than once.
std::vector<std::string> profile_list(const std::vector<std::string>& given);

/// `ringside plan`: adds the subcommand; returns it.
CLI::App* add_plan(CLI::App& app, PlanCommandOptions& o);
/// Plans (model/plan.h) and prints, per profile, the ranked table with reasons, the rejected
/// candidates with theirs and the verdict; writes the winner's and the runner-up's modeled
/// timelines with --trace and everything with --json. Throws ConfigError (exit 2) for an
/// unknown preset or profile, a GPU count with no valid configuration or a sequence that fits
/// nowhere.
int plan_command(const PlanCommandOptions& o);

struct BenchPlanOptions {
  /// The plan: one layer of Llama 3 70B at 1M tokens on 64 H100s, every recompute mode.
  PlanCommandOptions plan = [] {
    PlanCommandOptions p;
    p.preset = "llama3-70b", p.gpus = 64, p.cfg.s = 1 << 20;
    return p;
  }();
  double target_s = 60;  ///< issue 19: the whole plan under 60 s on the 2-core machine
  /// With --gbs: issue 40's whole step instead, Llama 3 405B at 128K on 16,384 H100s with a
  /// global batch of 128 sequences (16M tokens), as Llama 3 trained it.
  int gbs = 0;
};

/// Adds `ringside bench plan` under `bench`; returns it.
CLI::App* add_bench_plan(CLI::App& bench, BenchPlanOptions& o);
/// `ringside bench plan`: the plan's seconds against the 60 s target, its dry runs, the replays
/// that reused one, and what the plan would take with a dry run per candidate (the mean dry run
/// measured in the same run). Returns 0.
int bench_plan(const BenchPlanOptions& o);

struct LessonOptions {
  std::optional<int> number;  ///< none: list the lessons
  bool no_pause = false;
  std::string hw;  ///< the profile the lesson's times are modeled on ("": the one its chapter quotes, lessons::Lesson::hw)
  std::string update_chapter;      ///< rewrite this chapter's marked tables and numbers from the run
  std::string trace;  ///< "": lessons::default_trace_path
  std::string json;   ///< the numbers the lesson states, and its steps
};

/// `ringside lesson`: adds the subcommand; returns it.
CLI::App* add_lesson(CLI::App& app, LessonOptions& o);
/// Lists the lessons (no number), or runs lesson N's scenario, writes its trace (and --json),
/// and presents its steps, pausing unless --no-pause. `viewer` is how to call the viewer, for
/// the closing hint. Throws ConfigError for an unknown lesson or an unwritable output.
int lesson_command(const LessonOptions& o, const std::string& viewer);

}  // namespace ringside::cli

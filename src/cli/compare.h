// The pieces of `ringside compare` and `ringside run` (cli/compare.cpp): where the job's ranks
// run (setup), the timeline written and measured (finish_trace), the report of the checks
// (cli/compare_report.cpp) and the ring's load-balance table (cli/load_balance.cpp).
#pragma once
#include <functional>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "check/check.h"
#include "cli/commands.h"
#include "run/runner.h"
#include "trace/metrics.h"
#include "trace/trace_file.h"

namespace ringside::cli {

/// Where a job's ranks run, and what every rank agreed on before its first communication.
struct Setup {
  bool mpi = false;       ///< one process per rank (mpirun)
  JobWorld where;         ///< the world(s) and the clock, or the local threads' options
  Device device = Device::cpu;
  std::string backend = "local";  ///< local, mpi or nccl
  int P = 1;
  bool root = true;
  model::Hardware hw;  ///< the modeled twin's profile (--hw)
  model::ModelOptions modeling;  ///< what it models (CompareOptions::modeling's options(), built once)
};

/// Where the ranks run, and every check before the job's first communication. Under mpirun the
/// ranks first agree on the command line, then run every check (the backend's and the
/// command's own, `checks`) and agree on the outcome: a bad configuration is one line and exit
/// 2 on every rank, whichever rank found it (cli/agree.cpp). Then the clocks are aligned.
Setup setup(CompareOptions& o, const char* command, const std::function<void(const Setup&)>& checks);

/// What the ranks are, for the headers: " (threads, one comm thread each)".
const char* ranks_are(const Setup& s);

/// A trace of no ranks yet that describes the run: its RunInfo (producer, config, layout, ranks,
/// backend, device, dtype, clock) and, in `other`, the GPU and the artificial link.
trace::TraceData trace_head(const char* producer, const CompareOptions& o, const Setup& s);

/// The layer's "config" of every document compare and run write: the layer and the requested
/// layout and recompute (RunPlan::config_json's, without a plan).
nlohmann::json config_of(const CompareOptions& o);

/// One line on stderr per stage when stderr is a terminal, on the root.
std::function<void(const std::string&)> progress(const Setup& s, const char* command);

/// Runs one plan on every rank, traced; its timeline is appended to `traces` (on the root).
/// With `live` (the root of local ranks) the file is rewritten every second while it runs,
/// with the runs before it, under `head`'s description.
JobRecord run_traced(const RunPlan& plan, const Setup& s, std::vector<trace::RankTrace>& traces,
                     const std::string* live = nullptr, const trace::TraceData& head = {});

/// What the timeline says, on the root: measured on this machine, and modeled on --hw.
struct Timelines {
  std::vector<trace::StrategyMetrics> measured, modeled;  ///< modeled: in the measured order, named as measured
  const trace::StrategyMetrics& measured_of(const std::string& name) const;
};
/// The timeline's metrics, measured and modeled (and the file, with --trace: both, the modeled
/// twin of each strategy below it), on the root.
Timelines finish_trace(const CompareOptions& o, const char* producer, const Setup& s, std::vector<trace::RankTrace>&& ranks);

// ---- the report (cli/compare_report.cpp) -------------------------------------------------

/// compare's measured table (the fp32 reference's row, y.fp32 against y.fp64; one row per
/// check; the skipped strategies), printed, and its JSON: reference_fp32, reference_fp64, strategies, skipped.
/// Returns the failures (rows not OK).
int report_checks(const std::vector<JobRecord>& jobs, const std::vector<RunCheck>& checks, const Yardstick& y,
                  const std::vector<std::pair<std::string, std::string>>& skipped, const Timelines& timelines,
                  const Setup& s, nlohmann::json& js);

/// The modeled twin's table: each strategy's layer on the profile, from the same schedule.
/// Returns it as JSON: {hardware, dtype, stack, modeling (model::modeling_info: every option it models under), band,
/// strategies: [metrics with layer_us], table}.
nlohmann::json print_modeled(const Timelines& t, const model::Hardware& hw, const model::ModelOptions& o);

/// all_gather's price, for each all_gather job: every rank holds the whole sequence's K/V while
/// it attends, formula and measured (JSON all_gather_kv_bytes).
void report_all_gather(const std::vector<JobRecord>& jobs, const std::vector<RunCheck>& checks, nlohmann::json& js);

/// What the columns mean, the measured times' caveat and the timeline tables.
void print_compare_footer(const Timelines& t, const Setup& s);
/// The timeline tables: the modeled twin's (with its ring steps), then the measured one's.
void print_timelines(const Timelines& t, const model::Hardware& hw);
/// Why measured waits are not GPU waits, in one line, and when they can be compared.
void print_measured_note(int P);

// ---- the ring's load balance (cli/load_balance.cpp) ---------------------------------------

/// With documents or a window the layouts' balance is the question: the ring runs again under
/// every other layout (its timeline not kept: the trace holds each strategy once), each
/// checked as a strategy is. Keyed by layout; empty unless
/// `ring` is the ring over every rank of a masked layer.
std::map<Layout, JobRecord> run_other_layouts(const RunPlan& ring, const Setup& s,
                                              const std::function<void(const std::string&)>& note);

/// The load-balance table of the ring: each layout's forward attention FLOPs per rank, measured
/// for the layouts that ran (the ring's own job and `others`), the formula for the rest, with
/// the imbalance (max / mean work), and the measured layouts' verdicts. Prints it, adds
/// ring_work_per_rank to js and returns the failures.
int report_load_balance(const JobRecord& ring, const std::map<Layout, JobRecord>& others, const Yardstick& y,
                        const Setup& s, nlohmann::json& js);

}  // namespace ringside::cli

// `ringside calibrate RUN --out FILE`: a hardware profile of the user's own cluster, fitted to a
// PyTorch profiler run of it (model/calibrate.h), printed parameter by parameter beside the base.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <ctime>
#include <filesystem>
#include <map>

#include "cli/commands.h"
#include "core/error.h"
#include "core/output.h"
#include "model/calibrate.h"
#include "trace/kineto.h"

namespace ringside::cli {

CLI::App* add_calibrate(CLI::App& app, CalibrateCommandOptions& o) {
  CLI::App* c = app.add_subcommand(
      "calibrate",
      "Your cluster, not the datasheet: fit a hardware profile (GEMM, attention and memory-bound rates, launch gaps, NCCL latency "
      "and bandwidth per link tier) to a PyTorch profiler run, for model/plan --hw");
  c->add_option("run", o.runs,
                "the profiler run: a folder of its Kineto traces (one file per rank, as tensorboard_trace_handler writes them), "
                "or the files; several runs together give more shapes")
      ->required()
      ->option_text("RUN...");
  c->add_option("--out", o.out, "the profile to write (required; JSON, the format of src/model/hardware/*.json)")
      ->required()
      ->option_text("FILE")
      ->check(non_empty("--out needs a file name"));
  c->add_option("--base", o.base, "the profile whose values are kept where the run has too few samples: a built-in name or a JSON file")
      ->option_text("PROFILE")
      ->capture_default_str();
  c->add_option("--stack", o.stack, "the software the run used (its attention rate is undone: the fitted rate is the kernel's)")
      ->option_text("STACK")
      ->capture_default_str();
  c->add_option("--name", o.name, "the profile's name (default: --out's file name without .json)")->option_text("NAME");
  c->add_option("--gpus-per-node", o.gpus_per_node,
                "GPUs a node, which decides the link tier of each NCCL call (default: from the files' host names, else the base's)")
      ->check(CLI::Range(1, 1 << 20));
  c->add_option("--min-samples", o.min_samples, "fewest samples a parameter is fitted from (below: the base's value is kept)")
      ->check(CLI::Range(1, 1000000))
      ->capture_default_str();
  c->footer(
      "Examples:\n"
      "  ringside calibrate traces/ --out my-cluster.json --base h100-nvlink\n"
      "  ringside plan --preset llama3-8b --seq 131072 --gpus 16 --hw my-cluster.json\n"
      "  ringside model --hw my-cluster.json --compare traces/ <the run's configuration>\n"
      "Record the run with torch.profiler.profile(activities=[CPU, CUDA], record_shapes=True) over a few steps\n"
      "(README.md, \"Model your own cluster\"; every rule: docs/cli.md, \"ringside calibrate\").");
  return c;
}

namespace {

std::string today() {
  const std::time_t now = std::chrono::system_clock::to_time_t(std::chrono::system_clock::now());
  std::tm utc{};
  gmtime_r(&now, &utc);
  char b[16];
  std::strftime(b, sizeof b, "%Y-%m-%d", &utc);
  return b;
}

std::string joined(const std::vector<std::string>& v) {
  std::string s;
  for (const std::string& x : v) s += (s.empty() ? "" : " ") + x;
  return s;
}

// A value with 4 significant digits ("0.7", "600", "3.25").
std::string value(double v) {
  char b[32];
  std::snprintf(b, sizeof b, "%.4g", v);
  return b;
}

std::string percent(double e) {
  if (e > 9.99) return ">999%";
  char b[32];
  std::snprintf(b, sizeof b, "%.1f%%", 100 * e);
  return b;
}

// A parameter's name with its unit where the name does not say it: "...tflops (TFLOP/s)".
std::string named(const model::CalibratedParameter& p) {
  return p.unit.empty() || p.name.ends_with("_" + p.unit) ? p.name : p.name + " (" + p.unit + ")";
}

// `items` comma-separated in lines of at most `width` characters, each after `indent`.
std::string wrapped(const std::vector<std::string>& items, const std::string& indent, size_t width) {
  std::string out, line;
  for (size_t i = 0; i < items.size(); ++i) {
    const std::string item = items[i] + (i + 1 < items.size() ? "," : "");
    if (!line.empty() && indent.size() + line.size() + 1 + item.size() > width) out += indent + line + "\n", line.clear();
    line += (line.empty() ? "" : " ") + item;
  }
  return line.empty() ? out : out + indent + line + "\n";
}

// The profile's name: --name, else --out's stem; 1 to 64 printable characters.
std::string profile_name(const CalibrateCommandOptions& o) {
  std::string name = o.name.empty() ? std::filesystem::path(o.out).stem().string() : o.name;
  if (name.empty() || name.size() > 64 || std::any_of(name.begin(), name.end(), [](char c) { return c < 0x20 || c > 0x7e; }))
    throw ConfigError("the profile's name " + detail::shown_input(name) + " must be 1 to 64 printable characters (--name)");
  return name;
}

// The reasons kernels were not samples, each with its instances ("an op the model has no rate
// for (aten::sum)": reason and what), the most kernels first.
std::map<std::string, std::vector<std::pair<int64_t, std::string>>> by_reason(const std::map<std::string, int64_t>& skipped) {
  std::map<std::string, std::vector<std::pair<int64_t, std::string>>> out;
  for (const auto& [text, n] : skipped) {
    const size_t open = text.find(" (");
    const bool instance = open != std::string::npos && text.back() == ')';
    out[instance ? text.substr(0, open) : text].push_back({n, instance ? text.substr(open + 2, text.size() - open - 3) : ""});
  }
  for (auto& [why, whats] : out) std::sort(whats.begin(), whats.end(), [](const auto& a, const auto& b) { return a.first > b.first; });
  return out;
}

}  // namespace

int calibrate_command(const CalibrateCommandOptions& o) {
  // Everything the command can refuse, before reading a trace.
  const model::Hardware base = [&] {
    try {
      return model::load_hardware(o.base);
    } catch (const ConfigError& e) {  // its message names --hw, the option model and plan take
      std::string what = e.what();
      if (what.starts_with("--hw ")) what.replace(0, 4, "--base");
      throw ConfigError(what);
    }
  }();
  model::CalibrateOptions options;
  options.stack = o.stack, options.gpus_per_node = o.gpus_per_node, options.min_samples = o.min_samples;
  model::load_stack(o.stack);
  output::check(o.out, "--out");
  const std::string name = profile_name(o);
  for (const std::string& input : trace::trace_input_files(o.runs))
    if (std::filesystem::exists(o.out) && std::filesystem::equivalent(input, o.out))
      throw ConfigError("--out " + o.out + " is one of the run's traces; write the profile elsewhere");

  const trace::ProfiledRun run = trace::read_profiled_run(o.runs);
  if (run.sms > 0 && base.efficiency.sms > 0 && run.sms != base.efficiency.sms)
    throw ConfigError(detail::concat("the run's GPU (", run.device.empty() ? "unnamed" : run.device, ") has ", run.sms,
                                     " SMs, the base profile ", base.name, "'s ", base.efficiency.sms,
                                     ": calibrate over a profile of the same GPU (--base; ringside model --help lists them)"));
  const model::Calibration c = model::calibrate(run, base, options);
  const std::string run_text = joined(o.runs);

  const std::string gpu = run.device.empty() ? "" : ", on " + run.device + (run.sms > 0 ? detail::concat(" (", run.sms, " SMs)") : "");
  const std::string runs = run.runs == 1 ? detail::concat("a run of ", run.world_size, " rank", run.world_size == 1 ? "" : "s")
                                          : detail::concat(run.runs, " runs of ", run.world_size, " ranks");
  std::printf("calibrate: %s (%zu file%s: %s%s) over %s\n", run_text.c_str(), run.files.size(), run.files.size() == 1 ? "" : "s",
              runs.c_str(), gpu.c_str(), base.name.c_str());
  const size_t large = size_t(std::count_if(run.memory.begin(), run.memory.end(), [](const trace::MemoryBoundSample& m) {
    return m.bytes >= 16.0 * (1 << 20);
  }));
  std::printf("  read: %lld kernels: %zu GEMMs, %zu attention calls, %zu memory-bound ops (%zu of 16 MiB or more, the fit's), %zu NCCL "
              "kernels; %zu queued gaps between kernels\n",
              (long long)run.kernels, run.gemms.size(), run.attention.size(), run.memory.size(), large, run.comms.size(), run.queued_gaps.size());
  if (run.device.empty() && run.sms == 0)
    std::printf("  GPU: not in the traces (no deviceProperties): taken to be %s's (%d SMs), not checked\n", base.name.c_str(),
                base.efficiency.sms);
  std::printf("  nodes: %d GPUs each (%s), which places each NCCL call on a link tier\n", c.gpus_per_node, c.gpus_per_node_source.c_str());
  if (!run.skipped.empty()) {
    std::printf("  not samples of any rate:\n");
    for (const auto& [why, whats] : by_reason(run.skipped)) {
      int64_t total = 0;
      for (const auto& [n, what] : whats) total += n;
      std::string listed;
      for (size_t i = 0; i < whats.size() && i < 4; ++i)
        if (!whats[i].second.empty()) listed += detail::concat(listed.empty() ? ": " : ", ", whats[i].second, " ", whats[i].first);
      if (whats.size() > 4) listed += detail::concat(", ... (", whats.size(), " in all)");
      std::printf("    %lld kernel%s: %s%s\n", (long long)total, total == 1 ? "" : "s", why.c_str(), listed.c_str());
    }
  }
  for (const std::string& s : c.skipped_links) std::printf("    %s\n", s.c_str());

  std::printf("\n  fitted (the model's forms, each beside %s's value; error: |modeled / measured - 1| over its samples)\n",
              base.name.c_str());
  std::printf("  %-58s %8s %8s %8s %7s %7s\n", "parameter", "base", "fitted", "samples", "median", "worst");
  for (const model::CalibratedParameter& p : c.parameters) {
    if (p.kept) continue;
    std::printf("  %-58s %8s %8s %8d %7s %7s%s%s\n", named(p).c_str(), value(p.base).c_str(), value(p.fitted).c_str(), p.samples,
                p.spread ? "-" : percent(p.median_error).c_str(), p.spread ? "-" : percent(p.worst_error).c_str(), p.why.empty() ? "" : "  ",
                p.why.c_str());
  }
  if (!c.hw.efficiency.measured_kernel.empty())
    std::printf("  attention: the run's kernels are %s's, which model and plan now take (at these rates) unless --attention-kernel says\n"
                "  otherwise; the other families keep the base's published rates\n",
                c.hw.efficiency.measured_kernel.c_str());
  std::printf("\n  kept from %s (the run does not measure them enough):\n", base.name.c_str());
  for (const model::CalibratedParameter& p : c.parameters)
    if (p.kept && (p.samples > 0 || p.why != "the run has none"))
      std::printf("    %s = %s%s: %s\n", p.name.c_str(), value(p.base).c_str(), p.unit.empty() ? "" : (" " + p.unit).c_str(), p.why.c_str());
  std::vector<std::string> none;
  for (const model::CalibratedParameter& p : c.parameters)
    if (p.kept && p.samples == 0 && p.why == "the run has none") none.push_back(p.name);
  if (!none.empty()) std::printf("    not in the run at all:\n%s", wrapped(none, "      ", 100).c_str());
  if (c.host_gaps > 0)
    std::printf("\n  host: where the GPU waited for the CPU, a median %.3g us between kernels (%d gaps): framework overhead, which\n"
                "  a stack file's host_kernel_us carries (--stack), not the profile\n",
                c.host_gap_s * 1e6, c.host_gaps);

  output::write(o.out, model::calibrated_profile(c, name, run_text, today()).dump(2) + "\n", "--out");
  std::printf("\n  wrote %s (profile \"%s\"): ringside model --hw %s ..., ringside plan --hw %s ...\n", o.out.c_str(), name.c_str(),
              o.out.c_str(), o.out.c_str());
  return 0;
}

}  // namespace ringside::cli

// What the viewer says about a group and an event: measured or modeled and on what (from
// trace/run_info.h), how much of its communication hid, and an event's details.
#include "viz/view_model.h"

#include "trace/kineto.h"

#include <algorithm>
#include <cmath>
#include <cstdio>

namespace ringside::viz {

using trace::Event;

namespace {

std::string modeled_on(const std::string& hw) { return hw.empty() ? "MODELED" : "MODELED on " + hw; }

}  // namespace

bool from_profiler(const trace::RunInfo& run) { return run.producer == trace::kKinetoProducer; }

std::string row_unit(const trace::RunInfo& run) {
  return run.backend == kPipelineStages ? "stage" : from_profiler(run) ? "rank" : "GPU";
}

std::string memory_words(const trace::RunInfo& run) { return from_profiler(run) ? "allocated (PyTorch)" : "memory"; }

std::vector<int> memory_categories(const trace::TraceData& t) {
  std::vector<bool> held(kNumMemCategories, false);
  for (const trace::RankTrace& r : t.ranks)
    for (const trace::MemorySample& m : r.memory)
      for (int c = 0; c < kNumMemCategories; ++c) held[size_t(c)] = held[size_t(c)] || m.bytes[size_t(c)] != 0;
  std::vector<int> out;
  for (int c = 0; c < kNumMemCategories; ++c)
    if (held[size_t(c)]) out.push_back(c);
  return out;
}

std::string group_tag(const trace::RunInfo& info, const std::string& strategy) {
  // A modeled group names its own profile (a plan's groups may be on several).
  if (const trace::GroupInfo* twin = info.group(strategy)) return modeled_on(twin->hardware);
  if (info.modeled) return modeled_on(info.hardware_name());
  if (from_profiler(info)) {
    // The user's own job: measured, on what, over which backend, by whom.
    std::string tag = "MEASURED";
    const std::string device = info.device == "cpu" ? "CPU" : info.device == "cuda" ? "CUDA" : info.device;
    if (!device.empty()) tag.append(" on ").append(device);
    if (!info.backend.empty()) tag.append(device.empty() ? " over " : ", ").append(info.backend);
    return tag.append(" (PyTorch profiler)");
  }
  return !info.groups.empty() || !info.twins_hardware.is_null() ? "MEASURED" : "";
}

std::string twin_of(const trace::RunInfo& info, const std::string& strategy) {
  const trace::GroupInfo* twin = info.group(strategy);
  return twin ? twin->of : "";
}

std::string trace_tag(const trace::RunInfo& info) {
  if (info.modeled) {
    // Every profile the groups are modeled on, in order (a plan on several), else the trace's.
    std::vector<std::string> profiles;
    for (const auto& [label, group] : info.groups)
      if (!group.hardware.empty() && std::find(profiles.begin(), profiles.end(), group.hardware) == profiles.end())
        profiles.push_back(group.hardware);
    std::string names;
    for (const std::string& p : profiles) names += (names.empty() ? "" : ", ") + p;
    return "(" + modeled_on(names.empty() ? info.hardware_name() : names) + ")";
  }
  if (from_profiler(info)) return "(measured by the PyTorch profiler)";
  const std::string twins = info.twins_hardware_name();
  return twins.empty() ? "(measured)" : "(measured, and modeled on " + twins + ")";
}

std::string clock_words(const trace::TraceData& t) {
  const bool shifted_any = std::any_of(t.ranks.begin(), t.ranks.end(),
                                       [](const trace::RankTrace& r) { return r.clock_offset_ns != 0 || r.clock_uncertainty_ns != 0; });
  if (t.run.clock.empty() || !(from_profiler(t.run) || shifted_any)) return "";
  std::string out = "clocks: " + t.run.clock;
  size_t shifted = 0;
  for (const trace::RankTrace& r : t.ranks) {
    if (r.clock_offset_ns == 0 && r.clock_uncertainty_ns == 0) continue;
    if (++shifted > 4) continue;
    out += std::string(shifted == 1 ? "; " : ", ") + row_name(t.run, r.rank) + " " + trace::clock_shift_text(t.run, r);
  }
  if (shifted > 4) out += ", and " + std::to_string(shifted - 4) + " more";
  return out;
}

std::string comm_summary(const trace::StrategyMetrics& m, const std::string& per, const std::string& all) {
  if (m.total.comm_ns <= 0) return "";
  const double gpus = double(std::max<size_t>(1, m.ranks.size()));
  auto part = [&](const char* what, const trace::Breakdown& b) {
    char out[96];
    std::snprintf(out, sizeof out, "%s %.0f%% hidden, %s exposed/%s", what, b.overlap_pct(),
                  format_ns(double(b.exposed_comm_ns) / gpus).c_str(), per.c_str());
    return std::string(out);
  };
  // Attention's own traffic where it has some (the ring's K/V, the all-to-alls), beside all of
  // it (the weight-gradient all-reduce too): compare's "attn hidden" and "exposed" columns.
  const std::optional<trace::Breakdown> attention = trace::sublayer_comm(m, "attention");
  if (!attention || attention->comm_ns <= 0) return part(all.c_str(), m.total);
  return part("attention comm", *attention) + "; " + all + " " +
         format_ns(double(m.total.exposed_comm_ns) / gpus) + " exposed/" + per;
}

std::vector<PlacedWord> flow_title(const std::vector<TitlePiece>& pieces, float width,
                                   const std::function<float(const std::string&)>& text_width, int max_rows) {
  std::vector<PlacedWord> out;
  float x = 0;
  int row = 0;
  auto place = [&](const std::string& word, const TitlePiece& piece, float gap, float pad) {
    // The word's ink ends before its trailing space; a boxed word's box, pad px after it.
    const std::string ink = word.substr(0, word.find_last_not_of(' ') + 1);
    const float start = x + gap + pad;
    if (!out.empty() && start + text_width(ink) + pad > width) ++row, x = 0;
    const float at = (out.empty() || out.back().row != row ? 0 : x + gap) + pad;
    out.push_back({word, piece.color, piece.box, at, text_width(ink), row});
    x = at + text_width(word) + pad;
  };
  for (const TitlePiece& piece : pieces) {
    if (piece.text.empty()) continue;
    if (piece.box) {
      place(piece.text, piece, piece.gap, 3);
      continue;
    }
    float gap = piece.gap;
    for (size_t at = 0; at < piece.text.size();) {  // words, each with its trailing spaces
      size_t end = piece.text.find(' ', at);
      end = end == std::string::npos ? piece.text.size() : piece.text.find_first_not_of(' ', end);
      if (end == std::string::npos) end = piece.text.size();
      place(piece.text.substr(at, end - at), piece, gap, 0);
      gap = 0, at = end;
    }
  }
  if (max_rows <= 0 || out.empty() || out.back().row < max_rows) return out;
  // Cut: the rows it may have, ending in "..." after the last word that leaves room for it.
  std::erase_if(out, [&](const PlacedWord& w) { return w.row >= max_rows; });
  const std::string dots = "...";
  float at = 0;
  for (; !out.empty(); out.pop_back()) {
    const PlacedWord& w = out.back();
    at = w.x + text_width(w.text) + (w.box ? 3 + 7 : 0);
    if (at + text_width(dots) <= width) break;
  }
  if (out.empty()) at = 0;
  out.push_back({dots, pieces.front().color, 0, at, text_width(dots), max_rows - 1});
  return out;
}

std::vector<std::string> describe_event(const Event& e) {
  std::vector<std::string> out;
  out.push_back(e.name + "  [" + trace::to_string(e.kind) + "]");
  std::string where = e.phase.empty() ? "" : e.phase;
  if (!e.sublayer.empty()) where += (where.empty() ? "" : " / ") + e.sublayer;
  if (e.step >= 0) where += (where.empty() ? "" : ", ") + std::string("ring step ") + std::to_string(e.step);
  if (!where.empty()) out.push_back(where);
  out.push_back("duration " + format_ns(double(e.dur_ns)) + ", at " + format_ns(double(e.ts_ns)));
  if (e.peer >= 0) out.push_back((e.direction == trace::Direction::recv ? "from rank " : e.direction == trace::Direction::send ? "to rank " : "peer rank ") + std::to_string(e.peer));
  if (e.bytes > 0) {
    std::string line = format_bytes(double(e.bytes));
    if (e.dur_ns > 0) {
      char b[48];
      std::snprintf(b, sizeof b, ", %.2f GB/s", double(e.bytes) / double(e.dur_ns));
      line += b;
    }
    out.push_back(line);
  }
  if (e.flops > 0) {
    char b[64];
    std::snprintf(b, sizeof b, "%.3f GFLOP", e.flops / 1e9);
    std::string line = b;
    if (e.dur_ns > 0) {
      std::snprintf(b, sizeof b, ", %.1f GFLOP/s", e.flops / double(e.dur_ns));
      line += b;
    }
    out.push_back(line);
  }
  if (e.collective >= 0) out.push_back("collective #" + std::to_string(e.collective));
  if (!e.detail.empty()) out.push_back(e.detail);
  return out;
}

}  // namespace ringside::viz

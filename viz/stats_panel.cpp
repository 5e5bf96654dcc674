// The side panel's stats: each trace's metrics per strategy and GPU (with many GPUs, the least,
// median and greatest over them and the outliers instead), the same over a dragged selection,
// the pinned event's details, and the colour key.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <functional>

#include "viz/app.h"

namespace ringside::viz {

namespace {

constexpr size_t kMostRows = 8;  // strategies of more GPUs are summarised

std::string pct(double p) {
  if (std::isnan(p)) return "-";
  char b[16];
  std::snprintf(b, sizeof b, "%.0f%%", p);
  return b;
}

// The columns of a GPU's row, as numbers (ns, %, bytes), and how to print each.
struct Column {
  const char* name;
  double (*of)(const trace::RankMetrics&);
  std::string (*print)(double);
};
const Column kColumns[] = {
    {"sent", [](const trace::RankMetrics& r) { return double(r.bytes_sent); }, [](double v) { return format_bytes(v); }},
    // -1: the trace has no memory counters (a modeled step), shown "-", never 0 B.
    {"peak mem", [](const trace::RankMetrics& r) { return r.has_memory ? double(r.peak_memory_bytes) : -1.0; },
     [](double v) { return v < 0 ? std::string("-") : format_bytes(v); }},
    {"compute", [](const trace::RankMetrics& r) { return double(r.time.compute_ns); }, [](double v) { return format_ns(v); }},
    {"comm", [](const trace::RankMetrics& r) { return double(r.time.comm_ns); }, [](double v) { return format_ns(v); }},
    {"overlap", [](const trace::RankMetrics& r) { return r.time.overlap_pct(); }, [](double v) { return pct(v); }},
    {"exposed", [](const trace::RankMetrics& r) { return double(r.time.exposed_comm_ns); }, [](double v) { return format_ns(v); }},
    {"idle", [](const trace::RankMetrics& r) { return double(r.time.idle_ns); }, [](double v) { return format_ns(v); }},
};
constexpr size_t kPeakColumn = 1;  // tagged "max" where it holds the highest peak of all

}  // namespace

void App::side_panel() {
  // In a lesson the tile maps come first: lessons 3 to 5 are about them.
  if (!lesson_steps_.empty()) tile_maps();
  NamedMetrics stats, selected;
  for (size_t ti = 0; ti < traces_.size(); ++ti) {
    const Loaded& t = traces_[ti];
    // Compared traces are A, B, ... in the tables.
    const std::string name = traces_.size() > 1 ? std::string(1, char('A' + ti % 26)) : std::string();
    ImGui::Text("%s%s%s", name.c_str(), name.empty() ? "" : ": ", shown_path(t.path).c_str());
    ImGui::SameLine();
    ImGui::TextDisabled("%s", t.summary.c_str());
    if (!t.clock.empty()) {  // how the ranks were put on one clock: a foreign run's may be shifted
      ImGui::PushStyleColor(ImGuiCol_Text, ImGui::GetStyleColorVec4(ImGuiCol_TextDisabled));
      ImGui::TextWrapped("%s", t.clock.c_str());
      ImGui::PopStyleColor();
    }
    stats.emplace_back(name, t.metrics);
    if (selection_ && !selection_cached()) {
      // The selection is relative to each group's zero: shift it per strategy.
      std::vector<trace::StrategyMetrics> sel;
      for (const Group& g : t.layout.groups) {
        const double k = scale_of(t, g.strategy);  // the selection in each group's own time
        const trace::Interval w{g.zero_ns + int64_t(double(selection_->begin) * k), g.zero_ns + int64_t(double(selection_->end) * k)};
        for (auto& m : trace::compute_metrics(t.data, w))
          if (m.strategy == g.strategy) sel.push_back(m);
      }
      selected.emplace_back(name, sel);
    }
  }
  stats_table(stats, "stats");
  if (selection_) {
    // Metrics over the selection: computed when it (or a trace) changes, not every frame.
    if (!selection_cached()) selected_cache_ = std::move(selected), cached_for_ = std::make_pair(*selection_, generation_);
    ImGui::Text("selection: %s to %s", format_ns(double(selection_->begin)).c_str(), format_ns(double(selection_->end)).c_str());
    stats_table(selected_cache_, "selection");
  }
  if (lesson_steps_.empty()) tile_maps();
  ImGui::Separator();
  if (pinned_) {
    const Loaded& t = traces_[pinned_->first];
    const trace::RankTrace& r = t.data.ranks[pinned_->second.process];
    ImGui::Text("pinned: %s (%s)", row_name(t.data.run, r.rank).c_str(), r.strategy.c_str());
    for (const std::string& line : describe_event(r.events[pinned_->second.event])) ImGui::TextUnformatted(line.c_str());
    if (ImGui::SmallButton("unpin")) pinned_.reset();
  }
  ImGui::Separator();
  colour_key();
}

bool App::selection_cached() const {
  return cached_for_ && cached_for_->first.begin == selection_->begin && cached_for_->first.end == selection_->end &&
         cached_for_->second == generation_;
}

// Many GPUs: the least, the median and the greatest of each column, with whose; the outliers
// of each column become notes below the table.
static void spread_rows(const trace::StrategyMetrics& s, const std::function<void(const std::string&)>& lead, int64_t top_peak,
                 std::vector<std::string>& notes) {
  std::vector<int> ranks;
  for (const auto& r : s.ranks) ranks.push_back(r.rank);
  std::vector<Spread> spreads;
  for (const Column& c : kColumns) {
    std::vector<double> v;
    for (const auto& r : s.ranks) v.push_back(c.of(r));
    spreads.push_back(spread(v, ranks));
    const std::vector<int> out = outlier_ranks(v, ranks);
    if (!out.empty() && c.name != std::string("overlap")) {
      std::string line = s.strategy + ": " + c.name + " outliers (median " + c.print(spreads.back().median) + "): GPU";
      for (size_t i = 0; i < out.size() && i < 12; ++i) line += (i ? ", " : " ") + std::to_string(out[i]);
      if (out.size() > 12) line += " and " + std::to_string(out.size() - 12) + " more";
      notes.push_back(line);
    }
  }
  for (int row = 0; row < 3; ++row) {
    lead(row == 0 ? "min" : row == 1 ? "median" : "max");
    for (size_t k = 0; k < spreads.size(); ++k) {
      const Spread& sp = spreads[k];
      const double v = row == 0 ? sp.min : row == 1 ? sp.median : sp.max;
      ImGui::TableNextColumn();
      const std::string who = row == 1 ? "" : " (" + std::to_string(row == 0 ? sp.min_rank : sp.max_rank) + ")";
      if (k == kPeakColumn && row != 1 && top_peak > 0 && int64_t(v) == top_peak)
        ImGui::TextColored(ImVec4(1, 0.8f, 0.3f, 1), "%s%s max", kColumns[k].print(v).c_str(), who.c_str());
      else ImGui::TextUnformatted((kColumns[k].print(v) + who).c_str());
    }
  }
}

// One table for every trace: compared traces side by side, row for row. Only the highest peak
// of all is tagged "max".
void App::stats_table(const NamedMetrics& all, const char* id) {
  const bool several = all.size() > 1;
  int64_t top_peak = 0;
  for (const auto& [name, ms] : all)
    for (const auto& s : ms)
      for (const auto& r : s.ranks) top_peak = std::max(top_peak, r.peak_memory_bytes);
  const int columns = int(std::size(kColumns)) + 3 + several;  // and the compute imbalance
  // Scrolled sideways in a box of its own rows' height (at most half the window), so that what
  // follows it stays in view.
  size_t rows = 1;
  for (const auto& [name, ms] : all)
    for (const auto& s : ms) rows += (s.ranks.size() <= kMostRows ? s.ranks.size() : 3) + 1;
  const float row_h = ImGui::GetTextLineHeight() + 2 * ImGui::GetStyle().CellPadding.y + 1;
  const float table_h = std::min(float(rows) * row_h + ImGui::GetStyle().ScrollbarSize + 4, std::max(120.0f, window_h_ * 0.5f));
  if (!ImGui::BeginTable(id, columns, ImGuiTableFlags_Borders | ImGuiTableFlags_SizingFixedFit | ImGuiTableFlags_ScrollX | ImGuiTableFlags_ScrollY,
                         ImVec2(0, table_h)))
    return;
  ImGui::TableSetupScrollFreeze(2 + several, 1);
  if (several) ImGui::TableSetupColumn("trace");
  ImGui::TableSetupColumn("strategy");
  // The rows' unit, row_unit's when every trace shares it ("stage" for a modeled step, "rank" for
  // PyTorch profiler runs), else "GPU".
  const std::string unit = traces_.empty() ? "GPU" : row_unit(traces_.front().data.run);
  const bool shared = std::all_of(traces_.begin(), traces_.end(), [&](const Loaded& t) { return row_unit(t.data.run) == unit; });
  ImGui::TableSetupColumn(shared ? unit.c_str() : "GPU");
  // Peak memory only where a trace records it (a modeled step records none: no column of "-").
  bool any_memory = false;
  for (const auto& [name, ms] : all)
    for (const auto& s : ms)
      for (const auto& r : s.ranks) any_memory = any_memory || r.has_memory;
  // A modeled step's stages send the pipeline's activations and gradients (its TP and CP traffic
  // is inside the chunks, its DP collectives have no sender): "PP sent", as the group's header says.
  const bool stages = shared && unit == "stage";
  for (const Column& c : kColumns)
    ImGui::TableSetupColumn(stages && &c == &kColumns[0] ? "PP sent" : c.name,
                            &c == &kColumns[kPeakColumn] && !any_memory ? ImGuiTableColumnFlags_Disabled : 0);
  ImGui::TableSetupColumn("imbalance");
  ImGui::TableHeadersRow();
  // A twin's name short, "ring (modeled)": the trace's tag above the table names the profile.
  auto short_name = [&](const std::string& strategy) {
    for (const Loaded& t : traces_)
      if (const std::string of = twin_of(t.data.run, strategy); !of.empty()) return of + " (modeled)";
    return strategy;
  };
  std::vector<std::string> notes;
  for (const auto& [name, ms] : all)
    for (const auto& s : ms) {
      const std::string shown = short_name(s.strategy);
      auto lead = [&](const std::string& gpu) {
        ImGui::TableNextRow();
        if (several) ImGui::TableNextColumn(), ImGui::TextUnformatted(name.c_str());
        ImGui::TableNextColumn(), ImGui::TextUnformatted(shown.c_str());
        ImGui::TableNextColumn(), ImGui::TextUnformatted(gpu.c_str());
      };
      auto peak_cell = [&](double v) {
        if (top_peak > 0 && int64_t(v) == top_peak) ImGui::TextColored(ImVec4(1, 0.8f, 0.3f, 1), "%s max", format_bytes(v).c_str());
        else ImGui::TextUnformatted(kColumns[kPeakColumn].print(v).c_str());
      };
      if (s.ranks.size() <= kMostRows) {
        for (const auto& r : s.ranks) {
          lead(std::to_string(r.rank));
          for (const Column& c : kColumns) {
            ImGui::TableNextColumn();
            if (&c == &kColumns[kPeakColumn]) peak_cell(c.of(r));
            else ImGui::TextUnformatted(c.print(c.of(r)).c_str());
          }
        }
      } else {
        spread_rows(s, lead, top_peak, notes);
      }
      lead("sum");
      const trace::Breakdown& b = s.total;
      int64_t sent = 0;
      for (const auto& r : s.ranks) sent += r.bytes_sent;
      char imbalance[32];
      std::snprintf(imbalance, sizeof imbalance, "%.2f", s.compute_imbalance);
      for (const std::string& cell : {format_bytes(double(sent)), std::string("-"), format_ns(double(b.compute_ns)),
                                      format_ns(double(b.comm_ns)), pct(b.overlap_pct()), format_ns(double(b.exposed_comm_ns)),
                                      format_ns(double(b.idle_ns)), std::string(imbalance)})
        ImGui::TableNextColumn(), ImGui::TextUnformatted(cell.c_str());
    }
  ImGui::EndTable();
  ImGui::PushStyleColor(ImGuiCol_Text, ImGui::GetStyleColorVec4(ImGuiCol_TextDisabled));
  ImGui::TextWrapped("overlap: of all communication; a group's header gives attention's own (\"attention comm N%% hidden\")");
  ImGui::PopStyleColor();
  for (const std::string& n : notes) ImGui::TextColored(ImVec4(1, 0.7f, 0.45f, 1), "%s", n.c_str());
  // Ring steps per pass: ringside's rings take as many in the backward as in the forward; a
  // PyTorch profiler run's, found from its rounds of sends and receives, may not ("3 + 4").
  std::string steps;
  bool differ = false;
  for (const auto& [name, ms] : all)
    for (const auto& s : ms) {
      if (s.steps.empty()) continue;
      const auto forward = size_t(std::count_if(s.steps.begin(), s.steps.end(), [](const trace::StepMetrics& m) { return m.phase == "forward"; }));
      const size_t backward = s.steps.size() - forward;
      differ = differ || forward != backward;
      const std::string count = forward == backward ? std::to_string(forward) : std::to_string(forward) + " + " + std::to_string(backward);
      steps += (steps.empty() ? "" : ", ") + (several ? name + " " : "") + s.strategy + " " + count;
    }
  if (!steps.empty())
    ImGui::TextWrapped("ring steps per pass (F0.. forward, B0.. backward in the group header%s): %s",
                       differ ? "; forward + backward where they differ" : "", steps.c_str());
}

void App::colour_key() {
  auto swatch = [](const std::string& id, Color c, const char* text) {
    ImGui::ColorButton(id.c_str(), ImGui::ColorConvertU32ToFloat4(c), ImGuiColorEditFlags_NoTooltip, ImVec2(10, 10));
    ImGui::SameLine();
    ImGui::TextUnformatted(text);
  };
  ImGui::TextDisabled("colours: compute");
  auto swatches = [&](const std::vector<trace::Kind>& kinds) {
    for (trace::Kind k : kinds) {
      swatch(trace::to_string(k), color_of_kind(k), trace::to_string(k));
      if (k != kinds.back()) ImGui::SameLine();
    }
  };
  swatches(compute_kinds());
  ImGui::TextDisabled("communication (colour-blind safe: Okabe-Ito)");
  swatches(comm_kinds());
  swatch("exposed", kExposedColor, "exposed comm (strip under the comm lane; in a summary row, the row)");
  swatch("hidden", kHiddenColor, "comm hidden under compute");
  swatch("phase", color_of_kind(trace::Kind::phase), "phase, sublayer (grey), ring step (blue); summary row: dark = idle");
  // Memory: ringside's categories, stacked, where a ringside trace is open; a PyTorch profiler
  // run's one series, the allocator's total, in the colour of the category it is held in.
  // None where no open trace has memory (a modeled step): its lanes draw none.
  const bool ringside = traces_.empty() || std::any_of(traces_.begin(), traces_.end(), [](const Loaded& t) {
    return !from_profiler(t.data.run) && std::any_of(t.data.ranks.begin(), t.data.ranks.end(), [](const trace::RankTrace& r) { return !r.memory.empty(); });
  });
  if (ringside) {
    ImGui::TextDisabled("memory (stacked)");
    const char* cats[kNumMemCategories] = {"weights", "grads", "activations", "workspace", "comm buffers"};
    for (int c = 0; c < kNumMemCategories; ++c) {
      swatch("mem" + std::to_string(c), memory_color(c), cats[c]);
      if (c + 1 < kNumMemCategories) ImGui::SameLine();
    }
  }
  for (const Loaded& t : traces_)
    if (from_profiler(t.data.run)) {
      const std::vector<int> held = memory_categories(t.data);
      if (held.empty()) continue;
      ImGui::TextDisabled("memory (PyTorch profiler)");
      swatch("allocated", memory_color(held.front()), "allocated: the allocator's Total Allocated ([memory] events)");
      break;
    }
}

}  // namespace ringside::viz

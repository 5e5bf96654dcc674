// The memory plots: a GPU's live bytes stacked by category (weights, grads, activations,
// workspace, comm buffers; a PyTorch profiler run's one series, the allocator's total), each
// sample held until the next, on one scale for the whole trace (GPUs and strategies compare at a
// glance: half the memory draws half as high), with the peak over forward + backward marked.
#include <algorithm>

#include "viz/app.h"

namespace ringside::viz {

App::Ink App::draw_memory(ImDrawList* dl, const Loaded& t, const Group& g, const Lane& lane, const View& v, float ly) {
  Ink ink;
  const MemorySeries& m = t.memory[lane.process];
  if (m.ts.empty()) return ink;
  const TimeAxis& a = v.axis;
  const int64_t scale = t.memory_scale;
  const float h = lane.height - 4, base = ly + lane.height - 2;
  for (size_t i = 0; i < m.ts.size(); ++i) {
    if (double(m.ts[i]) > v.head) break;
    const float x0 = std::max(a.x0, a.x_of(double(m.ts[i])));
    // Each sample holds until the next; the last until the trace's end; nothing after the play head.
    const double until = std::min(double(i + 1 < m.ts.size() ? m.ts[i + 1] : std::max(m.ts[i], g.end_ns)), v.head);
    const float x1 = std::min(a.x1, a.x_of(until));
    if (x1 < a.x0 || x0 > a.x1) continue;
    float y = base;
    for (int c = 0; c < kNumMemCategories; ++c) {
      const float dh = h * float(double(m.by_category[c][i]) / double(scale));
      dl->AddRectFilled(ImVec2(x0, y - dh), ImVec2(std::max(x1, x0 + 1), y), memory_color(c));
      if (dh > 0) ink.add(y - dh, y);
      y -= dh;
    }
  }
  if (double(m.peak_ts) > v.head) return ink;
  const float px = a.x_of(double(m.peak_ts)), py = base - h * float(double(m.peak) / double(scale));
  dl->AddTriangleFilled(ImVec2(px - 4, py - 7), ImVec2(px + 4, py - 7), ImVec2(px, py - 1), IM_COL32(255, 255, 255, 255));
  // The peak's size: in a collapsed group in the label column, so as not to cover the plot; the
  // highest of the measured groups, and of the modeled ones, in gold (which GPU and strategy peaked).
  const bool top = m.peak == t.top_peak.at(t.modeled(g.strategy));
  const ImU32 colour = top ? IM_COL32(255, 204, 77, 255) : IM_COL32(255, 255, 255, 255);
  if (g.collapsed) {
    const bool every = std::all_of(g.processes.begin(), g.processes.end(), [&](size_t p) { return t.memory[p].peak == m.peak; });
    const std::string who = every && g.processes.size() > 1 ? "each " + row_unit(t.data.run) : row_name(t.data.run, t.data.ranks[lane.process].rank);
    const std::string label = who + " peak " + format_bytes(double(m.peak)) + (top ? " max" : "");
    dl->AddRectFilled(ImVec2(a.x0 - 150, ly + 1), ImVec2(a.x0 - 2, ly + lane.height), IM_COL32(24, 24, 28, 255));
    dl->AddText(ImVec2(a.x0 - 148, ly + std::max(0.0f, (lane.height - 13) * 0.5f)), colour, label.c_str());
    return ink;
  }
  // A trace's memory is one layer's (a step or a plan holds L of them: plan prints that peak); a
  // PyTorch profiler run's, the allocator's over the profiled step.
  const std::string over = from_profiler(t.data.run) ? " (allocated, profiled step)" : " (one layer, fwd+bwd)";
  const std::string label = "peak " + format_bytes(double(m.peak)) + over + (top ? ", the highest" : "");
  const float tw = ImGui::CalcTextSize(label.c_str()).x;
  const float lx = px + 6 + tw <= a.x1 ? px + 6 : std::max(a.x0, px - 6 - tw);
  dl->AddRectFilled(ImVec2(lx - 1, ly), ImVec2(lx + tw + 1, ly + 13), IM_COL32(24, 24, 28, 200));
  dl->AddText(ImVec2(lx, ly - 1), colour, label.c_str());
  return ink;
}

}  // namespace ringside::viz

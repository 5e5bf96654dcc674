// The attention tile maps: the (query block x key block) tiles of every ring, all-gather and
// Ulysses group, coloured by the GPU that computes each, labelled with its ring step, faint until
// the play head has passed it. A modeled twin computes its run's tiles: it shows no map of its own.
#include <algorithm>
#include <cmath>

#include "model/model.h"
#include "viz/app.h"

namespace ringside::viz {

namespace {

// ", 4 documents: 300, 20, 130, 60" for a map over packed documents, else "".
std::string documents(const TileMap& m) {
  if (m.docs.empty()) return "";
  std::string text = ", " + std::to_string(m.docs.size()) + (m.docs.size() == 1 ? " document: " : " documents: ");
  for (size_t i = 0; i < m.docs.size() && i < 8; ++i) text += (i ? ", " : "") + std::to_string(m.docs[i]);
  return text + (m.docs.size() > 8 ? ", ..." : "");
}

}  // namespace

// Every group's map in the order of the timeline; in a lesson, the map of the run the step is
// about first (its twin's run for a modeled twin), so that the step's map is the one in view.
void App::tile_maps() {
  drawn_tile_maps_ = nlohmann::json::array();
  std::string first;
  if (!lesson_steps_.empty() && !traces_.empty())
    if (const auto& focus = lesson_steps_[lesson_step_].focus) {
      const std::string of = twin_of(traces_.front().data.run, focus->strategy);
      first = of.empty() ? focus->strategy : of;
    }
  for (size_t ti = 0; ti < traces_.size(); ++ti) {
    std::vector<const Group*> order;
    for (const Group& g : traces_[ti].layout.groups) order.push_back(&g);
    std::stable_partition(order.begin(), order.end(), [&](const Group* g) { return ti == 0 && g->strategy == first; });
    for (const Group* g : order) {
      const auto m = traces_[ti].tiles.find(g->strategy);  // none for a twin: its map is its run's
      if (m != traces_[ti].tiles.end() && m->second)
        draw_tile_map(traces_[ti], *m->second, view_of(traces_[ti], *g).head, traces_.size() > 1 ? std::string(1, char('A' + ti % 26)) + ": " : std::string());
    }
  }
}

void App::draw_tile_map(const Loaded& t, const TileMap& m, double head, const std::string& prefix) {
  drawn_tile_maps_.push_back({{"group", prefix + m.strategy}, {"layout", m.layout}, {"blocks", m.blocks}, {"docs", m.docs}});
  if (m.every_rank)
    ImGui::Text("%s%s attention tiles (%dx%d): every GPU computes every tile, for its H/P heads", prefix.c_str(), m.strategy.c_str(),
                m.blocks, m.blocks);
  else
    ImGui::Text("%s%s attention tiles (%s, %dx%d%s): colour = GPU, label = ring step", prefix.c_str(), m.strategy.c_str(), m.layout.c_str(),
                m.blocks, m.blocks, documents(m).c_str());
  const std::vector<bool> done = tiles_done(t.data, m, std::isinf(head) ? INT64_MAX : int64_t(head));
  const float cell = std::min(28.0f, 220.0f / float(m.blocks));
  ImDrawList* dl = ImGui::GetWindowDrawList();
  const ImVec2 o = ImGui::GetCursorScreenPos();
  for (int q = 0; q < m.blocks; ++q)
    for (int k = 0; k < m.blocks; ++k) {
      const Tile& tile = m.at(q, k);
      const ImVec2 a(o.x + float(k) * cell, o.y + float(q) * cell), b(a.x + cell - 1, a.y + cell - 1);
      if (tile.masked) {
        dl->AddRectFilled(a, b, IM_COL32(40, 40, 40, 255));
        continue;
      }
      Color c = rank_color(tile.rank);
      if (!done[size_t(q) * m.blocks + k]) c = (c & 0x00ffffff) | 0x50000000;
      dl->AddRectFilled(a, b, c);
      // Partly masked: the causal triangle of a block against itself under the causal mask alone;
      // any other shape (a window, a document edge, striped tokens) a shade over the whole tile,
      // not a guess of its shape.
      if (tile.partial && q == k && m.causal_diagonal)
        dl->AddTriangleFilled(ImVec2(a.x, a.y), ImVec2(b.x, a.y), ImVec2(b.x, b.y), IM_COL32(40, 40, 40, 200));
      else if (tile.partial)
        dl->AddRectFilled(a, b, IM_COL32(40, 40, 40, 110));
      if (cell >= 14 && tile.rank >= 0) dl->AddText(ImVec2(a.x + 2, b.y - 13), IM_COL32(0, 0, 0, 255), std::to_string(tile.step).c_str());
    }
  ImGui::Dummy(ImVec2(cell * float(m.blocks), cell * float(m.blocks)));
  ImGui::PushTextWrapPos(0.0f);  // wrapped at the panel's edge, never cut off
  ImGui::TextDisabled("rows: query blocks, columns: key blocks; dark: masked; shaded: partly masked; faint: not yet computed");
  ImGui::PopTextWrapPos();
  if (m.every_rank) return;
  int P = 0;
  for (const Tile& tile : m.tiles) P = std::max(P, tile.rank + 1);
  // One entry per hue, naming every GPU that shares it (the hues repeat after kRankColors).
  const int hues = std::min(P, kRankColors);
  for (int hue = 0; hue < hues; ++hue) {
    ImGui::ColorButton(("gpu" + std::to_string(hue)).c_str(), ImGui::ColorConvertU32ToFloat4(rank_color(hue)),
                       ImGuiColorEditFlags_NoTooltip, ImVec2(10, 10));
    ImGui::SameLine();
    ImGui::TextUnformatted(rank_color_key(hue, P).c_str());
    if (P <= kRankColors && hue % 8 != 7 && hue + 1 < hues) ImGui::SameLine();
  }
}

}  // namespace ringside::viz

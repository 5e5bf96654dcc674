#include "trace/tile_map.h"

#include <algorithm>
#include <climits>
#include <map>

namespace ringside::trace {

std::optional<TileMap> tile_map(const TraceData& t, const std::string& strategy) {
  // A strategy's label is its name, or its name and a variant ("ring zigzag" in lesson 4, where
  // one trace holds a run per layout): a variant that names a layout overrides otherData's.
  // A modeled twin (otherData.modeled_groups) is its recorded run's map; a dry run's twin
  // carries its own config.
  std::string label = strategy;
  const nlohmann::json* config = nullptr;
  if (const auto g = t.other.find("modeled_groups"); g != t.other.end() && g->is_object())
    if (const auto twin = g->find(strategy); twin != g->end() && twin->is_object()) {
      if (const auto of = twin->find("of"); of != twin->end() && of->is_string()) label = of->get<std::string>();
      if (const auto dry = twin->find("dry_run"); dry != twin->end() && dry->is_object()) config = &*dry;
    }
  const std::string base = label.substr(0, label.find(' '));
  const std::string variant = base.size() < label.size() ? label.substr(base.size() + 1) : "";
  if (base != "ring" && base != "ulysses") return std::nullopt;
  const bool own_config = config != nullptr;
  if (!config) {
    const auto cfg = t.other.find("config");
    if (cfg == t.other.end() || !cfg->is_object()) return std::nullopt;
    config = &*cfg;
  }
  const nlohmann::json* cfg = config;
  int P = 0;
  for (const RankTrace& r : t.ranks)
    if (r.strategy == strategy) P = std::max(P, r.rank + 1);
  if (P < 1 || P > 64) return std::nullopt;  // a map beyond 128 x 128 tiles says nothing
  // A config of the wrong types (a foreign or hand-edited file) gives no map, not an error.
  const auto c = cfg->find("causal");
  const bool causal = c == cfg->end() || !c->is_boolean() || c->get<bool>();
  const nlohmann::json& described = own_config ? *cfg : t.other;  // a dry run's config names its layout
  const auto lay = described.find("layout");
  std::string layout = lay != described.end() && lay->is_string() ? lay->get<std::string>() : (causal ? "zigzag" : "contiguous");
  const std::string word = variant.substr(0, variant.find(' '));
  if (word == "contiguous" || word == "zigzag" || word == "striped") layout = word;
  // Packed documents or a window: the mask is not the causal triangle over the layout's chunks,
  // and a per-document layout's chunks are not P or 2P blocks, so this picture would mislead.
  if (word == "packed" || cfg->contains("docs") || cfg->contains("window") || layout == "zigzag-per-doc" ||
      layout == "greedy")
    return std::nullopt;
  TileMap m;
  m.strategy = strategy;
  if (base == "ulysses") {
    m.layout = "contiguous";
    m.blocks = P;
    for (int q = 0; q < P; ++q)
      for (int k = 0; k < P; ++k) m.tiles.push_back(Tile{-1, 0, causal && k > q, causal && k == q});
    return m;
  }
  m.layout = layout;
  const bool zigzag = layout == "zigzag", striped = layout == "striped";
  m.blocks = zigzag ? 2 * P : P;
  auto owner = [&](int c) { return zigzag ? (c < P ? c : 2 * P - 1 - c) : c; };
  for (int q = 0; q < m.blocks; ++q)
    for (int k = 0; k < m.blocks; ++k) {
      Tile tile;
      tile.rank = owner(q);
      tile.step = ((owner(q) - owner(k)) % P + P) % P;
      // Striped blocks are rank r's tokens r, r+P, ...: every pair is partly visible.
      tile.masked = causal && !striped && k > q;
      tile.diagonal = causal && (striped || k == q);
      m.tiles.push_back(tile);
    }
  return m;
}

std::vector<bool> tiles_done(const TraceData& t, const TileMap& m, int64_t t_ns) {
  std::vector<bool> done(m.tiles.size(), false);
  // Per rank, the start of each forward ring step; for Ulysses, the first forward attention op.
  std::map<std::pair<int, int>, int64_t> step_start;
  int64_t attention_start = INT64_MAX;
  for (const RankTrace& r : t.ranks) {
    if (r.strategy != m.strategy) continue;
    for (const Event& e : r.events) {
      if (e.phase != "forward") continue;
      if (e.cat == "ring_step") step_start[{r.rank, e.step}] = e.end_ns();  // done when the step has run
      if (e.cat == "attention") attention_start = std::min(attention_start, e.end_ns());
    }
  }
  for (size_t i = 0; i < m.tiles.size(); ++i) {
    const Tile& tile = m.tiles[i];
    if (tile.masked) continue;
    if (tile.rank < 0) {
      done[i] = attention_start <= t_ns;
    } else {
      auto it = step_start.find({tile.rank, tile.step});
      done[i] = it != step_start.end() && it->second <= t_ns;
    }
  }
  return done;
}

}  // namespace ringside::trace

#include "trace/tile_map.h"

#include "trace/run_info.h"

#include <algorithm>
#include <climits>
#include <map>
#include <tuple>

namespace ringside::trace {

namespace {

// The layout a label names ("ring zigzag", "ring packed greedy": the first word that is one),
// or "".
std::string layout_named(const std::string& variant) {
  size_t at = 0;
  while (at < variant.size()) {
    const size_t end = std::min(variant.find(' ', at), variant.size());
    const std::string word = variant.substr(at, end - at);
    for (const char* l : kLayoutNames)
      if (word == l) return word;
    at = end + 1;
  }
  return "";
}

using RunKey = std::tuple<int64_t, int64_t, int64_t>;  // first, len, stride

// The ring's map from what its forward steps recorded: the blocks are the query runs the ranks
// computed, in order of their first slot; a tile is computed by the rank whose step recorded
// the pair, at that step; a pair no step recorded is masked. nullopt when a step recorded too
// many pairs, a key run is no query run, or the picture would exceed 128 x 128 tiles.
std::optional<TileMap> recorded_map(const TraceData& t, const std::string& strategy) {
  struct Computed {
    int rank, step;
    TilePair pair;
  };
  std::vector<Computed> pairs;
  for (const RankTrace& r : t.ranks) {
    if (r.strategy != strategy) continue;
    for (const Event& e : r.events) {
      if (e.kind != Kind::ring_step || e.phase != "forward") continue;
      if (!e.tiles_complete) return std::nullopt;
      for (const TilePair& p : e.tiles) pairs.push_back({r.rank, e.step, p});
    }
  }
  std::map<RunKey, int> block;  // query run -> its row
  for (const Computed& c : pairs) block.emplace(RunKey{c.pair.q_first, c.pair.q_len, c.pair.q_stride}, 0);
  if (block.empty() || block.size() > 128) return std::nullopt;
  int index = 0;
  for (auto& [run, row] : block) row = index++;
  TileMap m;
  m.blocks = int(block.size());
  m.tiles.assign(size_t(m.blocks) * size_t(m.blocks), Tile{-1, 0, true, false});
  for (const Computed& c : pairs) {
    const auto k = block.find(RunKey{c.pair.k_first, c.pair.k_len, c.pair.k_stride});
    if (k == block.end()) return std::nullopt;
    const int q = block.at(RunKey{c.pair.q_first, c.pair.q_len, c.pair.q_stride});
    m.tiles[size_t(q) * size_t(m.blocks) + size_t(k->second)] = Tile{c.rank, c.step, false, c.pair.partial};
  }
  return m;
}

}  // namespace

std::optional<TileMap> tile_map(const TraceData& t, const std::string& strategy) {
  // A strategy's label is its name, or its name and a variant ("ring zigzag" in lesson 4, where
  // one trace holds a run per layout). A modeled twin (otherData.modeled_groups) names its
  // recorded run. The configuration is the group's own (RunInfo::config_of: a lesson's run on
  // packed documents, a dry run's twin), else the trace's.
  const RunInfo& info = t.run;
  std::string label = strategy;
  if (const GroupInfo* twin = info.group(strategy); twin && !twin->of.empty()) label = twin->of;
  const std::string base = label.substr(0, label.find(' '));
  const std::string variant = base.size() < label.size() ? label.substr(base.size() + 1) : "";
  // The kind of map the run recorded (RankTrace::tile_map: its attention scheme's), alike on its ranks.
  std::string kind;
  int P = 0;
  for (const RankTrace& r : t.ranks)
    if (r.strategy == strategy) P = std::max(P, r.rank + 1), kind = r.tile_map;
  if (kind.empty()) return std::nullopt;
  const nlohmann::json* config = info.config_of(strategy);
  if (!config || !config->is_object()) return std::nullopt;
  if (P < 1 || P > 64) return std::nullopt;  // a map beyond 128 x 128 tiles says nothing
  // A config of the wrong types (a foreign or hand-edited file) gives no map, not an error.
  const auto c = config->find("causal");
  const bool causal = c == config->end() || !c->is_boolean() || c->get<bool>();
  std::vector<int64_t> docs;
  if (const auto d = config->find("docs"); d != config->end() && d->is_array())
    for (const nlohmann::json& len : *d)
      if (len.is_number_integer() && len.get<int64_t>() > 0) docs.push_back(len.get<int64_t>());
  const bool window = config->contains("window");
  if (kind == kTileMapEveryRank) {
    // Every rank computes every tile, for its H/P heads, over the whole sequence in order.
    if (!docs.empty() || window) return std::nullopt;
    TileMap m;
    m.strategy = strategy, m.layout = "contiguous", m.blocks = P, m.causal_diagonal = causal, m.every_rank = true;
    for (int q = 0; q < P; ++q)
      for (int k = 0; k < P; ++k) m.tiles.push_back(Tile{-1, 0, causal && k > q, causal && k == q});
    return m;
  }
  std::optional<TileMap> m = recorded_map(t, strategy);
  if (!m) return std::nullopt;
  m->strategy = strategy;
  // The layout the configuration names, else otherData's (a trace whose config has none).
  const auto lay = config->find("layout");
  const std::string layout = lay != config->end() && lay->is_string() ? lay->get<std::string>() : info.layout;
  m->layout = !layout.empty() ? layout : causal ? "zigzag" : "contiguous";
  // A trace written before group configs named a run's layout only in its label.
  if (const std::string named = layout_named(variant); !named.empty() && !info.group_configs.count(label)) m->layout = named;
  m->docs = std::move(docs);
  m->causal_diagonal = causal && m->docs.empty() && !window && m->layout != "striped";
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
      if (e.kind == Kind::ring_step) step_start[{r.rank, e.step}] = e.end_ns();  // done when the step has run
      if (e.kind == Kind::attention) attention_start = std::min(attention_start, e.end_ns());
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

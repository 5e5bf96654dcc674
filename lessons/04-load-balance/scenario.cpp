// Lesson 4: causal load balance. With a causal mask, query token t sees only keys <= t; split
// the sequence in contiguous blocks and the last rank works P times as hard as the first. Zigzag
// and striped layouts give every rank the same share of the triangle.
#include <algorithm>
#include <numeric>

#include "lessons/lesson.h"
#include "parallel/formulas.h"
#include "trace/tile_map.h"

namespace ringside::lessons {

namespace {

// The tile map as text: tile (q, k) is "r<rank>.<step>", where step is the ring step at which
// the rank computes it; "  .  " is wholly masked; a trailing '/' marks a partly masked tile.
std::string tile_text(const trace::TileMap& m) {
  std::string out = "      k:";
  for (int k = 0; k < m.blocks; ++k) out += fmt("%5d ", k);
  out.pop_back();
  out += '\n';
  for (int q = 0; q < m.blocks; ++q) {
    out += fmt("   q %2d ", q);
    for (int k = 0; k < m.blocks; ++k) {
      const trace::Tile& t = m.tiles[size_t(q * m.blocks + k)];
      out += t.masked ? "    . " : fmt(" r%d.%d%s", t.rank, t.step, t.diagonal ? "/" : " ");
    }
    while (out.back() == ' ') out.pop_back();
    out += '\n';
  }
  return out;
}

}  // namespace

void load_balance(Script& L) {
  LayerConfig cfg;
  cfg.b = 1, cfg.s = 512, cfg.h = 128, cfg.H = 8, cfg.Hkv = 4, cfg.f = 512;
  cfg.causal = true;
  const int P = 4;
  const Strategy ring = find_strategy("ring");

  struct Run {
    Layout layout;
    std::string label;
    std::vector<RankResult> ranks;
  };
  std::vector<Run> runs;
  for (Layout l : {Layout::contiguous, Layout::zigzag, Layout::striped}) {
    LayerConfig c = cfg;
    c.layout = l;
    runs.push_back({l, std::string("ring ") + to_string(l), {}});
    runs.back().ranks = L.run(ring, c, P, runs.back().label);
  }
  L.trace.other["layout"] = "zigzag";  // the label of each run names its own

  // The per-rank work table of one layout: measured FLOPs against ring_attention_flops.
  auto work = [&](const Run& run, const char* key) {
    LayerConfig c = cfg;
    c.layout = run.layout;
    Table t({"rank", "tokens", "attention MFLOP", "formula", "/ mean"});
    double sum = 0, max = 0;
    for (const RankResult& r : run.ranks) sum += r.attention_flops, max = std::max(max, r.attention_flops);
    const double mean = sum / P;
    for (int r = 0; r < P; ++r) {
      const RankResult& rr = run.ranks[size_t(r)];
      const std::vector<int64_t> pos = layout_positions(run.layout, cfg.s, P, r);
      std::string tokens;
      if (run.layout == Layout::striped) tokens = fmt("%d, %d, %d, ...", r, r + P, r + 2 * P);
      else if (run.layout == Layout::zigzag)
        tokens = fmt("[%lld, %lld) + [%lld, %lld)", (long long)pos.front(), (long long)(pos.front() + cfg.s / (2 * P)),
                     (long long)pos[pos.size() / 2], (long long)(pos.back() + 1));
      else tokens = fmt("[%lld, %lld)", (long long)pos.front(), (long long)(pos.back() + 1));
      L.record(fmt("%s_flops_rank%d", key, r), rr.attention_flops);
      t.row({std::to_string(r), tokens, fmt("%.2f", rr.attention_flops / 1e6), fmt("%.2f", ring_attention_flops(c, P, r) / 1e6),
             fmt("%.3f", rr.attention_flops / mean)});
    }
    L.table(t);
    return L.record(fmt("%s_imbalance", key), max / mean);
  };
  auto map_of = [&](const Run& run) {
    const std::optional<trace::TileMap> m = trace::tile_map(L.trace, run.label);
    RS_CHECK(m.has_value(), "lesson 4: no tile map for ", run.label);
    return tile_text(*m);
  };

  // ---- 1. contiguous ------------------------------------------------------------------------
  L.step("The causal triangle, split in contiguous blocks", L.phase(runs[0].label, "forward"));
  L.say("Causal attention on P = %d ranks; the layer:", P);
  L.say("  %s", cfg.summary().c_str());
  L.say("Query token t sees keys 0..t: the score matrix is a triangle. Cut the sequence into P");
  L.say("contiguous blocks and rank r's queries see r full blocks plus the diagonal one. The tile");
  L.say("map: rows are query blocks, columns key blocks; r2.1 means rank 2 computes the tile at ring");
  L.say("step 1; '.' is masked, never computed; '/' is the diagonal, half masked.");
  L.blank();
  L.block(map_of(runs[0]));
  L.blank();
  const double contiguous = work(runs[0], "contiguous");
  L.blank();
  L.say("(MFLOP: measured, as the ranks counted them; formula: ring_attention_flops.)");
  L.say("Rank %d does %.2fx the mean work; every ring step waits for the slowest rank, so the", P - 1, contiguous);
  L.say("others idle. With c = s/P tokens a block, rank r has r c^2 + c(c+1)/2 visible pairs: the");
  L.say("imbalance tends to (2P - 1)/P = %.2f as blocks grow.", (2.0 * P - 1) / P);

  // ---- 2. zigzag ------------------------------------------------------------------------------
  L.step("Zigzag: chunks r and 2P-1-r", L.phase(runs[1].label, "forward"));
  L.say("Cut the sequence into 2P chunks and give rank r chunk r (early, little work) and chunk");
  L.say("2P-1-r (late, much work). Every rank now holds the same area of the triangle. At ring step");
  L.say("i > 0 a rank computes either its whole Q against the first half of the arriving K/V, or the");
  L.say("second half of its Q against the whole K/V (ring-flash-attention's zigzag): equal work.");
  L.blank();
  L.block(map_of(runs[1]));
  L.blank();
  const double zigzag = work(runs[1], "zigzag");
  L.blank();
  L.say("Imbalance %.3f: exactly balanced. ringside uses zigzag by default when the mask is causal.", zigzag);

  // ---- 3. striped ---------------------------------------------------------------------------
  L.step("Striped: token t on rank t mod P", L.phase(runs[2].label, "forward"));
  L.say("Brandon et al. 2023 (Striped Attention) deal tokens round-robin. Every block of keys is");
  L.say("then partly visible to every block of queries, so every tile is computed and every tile");
  L.say("is a little triangle. Rank r's query t = r + P j sees t + 1 keys:");
  L.blank();
  L.block(map_of(runs[2]));
  L.blank();
  const double striped = work(runs[2], "striped");
  L.blank();
  L.say("Imbalance %.3f: rank P-1 has (P-1) c more pairs than rank 0, out of about s^2/(2P) each.", striped);

  // ---- 4. same answer ---------------------------------------------------------------------------
  L.step("Three layouts, one answer");
  double diff = 0;
  for (size_t i = 1; i < runs.size(); ++i)
    diff = std::max({diff, relative_error(runs[i].ranks[0].out, runs[0].ranks[0].out),
                     relative_error(runs[i].ranks[0].dx, runs[0].ranks[0].dx)});
  L.record("max_layout_difference", diff);
  L.say("The layouts change who computes what, not the result: out and dx of zigzag and striped");
  L.say("differ from contiguous by at most %.1e (relative), fp32 summing in another order.", diff);
  L.say("RoPE, dropout and the mask all use each token's global position, so a token's math does");
  L.say("not depend on which rank holds it.");
  L.blank();
  Table t({"layout", "imbalance (max / mean work)"});
  for (const Run& run : runs)
    t.row({to_string(run.layout), fmt("%.3f", run.layout == Layout::contiguous ? contiguous
                                              : run.layout == Layout::zigzag   ? zigzag
                                                                                : striped)});
  L.table(t);
  L.say("Step 5 turns the imbalance into time, on a modeled GPU.");

  // ---- 5. balance as time, on a GPU ----------------------------------------------------------------
  // The same ring code, dry-run at a size where attention is most of the layer (s >> h), and
  // modeled on L.hw: the imbalance of work becomes time the other GPUs spend idle.
  LayerConfig big;
  big.b = 1, big.s = 65536, big.h = 1024, big.H = 8, big.Hkv = 8, big.f = 4096;
  big.causal = true;
  struct Modeled {
    Layout layout;
    const trace::StrategyMetrics* m;
  };
  std::vector<Modeled> modeled;
  for (Layout l : {Layout::contiguous, Layout::zigzag}) {
    LayerConfig c = big;
    c.layout = l;
    modeled.push_back({l, &L.dry_run(ring, c, P, std::string("ring ") + to_string(l) + " s=64K")});
  }
  L.step(fmt("Balance as time, on %s", L.hw.name.c_str()), L.phase(L.modeled_name("ring contiguous s=64K")));
  L.say("On a GPU the ring steps are lock-step: each rank waits for the block its neighbour sends,");
  L.say("so at every step the slowest rank sets the pace and the others idle. The ring's own code,");
  L.say("dry-run (no math, only the schedule) for a layer where attention is most of the work,");
  L.say("  %s,", big.summary().c_str());
  L.say("on P = %d GPUs, modeled on %s (bf16). Per GPU, forward + backward:", P, L.hw.name.c_str());
  L.blank();
  Table tm({"layout", "rank", "fwd attention GFLOP", "compute", "idle", "layer time"});
  double time_of[2] = {0, 0};
  for (size_t li = 0; li < modeled.size(); ++li) {
    const Modeled& mo = modeled[li];
    LayerConfig c = big;
    c.layout = mo.layout;
    const double layer = double(layer_ns(*mo.m));
    time_of[li] = layer;
    const std::string key = to_string(mo.layout);
    for (const trace::RankMetrics& r : mo.m->ranks) {
      L.record(fmt("modeled_%s_idle_ns_rank%d", key.c_str(), r.rank), double(r.time.idle_ns));
      tm.row({r.rank == 0 ? key : "", std::to_string(r.rank), fmt("%.1f", ring_attention_flops(c, P, r.rank) / 1e9),
              format_ns(double(r.time.compute_ns)), format_ns(double(r.time.idle_ns)), r.rank == 0 ? format_ns(layer) : ""});
    }
    L.record(fmt("modeled_%s_layer_ns", key.c_str()), layer);
    double lo = 1e300, hi = 0, sum = 0;
    for (int r = 0; r < P; ++r) {
      const double f = ring_attention_flops(c, P, r);
      lo = std::min(lo, f), hi = std::max(hi, f), sum += f;
    }
    L.record(fmt("modeled_%s_work_imbalance", key.c_str()), hi / (sum / P));
  }
  L.table(tm);
  const double ratio = L.record("modeled_contiguous_over_zigzag", time_of[0] / time_of[1]);
  L.blank();
  L.say("Contiguous takes %.2fx the zigzag layer's time: close to its work imbalance, %.2f,", ratio,
        double(L.numbers["modeled_contiguous_work_imbalance"]));
  L.say("since every step waits for the rank with the most visible keys; the rest of the layer");
  L.say("(the GEMMs) is balanced and dilutes it a little. With zigzag no GPU idles for long: the");
  L.say("balance of work is time saved. (These times are modeled, the same on every run.)");
}

}  // namespace ringside::lessons

// Lesson 4: causal load balance. With a causal mask, query token t sees only keys <= t; split
// the sequence in contiguous blocks and the last rank works P times as hard as the first. Zigzag
// and striped layouts give every rank the same share of the triangle; packed documents need each
// document cut instead (zigzag-per-doc, greedy).
#include <algorithm>
#include <numeric>

#include "lessons/lesson.h"
#include "parallel/formulas.h"
#include "parallel/groups.h"
#include "parallel/layout.h"
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
      out += t.masked ? "    . " : fmt(" r%d.%d%s", t.rank, t.step, t.partial ? "/" : " ");
    }
    while (out.back() == ' ') out.pop_back();
    out += '\n';
  }
  return out;
}

// Which half of the work a zigzag step is, from the chunks that meet under the causal mask:
// 0 its own Q and K/V (step 0, causal), 1 all of Q against the first half of the K/V (the arriving
// block is of an earlier rank), 2 the second half of Q against all of the K/V (a later rank's);
// ring-flash-attention's zigzag_ring_flash_attn_forward does the same three.
struct ZigzagPart {
  int kind = 0;
  std::vector<int64_t> q_chunks, kv_chunks;  // the chunks that meet, of 2P
  double pairs = 0;                          // visible (query, key) pairs
};

// The chunks of m slots a rank holds under zigzag (layout_positions), ascending.
std::vector<int64_t> zigzag_chunks(int64_t s, int P, int rank) {
  std::vector<int64_t> chunks;
  for (int64_t pos : layout_positions(Layout::zigzag, s, P, rank))
    if (chunks.empty() || chunks.back() != pos / (s / (2 * P))) chunks.push_back(pos / (s / (2 * P)));
  return chunks;
}

ZigzagPart zigzag_part(int64_t s, int P, int rank, int kv_of) {
  const int64_t m = s / (2 * P);
  const std::vector<int64_t> mine = zigzag_chunks(s, P, rank), theirs = zigzag_chunks(s, P, kv_of);
  ZigzagPart part;
  for (int64_t q : mine)
    for (int64_t k : theirs) {
      const double pairs = k < q ? double(m * m) : k == q ? double(m * (m + 1) / 2) : 0;  // causal: key <= query
      if (pairs == 0) continue;
      part.pairs += pairs;
      if (std::find(part.q_chunks.begin(), part.q_chunks.end(), q) == part.q_chunks.end()) part.q_chunks.push_back(q);
      if (std::find(part.kv_chunks.begin(), part.kv_chunks.end(), k) == part.kv_chunks.end()) part.kv_chunks.push_back(k);
    }
  std::sort(part.kv_chunks.begin(), part.kv_chunks.end());
  if (rank == kv_of) part.kind = 0;
  else if (part.q_chunks == mine && part.kv_chunks == std::vector<int64_t>{theirs.front()}) part.kind = 1;
  else if (part.q_chunks == std::vector<int64_t>{mine.back()} && part.kv_chunks == theirs) part.kind = 2;
  else part.kind = -1;  // not one of the three: the lesson says so below
  return part;
}

std::string chunk_list(const std::vector<int64_t>& chunks) {
  std::string out;
  for (int64_t c : chunks) out += (out.empty() ? "" : ", ") + std::to_string(c);
  return out;
}

}  // namespace

void load_balance(Script& L) {
  LayerConfig cfg;
  cfg.b = 1, cfg.s = 512, cfg.h = 128, cfg.H = 8, cfg.Hkv = 4, cfg.f = 512;
  cfg.causal = true;
  const int P = 4;

  struct Run {
    Layout layout;
    std::string label;
    RunPlan plan;
    std::vector<RunRecord> ranks;
  };
  std::vector<Run> runs;
  for (Layout l : {Layout::contiguous, Layout::zigzag, Layout::striped}) {
    runs.push_back({l, std::string("ring ") + to_string(l), plan_of("ring", cfg, P, l), {}});
    runs.back().ranks = L.run(runs.back().plan, runs.back().label);
  }
  // The trace's config is the first run's; the zigzag and striped runs carry their own
  // (RunInfo::group_configs), and so do the packed runs below: each tile map is its run's.

  // The per-rank work table of one layout: measured FLOPs against ring_attention_flops.
  auto work = [&](const Run& run, const char* key) {
    Table t({"rank", "tokens", "attention MFLOP", "formula", "/ mean"});
    double sum = 0, max = 0;
    for (const RunRecord& r : run.ranks) sum += r.attention_flops, max = std::max(max, r.attention_flops);
    const double mean = sum / P;
    for (int r = 0; r < P; ++r) {
      const RunRecord& rr = run.ranks[size_t(r)];
      const std::vector<int64_t> pos = layout_positions(run.layout, cfg.s, P, r);
      std::string tokens;
      if (run.layout == Layout::striped) tokens = fmt("%d, %d, %d, ...", r, r + P, r + 2 * P);
      else if (run.layout == Layout::zigzag)
        tokens = fmt("[%lld, %lld) + [%lld, %lld)", (long long)pos.front(), (long long)(pos.front() + cfg.s / (2 * P)),
                     (long long)pos[pos.size() / 2], (long long)(pos.back() + 1));
      else tokens = fmt("[%lld, %lld)", (long long)pos.front(), (long long)(pos.back() + 1));
      L.record(fmt("%s_flops_rank%d", key, r), rr.attention_flops);
      t.row({std::to_string(r), tokens, fmt("%.2f", rr.attention_flops / 1e6), fmt("%.2f", parallel_attention_flops(run.plan, r) / 1e6),
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
  L.say_config(cfg);
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
  // The schedule step by step: which K/V block each rank computed with (the run's step records)
  // and which half of the work that was (the layout's chunks that meet under the mask).
  L.say("Step by step, the forward: the K/V block each rank computes with at ring step i is rank");
  L.say("r - i's (the run's step records), and the chunks that meet under the mask say which half");
  L.say("of the work it does (the layout's chunks, m = s/(2P) = %lld tokens each):", (long long)(cfg.s / (2 * P)));
  L.blank();
  const char* kinds[] = {"full (own, causal)", "all Q x first half K/V", "second half Q x all K/V"};
  const double step_flops_per_pair = 4.0 * double(cfg.d()) * double(cfg.H) * double(cfg.b);
  Table steps({"step", "rank", "K/V of rank", "chunks Q x K/V", "computes", "MFLOP"});
  for (int i = 0; i < P; ++i)
    for (int r = 0; r < P; ++r) {
      const auto& records = runs[1].ranks[size_t(r)].steps;
      const auto rec = std::find_if(records.begin(), records.end(), [i](const StepRecord& x) { return x.phase == "forward" && x.step == i; });
      RS_CHECK(rec != records.end(), "lesson 4: rank ", r, " recorded no forward step ", i);
      const ZigzagPart part = zigzag_part(cfg.s, P, r, rec->block_of);
      RS_CHECK(part.kind >= 0, "lesson 4: zigzag step ", i, " of rank ", r, " is none of ring-flash-attention's three halves");
      RS_CHECK(rec->flops == part.pairs * step_flops_per_pair, "lesson 4: zigzag step ", i, " of rank ", r, " computed ", rec->flops,
               " FLOPs, its chunks ", part.pairs * step_flops_per_pair);
      // The backward's step i: the same block and the same pairs.
      const auto back = std::find_if(records.begin(), records.end(), [i](const StepRecord& x) { return x.phase == "backward" && x.step == i; });
      RS_CHECK(back != records.end() && back->block_of == rec->block_of && back->computed == rec->computed, "lesson 4: zigzag rank ", r,
               "'s backward step ", i, " is not its forward's block and pairs");
      L.record(fmt("zigzag_step%d_rank%d_kv_of", i, r), rec->block_of);
      L.record(fmt("zigzag_step%d_rank%d_part", i, r), part.kind);
      steps.row({r == 0 ? std::to_string(i) : "", std::to_string(r), std::to_string(rec->block_of),
                 chunk_list(part.q_chunks) + " x " + chunk_list(part.kv_chunks), kinds[part.kind], fmt("%.2f", rec->flops / 1e6)});
    }
  L.table(steps);
  L.blank();
  L.say("Every step i > 0 is two full tiles of m x m on every rank; step 0 two diagonal tiles and");
  L.say("one full. The backward's step i computes the same pairs with the same block (its step");
  L.say("records say so), as ring-flash-attention's zigzag backward does.");
  L.say("Imbalance %.3f: exactly balanced. ringside uses zigzag by default when the mask is causal", zigzag);
  L.say("over one sequence (over packed documents, striped: step 6).");

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
    RunPlan plan;
    const trace::StrategyMetrics* m;
  };
  std::vector<Modeled> modeled;
  for (Layout l : {Layout::contiguous, Layout::zigzag}) {
    const RunPlan plan = plan_of("ring", big, P, l);
    modeled.push_back({l, plan, &L.dry_run(plan, std::string("ring ") + to_string(l) + " s=64K")});
  }
  L.step(fmt("Balance as time, on %s", L.hw.name.c_str()), L.phase(L.modeled_name("ring contiguous s=64K")));
  L.say("On a GPU the ring steps are lock-step: each rank waits for the block its neighbour sends,");
  L.say("so at every step the slowest rank sets the pace and the others idle. The ring's own code,");
  L.say("dry-run (no math, only the schedule) for a layer where attention is most of the work,");
  L.say_config(big, ",");
  L.say("on P = %d GPUs, modeled on %s (bf16). Per GPU, forward + backward:", P, L.hw.name.c_str());
  L.blank();
  Table tm({"layout", "rank", "fwd attention GFLOP", "compute", "idle", "layer time"});
  double time_of[2] = {0, 0};
  for (size_t li = 0; li < modeled.size(); ++li) {
    const Modeled& mo = modeled[li];
    const double layer = double(layer_ns(*mo.m));
    time_of[li] = layer;
    const std::string key = to_string(mo.layout);
    for (const trace::RankMetrics& r : mo.m->ranks) {
      L.record(fmt("modeled_%s_idle_ns_rank%d", key.c_str(), r.rank), double(r.time.idle_ns));
      tm.row({r.rank == 0 ? key : "", std::to_string(r.rank), fmt("%.1f", parallel_attention_flops(mo.plan, r.rank) / 1e9),
              format_ns(double(r.time.compute_ns)), format_ns(double(r.time.idle_ns)), r.rank == 0 ? format_ns(layer) : ""});
    }
    L.record(fmt("modeled_%s_layer_ns", key.c_str()), layer);
    std::vector<double> work;
    for (int r = 0; r < P; ++r) work.push_back(parallel_attention_flops(mo.plan, r));
    L.record(fmt("modeled_%s_work_imbalance", key.c_str()), trace::max_over_mean(work));
  }
  L.table(tm);
  L.trust(model::run_kind(false, false, parse_parallel_config("ring"), "bf16"));
  const double ratio = L.record("modeled_contiguous_over_zigzag", time_of[0] / time_of[1]);
  L.blank();
  L.say("Contiguous takes %.2fx the zigzag layer's time: close to its work imbalance, %.2f,", ratio,
        double(L.numbers["modeled_contiguous_work_imbalance"]));
  L.say("since every step waits for the rank with the most visible keys; the rest of the layer");
  L.say("(the GEMMs) is balanced and dilutes it a little. With zigzag no GPU idles for long: the");
  L.say("balance of work is time saved. (These times are modeled, the same on every run. The");
  L.say("twins of this lesson's small runs, s = 512, are launch- and latency-bound: their times in");
  L.say("the viewer say nothing about balance, which is why this step models s = 64K.)");

  // ---- 6. packed documents ---------------------------------------------------------------------
  // Real training packs ragged documents into one sequence, each attending only to itself
  // (FlashAttention's cu_seqlens). Zigzag over the whole pack balances the big triangle, which is
  // no longer the work: the work is one small triangle per document. The layouts that cut each
  // document instead, on a sequence that does not divide: s = 510 on 4 ranks.
  LayerConfig packed = cfg;
  packed.s = 510, packed.docs = {300, 20, 130, 60};
  double pairs = 0;
  for (int64_t len : packed.docs) pairs += double(len) * double(len + 1) / 2;
  const double flops_per_pair = 4.0 * double(packed.d()) * double(packed.H);
  L.record("packed_flops_total", pairs * flops_per_pair);
  const ReferenceRun packed_ref = run_reference(packed, DType::f32);
  struct PackedRun {
    Layout layout;
    RunPlan plan;
    std::vector<RunRecord> ranks;
  };
  std::vector<PackedRun> packed_runs;
  for (Layout l : {Layout::zigzag, Layout::striped, Layout::zigzag_per_doc, Layout::greedy}) {
    const RunPlan plan = plan_of("ring", packed, P, l);
    packed_runs.push_back({l, plan, L.run(plan, std::string("ring packed ") + to_string(l))});
  }
  L.step("Packed documents: balance each document, not the sequence", L.phase("ring packed greedy", "forward"));
  L.say("A packed sequence of %zu documents, s = %lld tokens; each token sees itself and the earlier",
        packed.docs.size(), (long long)packed.s);
  std::string cu_seqlens = "0";
  for (int64_t at = 0, k = 0; k < int64_t(packed.docs.size()); ++k) cu_seqlens += fmt(", %lld", (long long)(at += packed.docs[size_t(k)]));
  L.say("tokens of its own document (cu_seqlens = %s). Its work is one triangle", cu_seqlens.c_str());
  L.say("per document: %s visible pairs, not s(s+1)/2 = %s. s does not divide into 2P = %d", grouped(int64_t(pairs)).c_str(),
        grouped(packed.s * (packed.s + 1) / 2).c_str(), 2 * P);
  L.say("chunks, so each layout pads the sequence with masked tokens (they see nothing, no one sees");
  L.say("them, their gradients are zero) to the S slots it needs:");
  L.say("  zigzag           2P chunks of the whole pack: pad the end to a multiple of 2P;");
  L.say("  striped          token i on rank i mod P: pad the end to a multiple of P;");
  L.say("  zigzag-per-doc   each document in 2P chunks, rank r its chunks r and 2P-1-r");
  L.say("                   (TransformerEngine's THD layout): pad each document to 2P;");
  L.say("  greedy           the same chunks, dealt biggest first to the least-loaded rank.");
  L.blank();
  Table tp({"layout", "S", "rank 0 MFLOP", "rank 1", "rank 2", "rank 3", "imbalance (max / mean)"});
  double packed_error = 0;
  for (const PackedRun& run : packed_runs) {
    const std::string key = std::string("packed_") + (run.layout == Layout::zigzag_per_doc ? "zigzag_per_doc" : to_string(run.layout));
    std::vector<std::string> row{to_string(run.layout), std::to_string(run.plan.packing->S)};
    std::vector<double> work;
    for (int r = 0; r < P; ++r) {
      const double f = run.ranks[size_t(r)].attention_flops;
      RS_CHECK(f == parallel_attention_flops(run.plan, r), "lesson 4: rank ", r, " of ", key, " counted ", f, " FLOPs, not its formula");
      L.record(fmt("%s_flops_rank%d", key.c_str(), r), f);
      work.push_back(f);
      row.push_back(fmt("%.2f", f / 1e6));
    }
    L.record(key + "_S", double(run.plan.packing->S));
    const double error = worst_error(run.ranks[0].out, run.ranks[0].dx, run.ranks[0].grads, packed_ref);
    packed_error = std::max(packed_error, error);
    row.push_back(fmt("%.3f", L.record(key + "_imbalance", trace::max_over_mean(work))));
    tp.row(row);
  }
  L.table(tp);
  L.record("packed_max_error", packed_error);
  L.blank();
  L.say("(MFLOP: measured, equal to ring_attention_flops, the exact count of visible pairs.) All");
  L.say("four give the single-device answer: out, dx and the weight gradients within %.1e of", packed_error);
  L.say("the fp32 run, the padding dropped. Zigzag's chunks of the pack fall some in the long");
  L.say("document, where a token sees up to 300 keys, some in short ones: its busiest rank does");
  L.say("%.2fx the mean work. Cutting each document balances each triangle but for the",
        double(L.numbers["packed_zigzag_imbalance"]));
  L.say("padding, which sits at each document's end, in its last chunks: zigzag-per-doc gives");
  L.say("chunk 2P-1 to rank 0, so rank 0 holds most of it and works least (imbalance %.3f).",
        double(L.numbers["packed_zigzag_per_doc_imbalance"]));
  L.say("Greedy deals the chunks by their work and reaches %.3f. Striped deals every document's",
        double(L.numbers["packed_greedy_imbalance"]));
  L.say("tokens round-robin and reaches %.3f without padding a document, which is why `--layout",
        double(L.numbers["packed_striped_imbalance"]));
  L.say("auto` picks it for packed documents (zigzag for one sequence). Every rank computes only");
  L.say("pairs inside documents: the ring skips each (query run, key block) pair the mask hides");
  L.say("wholly, and its step records name them. `ringside compare --ranks 4 --seq 510 --docs");
  L.say("300,20,130,60 --hidden 128 --heads 8 --kv-heads 4 --ffn 512` prints this table (and runs");
  L.say("every layout).");

  // ---- check yourself ------------------------------------------------------------------------
  // Step 1's layer on P = 8 ranks: each layout's work per rank, from the same formula as above.
  const int P8 = 8;
  auto imbalance_at = [&](const LayerConfig& c, int ranks, Layout l) {
    const RunPlan plan = plan_of("ring", c, ranks, l);
    std::vector<double> work;
    for (int r = 0; r < ranks; ++r) work.push_back(parallel_attention_flops(plan, r));
    return trace::max_over_mean(work);
  };
  const double contiguous8 = imbalance_at(cfg, P8, Layout::contiguous), striped8 = imbalance_at(cfg, P8, Layout::striped);
  const double zigzag8_flops = parallel_attention_flops(plan_of("ring", cfg, P8, Layout::zigzag), 0);
  const int64_t per_doc8 = plan_of("ring", packed, P8, Layout::zigzag_per_doc).packing->S;
  const int64_t c8 = cfg.s / P8;
  std::string padded;  // "304 + 32 + 144 + 64"
  for (int64_t len : packed.docs) padded += fmt("%s%lld", padded.empty() ? "" : " + ", (long long)((len + 2 * P8 - 1) / (2 * P8) * 2 * P8));
  L.check_yourself({
      {fmt("Contiguous on P = %d ranks, s = %lld as in step 1: the imbalance (max / mean work)?", P8, (long long)cfg.s),
       contiguous8, fmt("%.3f", contiguous8),
       fmt("rank P-1 has (P-1) c^2 + c(c+1)/2 pairs, c = s/P = %lld; the mean is s(s+1)/(2P). Short blocks keep "
           "it below (2P-1)/P = %.3f",
           (long long)c8, (2.0 * P8 - 1) / P8)},
      {fmt("Striped on P = %d ranks, s = %lld: the imbalance?", P8, (long long)cfg.s), striped8, fmt("%.3f", striped8),
       fmt("rank r has c(r+1) + P c(c-1)/2 pairs (query r + P j sees r + P j + 1 keys), c = %lld; rank P-1 over "
           "the mean s(s+1)/(2P)",
           (long long)c8)},
      {fmt("Zigzag on P = %d ranks, s = %lld: how many attention MFLOP does each rank compute?", P8, (long long)cfg.s),
       zigzag8_flops, fmt("%.2f MFLOP", zigzag8_flops / 1e6),
       fmt("every rank an equal share of the triangle, s(s+1)/(2P) pairs of 4 d H = %lld FLOPs", (long long)(4 * cfg.d() * cfg.H))},
      {fmt("Step 6's documents under zigzag-per-doc on P = %d ranks: how many slots S does the pack take?", P8),
       double(per_doc8), grouped(per_doc8) + " slots",
       fmt("each document padded to a multiple of 2P = %d: %s", 2 * P8, padded.c_str())},
  });
}

}  // namespace ringside::lessons

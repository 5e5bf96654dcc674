// Lesson 8: the whole step. Where context parallelism sits among TP, PP and DP, and why (TP x CP
// inside a node or a few, PP and DP outside), shown on Llama 3 70B at 128K tokens on 256 GPUs of
// the lesson's profile (h100-nvlink unless --hw says another): the planner's ranking, the
// placements it turns down, the pipeline and what ZeRO shards.
#include <algorithm>
#include <tuple>

#include "core/error.h"
#include "layer/presets.h"
#include "lessons/lesson.h"
#include "model/bubble.h"
#include "model/collectives.h"
#include "model/flops.h"
#include "model/step_plan.h"
#include "model/zero.h"
#include "parallel/rank_grid.h"

namespace ringside::lessons {

namespace {

std::string seconds(double s) { return format_ns(s * 1e9); }
std::string pct(double f) { return fmt("%.1f%%", 100 * f); }

// "a", "a and b", "a, b and c".
std::string listed(const std::vector<std::string>& items) {
  std::string out;
  for (size_t i = 0; i < items.size(); ++i) out += (i == 0 ? "" : i + 1 == items.size() ? " and " : ", ") + items[i];
  return out;
}

// The nodes (the innermost tier's domains, as the profile's topology fills them with `world`
// GPUs) that a group of `size` ranks `stride` apart in rank order reaches; on a one-tier system
// every GPU is a node of its own.
int nodes_reached(int size, int stride, const model::Hardware& hw, int world) {
  if (hw.tiers.size() == 1) return size;
  std::vector<int> members;
  for (int i = 0; i < size; ++i) members.push_back(i * stride);
  return hw.topology(world).span(members).domains(0);
}

// Where a group sits: "inside a node" or "across 4 nodes".
std::string where(int size, int stride, const model::Hardware& hw, int world) {
  const int n = nodes_reached(size, stride, hw, world);
  return n == 1 ? "inside a node" : fmt("across %d nodes", n);
}

// Which of the named groups (name, size, stride) stay inside a node and how many nodes the others
// span: "TP, CP and PP stay inside a node and DP spans 4 nodes".
std::string placement(const std::vector<std::tuple<const char*, int, int>>& groups, const model::Hardware& hw, int world) {
  std::vector<std::string> inside, across;
  for (const auto& [name, size, stride] : groups) {
    const int n = nodes_reached(size, stride, hw, world);
    if (n == 1) inside.push_back(name);
    else across.push_back(fmt("%s spans %d nodes", name, n));
  }
  const std::string in = inside.empty() ? "" : listed(inside) + (inside.size() == 1 ? " stays" : " stay") + " inside a node";
  return in.empty() ? listed(across) : across.empty() ? in : in + " and " + listed(across);
}

// Where a dimension of the grid sits: "inside a node" or "across 4 nodes".
std::string where(const RankGrid& grid, Dim d, const model::Hardware& hw) { return where(grid.size(d), grid.stride(d), hw, grid.world()); }

}  // namespace

void whole_step(Script& L) {
  // Every time, placement and memory verdict below is on the lesson's profile (--hw): its nodes'
  // size decides which groups cross the fabric, its links and rates what that costs.
  const model::Hardware& hw = L.hw;
  const int node = hw.domain_gpus();  // the topology's innermost domain: a node of NVLink
  const std::string nodes_of = node > 1 ? fmt("on nodes of %d GPUs", node) : fmt("with every GPU a node of its own (%s)", hw.name.c_str());

  // ---- 1. the order of the groups -------------------------------------------------------------
  L.step("Four groups, one rank order");
  const int T = 2, C = 2, PP = 2, DP = 4;
  L.say("A training step splits P GPUs four ways: TP (the layer's weights), CP (the sequence), PP");
  L.say("(the layers, in stages) and DP (the batch). Each GPU has one coordinate in each, and one");
  L.say("rank: Megatron and Llama 3 number them TP fastest, then CP, then PP, then DP ([TP, CP, PP,");
  L.say("DP]). With T = %d, C = %d, PP = %d, DP = %d %s:", T, C, PP, DP, nodes_of.c_str());
  L.blank();
  GridSizes sizes;
  sizes.tp = T, sizes.ring = C, sizes.pp = PP, sizes.dp = DP;
  const RankGrid grid(sizes, "tp-cp-pp-dp");  // every coordinate, stride and group below is the grid's
  Table order({"rank", "t", "c", "p", "d", "node"});
  for (int rank : {0, 1, 2, 3, 4, 8, 31}) {
    order.row({std::to_string(rank), std::to_string(grid.coord(rank, Dim::tp)), std::to_string(grid.coord(rank, Dim::cp)),
               std::to_string(grid.coord(rank, Dim::pp)), std::to_string(grid.coord(rank, Dim::dp)), std::to_string(hw.tiers.size() == 1 ? rank : hw.topology(grid.world()).domain_of(rank, 0))});
  }
  L.table(order);
  L.blank();
  L.say("A group's members are its stride apart: TP %d, CP %d, PP %d, DP %d.", grid.stride(Dim::tp),
        int(L.record("stride_cp", grid.stride(Dim::cp))), int(L.record("stride_pp", grid.stride(Dim::pp))),
        int(L.record("stride_dp", grid.stride(Dim::dp))));
  L.record("dp_nodes", nodes_reached(DP, grid.stride(Dim::dp), hw, grid.world()));
  std::vector<std::tuple<const char*, int, int>> groups;
  for (const auto& [name, d] : {std::pair{"TP", Dim::tp}, {"CP", Dim::cp}, {"PP", Dim::pp}, {"DP", Dim::dp}})
    groups.push_back({name, grid.size(d), grid.stride(d)});
  L.paragraph((node > 1 ? std::string("So the innermost groups share a node's NVLink and the outermost cross the fabric: here ")
                        : "On " + hw.name + " every GPU is a node of its own, so every group crosses the fabric: ") +
              placement(groups, hw, grid.world()) +
              ". Put the chattiest group innermost: TP talks in every block, CP in every attention, PP once a microbatch "
              "between stages, and DP once a step.");

  // ---- 2. the planner's answer ------------------------------------------------------------------
  LayerConfig cfg;
  apply_preset(find_preset("llama3-70b"), cfg);
  cfg.b = 1, cfg.s = 131072;
  model::StepPlanOptions o;
  o.gpus = 256, o.layers = find_preset("llama3-70b").layers, o.vocab = find_preset("llama3-70b").vocab, o.gbs = 64;
  model::StepPlanStats stats;
  const std::vector<model::StepPlan> plans = model::make_step_plan(cfg, o, {hw}, &stats);
  const model::StepPlan& plan = plans.front();
  if (plan.ranked() == 0)
    throw ConfigError(fmt("lesson 8 plans Llama 3 70B at 128K on 256 GPUs, and nothing fits on %s (%s a GPU): give --hw a "
                          "profile with more memory, or leave it out (%s)",
                          hw.name.c_str(), format_bytes(hw.memory_bytes).c_str(), find_lesson(8).hw));
  const model::StepRow& win = plan.rows.front();
  L.step(fmt("The planner's answer: Llama 3 70B at 128K on 256 GPUs of %s", hw.name.c_str()));
  L.paragraph(fmt("`ringside plan --preset llama3-70b --seq 131072 --gpus 256 --hw %s --gbs 64` weighs every TP x CP group of "
                  "up to 256 GPUs inside every PP x DP around it, with VP, ZeRO, the recompute mode, the layout and the order: "
                  "%s configurations. It dry-runs only the groups that could win (%d of %s) and simulates the pipeline and the "
                  "collectives around each. Its five fastest on %s, a batch of %d sequences (%s tokens), modeled: tokens/s per "
                  "GPU and MFU counting attention causally halved.",
                  hw.name.c_str(), grouped(int64_t(L.record("configurations", double(stats.candidates)))).c_str(),
                  int(L.record("dry_runs", double(stats.dry_runs))), grouped(int64_t(stats.groups)).c_str(), hw.name.c_str(),
                  o.gbs, grouped(int64_t(o.gbs) * cfg.s).c_str()));
  L.blank();
  Table top({"configuration", "tokens/s", "MFU", "step"});
  for (size_t i = 0; i < 5 && i < plan.ranked(); ++i) {
    const model::StepRow& r = plan.rows[i];
    top.row({r.candidate.name(), fmt("%.0f", r.tokens_per_s_per_gpu), pct(r.mfu), seconds(r.cost.step_s)});
  }
  L.table(top);
  L.trust(model::run_kind(false, true, win.candidate.layer.par, "bf16"));
  L.record("winner_tokens_per_s", win.tokens_per_s_per_gpu);
  L.record("winner_mfu", win.mfu);
  L.record("winner_tp", win.candidate.layer.par.tp);
  L.record("winner_cp", win.candidate.layer.par.cp);
  L.record("winner_pp", win.candidate.pp);
  L.record("winner_dp", win.candidate.dp);
  L.blank();
  const ParallelConfig& wpar = win.candidate.layer.par;
  const RankGrid wgrid = win.candidate.grid();
  const std::string cp_part = wpar.cp > 1 ? fmt(" and the %s of %d %s", wpar.cp_comm->collective_words, wpar.cp, where(wgrid, Dim::cp, hw).c_str())
                                          : std::string(", no CP");
  // What the table's MFUs would read counted whole: said of these rows only (model::whole_count_note).
  const double whole_over_causal = L.record("mfu_whole_over_causal", model::model_flops_per_token(cfg, o.layers, o.vocab, false) /
                                                                         model::model_flops_per_token(cfg, o.layers, o.vocab, true));
  std::vector<double> shown_mfu;
  for (size_t i = 0; i < 5 && i < plan.ranked(); ++i) shown_mfu.push_back(plan.rows[i].mfu);
  L.record("winner_mfu_whole", whole_over_causal * win.mfu);
  L.record("rows_over_100_whole", double(std::count_if(shown_mfu.begin(), shown_mfu.end(),
                                                       [&](double m) { return whole_over_causal * m > 1; })));
  L.paragraph(fmt("The winner's TP x CP group of %d GPUs is the layer's split, TP %d %s%s; PP %d and DP %d sit outside it. "
                  "Its MFU counts attention causally halved, the FLOPs a causal mask needs; %s. An MFU counted whole includes "
                  "work no kernel does.",
                  wpar.tp * wpar.cp, wpar.tp, where(wgrid, Dim::tp, hw).c_str(), cp_part.c_str(), win.candidate.pp,
                  win.candidate.dp, model::whole_count_note(cfg, o.layers, o.vocab, shown_mfu).c_str()));

  // ---- 3. the placements it turns down ------------------------------------------------------------
  L.step("Why CP sits just outside TP");
  model::StepCandidate inner = win.candidate;
  inner.layer.par.order = inner.layer.par.order == RankOrder::tp_cp ? RankOrder::cp_tp : RankOrder::tp_cp;
  const model::ModeledStep best = model::model_step_of(cfg, win.candidate, o, hw);
  const model::ModeledStep swapped = model::model_step_of(cfg, inner, o, hw);
  const RankGrid swapped_grid = inner.grid();
  L.say("The same degrees, placed two ways: the winner's order, and with TP and CP swapped inside");
  L.say("the group (%s: TP's members are %d apart, CP's %d).", inner.order_name().c_str(), swapped_grid.stride(Dim::tp),
        swapped_grid.stride(Dim::cp));
  L.blank();
  Table placed({"order", "step", "exposed TP", "exposed CP", "tokens/s/GPU"});
  for (const model::ModeledStep* m : {&best, &swapped})
    placed.row({m->row.candidate.order_name(), seconds(m->row.cost.step_s), seconds(m->row.cost.tp_exposed_s),
                seconds(m->row.cost.cp_exposed_s), fmt("%.0f", m->row.tokens_per_s_per_gpu)});
  L.table(placed);
  L.record("step_s_winner", best.row.cost.step_s);
  L.record("step_s_swapped", swapped.row.cost.step_s);
  L.blank();
  const double slowdown = L.record("swapped_slowdown", swapped.row.cost.step_s / best.row.cost.step_s);
  const int tp_nodes = nodes_reached(wpar.tp, wgrid.stride(Dim::tp), hw, wgrid.world());
  const int swapped_tp_nodes = nodes_reached(wpar.tp, swapped_grid.stride(Dim::tp), hw, swapped_grid.world());
  if (tp_nodes == 1 && swapped_tp_nodes > 1) {
    L.paragraph(fmt("With TP across nodes its all-gathers and reduce-scatters, one per block and each exposed, cross "
                    "InfiniBand at 1/%.0f of NVLink's rate: the step is %.2fx as long. CP tolerates the fabric because the "
                    "ring hides its K/V under attention (lesson 3) when a block is long enough; TP has nothing to hide behind.",
                    L.record("nvlink_over_ib", hw.tiers.front().bandwidth / hw.tiers.back().bandwidth), slowdown));
  } else {
    // Nodes of one GPU, or a group inside one node: the swap moves no collective on or off the fabric.
    L.paragraph(fmt("On %s the swap moves no collective on or off the fabric (%s), and the step is %.2fx as long. On nodes "
                    "of several GPUs (--hw h100-nvlink) it does: TP across them waits on every block's collectives, while the "
                    "ring hides its K/V under attention (lesson 3) when a block is long enough.",
                    hw.name.c_str(),
                    node == 1 ? "every GPU is a node of its own" : tp_nodes > 1 ? "TP spans nodes either way" : "the whole group fits a node",
                    slowdown));
  }
  L.say("PP sends one microbatch's activations between stages and DP reduces the gradients once a");
  L.say("step, under the last backward: both go outside.");

  // ---- 4. the pipeline ----------------------------------------------------------------------------
  // The winner's pipeline, or where the winner runs none, the fastest ranked row that does.
  const model::StepRow* piped = &win;
  for (size_t i = 0; piped->candidate.pp == 1 && i < plan.ranked(); ++i)
    if (plan.rows[i].candidate.pp > 1) piped = &plan.rows[i];
  const model::StepCandidate& w = piped->candidate;
  const model::ModeledStep piped_step = model::model_step_of(cfg, w, o, hw);
  const std::string label = L.modeled_name("a pipelined step, a row per stage");
  trace::TraceData timeline = model::step_timeline(piped_step, hw, o.modeling, label);
  L.add_modeled(std::move(timeline.ranks), "a pipelined step, a row per stage", hw, o.modeling);
  model::StepCandidate plain = w;
  plain.vp = 1;
  const model::ModeledStep one_chunk = model::model_step_of(cfg, plain, o, hw);
  L.record("pipe_pp", w.pp);
  L.record("pipe_dp", w.dp);
  L.step("The pipeline", L.window(label, [](const trace::Event& e) { return e.stream == trace::Stream::compute; }));
  if (piped != &win) {
    L.say("The winner runs no pipeline: each of its %d replicas holds all %d layers, ZeRO %d sharding", win.candidate.dp, o.layers,
          win.candidate.zero);
    L.say("their weights. The fastest configuration with a pipeline is %.1f%% slower:",
          L.record("pipe_slowdown_pct", 100 * (piped->cost.step_s / win.cost.step_s - 1)));
    L.say("%s.", w.name().c_str());
    L.say("The viewer shows its step, one row per pipeline stage.");
  } else {
    L.say("The viewer shows the winner's step, one row per pipeline stage.");
  }
  L.say("Each row is one GPU standing for its stage's TP x CP x DP (they run the same schedule).");
  L.say("Light blocks are forwards, dark ones backwards, grey gaps the bubble; after the last");
  L.say("backward the gradient reduce-scatter, Adam and the weights' all-gather. m = GBS / (DP MBS)");
  L.say("= %d microbatches run through %d stages in %d chunks each (interleaved 1F1B). The bubble", w.microbatches, w.pp, w.vp);
  L.say("comes out of the simulated schedule, and sits beside Narayanan et al.'s formula:");
  L.blank();
  Table bubble({"schedule", "bubble (simulated)", "formula", "step"});
  bubble.row({fmt("interleaved, VP %d", w.vp), pct(L.record("bubble_interleaved", piped_step.row.cost.bubble_fraction)),
              fmt("(PP-1)/(m VP) = %s", pct(L.record("bubble_formula_interleaved", double(w.pp - 1) / (w.microbatches * w.vp))).c_str()),
              seconds(piped_step.row.cost.step_s)});
  bubble.row({"1F1B, VP 1", pct(L.record("bubble_1f1b", one_chunk.row.cost.bubble_fraction)),
              fmt("(PP-1)/m = %s", pct(L.record("bubble_formula_1f1b", double(w.pp - 1) / w.microbatches)).c_str()),
              seconds(one_chunk.row.cost.step_s)});
  L.table(bubble);
  L.blank();
  // The excess over the formulas, measured: each pipeline simulated again without each cause (model/bubble.h).
  const model::BubbleParts interleaved = model::bubble_parts(piped_step.config, piped_step.layer, piped_step.ends, hw, o.modeling);
  const model::BubbleParts one = model::bubble_parts(one_chunk.config, one_chunk.layer, one_chunk.ends, hw, o.modeling);
  L.record("bubble_ends_interleaved", interleaved.ends), L.record("bubble_transfers_interleaved", interleaved.transfers);
  L.record("bubble_uneven_interleaved", interleaved.uneven_layers);
  L.record("bubble_ends_1f1b", one.ends), L.record("bubble_transfers_1f1b", one.transfers);
  L.record("bubble_uneven_1f1b", one.uneven_layers);
  L.paragraph("The simulated bubbles are not the formulas', which assume equal stages and free transfers. Simulating each "
              "pipeline again without the transfers, then without the embedding and the LM head, measures what each adds "
              "(the bubble is idle time over the busiest stage's work: a longer last stage can make it smaller). "
              "Interleaved, " + model::bubble_words(interleaved) + "; 1F1B, " + model::bubble_words(one) + ".");

  // ---- 5. memory ----------------------------------------------------------------------------------
  L.step("What ZeRO shards");
  L.say("The winner's fullest stage under each ZeRO stage (ZeRO's 2 + 2 + 12 bytes a parameter,");
  L.say("sharded over DP x CP = %d, the GPUs that hold the same weights):", win.candidate.dp * win.candidate.layer.par.cp);
  L.blank();
  Table zero({"ZeRO", "weights", "gradients", "optimizer", "activations", "total", "fits"});
  for (int stage = 0; stage <= 3; ++stage) {
    model::StepCandidate z = win.candidate;
    z.zero = stage;
    const model::ModeledStep m = model::model_step_of(cfg, z, o, hw);
    const model::StepCost& s = m.row.cost;
    L.record(fmt("zero%d_optimizer_bytes", stage), s.state.optimizer);
    L.record(fmt("zero%d_total_bytes", stage), s.total_bytes());
    zero.row({std::to_string(stage), format_bytes(s.state.weights), format_bytes(s.state.grads), format_bytes(s.state.optimizer),
              format_bytes(s.activation_bytes), format_bytes(s.total_bytes()), s.total_bytes() <= hw.memory_bytes ? "yes" : "no"});
  }
  L.table(zero);
  L.blank();
  L.paragraph(fmt("At 128K the activations dominate (%s of %s): that is why the winner recomputes (%s), and why CP, which "
                  "divides them, grows with the sequence while TP %s. ZeRO trims the rest: stage 1 shards Adam's 12 bytes, "
                  "stage 2 the gradients too, stage 3 the weights, at the price of gathering them again in every microbatch's "
                  "forward and backward.",
                  format_bytes(best.row.cost.activation_bytes).c_str(), format_bytes(best.row.cost.total_bytes()).c_str(),
                  to_string(win.candidate.layer.par.recompute), tp_nodes == 1 ? "stays inside its node" : "stays small"));

  // ---- check yourself ------------------------------------------------------------------------
  // Step 1's rank order on the winner's degrees, and the winner (its bubble: step 4's pipeline) on
  // twice the GPUs as twice the DP.
  const model::StepCandidate& wn = win.candidate;
  const int wt = wn.layer.par.tp, wc = wn.layer.par.cp, dp2 = 2 * wn.dp, pipe_dp2 = 2 * w.dp;
  const int pp_stride = RankGrid(GridSizes::of(wn.layer.par, wn.pp, wn.dp), grid.order()).stride(Dim::pp);
  const std::vector<int> cp_group = wgrid.groups({Dim::cp}).front();  // CP group 0: ranks 0, cp_stride, ...
  const int cp_stride = wgrid.stride(Dim::cp);
  std::vector<int> ring_nodes;  // the nodes its members sit on, as the topology places the winner's GPUs
  const model::Topology winner_topology = hw.topology(wgrid.world());
  for (int member : cp_group) {
    const int at = hw.tiers.size() == 1 ? member : winner_topology.domain_of(member, 0);
    if (std::find(ring_nodes.begin(), ring_nodes.end(), at) == ring_nodes.end()) ring_nodes.push_back(at);
  }
  const int m2 = o.gbs / (pipe_dp2 * o.mbs);
  const double bubble2 = double(w.pp - 1) / m2;
  const double optimizer2 = double(L.numbers["zero0_optimizer_bytes"]) / (dp2 * wc);
  L.check_yourself({
      {fmt("In the winner's grid (TP %d, CP %d, PP %d, DP %d; [TP, CP, PP, DP]), how far apart are the members of a "
           "PP group?",
           wt, wc, wn.pp, wn.dp),
       double(pp_stride), fmt("%d ranks", pp_stride), fmt("PP's stride is T C = %d x %d, as step 1's was 2 x 2", wt, wc)},
      {fmt("Over how many nodes of %d GPU%s does one of the winner's %ss (its CP group) reach?", node, node == 1 ? "" : "s",
           wn.layer.par.cp_comm->collective_words),
       double(ring_nodes.size()), fmt("%zu node%s", ring_nodes.size(), ring_nodes.size() == 1 ? "" : "s"),
       fmt("its %d members are %s%d apart, ranks 0 to %d of a TP x CP group of T C = %d ranks, %d to a node: %s", wc,
           cp_stride == wt ? "T = " : "", cp_stride, cp_group.back(), wt * wc, node,
           ring_nodes.size() == 1 ? "one node's NVLink"
           : tp_nodes == 1        ? fmt("the %s crosses InfiniBand, TP stays inside", wn.layer.par.cp_comm->collective_words).c_str()
                                  : fmt("the %s and TP both cross the fabric", wn.layer.par.cp_comm->collective_words).c_str())},
      {fmt("Step 4's pipeline (PP %d) on %d GPUs as DP %d, the batch still %d sequences: the 1F1B bubble by the formula?",
           w.pp, 2 * o.gpus, pipe_dp2, o.gbs),
       bubble2, pct(bubble2),
       fmt("(PP-1)/m with m = GBS / (DP MBS) = %d / (%d x %d) = %d: more DP, fewer microbatches, more bubble", o.gbs, pipe_dp2,
           o.mbs, m2)},
      {fmt("The winner on %d GPUs as DP %d, the batch unchanged: ZeRO 1's optimizer state per GPU?", 2 * o.gpus, dp2), optimizer2,
       format_bytes(optimizer2),
       fmt("ZeRO 0's %s over DP x CP = %d x %d", format_bytes(double(L.numbers["zero0_optimizer_bytes"])).c_str(), dp2, wc)},
  });
}

}  // namespace ringside::lessons

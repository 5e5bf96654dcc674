// Lesson 11: the rack. The same model at 256K tokens on 64 GPUs of two systems: an HGX cluster
// (the lesson's profile, h100-nvlink unless --hw says another: NVLink domains of 8, then
// InfiniBand) and one GB200 NVL72 rack (gb200-nvl72: one NVLink domain of 72). Where a TP x CP
// group can sit on each (Topology::span), what crosses InfiniBand, and the planner's answer on
// both (make_step_plan with the two profiles), every number from the run.
#include <algorithm>
#include <string>
#include <tuple>
#include <vector>

#include "core/error.h"
#include "layer/presets.h"
#include "lessons/lesson.h"
#include "model/collectives.h"
#include "model/plan.h"
#include "model/step_parts.h"
#include "model/step_plan.h"
#include "parallel/rank_grid.h"

namespace ringside::lessons {

namespace {

constexpr int kGpus = 64;            // the job: 64 GPUs
constexpr int64_t kSeq = 262144;     // 256K tokens a sequence
constexpr int kGbs = 64;             // sequences a step
constexpr const char* kRack = "gb200-nvl72";

// The span of a TP x CP group of `size` on the job's first GPUs (ranks 0 .. size - 1, the rank
// order's innermost group) on `hw` as it fills `kGpus` GPUs.
model::Span first_group(int size, const model::Hardware& hw) {
  std::vector<int> members;
  for (int i = 0; i < size; ++i) members.push_back(i);
  return hw.topology(kGpus).span(members);
}

// The job's GPUs in one domain of the innermost tier (a node, a rack); on a one-tier system
// (h100-ib) every GPU is a node of its own.
int domain_of_job(const model::Hardware& hw) { return hw.tiers.size() == 1 ? 1 : hw.topology(kGpus).domain_gpus(0); }

// The innermost tier's domains a span touches; a GPU each on a one-tier system.
int domains_of(const model::Span& span, const model::Hardware& hw) { return hw.tiers.size() == 1 ? span.size : span.domains(0); }

// Where the parts of a winner's CP group sit on `hw`: "its all-to-all of 4 inside one NVLink domain
// and its ring of 4 across InfiniBand"; each part's size and tier recorded as <key>_winner_a2a,
// <key>_winner_a2a_tier, <key>_winner_ring and <key>_winner_ring_tier.
std::string cp_parts(Script& L, const std::string& key, const ParallelConfig& par, const model::Hardware& hw) {
  const model::Topology topology = hw.topology(kGpus);
  std::vector<std::string> parts;
  for (const auto& [kind, name, size] : {std::tuple{Dim::a2a, "all-to-all", par.a2a_size()}, {Dim::ring, "ring", par.ring_size()}}) {
    if (size <= 1) continue;
    const model::Span span = model::widest_span(par, kind, topology);
    L.record(key + "_winner_" + to_string(kind) + "_tier", double(span.tier));
    L.record(key + "_winner_" + to_string(kind), size);
    parts.push_back(fmt("its %s of %d %s", name, size, model::link_words(span, hw).c_str()));
  }
  return parts.empty() ? "no CP" : parts.size() == 1 ? parts[0] : parts[0] + " and " + parts[1];
}

}  // namespace

void the_rack(Script& L) {
  const model::Hardware& hgx = L.hw;  // the cluster of 8-GPU nodes (--hw)
  const model::Hardware rack = model::load_hardware(kRack);
  const std::vector<const model::Hardware*> systems = {&hgx, &rack};
  const char* keys[] = {"hgx", "nvl72"};  // the recorded numbers' prefixes, in that order

  // ---- 1. the two systems' tiers -----------------------------------------------------------------
  L.step("Two systems of 64 GPUs");
  L.paragraph(fmt("A job of %d GPUs trains Llama 3 70B on sequences of %s tokens, a batch of %d. It runs on one of two "
                  "systems, each described by its link tiers, innermost first:",
                  kGpus, grouped(kSeq).c_str(), kGbs));
  L.blank();
  Table tiers({"system", "tier", "GPUs a domain", "GB/s per GPU", "job's GPUs a domain"});
  for (size_t i = 0; i < systems.size(); ++i) {
    const model::Hardware& hw = *systems[i];
    const model::Topology topology = hw.topology(kGpus);
    for (size_t t = 0; t < hw.tiers.size(); ++t) {
      const model::Tier& tier = hw.tiers[t];
      tiers.row({t == 0 ? hw.name : "", tier.name, tier.gpus > 0 ? std::to_string(tier.gpus) : "all",
                 fmt("%.0f", tier.bandwidth / 1e9), std::to_string(topology.domain_gpus(t))});
    }
    L.record(fmt("%s_domain_gpus", keys[i]), domain_of_job(hw));
    L.record(fmt("%s_nvlink_GBps", keys[i]), hw.tiers.front().bandwidth / 1e9);
    L.record(fmt("%s_ib_GBps", keys[i]), hw.tiers.back().bandwidth / 1e9);
  }
  L.table(tiers);
  L.blank();
  const int hgx_domain = int(L.numbers["hgx_domain_gpus"]), rack_domain = int(L.numbers["nvl72_domain_gpus"]);
  const std::string cluster =
      hgx.tiers.size() == 1 ? fmt("On %s every GPU is a node of its own and every link is %s.", hgx.name.c_str(), hgx.tiers[0].name.c_str())
                            : fmt("On %s the job fills %d %s domains of %d GPUs (a node each) and everything between nodes crosses %s; "
                                  "%s is %.0fx %s's rate per GPU.",
                                  hgx.name.c_str(), int(L.record("hgx_nodes", kGpus / hgx_domain)), hgx.tiers[0].name.c_str(),
                                  hgx_domain, hgx.tiers.back().name.c_str(), hgx.tiers[0].name.c_str(),
                                  L.record("hgx_nvlink_over_ib", hgx.tiers.front().bandwidth / hgx.tiers.back().bandwidth),
                                  hgx.tiers.back().name.c_str());
  L.paragraph(cluster + fmt(" On %s the job's %d GPUs sit in one rack's NVLink domain (%d of its %d GPUs): InfiniBand joins "
                            "racks, and this job needs only one. NVLink is %.0fx InfiniBand's rate per GPU there.",
                            rack.name.c_str(), rack_domain, rack_domain, rack.tiers[0].gpus,
                            L.record("nvl72_nvlink_over_ib", rack.tiers.front().bandwidth / rack.tiers.back().bandwidth)));

  // ---- 2. where a TP x CP group can sit ----------------------------------------------------------
  L.step("Where a TP x CP group can sit");
  L.paragraph("The rank order puts TP fastest, then CP (lesson 8), so one TP x CP group of G GPUs is ranks 0 to G - 1, "
              "consecutive GPUs. The topology answers which tier its links need (the outermost any two members use) and "
              "how many NVLink domains it touches:");
  L.blank();
  Table where({"TP x CP", "tier on " + hgx.name, "domains", "tier on " + rack.name, "domains"});
  for (int G : {8, 16, 32, 64}) {
    std::vector<std::string> row = {std::to_string(G)};
    for (size_t i = 0; i < systems.size(); ++i) {
      const model::Span span = first_group(G, *systems[i]);
      L.record(fmt("%s_group%d_tier", keys[i], G), double(span.tier));
      row.push_back(systems[i]->tiers[span.tier].name);
      row.push_back(std::to_string(int(L.record(fmt("%s_group%d_domains", keys[i], G), domains_of(span, *systems[i])))));
    }
    where.row(row);
  }
  L.table(where);
  L.blank();
  L.paragraph(fmt("On %s a group of more than %d GPU%s must cross InfiniBand, however it splits into TP and CP: the "
                  "ring's K/V (or the all-to-all) then travels over the fabric. On %s every group of this job, up to all 64 GPUs, "
                  "stays inside NVLink, and only DP's gradients (and PP's activations, if it pipelines) would leave the rack.",
                  hgx.name.c_str(), hgx_domain, hgx_domain == 1 ? "" : "s", rack.name.c_str()));

  // ---- 3. the planner's answer on both ----------------------------------------------------------
  const ModelPreset& preset = find_preset("llama3-70b");
  LayerConfig cfg;
  apply_preset(preset, cfg);
  cfg.b = 1, cfg.s = kSeq;
  model::StepPlanOptions o;
  o.gpus = kGpus, o.layers = preset.layers, o.vocab = preset.vocab, o.gbs = kGbs;
  model::StepPlanStats stats;
  // In the order of the command the chapter quotes (--hw gb200-nvl72,h100-nvlink); each system's
  // answer is the one it gets alone, whatever the order (the search estimates per profile).
  const std::vector<model::StepPlan> ranked = model::make_step_plan(cfg, o, {rack, hgx}, &stats);
  const std::vector<const model::StepPlan*> plans = {&ranked[1], &ranked[0]};  // as `systems`: the cluster, the rack
  for (const model::StepPlan& plan : ranked)
    if (plan.ranked() == 0)
      throw ConfigError(fmt("lesson 11 plans Llama 3 70B at 256K on 64 GPUs, and nothing fits on %s (%s a GPU): give --hw a "
                            "profile with more memory, or leave it out (%s)",
                            plan.hw.name.c_str(), format_bytes(plan.hw.memory_bytes).c_str(), find_lesson(11).hw));

  // The winners' steps, one row per pipeline stage, beside each other in the viewer.
  std::vector<std::string> labels;
  for (size_t i = 0; i < plans.size(); ++i) {
    const model::Hardware& hw = *systems[i];
    const std::string what = fmt("the winner's step on %s", hw.name.c_str());
    const model::ModeledStep step = model::model_step_of(cfg, plans[i]->rows.front().candidate, o, hw);
    labels.push_back(L.modeled_name(what, &hw));
    trace::TraceData timeline = model::step_timeline(step, hw, o.modeling, labels.back());
    L.add_modeled(std::move(timeline.ranks), what, hw, o.modeling);
  }
  L.step("The planner's answer on both",
         L.window(labels.back(), [](const trace::Event& e) { return e.stream == trace::Stream::compute; }));
  L.paragraph(fmt("`ringside plan --preset llama3-70b --seq %lld --gpus %d --gbs %d --hw %s,%s` weighs %s configurations "
                  "on each system (TP, CP and its scheme, PP, VP, DP, ZeRO, recompute, the rank order), the same search as "
                  "lesson 8's. Each system's winner, modeled:",
                  static_cast<long long>(kSeq), kGpus, kGbs, rack.name.c_str(), hgx.name.c_str(),
                  grouped(int64_t(stats.candidates)).c_str()));
  L.blank();
  Table winners({"system", "winner", "tokens/s"});
  Table tiers_used({"system", "TP x CP", "stages", "gradients", "DP x CP on IB"});
  for (size_t i = 0; i < plans.size(); ++i) {
    const model::Hardware& hw = *systems[i];
    const model::StepRow& win = plans[i]->rows.front();
    const model::StepCandidate& c = win.candidate;
    const model::step_parts::Spans spans = model::step_parts::spans_of(c, hw.topology(kGpus));
    const std::string k = keys[i];
    L.record(k + "_winner_tokens_per_s", win.tokens_per_s_per_gpu);
    L.record(k + "_winner_tp", c.layer.par.tp);
    L.record(k + "_winner_cp", c.layer.par.cp);
    L.record(k + "_winner_pp", c.pp);
    L.record(k + "_winner_dp", c.dp);
    L.record(k + "_winner_group_tier", double(spans.group.tier));
    L.record(k + "_winner_weights_tier", double(spans.weights.tier));
    // The planner's count: the gradient collectives and ZeRO's weight gathers beyond NVLink.
    const double beyond = L.record(k + "_winner_grad_bytes_beyond", win.cost.dp_beyond_bytes);
    const auto tier_of = [&](const model::Span& span, bool used) { return used ? hw.tiers[span.tier].name : std::string("-"); };
    winners.row({hw.name, c.name(), fmt("%.0f", win.tokens_per_s_per_gpu)});
    tiers_used.row({hw.name, tier_of(spans.group, true), tier_of(spans.pp, c.pp > 1), tier_of(spans.weights, spans.weights.size > 1),
                    format_bytes(beyond)});
  }
  L.table(winners);
  L.blank();
  L.say("The tier each winner's groups need: its TP x CP group's, its pipeline stages' and its");
  L.say("gradients' over DP x CP; last, what each GPU sends beyond NVLink in one step for its");
  L.say("gradient collectives and ZeRO's weight gathers over DP x CP:");
  L.blank();
  L.table(tiers_used);
  L.blank();
  L.trust(model::run_kind(false, true, plans.back()->rows.front().candidate.layer.par, "bf16"), &rack);
  L.blank();
  const model::StepRow& hgx_row = plans[0]->rows.front();
  const model::StepRow& rack_row = plans[1]->rows.front();
  const double ratio = L.record("nvl72_over_hgx", rack_row.tokens_per_s_per_gpu / hgx_row.tokens_per_s_per_gpu);
  const model::StepCandidate& rack_win = rack_row.candidate;
  const model::StepCandidate& hgx_win = hgx_row.candidate;
  const int rack_group = int(L.record("nvl72_winner_group", rack_win.layer.par.tp * rack_win.layer.par.cp)), hgx_group = hgx_win.layer.par.tp * hgx_win.layer.par.cp;
  const bool hgx_inside = hgx.tiers.size() > 1 && hgx_group <= hgx_domain;
  const std::string hgx_where =
      hgx_inside ? fmt("%d (TP %d x CP %d) on %s, where a node is as far as NVLink goes", hgx_group, hgx_win.layer.par.tp,
                       hgx_win.layer.par.cp, hgx.name.c_str())
                 : fmt("while on %s the winner's group of %d (TP %d x CP %d) crosses %s", hgx.name.c_str(), hgx_group,
                       hgx_win.layer.par.tp, hgx_win.layer.par.cp, hgx.tiers.back().name.c_str());
  L.paragraph(fmt("%s TP x CP group inside NVLink: %d GPUs (TP %d x CP %d) on the rack, %s. Within the groups: on the rack %s; "
                  "on %s %s. Per GPU the rack trains %.2fx as many tokens a second. Part of that is the GPU (a Blackwell GPU "
                  "computes faster and holds %s against %s); the next step separates the part that is placement.",
                  hgx_inside ? "Both winners keep their" : "The rack's winner keeps its", rack_group, rack_win.layer.par.tp,
                  rack_win.layer.par.cp, hgx_where.c_str(), cp_parts(L, "nvl72", rack_win.layer.par, rack).c_str(),
                  hgx.name.c_str(), cp_parts(L, "hgx", hgx_win.layer.par, hgx).c_str(), ratio,
                  format_bytes(rack.memory_bytes).c_str(), format_bytes(hgx.memory_bytes).c_str()));

  // ---- 4. what the wider domain is worth ------------------------------------------------------------
  L.step("What the wider domain is worth");
  // The rack's fastest configuration whose group would fit one of the cluster's nodes: the rack's
  // GPUs, the cluster's placement limit.
  const model::StepRow* node_sized = nullptr;
  for (size_t r = 0; r < plans[1]->ranked() && !node_sized; ++r) {
    const ParallelConfig& par = plans[1]->rows[r].candidate.layer.par;
    if (par.tp * par.cp <= hgx_domain) node_sized = &plans[1]->rows[r];
  }
  if (node_sized) {
    const ParallelConfig& par = node_sized->candidate.layer.par;
    L.paragraph(fmt("On the rack, kept to TP x CP groups of at most %d GPUs (what a node of %s allows), the fastest "
                    "configuration is %s: %.0f tokens/s per GPU, TP %d x CP %d. The rack's winner with its group of %d is "
                    "%.2fx that: the part of the rack's lead that is the wider NVLink domain, with the GPU held the same.",
                    hgx_domain, hgx.name.c_str(), node_sized->candidate.name().c_str(),
                    L.record("nvl72_node_sized_tokens_per_s", node_sized->tokens_per_s_per_gpu), int(par.tp), int(par.cp),
                    rack_group, L.record("nvl72_wide_over_node_sized", rack_row.tokens_per_s_per_gpu / node_sized->tokens_per_s_per_gpu)));
  } else {
    L.paragraph(fmt("On the rack no configuration with a TP x CP group of %d or fewer fits: at %s tokens the activations need "
                    "the wider group.",
                    hgx_domain, grouped(kSeq).c_str()));
  }
  L.blank();
  const model::ModeledStep moved = model::model_step_of(cfg, rack_win, o, hgx);
  const model::step_parts::Spans moved_spans = model::step_parts::spans_of(rack_win, hgx.topology(kGpus));
  L.record("moved_group_tier", double(moved_spans.group.tier));
  L.record("moved_group_domains", domains_of(moved_spans.group, hgx));
  if (moved.row.status == model::PlanStatus::ranked) {
    L.paragraph(fmt("The other way round, the rack's winner modeled on %s: its group of %d spans %d nodes, its traffic across "
                    "%s, and it trains %.0f tokens/s per GPU there, against %.0f for %s's own winner.",
                    hgx.name.c_str(), rack_group, domains_of(moved_spans.group, hgx), hgx.tiers[moved_spans.group.tier].name.c_str(),
                    L.record("moved_tokens_per_s", moved.row.tokens_per_s_per_gpu), hgx_row.tokens_per_s_per_gpu, hgx.name.c_str()));
  } else {
    L.paragraph(fmt("The other way round, the rack's winner does not fit on %s: its fullest GPU needs %s of the %s there, "
                    "and its group of %d would span %d nodes, its traffic across %s.",
                    hgx.name.c_str(), format_bytes(L.record("moved_total_bytes", moved.row.cost.total_bytes())).c_str(),
                    format_bytes(hgx.memory_bytes).c_str(), rack_group, domains_of(moved_spans.group, hgx), hgx.tiers[moved_spans.group.tier].name.c_str()));
  }
  L.blank();
  L.paragraph(fmt("On both systems the planner puts innermost what nothing hides (TP, an all-to-all) and the ring, which "
                  "hides its K/V under attention, outside it; what differs is how far \"inside NVLink\" reaches. On the cluster it ends at the node, so a group wider than %d pays InfiniBand; on the rack "
                  "it reaches all of this job, and only what leaves the TP x CP group (the gradients over DP, a pipeline's "
                  "activations) could ever need InfiniBand.",
                  hgx_domain));

  // ---- check yourself ---------------------------------------------------------------------------
  const int span32 = domains_of(first_group(32, hgx), hgx);
  std::vector<int> all128;
  for (int i = 0; i < 128; ++i) all128.push_back(i);
  const model::Topology rack128 = rack.topology(128);
  const int racks128 = rack128.span(all128).domains(0);
  const int widest_hgx = domain_of_job(hgx), widest_rack = domain_of_job(rack);
  L.check_yourself({
      {fmt("On %s, over how many nodes does a TP 8 x CP 4 group (ranks 0 to 31) reach?", hgx.name.c_str()), double(span32),
       fmt("%d nodes", span32), fmt("32 consecutive GPUs, %d to a node: 32 / %d", hgx_domain, hgx_domain)},
      {fmt("The job grows to 128 GPUs on %s racks. How many racks does it use, and how many of each rack's 72 GPUs?",
           rack.name.c_str()),
       double(racks128), fmt("%d racks of %d", racks128, rack128.domain_gpus(0)),
       fmt("72 does not divide 128; the largest whole number of trays of %d that does and fills at least half a rack is %d "
           "(%d trays), so the job takes %d GPUs of each rack (the topology's segment rule)", rack.tiers[0].unit,
           rack128.domain_gpus(0), rack128.domain_gpus(0) / std::max(1, rack.tiers[0].unit), rack128.domain_gpus(0))},
      {fmt("For this job of %d, how many times wider a TP x CP group can stay inside NVLink on %s than on %s?", kGpus,
           rack.name.c_str(), hgx.name.c_str()),
       double(widest_rack) / widest_hgx, fmt("%dx", widest_rack / widest_hgx),
       fmt("the job's GPUs in one NVLink domain: %d against %d", widest_rack, widest_hgx)},
  });
}

}  // namespace ringside::lessons

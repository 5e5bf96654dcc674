// The planner of plan.h: enumerate, reject, dry-run once per schedule shape, replay, rank, explain.
#include "model/plan.h"

#include <map>
#include <mutex>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <map>
#include <optional>
#include <set>
#include <tuple>

#include "core/error.h"
#include "core/units.h"
#include "model/step_parts.h"
#include "parallel/formulas.h"
#include "parallel/rank_grid.h"
#include "parallel/shares.h"
#include "parallel/ulysses_attention.h"
#include "trace/metrics.h"

namespace ringside::model {

namespace {


// ---- where a configuration's groups sit -------------------------------------------------

std::string num(double v);

}  // namespace

Span widest_span(const ParallelConfig& par, GroupKind kind, const Topology& topology) {
  std::optional<Span> widest;
  bool uneven = false;
  for (const std::vector<int>& g : group_members(par, kind)) {
    const Span s = topology.span(g);
    uneven |= s.uneven;
    if (!widest || s.wider_than(*widest)) widest = s;
  }
  widest->uneven = uneven;
  return *widest;
}

std::string link_words(const Span& span, const Hardware& hw) {
  const Tier& tier = hw.tiers[span.tier];
  if (hw.tiers.size() == 1) return "over " + tier.name;
  if (span.tier == 0) return "inside one " + tier.name + " domain";
  return "across " + tier.name + (span.tier == 1 ? "" : " (tier " + std::to_string(span.tier) + ")");
}

std::string placement_words(const Span& span, const Hardware& hw, bool ring) {
  const Tier& tier = hw.tiers[span.tier];
  const std::string rate = " (" + num(tier.bandwidth / 1e9) + " GB/s)";
  if (hw.tiers.size() == 1) return "runs over " + tier.name + rate;
  if (span.tier == 0) return "sits inside one " + tier.name + " domain" + rate;
  std::string how = "crosses " + tier.name;
  // A ring whose members are strided may cross on some hops only.
  if (ring && span.hops[span.tier] < span.size) how += detail::concat(" on ", span.hops[span.tier], " of its ", span.size, " hops");
  if (span.uneven) how += detail::concat(", its ", hw.tiers[span.tier - 1].name, " domains holding ", span.fewest[span.tier - 1], " to ",
                                         span.most[span.tier - 1], " of it");
  return how + rate;
}

// The GPU of each rank of the tp-cp schedule when the same coordinates are placed in `par`'s
// order: the cp-tp placement of a tp-cp dry run.
std::vector<int> schedule_gpus(const ParallelConfig& par, int P) {
  ParallelConfig recorded = par;
  recorded.order = RankOrder::tp_cp;
  const RankGrid from = RankGrid::of(recorded), placed = RankGrid::of(par);
  std::vector<int> gpu(static_cast<size_t>(P));
  for (int rank = 0; rank < P; ++rank) gpu[size_t(rank)] = placed.rank_at(from, rank);
  return gpu;
}

namespace {

// ---- the one-line reasons --------------------------------------------------------------

std::string num(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.0f", v);
  return buf;
}

// The candidate's sequence as its shards hold it: s, or S padded to the multiple they need.

std::string fixed3(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.3f", v);
  return buf;
}

// The widest span of the candidate's groups of `kind` on the job's GPUs (the group's own P, or
// the whole step's around it: ModelOptions::job_gpus).
Span span_of(const PlanCandidate& c, const RunPlan& plan, GroupKind kind, const Hardware& hw, const ModelOptions& o) {
  return widest_span(c.par, kind, hw.topology(std::max(plan.P, o.job_gpus)));
}

// The ring's threshold of lesson 3: a block of c tokens hides its K/V when c >= (Hkv/H) F/B in
// bf16 (Liu et al. 2023), twice that under a causal mask (lesson 6); fp32 moves twice the bytes.
// A scheme whose hop carries something else (the pass-Q ring: q, out and lse) scales the same
// threshold by its hop's bytes against 2 H d a token.
std::string ring_reason(const PlanCandidate& c, const RunPlan& plan, const Hardware& hw, const ModelOptions& o) {
  const LayerConfig& cfg = plan.layer;
  const ParallelConfig& par = c.par;
  const int R = par.ring_size(), U = par.a2a_size();
  const Span span = span_of(c, plan, GroupKind::ring, hw, o);
  // What a hop carries per query head it serves: Hkv/H for the K/V ring, after Ulysses the kv
  // heads a rank reads per query head, (2 d + 1) / 2 d for q, out and lse.
  const Shares mine(plan, 0);
  const double per_token_head = 2.0 * double(mine.b * U * mine.n_c * mine.heads.q_count * mine.d * dtype_size(DType::f32));
  const double kv_per_q = double(par.scheme().hop_bytes(mine, DType::f32)) / per_token_head;
  const double block = double(plan.packing->S) / R;
  const RingThreshold t = ring_threshold(hw, o, hw.tiers[span.tier], kv_per_q, cfg.causal);
  // Past Hkv, Ulysses replicates kv heads: the factor is then what a rank reads, not Hkv/H.
  const std::string carries = par.scheme().hop_carries;
  const std::string factor = kv_per_q == double(cfg.Hkv) / double(cfg.H) ? "(Hkv/H)"
                             : U > 1 ? "(kv/q heads read = 1/" + num(1 / kv_per_q) + ")"
                                     : "(" + carries + " = " + fixed3(kv_per_q) + " x 2 H d)";
  // The ring's own name in configuration names: "ring", or the pass-Q ring's "ring-q".
  return par.scheme().strategy.back() + (" " + std::to_string(R)) + " " + link_words(span, hw) + ": c = " + num(block) + (block >= t.tokens ? " >= " : " < ") +
         t.doubling + factor + " " + t.formula + " = " + num(t.tokens) + (block >= t.tokens ? ", " + carries + " hidden" : ", " + carries + " exposed");
}

std::string a2a_reason(const PlanCandidate& c, const RunPlan& plan, const Hardware& hw, const ModelOptions& o) {
  const std::string& dtype = o.dtype;
  const LayerConfig& cfg = plan.layer;
  const int U = c.par.a2a_size(), P = c.par.tp * c.par.cp;
  const Span span = span_of(c, plan, GroupKind::a2a, hw, o);
  // Jacobs et al. 2023 (lesson 5): a rank holds N h / P of q and of out, and Hkv'/H as much of k
  // and v (Hkv': the kv heads it reads after the all-to-all); each all-to-all over U sends
  // (U-1)/U of its tensor. MHA with U = P: 4 N h (P-1)/P^2, the paper's 4Nh/P per link.
  const HeadShare share = ulysses_head_share(cfg.H / c.par.tp, cfg.Hkv / c.par.tp, U, 0);
  const double kv_per_q = double(share.kv_attended()) / double(share.q_count);
  const double volume = (2 + 2 * kv_per_q) * double(cfg.b * plan.packing->S) * double(cfg.h) / P * (U - 1) / U *
                        element_bytes(dtype);
  const std::string formula = kv_per_q == 1 ? "4 N h (U-1)/(U P)" : "(2 + 2 Hkv'/H) N h (U-1)/(U P)";
  return "a2a " + std::to_string(U) + " " + link_words(span, hw) + ": " + formula + " = " + format_bytes(volume) +
         " forward, exposed (U <= H/T = " + std::to_string(cfg.H / c.par.tp) + ")";
}

std::string all_gather_reason(const PlanCandidate& c, const RunPlan& plan, const Hardware& hw, const ModelOptions& o) {
  const std::string& dtype = o.dtype;
  const LayerConfig& cfg = plan.layer;
  const Span span = span_of(c, plan, GroupKind::cp, hw, o);
  const int64_t S = plan.packing->S;
  const double kv = 2.0 * double(cfg.b * S) * double(cfg.Hkv / c.par.tp) * double(cfg.d()) * element_bytes(dtype);
  const double gather_s = kv * (c.par.cp - 1) / c.par.cp / hw.tiers[span.tier].bandwidth;
  return "all_gather " + std::to_string(c.par.cp) + " " + link_words(span, hw) + ": K/V 2 " + (S != cfg.s ? "S" : "s") +
         " Hkv d / T = " + format_bytes(kv) +
         ", " + format_ns(gather_s * 1e9) + " a gather, exposed";
}

std::string tp_reason(const PlanCandidate& c, const RunPlan& plan, const Hardware& hw, const ModelOptions& o) {
  const std::string& dtype = o.dtype;
  const LayerConfig& cfg = plan.layer;
  const Span span = span_of(c, plan, GroupKind::tp, hw, o);
  const int T = c.par.tp;
  // Korthikanti et al. 2022: per block an all-gather and a reduce-scatter of N_c h, (T-1)/T each.
  const double per = double(cfg.b * plan.packing->S) / c.par.cp * double(cfg.h) * (T - 1) / T * element_bytes(dtype);
  return "TP " + std::to_string(T) + " " + link_words(span, hw) + ": " + format_bytes(per) + " per all-gather and reduce-scatter, " +
         (tp_comm_overlap_of(o) ? "in chunks under its GEMMs (TP overlap), the first exposed" : "exposed");
}

}  // namespace

// What sets the candidate's time: the sublayer whose communication is most exposed.
std::string layer_reason(const PlanCandidate& c, const RunPlan& plan, const Hardware& hw, const ModelOptions& o,
                       const trace::StrategyMetrics& m) {
  std::string worst;
  int64_t most = -1;
  for (const auto& [sublayer, b] : m.comm_by_sublayer)
    if (b.exposed_comm_ns > most) most = b.exposed_comm_ns, worst = sublayer;
  const bool has_cp = c.par.cp > 1, has_tp = c.par.tp > 1;
  // Context parallelism's groups, each by its formula: the all-to-all, the ring, the all-gather.
  auto cp_reason = [&] {
    const CpGroups& groups = c.par.scheme().groups;
    std::vector<std::string> each;
    if (groups.a2a) each.push_back(a2a_reason(c, plan, hw, o));
    if (groups.ring) each.push_back(ring_reason(c, plan, hw, o));
    if (groups.cp) each.push_back(all_gather_reason(c, plan, hw, o));
    std::string all;
    for (const std::string& e : each) all += (all.empty() ? "" : "; ") + e;
    return all;
  };
  // The most exposed first, then each group's formula: TP's, then context parallelism's.
  std::vector<std::string> parts;
  if (worst == "grad_sync" && has_cp) {
    const double grads = 2.0 * double(parallel_param_count(plan)) * element_bytes(o.dtype) *
                         (c.par.cp - 1) / c.par.cp;
    parts.push_back("grad all-reduce over CP " + std::to_string(c.par.cp) + " " +
                    link_words(span_of(c, plan, GroupKind::cp, hw, o), hw) + ": " + format_bytes(grads) + " exposed");
  }
  if (worst == "attention" && has_cp) parts.push_back(cp_reason());
  if (has_tp) parts.push_back(tp_reason(c, plan, hw, o));
  if (has_cp && worst != "attention") parts.push_back(cp_reason());
  if (parts.empty()) parts.push_back("no communication");
  std::string why;
  for (const std::string& p : parts) why += (why.empty() ? "" : "; ") + p;
  if (c.par.recompute == Recompute::full) why += "; full recompute (+1 forward)";
  else if (c.par.recompute == Recompute::selective) why += "; selective recompute";
  return why;
}

namespace {

// ---- memory ---------------------------------------------------------------------------

// A row's memory and, where it does not fit, its status and the binding term.
void set_memory(PlanRow& row, const StepCost& memory, const Hardware& hw, bool floor) {
  row.memory = memory, row.peak_bytes = memory.total_bytes();
  if (row.peak_bytes <= hw.memory_bytes) return;
  const auto [term, bytes] = binding_term(memory);
  row.status = PlanStatus::out_of_memory;
  row.reason = "out of memory: needs " + std::string(floor ? "at least " : "") + memory_text(memory, hw.memory_bytes) + " of " +
               format_bytes(hw.memory_bytes) + " (" + format_bytes(hw.memory_bytes, ByteUnits::decimal) + "); binding: " + term + " " +
               format_bytes(bytes);
}

// ---- one dry run, many replays ---------------------------------------------------------

using ShapeKey = std::tuple<int, int, int, int, int, int>;  // T, C, cp_comm, U, layout, recompute

ShapeKey shape_of(const PlanCandidate& c) {
  return {c.par.tp, c.par.cp, cp_scheme_index(*c.par.cp_comm), c.par.a2a_size(), int(c.par.layout), int(c.par.recompute)};
}

}  // namespace

// Bytes each rank sends on each tier's links, the most of any rank per tier, by the placement
// `gpu_of` on `topology` (fp32 bytes scaled).
std::vector<double> link_traffic(const trace::TraceData& schedule, const std::vector<int>& gpu_of, const Topology& topology,
                                 double scale) {
  std::vector<double> most(topology.tiers().size(), 0.0);
  for (const trace::RankTrace& r : schedule.ranks) {
    std::vector<double> mine(most.size(), 0.0);
    for (const trace::Event& e : r.events)
      if (e.stream == trace::Stream::comm && e.direction == trace::Direction::send && e.peer >= 0)
        mine[topology.link(gpu_of[size_t(r.rank)], gpu_of[size_t(e.peer)])] += double(e.bytes) * scale;
    for (size_t t = 0; t < most.size(); ++t) most[t] = std::max(most[t], mine[t]);
  }
  return most;
}

// The dry run of a candidate's schedule (`plan`, resolved), recorded in tp-cp order: every
// order places the same coordinates, so one schedule serves both (placement re-maps it).
RecordedSchedule record_schedule(const RunPlan& plan, bool grad_sync) {
  RecordedSchedule rec;
  ParallelConfig recorded = plan.par;
  recorded.order = RankOrder::tp_cp;
  rec.plan = recorded.order == plan.par.order ? plan : resolve(recorded, plan.layer, plan.P);
  rec.tracker = std::make_unique<MemoryTracker>();
  RankOptions opts;
  opts.grad_sync = grad_sync;
  rec.schedule = dry_run(rec.plan, *rec.tracker, &rec.results, opts);
  return rec;
}

namespace {

std::mutex g_cache_mutex;
int g_cache_scopes = 0;
std::map<std::string, std::shared_ptr<const RecordedSchedule>> g_cache;

}  // namespace

ScheduleCacheScope::ScheduleCacheScope() {
  std::lock_guard<std::mutex> lock(g_cache_mutex);
  ++g_cache_scopes;
}

ScheduleCacheScope::~ScheduleCacheScope() {
  std::lock_guard<std::mutex> lock(g_cache_mutex);
  if (--g_cache_scopes == 0) g_cache.clear();
}

std::shared_ptr<const RecordedSchedule> recorded_schedule(const RunPlan& plan, bool grad_sync) {
  // The layer and the configuration: its degrees, kind, order, layout and recompute.
  const std::string key = plan.config_json().dump() + " " + plan.par.name() + " P=" + std::to_string(plan.P) + " " +
                          to_string(plan.par.order) + (grad_sync ? " sync" : " no-sync");
  {
    std::lock_guard<std::mutex> lock(g_cache_mutex);
    if (g_cache_scopes > 0)
      if (const auto it = g_cache.find(key); it != g_cache.end()) return it->second;
  }
  auto rec = std::make_shared<const RecordedSchedule>(record_schedule(plan, grad_sync));
  std::lock_guard<std::mutex> lock(g_cache_mutex);
  if (g_cache_scopes > 0) g_cache[key] = rec;
  return rec;
}

namespace {

void fill_modeled(PlanRow& row, const RecordedSchedule& rec, int P, const PlanOptions& o, const Hardware& hw) {
  const PlanCandidate& c = row.candidate;
  const int L = o.layers;
  const std::string& dtype = o.modeling.dtype;
  const double scale = element_bytes(dtype) / 4;
  ModelOptions mo = o.modeling;
  mo.gpu_of = schedule_gpus(c.par, P);
  const trace::TraceData modeled = model_trace(rec.schedule, hw, mo);
  const std::vector<trace::StrategyMetrics> metrics = trace::compute_metrics(modeled);
  RS_CHECK(metrics.size() == 1, "plan: one group per schedule, got ", metrics.size());
  const trace::StrategyMetrics& m = metrics.front();
  row.step_s = L * double(trace::layer_ns(m)) / 1e9;
  row.exposed_s = L * double(m.total.exposed_comm_ns) / double(m.ranks.size()) / 1e9;
  row.parts = layer_time_parts(modeled, m, hw, mo).scaled(L);
  row.overlap_pct = m.total.overlap_pct();
  const std::optional<trace::Breakdown> attention = trace::sublayer_comm(m, "attention");
  row.attention_hidden_pct = attention ? attention->overlap_pct() : std::nan("");
  row.tier_bytes = link_traffic(rec.schedule, mo.gpu_of, hw.topology(P), scale);
  for (double& b : row.tier_bytes) b *= L;
  // Memory: the step's count of the group alone, its layer's saved activations and working
  // peak as the dry run counted them.
  LayerCost layer = step_parts::formula_layer(rec.plan, dtype);
  step_parts::measured_memory(rec, dtype, layer);
  set_memory(row, group_memory(rec.plan, layer, o), hw, false);
  if (row.status == PlanStatus::out_of_memory) return;
  row.status = PlanStatus::ranked;
  row.reason = layer_reason(c, rec.plan, hw, mo, m);
}

// ---- the verdict ----------------------------------------------------------------------

std::string where(const PlanCandidate& c, int P, const Hardware& hw) {
  const Topology topology = hw.topology(P);
  std::vector<std::string> parts;
  auto say = [&](GroupKind kind, const std::string& what, int size) {
    if (size < 2) return;
    parts.push_back("its " + what + " of " + std::to_string(size) + " " + placement_words(widest_span(c.par, kind, topology), hw, kind == GroupKind::ring));
  };
  say(GroupKind::tp, "TP group", c.par.tp);
  if (c.par.scheme().groups.cp) say(GroupKind::cp, "all_gather group", c.par.cp);
  say(GroupKind::a2a, "all-to-all group", c.par.a2a_size());
  say(GroupKind::ring, "ring", c.par.ring_size());
  std::string s;
  for (size_t i = 0; i < parts.size(); ++i) s += (i == 0 ? "" : i + 1 == parts.size() ? " and " : ", ") + parts[i];
  return s.empty() ? "a single GPU, no groups" : s;
}

std::string verdict_of(const Plan& plan, const LayerConfig& cfg, const PlanOptions& o) {
  const size_t n = plan.ranked();
  if (n == 0) return "nothing fits on " + plan.hw.name + ".";
  const PlanRow& win = plan.rows[0];
  char head[256];
  std::snprintf(head, sizeof head, "%s wins on %s: %s per step of %d layer%s (modeled). ", win.candidate.name().c_str(),
                plan.hw.name.c_str(), format_ns(win.step_s * 1e9).c_str(), o.layers, o.layers == 1 ? "" : "s");
  std::string v = std::string(head) + "Placement: " + where(win.candidate, plan.P, plan.hw) + ". Why: " + win.reason + ".";
  // The recompute it needs, against the fastest that needs less.
  if (win.candidate.par.recompute != Recompute::none) {
    const PlanRow* lighter = nullptr;
    for (const PlanRow& r : plan.rows)
      if (r.status == PlanStatus::out_of_memory && int(r.candidate.par.recompute) < int(win.candidate.par.recompute) &&
          (!lighter || r.peak_bytes < lighter->peak_bytes))
        lighter = &r;
    bool lighter_ranked = false;
    for (size_t i = 0; i < n; ++i) lighter_ranked |= int(plan.rows[i].candidate.par.recompute) < int(win.candidate.par.recompute);
    if (lighter && !lighter_ranked)
      v += " It recomputes (" + std::string(to_string(win.candidate.par.recompute)) + ") because nothing with less recomputation fits: the least memory without it is " +
           lighter->candidate.name() + "'s, " + lighter->reason.substr(lighter->reason.find("needs")) + ".";
  }
  if (const PlanRow* second = runner_up(plan)) {
    char tail[256];
    std::snprintf(tail, sizeof tail, " The runner-up (the best other split: other degrees, CP kind or placement), %s, is %.1f%% slower: ",
                  second->candidate.name().c_str(), 100.0 * (second->step_s / win.step_s - 1));
    v += tail + where(second->candidate, plan.P, plan.hw) + "; it " + versus_words(*second, win, "the winner") + "; " +
         second->reason + ".";
  }
  return v;
}

}  // namespace

std::string PlanCandidate::name() const {
  std::string n = par.canonical_name();
  if (par.scheme().token_layout) n += std::string(" ") + to_string(par.layout);
  return n + " " + to_string(par.recompute);
}

const char* to_string(PlanStatus s) {
  switch (s) {
    case PlanStatus::ranked: return "ranked";
    case PlanStatus::invalid: return "invalid";
    case PlanStatus::out_of_memory: return "out_of_memory";
    case PlanStatus::bounded: return "bounded";
  }
  return "?";
}

const PlanRow* runner_up(const Plan& plan) {
  // Another split: other degrees, another kind of CP, or the other rank order where the group
  // spans nodes (inside one node both orders put every group on NVLink: the same placement).
  const ParallelConfig& win = plan.rows.empty() ? ParallelConfig{} : plan.rows[0].candidate.par;
  auto same_split = [&](const ParallelConfig& p) {
    if (p.name() == win.name()) return true;
    const bool one_domain = plan.hw.tiers.size() == 1 || p.tp * p.cp <= plan.hw.topology(plan.P).domain_gpus(0);
    return one_domain && p.tp == win.tp && p.cp == win.cp && p.cp_comm == win.cp_comm && p.a2a_size() == win.a2a_size();
  };
  const size_t n = plan.ranked();
  for (size_t i = 1; i < n; ++i)
    if (!same_split(plan.rows[i].candidate.par)) return &plan.rows[i];
  return nullptr;
}

size_t Plan::ranked() const {
  return size_t(std::count_if(rows.begin(), rows.end(), [](const PlanRow& r) { return r.status == PlanStatus::ranked; }));
}

std::vector<PlanCandidate> plan_candidates(const LayerConfig& cfg, Layout given, int P, const std::vector<Recompute>& modes,
                                           const std::vector<const CpScheme*>& schemes) {
  auto weighed = [&](const CpScheme* s) {
    return schemes.empty() ? s->planned_by_default() : std::find(schemes.begin(), schemes.end(), s) != schemes.end();
  };
  std::vector<PlanCandidate> all;
  auto add = [&](ParallelConfig par, Layout layout) {
    const bool two_orders = par.tp > 1 && par.cp > 1;
    par.layout = layout;
    for (RankOrder order : {RankOrder::tp_cp, RankOrder::cp_tp}) {
      if (order == RankOrder::cp_tp && !two_orders) continue;
      par.order = order;
      for (Recompute rc : modes) par.recompute = rc, all.push_back({par});
    }
  };
  for (int T = 1; T <= P; ++T) {
    if (P % T != 0) continue;
    const int C = P / T;
    if (C == 1) {
      add({T, 1, &no_cp_scheme()}, Layout::contiguous);
      continue;
    }
    // Every scheme over C, a nested one (Ulysses x ring) at every U strictly between 1 and C.
    std::vector<ParallelConfig> comms;
    for (const CpScheme* scheme : cp_schemes()) {
      if (scheme->none() || !weighed(scheme)) continue;
      if (!scheme->nested()) comms.push_back({T, C, scheme, scheme->groups.a2a ? C : 1});
      else
        for (int U = 2; U < C; ++U)
          if (C % U == 0) comms.push_back({T, C, scheme, U});
    }
    for (const ParallelConfig& par : comms) {
      if (!par.layout_matters(cfg)) {
        add(par, Layout::contiguous);
        continue;
      }
      if (given != Layout::automatic) add(par, given);  // --layout given: that one alone
      else
        for (Layout layout : {Layout::contiguous, Layout::zigzag, Layout::striped}) add(par, layout);
    }
  }
  return all;
}

std::vector<Plan> make_plan(const LayerConfig& cfg, const PlanOptions& o, const std::vector<Hardware>& profiles,
                            PlanStats* stats) {
  const auto t0 = std::chrono::steady_clock::now();
  if (profiles.empty()) throw ConfigError("plan: give at least one hardware profile (--hw)");
  if (o.layers < 1) throw ConfigError("plan: --layers must be >= 1");
  if (o.modes.empty()) throw ConfigError("plan: give at least one recompute mode");
  const int P = o.gpus;
  const std::vector<PlanCandidate> candidates = plan_candidates(cfg, o.layout, P, o.modes, o.schemes);
  ProgressReport silent;
  ProgressReport& progress = o.progress ? *o.progress : silent;
  PlanStats st;
  st.candidates = candidates.size();

  // Every row starts invalid or waiting; the rules first, on every candidate.
  std::vector<std::vector<PlanRow>> rows(profiles.size(), std::vector<PlanRow>(candidates.size()));
  std::vector<std::optional<RunPlan>> valid(candidates.size());  // resolved once, or refused
  std::vector<std::string> rules;
  progress.phase("checking every candidate against the rules", candidates.size(), "candidates");
  for (size_t i = 0; i < candidates.size(); ++i) {
    progress.advance();
    std::string why;
    try {
      valid[i] = resolve(candidates[i].par, cfg, P);
    } catch (const ConfigError& e) {
      why = e.what();
      if (std::find(rules.begin(), rules.end(), why) == rules.end()) rules.push_back(why);
      ++st.invalid;
    }
    for (auto& per_profile : rows) per_profile[i].candidate = candidates[i], per_profile[i].reason = why;
  }
  if (st.invalid == candidates.size()) {
    std::string all;
    for (const std::string& r : rules) all += "\n  " + r;
    throw ConfigError(detail::concat("plan: no configuration of ", P, " GPUs splits this layer (", cfg.summary(), "):", all));
  }

  // One dry run per schedule shape, replayed for each order and profile.
  std::map<ShapeKey, std::vector<size_t>> shapes;
  std::vector<ShapeKey> shape_order;
  for (size_t i = 0; i < candidates.size(); ++i) {
    if (!valid[i]) continue;
    auto [it, fresh] = shapes.try_emplace(shape_of(candidates[i]));
    if (fresh) shape_order.push_back(it->first);
    it->second.push_back(i);
  }
  progress.phase("dry-running each schedule shape that fits and replaying it", shape_order.size(), "schedule shapes");
  for (const ShapeKey& key : shape_order) {
    progress.advance();
    const std::vector<size_t>& members = shapes[key];
    bool needed = false;
    for (size_t i : members) {
      // The formulas' count, without the working peak: the same on every profile.
      const StepCost floor = group_memory(*valid[i], step_parts::formula_layer(*valid[i], o.modeling.dtype), o);
      for (size_t p = 0; p < profiles.size(); ++p) {
        PlanRow& row = rows[p][i];
        row.status = PlanStatus::ranked;
        set_memory(row, floor, profiles[p], true);
        if (row.status == PlanStatus::out_of_memory) {
          ++st.memory_rejects;
        } else {
          needed = true;  // ranked for now: to be replayed
        }
      }
    }
    if (!needed) continue;
    const RecordedSchedule rec = record_schedule(*valid[members.front()]);
    ++st.dry_runs;
    size_t replays = 0;
    for (size_t p = 0; p < profiles.size(); ++p)
      for (size_t i : members)
        if (rows[p][i].status == PlanStatus::ranked) fill_modeled(rows[p][i], rec, P, o, profiles[p]), ++replays;
    st.reused += replays - 1;
  }

  std::vector<Plan> plans;
  progress.phase("ranking the rows", profiles.size(), "profiles");
  for (size_t p = 0; p < profiles.size(); ++p) {
    progress.advance();
    Plan plan;
    plan.hw = profiles[p];
    plan.P = P;
    plan.rows = std::move(rows[p]);
    std::stable_sort(plan.rows.begin(), plan.rows.end(), [](const PlanRow& a, const PlanRow& b) {
      if (a.status != b.status) return int(a.status) < int(b.status);  // ranked, invalid, out of memory
      if (a.status == PlanStatus::ranked && a.step_s != b.step_s) return a.step_s < b.step_s;
      if (a.status == PlanStatus::ranked) return a.peak_bytes < b.peak_bytes;
      if (a.status == PlanStatus::out_of_memory) return a.peak_bytes < b.peak_bytes;
      return false;
    });
    say_versus(plan.rows, plan.ranked(), runner_up(plan));
    plan.verdict = verdict_of(plan, cfg, o);
    plans.push_back(std::move(plan));
  }
  bool any = false;
  for (const Plan& p : plans) any |= p.ranked() > 0;
  if (!any) {
    const PlanRow* least = nullptr;
    for (const PlanRow& r : plans.front().rows)
      if (r.status == PlanStatus::out_of_memory && (!least || r.peak_bytes < least->peak_bytes)) least = &r;
    throw ConfigError(detail::concat("plan: nothing fits in ", format_bytes(plans.front().hw.memory_bytes), " per GPU at s = ",
                                     cfg.s, " on ", P, " GPUs with ", o.layers, " layer", o.layers == 1 ? "" : "s",
                                     ": the least is ", least->candidate.name(), ", which ", least->reason.substr(least->reason.find("needs")),
                                     ". Give more GPUs (--gpus), a shorter --seq or fewer --layers",
                                     o.modes.size() < 3 ? ", or --recompute any" : ""));
  }
  st.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  if (stats) *stats = st;
  return plans;
}

StepConfig group_step(const ParallelConfig& par, int layers, const std::string& dtype) {
  StepConfig sc;
  sc.layers = layers, sc.pp = 1, sc.vp = 1, sc.microbatches = 1;
  sc.dp = par.cp, sc.dp_span.size = par.cp;  // the CP ranks hold the same weights
  sc.zero = kGroupZero;
  sc.weight_bytes = element_bytes(dtype);
  return sc;
}

StepCost group_memory(const RunPlan& plan, const LayerCost& layer, const PlanOptions& o) {
  const EndsCost ends = ends_memory(plan.layer, plan.layer.b * plan.packing->S / plan.par.cp, o.vocab, plan.par.tp,
                                    element_bytes(o.modeling.dtype));
  return step_memory(group_step(plan.par, o.layers, o.modeling.dtype), layer, ends);
}

std::vector<trace::RankTrace> candidate_timeline(const PlanCandidate& c, const LayerConfig& cfg, int P, const Hardware& hw,
                                                 const ModelOptions& o, const std::string& label) {
  MemoryTracker tracker;
  const trace::TraceData schedule = dry_run(resolve(c.par, cfg, P), tracker);
  trace::TraceData modeled = model_trace(schedule, hw, o);
  for (trace::RankTrace& r : modeled.ranks) r.strategy = label;
  return std::move(modeled.ranks);
}

}  // namespace ringside::model

// The whole-step planner of step_plan.h: enumerate, reject by the formulas, dry-run each group
// shape once, replay it per profile, simulate the step around it for every outer configuration.
#include "model/step_plan.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <map>
#include <optional>
#include <set>

#include "core/error.h"
#include "core/units.h"
#include "model/flops.h"
#include "model/step_parts.h"
#include "parallel/formulas.h"

namespace ringside::model {

using namespace step_parts;

namespace {

// How close to the best verified step a shape's estimate must come to be dry-run itself.
constexpr double kMargin = 0.05;

// Up to this many TP x CP groups (about 256 GPUs; 16 GPUs have 339) the search is branch and bound,
// --exhaustive's winner for about 2 to 5 times the dry runs; past it, by the families' ratios,
// which keeps 16,384 GPUs (1,824 groups) in `bench plan --gbs`'s target (289 dry runs against 27
// by the bound alone).
constexpr size_t kSoundGroups = 1024;

}  // namespace

void check_step_options(const LayerConfig& cfg, const StepPlanOptions& o) {
  const int P = o.gpus;
  if (o.layers < 1) throw ConfigError("--layers must be >= 1");
  if (o.gbs < 1 || o.mbs < 1) throw ConfigError(detail::concat("--gbs and --mbs must be >= 1 (GBS = ", o.gbs, ", MBS = ", o.mbs, ")"));
  if (o.gbs % o.mbs != 0) throw ConfigError(detail::concat("GBS = ", o.gbs, " is not a multiple of MBS = ", o.mbs));
  if (o.vp > 1 && o.pp == 1) throw ConfigError(detail::concat("--vp ", o.vp, " needs --pp > 1 (model chunks interleave pipeline stages)"));
  if (o.vp > 1 && o.pp == 0) throw ConfigError(detail::concat("--vp ", o.vp, " needs --pp (the stages to interleave)"));
  if (o.pp > 0) stage_layers(o.layers, o.pp);  // throws its rule
  if (o.pp > 0 && P % o.pp != 0) throw ConfigError(detail::concat("PP = ", o.pp, " does not divide the ", P, " GPUs"));
  if (o.dp > 0 && P % o.dp != 0) throw ConfigError(detail::concat("DP = ", o.dp, " does not divide the ", P, " GPUs"));
  if (o.pp > 0 && o.dp > 0 && P % (o.pp * o.dp) != 0)
    throw ConfigError(detail::concat("PP x DP = ", o.pp * o.dp, " does not divide the ", P, " GPUs"));
  if (o.dp > 0 && o.gbs % (o.dp * o.mbs) != 0)
    throw ConfigError(detail::concat("GBS = ", o.gbs, " is not divisible by DP x MBS = ", o.dp, " x ", o.mbs, " = ", o.dp * o.mbs,
                                     " (each replica runs GBS / (DP MBS) whole microbatches)"));
  if (o.vp > 0 && o.pp > 0) check_interleave(stage_layers(o.layers, o.pp), o.vp);
  if (o.zero > 3) throw ConfigError(detail::concat("ZeRO stage ", o.zero, " is not 0, 1, 2 or 3"));
  if (P < 1 || P > 131072) throw ConfigError(detail::concat("a step of ", P, " GPUs: the planner takes 1 to 131072"));
  if (o.pp > 0 && o.dp > 0 && o.gbs % (o.dp * o.mbs) == 0) {
    const int64_t m = o.gbs / (o.dp * o.mbs), vp = std::max(o.vp, 1);
    if (vp > 1 && m % o.pp != 0)
      throw ConfigError(detail::concat("the interleaved schedule (VP = ", vp, ") needs the m = GBS / (DP MBS) = ", m,
                                       " microbatches divisible by PP = ", o.pp, " (Megatron's rule)"));
    if (int64_t(o.pp) * vp * m > kMaxPipelineChunks)
      throw ConfigError(detail::concat("PP x VP x m = ", o.pp, " x ", vp, " x ", m, " microbatch-chunks to simulate, more than ",
                                       kMaxPipelineChunks, ": give a smaller --gbs or a larger --dp or --mbs"));
  }
  if (cfg.b != o.mbs) throw ConfigError(detail::concat("the layer's batch b = ", cfg.b, " must be the microbatch, MBS = ", o.mbs));
}

std::string StepCandidate::order_name() const {
  const std::string inner = layer.par.order == RankOrder::tp_cp ? "tp-cp" : "cp-tp";
  return inner + (order == OuterOrder::pp_dp ? "-pp-dp" : "-dp-pp");
}

std::pair<RankOrder, OuterOrder> parse_order_name(const std::string& name) {
  for (RankOrder inner : {RankOrder::tp_cp, RankOrder::cp_tp})
    for (OuterOrder outer : {OuterOrder::pp_dp, OuterOrder::dp_pp}) {
      StepCandidate c;
      c.layer.par.order = inner, c.order = outer;
      if (c.order_name() == name) return {inner, outer};
    }
  throw ConfigError("unknown rank order '" + detail::shown_input(name) +
                    "' of a whole step: tp-cp-pp-dp, tp-cp-dp-pp, cp-tp-pp-dp or cp-tp-dp-pp (innermost first)");
}

std::string StepCandidate::name() const {
  // The group's degrees in full (ring8, not ring: the group is not all P GPUs), then its layout
  // where layouts differ and its recompute mode, as the layer plan names them.
  const ParallelConfig& par = layer.par;
  std::string n = par.name();
  if (par.scheme().token_layout) n += std::string(" ") + to_string(par.layout);
  n += std::string(" ") + to_string(par.recompute);
  if (pp == 0) return n;  // a group no step can use: the group alone
  n += " pp" + std::to_string(pp);
  if (vp > 1) n += " vp" + std::to_string(vp);
  n += " dp" + std::to_string(dp) + " zero" + std::to_string(zero);
  if (pp > 1 && dp > 1) n += order == OuterOrder::pp_dp ? " pp-dp" : " dp-pp";
  return n;
}

size_t StepPlan::ranked() const {
  return size_t(std::count_if(rows.begin(), rows.end(), [](const StepRow& r) { return r.status == PlanStatus::ranked; }));
}

const StepRow* step_runner_up(const StepPlan& plan) {
  const size_t n = plan.ranked();
  auto degrees = [](const StepCandidate& c) {
    return std::make_tuple(c.layer.par.name(), c.pp, c.dp, int(c.order));
  };
  for (size_t i = 1; i < n; ++i)
    if (degrees(plan.rows[i].candidate) != degrees(plan.rows[0].candidate)) return &plan.rows[i];
  return nullptr;
}

namespace {


// The order of the table: the ranked, then those bounded out, then the invalid, then those
// that do not fit.
int status_place(PlanStatus s) {
  switch (s) {
    case PlanStatus::ranked: return 0;
    case PlanStatus::bounded: return 1;
    case PlanStatus::invalid: return 2;
    case PlanStatus::out_of_memory: return 3;
  }
  return 4;
}

// Under a causal mask the contiguous layout sends the same bytes and holds the same memory as
// zigzag and striped, and gives its last rank the most work of any (lesson 4): never faster,
// so not weighed unless asked for (--layout contiguous).
bool dominated(const PlanCandidate& c, const LayerConfig& cfg, Layout given) {
  return given == Layout::automatic && c.par.layout_matters(cfg) && c.par.layout == Layout::contiguous;
}

// Where each dimension's groups sit, the tier their traffic uses and, beyond the innermost
// domain, how much: "TP 8 inside one NVLink domain, the TP x CP group of 128 (CP 16 p2p) across InfiniBand
// (12 GiB a GPU a step on it), 4 stages across InfiniBand (...) and gradients over DP x CP = 64
// across InfiniBand (...)".
std::string where(const StepRow& row, const Spans& spans, const Hardware& hw) {
  const StepCandidate& c = row.candidate;
  const ParallelConfig& par = c.layer.par;
  auto beyond = [&](const Span& span, double bytes) {
    return span.tier > 0 && hw.tiers.size() > 1 && bytes > 0 ? " (" + format_bytes(bytes) + " a GPU a step on it)" : std::string();
  };
  std::vector<std::string> parts;
  if (par.tp > 1) parts.push_back("TP " + std::to_string(par.tp) + " " + link_words(spans.tp, hw) + (par.cp > 1 ? "" : beyond(spans.tp, row.cost.group_beyond_bytes)));
  if (par.cp > 1)
    parts.push_back((par.tp > 1 ? "the TP x CP group of " + std::to_string(par.tp * par.cp) + " (CP " : "CP ") + std::to_string(par.cp) +
                    " " + par.scheme().name + (par.tp > 1 ? ") " : " ") + link_words(spans.group, hw) +
                    beyond(spans.group, row.cost.group_beyond_bytes));
  if (c.pp > 1) parts.push_back(std::to_string(c.pp) + " stages " + link_words(spans.pp, hw) + beyond(spans.pp, row.cost.pp_beyond_bytes));
  if (spans.weights.size > 1)
    parts.push_back("gradients over DP x CP = " + std::to_string(spans.weights.size) + " " + link_words(spans.weights, hw) +
                    beyond(spans.weights, row.cost.dp_beyond_bytes));
  std::string s;
  for (size_t i = 0; i < parts.size(); ++i) s += (i == 0 ? "" : i + 1 == parts.size() ? " and " : ", ") + parts[i];
  return s.empty() ? "a single GPU" : s;
}

std::string step_verdict(const StepPlan& plan, const StepPlanOptions& o) {
  if (plan.ranked() == 0) return "nothing fits on " + plan.hw.name + ".";
  const StepRow& win = plan.rows[0];
  char head[400];
  std::snprintf(head, sizeof head,
                "%s wins on %s: %.0f tokens/s per GPU, MFU %.1f%%, a step of %s for %d sequences (modeled). ",
                win.candidate.name().c_str(), plan.hw.name.c_str(), win.tokens_per_s_per_gpu, 100 * win.mfu,
                format_ns(win.cost.step_s * 1e9).c_str(), o.gbs);
  std::string v = head;
  {
    const Spans spans = spans_of(win.candidate, plan.hw.topology(o.gpus));
    v += "Placement (" + win.candidate.order_name() + ", " + plan.hw.topology(o.gpus).domain_words() + "): " + where(win, spans, plan.hw) + ". ";
  }
  v += "Why: " + win.reason + ".";
  if (const StepRow* second = step_runner_up(plan)) {
    char tail[200];
    std::snprintf(tail, sizeof tail, " The runner-up (the best of other degrees or placement), %s, is %.1f%% slower: ",
                  second->candidate.name().c_str(), 100.0 * (second->cost.step_s / win.cost.step_s - 1));
    v += std::string(tail) + "it " + versus_words(*second, win, "the winner") + "; " + second->reason + ".";
  }
  return v;
}

}  // namespace

ModeledStep model_step_of(const LayerConfig& cfg, const StepCandidate& c, const StepPlanOptions& options, const Hardware& hw) {
  StepPlanOptions o = options;
  o.pp = c.pp, o.vp = c.vp, o.dp = c.dp, o.zero = c.zero;
  const int G = c.layer.par.tp * c.layer.par.cp;
  o.gpus = G * c.pp * c.dp;
  check_step_options(cfg, o);
  Group g;
  g.layer = c.layer, g.G = G;
  g.plan = resolve(c.layer.par, cfg, G);
  g.floor = formula_layer(*g.plan, o.modeling.dtype);
  // The outer order places PP and DP only when both are above 1; otherwise both orders are one
  // placement, pp-dp's.
  const OuterOrder order = c.pp > 1 && c.dp > 1 ? c.order : OuterOrder::pp_dp;
  std::vector<Outer> outer;
  for (const Outer& out : outer_configs(c.pp * c.dp, o.layers, o, true))
    if (out.order == order) outer.push_back(out);
  if (outer.size() != 1)
    throw ConfigError(detail::concat("model: PP = ", c.pp, ", VP = ", c.vp, " and DP = ", c.dp, " with GBS = ", o.gbs,
                                     " sequences do not make one pipeline of whole microbatches (m = GBS / (DP MBS))"));
  g.outers = &outer;
  const std::shared_ptr<const RecordedSchedule> rec = recorded_schedule(*g.plan, false);
  const std::vector<Hardware> profiles{hw};
  const Evaluator eval{cfg, o, profiles};
  const Replayed replayed = eval.replay(*rec, g, 0);
  PipelineMemo memo;
  ModeledStep m;
  m.row = eval.rows(g, 0, replayed.layer, &replayed.reason, memo, &replayed.parts).front();
  if (m.row.status == PlanStatus::invalid) throw ConfigError("model: " + m.row.reason);
  const Spans& spans = eval.spans(m.row.candidate, 0);
  m.layer = replayed.layer;
  m.ends = eval.ends_of(g, hw, spans.tp);
  m.config = eval.step_config(g, outer.front(), spans);
  return m;
}

namespace {

// The search behind make_step_plan, step by step: the groups (enumerate), every configuration
// by its lower bound (bound_all), then recompute level by level the dry runs that could still
// win (search), and the plans (assemble).
class StepSearch {
 public:
  StepSearch(const LayerConfig& cfg, const StepPlanOptions& o, const std::vector<Hardware>& profiles)
      : cfg_(cfg), o_(o), profiles_(profiles), eval_{cfg, o, profiles}, best_(profiles.size(), INFINITY) {}

  std::vector<StepPlan> run(StepPlanStats& st) {
    enumerate();
    st.groups = groups_.size();
    bound_all();
    for (Recompute level : {Recompute::none, Recompute::selective, Recompute::full}) search(level);
    st.dry_runs = dry_runs_;
    st.pipelines = pipelines_.simulated, st.pipelines_reused = pipelines_.reused, st.pipeline_ops = pipelines_.ops;
    return assemble(st);
  }

 private:
  using Shape = std::vector<size_t>;  // the groups (orders) of one schedule shape

  // The TP x CP groups of every size G that leaves a PP x DP around it, each resolved once.
  void enumerate() {
    const int P = o_.gpus;
    // Both outer orders place alike where a group fills whole domains of every profile.
    int node = 1;
    for (const Hardware& hw : profiles_) node = std::max(node, hw.topology(P).domain_gpus(0) * (hw.tiers.size() > 1));
    std::vector<int> sizes;
    for (int G = 1; G <= std::min(P, o_.max_group); ++G)
      if (P % G == 0) sizes.push_back(G);
    progress_.phase("resolving the TP x CP groups of each size", sizes.size(), "group sizes");
    for (int G : sizes) {
      progress_.advance();
      std::vector<Outer> around = outer_configs(P / G, o_.layers, o_, G < node);
      if (around.empty()) continue;
      const std::vector<Outer>* kept = &(outers_[G] = std::move(around));
      for (const PlanCandidate& c : plan_candidates(cfg_, o_.layout, G, o_.modes, o_.schemes)) {
        if (dominated(c, cfg_, o_.layout)) continue;
        Group g;
        g.layer = c, g.G = G, g.outers = kept;
        try {
          g.plan = resolve(c.par, cfg_, G);
          g.floor = formula_layer(*g.plan, o_.modeling.dtype);
        } catch (const ConfigError& e) {
          g.invalid = e.what();
        }
        groups_.push_back(std::move(g));
      }
    }
    if (groups_.empty())
      throw ConfigError(detail::concat("plan: no TP x CP group of at most ", o_.max_group, " GPUs leaves PP x DP around it on ", P,
                                       " GPUs with GBS = ", o_.gbs, " and MBS = ", o_.mbs,
                                       " (DP x MBS must divide GBS, PP must fit the ", o_.layers,
                                       " layers, interleaving needs m divisible by PP, and PP x VP x m at most ", kMaxPipelineChunks, ")"));
  }

  // Each valid group's rows on each profile by its lower bound: memory by the formulas, time by
  // compute alone at the best rates (every configuration's own time is at least that).
  //
  // The groups of one G, T, CP kind and U (their layouts, orders and recompute modes, next to
  // each other in groups_) share many pipelines: ZeRO 0, 1 and 2 run the same one, and so do
  // recompute none and selective under a bound (the same compute) and both rank orders where
  // the transfers between stages cross the same links. Each is simulated once (a memo the
  // next such cluster of groups starts afresh).
  void bound_all() {
    rows_.assign(groups_.size(), std::vector<std::vector<StepRow>>(profiles_.size()));
    std::map<std::tuple<int, int, int, int, int>, double> attention;  // by T, C, cp_comm, U, layout
    progress_.phase("bounding every configuration (memory by the formulas, time by compute alone)", groups_.size(),
                    "TP x CP groups");
    std::tuple<int, int, int, int> cluster{0, 0, 0, 0};  // G, T, cp_comm, U
    for (size_t i = 0; i < groups_.size(); ++i) {
      progress_.advance();
      if (!groups_[i].plan) continue;
      siblings_[sibling_key(i)].push_back(i);
      const ParallelConfig& par = groups_[i].layer.par;
      if (const std::tuple<int, int, int, int> now{groups_[i].G, par.tp, cp_scheme_index(*par.cp_comm), par.a2a_size()}; now != cluster)
        cluster = now, pipelines_.clear();
      const auto key = std::make_tuple(par.tp, par.cp, cp_scheme_index(*par.cp_comm), par.a2a_size(), int(par.layout));
      if (!attention.count(key)) attention[key] = max_attention_flops(*groups_[i].plan);
      for (size_t p = 0; p < profiles_.size(); ++p)
        rows_[i][p] =
            eval_.rows(groups_[i], p, bound_layer(*groups_[i].plan, profiles_[p], o_.modeling, attention[key]), nullptr, pipelines_);
    }
    pipelines_.clear();
  }

  // One recompute level. Where there are more than kSoundGroups groups (search_bounded below
  // that): families are the shapes of one T and C (the same TP part and tokens a
  // rank), which differ in context parallelism alone. Each family's representative, its
  // cheapest schedule to record (all-gather, then Ulysses, the ring, the hybrid) of those whose
  // bound could still win, is dry-run first; the ratio of its verified time to its bound then
  // estimates its siblings', and a sibling is dry-run while that estimate is within kMargin of
  // the best verified on some profile.
  void search(Recompute level) {
    std::map<std::tuple<int, int, int, int, int>, Shape> shapes;  // T, C, cp_comm, U, layout
    for (size_t i = 0; i < groups_.size(); ++i) {
      const ParallelConfig& par = groups_[i].layer.par;
      if (!groups_[i].plan || par.recompute != level) continue;
      set_bound(i);
      shapes[{par.tp, par.cp, cp_scheme_index(*par.cp_comm), par.a2a_size(), int(par.layout)}].push_back(i);
    }
    if (shapes.empty()) return;  // a recompute mode not weighed
    progress_.phase(detail::concat("dry-running the schedule shapes that could still win, recompute ", to_string(level)),
                    shapes.size(), "dry runs", true);
    if (groups_.size() <= kSoundGroups) return search_bounded(shapes);
    std::map<std::pair<int, int>, std::vector<const Shape*>> families;  // T, C
    for (const auto& [key, members] : shapes) families[{std::get<0>(key), std::get<1>(key)}].push_back(&members);
    // Families in order of their best bound against the lowest of any family, on the profile
    // where they come closest (whatever order the profiles were given in).
    std::vector<double> lowest(profiles_.size(), INFINITY);
    for (const auto& [key, members] : shapes)
      for (size_t p = 0; p < profiles_.size(); ++p) lowest[p] = std::min(lowest[p], shape_bound(members, p));
    std::vector<std::pair<double, std::pair<int, int>>> order;
    for (auto& [key, list] : families) {
      std::stable_sort(list.begin(), list.end(), [&](const Shape* a, const Shape* b) { return cost_rank(*a) < cost_rank(*b); });
      double b = INFINITY;
      for (const Shape* members : list)
        for (size_t p = 0; p < profiles_.size(); ++p) b = std::min(b, shape_bound(*members, p) / lowest[p]);
      order.push_back({b, key});
    }
    std::stable_sort(order.begin(), order.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
    // By family, on each profile: the representative's verified time over its bound. Each
    // profile its own: a ratio from one system (a rack's NVLink) says nothing of another's
    // (InfiniBand between nodes), and no profile's answer may depend on which others are planned.
    using Ratios = std::vector<double>;
    std::map<std::pair<int, int>, Ratios> ratio;
    const Ratios ones(profiles_.size(), 1.0);
    std::set<const Shape*> verified;
    for (const auto& [bound, key] : order) {
      const std::vector<const Shape*>& list = families[key];  // the cheapest to record first
      const auto first_open = std::find_if(list.begin(), list.end(), [&](const Shape* m) { return open(*m, ones); });
      if (first_open == list.end()) continue;
      const Shape* representative = *first_open;
      Ratios before(profiles_.size());
      for (size_t p = 0; p < profiles_.size(); ++p) before[p] = shape_bound(*representative, p);
      verify(*representative);
      verified.insert(representative);
      Ratios& r = ratio[key] = ones;
      for (size_t p = 0; p < profiles_.size(); ++p) {
        const double exact = best_of(*representative, p);
        if (exact < INFINITY && before[p] < INFINITY) r[p] = std::max(1.0, exact / before[p]);
      }
    }
    // The rest, most promising first (by the lowest estimate over the best verified on any profile).
    std::vector<std::tuple<double, const Shape*, Ratios>> estimates;
    for (const auto& [key, list] : families) {
      const Ratios& scale = ratio.count(key) ? ratio[key] : ones;
      for (const Shape* members : list) {
        if (verified.count(members)) continue;
        double closest = INFINITY;
        for (size_t p = 0; p < profiles_.size(); ++p) closest = std::min(closest, shape_bound(*members, p) * scale[p] / best_[p]);
        estimates.push_back({closest, members, scale});
      }
    }
    std::stable_sort(estimates.begin(), estimates.end(), [](const auto& a, const auto& b) { return std::get<0>(a) < std::get<0>(b); });
    for (const auto& [estimate, members, scale] : estimates) {
      if (open(*members, scale)) verify(*members);
      else say_why_not(*members, scale);
    }
  }

  // Where there are at most kSoundGroups groups, one recompute level by branch and bound: the
  // shapes in order of their lowest bound (relative to the level's lowest on each profile; the
  // cheaper schedule to record first among equals), each dry-run while its bound is below the
  // best verified step on some profile. A bound is a lower bound of every row of its shape
  // (compute alone at the best rates), so a shape skipped could not have won: the winner is
  // --exhaustive's. (A family's ratio is no bound: the all-gather's, dry-run first, overstated
  // the ring's and Ulysses x ring's by 5 to 15%, and the search dropped their winners.)
  void search_bounded(const std::map<std::tuple<int, int, int, int, int>, Shape>& shapes) {
    std::vector<double> lowest(profiles_.size(), INFINITY);
    for (const auto& [key, members] : shapes)
      for (size_t p = 0; p < profiles_.size(); ++p) lowest[p] = std::min(lowest[p], shape_bound(members, p));
    std::vector<std::tuple<double, int, const Shape*>> order;  // the closest bound over any profile's lowest, record cost
    for (const auto& [key, members] : shapes) {
      double closest = INFINITY;
      for (size_t p = 0; p < profiles_.size(); ++p) closest = std::min(closest, shape_bound(members, p) / lowest[p]);
      order.push_back({closest, cost_rank(members), &members});
    }
    std::stable_sort(order.begin(), order.end(), [](const auto& a, const auto& b) {
      return std::tie(std::get<0>(a), std::get<1>(a)) < std::tie(std::get<0>(b), std::get<1>(b));
    });
    const std::vector<double> ones(profiles_.size(), 1.0);
    for (const auto& [closest, cost, members] : order) {
      if (open(*members, ones, 0)) verify(*members);
      else say_why_not(*members, ones);
    }
  }

  // Group i's best bound per profile, over its rows that no lighter recomputation makes moot
  // (where the same group with less recomputation fits, more is never faster: it adds compute
  // and changes no communication).
  void set_bound(size_t i) {
    std::vector<double>& bound = bound_[i] = std::vector<double>(profiles_.size(), INFINITY);
    for (size_t p = 0; p < profiles_.size(); ++p)
      for (size_t k = 0; k < rows_[i][p].size(); ++k) {
        StepRow& r = rows_[i][p][k];
        if (r.status != PlanStatus::bounded) continue;
        if (const StepRow* lighter = o_.exhaustive ? nullptr : lighter_fits(i, p, k))
          r.reason = "not dry-run: " + lighter->candidate.name() + " fits, and recomputing more is never faster";
        else
          bound[p] = std::min(bound[p], r.cost.step_s);
      }
  }

  std::tuple<int, int, int, int, int, int> sibling_key(size_t i) const {  // G, T, cp_comm, U, layout, order
    const ParallelConfig& par = groups_[i].layer.par;
    return {groups_[i].G, par.tp, cp_scheme_index(*par.cp_comm), par.a2a_size(), int(par.layout), int(par.order)};
  }

  const StepRow* lighter_fits(size_t i, size_t p, size_t k) const {
    const Recompute mine = groups_[i].layer.par.recompute;
    for (size_t j : siblings_.at(sibling_key(i))) {
      const StepRow& r = rows_[j][p][k];
      const bool fits = r.status == PlanStatus::ranked || r.status == PlanStatus::bounded;
      if (int(groups_[j].layer.par.recompute) < int(mine) && fits) return &r;
    }
    return nullptr;
  }

  // How cheap a shape's schedule is to record (its scheme's record_cost): all-gather, then
  // Ulysses, the ring, the hybrid.
  int cost_rank(const Shape& members) const { return groups_[members.front()].layer.par.scheme().record_cost; }

  double shape_bound(const Shape& members, size_t p) const {
    double b = INFINITY;
    for (size_t i : members) b = std::min(b, bound_.at(i)[p]);
    return b;
  }

  double best_of(const Shape& members, size_t p) const {
    double exact = INFINITY;
    for (size_t i : members)
      for (const StepRow& r : rows_[i][p])
        if (r.status == PlanStatus::ranked) exact = std::min(exact, r.cost.step_s);
    return exact;
  }

  // Whether the shape, its bound on each profile scaled by that profile's `scale`, could still
  // come within `margin` of the best verified on some profile (every shape that fits, under
  // --exhaustive).
  bool open(const Shape& members, const std::vector<double>& scale, double margin = kMargin) const {
    for (size_t p = 0; p < profiles_.size(); ++p) {
      const double bound = shape_bound(members, p);
      if (o_.exhaustive ? bound < INFINITY : bound * scale[p] < best_[p] * (1 + margin)) return true;
    }
    return false;
  }

  // The shape dry-run once and replayed for each of its groups (orders) on every profile: their
  // rows exact.
  void verify(const Shape& members) {
    const RecordedSchedule rec = record_schedule(*groups_[members.front()].plan, false);
    ++dry_runs_;
    for (size_t i : members)
      for (size_t p = 0; p < profiles_.size(); ++p) {
        const Replayed replayed = eval_.replay(rec, groups_[i], p);
        rows_[i][p] = eval_.rows(groups_[i], p, replayed.layer, &replayed.reason, pipelines_, &replayed.parts);
        for (const StepRow& r : rows_[i][p])
          if (r.status == PlanStatus::ranked) best_[p] = std::min(best_[p], r.cost.step_s);
      }
    pipelines_.clear();
    progress_.advance();
  }

  void say_why_not(const Shape& members, const std::vector<double>& scales) {
    for (size_t i : members)
      for (size_t p = 0; p < profiles_.size(); ++p)
        for (StepRow& row : rows_[i][p])
          if (const double scale = scales[p]; row.status == PlanStatus::bounded && row.reason.empty())
            row.reason = "not dry-run: at least " + format_ns(row.cost.step_s * 1e9) + " a step (compute alone at the best rates)" +
                         (scale > 1 ? detail::concat(", about ", format_ns(row.cost.step_s * scale * 1e9), " by its family's verified ratio ",
                                                     std::round(scale * 1000) / 1000)
                                    : std::string()) +
                         ", against " + format_ns(best_[p] * 1e9) + " verified";
  }

  // Every row on each profile, ranked, bounded, invalid and out of memory in that order.
  std::vector<StepPlan> assemble(StepPlanStats& st) {
    std::vector<StepPlan> plans(profiles_.size());
    progress_.phase("ranking the rows", profiles_.size(), "profiles");
    for (size_t p = 0; p < profiles_.size(); ++p) {
      progress_.advance();
      plans[p].hw = profiles_[p];
      for (size_t i = 0; i < groups_.size(); ++i) {
        if (!groups_[i].plan) {
          StepRow row;
          row.candidate.layer = groups_[i].layer, row.candidate.pp = 0;
          row.status = PlanStatus::invalid, row.reason = groups_[i].invalid;
          plans[p].rows.push_back(std::move(row));
          continue;
        }
        for (StepRow& r : rows_[i][p]) {
          // search() gave every row it did not dry-run its reason (dominated, or say_why_not).
          RS_CHECK(r.status != PlanStatus::bounded || !r.reason.empty(), "step plan: ", r.candidate.name(), " bounded without a reason");
          plans[p].rows.push_back(std::move(r));
        }
      }
      std::stable_sort(plans[p].rows.begin(), plans[p].rows.end(), [](const StepRow& a, const StepRow& b) {
        if (a.status != b.status) return status_place(a.status) < status_place(b.status);
        // Equal times (ZeRO 1 and 2 cost the same): the one that needs less memory first.
        if ((a.status == PlanStatus::ranked || a.status == PlanStatus::bounded) && a.cost.step_s != b.cost.step_s)
          return a.cost.step_s < b.cost.step_s;
        if (a.status == PlanStatus::ranked || a.status == PlanStatus::bounded) return a.cost.total_bytes() < b.cost.total_bytes();
        if (a.status == PlanStatus::out_of_memory) return a.cost.total_bytes() < b.cost.total_bytes();
        return false;
      });
      say_versus(plans[p].rows, plans[p].ranked(), step_runner_up(plans[p]));
      plans[p].verdict = step_verdict(plans[p], o_);
    }
    for (const StepRow& r : plans.front().rows) {
      st.invalid += r.status == PlanStatus::invalid;
      st.memory_rejects += r.status == PlanStatus::out_of_memory;
      st.bounded += r.status == PlanStatus::bounded;
    }
    st.candidates = plans.front().rows.size();
    return plans;
  }

  const LayerConfig& cfg_;
  const StepPlanOptions& o_;
  const std::vector<Hardware>& profiles_;
  const Evaluator eval_;
  ProgressReport silent_;
  ProgressReport& progress_ = o_.progress ? *o_.progress : silent_;
  PipelineMemo pipelines_;  // bound_all's cluster of groups, or verify's shape; its counts the whole search's
  std::map<int, std::vector<Outer>> outers_;  // by G
  std::vector<Group> groups_;
  std::vector<std::vector<std::vector<StepRow>>> rows_;  // by group, profile, outer configuration
  std::map<std::tuple<int, int, int, int, int, int>, std::vector<size_t>> siblings_;  // by sibling_key: the recompute modes
  std::map<size_t, std::vector<double>> bound_;  // by group, per profile: its best bound still open
  std::vector<double> best_;                     // per profile: the best verified step
  size_t dry_runs_ = 0;
};

}  // namespace

std::vector<StepPlan> make_step_plan(const LayerConfig& cfg, const StepPlanOptions& o, const std::vector<Hardware>& profiles,
                                     StepPlanStats* stats) {
  const auto t0 = std::chrono::steady_clock::now();
  if (profiles.empty()) throw ConfigError("plan: give at least one hardware profile (--hw)");
  if (o.modes.empty()) throw ConfigError("plan: give at least one recompute mode");
  check_step_options(cfg, o);
  StepPlanStats st;
  StepSearch search(cfg, o, profiles);
  std::vector<StepPlan> plans = search.run(st);
  bool any = false;
  for (const StepPlan& plan : plans) any |= plan.ranked() > 0;
  if (!any) {
    const StepRow* least = nullptr;
    for (const StepRow& r : plans.front().rows)
      if (r.status == PlanStatus::out_of_memory && (!least || r.cost.total_bytes() < least->cost.total_bytes())) least = &r;
    if (!least)
      throw ConfigError(detail::concat("plan: no configuration of ", o.gpus, " GPUs is valid: ", plans.front().rows.front().reason));
    throw ConfigError(detail::concat("plan: nothing fits in ", format_bytes(plans.front().hw.memory_bytes), " per GPU on ", o.gpus,
                                     " GPUs: the least is ", least->candidate.name(), ", which ", least->reason.substr(least->reason.find("needs")),
                                     ". Give more GPUs", o.mbs > 1 ? ", a smaller --mbs" : "", o.modes.size() < 3 ? ", --recompute any" : "",
                                     " or a shorter --seq"));
  }
  st.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  if (stats) *stats = st;
  return plans;
}

}  // namespace ringside::model

// The longest sequence that fits (max_seq.h): every split's bound by the formulas, then the
// splits that could still win searched with dry runs, best bound first.
#include "model/max_seq.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <map>
#include <numeric>
#include <optional>

#include "core/error.h"
#include "core/memory_limits.h"
#include "core/units.h"
#include "model/step_parts.h"
#include "parallel/sharding.h"

namespace ringside::model {

using namespace step_parts;

int64_t split_unit(const LayerConfig& cfg, const ParallelConfig& par, int64_t granularity) {
  if (granularity < 1) throw ConfigError(detail::concat("the granularity of s, ", granularity, ", must be >= 1"));
  LayerConfig one = cfg;
  one.s = 1, one.docs.clear();
  return std::lcm(granularity, sequence_packing(par, one).S);
}

int full_pipeline_microbatches(int pp, int vp) {
  PipelineSpec p;
  p.pp = pp, p.vp = vp;
  auto in_flight = [&](int m) {
    p.microbatches = m;
    return *pipeline_in_flight(p);
  };
  // In flight grows with m until the warm-up fits (PP for 1F1B; up to about 2 PP + PP / VP
  // interleaved): the first m, in steps of PP, past which another PP microbatches add none.
  int m = pp;
  while (in_flight(m) != in_flight(m + pp)) m += pp;
  return m;
}

int64_t largest_fitting(int64_t u, int64_t k_max, const std::function<bool(int64_t)>& fits) {
  if (k_max < 1 || !fits(u)) return 0;
  if (fits(k_max * u)) return k_max * u;
  int64_t lo = 1, hi = k_max;  // fits at lo, not at hi
  while (hi - lo > 1) {
    const int64_t mid = lo + (hi - lo) / 2;
    (fits(mid * u) ? lo : hi) = mid;
  }
  return lo * u;
}

namespace {

// The step of c for its memory alone: L, PP, VP, DP x CP sharing the weights, ZeRO, m, the dtype.
StepConfig memory_config(const StepCandidate& c, const MaxSeqOptions& o) {
  StepConfig sc;
  sc.layers = o.step.layers, sc.pp = c.pp, sc.vp = c.vp, sc.zero = c.zero, sc.microbatches = c.microbatches;
  sc.dp = c.dp * c.layer.par.cp, sc.dp_span.size = sc.dp;
  sc.weight_bytes = element_bytes(o.step.modeling.dtype);
  return sc;
}

LayerConfig at_length(const LayerConfig& cfg, int64_t s, int mbs) {
  LayerConfig at = cfg;
  at.s = s, at.b = mbs;
  return at;
}

// The dry run of `plan` for its memory: refused first where this machine could not hold it.
LayerCost measured_layer(const RunPlan& plan, const std::string& dtype) {
  require_memory(32.0 * double(plan.layer.tokens()) + schedule_bytes(plan.P, plan.layer, plan.requested_layout()),
                 detail::concat("the dry run of ", plan.name, " at s = ", plan.layer.s, " (plan --max-seq's confirmation)"),
                 "--granularity or fewer --gpus", 0, 2 * plan.P);
  LayerCost layer = formula_layer(plan, dtype);
  measured_memory(record_schedule(plan, false), dtype, layer);
  return layer;
}

StepCost memory_of(const RunPlan& plan, const LayerCost& layer, const StepCandidate& c, const MaxSeqOptions& o) {
  const EndsCost ends = ends_memory(plan.layer, plan.layer.b * plan.packing->S / plan.par.cp, o.step.vocab, plan.par.tp,
                                    element_bytes(o.step.modeling.dtype));
  return step_memory(memory_config(c, o), layer, ends);
}

// The outer configurations of o around `rest` = P / G GPUs of groups, with m as o says.
std::vector<Outer> outers_of(int rest, const MaxSeqOptions& o) {
  StepPlanOptions so = o.step;
  if (so.gbs == 0) so.gbs = so.gpus * so.mbs;  // every DP x MBS divides it; m set below
  std::vector<Outer> all = outer_configs(rest, so.layers, so, false);
  if (o.step.gbs == 0) {
    std::vector<Outer> kept;
    for (Outer out : all) {
      out.microbatches = full_pipeline_microbatches(out.pp, out.vp);
      if (int64_t(out.pp) * out.vp * out.microbatches <= kMaxPipelineChunks) kept.push_back(out);
    }
    all = std::move(kept);
  }
  return all;
}

}  // namespace

StepCost max_seq_memory(const LayerConfig& cfg, const StepCandidate& c, int64_t s, const MaxSeqOptions& o, bool measured) {
  const RunPlan plan = resolve(c.layer.par, at_length(cfg, s, o.step.mbs), c.layer.par.tp * c.layer.par.cp);
  const std::string& dtype = o.step.modeling.dtype;
  return memory_of(plan, measured ? measured_layer(plan, dtype) : formula_layer(plan, dtype), c, o);
}

namespace {

// The search of max_seq_plan: the groups and their splits, each group's layer at each length
// counted once (by the formulas, or by its dry run), the bounds, then each cell's branch and bound.
class MaxSeqSearch {
 public:
  MaxSeqSearch(const LayerConfig& cfg, const MaxSeqOptions& o) : cfg_(cfg), o_(o) {}

  struct Split {
    StepCandidate c;
    size_t group;   // into groups_
    int64_t unit;
  };

  // Every valid group's splits, in plan --gbs's order (tp-cp order alone, dominated layouts out).
  void enumerate() {
    const int P = o_.step.gpus;
    for (int G = 1; G <= std::min(P, o_.step.max_group); ++G) {
      if (P % G != 0) continue;
      const std::vector<Outer> around = outers_of(P / G, o_);
      if (around.empty()) continue;
      for (const PlanCandidate& c : plan_candidates(cfg_, o_.step.layout, G, o_.step.modes, o_.step.schemes)) {
        if (c.par.order != RankOrder::tp_cp) continue;  // the other order holds the same memory
        if (o_.step.layout == Layout::automatic && c.par.layout_matters(cfg_) && c.par.layout == Layout::contiguous) continue;
        const int64_t unit = split_unit(cfg_, c.par, o_.granularity);
        try {
          resolve(c.par, at_length(cfg_, unit, o_.step.mbs), G);
        } catch (const ConfigError& e) {
          rules_.push_back(e.what());
          continue;
        }
        groups_.push_back(c);
        for (const Outer& out : around) {
          Split s;
          s.c.layer = c, s.c.pp = out.pp, s.c.vp = out.vp, s.c.dp = out.dp, s.c.zero = out.zero;
          s.c.microbatches = out.microbatches, s.c.order = OuterOrder::pp_dp;
          s.group = groups_.size() - 1, s.unit = unit;
          splits_.push_back(s);
        }
      }
    }
  }

  const std::vector<Split>& splits() const { return splits_; }
  const std::vector<std::string>& rules() const { return rules_; }

  // The split's memory at s, or nothing where its group does not resolve at s (beyond the
  // layer's limits). The layer at (group, s) is counted once.
  std::optional<StepCost> memory(const Split& sp, int64_t s, bool measured) {
    auto& memo = measured ? measured_ : formulas_;
    const auto key = std::make_pair(sp.group, s);
    auto it = memo.find(key);
    if (it == memo.end()) {
      std::optional<RunPlan> plan;
      try {
        plan = resolve(groups_[sp.group].par, at_length(cfg_, s, o_.step.mbs), sp.c.layer.par.tp * sp.c.layer.par.cp);
      } catch (const ConfigError&) {
      }
      std::optional<std::pair<RunPlan, LayerCost>> counted;
      if (plan) {
        RS_CHECK(plan->packing->S == s, "max-seq: s = ", s, " is a multiple of the split's unit yet padded to ", plan->packing->S);
        const std::string& dtype = o_.step.modeling.dtype;
        counted.emplace(*plan, measured ? measured_layer(*plan, dtype) : formula_layer(*plan, dtype));
        ++(measured ? stats_.dry_runs : stats_.bounds);
      }
      it = memo.emplace(key, std::move(counted)).first;
    }
    if (!it->second) return std::nullopt;
    return memory_of(it->second->first, it->second->second, sp.c, o_);
  }

  bool fits(const Split& sp, int64_t s, bool measured, double capacity) {
    const std::optional<StepCost> m = memory(sp, s, measured);
    return m && m->total_bytes() <= capacity;
  }

  int64_t k_max(const Split& sp) const { return (int64_t{2147483647} / o_.step.mbs) / sp.unit; }

  // The longest s by the formulas alone: at least the true one.
  int64_t bound(const Split& sp, double capacity) {
    return largest_fitting(sp.unit, k_max(sp), [&](int64_t s) { return fits(sp, s, false, capacity); });
  }

  // A tighter bound, at most `bound`: the longest s with the working peak on the line through
  // the group's dry runs at two short lengths s_a < s_b (its secant). The working peak is the
  // most of the ranks' and moments' buffers, each affine in s: convex, so beyond s_b the secant
  // is below it, and a length the secant's count does not fit does not fit. Where the answer is
  // not beyond s_b (or a dry run there fails), the formulas' bound.
  int64_t tighter(const Split& sp, int64_t bound, double capacity) {
    const int64_t u = sp.unit, s_a = u * ((2048 + u - 1) / u), s_b = 2 * s_a;
    if (bound <= s_b) return bound;
    const std::optional<StepCost> a = memory(sp, s_a, true), fa = memory(sp, s_a, false);
    const std::optional<StepCost> b = memory(sp, s_b, true), fb = memory(sp, s_b, false);
    if (!a || !b || !fa || !fb) return bound;
    const double wa = a->total_bytes() - fa->total_bytes(), wb = b->total_bytes() - fb->total_bytes();
    const double slope = (wb - wa) / double(s_b - s_a);
    const int64_t secant = largest_fitting(u, bound / u, [&](int64_t s) {
      const std::optional<StepCost> f = memory(sp, s, false);
      return f && f->total_bytes() + wa + slope * double(s - s_a) <= capacity;
    });
    return secant > s_b ? secant : bound;
  }

  // The longest s with the dry run's working peak, at most `bound`: the working peak's affine
  // estimate through the dry runs at the bound and half of it, confirmed at the edges (s fits,
  // s + unit does not), and bisected by dry runs where the estimate misses.
  int64_t confirmed(const Split& sp, int64_t bound, double capacity) {
    ++stats_.confirmed;
    const int64_t u = sp.unit;
    auto exact = [&](int64_t s) { return fits(sp, s, true, capacity); };
    if (bound == 0) return 0;
    if (exact(bound)) return bound;  // bound + u fails by the formulas, so by the dry run too
    const int64_t half = std::max(u, bound / 2 / u * u);
    int64_t lo = 0, hi = bound;  // lo fits (0: none known), hi does not
    if (half < bound) {
      const std::optional<StepCost> a = memory(sp, half, true), b = memory(sp, bound, true);
      const std::optional<StepCost> fa = memory(sp, half, false), fb = memory(sp, bound, false);
      if (a && b && fa && fb) {
        // The working peak (the dry run's count over the formulas') on the line through both.
        const double wa = a->total_bytes() - fa->total_bytes(), wb = b->total_bytes() - fb->total_bytes();
        const double slope = (wb - wa) / double(bound - half);
        const int64_t guess = largest_fitting(u, bound / u, [&](int64_t s) {
          const std::optional<StepCost> f = memory(sp, s, false);
          return f && f->total_bytes() + wa + slope * double(s - half) <= capacity;
        });
        if (guess > 0 && guess < bound) {
          if (exact(guess)) {
            lo = guess;
            if (!exact(guess + u)) return guess;  // both edges confirmed
          } else {
            hi = guess;
          }
        }
      }
    }
    if (lo == 0) {
      if (!exact(u)) return 0;
      lo = u;
    }
    while (hi - lo > u) {  // bisect by dry runs between a length that fits and one that does not
      const int64_t mid = lo + (hi - lo) / u / 2 * u;
      (exact(mid) ? lo : hi) = mid;
    }
    return lo;
  }

  MaxSeqStats stats_;

 private:
  const LayerConfig& cfg_;
  const MaxSeqOptions& o_;
  std::vector<PlanCandidate> groups_;
  std::vector<Split> splits_;
  std::vector<std::string> rules_;
  std::map<std::pair<size_t, int64_t>, std::optional<std::pair<RunPlan, LayerCost>>> formulas_, measured_;
};

}  // namespace

std::vector<StepCandidate> max_seq_splits(const LayerConfig& cfg, const MaxSeqOptions& o) {
  MaxSeqSearch search(cfg, o);
  search.enumerate();
  std::vector<StepCandidate> all;
  for (const auto& s : search.splits()) all.push_back(s.c);
  return all;
}

std::vector<MaxSeqPlan> max_seq_plan(const LayerConfig& cfg, const MaxSeqOptions& o, const std::vector<Hardware>& profiles,
                                     MaxSeqStats* stats) {
  const auto t0 = std::chrono::steady_clock::now();
  if (profiles.empty()) throw ConfigError("plan --max-seq: give at least one hardware profile (--hw)");
  if (!cfg.docs.empty()) throw ConfigError("plan --max-seq: packed documents (--docs) fix s by their lengths: give none");
  if (o.step.modes.empty()) throw ConfigError("plan --max-seq: give at least one recompute mode");
  if (o.granularity < 1 || o.granularity > (int64_t{1} << 24))
    throw ConfigError(detail::concat("plan --max-seq: --granularity ", o.granularity, " must be between 1 and 16777216 tokens"));
  {
    StepPlanOptions check = o.step;
    if (check.gbs == 0) check.gbs = check.gpus * check.mbs;
    check_step_options(at_length(cfg, o.granularity, o.step.mbs), check);
  }
  MaxSeqSearch search(cfg, o);
  search.enumerate();
  if (search.splits().empty()) {
    std::string why;
    for (const std::string& r : search.rules())
      if (why.find(r) == std::string::npos) why += "\n  " + r;
    throw ConfigError(detail::concat("plan --max-seq: no split of ", o.step.gpus, " GPUs runs this layer (", cfg.summary(),
                                     ") with the degrees given", why));
  }
  const std::vector<Recompute> modes = o.step.modes;
  std::vector<int> zeros;
  for (int z = 0; z <= 3; ++z)
    if (o.step.zero < 0 || z == o.step.zero) zeros.push_back(z);

  std::vector<MaxSeqPlan> plans;
  bool any = false;
  const MaxSeqCell* least = nullptr;
  for (const Hardware& hw : profiles) {
    MaxSeqPlan plan;
    plan.hw = hw;
    const double capacity = hw.memory_bytes;
    // Every split's bound, once per profile.
    std::vector<int64_t> bounds;
    for (const auto& sp : search.splits()) bounds.push_back(search.bound(sp, capacity));
    for (Recompute rc : modes)
      for (int zero : zeros) {
        MaxSeqCell cell;
        cell.recompute = rc, cell.zero = zero;
        std::vector<size_t> order;
        for (size_t i = 0; i < search.splits().size(); ++i)
          if (search.splits()[i].c.layer.par.recompute == rc && search.splits()[i].c.zero == zero) order.push_back(i);
        std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) { return bounds[a] > bounds[b]; });
        const MaxSeqSearch::Split* best = nullptr;
        for (size_t i : order) {
          if (bounds[i] <= cell.s) break;  // no later split can reach further
          const int64_t most = search.tighter(search.splits()[i], bounds[i], capacity);
          if (most <= cell.s) continue;  // this one cannot
          const int64_t s = search.confirmed(search.splits()[i], most, capacity);
          if (s > cell.s) cell.s = s, best = &search.splits()[i];
        }
        if (best) {
          cell.split = best->c, cell.unit = best->unit;
          cell.memory = *search.memory(*best, cell.s, true);
        } else {
          // Nothing fits: the split needing the least at its unit, by the formulas.
          double need = INFINITY;
          for (size_t i : order) {
            const auto& sp = search.splits()[i];
            const std::optional<StepCost> m = search.memory(sp, sp.unit, false);
            if (m && m->total_bytes() < need) need = m->total_bytes(), cell.split = sp.c, cell.unit = sp.unit, cell.memory = *m;
          }
        }
        cell.gbs = int64_t(cell.split.dp) * o.step.mbs * cell.split.microbatches;
        cell.binding = binding_term(cell.memory).first;
        any |= cell.s > 0;
        plan.cells.push_back(cell);
      }
    plans.push_back(std::move(plan));
  }
  for (const MaxSeqCell& c : plans.front().cells)
    if (c.unit > 0 && (!least || c.memory.total_bytes() < least->memory.total_bytes())) least = &c;
  if (!any) {
    if (!least) throw ConfigError("plan --max-seq: no split to weigh");
    throw ConfigError(detail::concat("plan --max-seq: nothing fits in ", format_bytes(plans.front().hw.memory_bytes), " per GPU at any length on ",
                                     o.step.gpus, o.step.gpus == 1 ? " GPU" : " GPUs", ": the least, ", least->split.name(), " at s = ", least->unit, ", needs at least ",
                                     format_bytes(least->memory.total_bytes()), " (binding: ", least->binding, " ",
                                     format_bytes(binding_term(least->memory).second), "). Give more GPUs (--gpus) or fewer --layers"));
  }
  search.stats_.splits = search.splits().size();
  search.stats_.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  if (stats) *stats = search.stats_;
  return plans;
}

}  // namespace ringside::model

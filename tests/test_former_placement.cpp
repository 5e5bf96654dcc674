// Issue 60: the three placement paths the topology replaces, as they were at 0bf74f0 (the replay's
// rank / gpus_per_node, the layer planner's group membership, the step planner's stride rule),
// give the topology's answer on every candidate of a 256-GPU plan on h100-nvlink. Run once to
// show the move changed no placement; removed in the commit after, with the paths themselves.
#include <catch2/catch.hpp>

#include <optional>

#include "model/plan.h"
#include "model/step_parts.h"
#include "parallel/groups.h"
#include "parallel/rank_grid.h"

using namespace ringside;

namespace former {

bool crosses_nodes(const ParallelConfig& par, GroupKind kind, int gpus_per_node) {
  for (const std::vector<int>& g : group_members(par, kind))
    for (int r : g)
      if (r / gpus_per_node != g.front() / gpus_per_node) return true;
  return false;
}

std::vector<int> schedule_nodes(const ParallelConfig& par, int P, int gpus_per_node) {
  ParallelConfig recorded = par;
  recorded.order = RankOrder::tp_cp;
  const RankGrid from = RankGrid::of(recorded), placed = RankGrid::of(par);
  std::vector<int> node(static_cast<size_t>(P));
  for (int rank = 0; rank < P; ++rank) node[size_t(rank)] = placed.rank_at(from, rank) / gpus_per_node;
  return node;
}

struct GroupSpan {
  int size = 1, per_node = 1;
  int nodes() const { return size / per_node; }
};

std::optional<int> per_node(int size, int stride, int gpus_per_node) {
  if (size == 1) return 1;
  if (gpus_per_node % stride == 0) return std::min(size, gpus_per_node / stride);
  if (stride % gpus_per_node == 0) return 1;
  return std::nullopt;
}

std::optional<GroupSpan> span_of(const std::vector<std::pair<int, int>>& dims, int gpus_per_node) {
  GroupSpan span{1, 1};
  for (const auto& [size, stride] : dims) {
    const std::optional<int> k = per_node(size, stride, gpus_per_node);
    if (!k) return std::nullopt;
    span.size *= size, span.per_node *= *k;
  }
  if (span.size % span.per_node != 0) return std::nullopt;
  return span;
}

struct Spans {
  GroupSpan tp, weights;
  bool pp_across_nodes = false;
};

std::optional<Spans> spans_of(const model::StepCandidate& c, int gpus_per_node) {
  const RankGrid grid = c.grid();
  const int G = c.layer.par.tp * c.layer.par.cp;
  auto dim = [&](Dim d) { return std::pair{grid.size(d), grid.stride(d)}; };
  gpus_per_node = std::min(gpus_per_node, grid.world());
  if (!per_node(G, 1, gpus_per_node)) return std::nullopt;
  const auto tp = span_of({dim(Dim::tp)}, gpus_per_node);
  const auto weights = span_of({dim(Dim::cp), dim(Dim::dp)}, gpus_per_node);
  const auto pp = span_of({dim(Dim::pp)}, gpus_per_node);
  if (!tp || !weights || !pp) return std::nullopt;
  return Spans{*tp, *weights, pp->nodes() > 1};
}

}  // namespace former

TEST_CASE("the former placement paths give the topology's answer on every candidate of a 256-GPU plan", "[topology][former]") {
  const model::Hardware hw = model::load_hardware("h100-nvlink");
  const int P = 256, node = 8;
  const model::Topology topology = hw.topology(P);
  LayerConfig cfg;
  cfg.h = 8192, cfg.H = 64, cfg.Hkv = 8, cfg.f = 28672, cfg.s = 1 << 20;
  // The layer planner's candidates: every T x C split, CP kind, order and U.
  size_t layer_checked = 0;
  for (const model::PlanCandidate& c : model::plan_candidates(cfg, Layout::contiguous, P, {Recompute::none}, cp_schemes_named("all"))) {
    INFO(c.name());
    for (GroupKind kind : {GroupKind::tp, GroupKind::cp, GroupKind::a2a, GroupKind::ring})
      CHECK(former::crosses_nodes(c.par, kind, node) == (model::widest_span(c.par, kind, topology).tier > 0));
    const std::vector<int> nodes = former::schedule_nodes(c.par, P, node), gpus = model::schedule_gpus(c.par, P);
    for (int r = 0; r < P; ++r) CHECK(nodes[size_t(r)] == topology.domain_of(gpus[size_t(r)], 0));
    ++layer_checked;
  }
  CHECK(layer_checked > 100);
  // The step planner's: every group of G ranks (T x C, both inner orders) with PP x DP around it,
  // both outer orders.
  size_t step_checked = 0, refused = 0;
  for (int G = 1; G <= P; G *= 2)
    for (const model::PlanCandidate& group : model::plan_candidates(cfg, Layout::contiguous, G, {Recompute::none}, {}))
      for (int pp = 1; pp <= P / G; pp *= 2)
        for (model::OuterOrder order : {model::OuterOrder::pp_dp, model::OuterOrder::dp_pp}) {
          model::StepCandidate c;
          c.layer = group, c.pp = pp, c.dp = P / G / pp, c.order = order;
          INFO(c.name());
          const model::step_parts::Spans now = model::step_parts::spans_of(c, topology);
          const std::optional<former::Spans> then = former::spans_of(c, node);
          if (!then) {  // refused then as straddling unevenly: costed now, and uneven or across
            CHECK((now.group.tier > 0 || now.tp.uneven || now.weights.uneven));
            ++refused;
            continue;
          }
          CHECK(then->tp.per_node == now.tp.most[0]);
          CHECK(then->tp.nodes() == now.tp.domains(0));
          CHECK(then->weights.per_node == now.weights.most[0]);
          CHECK(then->weights.nodes() == now.weights.domains(0));
          CHECK(then->pp_across_nodes == (now.pp.tier > 0));
          ++step_checked;
        }
  WARN(layer_checked << " layer candidates, " << step_checked << " step candidates agree; " << refused << " refused then");
  CHECK(step_checked > 500);
}

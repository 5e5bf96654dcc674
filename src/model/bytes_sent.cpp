// The bytes `ringside model` says a GPU sends, by class (bytes_sent.h).
#include "model/bytes_sent.h"

#include <algorithm>

#include "core/error.h"
#include "parallel/formulas.h"

namespace ringside::model {

namespace {

// The class's words: the CP class by its scheme, the gradients' by their group.
std::string class_words(CommClass k, const RunPlan& plan) {
  if (k == CommClass::cp_attention)
    return std::string("CP ") + plan.par.scheme().collective_words + " (" + plan.par.scheme().name + ")";
  if (k == CommClass::grad_all_reduce) return detail::concat("gradient all-reduce over CP ", plan.par.cp);
  return to_string(k);
}

}  // namespace

std::vector<SentClass> layer_bytes_sent(const RunPlan& plan, const std::string& dtype) {
  const double scale = element_bytes(dtype) / 4;  // the formulas in fp32, as the dry run counts
  std::vector<SentClass> out;
  double most = 0, all = 0;
  for (int r = 0; r < plan.P; ++r) {
    const std::vector<ClassBytes> classes = parallel_comm_bytes_by_class(plan, r, DType::f32);
    if (out.empty())
      for (const ClassBytes& k : classes) out.push_back(SentClass{class_words(k.what, plan), 0, 0, 0, 0});
    double rank_total = 0;
    for (size_t i = 0; i < classes.size(); ++i) {
      const double forward = scale * double(classes[i].bytes.forward), backward = scale * double(classes[i].bytes.backward);
      SentClass& s = out[i];
      s.forward = std::max(s.forward, forward), s.backward = std::max(s.backward, backward);
      s.most = std::max(s.most, forward + backward), s.all += forward + backward;
      rank_total += forward + backward;
    }
    most = std::max(most, rank_total), all += rank_total;
  }
  out.erase(std::remove_if(out.begin(), out.end(), [](const SentClass& s) { return s.all == 0; }), out.end());
  // The most any GPU sends in all (each class's busiest GPU need not be the same one), and the sum.
  if (!out.empty()) out.push_back(SentClass{"all classes", -1, -1, most, all});
  return out;
}

std::vector<SentClass> step_bytes_sent(const ModeledStep& step, const RunPlan& plan, const std::string& dtype) {
  const StepConfig& c = step.config;
  const StepCost& cost = step.row.cost;
  const double m = c.microbatches;
  const std::vector<int> layers = stage_layers(c.layers, c.pp);
  const double stage_layers_most = *std::max_element(layers.begin(), layers.end());
  std::vector<SentClass> out;
  auto add = [&out](std::string what, double bytes) {
    if (bytes <= 0) return;
    SentClass s;
    s.what = std::move(what), s.most = bytes;
    out.push_back(std::move(s));
  };
  // The group's layers: their TP and CP classes, m microbatches through the busiest stage.
  for (const SentClass& k : layer_bytes_sent(plan, dtype))
    if (k.what.rfind("TP ", 0) == 0 || k.what.rfind("CP ", 0) == 0) add(k.what + " (its layers)", m * stage_layers_most * k.most);
  // The pipeline: a chunk's activations forward and their gradient back, per microbatch.
  if (c.pp > 1) add("PP send/recv", m * (2.0 * c.vp - (c.pp == 2 ? 1 : 0)) * step.layer.p2p_bytes);
  // The gradient collectives over DP x CP, and ZeRO's weight gathers.
  const double n = c.dp, share = (n - 1) / n;
  const std::string group = detail::concat(" over DP x CP ", c.dp);
  if (c.zero == 0) add("gradient all-reduce" + group, 2 * share * cost.grad_bytes);
  else add(detail::concat("gradient reduce-scatter", group, " (ZeRO ", c.zero, ")"), share * cost.grad_bytes);
  if (c.zero == 1 || c.zero == 2) add(detail::concat("weight all-gather", group, " (ZeRO ", c.zero, ")"), share * cost.gathered_bytes);
  if (c.zero == 3) add("weight all-gathers" + group + " (ZeRO 3: before each forward and backward)", 2 * m * share * cost.stage_weight_bytes);
  return out;
}

}  // namespace ringside::model

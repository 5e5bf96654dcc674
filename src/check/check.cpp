#include "check/check.h"

#include <algorithm>

#include "core/error.h"

namespace ringside {

NamedTensors named_results(const Tensor& out, const Tensor& dx, const LayerWeights& g) {
  NamedTensors v{{"out", &out}, {"grad.x", &dx}};
  for (auto& [name, t] : g.named()) v.emplace_back("grad." + name, t);
  return v;
}

std::string nothing_to_compare_in(const NamedTensors& reference) {
  std::vector<std::string> zero;
  for (const auto& [name, t] : reference) {
    const Tensor d = t->dtype() == DType::f64 ? *t : t->to(DType::f64, {});
    const double* p = static_cast<const double*>(d.raw_data());
    if (std::all_of(p, p + d.numel(), [](double x) { return x == 0; })) zero.push_back(name);
  }
  if (zero.empty()) return "";
  return detail::concat("nothing to compare: ", zero[0],
                        zero.size() > 1 ? detail::concat(" and ", zero.size() - 1, " more tensors are") : " is",
                        " all zero in the fp64 reference (did dropout drop everything?)");
}

double TensorErrors::of(const std::string& name) const {
  for (const auto& [n, e] : errors)
    if (n == name) return e;
  return 0.0;
}

TensorErrors errors_against(const Tensor& out, const Tensor& dx, const LayerWeights& grads, const ReferenceRun& ref) {
  TensorErrors te;
  const NamedTensors mine = named_results(out, dx, grads), theirs = named_results(ref.out, ref.dx, ref.grads);
  RS_CHECK(mine.size() == theirs.size(), "errors_against: ", mine.size(), " results against the reference's ", theirs.size(),
           " (another layer's parameters)");
  for (size_t i = 0; i < mine.size(); ++i) {
    RS_CHECK(mine[i].first == theirs[i].first, "errors_against: ", mine[i].first, " against the reference's ", theirs[i].first);
    te.errors.emplace_back(mine[i].first, relative_error(*mine[i].second, *theirs[i].second));
  }
  te.worst = te.errors[0];
  for (const auto& e : te.errors)
    if (!(e.second <= te.worst.second)) te.worst = e;
  return te;
}

bool RankCheck::trace_ok() const {
  return timeline && double(timeline->peak_memory_bytes) == measured.peak_bytes &&
         double(timeline->bytes_sent) == measured.fwd_sent + measured.bwd_sent;
}

namespace {
template <class F> bool every(const std::vector<RankCheck>& ranks, F f) { return std::all_of(ranks.begin(), ranks.end(), f); }
}  // namespace

bool RunCheck::saved_ok() const { return every(ranks, [](const RankCheck& r) { return r.saved_ok(); }); }
bool RunCheck::sent_ok() const { return every(ranks, [](const RankCheck& r) { return r.sent_ok(); }); }
bool RunCheck::flops_ok() const { return every(ranks, [](const RankCheck& r) { return r.flops_ok(); }); }
bool RunCheck::trace_ok() const { return every(ranks, [](const RankCheck& r) { return r.trace_ok(); }); }

std::string RunCheck::verdict() const {
  if (ok()) return "OK";
  std::vector<std::string> why;
  if (!(errors.worst.second < kTolerance)) why.push_back(std::string("error above ") + kToleranceText);
  if (!nothing_to_compare.empty()) why.push_back(nothing_to_compare);
  if (!saved_ok()) why.push_back("saved bytes differ from the formula");
  if (!sent_ok()) why.push_back("bytes sent differ from the formula");
  if (traced && !trace_ok()) why.push_back("the trace's memory or bytes differ from the counters");
  std::string v = "FAIL:";
  for (size_t i = 0; i < why.size(); ++i) v += (i ? "; " : " ") + why[i];
  return v;
}

Yardstick yardstick(const ReferenceRun& fp64, const ReferenceRun* fp32) {
  Yardstick y{fp64, fp32, {}, nothing_to_compare_in(named_results(fp64.out, fp64.dx, fp64.grads))};
  if (fp32) y.fp32_errors = errors_against(fp32->out, fp32->dx, fp32->grads, fp64);
  return y;
}

RunCheck check_run(const JobRecord& job, const Yardstick& y, const trace::StrategyMetrics* timeline) {
  RunCheck c;
  c.name = job.plan.name;
  c.errors = errors_against(job.root.out, job.root.dx, job.root.grads, y.fp64);
  c.nothing_to_compare = y.nothing_to_compare;
  if (y.fp32) {
    const double e32 = y.fp32_errors.of(c.errors.worst.first);
    c.ratio_to_fp32 = e32 > 0 ? c.errors.worst.second / e32 : 0;
  }
  c.traced = timeline != nullptr;
  for (int r = 0; r < job.plan.P; ++r) {
    RankCheck rc;
    rc.measured = job.ranks.at(size_t(r));
    rc.saved_formula = parallel_saved_bytes(job.plan, r, DType::f32);
    rc.sent_formula = parallel_comm_bytes(job.plan, r, DType::f32);
    rc.comm_peak_formula = parallel_forward_comm_peak(job.plan, r, DType::f32);
    rc.flops_formula = parallel_attention_flops(job.plan, r);
    if (timeline && size_t(r) < timeline->ranks.size()) rc.timeline = timeline->ranks[size_t(r)];
    c.ranks.push_back(std::move(rc));
  }
  return c;
}

}  // namespace ringside

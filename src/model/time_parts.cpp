// A configuration's time by class, and the class that sets two apart (time_parts.h).
#include "model/time_parts.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <map>

#include "core/error.h"
#include "core/units.h"
#include "trace/trace.h"

namespace ringside::model {

const char* to_string(TimeClass c) {
  switch (c) {
    case TimeClass::attention: return "attention kernels";
    case TimeClass::gemms: return "GEMMs";
    case TimeClass::memory_bound: return "memory-bound ops";
    case TimeClass::launches: return "launches and host issue";
    case TimeClass::recompute: return "recompute";
    case TimeClass::idle: return "idle";
    case TimeClass::cp: return "exposed CP";
    case TimeClass::tp: return "exposed TP";
    case TimeClass::grads: return "exposed grads";
    case TimeClass::cp_waits: return "waiting on CP peers";
    case TimeClass::tp_waits: return "waiting on TP peers";
    case TimeClass::grads_waits: return "waiting in the gradient all-reduce";
    case TimeClass::bubble: return "pipeline bubble";
    case TimeClass::pp: return "exposed PP";
    case TimeClass::dp: return "exposed DP";
    case TimeClass::optimizer: return "optimizer";
    case TimeClass::stage_rest: return "embedding, head and gathers";
  }
  return "?";
}

const char* json_key(TimeClass c) {
  switch (c) {
    case TimeClass::attention: return "attention_s";
    case TimeClass::gemms: return "gemms_s";
    case TimeClass::memory_bound: return "memory_bound_s";
    case TimeClass::launches: return "launches_host_s";
    case TimeClass::recompute: return "recompute_s";
    case TimeClass::idle: return "idle_s";
    case TimeClass::cp: return "exposed_cp_s";
    case TimeClass::tp: return "exposed_tp_s";
    case TimeClass::grads: return "exposed_grads_s";
    case TimeClass::cp_waits: return "cp_waits_s";
    case TimeClass::tp_waits: return "tp_waits_s";
    case TimeClass::grads_waits: return "grads_waits_s";
    case TimeClass::bubble: return "bubble_s";
    case TimeClass::pp: return "exposed_pp_s";
    case TimeClass::dp: return "exposed_dp_s";
    case TimeClass::optimizer: return "optimizer_s";
    case TimeClass::stage_rest: return "stage_rest_s";
  }
  return "?";
}

double TimeParts::total() const {
  double t = 0;
  for (double s : seconds) t += s;
  return t;
}

double TimeParts::exposed() const {
  double t = 0;
  for (TimeClass c : {TimeClass::cp, TimeClass::tp, TimeClass::grads, TimeClass::pp, TimeClass::dp}) t += (*this)[c];
  return t;
}

TimeParts TimeParts::scaled(double k) const {
  TimeParts p = *this;
  for (double& s : p.seconds) s *= k;
  return p;
}

namespace {

bool is_compute_op(const trace::Event& e) { return e.stream == trace::Stream::compute && trace::is_work(e.kind); }

// The exposed class of a transfer, by the sublayer that posted it: the attention sublayer's are
// context parallelism's, the gradient all-reduce's its own, the rest TP's (qkv, out_proj, mlp).
TimeClass comm_class(const trace::Event& e) {
  if (e.sublayer == "attention") return TimeClass::cp;
  if (e.sublayer == "grad_sync") return TimeClass::grads;
  return TimeClass::tp;
}

// The waits class of an exposed class's group.
TimeClass waits_of(TimeClass exposed) {
  return exposed == TimeClass::cp ? TimeClass::cp_waits : exposed == TimeClass::tp ? TimeClass::tp_waits : TimeClass::grads_waits;
}

// One GPU's window [lo, hi] apart from its compute, by class, ns: its exposed communication
// (a transfer in flight, no compute running; a moment with k classes in flight counts 1/k to
// each), the host's issue (its program waiting, nothing in flight, for the host to issue the next
// kernel: the gaps between the compute stream's ops and waits), its waits with nothing in flight
// (for another GPU to post), by the group waited for, and idle (the rest: finished before the
// slowest).
std::map<TimeClass, double> rest_by_class(const trace::RankTrace& r, int64_t lo, int64_t hi) {
  constexpr int kCompute = -1, kHost = -2, kWait = 100;  // a wait of class c: kWait + c
  struct Edge {
    int64_t t;
    int delta, cls;
  };
  std::vector<Edge> edges;
  auto add = [&](int64_t b, int64_t e, int cls) {
    b = std::max(b, lo), e = std::min(e, hi);
    if (e > b) edges.push_back({b, +1, cls}), edges.push_back({e, -1, cls});
  };
  std::vector<const trace::Event*> program;  // the compute stream's ops and waits
  for (const trace::Event& e : r.events) {
    if (e.stream == trace::Stream::comm && e.dur_ns > 0) add(e.ts_ns, e.end_ns(), int(comm_class(e)));
    else if (is_compute_op(e)) add(e.ts_ns, e.end_ns(), kCompute);
    if (e.stream == trace::Stream::compute && e.kind == trace::Kind::wait) add(e.ts_ns, e.end_ns(), kWait + int(comm_class(e)));
    if (e.stream == trace::Stream::compute && !trace::is_container(e.kind)) program.push_back(&e);
  }
  std::stable_sort(program.begin(), program.end(), [](const trace::Event* a, const trace::Event* b) { return a->ts_ns < b->ts_ns; });
  int64_t reached = INT64_MIN;
  for (const trace::Event* e : program) {
    if (reached != INT64_MIN && e->ts_ns > reached) add(reached, e->ts_ns, kHost);
    reached = std::max(reached, e->end_ns());
  }
  std::sort(edges.begin(), edges.end(), [](const Edge& a, const Edge& b) { return a.t < b.t; });
  std::map<int, int> open;  // class (or kCompute, kHost) -> its intervals open
  std::map<TimeClass, double> out;
  int64_t last = lo;
  auto fill = [&](int64_t until) {
    if (until <= last || open[kCompute] > 0) return;
    const double span = double(until - last);
    int classes = 0;
    for (const auto& [cls, n] : open) classes += cls >= 0 && cls < kWait && n > 0;
    for (const auto& [cls, n] : open)
      if (cls >= 0 && cls < kWait && n > 0) out[TimeClass(cls)] += span / classes;
    if (classes > 0) return;
    // Nothing in flight: the group it waits for, else the host, else idle.
    for (const auto& [cls, n] : open)
      if (cls >= kWait && n > 0) {
        out[waits_of(TimeClass(cls - kWait))] += span;
        return;
      }
    out[open[kHost] > 0 ? TimeClass::launches : TimeClass::idle] += span;
  };
  for (const Edge& e : edges) {
    fill(e.t);
    last = std::max(last, e.t);
    open[e.cls] += e.delta;
  }
  fill(hi);
  return out;
}

// The tokens each query block of an attention call computes: the ring step's joined call
// (" step_call sq=N"), else its own sq.
double query_tokens(const trace::Event& e) {
  long long sq = 0;
  const size_t joined = e.detail.find("step_call sq=");
  if (joined != std::string::npos && std::sscanf(e.detail.c_str() + joined, "step_call sq=%lld", &sq) == 1) return double(sq);
  const size_t own = e.detail.find("sq=");
  if (own != std::string::npos && std::sscanf(e.detail.c_str() + own, "sq=%lld", &sq) == 1) return double(sq);
  return 0;
}

}  // namespace

TimeParts layer_time_parts(const trace::TraceData& modeled, const trace::StrategyMetrics& m, const Hardware& hw,
                           const ModelOptions& o) {
  TimeParts p;
  const double launch_s = at_roofline(hw, o) ? 0.0 : hw.efficiency.launch_s;
  const double peak = hw.peak_flops(o.dtype == "fp32" ? "fp32" : "bf16"), gemm_peak = hw.peak_flops(o.dtype);
  double attention_flops = 0, attention_kernel_s = 0, attention_tokens = 0, attention_calls = 0;
  double gemm_flops = 0, gemm_kernel_s = 0;
  int ranks = 0;
  for (const trace::RankMetrics& rm : m.ranks) {
    const trace::RankTrace* r = nullptr;
    for (const trace::RankTrace& t : modeled.ranks)
      if (t.strategy == m.strategy && t.rank == rm.rank) r = &t;
    RS_CHECK(r != nullptr, "time parts: no trace of ", m.strategy, " rank ", rm.rank);
    ++ranks;
    for (const trace::Event& e : r->events) {
      if (!is_compute_op(e)) continue;
      const double b = double(std::max(e.ts_ns, m.begin_ns)), f = double(std::min(e.end_ns(), m.end_ns));
      if (f <= b) continue;
      const double sec = (f - b) / 1e9;
      if (e.phase == "recompute") {
        p[TimeClass::recompute] += sec;
        continue;
      }
      const int kernels = op_kernels(e, hw, o);
      const double launches = std::min(sec, kernels * launch_s), work = sec - launches;
      p[TimeClass::launches] += launches;
      p.kernels += kernels;
      if (e.kind == trace::Kind::attention) {
        p[TimeClass::attention] += work;
        attention_flops += e.flops, attention_kernel_s += work;
        if (kernels > 0) p.attention_kernels += kernels, attention_tokens += query_tokens(e), ++attention_calls;
      } else if (e.kind == trace::Kind::gemm) {
        p[TimeClass::gemms] += work;
        gemm_flops += e.flops, gemm_kernel_s += work;
        p.gemm_kernels += kernels;
      } else {
        p[TimeClass::memory_bound] += work;
      }
    }
    for (const auto& [cls, ns] : rest_by_class(*r, m.begin_ns, m.end_ns)) p[cls] += ns / 1e9;
  }
  RS_CHECK(ranks > 0, "time parts: ", m.strategy, " has no ranks");
  p = p.scaled(1.0 / ranks);
  p.kernels /= ranks, p.attention_kernels /= ranks, p.gemm_kernels /= ranks;
  p.attention_tokens = attention_calls > 0 ? attention_tokens / attention_calls : 0;
  p.attention_of_peak = attention_kernel_s > 0 ? attention_flops / attention_kernel_s / peak : 0;
  p.gemm_of_peak = gemm_kernel_s > 0 ? gemm_flops / gemm_kernel_s / gemm_peak : 0;
  return p;
}

TimeDifference largest_difference(const TimeParts& loser, const TimeParts& winner) {
  TimeDifference d;
  d.total_seconds = loser.total() - winner.total();
  for (int c = 0; c < kTimeClasses; ++c) {
    const double by = loser.seconds[c] - winner.seconds[c];
    if (c == 0 || by > d.seconds) d.cls = TimeClass(c), d.seconds = by;
  }
  return d;
}

namespace {

std::string pct(double f, int digits = 0) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.*f%%", digits, 100 * f);
  return buf;
}

// Two fractions of peak, to the digits that tell them apart (up to one decimal).
std::pair<std::string, std::string> pcts(double a, double b) {
  const int digits = pct(a) == pct(b) ? 1 : 0;
  return {pct(a, digits), pct(b, digits)};
}

std::string count(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, std::abs(v - std::round(v)) < 0.05 ? "%.0f" : "%.1f", v);
  return buf;
}

std::string tokens(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.0f", v);
  return buf;
}

std::string time(double s) { return format_ns(s * 1e9); }

// What the two rows' numbers in class `c` are, for the words: "(32 kernels a layer of 16384
// tokens each at 61% of peak, against 16 of 32768 at 72%)".
std::string details(TimeClass c, const TimeParts& a, const TimeParts& b) {
  const std::string against = time(a[c]) + " against " + time(b[c]);
  switch (c) {
    case TimeClass::attention: {
      const auto [pa, pb] = pcts(a.attention_of_peak, b.attention_of_peak);
      return count(a.attention_kernels) + " kernels a layer of " + tokens(a.attention_tokens) + " query tokens on average at " + pa +
             " of peak, against " + count(b.attention_kernels) + " of " + tokens(b.attention_tokens) + " at " + pb + "; " + against;
    }
    case TimeClass::gemms: {
      const auto [pa, pb] = pcts(a.gemm_of_peak, b.gemm_of_peak);
      return count(a.gemm_kernels) + " GEMMs a layer at " + pa + " of peak, against " + count(b.gemm_kernels) + " at " + pb + "; " +
             against;
    }
    case TimeClass::launches:
      return count(a.kernels) + " kernels a layer against " + count(b.kernels) + ", each launched and issued by the host; " + against;
    case TimeClass::idle: return "finished before the slowest GPU: " + against;
    case TimeClass::cp_waits:
    case TimeClass::tp_waits:
    case TimeClass::grads_waits: return "nothing in flight, a peer not yet posting: " + against;
    case TimeClass::stage_rest: return "the pipeline's busy time beyond its first stage's layers, the LM head's stage the longest: " + against;
    case TimeClass::bubble: return "bubble " + pct(a.bubble_fraction) + " against " + pct(b.bubble_fraction) + "; " + against;
    default: return against;
  }
}

// Where the largest class is not the whole story: the net difference and the class that goes the
// other way most, "; 33.50 ms slower in all, 44.00 ms of memory-bound ops the other way". Said
// when that class takes back at least a tenth of the largest (smaller ones only round the words).
std::string net_words(const TimeDifference& d, const TimeParts& loser, const TimeParts& winner, bool winning) {
  int back = -1;
  for (int c = 0; c < kTimeClasses; ++c)
    if (winner.seconds[c] - loser.seconds[c] > (back < 0 ? 0.0 : winner.seconds[back] - loser.seconds[back])) back = c;
  if (back < 0) return "";
  const double by = winner.seconds[back] - loser.seconds[back];
  if (by < 0.1 * d.seconds) return "";
  return "; " + time(d.total_seconds) + (winning ? " faster" : " slower") + " in all, " + time(by) + " of " +
         to_string(TimeClass(back)) + " the other way";
}

}  // namespace

std::string difference_words(const TimeDifference& d, const TimeParts& loser, const TimeParts& winner, const std::string& other,
                             bool winning) {
  if (d.seconds <= 0)  // equal in every class: no class to name
    return std::string("the same time as ") + other + " in every class";
  const std::string words = winning ? "wins by " + time(d.seconds) + " of " + to_string(d.cls) + " over " + other + " (" +
                                           details(d.cls, winner, loser) + ")"
                                     : "loses " + time(d.seconds) + " of " + to_string(d.cls) + " to " + other + " (" +
                                           details(d.cls, loser, winner) + ")";
  return words + net_words(d, loser, winner, winning);
}

nlohmann::json time_parts_json(const TimeParts& p) {
  nlohmann::json j = nlohmann::json::object();
  for (int c = 0; c < kTimeClasses; ++c) j[json_key(TimeClass(c))] = p.seconds[c];
  j["exposed_s"] = p.exposed();
  return j;
}

}  // namespace ringside::model

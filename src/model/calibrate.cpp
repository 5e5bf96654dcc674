// `ringside calibrate`'s fits: each parameter of a profile from the kernels of a profiler run that
// measure it (the forms and the rules: calibrate.h).
#include "model/calibrate.h"

#include <algorithm>
#include <cmath>
#include <functional>
#include <iomanip>
#include <map>
#include <set>

#include "core/error.h"
#include "model/stack.h"

namespace ringside::model {

namespace {

// A measured time and the weight of the samples it stands for (identical shapes, one point).
struct Measured {
  double seconds = 0, weight = 0;
  std::vector<double> all;  // every sample's time, for the errors
};

// The samples of one shape as one point: the median of their times, weighted by their count.
void add(Measured& m, double seconds) { m.all.push_back(seconds), m.weight += 1; }
void settle(Measured& m) {
  std::sort(m.all.begin(), m.all.end());
  m.seconds = m.all[m.all.size() / 2];
}

// Minimises `cost` over [lo, hi] on a log scale by golden-section search; the bounds themselves
// are candidates too (a fit at its bound says the run is beyond the form's range).
double golden(const std::function<double(double)>& cost, double lo, double hi) {
  double a = std::log(lo), b = std::log(hi);
  const double g = (std::sqrt(5.0) - 1) / 2;
  double c = b - g * (b - a), d = a + g * (b - a);
  double fc = cost(std::exp(c)), fd = cost(std::exp(d));
  while (b - a > 1e-7) {
    if (fc <= fd) b = d, d = c, fd = fc, c = b - g * (b - a), fc = cost(std::exp(c));
    else a = c, c = d, fc = fd, d = a + g * (b - a), fd = cost(std::exp(d));
  }
  double best = std::exp((a + b) / 2), best_cost = cost(best);
  for (double x : {lo, hi})
    if (const double f = cost(x); f < best_cost) best = x, best_cost = f;
  return best;
}

// A relative error as a reason says it: "12%", ">999%".
std::string pct(double e) { return e > 9.99 ? std::string(">999%") : detail::concat(std::lround(100 * e), "%"); }

double squared_log(double predicted, double measured) {
  const double l = std::log(predicted / measured);
  return l * l;
}

// Median and worst |predicted / measured - 1| over every sample of the points.
template <class Point, class Predict>
std::pair<double, double> errors(const std::vector<Point>& points, const Predict& predict) {
  std::vector<double> e;
  for (const Point& p : points) {
    const double t = predict(p);
    for (double s : p.time.all) e.push_back(std::abs(t / s - 1));
  }
  if (e.empty()) return {0, 0};
  std::sort(e.begin(), e.end());
  return {e[e.size() / 2], e.back()};
}

// The curve of a kernel family for a direction and mask.
AttentionCurve& curve_of(AttentionKernel& k, bool backward, bool masked) {
  return backward ? (masked ? k.backward_causal : k.backward) : (masked ? k.forward_causal : k.forward);
}

// Whether `values` vary enough to fix a half point: 3 distinct values, the largest 4x the least.
bool spans(const std::set<double>& values) { return values.size() >= 3 && *values.rbegin() >= 4 * *values.begin(); }

// "3 values from 1025 to 4097 (4.00x)": what a half point's rule was given.
std::string values_text(const std::set<double>& values) {
  if (values.size() == 1) return detail::concat("1 value (", *values.begin(), ")");
  char ratio[32];
  std::snprintf(ratio, sizeof ratio, "%.4gx", *values.rbegin() / *values.begin());
  return detail::concat(values.size(), " values from ", *values.begin(), " to ", *values.rbegin(), " (", ratio, ")");
}

// Drops the points more than 2x off a first fit (a stray shape, a kernel that waited), where at
// least `least` samples remain; returns how many samples it dropped. The caller fits again.
template <class Point, class Predict>
int trim(std::vector<Point>& points, const Predict& at_fit, int least) {
  std::vector<Point> kept;
  int dropped = 0, left = 0;
  for (const Point& p : points) {
    if (std::abs(std::log(at_fit(p) / p.time.seconds)) > std::log(2.0)) dropped += int(p.time.all.size());
    else kept.push_back(p), left += int(p.time.all.size());
  }
  if (dropped == 0 || left < least) return 0;
  points = std::move(kept);
  return dropped;
}
std::string trimmed_text(int dropped) {
  return dropped == 0 ? "" : detail::concat(dropped, " sample", dropped == 1 ? "" : "s", " more than 2x off left out");
}

// Whether predictions move with a parameter: some sample's time changes by 1% or more when it
// grows 10%. One that does not (a masked call held to the unmasked curve's rate, a GEMM bound by
// its bytes) is not measured by the run, whatever the fit says.
template <class Point, class Predict>
bool moves(const std::vector<Point>& points, const Predict& at, double value) {
  return std::any_of(points.begin(), points.end(), [&](const Point& p) { return std::abs(at(p, 1.1 * value) / at(p, value) - 1) >= 0.01; });
}

class Fitter {
 public:
  Fitter(const trace::ProfiledRun& run, const Hardware& base, const CalibrateOptions& o) : run_(run), base_(base), o_(o) {
    c_.hw = base;
    stack_ = load_stack(o.stack);
    c_.parameters.reserve(kMostParameters);  // param() hands out references that must stay put
  }

  Calibration fit() {
    nodes();
    memory();
    launch();
    gemm();
    attention();
    links();
    return std::move(c_);
  }

 private:
  static constexpr size_t kMostParameters = 5 + 2 + 4 * 4 * 2 + 2 * 4;  // GEMM, memory, 4 families x 4 curves, 4 tiers
  CalibratedParameter& param(const std::string& name, const std::string& unit, double base) {
    RS_CHECK(c_.parameters.size() < kMostParameters, "calibrate: more parameters than kMostParameters");
    CalibratedParameter p;
    p.name = name, p.unit = unit, p.base = p.fitted = base;
    c_.parameters.push_back(p);
    return c_.parameters.back();
  }
  void keep(CalibratedParameter& p, int samples, const std::string& why) { p.samples = samples, p.kept = true, p.why = why; }
  // The fitted value, unless the form cannot fit the samples at all (median error past
  // kMostMedianError at its best): then the base's is kept and why said. True when it is taken.
  static constexpr double kMostMedianError = 0.25;
  static constexpr double kMostLatency = 1e-3;  // seconds: NCCL's floors are microseconds (calibration.md H)
  static constexpr double kLeastLinkEfficiency = 0.05;  // NCCL reaches 30-95% of a link's line rate (calibration.md H)
  bool set(CalibratedParameter& p, double value, int samples, std::pair<double, double> err, const std::string& how = "") {
    if (err.first > kMostMedianError) {
      keep(p, samples, detail::concat("the model's form does not fit its samples: a median error of ", pct(err.first),
                                      " at the best value (", std::round(value * 1000) / 1000, p.unit.empty() ? "" : " " + p.unit, ")"));
      return false;
    }
    // Four significant digits: what a fit of kernel times can say (and what the profile is given).
    p.fitted = std::stod(detail::concat(std::setprecision(4), value));
    p.samples = samples, p.kept = false, p.why = how, p.median_error = err.first, p.worst_error = err.second;
    return true;
  }
  std::string too_few(int n) const {
    return n == 0 ? "the run has none" : detail::concat(n, " sample", n == 1 ? "" : "s", ", fewer than ", o_.min_samples);
  }

  // Which node each rank is on: --gpus-per-node, the files' host names, or the base's domain.
  void nodes() {
    if (o_.gpus_per_node > 0) {
      c_.gpus_per_node = o_.gpus_per_node, c_.gpus_per_node_source = "--gpus-per-node";
    } else if (!run_.host.empty() && int(run_.host.size()) == run_.world_size) {
      // A host holds at least the ranks named by it, and the GPUs its processes saw (a test
      // job of 2 ranks a host on 8-GPU nodes lists 8): nodes are never sized down by a small run.
      std::map<std::string, int> per_host;
      for (const auto& [rank, host] : run_.host) ++per_host[host];
      int most = 0;
      for (const auto& [host, n] : per_host) most = std::max(most, n);
      c_.gpus_per_node = std::max(most, run_.host_gpus);
      c_.gpus_per_node_source = detail::concat("the files' host names: ", most, " rank", most == 1 ? "" : "s", " a host",
                                               run_.host_gpus > 0 ? detail::concat(", ", run_.host_gpus, run_.host_gpus == 1 ? " GPU" : " GPUs",
                                                                                   " in deviceProperties") : "");
      for (const auto& [rank, host] : run_.host) host_index_[rank] = int(std::distance(per_host.begin(), per_host.find(host)));
    } else if (run_.host_gpus > 1) {
      c_.gpus_per_node = run_.host_gpus, c_.gpus_per_node_source = "deviceProperties: the GPUs a host showed";
    } else {
      c_.gpus_per_node = base_.domain_gpus(), c_.gpus_per_node_source = "the base profile's";
    }
    if (base_.tiers.size() == 2 && c_.gpus_per_node > 0 && c_.gpus_per_node != base_.tiers.front().gpus) {
      c_.hw.tiers.front().gpus = c_.gpus_per_node;
      c_.hw.tiers.front().unit = 0;
    }
  }
  int node_of(int rank) const {
    const auto it = host_index_.find(rank);
    if (it != host_index_.end()) return it->second;
    return c_.gpus_per_node > 0 ? rank / c_.gpus_per_node : 0;
  }

  void memory() {
    Efficiency& e = c_.hw.efficiency;
    CalibratedParameter& p = param("efficiency.memory.fraction", "", base_.efficiency.memory_fraction);
    std::map<double, Measured> by_bytes;
    int n = 0;
    for (const trace::MemoryBoundSample& s : run_.memory)
      if (s.bytes >= 16.0 * (1 << 20) && s.seconds > 0) add(by_bytes[s.bytes], s.seconds), ++n;
    if (n < o_.min_samples) return keep(p, n, too_few(n) + " (ops of 16 MiB or more)");
    struct Point {
      double bytes;
      Measured time;
    };
    std::vector<Point> points;
    for (auto& [bytes, m] : by_bytes) settle(m), points.push_back({bytes, m});
    const double hbm = base_.memory_bandwidth;
    auto predict = [&](const Point& pt, double fraction) { return pt.bytes / (hbm * fraction); };
    auto fit = [&] {
      return golden([&](double x) {
        double sum = 0;
        for (const Point& pt : points) sum += pt.time.weight * squared_log(predict(pt, x), pt.time.seconds);
        return sum;
      }, 0.01, 1.0);
    };
    double f = fit();
    const int dropped = trim(points, [&](const Point& pt) { return predict(pt, f); }, o_.min_samples);
    if (dropped > 0) f = fit();
    const auto err = errors(points, [&](const Point& pt) { return predict(pt, f); });
    if (f >= 0.999 && err.first > 0.05)
      return keep(p, n - dropped, detail::concat("its ops run faster than the base's HBM allows (median ", pct(err.first),
                                                 " off at a fraction of 1: is the base this GPU?): not fitted past 1"));
    if (!set(p, f, n - dropped, err, trimmed_text(dropped))) return;
    if (f >= 0.999) p.why = "at its bound 1: the run's copies reach the base's HBM rate";
    e.memory_fraction = p.fitted;
  }

  void launch() {
    CalibratedParameter& p = param("efficiency.memory.launch_us", "us", base_.efficiency.launch_s * 1e6);
    std::vector<double> gaps = run_.queued_gaps;
    const int n = int(gaps.size()), least = std::max(o_.min_samples, 10);
    if (!run_.host_gaps.empty()) {
      std::vector<double> h = run_.host_gaps;
      std::sort(h.begin(), h.end());
      c_.host_gap_s = h[h.size() / 2], c_.host_gaps = int(h.size());
    }
    if (n < least)
      return keep(p, n, n == 0 ? "no two kernels in a row on a stream with the second launched before the first ended"
                               : detail::concat(n, " queued gaps, fewer than ", least));
    std::sort(gaps.begin(), gaps.end());
    const double median = gaps[gaps.size() / 2];
    // Each gap's distance from the median, relative to it (a gap can be 0); the worst is the 90th
    // percentile's: a longer gap waited on something the trace does not show (an event, the host).
    std::vector<double> e;
    for (double g : gaps) e.push_back(std::abs(g - median) / std::max(median, 1e-9));
    std::sort(e.begin(), e.end());
    if (set(p, median * 1e6, n, {e[e.size() / 2], e[e.size() * 9 / 10]},
            detail::concat("the median of its gaps; half lie within ", pct(e[e.size() / 2]), " of it, 90% within ",
                           pct(e[e.size() * 9 / 10])))) {
      c_.hw.efficiency.launch_s = p.fitted * 1e-6;
      p.spread = true;
    }
  }

  // GEMMs: the MAMF fraction per element type, and k_half from the type with the most samples.
  void gemm() {
    Efficiency& e = c_.hw.efficiency;
    struct Point {
      int64_t m, n, k;
      Measured time;
    };
    std::map<std::string, std::map<std::tuple<int64_t, int64_t, int64_t>, Measured>> by_type;
    std::map<std::string, int> counts;
    std::map<std::string, int> tiny;
    for (const trace::GemmSample& s : run_.gemms) {
      const double peak = c_.hw.peak_flops(s.dtype);
      const double flops = 2.0 * double(s.m) * double(s.n) * double(s.k);
      if (s.seconds <= 0) continue;
      // Too small to measure a rate: under 2 us at the peak, its launch and tail are most of it.
      if (peak > 0 && flops / peak < 2e-6) {
        ++tiny[s.dtype];
        continue;
      }
      add(by_type[s.dtype][{s.m, s.n, s.k}], s.seconds), ++counts[s.dtype];
    }
    std::map<std::string, std::vector<Point>> points;
    for (auto& [dtype, shapes] : by_type)
      for (auto& [shape, m] : shapes) settle(m), points[dtype].push_back({std::get<0>(shape), std::get<1>(shape), std::get<2>(shape), m});

    Efficiency candidate = e;
    candidate.gemm.sustained = 1;  // the kernels' own rate
    auto predict = [&](const Point& pt, const std::string& dtype, double fraction, double k_half) {
      candidate.gemm.k_half = k_half;
      const double peak = c_.hw.peak_flops(dtype);
      const double flops = 2.0 * double(pt.m) * double(pt.n) * double(pt.k);
      const double bytes = (double(pt.m) * pt.k + double(pt.k) * pt.n + double(pt.m) * pt.n) * (dtype == "fp32" ? 4 : dtype == "fp8" ? 1 : 2);
      const double rate = gemm_rate(candidate, peak, fraction, pt.m, pt.n, pt.k);
      return std::max(flops / std::min(rate * e.clock, peak), bytes / (c_.hw.memory_bandwidth * e.memory_fraction));
    };
    auto cost = [&](const std::string& dtype, double fraction, double k_half) {
      double sum = 0;
      for (const Point& pt : points[dtype]) sum += pt.time.weight * squared_log(predict(pt, dtype, fraction, k_half), pt.time.seconds);
      return sum;
    };

    // Each type's fraction at the base's k_half; a type whose GEMMs outrun its peak at any
    // fraction up to 1 is not fitted (TF32 GEMMs of fp32 tensors are: the model has no TF32 peak).
    std::map<std::string, double> fraction;
    std::map<std::string, CalibratedParameter*> params;
    std::map<std::string, int> trimmed;
    for (const char* dtype : {"bf16", "fp8", "fp32"}) {
      CalibratedParameter& p = param(std::string("efficiency.gemm.") + dtype, "", e.gemm.of(dtype));
      params[dtype] = &p;
      const int n = counts.count(dtype) ? counts[dtype] : 0;
      if (n < o_.min_samples) {
        keep(p, n, too_few(n) + (tiny.count(dtype) ? detail::concat(" (", tiny[dtype], " more too small to measure a rate: under 2 us at the peak)") : ""));
        continue;
      }
      if (c_.hw.peak_flops(dtype) <= 0) {
        keep(p, n, std::string("the base GPU has no ") + dtype + " peak");
        continue;
      }
      double f = golden([&](double x) { return cost(dtype, x, e.gemm.k_half); }, 0.02, 1.0);
      if (const int dropped = trim(points[dtype], [&](const Point& pt) { return predict(pt, dtype, f, e.gemm.k_half); }, o_.min_samples)) {
        counts[dtype] -= dropped, trimmed[dtype] = dropped;
        f = golden([&](double x) { return cost(dtype, x, e.gemm.k_half); }, 0.02, 1.0);
      }
      if (!moves(points[dtype], [&](const Point& pt, double x) { return predict(pt, dtype, x, e.gemm.k_half); }, f)) {
        keep(p, n, "its GEMMs are bound by their bytes at any fraction: their times do not measure it");
        continue;
      }
      const auto err = errors(points[dtype], [&](const Point& pt) { return predict(pt, dtype, f, e.gemm.k_half); });
      if (f >= 0.999 && err.first > 0.05) {
        keep(p, n, detail::concat("its GEMMs run faster than the ", dtype, " peak allows (median ", pct(err.first),
                                  " off at a fraction of 1", std::string(dtype) == "fp32" ? ": TF32 tensor cores?" : "",
                                  "): not fitted past 1"));
        continue;
      }
      fraction[dtype] = f;
    }
    // k_half, with the fraction of the most-sampled type fitted, where its k spans enough.
    CalibratedParameter& kp = param("efficiency.gemm.k_half", "k", base_.efficiency.gemm.k_half);
    std::string lead;
    for (const auto& [dtype, f] : fraction)
      if (lead.empty() || counts[dtype] > counts[lead]) lead = dtype;
    if (lead.empty()) {
      keep(kp, int(run_.gemms.size()), "no GEMM type was fitted");
    } else {
      std::set<double> ks;
      for (const Point& pt : points[lead]) ks.insert(double(pt.k));
      if (spans(ks)) {
        const double k_half =
            golden([&](double kh) { return cost(lead, golden([&](double f) { return cost(lead, f, kh); }, 0.02, 1.0), kh); }, 1, 16384);
        const double f = golden([&](double x) { return cost(lead, x, k_half); }, 0.02, 1.0);
        if (set(kp, k_half, counts[lead], errors(points[lead], [&](const Point& pt) { return predict(pt, lead, f, k_half); }),
                "with " + lead + "'s fraction")) {
          e.gemm.k_half = kp.fitted;
          for (auto& [dtype, fd] : fraction) fd = golden([&](double x) { return cost(dtype, x, e.gemm.k_half); }, 0.02, 1.0);
        }
      } else {
        keep(kp, counts[lead], "its k takes " + values_text(ks) + ": a half point needs 3 values spanning 4x or more");
      }
    }
    bool any = false;
    for (const auto& [dtype, f] : fraction)
      if (set(*params[dtype], f, counts[dtype], errors(points[dtype], [&](const Point& pt) { return predict(pt, dtype, f, e.gemm.k_half); }),
              trimmed_text(trimmed[dtype])))
        (dtype == "bf16" ? e.gemm.bf16 : dtype == "fp8" ? e.gemm.fp8 : e.gemm.fp32) = params[dtype]->fitted, any = true;
    // The share of a published MAMF a whole step sustains: the run's own kernels are what its
    // steps sustain, so where they set a fraction it is 1; else the base's stays.
    CalibratedParameter& sp = param("efficiency.gemm.sustained", "", base_.efficiency.gemm.sustained);
    if (any) {
      sp.fitted = 1, sp.kept = false, sp.samples = int(run_.gemms.size()), sp.why = "the run's own kernels: what its steps sustain";
      e.gemm.sustained = 1;
    } else {
      keep(sp, int(run_.gemms.size()), "no GEMM fraction was fitted");
    }
  }

  // Attention: R and (where the keys a query sees span enough) k_half, per family, direction and mask.
  void attention() {
    Efficiency& e = c_.hw.efficiency;
    struct Point {
      trace::Event event;
      double keys_per_query;
      Measured time;
    };
    std::map<std::tuple<std::string, bool, bool>, std::map<std::string, Point>> groups;
    std::map<std::tuple<std::string, bool, bool>, int> counts, tiny;
    for (const trace::AttentionSample& s : run_.attention) {
      if (s.seconds <= 0) continue;
      // The pairs a causal call sees, bottom-right aligned (FlashAttention's mask for sq != sk).
      const double sq = double(s.sq), sk = double(s.sk);
      const double pairs = !s.causal ? sq * sk : sq <= sk ? sq * (sk - sq) + sq * (sq + 1) / 2 : sk * (sk + 1) / 2;
      trace::Event ev;
      ev.kind = trace::Kind::attention;
      ev.stream = trace::Stream::compute;
      ev.name = s.backward ? "attention_backward" : "attention_forward";
      ev.flops = 4.0 * double(s.d) * double(s.b) * double(s.H) * pairs * (s.backward ? 2.5 : 1.0);
      ev.detail = detail::concat("b=", s.b, " sq=", s.sq, " sk=", s.sk, " H=", s.H, " Hkv=", s.Hkv, " d=", s.d);
      const auto key = std::make_tuple(s.family, s.backward, s.causal && pairs < sq * sk - 0.5);
      if (ev.flops / c_.hw.peak_flops_bf16 < 2e-6) {  // under 2 us at the peak: its launch and tail are most of it
        ++tiny[key];
        continue;
      }
      auto [it, fresh] = groups[key].try_emplace(ev.detail, Point{ev, pairs / sq, {}});
      add(it->second.time, s.seconds), ++counts[key];
    }
    ModelOptions options;
    options.stack = stack_;
    std::map<std::string, int> measured;  // calls behind each family's fitted curves
    for (const auto& [family, kernel] : base_.efficiency.attention)
      for (bool backward : {false, true})
        for (bool masked : {false, true}) {
          const std::string curve = std::string(backward ? "backward" : "forward") + (masked ? "_causal" : "");
          const std::string where = "efficiency.attention." + family + "." + curve;
          AttentionCurve& target = curve_of(e.attention[family], backward, masked);
          CalibratedParameter& rp = param(where + ".tflops", "TFLOP/s", target.rate / 1e12);
          CalibratedParameter& kp = param(where + ".k_half", "keys", target.k_half);
          const auto key = std::make_tuple(family, backward, masked);
          int n = counts.count(key) ? counts[key] : 0;
          if (n < o_.min_samples) {
            const std::string why = too_few(n) + (tiny.count(key) ? detail::concat(" (", tiny[key], " more too small to measure a rate: under 2 us at the peak)") : "");
            keep(rp, n, why), keep(kp, n, why);
            continue;
          }
          std::vector<Point> points;
          for (auto& [detail_text, pt] : groups[key]) settle(pt.time), points.push_back(pt);
          options.attention_kernel = family;
          // The profile as fitted so far, its launches out (a kernel's time has none), this curve the probe.
          Hardware candidate = c_.hw;
          candidate.efficiency.launch_s = 0;
          AttentionCurve& probe = curve_of(candidate.efficiency.attention[family], backward, masked);
          auto predict = [&](const Point& pt, double rate, double k_half) {
            probe.rate = rate, probe.k_half = k_half;
            return op_seconds(pt.event, 0, candidate, options);
          };
          auto cost = [&](double rate, double k_half) {
            double sum = 0;
            for (const Point& pt : points) sum += pt.time.weight * squared_log(predict(pt, rate, k_half), pt.time.seconds);
            return sum;
          };
          const double peak = c_.hw.peak_flops_bf16;
          std::set<double> kpq;
          for (const Point& pt : points) kpq.insert(std::round(pt.keys_per_query));
          double k_half = target.k_half, rate = 0;
          auto fit = [&] {
            if (spans(kpq))
              k_half = golden([&](double kh) { return cost(golden([&](double r) { return cost(r, kh); }, 1e12, peak), kh); }, 1, 1e5);
            rate = golden([&](double r) { return cost(r, k_half); }, 1e12, peak);
          };
          fit();
          const int dropped = trim(points, [&](const Point& pt) { return predict(pt, rate, k_half); }, o_.min_samples);
          if (dropped > 0) {
            n -= dropped, kpq.clear();
            for (const Point& pt : points) kpq.insert(std::round(pt.keys_per_query));
            fit();
          }
          const auto err = errors(points, [&](const Point& pt) { return predict(pt, rate, k_half); });
          if (rate >= 0.999 * peak && err.first > 0.05) {
            keep(rp, n, detail::concat("its calls run faster than the bf16 peak allows (median ", pct(err.first),
                                       " off at the peak): not fitted past it"));
            keep(kp, n, "as the rate (fitted with it): " + rp.why);
            continue;
          }
          if (!moves(points, [&](const Point& pt, double r) { return predict(pt, r, k_half); }, rate)) {
            keep(rp, n, masked ? "the model holds a masked call to the unmasked curve's rate at as many keys, and these calls "
                                 "sit at that cap: their times do not move this curve (the unmasked curve's calls set it)"
                               : "its calls' times do not depend on it");
            keep(kp, n, "as the rate: " + rp.why);
            continue;
          }
          if (!set(rp, rate / 1e12, n, err, trimmed_text(dropped))) {
            keep(kp, n, "as the rate (fitted with it): " + rp.why);
            continue;
          }
          target.rate = rp.fitted * 1e12;
          measured[family] += n;
          if (spans(kpq) && set(kp, k_half, n, err)) target.k_half = kp.fitted;
          else if (!spans(kpq))
            keep(kp, n, "the keys a query sees take " + values_text(kpq) + ": a half point needs 3 values spanning 4x or more");
        }
    // The family the run measured most is the one its software runs: model and plan take it.
    for (const auto& [family, n] : measured)
      if (e.measured_kernel.empty() || n > measured[e.measured_kernel]) e.measured_kernel = family;
  }

  // NCCL per tier: latency and bandwidth from each call's time (the least over its ranks).
  void links() {
    struct Call {
      double steps = 0, bytes = 0;  // the time is steps x latency + bytes / (line x efficiency)
      int tier = -1;
      double seconds = 1e300;
      int samples = 0;
    };
    std::map<std::string, Call> calls;
    std::map<std::string, int64_t> skipped;
    std::map<std::string, int> p2p_index;
    const int outer = int(c_.hw.tiers.size()) - 1;
    for (const trace::CommSample& s : run_.comms) {
      Call c;
      std::string key;
      const bool sends = s.collective == trace::NcclCall::send;
      if (sends || s.collective == trace::NcclCall::recv) {
        const int from = sends ? s.rank : s.peer, to = sends ? s.peer : s.rank;
        const std::string pair = detail::concat(from, ">", to);
        key = detail::concat("run ", s.run, " p2p ", pair, " #", p2p_index[detail::concat(s.run, " ", pair, trace::nccl_call_name(s.collective))]++);
        c.steps = 1, c.bytes = s.bytes;
        c.tier = node_of(from) == node_of(to) ? 0 : outer;
      } else {
        const int n = int(s.ranks.size());
        if (n < 2) {
          ++skipped[n == 0 ? "its group's ranks not recorded (record_param_comms' Process Group Ranks)" : "a group of one"];
          continue;
        }
        std::map<int, int> per_node;
        for (int r : s.ranks) ++per_node[node_of(r)];
        if (per_node.size() == 1) c.tier = 0;
        else if (std::all_of(per_node.begin(), per_node.end(), [](const auto& kv) { return kv.second == 1; })) c.tier = outer;
        else {
          ++skipped["a group with several GPUs in each of several nodes (hierarchical)"];
          continue;
        }
        c.steps = (s.collective == trace::NcclCall::all_reduce ? 2.0 : 1.0) * (n - 1);
        c.bytes = c.steps * s.bytes / n;
        std::string members;
        for (int r : s.ranks) members += detail::concat(r, ",");
        key = detail::concat("run ", s.run, " ", trace::nccl_call_name(s.collective), " [", members, "] #", s.call);
      }
      Call& into = calls.try_emplace(key, c).first->second;
      into.seconds = std::min(into.seconds, s.seconds), ++into.samples;
    }
    for (int t = 0; t <= outer; ++t) {
      Tier& tier = c_.hw.tiers[t];
      const std::string where = detail::concat("tiers[", t, "] (", tier.name, ")");
      CalibratedParameter& lp = param(where + ".latency_us", "us", tier.latency_s * 1e6);
      CalibratedParameter& ep = param(where + ".efficiency", "", tier.efficiency);
      std::vector<Call> mine;
      int samples = 0;
      for (const auto& [key, c] : calls)
        if (c.tier == t && c.seconds > 0 && c.bytes > 0) mine.push_back(c), samples += c.samples;
      const int n = int(mine.size());
      if (n < o_.min_samples || (t > 0 && t < outer)) {
        keep(lp, samples, too_few(n) + (n == 1 ? " call" : " calls")), keep(ep, samples, too_few(n) + (n == 1 ? " call" : " calls"));
        continue;
      }
      // Least squares on relative error: minimise sum ((steps L + bytes V) / t - 1)^2, V = 1 / rate.
      std::set<double> sizes;
      for (const Call& c : mine) sizes.insert(c.bytes / c.steps);
      const bool both = sizes.size() >= 3 && *sizes.rbegin() >= 8 * *sizes.begin();
      double latency = tier.latency_s, inverse = 0;
      auto solve_inverse = [&](double L) {
        double num = 0, den = 0;
        for (const Call& c : mine) num += (c.bytes / c.seconds) * (1 - L * c.steps / c.seconds), den += std::pow(c.bytes / c.seconds, 2);
        return num / den;
      };
      if (both) {
        double a11 = 0, a12 = 0, a22 = 0, b1 = 0, b2 = 0;
        for (const Call& c : mine) {
          const double x1 = c.steps / c.seconds, x2 = c.bytes / c.seconds;
          a11 += x1 * x1, a12 += x1 * x2, a22 += x2 * x2, b1 += x1, b2 += x2;
        }
        const double det = a11 * a22 - a12 * a12;
        latency = det > 0 ? (b1 * a22 - b2 * a12) / det : -1;
        if (latency < 0) latency = 0;
      }
      inverse = solve_inverse(latency);
      double efficiency = inverse > 0 ? 1 / (inverse * tier.bandwidth) : 2;
      if (efficiency > 1) {  // faster than the line rate: the link runs at its line, the rest is latency
        efficiency = 1, inverse = 1 / tier.bandwidth;
        double num = 0, den = 0;
        for (const Call& c : mine) num += (c.steps / c.seconds) * (1 - c.bytes * inverse / c.seconds), den += std::pow(c.steps / c.seconds, 2);
        if (both) latency = std::max(0.0, num / den);
      }
      auto predict = [&](const Call& c) { return c.steps * latency + c.bytes / (tier.bandwidth * efficiency); };
      std::vector<double> err;
      for (const Call& c : mine) err.push_back(std::abs(predict(c) / c.seconds - 1));
      std::sort(err.begin(), err.end());
      const std::pair<double, double> e{err[err.size() / 2], err.back()};
      // A call seen on one rank only: its kernel also waited for the group's last rank to join.
      const bool one_rank = std::all_of(mine.begin(), mine.end(), [](const Call& c) { return c.samples == 1; });
      const std::string alone = one_rank ? "each call on one rank only, whose kernel includes its wait for the others" : "";
      if (efficiency < kLeastLinkEfficiency) {
        const std::string why = detail::concat("an efficiency of ", std::round(efficiency * 1e4) / 1e4,
                                               " at the best fit, under 5% of the line rate: the kernels waited (for a peer, the "
                                               "host), they do not measure the link");
        keep(ep, samples, why), keep(lp, samples, "as the efficiency (fitted with it): " + why);
        continue;
      }
      if (latency > kMostLatency) {
        const std::string why = detail::concat("a latency of ", std::lround(latency * 1e6),
                                               " us at the best fit, past 1 ms: the kernels waited (for a peer, the host), they do not "
                                               "measure the link");
        keep(lp, samples, why), keep(ep, samples, "as the latency (fitted with it): " + why);
        continue;
      }
      if (efficiency >= 1 && e.first > 0.05) {
        const std::string why = detail::concat("its calls run faster than the line rate allows (median ", pct(e.first),
                                               " off at an efficiency of 1): not fitted past 1");
        keep(ep, samples, why), keep(lp, samples, "as the efficiency (fitted with it): " + why);
        continue;
      }
      if (!set(ep, efficiency, samples, e, efficiency >= 1 ? "at its bound 1: the line rate" : alone)) {
        if (one_rank) ep.why += "; " + alone;
        keep(lp, samples, "as the efficiency (fitted with it): " + ep.why);
        continue;
      }
      if (both) set(lp, latency * 1e6, samples, e, alone);
      else
        keep(lp, samples, detail::concat("its messages take ", sizes.size(), " size", sizes.size() == 1 ? "" : "s",
                                         ": a latency needs 3 sizes spanning 8x"));
      if (!lp.kept) tier.latency_s = lp.fitted * 1e-6;
      tier.efficiency = ep.fitted;
    }
    for (const auto& [why, n] : skipped) c_.skipped_links.push_back(detail::concat(n, " NCCL kernels: ", why));
  }

  const trace::ProfiledRun& run_;
  const Hardware& base_;
  const CalibrateOptions& o_;
  Stack stack_;
  Calibration c_;
  std::map<int, int> host_index_;
};

}  // namespace

Calibration calibrate(const trace::ProfiledRun& run, const Hardware& base, const CalibrateOptions& o) {
  if (o.gpus_per_node < 0) throw ConfigError("--gpus-per-node must be at least 1");
  if (o.min_samples < 1) throw ConfigError("--min-samples must be at least 1");
  if (!base.efficiency.present) throw ConfigError("--base " + base.name + ": a profile without efficiencies (the roofline) has nothing to calibrate");
  if (run.kernels == 0)
    throw ConfigError("the run has no GPU kernels (a CPU-only profile?): profile with activities=[ProfilerActivity.CPU, "
                      "ProfilerActivity.CUDA]");
  Calibration c = Fitter(run, base, o).fit();
  if (std::all_of(c.parameters.begin(), c.parameters.end(), [](const CalibratedParameter& p) { return p.kept; })) {
    // Samples enough, but no fit taken: say each one's reason.
    std::string reasons;
    for (const CalibratedParameter& p : c.parameters)
      if (p.samples >= o.min_samples) reasons += "; " + p.name + ": " + p.why;
    if (!reasons.empty()) throw ConfigError("nothing fitted: every parameter the run measures is kept from " + base.name + reasons);
    std::string why = run.shapes ? "" : "; its ops carry no shapes: profile with record_shapes=True";
    for (const auto& [reason, n] : run.skipped) why += detail::concat("; ", n, " kernels: ", reason);
    throw ConfigError(detail::concat("nothing to fit: no parameter has ", o.min_samples, " samples in the run (",
                                     run.gemms.size(), " GEMMs, ", run.attention.size(), " attention calls, ", run.memory.size(),
                                     " memory-bound ops, ", run.comms.size(), " NCCL calls, ", run.queued_gaps.size(), " queued gaps",
                                     ")", why));
  }
  return c;
}

nlohmann::json calibrated_profile(const Calibration& c, const std::string& name, const std::string& run_text, const std::string& date) {
  Hardware hw = c.hw;
  const std::string from = "calibrated from " + run_text + " on " + date;
  hw.name = name;
  hw.description = from + " over " + hw.description +
                   (c.hw.tiers.size() == 2 && c.gpus_per_node > 0 && c.gpus_per_node_source.find("base") == std::string::npos
                        ? detail::concat("; nodes of ", c.gpus_per_node, " GPUs (", c.gpus_per_node_source, ")")
                        : "");
  hw.source = from + " by `ringside calibrate` over the profile " + c.hw.name + " (" + c.hw.source +
              "): each fitted value below says so, the rest are the base's (calibration.parameters)";
  // Each fitted group's source says where its numbers come from now.
  // A base that was itself calibrated: its sources' base part, not each calibration nested.
  auto base_part = [](const std::string& source) {
    const size_t at = source.starts_with("calibrated from ") ? source.find("; otherwise ") : std::string::npos;
    return at == std::string::npos ? source : source.substr(at + 12);
  };
  auto fitted = [&](const std::string& prefix) {
    std::string s;
    for (const CalibratedParameter& p : c.parameters)
      if (!p.kept && p.name.starts_with(prefix))
        s += detail::concat(s.empty() ? "" : ", ", p.name.substr(prefix.size()), " ", p.fitted, " (", p.samples, " samples, median error ",
                            std::round(1000 * p.median_error) / 10, "%)");
    return s;
  };
  Efficiency& e = hw.efficiency;
  if (const std::string s = fitted("efficiency.gemm."); !s.empty()) e.gemm.source = from + ": " + s + "; otherwise " + base_part(e.gemm.source);
  if (const std::string s = fitted("efficiency.memory."); !s.empty()) e.memory_source = from + ": " + s + "; otherwise " + base_part(e.memory_source);
  for (auto& [family, k] : e.attention)
    if (const std::string s = fitted("efficiency.attention." + family + "."); !s.empty()) k.source = from + ": " + s + "; otherwise " + base_part(k.source);
  for (size_t t = 0; t < hw.tiers.size(); ++t)
    if (const std::string s = fitted(detail::concat("tiers[", t, "] (", hw.tiers[t].name, ").")); !s.empty())
      hw.tiers[t].source = from + ": " + s + "; otherwise " + base_part(hw.tiers[t].source);
  nlohmann::json j = hw.to_json();
  j.erase("gpu"), j.erase("system");  // whole: its parts are written out, not named
  nlohmann::json params = nlohmann::json::array();
  for (const CalibratedParameter& p : c.parameters) {
    nlohmann::json q = {{"name", p.name}, {"base", p.base}, {"value", p.kept ? p.base : p.fitted}, {"samples", p.samples}, {"fitted", !p.kept}};
    if (!p.unit.empty()) q["unit"] = p.unit;
    if (!p.why.empty()) q[p.kept ? "kept_because" : "note"] = p.why;
    if (!p.kept) q["median_error"] = p.median_error, q["worst_error"] = p.worst_error;
    params.push_back(q);
  }
  j["calibration"] = {{"run", run_text}, {"date", date}, {"base", c.hw.name}, {"gpus_per_node", c.gpus_per_node},
                      {"gpus_per_node_from", c.gpus_per_node_source}, {"parameters", params}};
  return j;
}

}  // namespace ringside::model

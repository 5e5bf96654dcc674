// What one op or transfer costs on a profile: the rates of model/efficiency.h applied to a
// traced op, the ring's threshold, and the checks of the model's options.
#include "model/model.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <deque>
#include <functional>
#include <map>
#include <optional>
#include <tuple>

#include <unistd.h>

#include "comm/communicator.h"
#include "core/error.h"
#include "core/json_input.h"
#include "core/output.h"
#include "kernels/cpu/blas.h"
#include "model/fp8.h"

namespace ringside::model {

std::string merge_of(const ModelOptions& o) { return o.merge.empty() ? o.stack.merge : o.merge; }
std::string fp8_recipe_of(const ModelOptions& o) { return o.fp8_recipe.empty() ? o.stack.fp8_recipe : o.fp8_recipe; }
bool tp_comm_overlap_of(const ModelOptions& o) { return o.tp_comm_overlap.value_or(o.stack.tp_comm_overlap); }

trace::ModelingInfo modeling_info(const Hardware& hw, const ModelOptions& o) {
  trace::ModelingInfo m;
  m.dtype = o.dtype, m.efficiency = o.efficiency, m.attention_kernel = attention_kernel_of(hw, o);
  m.stack = o.stack.name, m.merge = merge_of(o), m.fp8_recipe = o.dtype == "fp8" ? fp8_recipe_of(o) : "";
  m.tp_comm_overlap = tp_comm_overlap_of(o), m.grad_reduce_fp32 = o.stack.grad_reduce_fp32;
  m.overlap_grad_reduce = o.overlap_grad_reduce;
  return m;
}

namespace {

// A ring step's merge, per output element and in kernels: the stack's own, or, where --merge
// asks for the other kind than the stack's, the fused kernel's 10 bytes or ring-flash-attention's
// torch ops (38 bytes in 9 kernels).
double merge_bytes(const ModelOptions& o) {
  if (merge_of(o) == o.stack.merge) return o.stack.merge_bytes;
  return merge_of(o) == "fused" ? 10 : 38;
}
int merge_kernels(const ModelOptions& o) {
  if (merge_of(o) == o.stack.merge) return o.stack.merge_kernels;
  return merge_of(o) == "fused" ? 1 : 9;
}

}  // namespace

void check_model_options(const Hardware& hw, const ModelOptions& o) {
  if (o.dtype != "bf16" && o.dtype != "fp32" && o.dtype != "fp8") throw ConfigError("--dtype " + o.dtype + ": bf16, fp32 or fp8");
  if (!o.merge.empty() && o.merge != "fused" && o.merge != "unfused") throw ConfigError("--merge " + o.merge + ": fused or unfused");
  if (!o.fp8_recipe.empty() && !fp8_recipe_known(o.fp8_recipe))
    throw ConfigError("--fp8-recipe " + detail::shown_input(o.fp8_recipe) + ": " + fp8_recipe_names());
  if (o.dtype == "fp8" && fp8_recipe(fp8_recipe_of(o)).blackwell_only && !hw.mxfp8)
    throw ConfigError("--fp8-recipe " + fp8_recipe_of(o) + ": " + hw.name + " has no MXFP8 tensor cores (Blackwell's)" +
                      (o.fp8_recipe.empty() ? " (the recipe of --stack " + o.stack.name + ")" : ""));
  if (o.efficiency != "achieved" && o.efficiency != "ideal")
    throw ConfigError("--efficiency " + o.efficiency + ": achieved or ideal");
  if (o.dtype == "fp8" && hw.peak_flops_fp8 == 0)
    throw ConfigError("--dtype fp8: " + hw.name + " has no FP8 tensor cores (its profile has no peak_flops.fp8)");
  if (o.dtype == "fp8" && o.efficiency == "achieved" && hw.efficiency.present && hw.efficiency.gemm.fp8 == 0)
    throw ConfigError("--dtype fp8: " + hw.name + "'s profile has no achieved FP8 GEMM fraction (efficiency.gemm.fp8)");
  if (!o.fp8_recipe.empty() && o.efficiency == "ideal")
    throw ConfigError("--fp8-recipe " + o.fp8_recipe + " has no effect under --efficiency ideal (the roofline quantizes nothing)");
  if (o.attention_kernel.empty() && o.efficiency == "achieved" && hw.efficiency.present &&
      std::none_of(o.stack.attention_kernels.begin(), o.stack.attention_kernels.end(),
                   [&](const std::string& k) { return hw.efficiency.attention.contains(k); })) {
    std::string wants, have;
    for (const std::string& k : o.stack.attention_kernels) wants += (wants.empty() ? "" : ", ") + k;
    for (const auto& [family, k] : hw.efficiency.attention) have += (have.empty() ? "" : ", ") + family;
    throw ConfigError("--stack " + o.stack.name + " calls " + wants + ", and " + hw.name + " has published rates for none of them (it has " +
                      have + "): give --attention-kernel");
  }
  if (!o.attention_kernel.empty()) {
    if (!attention_family_known(o.attention_kernel))
      throw ConfigError("--attention-kernel " + o.attention_kernel + ": " + attention_family_names());
    if (o.efficiency == "achieved" && hw.efficiency.present && !hw.efficiency.attention.contains(o.attention_kernel)) {
      std::string have;
      for (const auto& [family, k] : hw.efficiency.attention) have += (have.empty() ? "" : ", ") + family;
      throw ConfigError("--attention-kernel " + o.attention_kernel + ": " + hw.name + " has no published rates for it (it has " +
                        have + ")");
    }
  }
}

bool at_roofline(const Hardware& hw, const ModelOptions& o) { return o.efficiency == "ideal" || !hw.efficiency.present; }

std::string attention_kernel_of(const Hardware& hw, const ModelOptions& o) {
  if (at_roofline(hw, o)) return "";
  if (!o.attention_kernel.empty()) return o.attention_kernel;
  if (!hw.efficiency.measured_kernel.empty()) return hw.efficiency.measured_kernel;  // the user's own run's
  for (const std::string& k : o.stack.attention_kernels)
    if (hw.efficiency.attention.contains(k)) return k;
  return hw.efficiency.default_kernel;  // (check_model_options refuses a stack the profile has no rates for)
}

std::string rates_summary(const Hardware& hw, const ModelOptions& o, const std::string& wrap) {
  const bool achieved = !at_roofline(hw, o);
  const Efficiency& e = hw.efficiency;
  // Each tier innermost first: "81% of 450 GB/s + 3 us on NVLink (domains of 8 GPUs)".
  std::string links;
  for (size_t t = 0; t < hw.tiers.size(); ++t) {
    const Tier& tier = hw.tiers[t];
    links += (t == 0 ? "" : ", ") +
             (achieved ? detail::concat(std::lround(100 * tier.efficiency), "% of ", tier.bandwidth / 1e9, " GB/s + ", tier.latency_s * 1e6, " us")
                       : detail::concat(tier.bandwidth / 1e9, " GB/s + ", tier.latency_s * 1e6, " us")) +
             " on " + tier.name + (t + 1 < hw.tiers.size() ? detail::concat(" (domains of ", tier.gpus, tier.gpus == 1 ? " GPU)" : " GPUs)") : "");
  }
  const double peak = hw.peak_flops(o.dtype);
  if (!achieved)
    return detail::concat("ops at ", peak / 1e12, " TFLOP/s or ", hw.memory_bandwidth / 1e9, " GB/s;", wrap, "transfers at ", links,
                          o.efficiency == "ideal" ? " (the roofline: --efficiency ideal)" : " (the roofline: the profile states no efficiency)");
  const std::string fp8 = o.dtype == "fp8" ? "FP8 (" + fp8_recipe_of(o) + " scaling: inputs quantized first) " : "";
  const Stack& st = o.stack;
  const std::string host = st.host_kernel_s > 0 || st.host_comm_s > 0
                               ? detail::concat(", its host ", st.host_kernel_s * 1e6, " us a kernel and ", st.host_comm_s * 1e6, " us a NCCL call")
                               : "";
  return detail::concat("GEMMs up to ", std::lround(100 * e.gemm.of(o.dtype)), "% of ", peak / 1e12, " TFLOP/s ", fp8,
                        "(by shape), attention at ", attention_kernel_of(hw, o),
                        attention_kernel_of(hw, o) == e.measured_kernel ? "'s calibrated rates," : "'s published rates,", wrap, "memory-bound ops at ",
                        std::lround(100 * e.memory_fraction), "% of ", hw.memory_bandwidth / 1e9, " GB/s + ", e.launch_s * 1e6,
                        " us a kernel;", wrap, "transfers at ", links, ";", wrap, "software: ", st.name, " (TP overlap ",
                        tp_comm_overlap_of(o) ? "on" : "off", ", ring merge ", merge_of(o), host, ")");
}

namespace {

// The shapes the traced backend writes into an op's detail ("m=8192 n=6144 k=4096",
// "b=1 sq=4096 sk=8192 H=32 Hkv=8 d=128 causal ..."); false when the trace does not give them.
bool gemm_shape(const std::string& detail, long long& m, long long& n, long long& k) {
  return std::sscanf(detail.c_str(), "m=%lld n=%lld k=%lld", &m, &n, &k) == 3 && m > 0 && n > 0 && k > 0;
}

bool attention_call(const trace::Event& ev, AttentionCall& call) {
  long long b, sq, sk, H, Hkv, d;
  if (std::sscanf(ev.detail.c_str(), "b=%lld sq=%lld sk=%lld H=%lld Hkv=%lld d=%lld", &b, &sq, &sk, &H, &Hkv, &d) != 6 ||
      b <= 0 || sq <= 0 || sk <= 0 || H <= 0 || d <= 0)
    return false;
  call.b = b, call.sq = sq, call.sk = sk, call.H = H, call.d = d;
  call.backward = ev.name == "attention_backward";
  // The visible pairs, from the FLOPs (4 d per pair a head; the backward counts 2.5 forwards).
  const double pairs = ev.flops / (call.backward ? 2.5 : 1.0) / (4.0 * double(d) * double(b) * double(H));
  call.keys_per_query = pairs / double(sq);
  call.masked = pairs < double(sq) * double(sk) - 0.5;
  // A ring step's calls launched as one (schedule_passes.h): that call's shape sets the rate.
  long long call_sq = 0, call_sk = 0;
  double kpq = 0;
  const size_t at = ev.detail.find(" step_call ");
  if (at != std::string::npos && std::sscanf(ev.detail.c_str() + at, " step_call sq=%lld sk=%lld kpq=%lf", &call_sq, &call_sk, &kpq) == 3 &&
      call_sq > 0 && call_sk > 0 && kpq > 0) {
    call.sq = call_sq, call.sk = call_sk, call.keys_per_query = kpq;
    call.masked = kpq < double(call_sk) - 0.5;
  }
  return true;
}

// An FP8 GEMM's quantized input, in elements: the forward's x [m, k] and the data gradient's dy
// [m, k] (model/fp8.h); the weight gradient (a^T) quantizes nothing new. 0 for anything else.
double fp8_quantized_elements(const trace::Event& ev, const ModelOptions& o) {
  if (o.dtype != "fp8" || ev.kind != trace::Kind::gemm) return 0;
  long long m = 0, n = 0, k = 0;
  if (!gemm_shape(ev.detail, m, n, k) || ev.detail.find("a^T") != std::string::npos) return 0;
  // Quantized on its own rank before TP's all-gather (schedule_passes.h): its local rows.
  const size_t at = ev.detail.find(" fp8_input=");
  if (at != std::string::npos) return std::atof(ev.detail.c_str() + at + 11);
  return double(m) * double(k);
}

// SMs an overlapped collective takes from this GEMM chunk ("sms_taken=16" in its detail,
// schedule_passes.h), 0 for any other op.
int sms_taken(const trace::Event& ev) {
  const size_t at = ev.detail.find("sms_taken=");
  return at == std::string::npos ? 0 : std::atoi(ev.detail.c_str() + at + 10);
}

// The type an op runs in: FP8 runs only the GEMMs in FP8 (TransformerEngine's recipe), every
// other op at bf16's rates.
std::string op_dtype(const trace::Event& ev, const ModelOptions& o) {
  return o.dtype == "fp8" && ev.kind != trace::Kind::gemm ? "bf16" : o.dtype;
}

// FLOP/s an attention call reaches at kernel rate `rate` (the bf16 chart's, efficiency.h): under
// the profile's clock and the stack's rate factor; fp32, which no fused attention kernel runs,
// scaled by the peaks. Never above the peak: the head-dim and occupancy terms scale a chart's
// rate, and a chart near the peak would otherwise pass it (efficiency.h).
double attention_flops_per_s(double rate, const Hardware& hw, const ModelOptions& o) {
  const bool fp32 = o.dtype == "fp32";
  const double at = rate * hw.efficiency.clock * o.stack.attention_rate * (fp32 ? hw.peak_flops_fp32 / hw.peak_flops_bf16 : 1.0);
  return std::min(at, fp32 ? hw.peak_flops_fp32 : hw.peak_flops_bf16);
}

}  // namespace

int op_kernels(const trace::Event& ev, const Hardware& hw, const ModelOptions& o) {
  if (ev.stream != trace::Stream::compute || !trace::is_work(ev.kind)) return 0;
  if (ev.detail.find(" launch_shared") != std::string::npos) return 0;  // one call a ring step (schedule_passes.h)
  if (at_roofline(hw, o)) return 1;
  if (ev.sublayer == "attention" && ev.name == "lse_merge" && o.dtype != "fp32") return merge_kernels(o);
  if (fp8_quantized_elements(ev, o) > 0) return 1 + fp8_recipe(fp8_recipe_of(o)).kernels;
  return 1;
}

double op_seconds(const trace::Event& ev, double bytes, const Hardware& hw, const ModelOptions& o) {
  if (ev.stream != trace::Stream::compute || !trace::is_work(ev.kind)) return 0;
  const std::string dtype = op_dtype(ev, o);
  const double peak = hw.peak_flops(dtype);
  const Efficiency& e = hw.efficiency;
  if (at_roofline(hw, o)) return std::max(ev.flops / peak, bytes / hw.memory_bandwidth);
  // Achieved: memory-bound ops at the achievable fraction of HBM; GEMMs and attention at their
  // shape's rate, and never faster than their bytes allow; every kernel pays its launch.
  if (ev.sublayer == "attention" && (ev.name == "lse_merge" || ev.name == "add") && o.dtype != "fp32") {
    // The running output, lse and gradients a ring step merges into are fp32 accumulators in
    // every implementation (ring-flash-attention, TransformerEngine), the block's own in bf16:
    // per element 4 read + 4 written + 2 read, not the 2 + 2 + 2 of a bf16 merge.
    bytes *= 10.0 / 6.0;
    if (ev.name == "lse_merge") bytes *= merge_bytes(o) / 10.0;  // the stack's merge: 38 bytes an element unfused
  }
  const double memory_rate = hw.memory_bandwidth * e.memory_fraction;
  const double memory_s = bytes / memory_rate;
  double compute_s = 0, before_s = 0;
  if (ev.flops > 0 && ev.kind == trace::Kind::gemm) {
    const double mamf = e.gemm.of(dtype);
    long long m = 0, n = 0, k = 0;
    const bool shaped = gemm_shape(ev.detail, m, n, k);
    const int taken = sms_taken(ev);
    double rate = shaped ? gemm_rate(e, peak, mamf, m, n, k) : peak * mamf * e.gemm.sustained;
    if (taken > 0) rate *= double(std::max(1, e.sms - taken)) / double(e.sms);  // the SMs left to it
    if (dtype == "fp8") {
      // Quantizing its input first: memory-bound, at the profile's memory-bound rate (fp8.h).
      const Fp8Recipe& recipe = fp8_recipe(fp8_recipe_of(o));
      rate *= recipe.gemm_rate;
      before_s = fp8_quantized_elements(ev, o) * recipe.input_bytes / memory_rate;
    }
    compute_s = ev.flops / std::min(rate * e.clock, peak);  // a shape's terms never pass the peak
  } else if (ev.flops > 0 && ev.kind == trace::Kind::attention) {
    const AttentionKernel& kernel = e.attention.at(attention_kernel_of(hw, o));
    AttentionCall call;
    double rate = 0;
    if (attention_call(ev, call)) {
      rate = attention_rate(kernel, call, e.sms);
    } else {
      const bool backward = ev.name == "attention_backward";
      rate = (backward ? kernel.backward : kernel.forward).rate;
    }
    compute_s = ev.flops / attention_flops_per_s(rate, hw, o);
  } else if (ev.flops > 0) {
    compute_s = ev.flops / peak;
  }
  return before_s + std::max(compute_s, memory_s) + op_kernels(ev, hw, o) * e.launch_s;
}

void check_op_within_hardware(const trace::Event& ev, double bytes, double seconds, const Hardware& hw, const ModelOptions& o,
                              const std::function<std::string()>& what) {
  constexpr double kSlack = 1 + 1e-9;
  const std::string dtype = op_dtype(ev, o);
  const double peak = hw.peak_flops(dtype);
  auto fail = [&](const char* quantity, double rate, double limit, const char* unit, const std::string& limit_name) {
    throw Error(detail::concat("modeled faster than the hardware (a bug in the model or its profile, not a result): ", what(), " on ",
                               hw.name, " does ", quantity, " at ", rate, " ", unit, " (", ev.flops, " FLOPs, ", bytes,
                               " bytes in ", seconds * 1e6, " us), above ", limit_name, " of ", limit, " ", unit));
  };
  if (ev.flops > 0 && !(seconds > 0)) fail("its FLOPs", INFINITY, peak / 1e12, "TFLOP/s", "the " + dtype + " peak");
  if (ev.flops > 0 && ev.flops / seconds > peak * kSlack) fail("its FLOPs", ev.flops / seconds / 1e12, peak / 1e12, "TFLOP/s", "the " + dtype + " peak");
  if (bytes > 0 && seconds > 0 && bytes / seconds > hw.memory_bandwidth * kSlack)
    fail("its memory traffic", bytes / seconds / 1e9, hw.memory_bandwidth / 1e9, "GB/s", "the memory bandwidth");
}

void check_transfer_within_hardware(double bytes, double seconds, const Tier& link, const Hardware& hw,
                                    const std::function<std::string()>& what) {
  const double line = link.bandwidth;
  if (bytes > 0 && !(seconds > 0 && bytes / seconds <= line * (1 + 1e-9)))
    throw Error(detail::concat("modeled faster than the hardware (a bug in the model or its profile, not a result): ", what(), " on ",
                               hw.name, " moves ", bytes, " bytes in ", seconds * 1e6, " us, ", bytes / seconds / 1e9,
                               " GB/s, above the line rate of ", line / 1e9, " GB/s of ", link.name));
}

double element_bytes(const std::string& dtype) { return dtype == "fp32" ? 4.0 : 2.0; }

RingThreshold ring_threshold(const Hardware& hw, const ModelOptions& o, const Tier& link, double kv_per_q, bool causal) {
  const double B = link.bandwidth;
  const double bytes = element_bytes(o.dtype);  // of K and V
  const double F = hw.peak_flops(o.dtype == "fp32" ? "fp32" : "bf16");
  const double pairs = causal ? 2 : 1;           // a causal step computes half its c x c pairs
  const char* doubling = causal ? "2 " : "";
  if (at_roofline(hw, o)) return {pairs * kv_per_q * F / B * bytes / 2, "F/B", doubling};
  const AttentionCurve& k = hw.efficiency.attention.at(attention_kernel_of(hw, o)).forward;
  const double B_nccl = B * link.efficiency;
  const double R = k.rate * hw.efficiency.clock * F / hw.peak_flops_bf16;  // the kernels' rates are bf16's
  return {std::max(0.0, pairs * kv_per_q * R / B_nccl * bytes / 2 - k.k_half), "R/B_nccl - k_half", doubling};
}

double ring_threshold_with_fixed_costs(const Hardware& hw, const ModelOptions& o, const Tier& link, int64_t b, int64_t H, int64_t Hkv,
                                       int64_t d) {
  if (at_roofline(hw, o)) return ring_threshold(hw, o, link, double(Hkv) / double(H)).tokens;
  const Efficiency& e = hw.efficiency;
  const AttentionKernel& kernel = e.attention.at(attention_kernel_of(hw, o));
  const double bytes = element_bytes(o.dtype);
  // A step of c queries against c keys, unmasked, as the ring's steps after the first.
  auto compute_s = [&](double c) {
    AttentionCall call;
    call.b = b, call.sq = call.sk = int64_t(c), call.H = H, call.d = d, call.keys_per_query = c;
    const double flops = 4.0 * double(b) * c * c * double(H) * double(d);
    const double attention = flops / attention_flops_per_s(attention_rate(kernel, call, e.sms), hw, o);
    // The merge into the fp32 running output: the stack's bytes an output element, its kernels.
    const double merge = double(b) * c * double(H) * double(d) * merge_bytes(o) / (hw.memory_bandwidth * e.memory_fraction);
    return attention + merge + (1 + merge_kernels(o)) * e.launch_s;
  };
  // K and V, two messages, each paying the link's latency.
  auto transfer_s = [&](double c) {
    return 2 * transfer_seconds(double(b) * c * double(Hkv) * double(d) * bytes, link, hw, o);
  };
  if (compute_s(1) >= transfer_s(1)) return 1;
  double lo = 1, hi = 1 << 26;
  if (compute_s(hi) < transfer_s(hi)) return hi;
  while (hi - lo > 0.5) {
    const double mid = (lo + hi) / 2;
    (compute_s(mid) >= transfer_s(mid) ? hi : lo) = mid;
  }
  return hi;
}

double transfer_seconds(double bytes, const Tier& link, const Hardware& hw, const ModelOptions& o) {
  const double efficiency = at_roofline(hw, o) ? 1.0 : link.efficiency;
  return link.latency_s + bytes / (link.bandwidth * efficiency);
}

}  // namespace ringside::model

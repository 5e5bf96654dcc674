#include "parallel/run_plan.h"

#include "core/error.h"
#include "parallel/sharding.h"

namespace ringside {

namespace {

std::string summary_of(const ParallelConfig& par) {
  if (!par.sequence_parallel)
    return "Megatron tensor parallelism without SP: all-reduce after each TP block, every token on every rank";
  const CpScheme& scheme = par.scheme();
  if (scheme.none() || par.tp == 1) return scheme.summary;
  // The innermost group is on neighbouring ranks, which share a node.
  return par.order == RankOrder::tp_cp ? std::string("TP + SP on neighbouring ranks, ") + scheme.group_words + " across the TP groups"
                                       : std::string(scheme.group_words) + " on neighbouring ranks, TP + SP across them";
}


// The layer splits this way on P ranks (resolve's rules before the device's).
void check_split(const ParallelConfig& given, const ParallelConfig& r, const LayerConfig& cfg, int P, const Packing& packing) {
  const int T = r.tp, U = r.a2a_size();
  // "v must be divisible by T x C = 8 (why)", naming only the degrees above 1.
  auto need = [&](int64_t v, const char* what, std::vector<std::pair<const char*, int64_t>> by, const char* why) {
    int64_t product = 1;
    std::string names;
    for (const auto& [n, degree] : by)
      if (degree > 1 || by.size() == 1) product *= degree, names += (names.empty() ? "" : " x ") + std::string(n);
    if (names.empty()) return;
    if (v % product != 0)
      throw ConfigError(detail::concat(given.name(), " with P = ", P, ": ", what, " = ", v, " must be divisible by ", names,
                                       " = ", product, " (", why, ")"));
  };
  need(cfg.H, "heads H", {{"T", T}, {"U", U}},
       U > 1 ? (T > 1 ? "TP splits the heads, and the all-to-all splits each TP rank's heads"
                      : "the all-to-all gives each rank H/U heads")
             : "TP splits the heads");
  need(cfg.Hkv, "kv heads Hkv", {{"T", T}}, "each TP rank computes Hkv/T key/value heads");
  need(cfg.f, "ffn width f", {{"T", T}},
       cfg.mlp == Mlp::swiglu ? "each TP rank holds f/T columns of SwiGLU's gate and of its up"
                              : "each TP rank holds f/T columns of the MLP");
  // The padded sequence must fit where the real one does (BLAS's int, any machine's memory).
  LayerConfig padded = cfg;
  padded.s = packing.S, padded.docs.clear();
  if (padded.s == cfg.s) return;
  try {
    padded.validate();
  } catch (const ConfigError& e) {
    throw ConfigError(detail::concat("the sequence, padded from s = ", cfg.s, " to S = ", padded.s,
                                     " tokens so that every rank's shard is whole: ", e.what()));
  }
}


// The CUDA kernels know the causal mask alone: a run that needs packed documents, a window or
// padding (a length its shards do not divide) is refused, naming why and --device cpu.
void check_device(const ParallelConfig& given, const LayerConfig& cfg, int P, Device device, const Packing& packing) {
  if (device != Device::cuda || !packing.mask()) return;
  const std::string why = cfg.docs.size() > 1 ? "packed documents"
                          : cfg.window > 0    ? "a sliding window"
                                              : detail::concat("s = ", cfg.s, " padded to S = ", packing.S, " for its shards");
  throw ConfigError(detail::concat(given.name(), " with P = ", P, " on --device cuda needs ", why,
                                   ", and the CUDA kernels take no mask but the causal one yet (run with --device cpu)"));
}

}  // namespace

RunPlan resolve(const ParallelConfig& par, const LayerConfig& cfg, int P, Device device) {
  cfg.validate();
  RunPlan plan;
  plan.par = par.resolved(P);
  plan.layer = cfg;
  plan.P = P;
  plan.device = device;
  auto packing = std::make_shared<const Packing>(sequence_packing(plan.par, cfg));
  check_split(par, plan.par, cfg, P, *packing);
  check_device(par, cfg, P, device, *packing);
  plan.name = plan.par.canonical_name();
  plan.summary = summary_of(plan.par);
  plan.layout = shard_layout(plan.par, cfg);
  plan.ring = std::make_shared<const RingLayout>(cp_layout(plan.par, cfg, *packing));
  plan.packing = std::move(packing);
  return plan;
}

RunPlan resolve_one_rank(const LayerConfig& cfg) { return resolve(ParallelConfig{}, cfg, 1); }

std::vector<int64_t> RunPlan::rank_positions(int rank) const { return ringside::rank_positions(par, *ring, rank); }
std::vector<int64_t> RunPlan::cp_positions(int c) const { return ringside::cp_positions(par, *ring, c); }

nlohmann::json config_json(const LayerConfig& cfg, const ParallelConfig& par) {
  nlohmann::json j = cfg.to_json();
  j["layout"] = to_string(par.requested_layout(cfg));
  j["recompute"] = to_string(par.recompute);
  return j;
}

nlohmann::json RunPlan::config_json() const { return ringside::config_json(layer, par); }

const std::vector<ParallelConfig>& strategies() {
  static const std::vector<ParallelConfig> named = {parse_parallel_config("tp-sp"), parse_parallel_config("ring"),
                                                    parse_parallel_config("ulysses"), parse_parallel_config("all-gather")};
  return named;
}

std::vector<ParallelConfig> default_strategies(int P) {
  std::vector<ParallelConfig> all = strategies();
  if (P >= 4 && P % 2 == 0) {
    all.push_back(parse_parallel_config(detail::concat("tp2xring", P / 2)));
    all.push_back(parse_parallel_config(detail::concat("ulysses2xring", P / 2)));
  }
  return all;
}

}  // namespace ringside

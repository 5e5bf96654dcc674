#include "parallel/strategy.h"

#include "core/error.h"
#include "parallel/formulas.h"
#include "parallel/parallel_layer.h"

namespace ringside {

namespace {

std::string summary_of(const ParallelConfig& par) {
  const char* alone = "";  // the context-parallel attention on its own, and as one group of two
  const char* group = "";
  switch (par.cp_comm) {
    case CpComm::none: return "Megatron tensor + sequence parallelism: all-gather / reduce-scatter around the TP blocks";
    case CpComm::p2p:
      alone = "ring attention context parallelism: K/V blocks around a ring, overlapped with compute";
      group = "the K/V ring";
      break;
    case CpComm::all_gather:
      alone = "all-gather context parallelism (Llama 3): gather K/V, attend, reduce-scatter dK/dV";
      group = "all-gather CP";
      break;
    case CpComm::a2a:
      alone = "DeepSpeed-Ulysses: all-to-all from sequence to heads around attention";
      group = "the Ulysses all-to-all";
      break;
    case CpComm::a2a_p2p:
      alone = "Ulysses x ring (USP): the all-to-all inside groups, the K/V ring across them";
      group = "Ulysses x ring";
      break;
  }
  if (par.tp == 1) return alone;
  // The innermost group is on neighbouring ranks, which share a node.
  return par.order == RankOrder::tp_cp ? std::string("TP + SP on neighbouring ranks, ") + group + " across the TP groups"
                                       : std::string(group) + " on neighbouring ranks, TP + SP across them";
}

}  // namespace

Strategy make_strategy(const ParallelConfig& par) { return {par.name(), summary_of(par), par}; }

Strategy find_strategy(const std::string& name) { return make_strategy(parse_parallel_config(name)); }

Strategy resolve_strategy(const Strategy& st, int P) {
  const ParallelConfig par = st.parallel.resolved(P);
  Strategy r = make_strategy(par);
  r.name = par.canonical_name();
  return r;
}

void Strategy::validate(const LayerConfig& cfg, int P, Device device) const {
  validate(cfg, P);
  if (device != Device::cuda) return;
  const Packing packing = sequence_packing(parallel.resolved(P), cfg);
  if (!packing.mask()) return;
  const std::string why = cfg.docs.size() > 1 ? "packed documents"
                          : cfg.window > 0    ? "a sliding window"
                                              : detail::concat("s = ", cfg.s, " padded to S = ", packing.S, " for its shards");
  throw ConfigError(detail::concat(name, " with P = ", P, " on --device cuda needs ", why,
                                   ", and the CUDA kernels take no mask but the causal one yet (run with --device cpu)"));
}

RankResult Strategy::run(const LayerConfig& cfg, Communicator& comm, Backend& be, MemoryTracker& tracker,
                         DType dt) const {
  return parallel_layer_run(parallel, cfg, comm, be, tracker, dt);
}
int64_t Strategy::saved_bytes(const LayerConfig& cfg, int P, int rank, DType dt) const {
  return parallel_saved_bytes(parallel, cfg, P, rank, dt);
}
CommBytes Strategy::comm_bytes(const LayerConfig& cfg, int P, int rank, DType dt) const {
  return parallel_comm_bytes(parallel, cfg, P, rank, dt);
}


const std::vector<Strategy>& strategies() {
  static const std::vector<Strategy> named = {find_strategy("tp-sp"), find_strategy("ring"), find_strategy("ulysses"),
                                              find_strategy("all-gather")};
  return named;
}

std::vector<Strategy> default_strategies(int P) {
  std::vector<Strategy> all = strategies();
  if (P >= 4 && P % 2 == 0) {
    all.push_back(find_strategy(detail::concat("tp2xring", P / 2)));
    all.push_back(find_strategy(detail::concat("ulysses2xring", P / 2)));
  }
  return all;
}

}  // namespace ringside

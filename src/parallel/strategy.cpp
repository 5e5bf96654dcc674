#include "parallel/strategy.h"

namespace ringside {

namespace {

std::string summary_of(const ParallelConfig& par) {
  switch (par.cp_comm) {
    case CpComm::none: return "Megatron tensor + sequence parallelism: all-gather / reduce-scatter around the TP blocks";
    case CpComm::p2p:
      return par.tp == 1 ? "ring attention context parallelism: K/V blocks around a ring, overlapped with compute"
                         : "TP + SP inside, the K/V ring over the context-parallel group for this rank's heads";
    case CpComm::all_gather:
      return par.tp == 1 ? "all-gather context parallelism (Llama 3): gather K/V, attend, reduce-scatter dK/dV"
                         : "TP + SP inside, all-gather context parallelism over the CP group";
    case CpComm::a2a:
      return par.tp == 1 ? "DeepSpeed-Ulysses: all-to-all from sequence to heads around attention"
                         : "TP + SP inside, Ulysses all-to-all over the CP group";
    case CpComm::a2a_p2p: return "Ulysses x ring (USP): all-to-all inside groups, the K/V ring across them";
  }
  return "";
}

}  // namespace

Strategy make_strategy(const ParallelConfig& par) { return {par.name(), summary_of(par), par}; }

Strategy find_strategy(const std::string& name) { return make_strategy(parse_parallel_config(name)); }

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

// Where the GPUs of a job sit, and which links join them: a system's link tiers, innermost first,
// and the one place that answers placement for the replay, the planners and the collectives.
//
//   HGX H100      NVLink: a domain of 8 GPUs (a node), 450 GB/s each way per GPU
//                 InfiniBand: every node, 50 GB/s per GPU (a 400 Gb/s NIC each)
//   GB200 NVL72   NVLink: a domain of 72 GPUs (18 trays of 4), 900 GB/s each way per GPU
//                 InfiniBand: every rack, 50 GB/s per GPU
//
// A job of P GPUs fills each domain of the innermost tier with `segment` of its GPUs, in rank
// order: consecutive ranks share a domain. The segment is the whole domain, or, where the
// domain's size does not divide P and a smaller whole number of allocation units does (trays of
// 4: Slurm's topology/block with --segment, NVIDIA's advice for NVL72), that many, so that every
// domain holds as many of the job's GPUs: 16,384 GPUs on NVL72 racks are 256 racks of 64, not
// 227 racks of 72 and one of 40. Only where neither divides are domains filled in order and the
// last left short: then a group may straddle domains unevenly, which is costed (Span::uneven),
// not refused.
#pragma once
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace ringside::model {

/// One tier of links: the GPUs one domain of it joins and what its links achieve.
struct Tier {
  std::string name;           ///< "NVLink", "InfiniBand": what the reasons and verdicts say
  int gpus = 0;               ///< GPUs in one domain; 0 in the outermost tier: every GPU of the job
  int unit = 0;               ///< GPUs a job is given of a domain at a time (an NVL72's tray of 4); 0: the whole domain
  double bandwidth = 0;       ///< bytes/s per GPU each way, the line rate
  double latency_s = 0;       ///< seconds a message pays before its first byte
  double efficiency = 1;      ///< NCCL's achieved busbw / line rate (the "achieved" model's)
  std::string source;         ///< where the line rate, latency and efficiency come from
  /// An all-reduce inside one domain of this tier reduced in the network (NVLS in an NVLink
  /// switch, SHARP in an InfiniBand switch): its achieved busbw in bytes/s (0: none, a ring).
  double reduction_busbw = 0;
  std::string reduction, reduction_source;  ///< its name and where the busbw comes from
};

/// Parses a profile's "tiers" (innermost first; each {name, gpus (all but the outermost),
/// unit, bandwidth_GBps, latency_us, efficiency, source, in_network {name, all_reduce_busbw_GBps,
/// source}}); throws ConfigError naming the field (prefixed by `source`) for a tier without a
/// name, bandwidth zero or missing, an efficiency outside (0, 1], a domain not larger than the
/// tier's before it or not a whole number of them, a unit that does not divide its domain, a
/// gpus on the outermost tier, or an in-network busbw above twice the line rate (an all-reduce's
/// busbw counts every byte twice: 2 (n-1)/n).
std::vector<Tier> parse_tiers(const nlohmann::json& j, const std::string& source);
/// The tiers in the profile's format (GB/s, us).
nlohmann::json tiers_json(const std::vector<Tier>& tiers);

/// The tiers in a line, innermost first: "NVLink domains of 8 GPUs at 450 GB/s + 3 us, then
/// InfiniBand at 50 GB/s + 5 us" (line rates per GPU each way).
std::string tiers_words(const std::vector<Tier>& tiers);

/// Where a group's members sit: the tiers its links use, and how its collectives split over them.
struct Span {
  int size = 1;
  /// The outermost tier any two members need (0: one domain of the innermost tier holds them all).
  size_t tier = 0;
  /// most[t] and fewest[t]: the group's members in one domain of tier t, over the domains that
  /// hold any (the outermost tier: size). Equal where the span is even.
  std::vector<int> most, fewest;
  /// parts[t]: the most domains of tier t - 1 holding members inside one domain of tier t (the
  /// ring of a hierarchical collective's level t); parts[0] = most[0].
  std::vector<int> parts;
  /// hops[t]: the hops of the ring through the members in order (the last back to the first)
  /// whose link is tier t.
  std::vector<int> hops;
  /// Whether two domains of some tier hold different numbers of the group's members.
  bool uneven = false;
  /// The domains of tier t the group touches, at least (size / most[t]).
  int domains(size_t t) const { return (size + most[t] - 1) / most[t]; }
  /// Whether the group's links leave the innermost tier's domain.
  bool crosses() const { return tier > 0; }
  /// Whether this group's traffic goes further than `o`'s: an outer tier, or as far with more of
  /// its ring's hops there (what a planner costs a dimension by: its widest group).
  bool wider_than(const Span& o) const { return tier != o.tier ? tier > o.tier : hops[tier] > o.hops[o.tier]; }
};

/// A system's tiers as a job of `world` GPUs fills them (the segment rule above).
class Topology {
 public:
  /// Throws ConfigError for no tiers or world < 1.
  Topology(std::vector<Tier> tiers, int world);

  const std::vector<Tier>& tiers() const { return tiers_; }
  int world() const { return world_; }
  /// The job's GPUs in one domain of tier t (the last domain may hold fewer: uneven()); the
  /// outermost tier's: world.
  int domain_gpus(size_t t) const { return used_[t]; }
  /// Whether some domain holds fewer of the job's GPUs than the others.
  bool uneven() const { return uneven_; }
  /// The domain of tier t that GPU `gpu` (0 .. world - 1) sits in.
  int domain_of(int gpu, size_t t) const { return gpu / used_[t]; }

  /// The tier of the link from GPU a to GPU b: the innermost whose domain holds both (a == b: 0).
  size_t link(int a, int b) const;
  /// The span of a group of GPUs, in ring order (at least one; each in 0 .. world - 1, else
  /// ConfigError).
  Span span(const std::vector<int>& members) const;
  /// How the job fills the innermost tier: "NVLink domains of 8", "64 GPUs of each NVLink domain
  /// of 72", "all 64 GPUs in one NVLink domain of 72".
  std::string domain_words() const;

 private:
  std::vector<Tier> tiers_;
  int world_;
  std::vector<int> used_;
  bool uneven_ = false;
};

}  // namespace ringside::model

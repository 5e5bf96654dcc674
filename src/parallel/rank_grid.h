// One rank grid: where every rank sits in every parallel dimension, and so which ranks share a
// group. The one definition of membership: groups.h, the step planner and lesson 8 ask it.
//
// Write the P ranks 0, 1, ..., P-1 out and fold them into a box, one axis a dimension, the
// innermost first. picotron does exactly this in one line,
//   grid = torch.arange(world_size).view(dp_size, pp_size, cp_size, tp_size)
// (picotron/process_group_manager.py: TP innermost, then CP, PP and DP; a view's last axis is
// the fastest), and reads every group off the box: a rank's TP group is the row it sits in, its
// DP group the line through it along the DP axis. Megatron-LM's RankGenerator
// (megatron/core/parallel_state.py) does the same over an order string, innermost first, its
// default "tp-cp-ep-dp-pp"; any order of the names is allowed, and a name left out must have
// size 1 (it goes outermost).
//
// So with the dimensions innermost first, sizes n_0, n_1, ... and strides s_0 = 1,
// s_k = n_0 ... n_(k-1):
//   rank = sum_k x_k s_k,      x_k = rank / s_k % n_k,
// and the group of rank along a set of dimensions is every rank that agrees with it on all the
// others: its members are s_k apart along each dimension k of the set.
//
// Context parallelism is itself two dimensions, a2a (Ulysses' all-to-all, U ranks) inside ring
// (R = C / U ranks), as USP and LoongTrain place them: CP rank c = u + U r, and cp names the pair.
// ringside's layer uses the orders tp-cp (Megatron's, TP innermost) and cp-tp; the step planner
// places PP and DP outside the group, tp-cp-pp-dp (Llama 3's [TP, CP, PP, DP]) or
// tp-cp-dp-pp (Megatron's default without EP). The grid takes any order of tp, cp, pp and dp.
#pragma once
#include <string>
#include <utility>
#include <vector>

#include "parallel/config.h"

namespace ringside {

/// A dimension of the grid. cp is the pair (a2a, ring): its coordinate is c = u + U r, its
/// size U R, its stride a2a's. Under all_gather and the plain ring U = 1 and ring is all of CP.
enum class Dim { tp, cp, a2a, ring, pp, dp };
/// "tp", "cp", "a2a", "ring", "pp", "dp".
const char* to_string(Dim d);

/// The degree of each dimension; 1 for a dimension the configuration does not split.
struct GridSizes {
  int tp = 1;
  int a2a = 1;   ///< U, inside CP
  int ring = 1;  ///< R = C / U, CP's outer part
  int pp = 1, dp = 1;
  /// A resolved configuration's T, U = a2a_size() and C / U, with PP and DP around the group.
  static GridSizes of(const ParallelConfig& par, int pp = 1, int dp = 1);
};

/// P = T U R PP DP ranks in a box (see the file comment). Immutable; cheap to copy.
class RankGrid {
 public:
  /// `order`: the names tp, cp, pp and dp joined by '-', innermost first, each at most once
  /// ("tp-cp", "cp-tp-dp-pp"); a name left out must have size 1 and goes outermost (Megatron's
  /// rule). Throws ConfigError for an unknown or repeated name, a left-out name of size > 1, a
  /// size < 1 or more than kMaxRanks ranks.
  RankGrid(const GridSizes& sizes, const std::string& order);
  /// The layer's grid of a resolved configuration: T, U and R in its order (tp-cp or cp-tp).
  static RankGrid of(const ParallelConfig& par);

  /// P, the number of ranks.
  int world() const { return world_; }
  /// The order, innermost first, every name spelled: "tp-cp-pp-dp".
  std::string order() const;
  /// The dimension's degree (cp: U R).
  int size(Dim d) const;
  /// How many ranks apart neighbouring members of the dimension's groups are (cp: a2a's).
  int stride(Dim d) const;
  /// The coordinate of world rank `rank` on the dimension, 0 .. size(d) - 1 (cp: u + U r).
  /// Throws Error for a rank outside 0 .. P-1.
  int coord(int rank, Dim d) const;
  /// The world rank at the given coordinates, the dimensions not named at 0. Throws Error for a
  /// coordinate out of its range or a dimension named twice (cp and a2a or ring overlap).
  int rank_at(const std::vector<std::pair<Dim, int>>& at) const;
  /// The world rank holding, in this grid, the coordinates that `rank` holds in `from` (the same
  /// sizes in another order: where a rank of a tp-cp run sits under cp-tp). Throws Error when
  /// the sizes differ.
  int rank_at(const RankGrid& from, int rank) const;

  /// Every group along the dimensions `dims` ({Dim::tp}, {Dim::cp, Dim::dp}): the ranks that
  /// agree on every other dimension. Each group in group order (a member's index is its
  /// coordinate on `dims`, innermost dimension fastest), the groups in order of their first
  /// member; together they hold every rank once. Throws Error for overlapping dimensions.
  std::vector<std::vector<int>> groups(const std::vector<Dim>& dims) const;
  /// Where `rank` sits in its group along `dims`, as MPI_Comm_split takes it: (color, key) =
  /// (the group's first member, the rank's index in the group).
  std::pair<int, int> color_key(int rank, const std::vector<Dim>& dims) const;

 private:
  // The dimensions as they are laid out: tp, a2a, ring, pp, dp (cp is a2a and ring), innermost
  // first, each with its size and stride.
  struct Axis {
    Dim dim;
    int size, stride;
  };
  std::vector<Axis> axes_;
  int world_ = 1;
  const Axis& axis(Dim d) const;
  // The axes a dimension covers, innermost first: cp's a2a and ring, any other itself.
  std::vector<const Axis*> parts(Dim d) const;
};

}  // namespace ringside

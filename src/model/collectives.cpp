#include "model/collectives.h"

#include <algorithm>

#include "core/error.h"

namespace ringside::model {

GroupSpan group_span(int size, int stride, int gpus_per_node) {
  if (size < 1 || stride < 1 || gpus_per_node < 1)
    throw ConfigError(detail::concat("group_span: size ", size, ", stride ", stride, " and G = ", gpus_per_node,
                                     " must each be >= 1"));
  if (gpus_per_node % stride != 0 && stride % gpus_per_node != 0)
    throw ConfigError(detail::concat("group_span: members ", stride, " ranks apart on nodes of ", gpus_per_node,
                                     " GPUs sit unevenly (one must divide the other)"));
  GroupSpan span{size, stride >= gpus_per_node ? 1 : std::min(size, gpus_per_node / stride)};
  if (size % span.per_node != 0)
    throw ConfigError(detail::concat("group_span: ", size, " ranks do not fill nodes of ", span.per_node, " members"));
  return span;
}

namespace {

// One ring of n ranks on one kind of link: (n - 1) steps of S / n bytes; twice for all-reduce.
double ring_seconds(Collective kind, double bytes, int n, bool same_node, const Hardware& hw, const ModelOptions& o) {
  if (n <= 1) return 0;
  const double steps = (kind == Collective::all_reduce ? 2.0 : 1.0) * (n - 1);
  return steps * transfer_seconds(bytes / n, same_node, hw, o);
}

}  // namespace

double collective_seconds(Collective kind, double bytes, const GroupSpan& span, const Hardware& hw, const ModelOptions& o) {
  const int k = span.per_node, across = span.nodes();
  if (across == 1) return ring_seconds(kind, bytes, k, true, hw, o);
  // Inside each node on the whole buffer, then across nodes on each GPU's 1/k of it.
  const double inside = ring_seconds(Collective::reduce_scatter, bytes, k, true, hw, o);
  const double outside = ring_seconds(kind, bytes / k, across, false, hw, o);
  return kind == Collective::all_reduce ? 2 * inside + outside : inside + outside;
}

double inter_node_bytes(Collective kind, double bytes, const GroupSpan& span) {
  const int across = span.nodes();
  if (across == 1) return 0;
  const double once = double(across - 1) / across * bytes / span.per_node;
  return kind == Collective::all_reduce ? 2 * once : once;
}

}  // namespace ringside::model

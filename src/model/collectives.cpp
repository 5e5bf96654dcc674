#include "model/collectives.h"

#include <algorithm>

#include "core/error.h"

namespace ringside::model {

namespace {

// One ring of n ranks on one tier's links: (n - 1) steps of S / n bytes; twice for all-reduce.
double ring_seconds(Collective kind, double bytes, int n, const Tier& link, const Hardware& hw, const ModelOptions& o) {
  if (n <= 1) return 0;
  const double steps = (kind == Collective::all_reduce ? 2.0 : 1.0) * (n - 1);
  return steps * transfer_seconds(bytes / n, link, hw, o);
}

// The level-l step of a hierarchical collective: the ring's members (the members inside one
// innermost domain at l = 0; above, the domains of tier l - 1 inside one of tier l) and the
// bytes each member holds (S divided by the fewest members below).
struct Level {
  int ring = 1;
  double share = 1;  // of S
};

Level level(const Span& span, size_t l) {
  if (l == 0) return {span.most[0], 1.0};
  return {span.parts[l], 1.0 / span.fewest[l - 1]};
}

}  // namespace

double collective_seconds(Collective kind, double bytes, const Span& span, const Hardware& hw, const ModelOptions& o) {
  if (span.size <= 1) return 0;
  const size_t top = span.tier;
  double seconds = 0;
  for (size_t l = 0; l <= top; ++l) {
    const Level at = level(span, l);
    const Tier& link = hw.tiers[l];
    if (l < top)
      seconds += (kind == Collective::all_reduce ? 2 : 1) * ring_seconds(Collective::reduce_scatter, bytes * at.share, at.ring, link, hw, o);
    else if (kind == Collective::all_reduce && link.reduction_busbw > 0 && at.ring > 1 && !at_roofline(hw, o))
      seconds += link.latency_s + 2.0 * (at.ring - 1) / at.ring * bytes * at.share / link.reduction_busbw;  // in the network
    else
      seconds += ring_seconds(kind, bytes * at.share, at.ring, link, hw, o);
  }
  return seconds;
}

double tier_bytes(Collective kind, double bytes, const Span& span, size_t tier) {
  if (span.size <= 1 || tier > span.tier) return 0;
  const Level at = level(span, tier);
  if (at.ring <= 1) return 0;
  const double once = double(at.ring - 1) / at.ring * bytes * at.share;
  return kind == Collective::all_reduce ? 2 * once : once;
}

}  // namespace ringside::model

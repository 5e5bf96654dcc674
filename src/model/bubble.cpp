// The bubble's parts (bubble.h): the same pipeline simulated without each cause in turn.
#include "model/bubble.h"

#include <cmath>
#include <iomanip>

#include "core/error.h"
#include "core/units.h"

namespace ringside::model {

BubbleParts bubble_parts(const StepConfig& c, const LayerCost& layer, const EndsCost& ends, const Hardware& hw,
                         const ModelOptions& o) {
  BubbleParts b;
  b.pp = c.pp, b.vp = c.vp, b.microbatches = c.microbatches, b.layers = c.layers;
  const std::vector<int> layers = stage_layers(c.layers, c.pp);
  for (int n : layers) b.short_stages += n < full_stage_layers(layers, c.vp) ? 1 : 0;
  b.chunk_s = full_stage_layers(layers, c.vp) / c.vp * (layer.forward_s + layer.backward_s);
  b.embedding_s = ends.embedding_forward_s + ends.embedding_backward_s;
  b.head_s = ends.head_forward_s + ends.head_backward_s;
  if (c.pp == 1) return b;  // one stage: no bubble
  PipelineSpec modeled = pipeline_spec(c, layer, ends, hw, o);
  b.bubble = pipeline_times(modeled).bubble_fraction();
  modeled.p2p_s = 0;
  const double free_links = pipeline_times(modeled).bubble_fraction();
  PipelineSpec bare = pipeline_spec(c, layer, EndsCost{}, hw, o);
  bare.p2p_s = 0;
  const double bare_stages = pipeline_times(bare).bubble_fraction();
  b.formula = double(c.pp - 1) / (double(c.microbatches) * c.vp);
  b.uneven_layers = bare_stages - b.formula;
  b.ends = free_links - bare_stages;
  b.transfers = b.bubble - free_links;
  return b;
}

namespace {

std::string percent(double f) { return detail::concat(std::fixed, std::setprecision(1), 100 * f, "%"); }

}  // namespace

std::string bubble_words(const BubbleParts& b) {
  if (b.pp == 1) return "no pipeline (PP = 1), no bubble";
  const std::string formula = detail::concat("the formula (PP-1)/(m VP) = ", b.pp - 1, "/(", b.microbatches, " x ", b.vp, ") = ",
                                             percent(b.formula));
  std::vector<std::string> parts;
  auto part = [&parts](double f, const std::string& why) {
    if (std::abs(f) >= 0.0005) parts.push_back(percent(f) + " from " + why);
  };
  part(b.uneven_layers, detail::concat(b.short_stages == 2 ? "the first and last stages" : "the last stage", " one layer short (L = ",
                                       b.layers, " on PP ", b.pp, ")"));
  std::string ends_words;
  if (b.head_s > 0 && b.embedding_s > 0)
    ends_words = "the LM head and loss on the last stage and the embedding on the first (" + format_ns(1e9 * b.head_s) + " and " +
                 format_ns(1e9 * b.embedding_s) + " a microbatch";
  else
    ends_words = "the " + std::string(b.head_s > 0 ? "LM head and loss on the last stage" : "embedding on the first stage") + " (" +
                 format_ns(1e9 * (b.head_s > 0 ? b.head_s : b.embedding_s)) + " a microbatch";
  part(b.ends, ends_words + ", forward and backward, against a chunk's " + format_ns(1e9 * b.chunk_s) + ")");
  part(b.transfers, "the transfers between stages");
  std::string text = "bubble " + percent(b.bubble) + ": " + formula;
  if (parts.empty()) return text + ", equal stages with the transfers hidden";
  const double rest = b.bubble - b.formula;
  text += detail::concat(", and ", percent(std::abs(rest)), rest >= 0 ? " more" : " less", ": ");
  for (size_t i = 0; i < parts.size(); ++i) text += (i ? ", " : "") + parts[i];
  return text;
}

}  // namespace ringside::model

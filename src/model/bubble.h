// The pipeline bubble against its formula: a simulated step's bubble (model/pipeline.h) is the
// paper's (PP - 1) / (m VP) only when the virtual stages are equal and the transfers between
// them take no time (Narayanan et al. 2021, 2.2.2). What the step adds to it is measured here by
// simulating the same pipeline again without each cause in turn, not guessed:
//   formula         (PP - 1) / (m VP)
//   uneven layers   the pipeline without the ends and without transfer time, less the formula:
//                   the first and last stages one layer short (Llama 3's rule, step.h)
//   ends            the pipeline without transfer time, less the one without the ends: the
//                   embedding on the first virtual stage, the LM head and loss on the last
//                   (under ZeRO 3 with their weights' gathers)
//   transfers       the pipeline as modeled, less the one without transfer time: the
//                   activations and their gradients sent between stages
// The four add up to the bubble exactly; each is a fraction of its own pipeline's ideal time
// (the busiest rank's work), as PipelineRun::bubble_fraction counts it.
#pragma once
#include <string>

#include "model/step.h"

namespace ringside::model {

struct BubbleParts {
  int pp = 1, vp = 1, microbatches = 1;
  double bubble = 0;         ///< the modeled pipeline's (StepCost::bubble_fraction)
  double formula = 0;        ///< (PP - 1) / (m VP)
  double uneven_layers = 0;  ///< the short first and last stages' part
  double ends = 0;           ///< the embedding's and the LM head's part
  double transfers = 0;      ///< the transfers' part
  /// Per microbatch, forward + backward: a full chunk's layers, the embedding, the LM head and loss.
  double chunk_s = 0, embedding_s = 0, head_s = 0;
  int layers = 1;            ///< L
  int short_stages = 0;      ///< stages one layer short (0, 1 or 2)
};

/// The bubble of the step that `c`, `layer` and `ends` make on `hw` under `o` (pipeline_spec's),
/// in the parts above. Throws ConfigError as pipeline_spec does.
BubbleParts bubble_parts(const StepConfig& c, const LayerCost& layer, const EndsCost& ends, const Hardware& hw,
                         const ModelOptions& o);

/// The parts in words: "bubble 12.3%: the formula (PP-1)/(m VP) = 3/(16 x 5) = 3.8%, and 8.5%
/// more: 7.9% from the LM head and loss on the last stage (4.10 ms a microbatch against a
/// chunk's 20.3 ms), 0.6% from the transfers between stages"; a part under 0.05% is left out,
/// and where none is left, the bubble is the formula's. PP = 1: "no pipeline (PP = 1), no bubble".
std::string bubble_words(const BubbleParts& b);

}  // namespace ringside::model

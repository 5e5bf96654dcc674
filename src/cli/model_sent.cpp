// `ringside model`'s bytes by class and, with --gbs, the bubble against its formula: the lines
// and JSON of model/bytes_sent.h and model/bubble.h.
#include <cstdio>

#include "cli/commands.h"
#include "cli/format.h"
#include "model/model.h"

namespace ringside::cli {

void print_layer_bytes_sent(const RunPlan& plan, const std::string& dtype, const std::vector<RunRecord>& results) {
  const std::vector<model::SentClass> classes = model::layer_bytes_sent(plan, dtype);
  if (classes.empty()) return std::printf("  sent       nothing: one rank\n"), void();
  // The dry run's own count, rank by rank, against the formulas' sum.
  const double scale = model::element_bytes(dtype) / 4;
  std::string check = "the dry run counted the same, rank by rank";
  for (size_t r = 0; r < results.size(); ++r) {
    const CommBytes f = parallel_comm_bytes(plan, int(r), DType::f32);
    const int64_t counted = results[r].forward.bytes_sent + results[r].backward.bytes_sent;
    if (counted != f.forward + f.backward) {
      check = "the dry run counted " + format_bytes(scale * double(counted)) + " on rank " + std::to_string(r) + ", the formulas " +
              format_bytes(scale * double(f.forward + f.backward));
      break;
    }
  }
  std::printf("  sent       bytes per layer by class, %s (parallel/formulas.h; %s):\n", dtype.c_str(), check.c_str());
  const std::string all = "all " + std::to_string(plan.P) + " ranks";
  std::printf("             %-34s %11s %11s %13s %13s\n", "", "forward", "backward", "most a rank", all.c_str());
  for (const model::SentClass& s : classes)
    std::printf("             %-34s %11s %11s %13s %13s\n", s.what.c_str(), s.forward < 0 ? "" : format_bytes(s.forward).c_str(),
                s.backward < 0 ? "" : format_bytes(s.backward).c_str(), format_bytes(s.most).c_str(), format_bytes(s.all).c_str());
  std::printf("             (forward, backward: the most any rank sends in the phase; most a rank: in both)\n");
}

void print_step_sent_and_bubble(const model::BubbleParts& bubble, const std::vector<model::SentClass>& sent) {
  if (bubble.pp > 1) std::printf("    %s\n", model::bubble_words(bubble).c_str());
  if (sent.empty()) return;
  std::printf("    sent a step, the most a GPU sends of each class (of the busiest stage):\n");
  for (const model::SentClass& s : sent) std::printf("      %-66s %12s\n", s.what.c_str(), format_bytes(s.most).c_str());
}

nlohmann::json bytes_sent_json(const std::vector<model::SentClass>& classes) {
  nlohmann::json j = nlohmann::json::array();
  for (const model::SentClass& s : classes) {
    nlohmann::json c = {{"class", s.what}, {"most_bytes", s.most}};
    if (s.forward >= 0) c["forward_most_bytes"] = s.forward;
    if (s.backward >= 0) c["backward_most_bytes"] = s.backward;
    if (s.all >= 0) c["all_ranks_bytes"] = s.all;
    j.push_back(c);
  }
  return j;
}

nlohmann::json bubble_json(const model::BubbleParts& b) {
  return {{"bubble", b.bubble}, {"formula", b.formula}, {"uneven_layers", b.uneven_layers}, {"ends", b.ends},
          {"transfers", b.transfers}, {"words", model::bubble_words(b)}};
}

}  // namespace ringside::cli

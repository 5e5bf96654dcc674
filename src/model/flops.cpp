#include "model/flops.h"

namespace ringside::model {

double model_flops_per_token(const LayerConfig& c, int layers, int64_t vocab, bool causal_halved) {
  const double h = double(c.h), d = double(c.d());
  const double gemms = 2 * (h * double(c.qkv_width()) + double(c.H) * d * h + h * double(c.fc1_width()) + double(c.f) * h);
  const double attention = 4 * double(c.s) * double(c.H) * d * (causal_halved && c.causal ? 0.5 : 1.0);
  const double head = 2 * h * double(vocab);
  return 3 * (layers * (gemms + attention) + head);
}

const char* to_string(FlopCount c) {
  return c == FlopCount::causal_halved ? "causal" : c == FlopCount::whole ? "whole" : "whole+recompute";
}

bool parse_flop_count(const std::string& text, FlopCount& c) {
  for (FlopCount k : {FlopCount::causal_halved, FlopCount::whole, FlopCount::whole_with_recompute})
    if (text == to_string(k)) return c = k, true;
  return false;
}

double flops_per_token_counted(const LayerConfig& c, int layers, int64_t vocab, FlopCount count) {
  const double all = model_flops_per_token(c, layers, vocab, count == FlopCount::causal_halved);
  if (count != FlopCount::whole_with_recompute) return all;
  const double head = 3 * 2 * double(c.h) * double(vocab);
  return head + (all - head) * 4.0 / 3.0;
}

double mfu(double tokens_per_s_per_gpu, double flops_per_token, double peak_flops) {
  return tokens_per_s_per_gpu * flops_per_token / peak_flops;
}

}  // namespace ringside::model

#include "model/flops.h"

#include <algorithm>
#include <cstdio>

namespace ringside::model {

namespace {

// sum over i in [0, n) of min(i, m): the keys before query i that a reach of m keeps.
double sum_min(double n, double m) { return m >= n - 1 ? n * (n - 1) / 2 : m * (m + 1) / 2 + (n - 1 - m) * m; }

// Pairs of one document of n tokens under cfg's causal flag and window.
double document_pairs(const LayerConfig& c, double n) {
  const double reach = c.window > 0 ? double(c.window) - 1 : n;  // keys before (and after) a query it sees
  return n + (c.causal ? 1 : 2) * sum_min(n, reach);
}

}  // namespace

double attention_pairs(const LayerConfig& c) {
  const double s = double(c.s);
  if (!c.masked()) return c.causal ? s * s / 2 : s * s;  // FlashAttention's count: s^2 / 2, not s (s + 1) / 2
  if (c.docs.size() <= 1) return document_pairs(c, s);
  double pairs = 0;
  for (int64_t n : c.docs) pairs += document_pairs(c, double(n));
  return pairs;
}

std::string attention_count_text(const LayerConfig& c) {
  if (!c.masked()) return c.causal ? "attention causally halved (FlashAttention's count)" : "attention whole (no mask)";
  std::string what = c.causal ? "causal" : "non-causal";
  if (c.docs.size() > 1) what += ", " + std::to_string(c.docs.size()) + " packed documents";
  if (c.window > 0) what += ", a window of " + std::to_string(c.window) + " keys";
  return "attention as its mask leaves it (" + what + "): the pairs it keeps, counted exactly";
}

std::string mfu_counts_text(const LayerConfig& c, const std::string& dtype) {
  return "the model's FLOPs with the LM head over the " + dtype + " peak, " + attention_count_text(c);
}

std::string whole_count_note(const LayerConfig& c, int layers, int64_t vocab, const std::vector<double>& mfus) {
  const double ratio = model_flops_per_token(c, layers, vocab, false) / model_flops_per_token(c, layers, vocab, true);
  if (mfus.empty() || ratio < 1 + 1e-6) return "";
  const double best = ratio * *std::max_element(mfus.begin(), mfus.end());
  const auto over = std::count_if(mfus.begin(), mfus.end(), [ratio](double m) { return ratio * m > 1; });
  char buf[256];
  std::snprintf(buf, sizeof buf, "counted whole (PaLM's and Megatron's convention: %.2fx these FLOPs), ", ratio);
  std::string text = buf;
  if (over == 0) {
    std::snprintf(buf, sizeof buf, "the best would read %.1f%%; no row passes 100%% either way", 100 * best);
  } else {
    std::snprintf(buf, sizeof buf, "%lld of the %zu rows would read over 100%% (up to %.1f%%): work no kernel does", (long long)over,
                  mfus.size(), 100 * best);
  }
  return text + buf;
}

double model_flops_per_token(const LayerConfig& c, int layers, int64_t vocab, bool as_masked) {
  const double h = double(c.h), d = double(c.d());
  const double gemms = 2 * (h * double(c.qkv_width()) + double(c.H) * d * h + h * double(c.fc1_width()) + double(c.f) * h);
  const double s = double(c.s);
  const double attention = 4 * double(c.H) * d * (as_masked ? attention_pairs(c) : s * s) / s;
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

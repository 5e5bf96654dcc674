// LayerConfig: the shape and switches of the one transformer layer every strategy runs.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace ringside {

/// How context parallelism (ring attention) maps global tokens to ranks. Automatic: zigzag
/// when causal (balanced work), contiguous otherwise.
/// zigzag_per_doc and greedy balance packed documents (parallel/packing.h): each document is
/// cut into 2R chunks, as TransformerEngine's THD format does; zigzag_per_doc gives rank r
/// chunks r and 2R-1-r of every document, greedy gives each rank two chunks of every document,
/// chosen by their work.
enum class Layout { automatic, contiguous, zigzag, striped, zigzag_per_doc, greedy };
/// Every layout a run can take (automatic resolves to one of them).
inline constexpr Layout kLayouts[] = {Layout::contiguous, Layout::zigzag, Layout::striped, Layout::zigzag_per_doc,
                                      Layout::greedy};
/// "auto", "contiguous", "zigzag", "striped", "zigzag-per-doc", "greedy"; parse throws
/// ConfigError on anything else.
const char* to_string(Layout l);
Layout parse_layout(const std::string& s);

/// Activation recomputation, as Megatron-LM names its granularities (--recompute-granularity;
/// Korthikanti et al. 2022): what the forward keeps for the backward and what the backward
/// computes again.
///   none       keep every activation the backward reads (x, h1, x2, h2, the LayerNorm
///              statistics, u, GeLU(u), and attention's inputs, output and lse)
///   selective  keep x, x2 and u and the attention's; recompute both LayerNorms and the GeLU in
///              the backward. Megatron's selective recomputes the attention core (the s x s
///              softmax and its dropout), the largest and cheapest part; blockwise attention
///              already never stores it (the backward recomputes it from lse), so what is left
///              that is large and cheap is the LayerNorm outputs and GeLU(u): 2 h + f elements
///              a token for a few elementwise passes, like Megatron-Core's recompute_modules
///              "layernorm" and its activation recompute.
///   full       keep only the layer's input x (Korthikanti's 2 s b h bytes in 16-bit, s b h
///              elements); the backward runs the forward again, its communication included.
enum class Recompute { none, selective, full };
/// "none", "selective", "full"; parse throws ConfigError on anything else.
const char* to_string(Recompute r);
Recompute parse_recompute(const std::string& s);

/// Where RoPE puts a token of a packed sequence: at its index in its document (what packed
/// training does: every document starts at position 0), or at its index in the sequence.
enum class RopePositions { document, global };
/// "document", "global"; parse throws ConfigError on anything else.
const char* to_string(RopePositions r);
RopePositions parse_rope_positions(const std::string& s);

/// The layer's normalisation: LayerNorm (Ba et al. 2016: mean and variance, gamma and beta; GPT)
/// or RMSNorm (Zhang & Sennrich 2019: the root mean square alone, gamma only; Llama, Qwen, Mistral).
enum class Norm { layernorm, rmsnorm };
/// The MLP: GeLU, GeLU(x W1) W2 with W1 [h, f] (GPT); or SwiGLU (Shazeer 2020), (SiLU(x Wg) * x Wu) Wd
/// with three h x f matrices (Llama), gate and up held fused as one W1 [h, 2f] (columns [gate | up],
/// Megatron-Core's linear_fc1 under gated_linear_unit).
enum class Mlp { gelu, swiglu };
/// "layernorm", "rmsnorm"; "gelu", "swiglu". parse throws ConfigError on anything else.
const char* to_string(Norm n);
Norm parse_norm(const std::string& s);
const char* to_string(Mlp m);
Mlp parse_mlp(const std::string& s);

/// The document lengths --docs names: "700,2000,299,1097" (the lengths, in order) or
/// "random:N" (N random lengths >= 1 summing to s: N - 1 distinct cut points drawn uniformly
/// from [1, s - 1] by a SplitMix64 stream of `seed`, the same on every machine). Throws
/// ConfigError for a malformed list, a length that is not a positive integer, or N outside [1, s].
/// (That the lengths sum to s is LayerConfig::validate's rule.)
std::vector<int64_t> parse_docs(const std::string& spec, int64_t s, uint64_t seed);

/// b batch, s sequence, h hidden, H query heads, Hkv key/value heads (GQA), f FFN width;
/// d = h / H is the head dimension. Defaults are the CLI's.
struct LayerConfig {
  int64_t b = 1;
  int64_t s = 4096;
  int64_t h = 512;
  int64_t H = 8;
  int64_t Hkv = 4;
  int64_t f = 2048;
  bool causal = true;
  bool rope = true;
  double dropout = 0.1;  ///< p, the probability of dropping an element
  uint64_t seed = 1234;
  Norm norm = Norm::layernorm;
  Mlp mlp = Mlp::gelu;
  /// Biases on the linear layers (qkv, o, fc1, fc2; Megatron's --disable-bias-linear clears it).
  /// A LayerNorm keeps its beta either way; RMSNorm has none.
  bool bias = true;
  double eps = 1e-5;            ///< the norm's epsilon
  double rope_theta = 10000.0;  ///< RoPE base
  /// Packed documents: their lengths, in order, summing to s (FlashAttention's varlen
  /// cu_seqlens are their prefix sums). Empty: the sequence is one document. A query sees only
  /// keys of its own document.
  std::vector<int64_t> docs;
  int64_t window = 0;  ///< sliding window W: a query sees its W most recent keys (0: no window)
  RopePositions rope_positions = RopePositions::document;  ///< RoPE's positions in a packed sequence

  /// Whether attention needs more than the causal (or full) mask: documents or a window.
  bool masked() const { return docs.size() > 1 || window > 0; }

  int64_t d() const { return h / H; }
  /// b * s, the number of tokens N.
  int64_t tokens() const { return b * s; }
  /// Columns of the fused QKV projection: (H + 2 Hkv) d.
  int64_t qkv_width() const { return (H + 2 * Hkv) * d(); }
  /// Columns of W1: f (GeLU) or 2 f (SwiGLU: gate and up).
  int64_t fc1_width() const { return mlp == Mlp::swiglu ? 2 * f : f; }
  /// Each norm's parameters: 2 h (LayerNorm's gamma and beta) or h (RMSNorm's gamma).
  int64_t norm_params() const { return norm == Norm::layernorm ? 2 * h : h; }
  /// Each norm's saved statistics per token: 2 (LayerNorm's mean and rstd) or 1 (RMSNorm's rstd).
  int64_t norm_stats() const { return norm == Norm::layernorm ? 2 : 1; }
  /// The parameters of the whole layer: h qkv_width + H d h + h fc1_width + f h (the GEMMs),
  /// 2 norm_params, and with biases qkv_width + fc1_width + 2 h.
  int64_t param_count() const;
  /// 1 / sqrt(d).
  double softmax_scale() const;

  /// Throws ringside::ConfigError with a message naming the broken rule: any size < 1, b s or
  /// h or f past 2^31 - 1 (BLAS's int), over 1e15 activation elements or parameters, h % H != 0, H % Hkv != 0, an odd d with RoPE, dropout
  /// outside [0, 1) (or above 1 - 2^-18, where the 24-bit mask misstates 1 - p by over 1%), eps <= 0,
  /// documents that do not sum to s or of length < 1, a window < 0.
  void validate() const;

  /// {"b":..,"s":..,"h":..,"H":..,"Hkv":..,"f":..,"norm":..,"mlp":..,"bias":..,"causal":..,"rope":..,"dropout":..,
  /// "seed":..,"eps":..,"rope_theta":..},
  /// and "docs", "window", "rope_positions" when the sequence is packed or windowed. (A run's
  /// configuration adds its layout and recomputation: config_json in parallel/run_plan.h.)
  nlohmann::json to_json() const;
  /// One line: "b=1 s=4096 h=512 H=8 Hkv=4 d=64 f=2048 layernorm gelu causal rope dropout=0.1 seed=1234"
  /// (" no-bias" after the MLP when the linear layers have none), and
  /// " recompute=full" (or selective) when the run recomputes, " docs=7" (their count) and
  /// " window=512" when given.
  std::string summary(Recompute recompute = Recompute::none) const;
};

}  // namespace ringside

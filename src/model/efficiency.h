// What real GPUs achieve: the model's rates for a GEMM, an attention call, a memory-bound op and
// a transfer, each a simple, explained function of the shape, with its parameters in the profile
// (src/model/hardware/*.json, "efficiency") and their sources beside them.
//
//   GEMM        peak x mamf x waves(m, n) x k / (k + k_half), normalised to 1 at mamf's best shape
//               (mamf: the maximum achievable matmul fraction, stas00/ml-engineering's MAMF table;
//               waves: tiles / (ceil(tiles / SMs) x SMs) of 128 x 128 output tiles)
//   attention   R x e / (e + k_half) x head_dim(d) x occupancy, per kernel family (fa2, fa3,
//               fa4, cudnn), direction and mask: e is the keys a query sees in this call (sk unmasked,
//               about sk / 2 for a causal square), so a short ring block pays the short-sequence
//               rate. occupancy = min(1, fill(x) / fill(x_chart)), fill(x) = x / (x + a): x is the
//               call's 128-row tiles per SM (queries forward, keys backward; b H of them a row),
//               x_chart the same for the charts' setup (2048 tiles), and a the tiles per SM at
//               which a call runs at half its full-GPU rate, per direction and mask: a few heads or
//               a short block leave SMs idle, and a causal call's heavy tiles finish last (the
//               list-scheduling bound, makespan <= work / SMs + the largest tile, gives a = 1 for
//               equal tiles, 2 for a causal triangle's). A masked call never runs faster than an
//               unmasked one of the same keys a query sees. R and k_half are minimax fits (the
//               smallest worst error) to the published charts at the charts' own occupancy
//               (scripts/fit_attention.py; docs/calibration.md C, F); the a's are fitted to
//               ring-flash-attention's 5-head calls (`ringside validate`).
//   memory-bound   bytes / (HBM bandwidth x memory_fraction)
//   every kernel   + launch_us (the fixed cost of a launch and its tail)
//   transfer    latency + bytes / (line rate x link efficiency): the alpha-beta model, whose
//               bandwidth bytes / time rises with the message size to line x efficiency
//               (NCCL's measured busbw over the link's line rate, nccl-tests issues)
//
// Ideal (--efficiency ideal) is the roofline of datasheet peaks: op = max(FLOPs / peak,
// bytes / HBM), transfer = latency + bytes / line rate.
#pragma once
#include <array>
#include <map>
#include <string>

#include <nlohmann/json.hpp>

namespace ringside::model {

/// One kernel family's rate for one direction and mask: R x e / (e + k_half).
struct AttentionCurve {
  double rate = 0;    ///< FLOP/s a long block reaches (e -> infinity), at head dim 128
  double k_half = 0;  ///< keys per query at which the call runs at half of `rate`
  /// FLOP/s for a call whose queries see `keys_per_query` keys each, on average.
  double at(double keys_per_query) const { return rate * keys_per_query / (keys_per_query + k_half); }
};

/// The attention kernel families a profile gives rates for and a stack calls: FlashAttention 2
/// (Ampere on), FlashAttention 3 (Hopper), FlashAttention 4 (Blackwell, flash_attn.cute) and cuDNN's
/// fused attention.
inline constexpr std::array<const char*, 4> kAttentionFamilies = {"fa2", "fa3", "fa4", "cudnn"};
/// Whether `family` is one of kAttentionFamilies.
bool attention_family_known(const std::string& family);
/// "fa2, fa3, fa4 or cudnn", for messages.
std::string attention_family_names();

/// An attention kernel family on one GPU (FlashAttention 2, 3 or 4, cuDNN).
struct AttentionKernel {
  AttentionCurve forward, forward_causal, backward, backward_causal;
  double d_half = 0;  ///< head-dim term d / (d + d_half), relative to d = 128
  /// a of the occupancy term, by direction and mask: tiles per SM at half the full-GPU rate.
  double occupancy_forward_masked = 2, occupancy_forward_unmasked = 1, occupancy_backward_masked = 2,
         occupancy_backward_unmasked = 1;
  std::string source, occupancy_source;
};

/// Tiles of 128 rows in FlashAttention's benchmark setup (b x s = 16K tokens, 16 heads of d 128),
/// at which the published charts, and so R and k_half, were measured.
inline constexpr double kChartTiles = 2048;

/// The occupancy term of an attention call of `tiles` 128-row tiles (b H ceil(rows / 128)) on
/// `sms` SMs for the parameter a: in (0, 1].
double attention_occupancy(double tiles, int sms, double a);

/// The achieved fractions of a profile, with their sources. Absent from a profile: the roofline.
struct Efficiency {
  bool present = false;
  int sms = 0;  ///< streaming multiprocessors: the waves of a GEMM, the fill of an attention call
  struct {
    double bf16 = 0, fp8 = 0, fp32 = 0;  ///< MAMF / peak, per element type (fp8 0: none)
    /// The fraction for a --dtype: bf16, fp32 or fp8.
    double of(const std::string& dtype) const { return dtype == "fp32" ? fp32 : dtype == "fp8" ? fp8 : bf16; }
    int64_t best_m = 0, best_n = 0, best_k = 0;  ///< the shape MAMF was measured at (the rate is exact there)
    double k_half = 0;
    /// The fraction of that rate a whole training step sustains (a fitted parameter; 1: all).
    double sustained = 1;
    std::string source;
  } gemm;
  std::map<std::string, AttentionKernel> attention;  ///< by family: fa2, fa3, fa4, cudnn
  std::string default_kernel;                        ///< the best this GPU runs
  /// The family a calibrated profile measured (`ringside calibrate`: the user's software runs it,
  /// so it is modeled unless --attention-kernel says otherwise); "" for a published profile.
  std::string measured_kernel;
  /// The clock a power limit leaves of the datasheet's: every compute-bound rate (GEMM,
  /// attention) runs at this fraction of what the rest of the profile says (1: none).
  double clock = 1;
  std::string clock_source;
  double memory_fraction = 1, launch_s = 0;
  std::string memory_source;
};

/// Parses a profile's "efficiency" object (every fraction in (0, 1], every source a non-empty
/// string); throws ConfigError naming the field, prefixed by `source`.
Efficiency parse_efficiency(const nlohmann::json& j, const std::string& source);
nlohmann::json efficiency_json(const Efficiency& e);

/// The wave term of an m x n output on `sms` SMs in 128 x 128 tiles: tiles / (waves x SMs), in (0, 1].
double gemm_waves(int64_t m, int64_t n, int sms);
/// FLOP/s of an m x n x k GEMM at `peak` FLOP/s with MAMF fraction `mamf` (the formula above).
double gemm_rate(const Efficiency& e, double peak, double mamf, int64_t m, int64_t n, int64_t k);

/// An attention call as the model sees it: its queries, its keys a query sees on average, its
/// heads and head dim, and whether a mask cuts it (a causal block on the diagonal; a block wholly
/// visible runs the unmasked kernel, as ring-flash-attention calls it with causal=False).
struct AttentionCall {
  int64_t b = 1, sq = 0, sk = 0, H = 1, d = 128;
  double keys_per_query = 0;
  bool masked = false, backward = false;
};
/// FLOP/s of `call` (bf16) under `kernel` on `sms` SMs: the formula above.
double attention_rate(const AttentionKernel& kernel, const AttentionCall& call, int sms);

}  // namespace ringside::model

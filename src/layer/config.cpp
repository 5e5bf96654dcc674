#include "layer/config.h"

#include <algorithm>
#include <cmath>
#include <set>
#include <sstream>

#include "core/error.h"

namespace ringside {

const char* to_string(Layout l) {
  switch (l) {
    case Layout::automatic: return "auto";
    case Layout::contiguous: return "contiguous";
    case Layout::zigzag: return "zigzag";
    case Layout::striped: return "striped";
    case Layout::zigzag_per_doc: return "zigzag-per-doc";
    case Layout::greedy: return "greedy";
  }
  return "?";
}

Layout parse_layout(const std::string& s) {
  for (Layout l : {Layout::automatic, Layout::contiguous, Layout::zigzag, Layout::striped, Layout::zigzag_per_doc,
                   Layout::greedy})
    if (s == to_string(l)) return l;
  throw ConfigError("unknown layout '" + s + "' (contiguous, zigzag, striped, zigzag-per-doc, greedy or auto)");
}

const char* to_string(Recompute r) {
  switch (r) {
    case Recompute::none: return "none";
    case Recompute::selective: return "selective";
    case Recompute::full: return "full";
  }
  return "?";
}

Recompute parse_recompute(const std::string& s) {
  for (Recompute r : {Recompute::none, Recompute::selective, Recompute::full})
    if (s == to_string(r)) return r;
  throw ConfigError("unknown recompute mode '" + s + "' (none, selective or full)");
}

const char* to_string(Norm n) { return n == Norm::layernorm ? "layernorm" : "rmsnorm"; }

Norm parse_norm(const std::string& s) {
  if (s == "layernorm") return Norm::layernorm;
  if (s == "rmsnorm") return Norm::rmsnorm;
  throw ConfigError("unknown norm '" + detail::shown_input(s) + "' (layernorm or rmsnorm)");
}

const char* to_string(Mlp m) { return m == Mlp::gelu ? "gelu" : "swiglu"; }

Mlp parse_mlp(const std::string& s) {
  if (s == "gelu") return Mlp::gelu;
  if (s == "swiglu") return Mlp::swiglu;
  throw ConfigError("unknown MLP '" + detail::shown_input(s) + "' (gelu or swiglu)");
}

int64_t LayerConfig::param_count() const {
  const int64_t gemms = h * qkv_width() + H * d() * h + h * fc1_width() + f * h;
  return gemms + 2 * norm_params() + (bias ? qkv_width() + fc1_width() + 2 * h : 0);
}

const char* to_string(RopePositions r) { return r == RopePositions::document ? "document" : "global"; }

RopePositions parse_rope_positions(const std::string& s) {
  if (s == "document") return RopePositions::document;
  if (s == "global") return RopePositions::global;
  throw ConfigError("unknown RoPE positions '" + s + "' (document: each document from 0; global: the sequence's)");
}

std::vector<int64_t> parse_docs(const std::string& spec, int64_t s, uint64_t seed) {
  const std::string shown = detail::shown_input(spec, 48);
  // A positive decimal integer (a leading zero is decimal); one past s, whatever its size, is
  // too many tokens or documents: `fits` says which.
  auto integer = [&](const std::string& v, const char* what, const char* fits) {
    const bool digits = !v.empty() && std::all_of(v.begin(), v.end(), [](char ch) { return ch >= '0' && ch <= '9'; });
    const std::string significant = digits ? v.substr(std::min(v.find_first_not_of('0'), v.size())) : "";
    if (!digits || significant.empty())
      throw ConfigError(detail::concat("--docs '", shown, "': ", what, " must be a positive integer, got '",
                                       detail::shown_input(v, 24), "'"));
    if (significant.size() > 18 || std::stoll(significant) > s)
      throw ConfigError(detail::concat("--docs '", shown, "': ", detail::shown_input(significant, 24), fits, s));
    return int64_t(std::stoll(significant));
  };
  if (spec.rfind("random:", 0) == 0) {
    const int64_t n =
        integer(spec.substr(7), "the number of documents", " documents of at least one token each do not fit in s = ");
    // N - 1 distinct cut points in [1, s - 1] (Floyd's sampling), from SplitMix64.
    uint64_t state = seed ^ 0x9e3779b97f4a7c15ull;
    auto next = [&state] {
      uint64_t z = (state += 0x9e3779b97f4a7c15ull);
      z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
      z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
      return z ^ (z >> 31);
    };
    std::vector<int64_t> cuts;
    std::set<int64_t> chosen;
    for (int64_t j = s - n; j < s - 1; ++j) {  // choose n - 1 of the s - 1 points 1 .. s - 1
      const int64_t pick = 1 + int64_t(next() % uint64_t(j + 1));
      chosen.insert(chosen.count(pick) ? j + 1 : pick);
    }
    std::vector<int64_t> lengths;
    int64_t at = 0;
    for (int64_t cut : chosen) lengths.push_back(cut - at), at = cut;
    lengths.push_back(s - at);
    return lengths;
  }
  std::vector<int64_t> lengths;
  for (size_t at = 0;;) {
    const size_t comma = spec.find(',', at);
    lengths.push_back(integer(spec.substr(at, comma == std::string::npos ? std::string::npos : comma - at), "each length",
                              " tokens is longer than the sequence, s = "));
    if (comma == std::string::npos) break;
    at = comma + 1;
  }
  return lengths;
}

double LayerConfig::softmax_scale() const { return 1.0 / std::sqrt(static_cast<double>(d())); }

namespace {
std::string num(double v) {
  std::ostringstream os;
  os.precision(10);  // 0.99999997, not 1
  os << v;
  return os.str();
}
}  // namespace

void LayerConfig::validate() const {
  auto fail = [](const std::string& why) { throw ConfigError("invalid layer config: " + why); };
  auto positive = [&](int64_t v, const char* name) {
    if (v < 1) fail(std::string(name) + " must be >= 1, got " + std::to_string(v));
  };
  positive(b, "batch b");
  positive(s, "sequence length s");
  positive(h, "hidden h");
  positive(H, "heads H");
  positive(Hkv, "kv heads Hkv");
  positive(f, "ffn width f");
  // GEMM dimensions go to BLAS as 32-bit ints, and every tensor's element count must fit in
  // int64 with room to spare: reject sizes past either before anything is allocated.
  constexpr int64_t kMaxDim = 2147483647;
  if (b > kMaxDim / s) fail("b * s = " + num(double(b) * double(s)) + " tokens exceeds 2^31 - 1 (BLAS's int)");
  const char* F = mlp == Mlp::swiglu ? "2f" : "f";  // W1's width: SwiGLU's gate and up in one GEMM
  if (h > kMaxDim || fc1_width() > kMaxDim)
    fail(detail::concat("h and ", F, " must be below 2^31 (BLAS's int)", mlp == Mlp::swiglu ? ": SwiGLU's W1 is [h, 2f]" : ""));
  // The widest activation: the QKV projection's (at most 3h) or W1's output. (3h stays far
  // below 2^31 wherever the weights' bound below holds.)
  const double widest = double(std::max(3 * h, fc1_width()));
  if (double(b) * double(s) * widest > 1e15)
    fail(detail::concat("b * s * max(3h, ", F, ") = ", num(double(b) * double(s) * widest),
                        " elements is beyond any machine (1e15)"));
  // The weights too: h (3h + 2f) parameters (h (3h + 3f) with SwiGLU), whose bytes a memory
  // tracker counts in int64.
  const double mlp_matrices = mlp == Mlp::swiglu ? 3.0 : 2.0;
  if (double(h) * (3.0 * double(h) + mlp_matrices * double(f)) > 1e15)
    fail(detail::concat("h (3h + ", mlp_matrices, "f) = ", num(double(h) * (3.0 * double(h) + mlp_matrices * double(f))),
                        " parameters is beyond any machine"));
  if (h % H != 0) fail("hidden h (" + std::to_string(h) + ") must be divisible by heads H (" + std::to_string(H) + ")");
  if (H % Hkv != 0)
    fail("heads H (" + std::to_string(H) + ") must be a multiple of kv heads Hkv (" + std::to_string(Hkv) + ")");
  if (rope && d() % 2 != 0)
    fail("RoPE needs an even head dim d = h / H, got d = " + std::to_string(d()) + " (or pass --no-rope)");
  if (!(dropout >= 0 && dropout < 1)) fail("dropout p must be in [0, 1), got " + num(dropout));
  // The keep test compares 24 random bits with round(p 2^24), so the mask keeps 1 - p only to
  // within 2^-25, while the survivors are scaled by exactly 1 / (1 - p). Near 1 that error is
  // no longer small: at p = 0.99999997 the mask keeps twice what p says (and, on any layer
  // this machine runs, drops every element). Past 1 - 2^-18 it would exceed 1% of 1 - p.
  if (dropout > 1.0 - 0x1p-18)
    fail("dropout p = " + num(dropout) + " is too near 1 for the mask's 24-bit resolution, which draws 1 - p only to " +
         "within 2^-25 (p <= 1 - 2^-18 = 0.999996)");
  if (!(eps > 0)) fail("the norm's eps must be > 0");
  if (!(rope_theta > 0)) fail("RoPE theta must be > 0");
  if (!docs.empty()) {
    int64_t sum = 0;
    for (size_t i = 0; i < docs.size(); ++i) {
      if (docs[i] < 1)
        fail(detail::concat("document ", i, " has length ", docs[i], "; every document needs at least one token"));
      if (docs[i] > s - sum)
        fail(detail::concat("the documents sum past s = ", s, " (document ", i, ", of ", docs[i], " tokens, starts at token ",
                            sum, ")"));
      sum += docs[i];
    }
    if (sum != s)
      fail(detail::concat("the ", docs.size(), " documents sum to ", sum, " tokens, not s = ", s,
                          " (packed documents fill the sequence)"));
  }
  if (window < 0) fail(detail::concat("the sliding window must be >= 1 (0: none), got ", window));
}

nlohmann::json LayerConfig::to_json() const {
  nlohmann::json j = {{"b", b},           {"s", s},           {"h", h},       {"H", H},       {"Hkv", Hkv}, {"f", f},
          {"norm", to_string(norm)}, {"mlp", to_string(mlp)}, {"bias", bias},
          {"causal", causal}, {"rope", rope},     {"dropout", dropout}, {"seed", seed}, {"eps", eps},
          {"rope_theta", rope_theta}};
  if (!docs.empty()) j["docs"] = docs, j["rope_positions"] = to_string(rope_positions);
  if (window > 0) j["window"] = window;
  return j;
}

std::string LayerConfig::summary(Recompute recompute) const {
  std::ostringstream os;
  os << "b=" << b << " s=" << s << " h=" << h << " H=" << H << " Hkv=" << Hkv << " d=" << (H ? h / H : 0)
     << " f=" << f << " " << to_string(norm) << " " << to_string(mlp) << (bias ? "" : " no-bias")
     << (causal ? " causal" : " full") << (rope ? " rope" : " no-rope") << " dropout=" << dropout
     << " seed=" << seed;
  if (recompute != Recompute::none) os << " recompute=" << to_string(recompute);
  if (!docs.empty()) os << " docs=" << docs.size();
  if (!docs.empty() && rope_positions == RopePositions::global) os << " rope-positions=global";
  if (window > 0) os << " window=" << window;
  return os.str();
}

}  // namespace ringside

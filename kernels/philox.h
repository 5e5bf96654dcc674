// Counter-based random numbers (Philox4x32-10, Salmon et al. SC'11, through Random123), shared
// by the CPU kernels, the weight initialisation and (later) the CUDA kernels, which must draw
// the very same bits. A number is a pure function of (seed, site, index): no state, so a token's
// dropout mask is the same whichever rank holds it and in whatever order it is computed.
#pragma once
#include <Random123/philox.h>

#include <cstdint>

#if defined(__CUDACC__)
#define RS_HOST_DEVICE __host__ __device__
#else
#define RS_HOST_DEVICE
#endif

namespace ringside {

/// Sites: independent streams under one seed. Dropout sites are the two dropouts of the layer.
enum class RngSite : uint32_t {
  dropout1 = 1,  ///< after the attention output projection
  dropout2 = 2,  ///< after the MLP
  weights = 0x100,  ///< + parameter id (see layer/weights.cpp)
  input_x = 0x200,
  input_dout = 0x201,
};

/// The random words of features 4g .. 4g+3 of `token` at a dropout site: one Philox call with
/// counter (g, token low, token high, site) and key (seed low, seed high).
RS_HOST_DEVICE inline r123::Philox4x32::ctr_type dropout_bits4(uint64_t seed, uint32_t site, uint64_t token,
                                                               uint64_t group) {
  r123::Philox4x32 rng;
  r123::Philox4x32::ctr_type ctr = {{static_cast<uint32_t>(group), static_cast<uint32_t>(token),
                                     static_cast<uint32_t>(token >> 32), site}};
  r123::Philox4x32::key_type key = {{static_cast<uint32_t>(seed), static_cast<uint32_t>(seed >> 32)}};
  return rng(ctr, key);
}

/// The 32 random bits for (token, feature): word feature % 4 of dropout_bits4(..., feature / 4).
RS_HOST_DEVICE inline uint32_t dropout_bits(uint64_t seed, uint32_t site, uint64_t token, uint64_t feature) {
  return dropout_bits4(seed, site, token, feature >> 2)[feature & 3];
}

/// Dropout keeps an element when the top 24 bits of its random word are >= this threshold,
/// so P(drop) = threshold / 2^24 = p to within 2^-25. Integer comparison makes the mask exact
/// on every device. Requires 0 <= p < 1.
RS_HOST_DEVICE inline uint32_t dropout_threshold(double p) {
  return static_cast<uint32_t>(p * 16777216.0 + 0.5);
}

RS_HOST_DEVICE inline bool dropout_keep(uint64_t seed, uint32_t site, uint64_t token, uint64_t feature,
                                        uint32_t threshold) {
  return (dropout_bits(seed, site, token, feature) >> 8) >= threshold;
}

/// A uniform number in (0, 1) with 24 random bits, element `index` of stream (seed, site):
/// counter (index / 4 low, index / 4 high, 0, site), word index % 4.
RS_HOST_DEVICE inline float philox_uniform(uint64_t seed, uint32_t site, uint64_t index) {
  r123::Philox4x32 rng;
  const uint64_t c = index >> 2;
  r123::Philox4x32::ctr_type ctr = {{static_cast<uint32_t>(c), static_cast<uint32_t>(c >> 32), 0u, site}};
  r123::Philox4x32::key_type key = {{static_cast<uint32_t>(seed), static_cast<uint32_t>(seed >> 32)}};
  const uint32_t bits = rng(ctr, key)[index & 3];
  return (static_cast<float>(bits >> 8) + 0.5f) * (1.0f / 16777216.0f);
}

}  // namespace ringside

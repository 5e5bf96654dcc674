// Dropout and the Philox stream behind it.
#include <catch2/catch.hpp>

#include <cmath>
#include <numeric>
#include <vector>

#include "kernels/cpu/ops.h"
#include "kernels/cpu/vec.h"
#include "kernels/philox.h"

namespace kc = ringside::kernels::cpu;

TEST_CASE("Random123's Philox4x32-10 reproduces the known-answer vectors", "[dropout][philox]") {
  // Random123 tests/kat_vectors, the three "philox4x32 10" lines: counter, key, result.
  struct Kat {
    r123::Philox4x32::ctr_type ctr;
    r123::Philox4x32::key_type key;
    r123::Philox4x32::ctr_type out;
  };
  const Kat kats[] = {
      {{{0, 0, 0, 0}}, {{0, 0}}, {{0x6627e8d5, 0xe169c58d, 0xbc57ac4c, 0x9b00dbd8}}},
      {{{0xffffffff, 0xffffffff, 0xffffffff, 0xffffffff}},
       {{0xffffffff, 0xffffffff}},
       {{0x408f276d, 0x41c83b0e, 0xa20bc7c6, 0x6d5451fd}}},
      {{{0x243f6a88, 0x85a308d3, 0x13198a2e, 0x03707344}},
       {{0xa4093822, 0x299f31d0}},
       {{0xd16cfe09, 0x94fdcceb, 0x5001e420, 0x24126ea1}}},
  };
  r123::Philox4x32 rng;
  for (const Kat& k : kats) REQUIRE(rng(k.ctr, k.key) == k.out);
}

TEST_CASE("the vectorised Philox of a row gives dropout_bits4's words bit for bit", "[dropout][philox]") {
  for (uint64_t token : {uint64_t{0}, uint64_t{4095}, uint64_t{1} << 33, ~uint64_t{0}})
    for (uint64_t seed : {uint64_t{1234}, uint64_t{0xDEADBEEFCAFEF00D}}) {
      std::vector<uint32_t> words(4 * 37);
      kc::dropout_words(seed, 2, token, 37, words.data());
      for (int64_t g = 0; g < 37; ++g) {
        const auto ref = ringside::dropout_bits4(seed, 2, token, uint64_t(g));
        for (int w = 0; w < 4; ++w) REQUIRE(words[4 * g + w] == ref[w]);
      }
    }
}

TEST_CASE("a dropout mask depends on seed and site and token and feature only", "[dropout]") {
  const int64_t b = 2, s = 64, h = 24;
  std::vector<int64_t> all(s);
  std::iota(all.begin(), all.end(), 0);
  std::vector<float> full(b * s * h);
  kc::dropout_mask(full.data(), b, s, h, all.data(), s, 0.3, 99, 1);

  // A shard holding the tokens at `pos` (global positions) gets exactly their rows of `full`.
  auto check_shard = [&](const std::vector<int64_t>& pos) {
    std::vector<float> part(b * pos.size() * h);
    kc::dropout_mask(part.data(), b, int64_t(pos.size()), h, pos.data(), s, 0.3, 99, 1);
    for (int64_t bi = 0; bi < b; ++bi)
      for (size_t t = 0; t < pos.size(); ++t)
        for (int64_t j = 0; j < h; ++j) REQUIRE(part[(bi * pos.size() + t) * h + j] == full[(bi * s + pos[t]) * h + j]);
  };
  SECTION("a contiguous shard at an offset") { check_shard({20, 21, 22, 23, 24, 25, 26}); }
  SECTION("a strided (striped) shard") { check_shard({3, 7, 11, 15, 19}); }
  SECTION("a two-chunk (zigzag) shard") { check_shard({8, 9, 54, 55}); }
  SECTION("another seed or site gives another mask") {
    std::vector<float> other(full.size());
    kc::dropout_mask(other.data(), b, s, h, all.data(), s, 0.3, 100, 1);
    REQUIRE(other != full);
    kc::dropout_mask(other.data(), b, s, h, all.data(), s, 0.3, 99, 2);
    REQUIRE(other != full);
  }
  SECTION("the batch row is part of the token index") {
    bool differ = false;
    for (int64_t i = 0; i < s * h; ++i) differ |= full[i] != full[s * h + i];
    REQUIRE(differ);
  }
}

TEST_CASE("the fraction dropped is p within 4 sigma and kept values are scaled by 1/(1-p)", "[dropout]") {
  const int64_t b = 1, s = 1024, h = 1024, n = b * s * h;
  std::vector<int64_t> pos(s);
  std::iota(pos.begin(), pos.end(), 0);
  for (double p : {0.1, 0.5, 0.9}) {
    std::vector<float> x(n, 1.0f), y(n);
    kc::dropout_forward(x.data(), y.data(), b, s, h, pos.data(), s, p, 1234, 1);
    int64_t dropped = 0;
    const float kept = static_cast<float>(1.0 / (1.0 - p));
    for (float v : y) {
      if (v == 0.0f) ++dropped;
      else REQUIRE(v == kept);
    }
    const double sigma = std::sqrt(n * p * (1 - p));
    INFO("p = " << p << ", dropped " << dropped << " of " << n);
    REQUIRE(std::abs(dropped - n * p) < 4 * sigma);
  }
}

TEST_CASE("dropout with p = 0 is the identity and p outside 0..1 is an error", "[dropout]") {
  const int64_t pos = 0;
  std::vector<double> x = {1.5, -2.0, 3.25}, y(3);
  kc::dropout_forward(x.data(), y.data(), 1, 1, 3, &pos, 1, 0.0, 1, 1);
  REQUIRE(y == x);
  REQUIRE_THROWS_WITH(kc::dropout_forward(x.data(), y.data(), 1, 1, 3, &pos, 1, 1.0, 1, 1), Catch::Contains("[0, 1)"));
  REQUIRE_THROWS_WITH(kc::dropout_forward(x.data(), y.data(), 1, 1, 3, &pos, 1, -0.1, 1, 1), Catch::Contains("[0, 1)"));
}

TEST_CASE("dropout forward and backward use the same mask", "[dropout]") {
  const int64_t s = 16, h = 8;
  std::vector<int64_t> pos(s);
  std::iota(pos.begin(), pos.end(), 100);
  std::vector<double> x(s * h), y(s * h), mask(s * h);
  for (size_t i = 0; i < x.size(); ++i) x[i] = 0.25 * double(i) - 3;
  kc::dropout_forward(x.data(), y.data(), 1, s, h, pos.data(), 200, 0.25, 5, 2);
  kc::dropout_mask(mask.data(), 1, s, h, pos.data(), 200, 0.25, 5, 2);
  const double scale = 1.0 / (1.0 - 0.25);  // kept values are multiplied by 1 / (1 - p)
  for (size_t i = 0; i < x.size(); ++i) REQUIRE(y[i] == x[i] * mask[i] * scale);
}

TEST_CASE("the kernel's mask is dropout_keep of the documented key and counter", "[dropout][philox]") {
  // The CUDA kernels must draw the same bits: pin the CPU kernel to the definition in
  // kernels/philox.h, including a width h that is not a multiple of 4.
  const int64_t b = 2, s = 5, h = 7, s_global = 40;
  const std::vector<int64_t> pos = {3, 9, 10, 22, 39};
  const uint64_t seed = 0x123456789abcdefULL;
  std::vector<float> mask(b * s * h);
  kc::dropout_mask(mask.data(), b, s, h, pos.data(), s_global, 0.4, seed, 2);
  const uint32_t threshold = ringside::dropout_threshold(0.4);
  REQUIRE(threshold == 6710886);  // round(0.4 * 2^24)
  int64_t kept = 0;
  for (int64_t bi = 0; bi < b; ++bi)
    for (int64_t t = 0; t < s; ++t)
      for (int64_t j = 0; j < h; ++j) {
        const bool keep = ringside::dropout_keep(seed, 2, uint64_t(bi * s_global + pos[t]), uint64_t(j), threshold);
        REQUIRE(mask[(bi * s + t) * h + j] == (keep ? 1.0f : 0.0f));
        kept += keep;
      }
  REQUIRE(kept > 0);
  REQUIRE(kept < b * s * h);
}

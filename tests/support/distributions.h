// Test support: deterministic row generators for codec conformance tests, covering the
// distributions that matter for quantizers (weight-like, uniform, heavy tails, degenerate).
#pragma once

#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <random>
#include <string>
#include <vector>

namespace gguf::testing {

// GGUF_TEST_SEED: unset or 0 keeps the fixed fixtures; any other value is a salt mixed into
// every generator below (and, through salted(), into the conformance tests' own generators),
// so each run with a new salt draws fresh data. Failure messages name it (salt_note()).
inline uint64_t test_salt() {
  static const uint64_t salt = [] {
    const char* env = std::getenv("GGUF_TEST_SEED");
    return env ? std::strtoull(env, nullptr, 10) : uint64_t{0};
  }();
  return salt;
}

// seed itself without a salt, else seed and salt mixed (splitmix64's finaliser).
inline uint64_t salted(uint64_t seed) {
  if (test_salt() == 0) return seed;
  uint64_t z = seed + test_salt() * 0x9E3779B97F4A7C15ull;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

// For failure messages: how to draw the same data again.
inline std::string salt_note() { return " [GGUF_TEST_SEED=" + std::to_string(test_salt()) + "]"; }

// A seed the salt leaves alone, for tests that assert values depending on the data.
struct Fixed {
  uint64_t seed;
};

enum class Dist {
  kGaussian,     // weight-like N(0, 0.02)
  kUniform,      // U(-1, 1)
  kHeavyTail,    // Student-t-like with occasional large outliers
  kZero,         // all zeros
  kConstant,     // one repeated value per row
  kTiny,         // magnitudes around 1e-30 (subnormal territory for f16 scales)
  kHuge,         // magnitudes around 1e4..1e6
  kSingleSpike,  // zeros/small noise with one huge value per row
  kPositive,     // all-positive (asymmetric; exercises min/offset paths)
};

inline const std::vector<Dist>& all_dists() {
  static const std::vector<Dist> v = {Dist::kGaussian, Dist::kUniform,     Dist::kHeavyTail,
                                      Dist::kZero,     Dist::kConstant,    Dist::kTiny,
                                      Dist::kHuge,     Dist::kSingleSpike, Dist::kPositive};
  return v;
}

inline std::string dist_name(Dist d) {
  switch (d) {
    case Dist::kGaussian:
      return "gaussian";
    case Dist::kUniform:
      return "uniform";
    case Dist::kHeavyTail:
      return "heavy_tail";
    case Dist::kZero:
      return "zero";
    case Dist::kConstant:
      return "constant";
    case Dist::kTiny:
      return "tiny";
    case Dist::kHuge:
      return "huge";
    case Dist::kSingleSpike:
      return "single_spike";
    case Dist::kPositive:
      return "positive";
  }
  return "?";
}

// nrows x n_per_row floats drawn from d, deterministic in seed.
inline std::vector<float> make_rows(Dist d, int64_t nrows, int64_t n_per_row, Fixed seed) {
  std::mt19937_64 rng(seed.seed * 0x9E3779B97F4A7C15ull + static_cast<uint64_t>(d));
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::uniform_real_distribution<float> uni(-1.0f, 1.0f);
  std::vector<float> v(static_cast<size_t>(nrows * n_per_row));
  for (int64_t r = 0; r < nrows; ++r) {
    float* row = v.data() + r * n_per_row;
    const float c = uni(rng) * 3.0f;
    const int64_t spike = n_per_row > 0 ? static_cast<int64_t>(rng() % n_per_row) : 0;
    for (int64_t i = 0; i < n_per_row; ++i) {
      float x = 0;
      switch (d) {
        case Dist::kGaussian:
          x = 0.02f * normal(rng);
          break;
        case Dist::kUniform:
          x = uni(rng);
          break;
        case Dist::kHeavyTail: {
          const float g = normal(rng);
          const float u = std::abs(uni(rng)) + 1e-3f;
          x = g / std::sqrt(u);
          if (rng() % 97 == 0) x *= 50.0f;
          break;
        }
        case Dist::kZero:
          x = 0.0f;
          break;
        case Dist::kConstant:
          x = c;
          break;
        case Dist::kTiny:
          x = 1e-30f * normal(rng);
          break;
        case Dist::kHuge:
          x = std::pow(10.0f, 4.0f + 2.0f * std::abs(uni(rng))) * uni(rng);
          break;
        case Dist::kSingleSpike:
          x = (i == spike) ? 1e6f : 0.01f * normal(rng);
          break;
        case Dist::kPositive:
          x = std::abs(normal(rng)) + 0.5f;
          break;
      }
      row[i] = x;
    }
  }
  return v;
}

inline std::vector<float> make_rows(Dist d, int64_t nrows, int64_t n_per_row, uint64_t seed) {
  return make_rows(d, nrows, n_per_row, Fixed{salted(seed)});
}

// Positive importance weights of n columns (some near zero, some large).
inline std::vector<float> make_importance(int64_t n, Fixed seed) {
  std::mt19937_64 rng(seed.seed ^ 0xA5A5A5A5ull);
  std::exponential_distribution<float> ex(1.0f);
  std::vector<float> w(static_cast<size_t>(n));
  for (auto& x : w) x = ex(rng) * ex(rng) + ((rng() % 17 == 0) ? 0.0f : 1e-6f);
  return w;
}

inline std::vector<float> make_importance(int64_t n, uint64_t seed) {
  return make_importance(n, Fixed{salted(seed)});
}

// Random bytes for decoder tests on arbitrary payloads.
inline std::vector<uint8_t> random_bytes(size_t n, uint64_t seed) {
  std::mt19937_64 rng(salted(seed));
  std::vector<uint8_t> b(n);
  for (auto& x : b) x = static_cast<uint8_t>(rng());
  return b;
}

}  // namespace gguf::testing

// Legacy codecs (q4_0 q4_1 q5_0 q5_1 q8_0 q8_1): hand-computed blocks, exact round trips, size
// errors, and conformance with ggml's quantize_chunk / quantize_row_q8_1_ref / dequantize_row_*.
#include <gtest/gtest.h>

#include <bit>
#include <cfloat>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <span>
#include <string>
#include <vector>

#include "codec_bits.h"
#include "distributions.h"
#include "ggml_ref.h"
#include "gguf/base/error.h"
#include "gguf/codecs/codecs.h"
#include "gguf/format/types.h"

namespace gguf {
namespace {

using testing::Dist;
using testing::GgmlRef;
using testing::same_bytes;
using testing::same_float_bits;

int id_of(GgmlType t) { return static_cast<int>(static_cast<uint32_t>(t)); }
size_t bytes_of(GgmlType t, int64_t n) { return *row_bytes(t, static_cast<uint64_t>(n)); }

std::vector<uint8_t> encode(GgmlType t, const std::vector<float>& x, int64_t nrows,
                            std::span<const float> imatrix = {}) {
  const int64_t n = static_cast<int64_t>(x.size()) / nrows;
  std::vector<uint8_t> out(bytes_of(t, n) * nrows);
  quantize(t, x, nrows, n, imatrix, out);
  return out;
}

std::vector<float> decode(GgmlType t, std::span<const uint8_t> bytes, int64_t n) {
  std::vector<float> out(static_cast<size_t>(n));
  dequantize(t, bytes, out);
  return out;
}

uint16_t u16_at(const std::vector<uint8_t>& b, size_t off) {
  uint16_t v;
  std::memcpy(&v, b.data() + off, 2);
  return v;
}

// --- Without ggml ------------------------------------------------------------------------

TEST(codec_legacy, q4_0_encodes_hand_computed_block) {
  // x = j - 16: the first largest magnitude is -16, so d = -16 / -8 = 2 and
  // code = min(15, trunc((j - 16) / 2 + 8.5)) = min(15, (j + 1) / 2).
  std::vector<float> x(32);
  for (int j = 0; j < 32; ++j) x[j] = static_cast<float>(j - 16);
  const auto b = encode(GgmlType::Q4_0, x, 1);
  ASSERT_EQ(b.size(), 18u);
  EXPECT_EQ(u16_at(b, 0), 0x4000);  // fp16 2.0
  for (int j = 0; j < 16; ++j) {
    const int lo = (j + 1) / 2, hi = std::min(15, (j + 17) / 2);
    EXPECT_EQ(b[2 + j], lo | (hi << 4)) << "byte " << j;
  }
  const auto y = decode(GgmlType::Q4_0, b, 32);
  for (int j = 0; j < 32; ++j) {
    const int code = std::min(15, (j + 1) / 2);
    EXPECT_EQ(y[j], static_cast<float>((code - 8) * 2)) << j;
  }
}

TEST(codec_legacy, q8_1_stores_scaled_code_sum) {
  // d = (127/8) / 127 = 1/8 exactly, codes 127 and j - 16 for j >= 1: sum 127, s = 15.875.
  std::vector<float> x(32);
  x[0] = 127.0f / 8;
  for (int j = 1; j < 32; ++j) x[j] = static_cast<float>(j - 16) / 8;
  const auto b = encode(GgmlType::Q8_1, x, 1);
  ASSERT_EQ(b.size(), 36u);
  EXPECT_EQ(u16_at(b, 0), 0x3000);  // fp16 0.125
  EXPECT_EQ(u16_at(b, 2), 0x4BF0);  // fp16 15.875
  EXPECT_EQ(static_cast<int8_t>(b[4]), 127);
  for (int j = 1; j < 32; ++j) EXPECT_EQ(static_cast<int8_t>(b[4 + j]), j - 16);
  EXPECT_TRUE(same_float_bits(decode(GgmlType::Q8_1, b, 32), x));
  EXPECT_TRUE(same_float_bits(decode(GgmlType::Q8_0, encode(GgmlType::Q8_0, x, 1), 32), x));
}

// Values on each type's grid, containing its extreme codes, survive encode+decode exactly.
TEST(codec_legacy, grid_values_round_trip_exactly) {
  std::mt19937 rng(7);
  std::vector<float> x(64);
  auto fill = [&](int lo, int hi, float d, float m, int pin_lo_at, int pin_hi_at) {
    for (auto& v : x) v = static_cast<float>(lo + static_cast<int>(rng() % (hi - lo + 1))) * d + m;
    for (int b = 0; b < 2; ++b) {
      x[b * 32 + pin_lo_at] = static_cast<float>(lo) * d + m;
      if (pin_hi_at >= 0) x[b * 32 + pin_hi_at] = static_cast<float>(hi) * d + m;
    }
  };
  fill(-8, 7, 0.25f, 0, 5, -1);  // q4_0 needs the -8 end to fix d
  EXPECT_TRUE(same_float_bits(decode(GgmlType::Q4_0, encode(GgmlType::Q4_0, x, 2), 64), x));
  fill(-16, 15, 0.5f, 0, 9, -1);
  EXPECT_TRUE(same_float_bits(decode(GgmlType::Q5_0, encode(GgmlType::Q5_0, x, 2), 64), x));
  fill(0, 15, 0.5f, -3, 3, 30);  // d = 7.5 / 15, min = -3
  EXPECT_TRUE(same_float_bits(decode(GgmlType::Q4_1, encode(GgmlType::Q4_1, x, 2), 64), x));
  fill(0, 31, 0.25f, -1, 0, 31);  // d = 7.75 / 31
  EXPECT_TRUE(same_float_bits(decode(GgmlType::Q5_1, encode(GgmlType::Q5_1, x, 2), 64), x));
  fill(-127, 127, 0.125f, 0, 2, 17);
  EXPECT_TRUE(same_float_bits(decode(GgmlType::Q8_0, encode(GgmlType::Q8_0, x, 2), 64), x));
}

TEST(codec_legacy, overflowing_scale_is_encoded_as_inf) {
  // d = 1e6 / -8 = -125000 does not fit fp16: ggml stores -inf rather than clamping.
  std::vector<float> x(32, 0.5f);
  x[7] = 1e6f;
  const auto b = encode(GgmlType::Q4_0, x, 1);
  EXPECT_EQ(u16_at(b, 0), 0xFC00);
  EXPECT_EQ(b[2 + 7] & 0xF, 0);  // 1e6 * (1 / -125000) + 8.5 = 0.5
  EXPECT_EQ(b[2 + 0] & 0xF, 8);
}

TEST(codec_legacy, decodes_hand_built_q5_1) {
  // d = 0.5, m = -4, element j has code j: low nibbles in qs, fifth bits (j >= 16) in qh.
  std::vector<uint8_t> b(24);
  const uint16_t d = 0x3800, m = 0xC400;
  std::memcpy(b.data(), &d, 2);
  std::memcpy(b.data() + 2, &m, 2);
  const uint32_t qh = 0xFFFF0000u;
  std::memcpy(b.data() + 4, &qh, 4);
  for (int j = 0; j < 16; ++j) b[8 + j] = static_cast<uint8_t>(j | (j << 4));
  const auto y = decode(GgmlType::Q5_1, b, 32);
  for (int j = 0; j < 32; ++j) EXPECT_EQ(y[j], static_cast<float>(j) * 0.5f - 4.0f) << j;
}

template <typename Fn>
std::string error_of(Fn fn) {
  try {
    fn();
  } catch (const Error& e) {
    return e.message();
  }
  return "no error";
}

TEST(codec_legacy, size_errors_name_type_and_counts) {
  std::vector<float> f(64);
  std::vector<uint8_t> b(64);
  EXPECT_EQ(
      error_of([&] { dequantize(GgmlType::Q4_0, std::span(b).first(17), std::span(f).first(32)); }),
      "32 elements of q4_0 need 18 bytes, got 17");
  EXPECT_EQ(
      error_of([&] { dequantize(GgmlType::Q4_0, std::span(b).first(18), std::span(f).first(33)); }),
      "33 elements is not a multiple of the q4_0 block size 32");
  EXPECT_EQ(error_of([&] { quantize(GgmlType::Q8_0, f, 3, 32, {}, b); }),
            "quantize q8_0: 3 rows of 32 do not match 64 input floats");
  EXPECT_EQ(error_of([&] { quantize(GgmlType::Q4_1, std::span(f).first(40), 1, 40, {}, b); }),
            "quantize q4_1: row length 40 is not a multiple of the block size 32");
  EXPECT_EQ(error_of([&] { quantize(GgmlType::Q5_0, f, 2, 32, {}, std::span(b).first(40)); }),
            "quantize q5_0: output needs 44 bytes, got 40");
  EXPECT_EQ(error_of([&] {
              quantize(GgmlType::Q5_1, f, 2, 32, std::span(f).first(31), std::span(b).first(48));
            }),
            "quantize q5_1: importance has 31 weights, rows have 32");
}

// --- Against ggml ------------------------------------------------------------------------

// Rows of special values: zeros of both signs, subnormals, fp16 overflow, FLT_MAX, infinities,
// NaNs with payloads, +a/-a ties; mixed into ordinary values block by block.
std::vector<float> edge_rows(int64_t nrows, int64_t n, uint64_t seed) {
  const float nan_payload = std::bit_cast<float>(0x7F800123u);
  const float neg_qnan = std::bit_cast<float>(0xFFC00456u);
  const float pool[] = {0.0f,     -0.0f,   1e-45f,   -1e-40f,  3e-39f,    FLT_MIN,  1e-30f,
                        -1.0f,    0.5f,    1e6f,     -1e6f,    65504.0f,  65520.0f, -7e4f,
                        3e38f,    FLT_MAX, -FLT_MAX, INFINITY, -INFINITY, NAN,      nan_payload,
                        neg_qnan, 1e20f,   2.5f,     -2.5f};
  constexpr int kPool = sizeof(pool) / sizeof(pool[0]);
  std::mt19937_64 rng(testing::salted(seed));
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> v(static_cast<size_t>(nrows * n));
  for (size_t b = 0; b < v.size() / 32; ++b) {
    float* x = v.data() + b * 32;
    const float special = pool[rng() % kPool];
    switch (rng() % 6) {
      case 0:  // all from the pool
        for (int j = 0; j < 32; ++j) x[j] = pool[rng() % kPool];
        break;
      case 1:  // ordinary values and one special
        for (int j = 0; j < 32; ++j) x[j] = normal(rng);
        x[rng() % 32] = special;
        break;
      case 2:  // one special repeated
        for (int j = 0; j < 32; ++j) x[j] = special;
        break;
      case 3:  // zeros of mixed sign with a few tiny values
        for (int j = 0; j < 32; ++j) x[j] = (rng() % 2) ? -0.0f : 0.0f;
        if (rng() % 2) x[rng() % 32] = (rng() % 2) ? 1e-45f : -2e-44f;
        break;
      case 4: {  // magnitude ties of opposite sign
        const float a = std::abs(normal(rng)) + 1;
        for (int j = 0; j < 32; ++j) x[j] = normal(rng) * 0.1f;
        x[rng() % 32] = a;
        x[rng() % 32] = -a;
        break;
      }
      default:  // tiny block (scales near or below the fp16/fp32 subnormal range)
        for (int j = 0; j < 32; ++j) x[j] = normal(rng) * ((rng() % 2) ? 1e-38f : 1e-42f);
        break;
    }
  }
  return v;
}

int64_t nan_blocks_forgiven = 0;

bool is_fp16_nan(uint16_t h) { return (h & 0x7C00) == 0x7C00 && (h & 0x3FF) != 0; }

// The one documented divergence: with importance weights, a row holding NaNs makes the
// least-squares sums NaN, and which NaN's sign and payload reach the fp16 scale/min depends
// on the operand order ggml's compiler chose for each addition. There we accept any NaN in
// place of ggml's NaN (the codes must still match); returns how many blocks needed it.
int64_t forgive_nan_scales(GgmlType t, const std::vector<float>& x, int64_t n,
                           std::vector<uint8_t>& ours, const std::vector<uint8_t>& ref) {
  const size_t bs = traits(t).type_size;
  const size_t header = (t == GgmlType::Q4_1 || t == GgmlType::Q5_1) ? 4 : 2;
  int64_t forgiven = 0;
  for (size_t b = 0; b < ours.size() / bs; ++b) {
    uint8_t* o = ours.data() + b * bs;
    const uint8_t* r = ref.data() + b * bs;
    if (std::memcmp(o, r, bs) == 0) continue;
    const int64_t row = static_cast<int64_t>(b * 32) / n;
    bool row_has_nan = false;
    for (int64_t i = row * n; i < (row + 1) * n; ++i) row_has_nan |= std::isnan(x[i]);
    if (!row_has_nan) continue;
    bool ok = true;
    for (size_t f = 0; f < header; f += 2) {
      uint16_t a, c;
      std::memcpy(&a, o + f, 2);
      std::memcpy(&c, r + f, 2);
      ok &= a == c || (is_fp16_nan(a) && is_fp16_nan(c));
    }
    if (ok) {
      std::memcpy(o, r, header);
      ++forgiven;
    }
  }
  return forgiven;
}

// Encodes x with us and with ggml, expects the same bytes, and leaves ggml's bytes in ref.
void expect_encode_matches(GgmlType t, const std::vector<float>& x, int64_t nrows,
                           const std::vector<float>& imatrix, const std::string& what,
                           std::vector<uint8_t>& ref) {
  const auto& ggml = GgmlRef::get();
  const int64_t n = static_cast<int64_t>(x.size()) / nrows;
  auto ours = encode(t, x, nrows, imatrix);
  ref.assign(ours.size(), 0);
  if (t == GgmlType::Q8_1) {
    ASSERT_TRUE(ggml.quantize_row_ref(id_of(t), x.data(), ref.data(), nrows * n));
  } else {
    const size_t got = ggml.quantize_chunk(id_of(t), x.data(), ref.data(), 0, nrows, n,
                                           imatrix.empty() ? nullptr : imatrix.data());
    ASSERT_EQ(got, ref.size());
  }
  if (!imatrix.empty() && uses_importance(t))
    nan_blocks_forgiven += forgive_nan_scales(t, x, n, ours, ref);
  EXPECT_TRUE(same_bytes(ours, ref, traits(t).type_size))
      << traits(t).name << " " << what << testing::salt_note();
}

// ggml has no q8_1 row decoder; q8_1 decodes like q8_0 with the sum dropped.
std::vector<float> ggml_decode(GgmlType t, std::span<const uint8_t> bytes, int64_t n) {
  std::vector<float> out(static_cast<size_t>(n));
  if (t == GgmlType::Q8_1) {
    std::vector<uint8_t> q8_0;
    for (size_t off = 0; off < bytes.size(); off += 36) {
      q8_0.insert(q8_0.end(), bytes.begin() + off, bytes.begin() + off + 2);
      q8_0.insert(q8_0.end(), bytes.begin() + off + 4, bytes.begin() + off + 36);
    }
    EXPECT_TRUE(GgmlRef::get().dequantize_row(id_of(GgmlType::Q8_0), q8_0.data(), out.data(), n));
  } else {
    EXPECT_TRUE(GgmlRef::get().dequantize_row(id_of(t), bytes.data(), out.data(), n));
  }
  return out;
}

void expect_decode_matches(GgmlType t, std::span<const uint8_t> bytes, int64_t n,
                           const std::string& what) {
  EXPECT_TRUE(same_float_bits(decode(t, bytes, n), ggml_decode(t, bytes, n)))
      << traits(t).name << " " << what << testing::salt_note();
}

// Every distribution (and edge_rows) at row lengths 32, 256, 96*32 and 4096, without and with
// importance weights: about 3,500 rows and 1.1 M values per type.
void check_against_ggml(GgmlType t) {
  struct Shape {
    int64_t n, nrows;
  };
  const Shape shapes[] = {{32, 128}, {256, 32}, {96 * 32, 6}, {4096, 6}};
  uint64_t seed = 1000 * static_cast<uint64_t>(id_of(t));
  for (int d = 0; d <= static_cast<int>(testing::all_dists().size()); ++d) {
    const bool edge = d == static_cast<int>(testing::all_dists().size());
    const std::string dname = edge ? "edge" : testing::dist_name(testing::all_dists()[d]);
    for (const auto& s : shapes) {
      for (const bool weighted : {false, true}) {
        ++seed;
        const auto x = edge ? edge_rows(s.nrows, s.n, seed)
                            : testing::make_rows(testing::all_dists()[d], s.nrows, s.n, seed);
        const auto imatrix = weighted ? testing::make_importance(s.n, seed) : std::vector<float>{};
        const std::string what = fmt::format("{} rows of {} ({}{})", s.nrows, s.n, dname,
                                             weighted ? ", importance" : "");
        std::vector<uint8_t> ggml_bytes;
        expect_encode_matches(t, x, s.nrows, imatrix, what, ggml_bytes);
        expect_decode_matches(t, ggml_bytes, s.nrows * s.n, what);
        if (::testing::Test::HasFailure()) return;  // one report per type is enough
      }
    }
  }
  if (nan_blocks_forgiven > 0)
    fmt::print("{}: {} blocks of NaN rows had another NaN as scale than ggml\n", traits(t).name,
               nan_blocks_forgiven);
  nan_blocks_forgiven = 0;
  // Arbitrary payloads: scales and mins that are NaN, inf or subnormal.
  const int64_t n = 32 * 8192;
  const auto bytes = testing::random_bytes(bytes_of(t, n), seed + 77);
  expect_decode_matches(t, bytes, n, "random bytes");
  // Every pair of special fp16 scale and min (or sum, for q8_1), over random codes that
  // include 0: inf * 0 is the default NaN, which meets a NaN min in code * d + m; random
  // bytes reach such a block about once in a million.
  const uint16_t specials[] = {0x0000, 0x8000, 0x0001, 0x3c00, 0xbc00, 0x7bff, 0x7c00,
                               0xfc00, 0x7e00, 0xfe00, 0x7c01, 0xfe01, 0x7fff, 0xffff};
  const size_t bs = traits(t).type_size;
  auto special = testing::random_bytes(bs * std::size(specials) * std::size(specials), seed + 78);
  for (size_t i = 0; i < std::size(specials); ++i)
    for (size_t j = 0; j < std::size(specials); ++j) {
      uint8_t* b = special.data() + (i * std::size(specials) + j) * bs;
      std::memcpy(b, &specials[i], 2);
      std::memcpy(b + 2, &specials[j], 2);  // q4_1/q5_1's m (q8_1's s); q4_0/q5_0/q8_0: codes
      b[bs - 1] &= 0xF0;                    // a zero code in every block (element 15)
      if (t == GgmlType::Q5_1) std::memset(b + 4, 0, 4);  // qh: no fifth bit either
    }
  expect_decode_matches(t, special, static_cast<int64_t>(special.size() / bs) * 32,
                        "special scales");
}

TEST(codec_legacy, q4_0_matches_ggml) {
  GGUF_REQUIRE_GGML();
  check_against_ggml(GgmlType::Q4_0);
}
TEST(codec_legacy, q4_1_matches_ggml) {
  GGUF_REQUIRE_GGML();
  check_against_ggml(GgmlType::Q4_1);
}
TEST(codec_legacy, q5_0_matches_ggml) {
  GGUF_REQUIRE_GGML();
  check_against_ggml(GgmlType::Q5_0);
}
TEST(codec_legacy, q5_1_matches_ggml) {
  GGUF_REQUIRE_GGML();
  check_against_ggml(GgmlType::Q5_1);
}
TEST(codec_legacy, q8_0_matches_ggml) {
  GGUF_REQUIRE_GGML();
  check_against_ggml(GgmlType::Q8_0);
}
TEST(codec_legacy, q8_1_matches_ggml_ref_row) {
  GGUF_REQUIRE_GGML();
  check_against_ggml(GgmlType::Q8_1);
}

}  // namespace
}  // namespace gguf

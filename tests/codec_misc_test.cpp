// TQ1_0, TQ2_0, MXFP4, NVFP4, Q1_0 and Q2_0 decoders: hand-built blocks with known values, and
// bit-exact agreement with ggml on ggml's quantized bytes and on random bytes.
#include <gtest/gtest.h>

#include <bit>
#include <cfloat>
#include <cmath>
#include <cstring>
#include <iterator>
#include <optional>
#include <random>
#include <vector>

#include "codec_conformance.h"
#include "distributions.h"
#include "ggml_ref.h"
#include "gguf/codecs/codecs.h"

namespace gguf {
namespace {

using testing::decode_block;

void put16(std::vector<uint8_t>& b, size_t at, uint16_t v) { std::memcpy(&b[at], &v, 2); }

std::vector<uint8_t> zero_block(GgmlType t) { return std::vector<uint8_t>(traits(t).type_size); }

// The E2M1 values of codes 0-15 (OCP microscaling spec).
const float kE2M1[16] = {0, 0.5f, 1, 1.5f, 2, 3, 4, 6, -0.0f, -0.5f, -1, -1.5f, -2, -3, -4, -6};

// A byte holding five trits (each -1, 0 or +1, first one most significant) the way TQ1_0 packs
// them: the base-3 number as a fraction of 243, scaled to 256 and rounded up.
uint8_t pack_trits(const int (&t)[5]) {
  int v = 0;
  for (int k = 0; k < 5; ++k) v = v * 3 + (t[k] + 1);
  return static_cast<uint8_t>((v * 256 + 242) / 243);
}

TEST(codec_misc, decodes_hand_built_tq1_0) {
  auto b = zero_block(GgmlType::TQ1_0);
  put16(b, 52, 0x4000);  // d = 2
  const int first[5] = {-1, 0, 1, 1, -1};
  b[0] = pack_trits(first);  // values 0, 32, 64, 96, 128
  const int second[5] = {1, 1, 0, -1, 0};
  b[40] = pack_trits(second);            // values 168, 184, 200, 216, 232 (bytes 32-47, 16 apart)
  const int last[5] = {1, -1, 0, 1, 0};  // qh packs four trits; the fifth stays unused
  b[49] = pack_trits(last);              // values 241, 245, 249, 253
  const auto y = decode_block(GgmlType::TQ1_0, b);
  for (int k = 0; k < 5; ++k) EXPECT_EQ(y[32 * k], 2.0f * first[k]) << k;
  for (int k = 0; k < 5; ++k) EXPECT_EQ(y[168 + 16 * k], 2.0f * second[k]) << k;
  for (int k = 0; k < 4; ++k) EXPECT_EQ(y[241 + 4 * k], 2.0f * last[k]) << k;
  EXPECT_EQ(y[1], -2.0f);  // a zero byte is five -1 trits
  EXPECT_EQ(y[240], -2.0f);
}

TEST(codec_misc, decodes_hand_built_tq2_0) {
  auto b = zero_block(GgmlType::TQ2_0);
  put16(b, 64, 0x3800);  // d = 0.5
  b[0] = 0b11100100;     // codes 0,1,2,3 -> values 0, 32, 64, 96
  b[33] = 0b00000010;    // code 2 -> value 129
  const auto y = decode_block(GgmlType::TQ2_0, b);
  EXPECT_EQ(y[0], -0.5f);
  EXPECT_EQ(y[32], 0.0f);
  EXPECT_EQ(y[64], 0.5f);
  EXPECT_EQ(y[96], 1.0f);
  EXPECT_EQ(y[129], 0.5f);
  EXPECT_EQ(y[128], -0.5f);
}

TEST(codec_misc, decodes_hand_built_mxfp4) {
  auto b = zero_block(GgmlType::MXFP4);
  b[0] = 127;  // scale 2^0
  for (int j = 0; j < 16; ++j) b[1 + j] = static_cast<uint8_t>(j | ((15 - j) << 4));
  auto y = decode_block(GgmlType::MXFP4, b);
  for (int j = 0; j < 16; ++j) {
    EXPECT_EQ(y[j], kE2M1[j]) << j;
    EXPECT_EQ(y[16 + j], kE2M1[15 - j]) << j;
  }
  b[0] = 130;  // scale 2^3
  y = decode_block(GgmlType::MXFP4, b);
  EXPECT_EQ(y[7], 48.0f);
  b[0] = 0;  // scale 2^-127, a subnormal: 6 * 2^-127 stays exact
  y = decode_block(GgmlType::MXFP4, b);
  EXPECT_EQ(y[7], std::ldexp(6.0f, -127));
  EXPECT_EQ(y[1], std::ldexp(1.0f, -128));
  b[0] = 254;  // 6 * 2^127 overflows to inf
  y = decode_block(GgmlType::MXFP4, b);
  EXPECT_EQ(y[7], INFINITY);
  EXPECT_EQ(y[3], 3 * std::ldexp(1.0f, 126));
}

TEST(codec_misc, decodes_hand_built_nvfp4) {
  auto b = zero_block(GgmlType::NVFP4);
  b[0] = 0x38;  // UE4M3 exponent 7, mantissa 0: 1.0
  b[1] = 0x3C;  // 1.5
  b[2] = 0x01;  // smallest subnormal: 2^-9
  b[3] = 0x7F;  // E4M3 NaN pattern: ggml reads it as 0
  for (int j = 0; j < 32; ++j) b[4 + j] = static_cast<uint8_t>((j % 8) | ((15 - j % 8) << 4));
  const auto y = decode_block(GgmlType::NVFP4, b);
  for (int j = 0; j < 8; ++j) {
    EXPECT_EQ(y[j], kE2M1[j]) << j;
    EXPECT_EQ(y[8 + j], kE2M1[15 - j]) << j;
    EXPECT_EQ(y[16 + j], 1.5f * kE2M1[j]) << j;
    EXPECT_EQ(y[32 + j], std::ldexp(kE2M1[j], -9)) << j;
    EXPECT_EQ(std::abs(y[48 + j]), 0.0f) << j;
  }
  b[0] = 0x7E;  // largest: 1.75 * 2^8 = 448
  b[1] = 0xB8;  // bit 7 is ignored: same as 0x38
  const auto z = decode_block(GgmlType::NVFP4, b);
  EXPECT_EQ(z[7], 448.0f * 6);
  EXPECT_EQ(z[16 + 7], 6.0f);
}

TEST(codec_misc, decodes_hand_built_q1_0_and_q2_0) {
  auto b = zero_block(GgmlType::Q1_0);
  put16(b, 0, 0x4000);  // d = 2
  b[2] = 0b00000101;
  b[17] = 0x80;
  const auto y = decode_block(GgmlType::Q1_0, b);
  EXPECT_EQ(y[0], 2.0f);
  EXPECT_EQ(y[1], -2.0f);
  EXPECT_EQ(y[2], 2.0f);
  EXPECT_EQ(y[126], -2.0f);
  EXPECT_EQ(y[127], 2.0f);

  auto c = zero_block(GgmlType::Q2_0);
  put16(c, 0, 0x3800);  // d = 0.5
  c[2] = 0b11100100;
  c[17] = 0b10000000;
  const auto z = decode_block(GgmlType::Q2_0, c);
  EXPECT_EQ(z[0], -0.5f);
  EXPECT_EQ(z[1], 0.0f);
  EXPECT_EQ(z[2], 0.5f);
  EXPECT_EQ(z[3], 1.0f);
  EXPECT_EQ(z[62], -0.5f);
  EXPECT_EQ(z[63], 0.5f);
}

// A signalling-NaN scale comes out quiet, as ggml's fp16 conversion makes it.
TEST(codec_misc, q1_0_quiets_signalling_nan_scale) {
  auto b = zero_block(GgmlType::Q1_0);
  put16(b, 0, 0xFC01);
  b[2] = 1;
  const auto y = decode_block(GgmlType::Q1_0, b);
  EXPECT_EQ(std::bit_cast<uint32_t>(y[0]), 0xFFC02000u);
  EXPECT_EQ(std::bit_cast<uint32_t>(y[1]), 0x7FC02000u);
}

// --- conformance with ggml ---

const GgmlType kMiscTypes[] = {GgmlType::TQ1_0, GgmlType::TQ2_0, GgmlType::MXFP4,
                               GgmlType::NVFP4, GgmlType::Q1_0,  GgmlType::Q2_0};

TEST(codec_misc, decodes_ggml_quantized_rows_like_ggml) {
  GGUF_REQUIRE_GGML();
  uint64_t seed = 100;
  for (const auto t : kMiscTypes)
    for (const int64_t n_per_row : {256, 1024, 4352})
      for (const auto d : testing::all_dists()) {
        const auto rows = testing::make_rows(d, 4, n_per_row, ++seed);
        testing::check_decode_of_ggml_quant(
            t, rows, 4, n_per_row, nullptr,
            testing::dist_name(d) + " rows of " + std::to_string(n_per_row));
      }
}

TEST(codec_misc, random_bytes_match_ggml) {
  GGUF_REQUIRE_GGML();
  for (const auto t : kMiscTypes)
    for (uint64_t seed = 1; seed <= 8; ++seed) testing::check_decode_of_random_bytes(t, 256, seed);
}

TEST(codec_misc, all_misc_types_decode_and_encode) {
  for (const auto t : kMiscTypes) {
    EXPECT_TRUE(can_decode(t)) << traits(t).name;
    EXPECT_TRUE(can_encode(t)) << traits(t).name;
    EXPECT_FALSE(uses_importance(t)) << traits(t).name;
  }
}

// --- encoders ---

std::vector<float> roundtrip(GgmlType t, const std::vector<float>& x) {
  std::vector<uint8_t> q(testing::bytes_for(t, static_cast<int64_t>(x.size())));
  quantize(t, x, 1, static_cast<int64_t>(x.size()), {}, q);
  std::vector<float> y(x.size());
  dequantize(t, q, y);
  return y;
}

// Values on a format's own grid come back unchanged.
TEST(codec_misc, encodes_representable_values_exactly) {
  std::vector<float> fp4(64), ternary(256), signs(128), q2(64);
  for (size_t j = 0; j < fp4.size(); ++j) fp4[j] = 0.25f * kE2M1[(j * 7) % 16];
  fp4[5] = 0.25f * 6;  // every block of 16/32 reaches the top level 6 * 2^-2
  fp4[21] = fp4[37] = fp4[53] = -1.5f;
  for (size_t j = 0; j < ternary.size(); ++j)
    ternary[j] = 0.75f * static_cast<float>(j % 3) - 0.75f;
  for (size_t j = 0; j < signs.size(); ++j) signs[j] = (j % 5 < 2) ? -0.5f : 0.5f;
  for (size_t j = 0; j < q2.size(); ++j) q2[j] = 3.0f * static_cast<float>(j % 3) - 3.0f;
  EXPECT_EQ(roundtrip(GgmlType::MXFP4, fp4), fp4);
  EXPECT_EQ(roundtrip(GgmlType::NVFP4, fp4), fp4);
  EXPECT_EQ(roundtrip(GgmlType::TQ1_0, ternary), ternary);
  EXPECT_EQ(roundtrip(GgmlType::TQ2_0, ternary), ternary);
  EXPECT_EQ(roundtrip(GgmlType::Q1_0, signs), signs);
  EXPECT_EQ(roundtrip(GgmlType::Q2_0, q2), q2);
}

TEST(codec_misc, mxfp4_exponent_follows_log2f) {
  // amax 6 * 2^k: exponent 127 + k. ggml takes floor(log2f(amax)) - 2 + 127 directly.
  std::vector<float> x(32, 0.0f);
  x[3] = 6.0f * 1024;
  std::vector<uint8_t> q(17);
  quantize(GgmlType::MXFP4, x, 1, 32, {}, q);
  EXPECT_EQ(q[0], 127 + 10);
  EXPECT_EQ(q[1 + 3], 7);  // level 6
  x[3] = 1.0f;
  quantize(GgmlType::MXFP4, x, 1, 32, {}, q);
  EXPECT_EQ(q[0], 125);
  EXPECT_EQ(q[1 + 3], 6);  // level 4 * 2^-2 = 1
}

TEST(codec_misc, encodes_ggml_rows_like_ggml) {
  GGUF_REQUIRE_GGML();
  uint64_t seed = 500;
  for (const auto t : kMiscTypes)
    for (const int64_t n_per_row : {256, 1024, 4352})
      for (const auto d : testing::all_dists()) {
        const auto rows = testing::make_rows(d, 4, n_per_row, ++seed);
        const auto imatrix = testing::make_importance(n_per_row, seed);
        const std::string what = testing::dist_name(d) + " rows of " + std::to_string(n_per_row);
        testing::expect_encode_matches_ggml(t, rows, 4, n_per_row, nullptr, what);
        testing::expect_encode_matches_ggml(t, rows, 4, n_per_row, imatrix.data(),
                                            what + " with imatrix");
      }
}

// Rows mixing NaN, infinities, signed zeros, subnormals, values just below powers of two and
// magnitudes from 2^-149 to FLT_MAX: the edges where ggml's casts, log2f and MAX macro decide.
std::vector<float> special_rows(int64_t nrows, int64_t n, uint64_t seed) {
  std::mt19937_64 rng(testing::salted(seed));
  const float pool[] = {NAN,       -NAN,       INFINITY,  -INFINITY,      0.0f,           -0.0f,
                        0x1p-149f, -0x1p-140f, 0x1p-127f, 0x1.fffffep-1f, 0x1.fffffep+2f, FLT_MAX,
                        -FLT_MAX,  65504.0f,   65520.0f,  3e38f};
  std::vector<float> v(static_cast<size_t>(nrows * n));
  for (int64_t r = 0; r < nrows; ++r) {
    // Each row has its own magnitude range, so whole blocks land in subnormal or huge territory.
    const int base = static_cast<int>(rng() % 280) - 150;
    for (int64_t i = 0; i < n; ++i) {
      float& x = v[static_cast<size_t>(r * n + i)];
      const unsigned pick = static_cast<unsigned>(rng() % 64);
      if (pick < std::size(pool) / 2) {
        x = pool[rng() % std::size(pool)];
      } else {
        const float m = std::ldexp(static_cast<float>(rng() % 0x1000000), -24);  // [0, 1)
        x = std::ldexp(m, base + static_cast<int>(rng() % 5));
        if (rng() & 1) x = -x;
        if (pick == 63) x = std::nextafter(std::ldexp(1.0f, base), 0.0f);
      }
    }
  }
  return v;
}

// Sub-blocks whose amax / 6 sits exactly halfway between two UE4M3 scales (normal and
// subnormal), where the rounding rule decides.
TEST(codec_misc, nvfp4_scale_ties_like_ggml) {
  GGUF_REQUIRE_GGML();
  std::vector<float> x;
  std::mt19937_64 rng(testing::salted(7));
  std::uniform_real_distribution<float> uni(-1.0f, 1.0f);
  auto add_sub_block = [&](float amax) {
    x.push_back(amax);
    for (int j = 1; j < 16; ++j) x.push_back(amax * uni(rng));
  };
  for (int k = 0; k < 8; ++k) add_sub_block(6.0f * (static_cast<float>(k) + 0.5f) / 512.0f);
  for (int e = -9; e <= 9; ++e)
    for (int m = 0; m < 8; ++m)
      add_sub_block(6.0f * std::ldexp(static_cast<float>(16 + 2 * m + 1) / 16.0f, e));
  while (x.size() % 64) add_sub_block(1.0f);
  testing::expect_encode_matches_ggml(GgmlType::NVFP4, x, 1, static_cast<int64_t>(x.size()),
                                      nullptr, "scale ties");
}

// Values at exactly half a step of amax (and one ulp either side), where rounding half away
// from zero decides the code: q2_0's roundf and the ternary types' lroundf.
TEST(codec_misc, halfway_values_round_like_ggml) {
  GGUF_REQUIRE_GGML();
  std::mt19937_64 rng(testing::salted(19));
  std::vector<float> x(64 * 256);
  for (size_t b = 0; b < x.size() / 64; ++b) {
    // Powers of two make x / amax exact halves; other amax values land near them.
    const float mantissa = rng() % 2 ? 1.0f : 1.0f + static_cast<float>(rng() % 64) / 64.0f;
    const float amax = std::ldexp(mantissa, static_cast<int>(rng() % 40) - 20);
    for (size_t j = 0; j < 64; ++j) {
      const float half = 0.5f * amax * (rng() % 2 ? 1.0f : -1.0f);
      const int nudge = static_cast<int>(rng() % 3) - 1;
      x[64 * b + j] = nudge == 0 ? half : std::nextafter(half, nudge * INFINITY);
    }
    x[64 * b + rng() % 64] = rng() % 2 ? amax : -amax;
  }
  for (const auto t : {GgmlType::Q2_0, GgmlType::TQ1_0, GgmlType::TQ2_0})
    testing::expect_encode_matches_ggml(t, x, 64, 256, nullptr, "halfway values");
}

TEST(codec_misc, encodes_special_values_like_ggml) {
  GGUF_REQUIRE_GGML();
  for (const auto t : kMiscTypes)
    for (uint64_t seed = 1; seed <= 6; ++seed) {
      const auto rows = special_rows(64, 256, seed * 31 + static_cast<uint64_t>(t));
      testing::expect_encode_matches_ggml(t, rows, 64, 256, nullptr,
                                          "special values seed " + std::to_string(seed));
    }
}

// MXFP4's encoder has an AVX-512 kernel (the nearest FP4 level of 16 values in lanes) and a
// portable twin: both give ggml's bytes, on gaussian-like rows, on the special values above and
// on values at exactly half a level step (where the comparisons decide), and each other's.
std::vector<float> mxfp4_halfway_rows(int64_t blocks, uint64_t seed) {
  std::mt19937_64 rng(testing::salted(seed));
  const float mids[] = {0.25f, 0.75f, 1.25f, 1.75f, 2.5f, 3.5f, 5.0f};  // between E2M1 levels
  std::vector<float> x(static_cast<size_t>(32 * blocks));
  for (int64_t b = 0; b < blocks; ++b) {
    const int e = static_cast<int>(rng() % 40) - 20;
    for (int j = 0; j < 32; ++j) {
      float v = std::ldexp(mids[rng() % std::size(mids)], e);
      const int nudge = static_cast<int>(rng() % 3) - 1;
      if (nudge != 0) v = std::nextafter(v, nudge * INFINITY);
      x[static_cast<size_t>(32 * b + j)] = rng() % 2 ? v : -v;
    }
    x[static_cast<size_t>(32 * b + static_cast<int64_t>(rng() % 32))] = std::ldexp(6.0f, e);
  }
  return x;
}

TEST(codec_misc, mxfp4_encoders_match_ggml_on_both_paths) {
  GGUF_REQUIRE_GGML();
  for (const bool portable : {false, true}) {
    std::optional<testing::PortableCodecs> scope;
    if (portable) scope.emplace();
    const std::string path = portable ? "portable" : "default";
    uint64_t seed = 700;
    for (const auto d : testing::all_dists()) {
      const auto rows = testing::make_rows(d, 8, 1024, ++seed);
      testing::expect_encode_matches_ggml(GgmlType::MXFP4, rows, 8, 1024, nullptr,
                                          path + ", " + testing::dist_name(d));
    }
    for (uint64_t s = 1; s <= 6; ++s)
      testing::expect_encode_matches_ggml(GgmlType::MXFP4, special_rows(64, 256, 900 + s), 64, 256,
                                          nullptr, path + ", special values");
    testing::expect_encode_matches_ggml(GgmlType::MXFP4, mxfp4_halfway_rows(512, 17), 64, 256,
                                        nullptr, path + ", halfway values");
  }
}

// Q2_0's and MXFP4's decoders have AVX-512 twins: the portable ones decode ggml's bytes and
// random bytes as ggml does too (the default ones are checked above).
TEST(codec_misc, portable_decoders_match_ggml) {
  GGUF_REQUIRE_GGML();
  testing::PortableCodecs portable;
  for (const GgmlType t : {GgmlType::Q2_0, GgmlType::MXFP4}) {
    uint64_t seed = 1900;
    for (const auto d : testing::all_dists())
      testing::check_decode_of_ggml_quant(t, testing::make_rows(d, 4, 1024, ++seed), 4, 1024,
                                          nullptr, testing::dist_name(d));
    for (uint64_t r = 1; r <= 8; ++r) testing::check_decode_of_random_bytes(t, 256, r);
  }
}

TEST(codec_misc, mxfp4_avx512_encoder_equals_portable) {
  if (!detail::codec_avx512()) GTEST_SKIP() << "no AVX-512 on this CPU, or GGUF_CODEC_SCALAR set";
  uint64_t seed = 800;
  int64_t blocks = 0;
  std::vector<std::vector<float>> inputs;
  for (const auto d : testing::all_dists())
    inputs.push_back(testing::make_rows(d, 16, 1024, ++seed));
  for (uint64_t s = 1; s <= 4; ++s) inputs.push_back(special_rows(64, 256, 950 + s));
  inputs.push_back(mxfp4_halfway_rows(1024, 23));
  for (size_t k = 0; k < inputs.size(); ++k) {
    const auto& x = inputs[k];
    const int64_t n = static_cast<int64_t>(x.size());
    std::vector<uint8_t> fast(*row_bytes(GgmlType::MXFP4, static_cast<uint64_t>(n))),
        plain(fast.size());
    quantize(GgmlType::MXFP4, x, 1, n, {}, fast);
    {
      testing::PortableCodecs portable;
      quantize(GgmlType::MXFP4, x, 1, n, {}, plain);
    }
    ASSERT_EQ(fast, plain) << "input " << k << testing::salt_note();
    blocks += n / 32;
  }
  EXPECT_GT(blocks, 5000);
}

}  // namespace
}  // namespace gguf

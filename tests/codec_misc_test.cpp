// TQ1_0, TQ2_0, MXFP4, NVFP4, Q1_0 and Q2_0 decoders: hand-built blocks with known values, and
// bit-exact agreement with ggml on ggml's quantized bytes and on random bytes.
#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstring>
#include <vector>

#include "codec_decode_check.h"
#include "distributions.h"
#include "ggml_ref.h"
#include "gguf/codecs.h"

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

TEST(codec_misc, all_misc_types_decode) {
  for (const auto t : kMiscTypes) EXPECT_TRUE(can_decode(t)) << traits(t).name;
}

}  // namespace
}  // namespace gguf

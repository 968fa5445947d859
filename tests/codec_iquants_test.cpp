// I-quant decoders: hand-built blocks with known values, and bit-exact agreement with ggml's
// dequantize_row_iq* on ggml's own quantized bytes and on random bytes.
#include <fcntl.h>
#include <fmt/format.h>
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <optional>
#include <vector>

#include "codec_conformance.h"
#include "codecs/codec_iquant_tables.h"
#include "distributions.h"
#include "ggml_ref.h"
#include "gguf/base/error.h"
#include "gguf/codecs/codecs.h"
#include "gguf/format/types.h"

namespace gguf {
namespace {

using testing::decode_block;

constexpr uint16_t kHalfOne = 0x3C00;

void put16(std::vector<uint8_t>& b, size_t at, uint16_t v) { std::memcpy(&b[at], &v, 2); }
void put32(std::vector<uint8_t>& b, size_t at, uint32_t v) { std::memcpy(&b[at], &v, 4); }

std::vector<uint8_t> zero_block(GgmlType t) { return std::vector<uint8_t>(traits(t).type_size); }

TEST(codec_iquants, tables_hold_format_facts) {
  EXPECT_EQ(detail::iq::kSignsIq2[0], 0);
  EXPECT_EQ(detail::iq::kSignsIq2[1], 129);
  EXPECT_EQ(detail::iq::kSignsIq2[3], 3);
  EXPECT_EQ(detail::iq::kSignsIq2[127], 255);
  EXPECT_EQ(detail::iq::kIq2XxsGrid[0], 0x0808080808080808u);
  EXPECT_EQ(detail::iq::kIq2SGrid[256], 0x0819081919191919u);
  EXPECT_EQ(detail::iq::kIq3XxsGrid[1], 0x04040414u);
  EXPECT_EQ(detail::iq::kIq3SGrid[256], 0x05090507u);
  EXPECT_EQ(detail::iq::kIq1SGrid[1024], 0x0000000000ff0100u);
  EXPECT_EQ(detail::iq::kIq1SGrid[2047], 0x0101010101010101u);
}

TEST(codec_iquants, decodes_hand_built_iq2_xxs) {
  auto b = zero_block(GgmlType::IQ2_XXS);
  put16(b, 0, kHalfOne);
  b[2] = 1;  // group 0, first 8 values: grid point 1 = {43, 8, 8, 8, 8, 8, 8, 8}
  // Sign index 1 (values 0 and 7 negative) for the first 8; scale 2: 1 * 2.5 * 0.25 = 0.625.
  put32(b, 6, 1u | (2u << 28));
  const auto y = decode_block(GgmlType::IQ2_XXS, b);
  const std::vector<float> first8 = {-26.875f, 5, 5, 5, 5, 5, 5, -5};
  EXPECT_EQ(std::vector<float>(y.begin(), y.begin() + 8), first8);
  EXPECT_EQ(y[8], 5.0f);
  EXPECT_EQ(y[32], 1.0f);  // zero bytes: scale 0.125 times grid 8
  EXPECT_EQ(y[255], 1.0f);
}

TEST(codec_iquants, decodes_hand_built_iq2_xs) {
  auto b = zero_block(GgmlType::IQ2_XS);
  put16(b, 0, kHalfOne);
  put16(b, 2, static_cast<uint16_t>(1 | (1 << 9)));  // grid 1, sign index 1
  b[66] = 0x31;  // scales of group 0: 1 (values 0-15), 3 (values 16-31)
  const auto y = decode_block(GgmlType::IQ2_XS, b);
  EXPECT_EQ(y[0], -43 * 0.375f);
  EXPECT_EQ(y[1], 3.0f);
  EXPECT_EQ(y[7], -3.0f);
  EXPECT_EQ(y[16], 7.0f);  // 8 * 3.5 * 0.25
  EXPECT_EQ(y[32], 1.0f);
}

TEST(codec_iquants, decodes_hand_built_iq2_s) {
  auto b = zero_block(GgmlType::IQ2_S);
  put16(b, 0, kHalfOne);
  b[66] = 1 << 2;    // qh of group 0: high index bits 01 for its second 8 values
  b[34 + 1] = 0x80;  // signs of values 8-15: value 15 negative
  b[74] = 0x03;      // scale 3 for values 0-15: 3.5 * 0.25
  const auto y = decode_block(GgmlType::IQ2_S, b);
  EXPECT_EQ(y[0], 7.0f);
  // Grid point 256 = {25, 25, 25, 25, 25, 8, 25, 8}.
  const std::vector<float> second8 = {21.875f, 21.875f, 21.875f, 21.875f,
                                      21.875f, 7.0f,    21.875f, -7.0f};
  EXPECT_EQ(std::vector<float>(y.begin() + 8, y.begin() + 16), second8);
  EXPECT_EQ(y[16], 1.0f);
}

TEST(codec_iquants, decodes_hand_built_iq3_xxs) {
  auto b = zero_block(GgmlType::IQ3_XXS);
  put16(b, 0, kHalfOne);
  b[2 + 1] = 1;                   // values 4-7: grid point 1 = {20, 4, 4, 4}
  put32(b, 66, 1u | (1u << 28));  // sign index 1, scale 1: 1.5 * 0.5
  const auto y = decode_block(GgmlType::IQ3_XXS, b);
  const std::vector<float> first8 = {-3, 3, 3, 3, 15, 3, 3, -3};
  EXPECT_EQ(std::vector<float>(y.begin(), y.begin() + 8), first8);
  EXPECT_EQ(y[32], 1.0f);  // 4 * 0.5 * 0.5
}

TEST(codec_iquants, decodes_hand_built_iq3_s) {
  auto b = zero_block(GgmlType::IQ3_S);
  put16(b, 0, kHalfOne);
  b[2 + 0] = 1;   // values 0-3: grid point 1 = {3, 1, 1, 1}
  b[66] = 0x02;   // ninth index bit for values 4-7: grid point 256 = {7, 5, 9, 5}
  b[74] = 0x01;   // value 0 negative
  b[106] = 0x21;  // scales: group 0 -> 1 + 2*1 = 3, group 1 -> 1 + 2*2 = 5
  const auto y = decode_block(GgmlType::IQ3_S, b);
  const std::vector<float> first8 = {-9, 3, 3, 3, 21, 15, 27, 15};
  EXPECT_EQ(std::vector<float>(y.begin(), y.begin() + 8), first8);
  EXPECT_EQ(y[32], 5.0f);  // grid 0 = {1, 1, 1, 1}
  EXPECT_EQ(y[64], 1.0f);
}

TEST(codec_iquants, decodes_hand_built_iq1_s) {
  auto b = zero_block(GgmlType::IQ1_S);
  put16(b, 0, kHalfOne);
  b[2 + 1] = 1;                                             // values 8-15: grid point 1
  put16(b, 34, static_cast<uint16_t>(0x8000 | (2 << 12)));  // scale 2*2+1 = 5, delta -1/8
  put16(b, 36, static_cast<uint16_t>(4 << 3));              // group 1: values 40-47 use grid 1024
  const auto y = decode_block(GgmlType::IQ1_S, b);
  EXPECT_EQ(y[0], -5.625f);  // 5 * (-1 - 0.125)
  EXPECT_EQ(y[8], 4.375f);   // 5 * (1 - 0.125)
  EXPECT_EQ(y[9], -5.625f);
  EXPECT_EQ(y[32], -0.875f);  // 1 * (-1 + 0.125)
  const std::vector<float> g1024 = {0.125f, 1.125f, -0.875f, 0.125f,
                                    0.125f, 0.125f, 0.125f,  0.125f};
  EXPECT_EQ(std::vector<float>(y.begin() + 40, y.begin() + 48), g1024);
}

TEST(codec_iquants, decodes_hand_built_iq1_m) {
  auto b = zero_block(GgmlType::IQ1_M);
  // fp16 1.0 = 0x3C00 is spread over the top nibbles of the scale words: 0, 0, 0xC, 0x3.
  const uint16_t s0 = static_cast<uint16_t>(1 | (2 << 3));  // group 0: scales 3 and 5
  put16(b, 48, s0);
  put16(b, 52, 0xC000);
  put16(b, 54, 0x3000);
  b[1] = 1;      // values 8-15: grid point 1
  b[32] = 0x80;  // values 8-15: delta -1/8
  b[33] = 0x04;  // values 16-23: grid point 1024
  const auto y = decode_block(GgmlType::IQ1_M, b);
  EXPECT_EQ(y[0], -2.625f);  // 3 * (-1 + 0.125)
  EXPECT_EQ(y[8], 2.625f);   // 3 * (1 - 0.125)
  EXPECT_EQ(y[9], -3.375f);
  const std::vector<float> g1024 = {0.625f, 5.625f, -4.375f, 0.625f,
                                    0.625f, 0.625f, 0.625f,  0.625f};
  EXPECT_EQ(std::vector<float>(y.begin() + 16, y.begin() + 24), g1024);
  EXPECT_EQ(y[32], -0.875f);  // scale 2*0+1
}

TEST(codec_iquants, decodes_hand_built_iq4_nl_and_iq4_xs) {
  auto b = zero_block(GgmlType::IQ4_NL);
  put16(b, 0, 0x3800);  // 0.5
  for (int j = 0; j < 16; ++j) b[2 + j] = static_cast<uint8_t>(j | ((15 - j) << 4));
  const auto y = decode_block(GgmlType::IQ4_NL, b);
  EXPECT_EQ(y[0], -63.5f);
  EXPECT_EQ(y[8], 0.5f);
  EXPECT_EQ(y[15], 56.5f);
  EXPECT_EQ(y[16], 56.5f);
  EXPECT_EQ(y[31], -63.5f);

  auto x = zero_block(GgmlType::IQ4_XS);
  put16(x, 0, kHalfOne);
  put16(x, 2, 0x0002 | (0x3 << 14));  // high scale bits: group 0 -> 2, group 7 -> 3
  x[4] = 0x05;                        // low scale bits: group 0 -> 5, group 1 -> 0
  x[7] = 0xF0;                        // group 7 -> 15
  x[8] = 0xF8;                        // values 0 and 16: codes 8 and 15
  const auto z = decode_block(GgmlType::IQ4_XS, x);
  EXPECT_EQ(z[0], 5.0f * 1);  // (32 + 5 - 32) * 1
  EXPECT_EQ(z[16], 5.0f * 113);
  EXPECT_EQ(z[32], -32.0f * -127);  // group 1: scale 0 - 32
  EXPECT_EQ(z[224], 31.0f * -127);  // group 7: 48 + 15 - 32
}

// --- conformance with ggml ---

const GgmlType kIquantTypes[] = {GgmlType::IQ2_XXS, GgmlType::IQ2_XS, GgmlType::IQ2_S,
                                 GgmlType::IQ3_XXS, GgmlType::IQ3_S,  GgmlType::IQ1_S,
                                 GgmlType::IQ1_M,   GgmlType::IQ4_NL, GgmlType::IQ4_XS};

void check_ggml_quantized(GgmlType t) {
  uint64_t seed = 1;
  for (const int64_t n_per_row : {256, 1024}) {
    const auto imatrix = testing::make_importance(n_per_row, seed);
    for (const auto d : testing::all_dists()) {
      const int64_t nrows = 2;
      const auto rows = testing::make_rows(d, nrows, n_per_row, ++seed);
      const std::string what = testing::dist_name(d) + " rows of " + std::to_string(n_per_row);
      if (!requires_importance(t))
        testing::check_decode_of_ggml_quant(t, rows, nrows, n_per_row, nullptr, what);
      testing::check_decode_of_ggml_quant(t, rows, nrows, n_per_row, imatrix.data(),
                                          what + " with imatrix");
    }
  }
}

TEST(codec_iquants, iq2_xxs_matches_ggml) {
  GGUF_REQUIRE_GGML();
  check_ggml_quantized(GgmlType::IQ2_XXS);
}
TEST(codec_iquants, iq2_xs_matches_ggml) {
  GGUF_REQUIRE_GGML();
  check_ggml_quantized(GgmlType::IQ2_XS);
}
TEST(codec_iquants, iq2_s_matches_ggml) {
  GGUF_REQUIRE_GGML();
  check_ggml_quantized(GgmlType::IQ2_S);
}
TEST(codec_iquants, iq3_xxs_matches_ggml) {
  GGUF_REQUIRE_GGML();
  check_ggml_quantized(GgmlType::IQ3_XXS);
}
TEST(codec_iquants, iq3_s_matches_ggml) {
  GGUF_REQUIRE_GGML();
  check_ggml_quantized(GgmlType::IQ3_S);
}
TEST(codec_iquants, iq1_s_matches_ggml) {
  GGUF_REQUIRE_GGML();
  check_ggml_quantized(GgmlType::IQ1_S);
}
TEST(codec_iquants, iq1_m_matches_ggml) {
  GGUF_REQUIRE_GGML();
  check_ggml_quantized(GgmlType::IQ1_M);
}
TEST(codec_iquants, iq4_nl_matches_ggml) {
  GGUF_REQUIRE_GGML();
  check_ggml_quantized(GgmlType::IQ4_NL);
}
TEST(codec_iquants, iq4_xs_matches_ggml) {
  GGUF_REQUIRE_GGML();
  check_ggml_quantized(GgmlType::IQ4_XS);
}

TEST(codec_iquants, random_bytes_match_ggml) {
  GGUF_REQUIRE_GGML();
  for (const auto t : kIquantTypes)
    for (uint64_t seed = 1; seed <= 4; ++seed) testing::check_decode_of_random_bytes(t, 64, seed);
}

// The encoders: ggml_quantize_chunk's bytes for every distribution, several row lengths, with
// random, uniform and all-zero importance, and without (for the types that allow it); and the
// decoded floats of our bytes equal ggml's decode of them.
void check_encode_against_ggml(GgmlType t) {
  struct Shape {
    int64_t n_per_row, nrows;
  };
  uint64_t seed = 100;  // GGUF_TEST_SEED salts the data (see distributions.h)
  int64_t rows = 0;
  for (testing::Dist d : testing::all_dists()) {
    std::vector<Shape> shapes = {{256, 24}, {1024, 6}, {7 * 256, 3}};
    if (traits(t).block_size == 32) shapes.push_back({96, 8});  // IQ4_NL: rows of 3 blocks
    for (const Shape s : shapes) {
      for (int mode = 0; mode < 4; ++mode) {
        ++seed;
        if (mode == 3 && requires_importance(t)) continue;
        std::vector<float> imp = testing::make_importance(s.n_per_row, seed);
        if (mode == 1) imp.assign(imp.size(), 1.0f);
        if (mode == 2) imp.assign(imp.size(), 0.0f);
        if (mode == 3) imp.clear();
        const auto x = testing::make_rows(d, s.nrows, s.n_per_row, seed);
        const std::string what =
            fmt::format("{}, {} rows of {}, importance {}", testing::dist_name(d), s.nrows,
                        s.n_per_row, std::array{"random", "ones", "zero", "none"}[mode]);
        testing::expect_encode_matches_ggml(t, x, s.nrows, s.n_per_row,
                                            imp.empty() ? nullptr : imp.data(), what);
        std::vector<uint8_t> q(*row_bytes(t, s.n_per_row) * s.nrows);
        quantize(t, x, s.nrows, s.n_per_row, imp, q);
        testing::expect_decode_matches_ggml(t, q, s.nrows * s.n_per_row, what);
        rows += s.nrows;
      }
    }
  }
  // Rows whose groups of 32 are partly all-zero (ggml skips such groups in ways that shift
  // later ones, e.g. IQ3_S's index and sign positions).
  for (int zero_every : {2, 3, 5}) {
    auto x = testing::make_rows(testing::Dist::kGaussian, 8, 1024, ++seed);
    for (size_t g = 0; g < x.size() / 32; ++g)
      if (g % zero_every == 1) std::fill_n(x.begin() + 32 * g, 32, 0.0f);
    const auto imp = testing::make_importance(1024, seed);
    testing::expect_encode_matches_ggml(t, x, 8, 1024, imp.data(),
                                        fmt::format("every {}th group zero", zero_every));
  }
  // Tiny importance (1e-30) on rows of zeros with one tiny value or all alike: a super-block
  // whose every group scale comes out 0 still carries what ggml wrote for its groups (iq1_s
  // writes the index highs before it finds the block empty).
  for (const float v : {-0x1p-37f, 0x1p-20f, 3e-9f}) {
    std::vector<float> x(4 * 256, 0.0f), imp(256, 1e-30f);
    x[255] = v;
    for (size_t i = 256; i < 512; ++i) x[i] = v;
    x[600] = -v;
    testing::expect_encode_matches_ggml(t, x, 4, 256, imp.data(),
                                        fmt::format("tiny weights, {}", v));
  }
  EXPECT_GT(rows, 500);
}

TEST(codec_iquants, iq2_xxs_encode_matches_ggml) {
  GGUF_REQUIRE_GGML();
  check_encode_against_ggml(GgmlType::IQ2_XXS);
}

// The portable sweep (the AVX-512 one is what runs above where the CPU has it).
TEST(codec_iquants, iq2_xxs_portable_encode_matches_ggml) {
  GGUF_REQUIRE_GGML();
  testing::PortableCodecs portable;
  check_encode_against_ggml(GgmlType::IQ2_XXS);
}

// The two sweeps of IQ2_XXS give the same bytes on many rows, without ggml at hand.
TEST(codec_iquants, iq2_xxs_avx512_sweep_equals_portable) {
  if (!detail::codec_avx512()) GTEST_SKIP() << "no AVX-512 on this CPU, or GGUF_CODEC_SCALAR set";
  int64_t blocks = 0;
  uint64_t seed = 900;
  for (testing::Dist d : testing::all_dists()) {
    for (int mode = 0; mode < 3; ++mode) {
      const auto x = testing::make_rows(d, 16, 1024, ++seed);
      std::vector<float> imp = testing::make_importance(1024, seed);
      if (mode == 1) imp.assign(imp.size(), 1.0f);
      if (mode == 2)
        std::transform(x.begin(), x.begin() + 1024, imp.begin(), [](float v) { return v * v; });
      std::vector<uint8_t> fast(*row_bytes(GgmlType::IQ2_XXS, 1024) * 16), plain(fast.size());
      quantize(GgmlType::IQ2_XXS, x, 16, 1024, imp, fast);
      {
        testing::PortableCodecs portable;
        quantize(GgmlType::IQ2_XXS, x, 16, 1024, imp, plain);
      }
      ASSERT_EQ(fast, plain) << testing::dist_name(d) << ", importance mode " << mode
                             << testing::salt_note();
      blocks += 64;
    }
  }
  EXPECT_GT(blocks, 500);
}

// Both sweeps on rows holding NaN, infinity or huge values, where ggml returns bytes.
TEST(codec_iquants, iq2_xxs_both_sweeps_on_non_finite_rows) {
  GGUF_REQUIRE_GGML();
  for (bool portable : {false, true}) {
    std::optional<testing::PortableCodecs> scope;
    if (portable) scope.emplace();
    for (float bad :
         {std::numeric_limits<float>::quiet_NaN(), std::numeric_limits<float>::infinity(), -1e20f,
          std::numeric_limits<float>::max()}) {
      auto x = testing::make_rows(testing::Dist::kGaussian, 2, 256, 5);
      x[40] = bad;
      testing::expect_encode_matches_ggml(
          GgmlType::IQ2_XXS, x, 2, 256, testing::make_importance(256, 5).data(),
          fmt::format("{} sweep, a {} in the row", portable ? "portable" : "default", bad));
    }
  }
}

TEST(codec_iquants, iq1_s_encode_matches_ggml) {
  GGUF_REQUIRE_GGML();
  check_encode_against_ggml(GgmlType::IQ1_S);
}
TEST(codec_iquants, iq1_m_encode_matches_ggml) {
  GGUF_REQUIRE_GGML();
  check_encode_against_ggml(GgmlType::IQ1_M);
}

// IQ1_S and IQ1_M search their level splits 16 at a time in AVX-512 lanes where the CPU has it
// (above); the portable searches give ggml's bytes too.
TEST(codec_iquants, iq1_s_portable_encode_matches_ggml) {
  GGUF_REQUIRE_GGML();
  testing::PortableCodecs portable;
  check_encode_against_ggml(GgmlType::IQ1_S);
}
TEST(codec_iquants, iq1_m_portable_encode_matches_ggml) {
  GGUF_REQUIRE_GGML();
  testing::PortableCodecs portable;
  check_encode_against_ggml(GgmlType::IQ1_M);
}

// Both paths of a type give the same bytes on many rows (and NaN rows give the same error),
// without ggml at hand.
void expect_avx512_encode_equals_portable(GgmlType t, uint64_t seed) {
  int64_t blocks = 0;
  for (testing::Dist d : testing::all_dists()) {
    for (int mode = 0; mode < 4; ++mode) {
      const auto x = testing::make_rows(d, 16, 1024, ++seed);
      std::vector<float> imp = testing::make_importance(1024, seed);
      if (mode == 1) imp.assign(imp.size(), 1.0f);
      if (mode == 2)
        std::transform(x.begin(), x.begin() + 1024, imp.begin(), [](float v) { return v * v; });
      if (mode == 3) {
        if (requires_importance(t)) continue;
        imp.clear();
      }
      std::vector<uint8_t> fast(*row_bytes(t, 1024) * 16), plain(fast.size());
      quantize(t, x, 16, 1024, imp, fast);
      {
        testing::PortableCodecs portable;
        quantize(t, x, 16, 1024, imp, plain);
      }
      ASSERT_EQ(fast, plain) << traits(t).name << ", " << testing::dist_name(d)
                             << ", importance mode " << mode << testing::salt_note();
      blocks += 64;
    }
  }
  EXPECT_GT(blocks, 500);
}

// IQ2_XS, IQ2_S (19 trials, groups of 16) and IQ3_XXS, IQ3_S (31 and 19 trials, codes 0..7 in
// groups of 4) run the AVX-512 sweep of IQ2_XXS where the CPU has it (above); their portable
// sweeps give ggml's bytes too, and both paths the same bytes.
TEST(codec_iquants, iq2_xs_portable_encode_matches_ggml) {
  GGUF_REQUIRE_GGML();
  testing::PortableCodecs portable;
  check_encode_against_ggml(GgmlType::IQ2_XS);
}
TEST(codec_iquants, iq2_s_portable_encode_matches_ggml) {
  GGUF_REQUIRE_GGML();
  testing::PortableCodecs portable;
  check_encode_against_ggml(GgmlType::IQ2_S);
}

TEST(codec_iquants, iq2_avx512_sweeps_equal_portable) {
  if (!detail::codec_avx512()) GTEST_SKIP() << "no AVX-512 on this CPU, or GGUF_CODEC_SCALAR set";
  expect_avx512_encode_equals_portable(GgmlType::IQ2_XS, 1300);
  expect_avx512_encode_equals_portable(GgmlType::IQ2_S, 1400);
}

TEST(codec_iquants, iq3_xxs_portable_encode_matches_ggml) {
  GGUF_REQUIRE_GGML();
  testing::PortableCodecs portable;
  check_encode_against_ggml(GgmlType::IQ3_XXS);
}
TEST(codec_iquants, iq3_s_portable_encode_matches_ggml) {
  GGUF_REQUIRE_GGML();
  testing::PortableCodecs portable;
  check_encode_against_ggml(GgmlType::IQ3_S);
}

TEST(codec_iquants, iq3_avx512_sweeps_equal_portable) {
  if (!detail::codec_avx512()) GTEST_SKIP() << "no AVX-512 on this CPU, or GGUF_CODEC_SCALAR set";
  expect_avx512_encode_equals_portable(GgmlType::IQ3_XXS, 1500);
  expect_avx512_encode_equals_portable(GgmlType::IQ3_S, 1600);
}

TEST(codec_iquants, iq1_avx512_splits_equal_portable) {
  if (!detail::codec_avx512()) GTEST_SKIP() << "no AVX-512 on this CPU, or GGUF_CODEC_SCALAR set";
  expect_avx512_encode_equals_portable(GgmlType::IQ1_S, 1100);
  expect_avx512_encode_equals_portable(GgmlType::IQ1_M, 1200);
}

// The lattice decoders (IQ1_M, IQ2_*, IQ3_*) and IQ4_NL, IQ4_XS have AVX-512 twins too: the
// portable ones decode
// encoded rows (ggml's bytes, as the tests above hold; encoding them here spares building
// ggml's grids) and random bytes as ggml does (the default ones are checked above).
TEST(codec_iquants, portable_lattice_decoders_match_ggml) {
  GGUF_REQUIRE_GGML();
  testing::PortableCodecs portable;
  uint64_t seed = 1700;
  for (const auto t : {GgmlType::IQ1_M, GgmlType::IQ2_XXS, GgmlType::IQ2_XS, GgmlType::IQ2_S,
                       GgmlType::IQ3_XXS, GgmlType::IQ3_S, GgmlType::IQ4_NL, GgmlType::IQ4_XS}) {
    for (const auto d : testing::all_dists()) {
      const auto x = testing::make_rows(d, 4, 1024, ++seed);
      const auto imp = testing::make_importance(1024, seed);
      std::vector<uint8_t> q(*row_bytes(t, 1024) * 4);
      quantize(t, x, 4, 1024, imp, q);
      testing::expect_decode_matches_ggml(t, q, 4 * 1024, testing::dist_name(d));
    }
    for (uint64_t r = 1; r <= 4; ++r) testing::check_decode_of_random_bytes(t, 64, r);
  }
}
TEST(codec_iquants, iq2_xs_encode_matches_ggml) {
  GGUF_REQUIRE_GGML();
  check_encode_against_ggml(GgmlType::IQ2_XS);
}
TEST(codec_iquants, iq2_s_encode_matches_ggml) {
  GGUF_REQUIRE_GGML();
  check_encode_against_ggml(GgmlType::IQ2_S);
}
TEST(codec_iquants, iq3_xxs_encode_matches_ggml) {
  GGUF_REQUIRE_GGML();
  check_encode_against_ggml(GgmlType::IQ3_XXS);
}
TEST(codec_iquants, iq3_s_encode_matches_ggml) {
  GGUF_REQUIRE_GGML();
  check_encode_against_ggml(GgmlType::IQ3_S);
}
TEST(codec_iquants, iq4_nl_encode_matches_ggml) {
  GGUF_REQUIRE_GGML();
  check_encode_against_ggml(GgmlType::IQ4_NL);
}
TEST(codec_iquants, iq4_xs_encode_matches_ggml) {
  GGUF_REQUIRE_GGML();
  check_encode_against_ggml(GgmlType::IQ4_XS);
}

// Non-finite inputs: the 4-bit non-linear encoders produce ggml's bytes even then (the lattice
// encoders refuse such rows, see below, where ggml may abort).
TEST(codec_iquants, iq4_encoders_match_ggml_on_non_finite_rows) {
  GGUF_REQUIRE_GGML();
  auto x = testing::make_rows(testing::Dist::kGaussian, 4, 512, 77);
  x[3] = std::numeric_limits<float>::quiet_NaN();
  x[600] = std::numeric_limits<float>::infinity();
  x[1100] = -std::numeric_limits<float>::infinity();
  x[1500] = std::numeric_limits<float>::quiet_NaN();
  x[1501] = std::numeric_limits<float>::infinity();
  const auto imp = testing::make_importance(512, 77);
  for (GgmlType t : {GgmlType::IQ4_NL, GgmlType::IQ4_XS}) {
    testing::expect_encode_matches_ggml(t, x, 4, 512, nullptr, "non-finite, no importance");
    testing::expect_encode_matches_ggml(t, x, 4, 512, imp.data(), "non-finite, importance");
  }
}

// Whether ggml_quantize_chunk aborts on these rows, found by running it in a child process.
bool ggml_aborts_on(GgmlType t, const std::vector<float>& x, int64_t nrows, int64_t n,
                    const float* imp) {
  const pid_t pid = ::fork();
  if (pid == 0) {
    const int null = ::open("/dev/null", O_WRONLY);  // ggml's backtrace and table chatter
    ::dup2(null, 1);
    ::dup2(null, 2);
    std::vector<uint8_t> q(*row_bytes(t, static_cast<uint64_t>(n)) * static_cast<size_t>(nrows));
    testing::GgmlRef::get().quantize_chunk(testing::type_id(t), x.data(), q.data(), 0, nrows, n,
                                           imp);
    std::_Exit(0);
  }
  int status = 0;
  ::waitpid(pid, &status, 0);
  return !(WIFEXITED(status) && WEXITSTATUS(status) == 0);
}

// The lattice encoders on rows holding NaN, infinity or values whose squares overflow float.
// Where ggml aborts (GGML_ASSERT(scale >= 0)), we refuse the row with an error; where ggml
// returns, we write its bytes, garbage or not. Never a crash, never an index off the lattice.
// (With these rows ggml aborts for iq2_xs, iq2_s, iq3_xxs and iq3_s on all four values and
// for iq1_m on all but NaN; iq1_s and iq2_xxs return.)
TEST(codec_iquants, lattice_encoders_on_non_finite_or_huge_rows) {
  GGUF_REQUIRE_GGML();
  int refused = 0;
  for (GgmlType t : {GgmlType::IQ1_S, GgmlType::IQ1_M, GgmlType::IQ2_XXS, GgmlType::IQ2_XS,
                     GgmlType::IQ2_S, GgmlType::IQ3_XXS, GgmlType::IQ3_S}) {
    // ggml builds its lattice tables on first use: once here, not in every child.
    testing::expect_encode_matches_ggml(t, testing::make_rows(testing::Dist::kGaussian, 2, 256, 5),
                                        2, 256, testing::make_importance(256, 5).data(), "clean");
    for (float bad :
         {std::numeric_limits<float>::quiet_NaN(), std::numeric_limits<float>::infinity(), -1e20f,
          std::numeric_limits<float>::max()}) {
      auto x = testing::make_rows(testing::Dist::kGaussian, 2, 256, 5);
      x[40] = bad;
      const auto imp = testing::make_importance(256, 5);
      const bool aborts = ggml_aborts_on(t, x, 2, 256, imp.data());
      refused += aborts;
      for (const bool portable : {false, true}) {  // both paths of the types that have two
        SCOPED_TRACE(
            fmt::format("{} with {}{}", traits(t).name, bad, portable ? ", portable" : ""));
        std::optional<testing::PortableCodecs> scope;
        if (portable) scope.emplace();
        if (!aborts) {
          testing::expect_encode_matches_ggml(t, x, 2, 256, imp.data(), "ggml returns");
          continue;
        }
        std::vector<uint8_t> q(*row_bytes(t, 256) * 2);
        try {
          quantize(t, x, 2, 256, imp, q);
          ADD_FAILURE() << "ggml aborts, we wrote bytes" << testing::salt_note();
        } catch (const Error& e) {
          EXPECT_NE(std::string(e.what()).find("finite"), std::string::npos)
              << e.what() << testing::salt_note();
        }
      }
    }
  }
  EXPECT_EQ(refused, 19) << testing::salt_note();  // the child-process probe itself works
}

TEST(codec_iquants, iq2_xxs_encode_needs_importance_and_whole_blocks) {
  const std::vector<float> x(256, 0.5f);
  std::vector<uint8_t> q(66);
  try {
    quantize(GgmlType::IQ2_XXS, x, 1, 256, {}, q);
    ADD_FAILURE() << "no error without importance";
  } catch (const Error& e) {
    EXPECT_STREQ(e.what(), "quantize iq2_xxs: this type needs an importance matrix");
  }
  const std::vector<float> imp(128, 1.0f), y(128, 0.5f);
  EXPECT_THROW(quantize(GgmlType::IQ2_XXS, y, 1, 128, imp, q), Error);
}

TEST(codec_iquants, all_iquant_types_decode) {
  for (const auto t : kIquantTypes) EXPECT_TRUE(can_decode(t)) << traits(t).name;
}

}  // namespace
}  // namespace gguf

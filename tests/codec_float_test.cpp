// Float-family codecs and gguf/fp16.h: hand-checked conversions, C-cast decoding of f64 and
// integer tensors, and conformance with ggml over every half/bf16 pattern and millions of
// random and edge-case floats.
#include <gtest/gtest.h>

#include <bit>
#include <cfloat>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <span>
#include <string_view>
#include <vector>

#include "codec_bits.h"
#include "distributions.h"
#include "ggml_ref.h"
#include "gguf/base/error.h"
#include "gguf/base/fp16.h"
#include "gguf/codecs/codecs.h"
#include "gguf/format/types.h"

namespace gguf {
namespace {

using testing::GgmlRef;
using testing::same_bytes;
using testing::same_float_bits;

uint32_t bits(float f) { return std::bit_cast<uint32_t>(f); }
float from_bits(uint32_t u) { return std::bit_cast<float>(u); }

template <typename T>
std::vector<uint8_t> as_bytes(const std::vector<T>& v) {
  std::vector<uint8_t> b(v.size() * sizeof(T));
  std::memcpy(b.data(), v.data(), b.size());
  return b;
}

std::vector<float> decode(GgmlType t, const std::vector<uint8_t>& bytes, size_t n) {
  std::vector<float> out(n);
  dequantize(t, bytes, out);
  return out;
}

// --- Without ggml ------------------------------------------------------------------------

TEST(codec_float, fp16_encodes_hand_checked_values) {
  EXPECT_EQ(fp32_to_fp16(1.0f), 0x3C00);
  EXPECT_EQ(fp32_to_fp16(-2.0f), 0xC000);
  EXPECT_EQ(fp32_to_fp16(-0.0f), 0x8000);
  EXPECT_EQ(fp32_to_fp16(65504.0f), 0x7BFF);
  EXPECT_EQ(fp32_to_fp16(65519.996f), 0x7BFF);  // below the midpoint to 65536
  EXPECT_EQ(fp32_to_fp16(65520.0f), 0x7C00);    // the midpoint rounds (to even) to inf
  EXPECT_EQ(fp32_to_fp16(-FLT_MAX), 0xFC00);
  EXPECT_EQ(fp32_to_fp16(INFINITY), 0x7C00);
  EXPECT_EQ(fp32_to_fp16(1.0f + 0x1p-11f), 0x3C00);        // tie, to even
  EXPECT_EQ(fp32_to_fp16(1.0f + 3 * 0x1p-11f), 0x3C02);    // tie, to even (up)
  EXPECT_EQ(fp32_to_fp16(0x1p-14f), 0x0400);               // smallest normal
  EXPECT_EQ(fp32_to_fp16(0x1p-14f - 0x1p-25f), 0x0400);    // rounds up into the normals
  EXPECT_EQ(fp32_to_fp16(0x1p-24f), 0x0001);               // smallest subnormal
  EXPECT_EQ(fp32_to_fp16(0x1p-25f), 0x0000);               // tie, to even (zero)
  EXPECT_EQ(fp32_to_fp16(3 * 0x1p-25f), 0x0002);           // tie, to even (two)
  EXPECT_EQ(fp32_to_fp16(0x1p-25f + 0x1p-40f), 0x0001);    // just above the tie
  EXPECT_EQ(fp32_to_fp16(from_bits(0x00000001)), 0x0000);  // fp32 subnormal
  EXPECT_EQ(fp32_to_fp16(from_bits(0x7F800001)), 0x7E00);  // any NaN: 0x7e00 with its sign
  EXPECT_EQ(fp32_to_fp16(from_bits(0xFFFFFFFF)), 0xFE00);
}

TEST(codec_float, fp16_decodes_hand_checked_values) {
  EXPECT_EQ(bits(fp16_to_fp32(0x3C00)), bits(1.0f));
  EXPECT_EQ(bits(fp16_to_fp32(0x8000)), 0x80000000u);
  EXPECT_EQ(fp16_to_fp32(0x7BFF), 65504.0f);
  EXPECT_EQ(fp16_to_fp32(0x0001), 0x1p-24f);
  EXPECT_EQ(fp16_to_fp32(0x83FF), -1023 * 0x1p-24f);
  EXPECT_EQ(bits(fp16_to_fp32(0xFC00)), 0xFF800000u);
  EXPECT_EQ(bits(fp16_to_fp32(0x7E00)), 0x7FC00000u);
  EXPECT_EQ(bits(fp16_to_fp32(0x7C01)), 0x7FC02000u);  // signalling NaN comes out quiet
  EXPECT_EQ(bits(fp16_to_fp32(0xFD55)), 0xFFEAA000u);
}

TEST(codec_float, bf16_hand_checked_values) {
  EXPECT_EQ(fp32_to_bf16(1.0f), 0x3F80);
  EXPECT_EQ(fp32_to_bf16(1.0f + 0x1p-8f), 0x3F80);      // tie, to even
  EXPECT_EQ(fp32_to_bf16(1.0f + 3 * 0x1p-8f), 0x3F82);  // tie, to even (up)
  EXPECT_EQ(fp32_to_bf16(FLT_MAX), 0x7F80);             // rounds to inf
  EXPECT_EQ(fp32_to_bf16(from_bits(0x00000001)), 0x0000);
  EXPECT_EQ(fp32_to_bf16(from_bits(0x7F800001)), 0x7FC0);  // quieted with bit 6
  EXPECT_EQ(fp32_to_bf16(from_bits(0xFF810000)), 0xFFC1);
  EXPECT_EQ(bits(bf16_to_fp32(0x7F81)), 0x7F810000u);  // decoding keeps every bit
  EXPECT_EQ(bits(bf16_to_fp32(0xC049)), 0xC0490000u);
}

TEST(codec_float, f32_round_trips_every_bit) {
  const std::vector<float> x = {1.5f,         -0.0f,   from_bits(0x7F800001), from_bits(0xFFC12345),
                                from_bits(1), INFINITY};
  std::vector<uint8_t> b(x.size() * 4);
  quantize(GgmlType::F32, x, 2, 3, {}, b);
  EXPECT_EQ(b, as_bytes(x));
  EXPECT_TRUE(same_float_bits(decode(GgmlType::F32, b, x.size()), x));
}

TEST(codec_float, f16_and_bf16_rows_use_the_scalar_conversions) {
  std::vector<float> x = {1.0f, 65520.0f, 0x1p-25f, from_bits(0xFF800001), -3.140625f, 1e-3f};
  std::vector<uint8_t> h(x.size() * 2), b(x.size() * 2);
  quantize(GgmlType::F16, x, 1, 6, {}, h);
  quantize(GgmlType::BF16, x, 3, 2, {}, b);
  for (size_t i = 0; i < x.size(); ++i) {
    uint16_t hv, bv;
    std::memcpy(&hv, h.data() + 2 * i, 2);
    std::memcpy(&bv, b.data() + 2 * i, 2);
    EXPECT_EQ(hv, fp32_to_fp16(x[i])) << i;
    EXPECT_EQ(bv, fp32_to_bf16(x[i])) << i;
  }
  const auto hd = decode(GgmlType::F16, h, x.size());
  EXPECT_EQ(hd[0], 1.0f);
  EXPECT_EQ(bits(hd[1]), 0x7F800000u);
  EXPECT_EQ(hd[4], -3.140625f);
}

// The bf16 decoder converts element by element up to the output's next cache line, then 16
// at a time with aligned stores, then the tail: every split of a row must give the same bits.
TEST(codec_float, bf16_decodes_at_every_output_alignment_and_length) {
  std::mt19937 rng(7);
  std::vector<uint8_t> src(2 * 200);
  for (auto& v : src) v = static_cast<uint8_t>(rng());
  std::vector<float> out(16 + 200 + 16);
  for (size_t shift = 0; shift < 16; ++shift) {
    for (size_t n : {0, 1, 7, 15, 16, 17, 31, 32, 33, 63, 64, 65, 127, 200}) {
      std::fill(out.begin(), out.end(), -1.0f);
      dequantize(GgmlType::BF16, std::span(src).first(2 * n), std::span(out).subspan(shift, n));
      for (size_t i = 0; i < n; ++i) {
        uint16_t h;
        std::memcpy(&h, src.data() + 2 * i, 2);
        ASSERT_EQ(bits(out[shift + i]), bits(bf16_to_fp32(h))) << shift << " " << n << " " << i;
      }
      for (size_t i = 0; i < out.size(); ++i) {
        if (i < shift || i >= shift + n) {
          ASSERT_EQ(out[i], -1.0f) << "wrote outside, " << i;
        }
      }
    }
  }
}

// ggml has no decoder for these; the values are what a C cast gives, checked by hand.
TEST(codec_float, integers_and_f64_decode_like_a_c_cast) {
  const std::vector<int8_t> i8 = {-128, 127, 0, -1};
  EXPECT_EQ(decode(GgmlType::I8, as_bytes(i8), 4), (std::vector<float>{-128, 127, 0, -1}));
  const std::vector<int16_t> i16 = {-32768, 32767, 12345};
  EXPECT_EQ(decode(GgmlType::I16, as_bytes(i16), 3), (std::vector<float>{-32768, 32767, 12345}));
  // Past 2^24 floats are spaced 2 apart: 16777217 ties to even (16777216), 16777219 goes up.
  const std::vector<int32_t> i32 = {16777217, 16777219, -2147483647 - 1, 2147483647};
  EXPECT_EQ(decode(GgmlType::I32, as_bytes(i32), 4),
            (std::vector<float>{16777216.0f, 16777220.0f, -0x1p31f, 0x1p31f}));
  const std::vector<int64_t> i64 = {std::numeric_limits<int64_t>::min(),
                                    std::numeric_limits<int64_t>::max(), (int64_t{1} << 40) + 1};
  EXPECT_EQ(decode(GgmlType::I64, as_bytes(i64), 3),
            (std::vector<float>{-0x1p63f, 0x1p63f, 0x1p40f}));
  const std::vector<double> f64 = {0.1, 1e300, -1e-300, 3 + 0x1p-23, 3 + 3 * 0x1p-23, 1e-46, -2.5};
  const auto y = decode(GgmlType::F64, as_bytes(f64), f64.size());
  EXPECT_EQ(y[0], 0.1f);
  EXPECT_EQ(y[1], INFINITY);
  EXPECT_EQ(bits(y[2]), 0x80000000u);
  EXPECT_EQ(y[3], 3.0f);             // a tie between 3 and 3 + 2^-22: to even
  EXPECT_EQ(y[4], 3.0f + 0x1p-21f);  // a tie between 3 + 2^-22 and 3 + 2^-21: to even
  EXPECT_EQ(y[5], 0.0f);
  EXPECT_EQ(y[6], -2.5f);
  const std::vector<double> nan = {std::bit_cast<double>(0x7FF8000000000123ull)};
  EXPECT_TRUE(std::isnan(decode(GgmlType::F64, as_bytes(nan), 1)[0]));
}

TEST(codec_float, missing_encoder_is_a_usage_error) {
  std::vector<float> x(4);
  std::vector<uint8_t> b(32);
  try {
    quantize(GgmlType::F64, x, 1, 4, {}, b);
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(e.message(), "no encoder for type f64 yet");
    EXPECT_EQ(e.kind(), Error::Kind::kUsage);
  }
}

// --- Against ggml ------------------------------------------------------------------------

TEST(codec_float, every_half_and_bf16_pattern_decodes_like_ggml) {
  GGUF_REQUIRE_GGML();
  std::vector<uint16_t> all(65536);
  for (uint32_t i = 0; i < all.size(); ++i) all[i] = static_cast<uint16_t>(i);
  const auto bytes = as_bytes(all);
  for (const GgmlType t : {GgmlType::F16, GgmlType::BF16}) {
    std::vector<float> ref(all.size());
    ASSERT_TRUE(GgmlRef::get().dequantize_row(static_cast<int>(t), all.data(), ref.data(),
                                              static_cast<int64_t>(all.size())));
    EXPECT_TRUE(same_float_bits(decode(t, bytes, all.size()), ref)) << traits(t).name;
    // Block scales go through the scalar conversion, which has its own fast path.
    std::vector<float> scalar(all.size());
    for (size_t i = 0; i < all.size(); ++i)
      scalar[i] = t == GgmlType::F16 ? fp16_to_fp32(all[i]) : bf16_to_fp32(all[i]);
    EXPECT_TRUE(same_float_bits(scalar, ref)) << traits(t).name << " scalar";
  }
}

// Special and boundary floats, each with neighbours one ulp either side.
std::vector<float> edge_floats() {
  std::vector<uint32_t> centres = {
      0x00000000, 0x00000001, 0x00400000, 0x007FFFFF, 0x00800000, 0x33000000, 0x33800000,
      0x33C00000, 0x387FC000, 0x387FE000, 0x38800000, 0x3F800000, 0x3F801000, 0x477FE000,
      0x477FEFFF, 0x477FF000, 0x47800000, 0x7F7FFFFF, 0x7F7F8000, 0x7F800000, 0x7F800001,
      0x7FBFFFFF, 0x7FC00000, 0x7FFFFFFF, 0x3F808000, 0x3F818000, 0x3F807FFF};
  // Half subnormal ties: k + 0.5 units of 2^-24.
  for (uint32_t k = 0; k < 1024; k += 37) centres.push_back(bits((k + 0.5f) * 0x1p-24f));
  std::vector<float> out;
  for (const uint32_t c : centres) {
    for (const uint32_t sign : {0u, 0x80000000u}) {
      for (int d = -2; d <= 2; ++d) out.push_back(from_bits(sign | ((c + d) & 0x7FFFFFFF)));
    }
  }
  return out;
}

// 4 M floats: uniformly random bit patterns, random values around the half range and the half
// subnormals, and the edge list.
const std::vector<float>& test_floats() {
  static const std::vector<float> x = [] {
    std::vector<float> v = edge_floats();
    std::mt19937 rng(testing::salted(42));
    v.reserve(4 << 20);
    while (v.size() < (4u << 20)) {
      uint32_t u = rng();
      switch (v.size() % 4) {
        case 1:  // exponents 2^-26 .. 2^16: f16 subnormals, normals and overflow
          u = (u & 0x807FFFFFu) | ((0x65u + (u >> 23) % 44) << 23);
          break;
        case 2:  // exponents up to 2^-119 (fp32 subnormals), from 2^120 (bf16 overflow, inf, NaN)
          u = (u & 0x807FFFFFu) | (((u >> 23) % 2 ? 0xF7u + (u >> 24) % 9 : (u >> 24) % 9) << 23);
          break;
        default:
          break;
      }
      v.push_back(from_bits(u));
    }
    return v;
  }();
  return x;
}

// Rows through ggml_quantize_chunk (f16, bf16, f32) and through our quantize().
TEST(codec_float, encodes_like_ggml) {
  GGUF_REQUIRE_GGML();
  constexpr int64_t kRow = 4096;
  std::vector<float> x = test_floats();
  x.resize(x.size() / kRow * kRow);
  const int64_t nrows = static_cast<int64_t>(x.size()) / kRow;
  for (const GgmlType t : {GgmlType::F16, GgmlType::BF16, GgmlType::F32}) {
    const size_t sz = traits(t).type_size;
    std::vector<uint8_t> ours(x.size() * sz), ref(x.size() * sz);
    quantize(t, x, nrows, kRow, {}, ours);
    ASSERT_EQ(GgmlRef::get().quantize_chunk(static_cast<int>(t), x.data(), ref.data(), 0, nrows,
                                            kRow, nullptr),
              ref.size());
    EXPECT_TRUE(same_bytes(ours, ref, sz)) << traits(t).name << testing::salt_note();
  }
}

// The scalar conversions of gguf/fp16.h against ggml's exported row functions themselves,
// including ggml_fp32_to_bf16_row (the non-reference one ggml_quantize_chunk does not use).
TEST(codec_float, scalar_conversions_match_ggml_row_functions) {
  GGUF_REQUIRE_GGML();
  using Narrow = void (*)(const float*, uint16_t*, int64_t);
  const auto& x = test_floats();
  const auto n = static_cast<int64_t>(x.size());
  for (const char* name :
       {"ggml_fp32_to_fp16_row", "ggml_fp32_to_bf16_row", "ggml_fp32_to_bf16_row_ref"}) {
    const auto fn = reinterpret_cast<Narrow>(GgmlRef::get().symbol(name));
    ASSERT_NE(fn, nullptr) << name;
    std::vector<uint16_t> ref(x.size());
    fn(x.data(), ref.data(), n);
    const bool half = std::string_view(name).find("fp16") != std::string_view::npos;
    int64_t diffs = 0, first = -1;
    for (int64_t i = 0; i < n; ++i) {
      const uint16_t ours = half ? fp32_to_fp16(x[i]) : fp32_to_bf16(x[i]);
      if (ours != ref[i] && diffs++ == 0) first = i;
    }
    EXPECT_EQ(diffs, 0) << name << ": first at 0x" << std::hex << bits(x[first])
                        << testing::salt_note();
  }
}

}  // namespace
}  // namespace gguf

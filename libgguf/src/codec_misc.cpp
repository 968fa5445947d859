// Codecs of the small formats: ternary TQ1_0/TQ2_0, FP4 MXFP4/NVFP4, and the 1- and 2-bit
// Q1_0/Q2_0. Bit-exact with ggml's dequantize_row_* and ggml_quantize_chunk.
#include <bit>
#include <cstring>
#include <utility>

#include "codec_iquant_tables.h"
#include "codec_registry.h"
#include "gguf/fp16.h"

namespace gguf::detail {
namespace {

static_assert(std::endian::native == std::endian::little, "blocks are read as little-endian");

struct BlockTq1_0 {
  uint8_t qs[48];  // five trits per byte (base-3 fixed point, most significant trit first)
  uint8_t qh[4];   // four trits per byte, for the last 16 values
  uint16_t d;
};
static_assert(sizeof(BlockTq1_0) == 54);

struct BlockTq2_0 {
  uint8_t qs[64];  // 2-bit codes q, value (q - 1) * d
  uint16_t d;
};
static_assert(sizeof(BlockTq2_0) == 66);

struct BlockMxfp4 {
  uint8_t e;  // E8M0 shared exponent
  uint8_t qs[16];
};
static_assert(sizeof(BlockMxfp4) == 17);

struct BlockNvfp4 {
  uint8_t d[4];  // UE4M3 scale per 16 values
  uint8_t qs[32];
};
static_assert(sizeof(BlockNvfp4) == 36);

struct BlockQ1_0 {
  uint16_t d;
  uint8_t qs[16];  // one sign bit per value
};
static_assert(sizeof(BlockQ1_0) == 18);

struct BlockQ2_0 {
  uint16_t d;
  uint8_t qs[16];  // 2-bit codes q, value (q - 1) * d
};
static_assert(sizeof(BlockQ2_0) == 18);

constexpr int kQK = 256;
constexpr int kQKMxfp4 = 32;
constexpr int kQKNvfp4 = 64;
constexpr int kQKQ1 = 128;
constexpr int kQKQ2 = 64;

template <class Block>
Block load_block(const uint8_t* src, int64_t i) {
  Block b;
  std::memcpy(&b, src + i * static_cast<int64_t>(sizeof(Block)), sizeof(Block));
  return b;
}

// ggml's fp16 conversion goes through a float multiply, which quiets signalling NaNs. Q1_0
// copies the scale without arithmetic, so it has to quiet them explicitly to match.
inline float fp16_quiet(uint16_t h) {
  const float f = fp16_to_fp32(h);
  if (f != f) return std::bit_cast<float>(std::bit_cast<uint32_t>(f) | 0x00400000u);
  return f;
}

// E8M0 exponent e as 2^(e-128): half the scale, because kValuesFp4 holds doubled E2M1 values.
// e = 0 and 1 give fp32 subnormals.
inline float e8m0_half(uint8_t e) {
  return std::bit_cast<float>(e < 2 ? 0x00200000u << e : static_cast<uint32_t>(e - 1) << 23);
}

// UE4M3 scale (4 exponent bits, bias 7, 3 mantissa bits), halved like e8m0_half. ggml ignores
// bit 7, and reads 0x7f (the E4M3 NaN) as zero.
inline float ue4m3_half(uint8_t x) {
  if (x == 0x7f) return 0.0f;
  const unsigned exp = (x >> 3) & 0xf;
  const unsigned man = x & 7;
  const unsigned units = exp == 0 ? man : (8 + man) << (exp - 1);  // in units of 2^-10
  return static_cast<float>(units) * 0x1p-10f;
}

// Trit n (0 = most significant) of a base-3 fixed-point byte q, as ggml extracts it: multiply
// by 3^n modulo 256, then take the top of q * 3.
inline int trit(uint8_t q, int n) {
  static constexpr uint8_t kPow3[5] = {1, 3, 9, 27, 81};
  const uint8_t shifted = static_cast<uint8_t>(q * kPow3[n]);
  return (shifted * 3) >> 8;
}

void decode_tq1_0(const uint8_t* src, float* y, int64_t n) {
  for (int64_t i = 0; i < n / kQK; ++i) {
    const auto b = load_block<BlockTq1_0>(src, i);
    const float d = fp16_to_fp32(b.d);
    // Bytes 0-31 hold values 0-159 and bytes 32-47 values 160-239, each run trit-major; the
    // last 16 values come from qh.
    for (const auto& [first, count] : {std::pair{0, 32}, std::pair{32, 16}})
      for (int t = 0; t < 5; ++t)
        for (int m = 0; m < count; ++m) *y++ = static_cast<float>(trit(b.qs[first + m], t) - 1) * d;
    for (int t = 0; t < 4; ++t)
      for (int m = 0; m < 4; ++m) *y++ = static_cast<float>(trit(b.qh[m], t) - 1) * d;
  }
}

void decode_tq2_0(const uint8_t* src, float* y, int64_t n) {
  for (int64_t i = 0; i < n / kQK; ++i) {
    const auto b = load_block<BlockTq2_0>(src, i);
    const float d = fp16_to_fp32(b.d);
    for (int half = 0; half < 2; ++half)
      for (int shift = 0; shift < 8; shift += 2)
        for (int m = 0; m < 32; ++m) {
          const int q = (b.qs[32 * half + m] >> shift) & 3;
          *y++ = static_cast<float>(q - 1) * d;
        }
  }
}

void decode_mxfp4(const uint8_t* src, float* y, int64_t n) {
  for (int64_t i = 0; i < n / kQKMxfp4; ++i) {
    const auto b = load_block<BlockMxfp4>(src, i);
    const float d = e8m0_half(b.e);
    for (int j = 0; j < 16; ++j) {
      y[j] = static_cast<float>(iq::kValuesFp4[b.qs[j] & 0xf]) * d;
      y[j + 16] = static_cast<float>(iq::kValuesFp4[b.qs[j] >> 4]) * d;
    }
    y += kQKMxfp4;
  }
}

void decode_nvfp4(const uint8_t* src, float* y, int64_t n) {
  for (int64_t i = 0; i < n / kQKNvfp4; ++i) {
    const auto b = load_block<BlockNvfp4>(src, i);
    for (int s = 0; s < 4; ++s) {
      const float d = ue4m3_half(b.d[s]);
      const uint8_t* q = b.qs + 8 * s;
      for (int j = 0; j < 8; ++j) {
        y[j] = static_cast<float>(iq::kValuesFp4[q[j] & 0xf]) * d;
        y[j + 8] = static_cast<float>(iq::kValuesFp4[q[j] >> 4]) * d;
      }
      y += 16;
    }
  }
}

void decode_q1_0(const uint8_t* src, float* y, int64_t n) {
  for (int64_t i = 0; i < n / kQKQ1; ++i) {
    const auto b = load_block<BlockQ1_0>(src, i);
    const float d = fp16_quiet(b.d);
    for (int j = 0; j < kQKQ1; ++j) *y++ = ((b.qs[j / 8] >> (j % 8)) & 1) ? d : -d;
  }
}

void decode_q2_0(const uint8_t* src, float* y, int64_t n) {
  for (int64_t i = 0; i < n / kQKQ2; ++i) {
    const auto b = load_block<BlockQ2_0>(src, i);
    const float d = fp16_to_fp32(b.d);
    for (int j = 0; j < kQKQ2; ++j) {
      const int q = (b.qs[j / 4] >> (2 * (j % 4))) & 3;
      *y++ = static_cast<float>(q - 1) * d;
    }
  }
}

}  // namespace

void register_misc_codecs(CodecTable& t) {
  entry(t, GgmlType::TQ1_0).decode = decode_tq1_0;
  entry(t, GgmlType::TQ2_0).decode = decode_tq2_0;
  entry(t, GgmlType::MXFP4).decode = decode_mxfp4;
  entry(t, GgmlType::NVFP4).decode = decode_nvfp4;
  entry(t, GgmlType::Q1_0).decode = decode_q1_0;
  entry(t, GgmlType::Q2_0).decode = decode_q2_0;
}

}  // namespace gguf::detail

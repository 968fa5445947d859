// Codecs of the small formats: ternary TQ1_0/TQ2_0, FP4 MXFP4/NVFP4, and the 1- and 2-bit
// Q1_0/Q2_0. Bit-exact with ggml's dequantize_row_* and ggml_quantize_chunk.
#if defined(__x86_64__)
#include <immintrin.h>
#endif

#include <algorithm>
#include <array>
#include <bit>
#include <climits>
#include <cmath>
#include <cstring>
#include <tuple>
#include <utility>

#include "codecs/codec_absmax.h"
#include "codecs/codec_blocks.h"
#include "codecs/codec_iquant_tables.h"
#include "codecs/codec_registry.h"
#include "codecs/codec_simd.h"
#include "gguf/base/fp16.h"

namespace gguf::detail {
namespace {

static_assert(std::endian::native == std::endian::little, "blocks are read as little-endian");

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

#if defined(__x86_64__)
GGUF_AVX512_WARNINGS_OFF
// MXFP4 with AVX-512: the levels picked by a permute, 16 values per register; each value the
// same level * d product as below.
GGUF_CODEC_AVX512 void decode_mxfp4_avx512(const uint8_t* src, float* y, int64_t n) {
  alignas(64) static constexpr auto kLevels = [] {
    std::array<float, 16> v{};
    for (int k = 0; k < 16; ++k) v[k] = static_cast<float>(iq::kValuesFp4[k]);
    return v;
  }();
  const __m512 levels = _mm512_load_ps(kLevels.data());
  for (int64_t i = 0; i < n / kQKMxfp4; ++i, y += kQKMxfp4) {
    const auto b = load_block<BlockMxfp4>(src, i);
    const __m512 d = _mm512_set1_ps(e8m0_half(b.e));
    const __m512i bytes =
        _mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(b.qs)));
    const __m512i lo = _mm512_and_si512(bytes, _mm512_set1_epi32(0xf));
    _mm512_storeu_ps(y, _mm512_mul_ps(_mm512_permutexvar_ps(lo, levels), d));
    _mm512_storeu_ps(y + 16,
                     _mm512_mul_ps(_mm512_permutexvar_ps(_mm512_srli_epi32(bytes, 4), levels), d));
  }
}
GGUF_AVX512_WARNINGS_ON
#endif

void decode_mxfp4(const uint8_t* src, float* y, int64_t n) {
#if defined(__x86_64__)
  if (codec_avx512()) return decode_mxfp4_avx512(src, y, n);
#endif
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
    const float d = fp16_to_fp32(b.d);  // a signalling NaN comes out quiet, as in ggml
    for (int j = 0; j < kQKQ1; ++j) *y++ = ((b.qs[j / 8] >> (j % 8)) & 1) ? d : -d;
  }
}

#if defined(__x86_64__)
GGUF_AVX512_WARNINGS_OFF
// Q2_0 with AVX-512: the 16 codes of 4 bytes (value l at bits 2l) in the lanes of a register,
// each value computed as below.
GGUF_CODEC_AVX512 void decode_q2_0_avx512(const uint8_t* src, float* y, int64_t n) {
  const __m512i shifts =
      _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30);
  for (int64_t i = 0; i < n / kQKQ2; ++i) {
    const auto b = load_block<BlockQ2_0>(src, i);
    const __m512 d = _mm512_set1_ps(fp16_to_fp32(b.d));
    for (int v = 0; v < kQKQ2 / 16; ++v, y += 16) {
      uint32_t word;
      std::memcpy(&word, b.qs + 4 * v, 4);
      const __m512i q =
          _mm512_and_si512(_mm512_srlv_epi32(_mm512_set1_epi32(static_cast<int>(word)), shifts),
                           _mm512_set1_epi32(3));
      _mm512_storeu_ps(
          y, _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_sub_epi32(q, _mm512_set1_epi32(1))), d));
    }
  }
}
GGUF_AVX512_WARNINGS_ON
#endif

void decode_q2_0(const uint8_t* src, float* y, int64_t n) {
#if defined(__x86_64__)
  if (codec_avx512()) return decode_q2_0_avx512(src, y, n);
#endif
  for (int64_t i = 0; i < n / kQKQ2; ++i) {
    const auto b = load_block<BlockQ2_0>(src, i);
    const float d = fp16_to_fp32(b.d);
    for (int j = 0; j < kQKQ2; ++j) {
      const int q = (b.qs[j / 4] >> (2 * (j % 4))) & 3;
      *y++ = static_cast<float>(q - 1) * d;
    }
  }
}

// --- encoders (ggml_quantize_chunk's reference paths; none of them reads an imatrix) ---

// The value of ggml's float-to-int casts as x86 computes them (cvttss2si): truncation, with
// INT32_MIN for NaN and out-of-range inputs.
inline int32_t trunc_i32(float f) {
  if (!(f >= -0x1p31f && f < 0x1p31f)) return INT32_MIN;
  return static_cast<int32_t>(f);
}

// glibc's lroundf: half away from zero, LONG_MIN for NaN and out-of-range inputs. Inline
// arithmetic instead of the libm call (the call was most of the ternary encoders' time): the
// fraction f - trunc(f) is exact for every float.
inline int64_t lround_glibc(float f) {
  if (!(f >= -0x1p63f && f < 0x1p63f)) return INT64_MIN;
  const int64_t t = static_cast<int64_t>(f);
  const float frac = f - static_cast<float>(t);
  return t + static_cast<int64_t>(frac >= 0.5f) - static_cast<int64_t>(frac <= -0.5f);
}

// trunc_i32(roundf(f)), the same way.
inline int32_t round_i32(float f) {
  if (!(f >= -0x1p31f && f < 0x1p31f)) return INT32_MIN;
  const int32_t t = static_cast<int32_t>(f);
  const float frac = f - static_cast<float>(t);
  return t + static_cast<int32_t>(frac >= 0.5f) - static_cast<int32_t>(frac <= -0.5f);
}

// The running maximum as ggml's MAX(a, b) macro keeps it: a NaN takes over, and the next value
// replaces it again.
inline float max_macro(float running, float a) { return running > a ? running : a; }

// Code 0..2 for -1, 0, +1 of x / amax, with ggml's arithmetic (the int conversion wraps for
// the LONG_MIN of a NaN).
inline int ternary_code(float x, float id) { return static_cast<int>(lround_glibc(x * id) + 1); }

// Base-3 digits (most significant first) as a fraction of 3^5 scaled to 256, rounded up, so
// that decoding can peel digits by multiplying by 3. Four digits get a zero fifth one. The
// 8-bit wraparound of ggml's arithmetic is kept for codes outside 0..2.
uint8_t pack_trits(const int* codes, int count) {
  uint8_t q = 0;
  for (int k = 0; k < count; ++k) q = static_cast<uint8_t>(q * 3 + codes[k]);
  if (count == 4) q = static_cast<uint8_t>(q * 3);
  return static_cast<uint8_t>((static_cast<unsigned>(q) * 256 + 242) / 243);
}

// Scale and inverse scale of a ternary block: the largest magnitude.
std::pair<float, float> ternary_scale(const float* x) {
  float amax = 0.0f;
  for (int j = 0; j < kQK; ++j) amax = max_macro(amax, std::fabs(x[j]));
  return {amax, amax != 0.0f ? 1.0f / amax : 0.0f};
}

void encode_tq1_0(const float* x, uint8_t* dst, int64_t nrows, int64_t n_per_row, const float*) {
  for (int64_t i = 0; i < nrows * n_per_row / kQK; ++i, x += kQK) {
    BlockTq1_0 b{};
    const auto [d, id] = ternary_scale(x);
    b.d = fp32_to_fp16(d);
    int codes[5];
    // Values 0-159 go five per byte into bytes 0-31 (byte m holds m, m+32, ...), values
    // 160-239 into bytes 32-47 (stride 16), values 240-255 four per byte into qh (stride 4).
    for (const auto& [first, count, value0] : {std::tuple{0, 32, 0}, std::tuple{32, 16, 160}})
      for (int m = 0; m < count; ++m) {
        for (int k = 0; k < 5; ++k) codes[k] = ternary_code(x[value0 + m + count * k], id);
        b.qs[first + m] = pack_trits(codes, 5);
      }
    for (int m = 0; m < 4; ++m) {
      for (int k = 0; k < 4; ++k) codes[k] = ternary_code(x[240 + m + 4 * k], id);
      b.qh[m] = pack_trits(codes, 4);
    }
    std::memcpy(dst + i * sizeof(b), &b, sizeof(b));
  }
}

void encode_tq2_0(const float* x, uint8_t* dst, int64_t nrows, int64_t n_per_row, const float*) {
  for (int64_t i = 0; i < nrows * n_per_row / kQK; ++i, x += kQK) {
    BlockTq2_0 b{};
    const auto [d, id] = ternary_scale(x);
    b.d = fp32_to_fp16(d);
    for (int half = 0; half < 2; ++half)
      for (int m = 0; m < 32; ++m) {
        unsigned q = 0;
        for (int k = 0; k < 4; ++k)
          q += static_cast<unsigned>(ternary_code(x[128 * half + m + 32 * k], id) & 3) << (2 * k);
        b.qs[32 * half + m] = static_cast<uint8_t>(q);
      }
    std::memcpy(dst + i * sizeof(b), &b, sizeof(b));
  }
}

// The 16 FP4 levels scaled by d, each computed as ggml computes it (float(level) * d).
struct Fp4Levels {
  float v[16];
  explicit Fp4Levels(float d) {
    for (int c = 0; c < 16; ++c) v[c] = static_cast<float>(iq::kValuesFp4[c]) * d;
  }
  // The code whose level is nearest to x; the first one wins ties, and a NaN distance never
  // wins. Levels of the other sign than x are farther than level 0 (d >= 0), so only the seven
  // of x's sign compete with it.
  uint8_t nearest(float x) const {
    const int base = x < 0.0f ? 8 : 0;
    int best = 0;
    float best_err = std::fabs(v[0] - x);
    // Selects instead of branches: random data makes the comparisons unpredictable.
    for (int c = 1; c < 8; ++c) {
      const float err = std::fabs(v[base + c] - x);
      const bool better = err < best_err;
      best = better ? base + c : best;
      best_err = better ? err : best_err;
    }
    return static_cast<uint8_t>(best);
  }
};

// The E8M0 exponent ggml picks: floor(log2(amax)) - 2 + 127 with glibc's log2f (which rounds
// up for amax just below a power of two), converted like a C cast to uint8_t (the low byte of
// x86's int32 conversion, so tiny amax wrap around and inf gives 0).
uint8_t mxfp4_exponent(float amax) {
  if (!(amax > 0.0f)) return 0;
  const float e = std::floor(std::log2(amax)) - 2.0f + 127.0f;
  return static_cast<uint8_t>(static_cast<uint32_t>(trunc_i32(e)));
}

#if defined(__x86_64__)
GGUF_AVX512_WARNINGS_OFF
// Fp4Levels::nearest of 16 values in the lanes of a register, the same comparisons per lane.
GGUF_CODEC_AVX512 __m512i nearest16(const Fp4Levels& levels, const float* x) {
  const __m512 xv = _mm512_loadu_ps(x);
  const __m512 sign = _mm512_set1_ps(-0.0f);
  const __mmask16 neg = _mm512_cmp_ps_mask(xv, _mm512_setzero_ps(), _CMP_LT_OQ);
  const __m512i base = _mm512_maskz_mov_epi32(neg, _mm512_set1_epi32(8));
  __m512i best = _mm512_setzero_si512();
  __m512 best_err = _mm512_andnot_ps(sign, _mm512_sub_ps(_mm512_set1_ps(levels.v[0]), xv));
  for (int c = 1; c < 8; ++c) {
    const __m512 level =
        _mm512_mask_blend_ps(neg, _mm512_set1_ps(levels.v[c]), _mm512_set1_ps(levels.v[8 + c]));
    const __m512 err = _mm512_andnot_ps(sign, _mm512_sub_ps(level, xv));
    const __mmask16 better = _mm512_cmp_ps_mask(err, best_err, _CMP_LT_OQ);
    best = _mm512_mask_add_epi32(best, better, base, _mm512_set1_epi32(c));
    best_err = _mm512_mask_blend_ps(better, best_err, err);
  }
  return best;
}

GGUF_CODEC_AVX512 void encode_mxfp4_avx512(const float* x, uint8_t* dst, int64_t blocks) {
  for (int64_t i = 0; i < blocks; ++i, x += kQKMxfp4) {
    BlockMxfp4 b{};
    b.e = mxfp4_exponent(abs_max<kQKMxfp4>(x));
    const Fp4Levels levels(e8m0_half(b.e));
    const __m512i q =
        _mm512_or_si512(nearest16(levels, x), _mm512_slli_epi32(nearest16(levels, x + 16), 4));
    _mm_storeu_si128(reinterpret_cast<__m128i*>(b.qs), _mm512_cvtepi32_epi8(q));
    std::memcpy(dst + i * sizeof(b), &b, sizeof(b));
  }
}
GGUF_AVX512_WARNINGS_ON
#endif

void encode_mxfp4(const float* x, uint8_t* dst, int64_t nrows, int64_t n_per_row, const float*) {
#if defined(__x86_64__)
  if (codec_avx512()) return encode_mxfp4_avx512(x, dst, nrows * n_per_row / kQKMxfp4);
#endif
  for (int64_t i = 0; i < nrows * n_per_row / kQKMxfp4; ++i, x += kQKMxfp4) {
    BlockMxfp4 b{};
    b.e = mxfp4_exponent(abs_max<kQKMxfp4>(x));
    const Fp4Levels levels(e8m0_half(b.e));
    for (int j = 0; j < 16; ++j)
      b.qs[j] = static_cast<uint8_t>(levels.nearest(x[j]) | (levels.nearest(x[j + 16]) << 4));
    std::memcpy(dst + i * sizeof(b), &b, sizeof(b));
  }
}

// ggml's fp32 -> UE4M3: clamps to 448, rounds the mantissa half-up on its fourth bit, and
// rounds subnormals by truncating x * 2^9 + 0.5.
uint8_t to_ue4m3(float x) {
  if (!(x > 0.0f)) return 0;
  if (x > 448.0f) x = 448.0f;
  const uint32_t bits = std::bit_cast<uint32_t>(x);
  int exp = static_cast<int>((bits >> 23) & 0xff) - 127 + 7;
  if (exp <= 0) {
    const int32_t man = std::min(trunc_i32(x * 512.0f + 0.5f), 7);
    return man < 1 ? 0 : static_cast<uint8_t>(man);
  }
  if (exp >= 15) return 0x7e;
  unsigned man = ((bits >> 20) & 7) + ((bits >> 19) & 1);
  if (man > 7) {
    man = 0;
    if (++exp >= 15) return 0x7e;
  }
  return static_cast<uint8_t>((exp << 3) | man);
}

void encode_nvfp4(const float* x, uint8_t* dst, int64_t nrows, int64_t n_per_row, const float*) {
  for (int64_t i = 0; i < nrows * n_per_row / kQKNvfp4; ++i) {
    BlockNvfp4 b{};
    for (int s = 0; s < 4; ++s, x += 16) {
      b.d[s] = to_ue4m3(abs_max<16>(x) / 6.0f);
      const Fp4Levels levels(ue4m3_half(b.d[s]));
      for (int j = 0; j < 8; ++j)
        b.qs[8 * s + j] =
            static_cast<uint8_t>(levels.nearest(x[j]) | (levels.nearest(x[j + 8]) << 4));
    }
    std::memcpy(dst + i * sizeof(b), &b, sizeof(b));
  }
}

// Q1_0 keeps only signs, scaled by the mean magnitude (summed in order, as ggml does).
void encode_q1_0(const float* x, uint8_t* dst, int64_t nrows, int64_t n_per_row, const float*) {
  for (int64_t i = 0; i < nrows * n_per_row / kQKQ1; ++i, x += kQKQ1) {
    BlockQ1_0 b{};
    float sum = 0.0f;
    for (int j = 0; j < kQKQ1; ++j) sum += std::fabs(x[j]);
    b.d = fp32_to_fp16(sum / static_cast<float>(kQKQ1));
    for (int j = 0; j < kQKQ1; ++j)
      if (x[j] >= 0.0f) b.qs[j / 8] |= static_cast<uint8_t>(1u << (j % 8));
    std::memcpy(dst + i * sizeof(b), &b, sizeof(b));
  }
}

// Q2_0 levels are -1, 0, 1, 2 times the largest magnitude.
void encode_q2_0(const float* x, uint8_t* dst, int64_t nrows, int64_t n_per_row, const float*) {
  for (int64_t i = 0; i < nrows * n_per_row / kQKQ2; ++i, x += kQKQ2) {
    BlockQ2_0 b{};
    // NaNs never win the maximum, so lanes may keep partial maxima (order does not matter).
    float lane[4] = {};
    for (int j = 0; j < kQKQ2; j += 4)
      for (int k = 0; k < 4; ++k) {
        const float a = std::fabs(x[j + k]);
        lane[k] = a > lane[k] ? a : lane[k];
      }
    float amax = 0.0f;
    for (const float l : lane) amax = l > amax ? l : amax;
    const float id = amax > 0.0f ? 1.0f / amax : 0.0f;
    b.d = fp32_to_fp16(amax);
    uint8_t q[kQKQ2];
    for (int j = 0; j < kQKQ2; ++j) {
      const int32_t r = round_i32(x[j] * id);
      q[j] = static_cast<uint8_t>(r < 0 ? 0 : std::min(r + 1, 3));  // r < 0 covers INT32_MIN
    }
    for (int m = 0; m < kQKQ2 / 4; ++m)
      b.qs[m] = static_cast<uint8_t>(q[4 * m] | (q[4 * m + 1] << 2) | (q[4 * m + 2] << 4) |
                                     (q[4 * m + 3] << 6));
    std::memcpy(dst + i * sizeof(b), &b, sizeof(b));
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
  entry(t, GgmlType::TQ1_0).encode = encode_tq1_0;
  entry(t, GgmlType::TQ2_0).encode = encode_tq2_0;
  entry(t, GgmlType::MXFP4).encode = encode_mxfp4;
  entry(t, GgmlType::NVFP4).encode = encode_nvfp4;
  entry(t, GgmlType::Q1_0).encode = encode_q1_0;
  entry(t, GgmlType::Q2_0).encode = encode_q2_0;
}

}  // namespace gguf::detail

// Codecs of the legacy family: q4_0, q4_1, q5_0, q5_1, q8_0, q8_1 (32-element blocks with an
// fp16 scale and, for _1 types, an fp16 min or sum). Bytes and float bits match ggml's.
#include <algorithm>
#include <array>
#include <bit>
#include <cfloat>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <type_traits>

#include "codecs/codec_absmax.h"
#include "codecs/codec_blocks.h"
#include "codecs/codec_legacy_search.h"
#include "codecs/codec_registry.h"
#include "gguf/base/fp16.h"

namespace gguf::detail {
namespace {

static_assert(std::endian::native == std::endian::little,
              "GGUF payloads are little-endian; the codecs read them in host order");

constexpr int kQK = 32;  // elements per block, all six types
constexpr int kHalf = kQK / 2;

// Payloads are byte streams without alignment: multi-byte fields are copied in and out with
// memcpy at their offsetof() positions, never read through a pointer cast to a wider type.
// Copying the quants into a local array also lets GCC vectorise (a uint8_t* could alias the
// float output).
template <typename B>
const uint8_t* block_at(const uint8_t* src, int64_t i) {
  return src + i * static_cast<int64_t>(sizeof(B));
}
template <typename B>
uint8_t* block_at(uint8_t* dst, int64_t i) {
  return dst + i * static_cast<int64_t>(sizeof(B));
}
template <typename T>
T load(const uint8_t* p) {
  T v;
  std::memcpy(&v, p, sizeof(T));
  return v;
}
template <typename T>
void store(uint8_t* p, const T& v) {
  std::memcpy(p, &v, sizeof(T));
}
float load_half(const uint8_t* p) { return fp16_to_fp32(load<uint16_t>(p)); }
void store_half(uint8_t* p, float f) { store(p, fp32_to_fp16(f)); }

// ---------------------------------------------------------------------------------------------
// Decoders: code * d (+ m), computed in that order so NaN/inf scales give ggml's bits.
// With a NaN offset m, ggml's code * d + m gives the product's NaN when the product is NaN
// too (d's NaN quieted, or the default NaN of 0 * inf) and m's otherwise: x86 returns the
// first operand's NaN. A vectorised add may take its operands either way round, so blocks with
// a NaN m (rare) say which NaN explicitly; m is quiet already (widened from fp16).
float offset_nan_block(float code, float d, float m) {
  const float p = code * d;
  return std::isnan(p) ? p : m;
}

void decode_q4_0(const uint8_t* src, float* dst, int64_t n) {
  for (int64_t i = 0; i < n / kQK; ++i, dst += kQK) {
    const uint8_t* b = block_at<BlockQ4_0>(src, i);
    const float d = load_half(b + offsetof(BlockQ4_0, d));
    const auto qs = load<std::array<uint8_t, 16>>(b + offsetof(BlockQ4_0, qs));
    for (int j = 0; j < kHalf; ++j) {
      dst[j] = static_cast<float>((qs[j] & 0xF) - 8) * d;
      dst[j + kHalf] = static_cast<float>((qs[j] >> 4) - 8) * d;
    }
  }
}

void decode_q4_1(const uint8_t* src, float* dst, int64_t n) {
  for (int64_t i = 0; i < n / kQK; ++i, dst += kQK) {
    const uint8_t* b = block_at<BlockQ4_1>(src, i);
    const float d = load_half(b + offsetof(BlockQ4_1, d));
    const float m = load_half(b + offsetof(BlockQ4_1, m));
    const auto qs = load<std::array<uint8_t, 16>>(b + offsetof(BlockQ4_1, qs));
    if (std::isnan(m)) [[unlikely]] {
      for (int j = 0; j < kHalf; ++j) {
        dst[j] = offset_nan_block(static_cast<float>(qs[j] & 0xF), d, m);
        dst[j + kHalf] = offset_nan_block(static_cast<float>(qs[j] >> 4), d, m);
      }
      continue;
    }
    for (int j = 0; j < kHalf; ++j) {
      dst[j] = static_cast<float>(qs[j] & 0xF) * d + m;
      dst[j + kHalf] = static_cast<float>(qs[j] >> 4) * d + m;
    }
  }
}

// Four bits of qh spread to four bytes holding 0x10 where the bit is set (little-endian u32).
constexpr std::array<uint32_t, 16> kHighBits = [] {
  std::array<uint32_t, 16> t{};
  for (uint32_t v = 0; v < 16; ++v)
    for (uint32_t k = 0; k < 4; ++k) t[v] |= ((v >> k) & 1u) << (8 * k + 4);
  return t;
}();

// Five-bit codes: low nibbles from qs, bit j of the u32 qh completes element j.
std::array<uint8_t, kQK> unpack_5bit(const uint8_t* qs_bytes, uint32_t qh) {
  const auto qs = load<std::array<uint8_t, 16>>(qs_bytes);
  std::array<uint32_t, kQK / 4> high_words;
  for (int k = 0; k < kQK / 4; ++k) high_words[k] = kHighBits[(qh >> (4 * k)) & 0xF];
  const auto high = std::bit_cast<std::array<uint8_t, kQK>>(high_words);
  std::array<uint8_t, kQK> c;
  for (int j = 0; j < kHalf; ++j) {
    c[j] = static_cast<uint8_t>((qs[j] & 0xF) | high[j]);
    c[j + kHalf] = static_cast<uint8_t>((qs[j] >> 4) | high[j + kHalf]);
  }
  return c;
}

void decode_q5_0(const uint8_t* src, float* dst, int64_t n) {
  for (int64_t i = 0; i < n / kQK; ++i, dst += kQK) {
    const uint8_t* b = block_at<BlockQ5_0>(src, i);
    const float d = load_half(b + offsetof(BlockQ5_0, d));
    const auto c =
        unpack_5bit(b + offsetof(BlockQ5_0, qs), load<uint32_t>(b + offsetof(BlockQ5_0, qh)));
    for (int j = 0; j < kQK; ++j) dst[j] = static_cast<float>(c[j] - 16) * d;
  }
}

void decode_q5_1(const uint8_t* src, float* dst, int64_t n) {
  for (int64_t i = 0; i < n / kQK; ++i, dst += kQK) {
    const uint8_t* b = block_at<BlockQ5_1>(src, i);
    const float d = load_half(b + offsetof(BlockQ5_1, d));
    const float m = load_half(b + offsetof(BlockQ5_1, m));
    const auto c =
        unpack_5bit(b + offsetof(BlockQ5_1, qs), load<uint32_t>(b + offsetof(BlockQ5_1, qh)));
    if (std::isnan(m)) [[unlikely]] {
      for (int j = 0; j < kQK; ++j) dst[j] = offset_nan_block(static_cast<float>(c[j]), d, m);
      continue;
    }
    for (int j = 0; j < kQK; ++j) dst[j] = static_cast<float>(c[j]) * d + m;
  }
}

template <typename B>
void decode_q8(const uint8_t* __restrict src, float* __restrict dst, int64_t n) {
  for (int64_t i = 0; i < n / kQK; ++i, dst += kQK) {
    const uint8_t* b = block_at<B>(src, i);
    const float d = load_half(b + offsetof(B, d));
    // Byte-typed (alignment 1), so reading through it is fine; restrict lets it vectorise.
    const auto* qs = reinterpret_cast<const int8_t*>(b + offsetof(B, qs));
    for (int j = 0; j < kQK; ++j) dst[j] = static_cast<float>(qs[j]) * d;
  }
}

// ---------------------------------------------------------------------------------------------
// Plain encoders (ggml's quantize_row_*_ref, which ggml_quantize_chunk uses without weights).
// The block statistics are computed lane-wise so that they vectorise, then corrected where
// ggml's sequential scan would pick a different element (ties of sign, zeros, NaNs).

// ggml turns floats into codes with x86's truncating conversion, which gives INT32_MIN for NaN,
// infinities and out-of-range values, and then keeps the low byte: 0, as for a 0 input.
inline float representable_or_zero(float v) { return std::fabs(v) < 0x1p31f ? v : 0.0f; }
inline int8_t trunc_low_byte(float v) {
  return static_cast<int8_t>(static_cast<int32_t>(representable_or_zero(v)));
}
// roundf (half away from zero), then the same conversion.
inline int8_t round_low_byte(float v) {
  const float w = representable_or_zero(v);
  int32_t t = static_cast<int32_t>(w);
  const float frac = w - static_cast<float>(t);  // exact for every float
  t += static_cast<int32_t>(frac >= 0.5f) - static_cast<int32_t>(frac <= -0.5f);
  return static_cast<int8_t>(t);
}

constexpr int kLanes = 4;  // one SSE register of partial results

struct Range {
  float min, max;
};

// Smallest and largest element as ggml's scan finds them: NaNs skipped, (FLT_MAX, -FLT_MAX)
// for an all-NaN block, and the first occurrence on ties, which only matters for the sign of
// a zero extreme.
Range min_max(const float* x) {
  float lo[kLanes], hi[kLanes];
  std::fill(lo, lo + kLanes, FLT_MAX);
  std::fill(hi, hi + kLanes, -FLT_MAX);
  for (int j = 0; j < kQK; j += kLanes) {
    for (int k = 0; k < kLanes; ++k) {
      const float v = x[j + k];
      lo[k] = v < lo[k] ? v : lo[k];
      hi[k] = v > hi[k] ? v : hi[k];
    }
  }
  Range r{FLT_MAX, -FLT_MAX};
  for (int k = 0; k < kLanes; ++k) {
    r.min = lo[k] < r.min ? lo[k] : r.min;
    r.max = hi[k] > r.max ? hi[k] : r.max;
  }
  if (r.min == 0.0f || r.max == 0.0f) {
    int j = 0;
    while (x[j] != 0.0f) ++j;
    if (r.min == 0.0f) r.min = x[j];
    if (r.max == 0.0f) r.max = x[j];
  }
  return r;
}

bool has_nan(const float* x) {
  uint32_t nan[kLanes] = {};
  for (int j = 0; j < kQK; j += kLanes) {
    for (int k = 0; k < kLanes; ++k)
      nan[k] |= (std::bit_cast<uint32_t>(x[j + k]) & 0x7FFFFFFFu) > 0x7F800000u ? 1u : 0u;
  }
  uint32_t any = 0;
  for (int k = 0; k < kLanes; ++k) any |= nan[k];
  return any != 0;
}

// ggml's MAX(amax, |v|) keeps a NaN |v| until the next element replaces it; blocks with NaNs
// take that sequential path, others the lane-wise one.
float q8_absmax(const float* x) {
  if (!has_nan(x)) return abs_max<kQK>(x);
  float amax = 0.0f;
  for (int j = 0; j < kQK; ++j) {
    const float a = std::fabs(x[j]);
    amax = amax > a ? amax : a;
  }
  return amax;
}

using Codes = std::array<uint8_t, kQK>;

// q4_0 and q5_0: code = min(levels-1, trunc(x/d + levels/2 + 0.5)) with d = -max/(levels/2).
template <int kLevels>
float symmetric_codes(const float* x, Codes& codes) {
  constexpr float kBias = kLevels / 2 + 0.5f;
  const float d = signed_absmax<kQK>(x) / static_cast<float>(-kLevels / 2);
  const float id = d != 0.0f ? 1.0f / d : 0.0f;
  for (int j = 0; j < kQK; ++j)
    codes[j] = static_cast<uint8_t>(std::min<int>(kLevels - 1, trunc_low_byte(x[j] * id + kBias)));
  return d;
}

// q4_1 and q5_1: code = trunc((x - min)/d + 0.5) with d = (max - min)/(levels-1); q4_1 also
// clamps to 15, q5_1 relies on the range.
template <int kLevels>
float affine_codes(const float* x, Codes& codes, float& min) {
  const Range r = min_max(x);
  const float d = (r.max - r.min) / static_cast<float>(kLevels - 1);
  const float id = d != 0.0f ? 1.0f / d : 0.0f;
  for (int j = 0; j < kQK; ++j) {
    const int8_t c = trunc_low_byte((x[j] - r.min) * id + 0.5f);
    codes[j] = kLevels == 16 ? static_cast<uint8_t>(std::min<int>(15, c)) : static_cast<uint8_t>(c);
  }
  min = r.min;
  return d;
}

void store_nibbles(const Codes& codes, uint8_t* dst) {
  std::array<uint8_t, kHalf> qs;
  for (int j = 0; j < kHalf; ++j) qs[j] = static_cast<uint8_t>(codes[j] | (codes[j + kHalf] << 4));
  store(dst, qs);
}
void store_5bit(const Codes& codes, uint8_t* qs_dst, uint8_t* qh_dst) {
  std::array<uint8_t, kHalf> qs;
  uint32_t qh = 0;
  for (int j = 0; j < kHalf; ++j) {
    qs[j] = static_cast<uint8_t>((codes[j] & 0xF) | ((codes[j + kHalf] & 0xF) << 4));
    qh |= static_cast<uint32_t>((codes[j] >> 4) & 1) << j;
    qh |= static_cast<uint32_t>((codes[j + kHalf] >> 4) & 1) << (j + kHalf);
  }
  store(qs_dst, qs);
  store(qh_dst, qh);
}

void encode_plain_q4_0(const float* x, uint8_t* dst, int64_t nblocks) {
  for (int64_t i = 0; i < nblocks; ++i, x += kQK) {
    uint8_t* b = block_at<BlockQ4_0>(dst, i);
    Codes codes;
    store_half(b + offsetof(BlockQ4_0, d), symmetric_codes<16>(x, codes));
    store_nibbles(codes, b + offsetof(BlockQ4_0, qs));
  }
}

void encode_plain_q5_0(const float* x, uint8_t* dst, int64_t nblocks) {
  for (int64_t i = 0; i < nblocks; ++i, x += kQK) {
    uint8_t* b = block_at<BlockQ5_0>(dst, i);
    Codes codes;
    store_half(b + offsetof(BlockQ5_0, d), symmetric_codes<32>(x, codes));
    store_5bit(codes, b + offsetof(BlockQ5_0, qs), b + offsetof(BlockQ5_0, qh));
  }
}

void encode_plain_q4_1(const float* x, uint8_t* dst, int64_t nblocks) {
  for (int64_t i = 0; i < nblocks; ++i, x += kQK) {
    uint8_t* b = block_at<BlockQ4_1>(dst, i);
    Codes codes;
    float min;
    store_half(b + offsetof(BlockQ4_1, d), affine_codes<16>(x, codes, min));
    store_half(b + offsetof(BlockQ4_1, m), min);
    store_nibbles(codes, b + offsetof(BlockQ4_1, qs));
  }
}

void encode_plain_q5_1(const float* x, uint8_t* dst, int64_t nblocks) {
  for (int64_t i = 0; i < nblocks; ++i, x += kQK) {
    uint8_t* b = block_at<BlockQ5_1>(dst, i);
    Codes codes;
    float min;
    store_half(b + offsetof(BlockQ5_1, d), affine_codes<32>(x, codes, min));
    store_half(b + offsetof(BlockQ5_1, m), min);
    store_5bit(codes, b + offsetof(BlockQ5_1, qs), b + offsetof(BlockQ5_1, qh));
  }
}

// q8_0 and q8_1: code = roundf(x / d) with d = amax/127; q8_1 adds s = fp16(sum(codes) * d).
template <typename B>
void encode_q8(const float* x, uint8_t* dst, int64_t nrows, int64_t n_per_row, const float*) {
  const int64_t nblocks = nrows * n_per_row / kQK;
  for (int64_t i = 0; i < nblocks; ++i, x += kQK) {
    uint8_t* b = block_at<B>(dst, i);
    const float d = q8_absmax(x) / 127.0f;
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    std::array<int8_t, kQK> qs;
    for (int j = 0; j < kQK; ++j) qs[j] = round_low_byte(x[j] * id);
    store_half(b + offsetof(B, d), d);
    store(b + offsetof(B, qs), qs);
    if constexpr (std::is_same_v<B, BlockQ8_1>) {
      int sum = 0;
      for (int j = 0; j < kQK; ++j) sum += qs[j];
      store_half(b + offsetof(B, s), static_cast<float>(sum) * d);
    }
  }
}

// ---------------------------------------------------------------------------------------------
// Encoders with importance weights (ggml's quantize_row_q*_impl): per-block least-squares scale
// searches, weighting element j by imatrix[j] * sqrt(sigma2 + x[j]^2), sigma2 being the mean
// square of the whole row.

// Per-element weights of one block: imatrix * sqrt(sigma2 + x^2).
void block_weights(const float* x, const float* qw, float sigma2, float* w) {
  for (int j = 0; j < kQK; ++j) w[j] = qw[j] * std::sqrt(sigma2 + x[j] * x[j]);
}

float row_mean_square(const float* x, int64_t n) {
  float sum = 0.0f;
  for (int64_t j = 0; j < n; ++j) sum += x[j] * x[j];
  return sum / static_cast<float>(n);
}

template <typename B>
constexpr bool kAffine = std::is_same_v<B, BlockQ4_1> || std::is_same_v<B, BlockQ5_1>;
template <typename B>
constexpr bool kFiveBit = std::is_same_v<B, BlockQ5_0> || std::is_same_v<B, BlockQ5_1>;

template <typename B>
void encode_weighted_row(const float* x, uint8_t* dst, int64_t n, const float* imatrix) {
  const float sigma2 = row_mean_square(x, n);
  for (int64_t i = 0; i < n / kQK; ++i) {
    const float* xb = x + i * kQK;
    uint8_t* b = block_at<B>(dst, i);
    float w[kQK];
    block_weights(xb, imatrix + i * kQK, sigma2, w);
    Codes codes;
    float d;
    if constexpr (kAffine<B>) {
      float neg_min;
      d = legacy::search_affine(xb, w, kFiveBit<B> ? 31 : 15, codes, neg_min);
      store_half(b + offsetof(B, m), -neg_min);
    } else {
      d = legacy::search_symmetric(xb, w, kFiveBit<B> ? 16 : 8, codes);
    }
    store_half(b + offsetof(B, d), d);
    if constexpr (kFiveBit<B>)
      store_5bit(codes, b + offsetof(B, qs), b + offsetof(B, qh));
    else
      store_nibbles(codes, b + offsetof(B, qs));
  }
}

// Without importance the rows are one stream of blocks; with it each row has its own sigma2.
template <typename B, void (*kPlain)(const float*, uint8_t*, int64_t)>
void encode_legacy(const float* src, uint8_t* dst, int64_t nrows, int64_t n_per_row,
                   const float* imatrix) {
  if (!imatrix) {
    kPlain(src, dst, nrows * n_per_row / kQK);
    return;
  }
  const int64_t row_bytes = n_per_row / kQK * static_cast<int64_t>(sizeof(B));
  for (int64_t r = 0; r < nrows; ++r)
    encode_weighted_row<B>(src + r * n_per_row, dst + r * row_bytes, n_per_row, imatrix);
}

}  // namespace

void register_legacy_codecs(CodecTable& t) {
  entry(t, GgmlType::Q4_0) = {decode_q4_0, encode_legacy<BlockQ4_0, encode_plain_q4_0>};
  entry(t, GgmlType::Q4_1) = {decode_q4_1, encode_legacy<BlockQ4_1, encode_plain_q4_1>};
  entry(t, GgmlType::Q5_0) = {decode_q5_0, encode_legacy<BlockQ5_0, encode_plain_q5_0>};
  entry(t, GgmlType::Q5_1) = {decode_q5_1, encode_legacy<BlockQ5_1, encode_plain_q5_1>};
  entry(t, GgmlType::Q8_0) = {decode_q8<BlockQ8_0>, encode_q8<BlockQ8_0>};
  entry(t, GgmlType::Q8_1) = {decode_q8<BlockQ8_1>, encode_q8<BlockQ8_1>};
}

}  // namespace gguf::detail

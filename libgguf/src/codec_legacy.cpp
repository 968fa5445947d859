// Codecs of the legacy family: q4_0, q4_1, q5_0, q5_1, q8_0, q8_1 (32-element blocks with an
// fp16 scale and, for _1 types, an fp16 min or sum). Bytes and float bits match ggml's.
#include <algorithm>
#include <bit>
#include <cfloat>
#include <cmath>
#include <cstdint>
#include <cstring>

#include "codec_registry.h"
#include "gguf/fp16.h"

namespace gguf::detail {
namespace {

static_assert(std::endian::native == std::endian::little,
              "GGUF payloads are little-endian; the codecs read them in host order");

constexpr int kQK = 32;  // elements per block, all six types
constexpr int kHalf = kQK / 2;

struct BlockQ4_0 {
  uint16_t d;
  uint8_t qs[16];  // element j in the low nibble of qs[j], element j+16 in the high nibble
};
struct BlockQ4_1 {
  uint16_t d, m;
  uint8_t qs[16];
};
struct BlockQ5_0 {
  uint16_t d;
  uint8_t qh[4];  // bit j of the little-endian u32 is the fifth bit of element j
  uint8_t qs[16];
};
struct BlockQ5_1 {
  uint16_t d, m;
  uint8_t qh[4];
  uint8_t qs[16];
};
struct BlockQ8_0 {
  uint16_t d;
  int8_t qs[32];
};
struct BlockQ8_1 {
  uint16_t d, s;  // s = d * sum(qs), a cache for dot products; decoding ignores it
  int8_t qs[32];
};
static_assert(sizeof(BlockQ4_0) == 18);
static_assert(sizeof(BlockQ4_1) == 20);
static_assert(sizeof(BlockQ5_0) == 22);
static_assert(sizeof(BlockQ5_1) == 24);
static_assert(sizeof(BlockQ8_0) == 34);
static_assert(sizeof(BlockQ8_1) == 36);

// Payloads are byte streams without alignment: blocks are copied in and out, never cast.
template <typename B>
B load_block(const uint8_t* src, int64_t i) {
  B b;
  std::memcpy(&b, src + i * static_cast<int64_t>(sizeof(B)), sizeof(B));
  return b;
}
template <typename B>
void store_block(uint8_t* dst, int64_t i, const B& b) {
  std::memcpy(dst + i * static_cast<int64_t>(sizeof(B)), &b, sizeof(B));
}

uint32_t load_qh(const uint8_t (&qh)[4]) {
  uint32_t v;
  std::memcpy(&v, qh, sizeof(v));
  return v;
}
void store_qh(uint8_t (&qh)[4], uint32_t v) { std::memcpy(qh, &v, sizeof(v)); }

// ---------------------------------------------------------------------------------------------
// Decoders: code * d (+ m), computed in that order so NaN/inf scales give ggml's bits.

void decode_q4_0(const uint8_t* src, float* dst, int64_t n) {
  for (int64_t i = 0; i < n / kQK; ++i, dst += kQK) {
    const auto b = load_block<BlockQ4_0>(src, i);
    const float d = fp16_to_fp32(b.d);
    for (int j = 0; j < kHalf; ++j) {
      dst[j] = static_cast<float>((b.qs[j] & 0xF) - 8) * d;
      dst[j + kHalf] = static_cast<float>((b.qs[j] >> 4) - 8) * d;
    }
  }
}

void decode_q4_1(const uint8_t* src, float* dst, int64_t n) {
  for (int64_t i = 0; i < n / kQK; ++i, dst += kQK) {
    const auto b = load_block<BlockQ4_1>(src, i);
    const float d = fp16_to_fp32(b.d), m = fp16_to_fp32(b.m);
    for (int j = 0; j < kHalf; ++j) {
      dst[j] = static_cast<float>(b.qs[j] & 0xF) * d + m;
      dst[j + kHalf] = static_cast<float>(b.qs[j] >> 4) * d + m;
    }
  }
}

void decode_q5_0(const uint8_t* src, float* dst, int64_t n) {
  for (int64_t i = 0; i < n / kQK; ++i, dst += kQK) {
    const auto b = load_block<BlockQ5_0>(src, i);
    const float d = fp16_to_fp32(b.d);
    const uint32_t qh = load_qh(b.qh);
    for (int j = 0; j < kHalf; ++j) {
      const int lo = (b.qs[j] & 0xF) | static_cast<int>(((qh >> j) & 1) << 4);
      const int hi = (b.qs[j] >> 4) | static_cast<int>(((qh >> (j + kHalf)) & 1) << 4);
      dst[j] = static_cast<float>(lo - 16) * d;
      dst[j + kHalf] = static_cast<float>(hi - 16) * d;
    }
  }
}

void decode_q5_1(const uint8_t* src, float* dst, int64_t n) {
  for (int64_t i = 0; i < n / kQK; ++i, dst += kQK) {
    const auto b = load_block<BlockQ5_1>(src, i);
    const float d = fp16_to_fp32(b.d), m = fp16_to_fp32(b.m);
    const uint32_t qh = load_qh(b.qh);
    for (int j = 0; j < kHalf; ++j) {
      const int lo = (b.qs[j] & 0xF) | static_cast<int>(((qh >> j) & 1) << 4);
      const int hi = (b.qs[j] >> 4) | static_cast<int>(((qh >> (j + kHalf)) & 1) << 4);
      dst[j] = static_cast<float>(lo) * d + m;
      dst[j + kHalf] = static_cast<float>(hi) * d + m;
    }
  }
}

template <typename B>
void decode_q8(const uint8_t* src, float* dst, int64_t n) {
  for (int64_t i = 0; i < n / kQK; ++i, dst += kQK) {
    const auto b = load_block<B>(src, i);
    const float d = fp16_to_fp32(b.d);
    for (int j = 0; j < kQK; ++j) dst[j] = static_cast<float>(b.qs[j]) * d;
  }
}

// ---------------------------------------------------------------------------------------------
// Plain encoders (ggml's quantize_row_*_ref, which ggml_quantize_chunk uses without weights).

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

// The element of largest magnitude, the first one on ties (ggml scans with a strict <); +0
// when all elements are zero or NaN.
float signed_absmax(const float* x) {
  float amax = 0.0f, max = 0.0f;
  for (int j = 0; j < kQK; ++j) {
    const float a = std::fabs(x[j]);
    if (amax < a) {
      amax = a;
      max = x[j];
    }
  }
  return max;
}

// Smallest and largest element, first occurrence on ties (so the sign of a zero is the first
// zero's); NaNs are skipped, and an all-NaN block gives (FLT_MAX, -FLT_MAX) as in ggml.
void min_max(const float* x, float& min, float& max) {
  min = FLT_MAX;
  max = -FLT_MAX;
  for (int j = 0; j < kQK; ++j) {
    if (x[j] < min) min = x[j];
    if (x[j] > max) max = x[j];
  }
}

// ggml's MAX(amax, |v|) keeps a NaN |v| until the next element replaces it.
float q8_absmax(const float* x) {
  float amax = 0.0f;
  for (int j = 0; j < kQK; ++j) {
    const float a = std::fabs(x[j]);
    amax = amax > a ? amax : a;
  }
  return amax;
}

// q4_0 and q5_0: code = min(levels-1, trunc(x/d + levels/2 + 0.5)) with d = -max/(levels/2).
template <int kLevels>
void symmetric_codes(const float* x, uint8_t* codes, float& d) {
  constexpr float kBias = kLevels / 2 + 0.5f;
  const float max = signed_absmax(x);
  d = max / static_cast<float>(-kLevels / 2);
  const float id = d != 0.0f ? 1.0f / d : 0.0f;
  for (int j = 0; j < kQK; ++j)
    codes[j] = static_cast<uint8_t>(std::min<int>(kLevels - 1, trunc_low_byte(x[j] * id + kBias)));
}

// q4_1 and q5_1: code = trunc((x - min)/d + 0.5) with d = (max - min)/(levels-1); q4_1 also
// clamps to 15, q5_1 relies on the range.
template <int kLevels>
void affine_codes(const float* x, uint8_t* codes, float& d, float& min) {
  float max;
  min_max(x, min, max);
  d = (max - min) / static_cast<float>(kLevels - 1);
  const float id = d != 0.0f ? 1.0f / d : 0.0f;
  for (int j = 0; j < kQK; ++j) {
    const int8_t c = trunc_low_byte((x[j] - min) * id + 0.5f);
    codes[j] = kLevels == 16 ? static_cast<uint8_t>(std::min<int>(15, c)) : static_cast<uint8_t>(c);
  }
}

void pack_nibbles(const uint8_t* codes, uint8_t* qs) {
  for (int j = 0; j < kHalf; ++j) qs[j] = static_cast<uint8_t>(codes[j] | (codes[j + kHalf] << 4));
}
void pack_5bit(const uint8_t* codes, uint8_t* qs, uint8_t (&qh)[4]) {
  uint32_t h = 0;
  for (int j = 0; j < kHalf; ++j) {
    qs[j] = static_cast<uint8_t>((codes[j] & 0xF) | ((codes[j + kHalf] & 0xF) << 4));
    h |= static_cast<uint32_t>((codes[j] >> 4) & 1) << j;
    h |= static_cast<uint32_t>((codes[j + kHalf] >> 4) & 1) << (j + kHalf);
  }
  store_qh(qh, h);
}

void encode_plain_q4_0(const float* x, uint8_t* dst, int64_t nblocks) {
  for (int64_t i = 0; i < nblocks; ++i, x += kQK) {
    uint8_t codes[kQK];
    float d;
    symmetric_codes<16>(x, codes, d);
    BlockQ4_0 b;
    b.d = fp32_to_fp16(d);
    pack_nibbles(codes, b.qs);
    store_block(dst, i, b);
  }
}

void encode_plain_q5_0(const float* x, uint8_t* dst, int64_t nblocks) {
  for (int64_t i = 0; i < nblocks; ++i, x += kQK) {
    uint8_t codes[kQK];
    float d;
    symmetric_codes<32>(x, codes, d);
    BlockQ5_0 b;
    b.d = fp32_to_fp16(d);
    pack_5bit(codes, b.qs, b.qh);
    store_block(dst, i, b);
  }
}

void encode_plain_q4_1(const float* x, uint8_t* dst, int64_t nblocks) {
  for (int64_t i = 0; i < nblocks; ++i, x += kQK) {
    uint8_t codes[kQK];
    float d, min;
    affine_codes<16>(x, codes, d, min);
    BlockQ4_1 b;
    b.d = fp32_to_fp16(d);
    b.m = fp32_to_fp16(min);
    pack_nibbles(codes, b.qs);
    store_block(dst, i, b);
  }
}

void encode_plain_q5_1(const float* x, uint8_t* dst, int64_t nblocks) {
  for (int64_t i = 0; i < nblocks; ++i, x += kQK) {
    uint8_t codes[kQK];
    float d, min;
    affine_codes<32>(x, codes, d, min);
    BlockQ5_1 b;
    b.d = fp32_to_fp16(d);
    b.m = fp32_to_fp16(min);
    pack_5bit(codes, b.qs, b.qh);
    store_block(dst, i, b);
  }
}

// q8_0 and q8_1: code = roundf(x / d) with d = amax/127; q8_1 adds s = fp16(sum(codes) * d).
template <typename B>
void encode_q8(const float* x, uint8_t* dst, int64_t nrows, int64_t n_per_row, const float*) {
  const int64_t nblocks = nrows * n_per_row / kQK;
  for (int64_t i = 0; i < nblocks; ++i, x += kQK) {
    const float d = q8_absmax(x) / 127.0f;
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    B b;
    b.d = fp32_to_fp16(d);
    int sum = 0;
    for (int j = 0; j < kQK; ++j) {
      b.qs[j] = round_low_byte(x[j] * id);
      sum += b.qs[j];
    }
    if constexpr (std::is_same_v<B, BlockQ8_1>) b.s = fp32_to_fp16(static_cast<float>(sum) * d);
    store_block(dst, i, b);
  }
}

// ---------------------------------------------------------------------------------------------
// Encoders with importance weights (ggml's quantize_row_q*_impl): per-block least-squares scale
// searches, weighting element j by imatrix[j] * sqrt(sigma2 + x[j]^2), sigma2 being the mean
// square of the whole row.

// ggml's nearest_int: round half to even through the 1.5 * 2^23 trick (meaningful for
// |v| < 2^22, deterministic beyond).
inline int nearest_int(float v) {
  const float t = v + 12582912.0f;
  return static_cast<int>(std::bit_cast<uint32_t>(t) & 0x7FFFFF) - 0x400000;
}

// Symmetric codes l + nmax, l in [-nmax, nmax-1], scale chosen among 1/iscale for iscale =
// -(nmax + k/10)/max, k = 0, -9..9, by the weighted fit sum(w x l)^2 / sum(w l^2).
float search_symmetric(const float* x, const float* w, int nmax, uint8_t* codes) {
  float amax = 0.0f, max = 0.0f;
  for (int i = 0; i < kQK; ++i) {
    const float ax = std::fabs(x[i]);
    if (ax > amax) {
      amax = ax;
      max = x[i];
    }
  }
  if (amax < 1e-15f) {
    std::fill(codes, codes + kQK, uint8_t{0});
    return 0.0f;
  }
  const auto code = [nmax](float iscale, float xi) {
    return std::max(-nmax, std::min(nmax - 1, nearest_int(iscale * xi)));
  };
  float iscale = static_cast<float>(-nmax) / max;
  float sumlx = 0.0f, suml2 = 0.0f;
  for (int i = 0; i < kQK; ++i) {
    const int l = code(iscale, x[i]);
    codes[i] = static_cast<uint8_t>(l + nmax);
    sumlx += w[i] * x[i] * static_cast<float>(l);
    suml2 += w[i] * static_cast<float>(l) * static_cast<float>(l);
  }
  float scale = suml2 != 0.0f ? sumlx / suml2 : 0.0f;
  float best = scale * sumlx;
  for (int is = -9; is <= 9; ++is) {
    if (is == 0) continue;
    iscale = -(static_cast<float>(nmax) + 0.1f * static_cast<float>(is)) / max;
    sumlx = suml2 = 0.0f;
    for (int i = 0; i < kQK; ++i) {
      const float l = static_cast<float>(code(iscale, x[i]));
      sumlx += w[i] * x[i] * l;
      suml2 += w[i] * l * l;
    }
    if (suml2 > 0.0f && sumlx * sumlx > best * suml2) {
      for (int i = 0; i < kQK; ++i) codes[i] = static_cast<uint8_t>(code(iscale, x[i]) + nmax);
      scale = sumlx / suml2;
      best = scale * sumlx;
    }
  }
  return scale;
}

// Affine codes in [0, nmax] with value scale * l - neg_min, min <= 0: starts from the block's
// range, then tries 37 scales (nmax - 0.9 + 0.05 k)/(max - min) with a weighted least-squares
// scale and min, keeping the lowest weighted squared error.
float search_affine(const float* x, const float* w, int nmax, uint8_t* codes, float& neg_min) {
  float min = x[0], max = x[0];
  float sum_w = w[0], sum_x = sum_w * x[0];
  for (int i = 1; i < kQK; ++i) {
    if (x[i] < min) min = x[i];
    if (x[i] > max) max = x[i];
    sum_w += w[i];
    sum_x += w[i] * x[i];
  }
  if (min > 0.0f) min = 0.0f;
  if (max <= min) {
    std::fill(codes, codes + kQK, uint8_t{0});
    neg_min = -min;
    return 0.0f;
  }
  const auto code = [nmax](float iscale, float xi, float lo) {
    return std::max(0, std::min(nmax, nearest_int(iscale * (xi - lo))));
  };
  float iscale = static_cast<float>(nmax) / (max - min);
  float scale = 1.0f / iscale;
  float best_err = 0.0f;
  for (int i = 0; i < kQK; ++i) {
    codes[i] = static_cast<uint8_t>(code(iscale, x[i], min));
    const float diff = scale * static_cast<float>(codes[i]) + min - x[i];
    best_err += w[i] * (diff * diff);
  }
  for (int is = 0; is <= 36; ++is) {
    iscale = (-0.9f + 0.05f * static_cast<float>(is) + static_cast<float>(nmax)) / (max - min);
    uint8_t trial[kQK];
    float sum_l = 0.0f, sum_l2 = 0.0f, sum_xl = 0.0f;
    for (int i = 0; i < kQK; ++i) {
      const int l = code(iscale, x[i], min);
      trial[i] = static_cast<uint8_t>(l);
      const float fl = static_cast<float>(l);
      sum_l += w[i] * fl;
      sum_l2 += w[i] * fl * fl;
      sum_xl += w[i] * fl * x[i];
    }
    const float det = sum_w * sum_l2 - sum_l * sum_l;
    if (det > 0.0f) {
      float this_scale = (sum_w * sum_xl - sum_x * sum_l) / det;
      float this_min = (sum_l2 * sum_x - sum_l * sum_xl) / det;
      if (this_min > 0.0f) {
        this_min = 0.0f;
        this_scale = sum_xl / sum_l2;
      }
      float err = 0.0f;
      for (int i = 0; i < kQK; ++i) {
        const float diff = this_scale * static_cast<float>(trial[i]) + this_min - x[i];
        err += w[i] * (diff * diff);
      }
      if (err < best_err) {
        std::copy(trial, trial + kQK, codes);
        best_err = err;
        scale = this_scale;
        min = this_min;
      }
    }
  }
  neg_min = -min;
  return scale;
}

// Per-element weights of one block: imatrix * sqrt(sigma2 + x^2).
void block_weights(const float* x, const float* qw, float sigma2, float* w) {
  for (int j = 0; j < kQK; ++j) w[j] = qw[j] * std::sqrt(sigma2 + x[j] * x[j]);
}

float row_mean_square(const float* x, int64_t n) {
  float sum = 0.0f;
  for (int64_t j = 0; j < n; ++j) sum += x[j] * x[j];
  return sum / static_cast<float>(n);
}

template <int kType>  // 0: q4_0, 1: q4_1, 2: q5_0, 3: q5_1
void encode_weighted_row(const float* x, uint8_t* dst, int64_t n, const float* imatrix) {
  const float sigma2 = row_mean_square(x, n);
  for (int64_t i = 0; i < n / kQK; ++i) {
    const float* xb = x + i * kQK;
    float w[kQK];
    block_weights(xb, imatrix + i * kQK, sigma2, w);
    uint8_t codes[kQK];
    if constexpr (kType == 0 || kType == 2) {
      const float d = search_symmetric(xb, w, kType == 0 ? 8 : 16, codes);
      if constexpr (kType == 0) {
        BlockQ4_0 b;
        b.d = fp32_to_fp16(d);
        pack_nibbles(codes, b.qs);
        store_block(dst, i, b);
      } else {
        BlockQ5_0 b;
        b.d = fp32_to_fp16(d);
        pack_5bit(codes, b.qs, b.qh);
        store_block(dst, i, b);
      }
    } else {
      float neg_min;
      const float d = search_affine(xb, w, kType == 1 ? 15 : 31, codes, neg_min);
      if constexpr (kType == 1) {
        BlockQ4_1 b;
        b.d = fp32_to_fp16(d);
        b.m = fp32_to_fp16(-neg_min);
        pack_nibbles(codes, b.qs);
        store_block(dst, i, b);
      } else {
        BlockQ5_1 b;
        b.d = fp32_to_fp16(d);
        b.m = fp32_to_fp16(-neg_min);
        pack_5bit(codes, b.qs, b.qh);
        store_block(dst, i, b);
      }
    }
  }
}

// Without importance the rows are one stream of blocks; with it each row has its own sigma2.
template <int kType, void (*kPlain)(const float*, uint8_t*, int64_t), typename B>
void encode_legacy(const float* src, uint8_t* dst, int64_t nrows, int64_t n_per_row,
                   const float* imatrix) {
  if (!imatrix) {
    kPlain(src, dst, nrows * n_per_row / kQK);
    return;
  }
  const int64_t row_bytes = n_per_row / kQK * static_cast<int64_t>(sizeof(B));
  for (int64_t r = 0; r < nrows; ++r)
    encode_weighted_row<kType>(src + r * n_per_row, dst + r * row_bytes, n_per_row, imatrix);
}

}  // namespace

void register_legacy_codecs(CodecTable& t) {
  entry(t, GgmlType::Q4_0) = {decode_q4_0, encode_legacy<0, encode_plain_q4_0, BlockQ4_0>};
  entry(t, GgmlType::Q4_1) = {decode_q4_1, encode_legacy<1, encode_plain_q4_1, BlockQ4_1>};
  entry(t, GgmlType::Q5_0) = {decode_q5_0, encode_legacy<2, encode_plain_q5_0, BlockQ5_0>};
  entry(t, GgmlType::Q5_1) = {decode_q5_1, encode_legacy<3, encode_plain_q5_1, BlockQ5_1>};
  entry(t, GgmlType::Q8_0) = {decode_q8<BlockQ8_0>, encode_q8<BlockQ8_0>};
  entry(t, GgmlType::Q8_1) = {decode_q8<BlockQ8_1>, encode_q8<BlockQ8_1>};
}

}  // namespace gguf::detail

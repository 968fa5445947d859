// q4_K and q5_K: 8 affine groups of 32 per super-block (value = d*sc*q - dmin*m) with 6-bit
// group scales and mins. Encoders reproduce ggml's reference and importance-weighted paths.
#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstring>

#include "codecs/codec_kquants_common.h"

namespace gguf::detail::kq {
namespace {

// Reference path: per-group search weighted by |x| plus the group's rms, then the group
// scales and mins are scaled linearly into 6 bits.
template <class Block>
void ref_scales(const float* x, int nmax, const AffineSearch& search, Block& b, uint8_t* L) {
  float scales[8], mins[8], w[32];
  float max_scale = 0, max_min = 0;
  for (int j = 0; j < 8; ++j) {
    const float* xg = x + 32 * j;
    float sum_x2 = 0;
    for (int i = 0; i < 32; ++i) sum_x2 += xg[i] * xg[i];
    const float av_x = std::sqrt(sum_x2 / 32);
    for (int i = 0; i < 32; ++i) w[i] = av_x + std::fabs(xg[i]);
    scales[j] = search_affine(32, nmax, xg, w, L + 32 * j, &mins[j], search);
    if (scales[j] > max_scale) max_scale = scales[j];
    if (mins[j] > max_min) max_min = mins[j];
  }
  const float inv_scale = max_scale > 0 ? 63.0f / max_scale : 0.0f;
  const float inv_min = max_min > 0 ? 63.0f / max_min : 0.0f;
  uint8_t ls[8], lm[8];
  for (int j = 0; j < 8; ++j) {
    ls[j] = std::min<uint8_t>(63, static_cast<uint8_t>(nearest_int(inv_scale * scales[j])));
    lm[j] = std::min<uint8_t>(63, static_cast<uint8_t>(nearest_int(inv_min * mins[j])));
  }
  pack_scales_mins(ls, lm, b.scales);
  b.d = fp32_to_fp16(max_scale / 63.0f);
  b.dmin = fp32_to_fp16(max_min / 63.0f);
}

// Importance path: weights qw*sqrt(2*mean(x^2) + x^2), finer search, then the group scales
// and mins are themselves fitted with search_positive. q4_K stores those codes unclamped.
template <class Block>
void imatrix_scales(const float* x, const float* qw, int nmax, bool clamp_codes, Block& b,
                    uint8_t* L) {
  constexpr AffineSearch kSearch{-0.9f, 0.05f, 36, false};
  float scales[8], mins[8], sw[8], w[32];
  float sum_x2 = 0;
  for (int i = 0; i < kQK; ++i) sum_x2 += x[i] * x[i];
  const float sigma2 = 2 * sum_x2 / kQK;
  for (int j = 0; j < 8; ++j) {
    const float* xg = x + 32 * j;
    for (int i = 0; i < 32; ++i) w[i] = qw[32 * j + i] * std::sqrt(sigma2 + xg[i] * xg[i]);
    float s = 0;
    for (int i = 0; i < 32; ++i) s += w[i];
    sw[j] = s;
    scales[j] = search_affine(32, nmax, xg, w, L + 32 * j, &mins[j], kSearch);
  }
  uint8_t ls[8], lm[8];
  const float d_block = search_positive(8, 63, scales, ls, sw);
  const float m_block = search_positive(8, 63, mins, lm, sw);
  if (clamp_codes) {
    for (int j = 0; j < 8; ++j) {
      ls[j] = std::min<uint8_t>(63, ls[j]);
      lm[j] = std::min<uint8_t>(63, lm[j]);
    }
  }
  pack_scales_mins(ls, lm, b.scales);
  b.d = fp32_to_fp16(d_block);
  b.dmin = fp32_to_fp16(m_block);
}

// Final codes from the stored scales; groups whose scale is 0 keep the search's codes.
template <class Block>
void requantize(const float* x, const Block& b, int nmax, uint8_t* L) {
  const float d_all = fp16_to_fp32(b.d), m_all = fp16_to_fp32(b.dmin);
  for (int j = 0; j < 8; ++j) {
    uint8_t sc, m;
    unpack_scale_min(j, b.scales, sc, m);
    const float d = d_all * static_cast<float>(sc);
    if (d == 0) continue;
    const float dm = m_all * static_cast<float>(m);
    for (int i = 0; i < 32; ++i)
      L[32 * j + i] =
          static_cast<uint8_t>(std::clamp(nearest_int((x[32 * j + i] + dm) / d), 0, nmax));
  }
}

void pack_q4(const uint8_t* L, BlockQ4_K& b) {
  for (int j = 0; j < kQK; j += 64)
    for (int l = 0; l < 32; ++l)
      b.qs[j / 2 + l] = static_cast<uint8_t>(L[j + l] | (L[j + l + 32] << 4));
}

void pack_q5(const uint8_t* L, BlockQ5_K& b) {
  std::memset(b.qh, 0, sizeof b.qh);
  for (int j = 0; j < kQK; j += 64) {
    const int bit = j / 32;  // 2 per 64 elements
    for (int l = 0; l < 32; ++l) {
      const int lo = L[j + l], hi = L[j + l + 32];
      b.qh[l] |= static_cast<uint8_t>(((lo >> 4) << bit) | ((hi >> 4) << (bit + 1)));
      b.qs[j / 2 + l] = static_cast<uint8_t>((lo & 0xF) | ((hi & 0xF) << 4));
    }
  }
}

}  // namespace

void encode_q4_K_ref(const float* x, uint8_t* dst, int64_t n) {
  constexpr AffineSearch kSearch{-1.0f, 0.1f, 20, false};
  for (int64_t ib = 0; ib < n / kQK; ++ib, x += kQK, dst += sizeof(BlockQ4_K)) {
    BlockQ4_K b{};
    uint8_t L[kQK];
    ref_scales(x, 15, kSearch, b, L);
    requantize(x, b, 15, L);
    pack_q4(L, b);
    store_block(b, dst);
  }
}

void encode_q4_K_imatrix(const float* x, uint8_t* dst, int64_t n, const float* qw) {
  for (int64_t ib = 0; ib < n / kQK; ++ib, x += kQK, qw += kQK, dst += sizeof(BlockQ4_K)) {
    BlockQ4_K b{};
    uint8_t L[kQK];
    imatrix_scales(x, qw, 15, /*clamp_codes=*/false, b, L);
    requantize(x, b, 15, L);
    pack_q4(L, b);
    store_block(b, dst);
  }
}

GGUF_DECODE_CLONES void decode_q4_K(const uint8_t* src, float* y, int64_t n) {
  for (int64_t ib = 0; ib < n / kQK; ++ib, src += sizeof(BlockQ4_K)) {
    // Header fields are copied out; the quants are read in place (no 144-byte block copy).
    uint16_t dh, mh;
    uint8_t scales[12];
    std::memcpy(&dh, src + offsetof(BlockQ4_K, d), 2);
    std::memcpy(&mh, src + offsetof(BlockQ4_K, dmin), 2);
    std::memcpy(scales, src + offsetof(BlockQ4_K, scales), 12);
    const uint8_t* __restrict qs = src + offsetof(BlockQ4_K, qs);
    const float d = fp16_to_fp32(dh), dmin = fp16_to_fp32(mh);
    // Each 32 bytes of qs hold two groups: low nibbles, then high nibbles.
    for (int j = 0; j < 8; j += 2, y += 64) {
      uint8_t sc, m;
      unpack_scale_min(j, scales, sc, m);
      const float d1 = d * static_cast<float>(sc), m1 = dmin * static_cast<float>(m);
      unpack_scale_min(j + 1, scales, sc, m);
      const float d2 = d * static_cast<float>(sc), m2 = dmin * static_cast<float>(m);
      const uint8_t* __restrict q = qs + 16 * j;
      float* __restrict out = y;
      for (int l = 0; l < 32; ++l) out[l] = d1 * static_cast<float>(q[l] & 0xF) - m1;
      for (int l = 0; l < 32; ++l) out[l + 32] = d2 * static_cast<float>(q[l] >> 4) - m2;
    }
  }
}

void encode_q5_K_ref(const float* x, uint8_t* dst, int64_t n) {
  constexpr AffineSearch kSearch{-0.5f, 0.1f, 15, false};
  for (int64_t ib = 0; ib < n / kQK; ++ib, x += kQK, dst += sizeof(BlockQ5_K)) {
    BlockQ5_K b{};
    uint8_t L[kQK];
    ref_scales(x, 31, kSearch, b, L);
    requantize(x, b, 31, L);
    pack_q5(L, b);
    store_block(b, dst);
  }
}

void encode_q5_K_imatrix(const float* x, uint8_t* dst, int64_t n, const float* qw) {
  for (int64_t ib = 0; ib < n / kQK; ++ib, x += kQK, qw += kQK, dst += sizeof(BlockQ5_K)) {
    BlockQ5_K b{};
    uint8_t L[kQK];
    imatrix_scales(x, qw, 31, /*clamp_codes=*/true, b, L);
    requantize(x, b, 31, L);
    pack_q5(L, b);
    store_block(b, dst);
  }
}

namespace {

// Groups kJ and kJ + 1 of a q5_K block; kJ is a constant so the fifth-bit shifts are too.
template <int kJ>
inline void decode_q5_pair(const uint8_t* __restrict qs, const uint8_t* __restrict qh,
                           const uint8_t* scales, float d, float dmin, float* __restrict y) {
  uint8_t sc, m;
  unpack_scale_min(kJ, scales, sc, m);
  const float d1 = d * static_cast<float>(sc), m1 = dmin * static_cast<float>(m);
  unpack_scale_min(kJ + 1, scales, sc, m);
  const float d2 = d * static_cast<float>(sc), m2 = dmin * static_cast<float>(m);
  const uint8_t* __restrict q = qs + 16 * kJ;
  for (int l = 0; l < 32; ++l)
    y[l] = d1 * static_cast<float>((q[l] & 0xF) | (((qh[l] >> kJ) & 1) << 4)) - m1;
  for (int l = 0; l < 32; ++l)
    y[l + 32] = d2 * static_cast<float>((q[l] >> 4) | (((qh[l] >> (kJ + 1)) & 1) << 4)) - m2;
}

}  // namespace

GGUF_DECODE_CLONES void decode_q5_K(const uint8_t* src, float* y, int64_t n) {
  for (int64_t ib = 0; ib < n / kQK; ++ib, src += sizeof(BlockQ5_K), y += kQK) {
    uint16_t dh, mh;
    uint8_t scales[12];
    std::memcpy(&dh, src + offsetof(BlockQ5_K, d), 2);
    std::memcpy(&mh, src + offsetof(BlockQ5_K, dmin), 2);
    std::memcpy(scales, src + offsetof(BlockQ5_K, scales), 12);
    const uint8_t* qh = src + offsetof(BlockQ5_K, qh);
    const uint8_t* qs = src + offsetof(BlockQ5_K, qs);
    const float d = fp16_to_fp32(dh), dmin = fp16_to_fp32(mh);
    decode_q5_pair<0>(qs, qh, scales, d, dmin, y);
    decode_q5_pair<2>(qs, qh, scales, d, dmin, y + 64);
    decode_q5_pair<4>(qs, qh, scales, d, dmin, y + 128);
    decode_q5_pair<6>(qs, qh, scales, d, dmin, y + 192);
  }
}

}  // namespace gguf::detail::kq

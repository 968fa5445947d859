// q2_K and q3_K: 16 groups of 16 per super-block, 2 and 3 bits per weight plus group scales.
// Encoders reproduce ggml's reference path (no imatrix) and its importance-weighted path.
#include <algorithm>
#include <cmath>
#include <cstring>

#include "codecs/codec_kquants_common.h"
#include "codecs/codec_simd.h"

namespace gguf::detail::kq {
namespace {

// Four 32-element planes of 2-bit codes per 128 elements, as q2_K and q3_K store them.
void pack_2bit_planes(const uint8_t* L, uint8_t* qs) {
  for (int j = 0; j < kQK; j += 128)
    for (int l = 0; l < 32; ++l)
      qs[j / 4 + l] = static_cast<uint8_t>(L[j + l] | (L[j + l + 32] << 2) | (L[j + l + 64] << 4) |
                                           (L[j + l + 96] << 6));
}

// Final q2_K codes from the stored (rounded) scales; groups whose scale is 0 keep the codes
// of the search, exactly as ggml leaves them.
void requantize_q2(const float* x, BlockQ2_K& b, uint8_t* L) {
  const float d_all = fp16_to_fp32(b.d), m_all = fp16_to_fp32(b.dmin);
  for (int j = 0; j < kQK / 16; ++j) {
    const float d = d_all * static_cast<float>(b.scales[j] & 0xF);
    if (d == 0) continue;
    const float m = m_all * static_cast<float>(b.scales[j] >> 4);
    for (int i = 0; i < 16; ++i)
      L[16 * j + i] = static_cast<uint8_t>(
          std::clamp(nearest_int(add_keeping_nan_of(x[16 * j + i], m) / d), 0, 3));
  }
}

// hmask takes bit 2 of every code (codes are 0..7); qs the low two bits.
void pack_q3_codes(const int8_t* L, BlockQ3_K& b) {
  std::memset(b.hmask, 0, sizeof b.hmask);
  uint8_t codes[kQK];
  for (int j = 0; j < kQK; ++j) {
    b.hmask[j % 32] |= static_cast<uint8_t>(((L[j] >> 2) & 1) << (j / 32));
    codes[j] = static_cast<uint8_t>(L[j] & 3);
  }
  pack_2bit_planes(codes, b.qs);
}

void requantize_q3(const float* x, BlockQ3_K& b, int8_t* L) {
  const float d_all = fp16_to_fp32(b.d);
  for (int j = 0; j < kQK / 16; ++j) {
    const float d = d_all * static_cast<float>(unpack_q3_scale(j, b.scales));
    if (d == 0) continue;
    for (int i = 0; i < 16; ++i)
      L[16 * j + i] = static_cast<int8_t>(std::clamp(nearest_int(x[16 * j + i] / d), -4, 3) + 4);
  }
}

// The affine search of q2_K's 16 groups of 16 (codes 0..3): one group per AVX-512 lane
// where the CPU has it.
void search_groups(const float* x, const float* w, uint8_t* L, float* scales, float* mins,
                   const AffineSearch& p) {
  if (codec_avx512()) return search_affine_groups_avx512(16, 16, 3, x, w, L, scales, mins, p);
  for (int j = 0; j < 16; ++j)
    scales[j] = search_affine(16, 3, x + 16 * j, w + 16 * j, L + 16 * j, &mins[j], p);
}

}  // namespace

void encode_q2_K_ref(const float* x, uint8_t* dst, int64_t n) {
  constexpr AffineSearch kSearch{-0.5f, 0.1f, 15, true};
  constexpr float kQ4Scale = 15.0f;
  for (int64_t ib = 0; ib < n / kQK; ++ib, x += kQK, dst += sizeof(BlockQ2_K)) {
    BlockQ2_K b{};
    uint8_t L[kQK];
    float scales[16], mins[16], w[kQK];
    float max_scale = 0, max_min = 0;
    for (int i = 0; i < kQK; ++i) w[i] = std::fabs(x[i]);
    search_groups(x, w, L, scales, mins, kSearch);
    for (int j = 0; j < 16; ++j) {
      if (scales[j] > max_scale) max_scale = scales[j];
      if (mins[j] > max_min) max_min = mins[j];
    }
    if (max_scale > 0) {
      const float iscale = kQ4Scale / max_scale;
      for (int j = 0; j < 16; ++j)
        b.scales[j] = static_cast<uint8_t>(nearest_int(iscale * scales[j]));
      b.d = fp32_to_fp16(max_scale / kQ4Scale);
    } else {
      b.d = fp32_to_fp16(0.0f);
    }
    if (max_min > 0) {
      const float iscale = kQ4Scale / max_min;
      for (int j = 0; j < 16; ++j)
        b.scales[j] |= static_cast<uint8_t>(nearest_int(iscale * mins[j]) << 4);
      b.dmin = fp32_to_fp16(max_min / kQ4Scale);
    } else {
      b.dmin = fp32_to_fp16(0.0f);
    }
    requantize_q2(x, b, L);
    pack_2bit_planes(L, b.qs);
    store_block(b, dst);
  }
}

void encode_q2_K_imatrix(const float* x, uint8_t* dst, int64_t n, const float* qw) {
  constexpr AffineSearch kSearch{-0.9f, 0.05f, 36, false};
  for (int64_t ib = 0; ib < n / kQK; ++ib, x += kQK, qw += kQK, dst += sizeof(BlockQ2_K)) {
    BlockQ2_K b{};
    uint8_t L[kQK], Ls[16], Lm[16];
    float scales[16], mins[16], sw[16], w[kQK];
    float sumx2 = 0;
    for (int i = 0; i < kQK; ++i) sumx2 += x[i] * x[i];
    const float sigma2 = sumx2 / kQK;
    for (int i = 0; i < kQK; ++i) w[i] = qw[i] * std::sqrt(sigma2 + x[i] * x[i]);
    for (int j = 0; j < 16; ++j) {
      float s = 0;
      for (int i = 0; i < 16; ++i) s += w[16 * j + i];
      sw[j] = s;
    }
    search_groups(x, w, L, scales, mins, kSearch);
    b.d = fp32_to_fp16(search_positive(16, 15, scales, Ls, sw));
    b.dmin = fp32_to_fp16(search_positive(16, 15, mins, Lm, sw));
    for (int j = 0; j < 16; ++j) b.scales[j] = static_cast<uint8_t>(Ls[j] | (Lm[j] << 4));
    requantize_q2(x, b, L);
    pack_2bit_planes(L, b.qs);
    store_block(b, dst);
  }
}

void decode_q2_K(const uint8_t* src, float* y, int64_t n) {
  for (int64_t ib = 0; ib < n / kQK; ++ib, src += sizeof(BlockQ2_K)) {
    const auto b = load_block<BlockQ2_K>(src);
    const float d = fp16_to_fp32(b.d), dmin = fp16_to_fp32(b.dmin);
    for (int j = 0; j < 16; ++j) {
      const float dl = d * static_cast<float>(b.scales[j] & 0xF);
      const float ml = dmin * static_cast<float>(b.scales[j] >> 4);
      // Group j holds elements 16j..16j+15: plane (j/2)%4 of the 128-element half j/8.
      const uint8_t* q = b.qs + 32 * (j / 8) + 16 * (j % 2);
      const int shift = 2 * ((j / 2) % 4);
      for (int l = 0; l < 16; ++l) *y++ = dl * static_cast<float>((q[l] >> shift) & 3) - ml;
    }
  }
}

void encode_q3_K_ref(const float* x, uint8_t* dst, int64_t n) {
  for (int64_t ib = 0; ib < n / kQK; ++ib, x += kQK, dst += sizeof(BlockQ3_K)) {
    BlockQ3_K b{};
    int8_t L[kQK];
    float scales[16];
    float max_scale = 0, amax = 0;
    search_q3_block(x, L, scales);
    for (int j = 0; j < 16; ++j) {
      const float a = std::fabs(scales[j]);
      if (a > amax) {
        amax = a;
        max_scale = scales[j];
      }
    }
    if (max_scale != 0) {
      const float iscale = -32.0f / max_scale;
      int ls[16];
      for (int j = 0; j < 16; ++j) {
        // ggml rounds into an int8 before clamping; the wrap matters only for garbage input.
        const int8_t l = static_cast<int8_t>(nearest_int(iscale * scales[j]));
        ls[j] = std::clamp<int>(l, -32, 31) + 32;
      }
      pack_q3_scales(ls, b.scales);
      b.d = fp32_to_fp16(1 / iscale);
    } else {
      b.d = fp32_to_fp16(0.0f);
    }
    requantize_q3(x, b, L);
    pack_q3_codes(L, b);
    store_block(b, dst);
  }
}

void encode_q3_K_imatrix(const float* x, uint8_t* dst, int64_t n, const float* qw) {
  for (int64_t ib = 0; ib < n / kQK; ++ib, x += kQK, qw += kQK, dst += sizeof(BlockQ3_K)) {
    BlockQ3_K b{};
    int8_t L[kQK], Ls[16];
    float scales[16], sw[16], w[16];
    float sumx2 = 0;
    for (int i = 0; i < kQK; ++i) sumx2 += x[i] * x[i];
    const float sigma2 = 2 * sumx2 / kQK;
    for (int j = 0; j < 16; ++j) {
      const float* xg = x + 16 * j;
      for (int i = 0; i < 16; ++i) w[i] = qw[16 * j + i] * std::sqrt(sigma2 + xg[i] * xg[i]);
      float s = 0;
      for (int i = 0; i < 16; ++i) s += w[i];
      sw[j] = s;
      scales[j] = search_symmetric(16, 4, xg, w, L + 16 * j);
    }
    const float d_block = search_symmetric(16, 32, scales, sw, Ls);
    int ls[16];
    for (int j = 0; j < 16; ++j) ls[j] = Ls[j];
    pack_q3_scales(ls, b.scales);
    b.d = fp32_to_fp16(d_block);
    requantize_q3(x, b, L);
    pack_q3_codes(L, b);
    store_block(b, dst);
  }
}

void decode_q3_K(const uint8_t* src, float* y, int64_t n) {
  for (int64_t ib = 0; ib < n / kQK; ++ib, src += sizeof(BlockQ3_K)) {
    const auto b = load_block<BlockQ3_K>(src);
    const float d_all = fp16_to_fp32(b.d);
    for (int j = 0; j < 16; ++j) {
      const float dl = d_all * static_cast<float>(unpack_q3_scale(j, b.scales));
      const uint8_t* q = b.qs + 32 * (j / 8) + 16 * (j % 2);
      const uint8_t* hm = b.hmask + 16 * (j % 2);
      const int plane = (j / 2) % 4;
      const uint8_t hbit = static_cast<uint8_t>(1u << (4 * (j / 8) + plane));
      for (int l = 0; l < 16; ++l) {
        const int code = ((q[l] >> (2 * plane)) & 3) - ((hm[l] & hbit) ? 0 : 4);
        *y++ = dl * static_cast<float>(code);
      }
    }
  }
}

}  // namespace gguf::detail::kq

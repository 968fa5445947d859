// IQ4_NL and IQ4_XS encoders, byte-identical with ggml's quantize_iq4_*: 16 fixed non-linear
// levels, a scale search per 32 values.
#include "codecs/codec_iquants_encode.h"
#include "codecs/codec_iquants_lattice.h"

namespace gguf::detail::iq {
namespace {

// ---- IQ4_NL / IQ4_XS: 16 non-linear levels per element, scale per 32 ----

// The level nearest x, as ggml's best_index_int8 finds it by bisection (0 at or below the
// lowest level, 15 at or above the highest, else the nearer of the two levels around x with
// ggml's float comparison, ties to the upper). Branch-free: the level above x is one more than
// the count of inner levels at or below it. A NaN ends the bisection at 15, as in ggml.
constexpr float kLevels[16] = {-127, -104, -83, -65, -49, -35, -22, -10,
                               1,    13,   25,  38,  53,  69,  89,  113};

inline int best_level(float x) {
  if (x != x) return 15;
  int mu = 1;
  for (int k = 1; k < 15; ++k) mu += kLevels[k] <= x;
  return x - kLevels[mu - 1] < kLevels[mu] - x ? mu - 1 : mu;
}

// best_level(id * xb[j]) for the 32 values of a group, written so that it vectorizes.
GGUF_ENCODE_CLONES void levels32(const float* __restrict xb, float id, int* __restrict out) {
  for (int j = 0; j < 32; ++j) {
    const float x = id * xb[j];
    int mu = 1;
    for (int k = 1; k < 15; ++k) mu += kLevels[k] <= x ? 1 : 0;
    const float lo = kLevels[mu - 1], hi = kLevels[mu];
    const int l = x - lo < hi - x ? mu - 1 : mu;
    out[j] = x != x ? 15 : l;
  }
}

// One super-block of n (32 for IQ4_NL, 256 for IQ4_XS) values in groups of 32: ggml's
// quantize_row_iq4_nl_impl with ntry = 7. Writes the fp16 scale to dh, the packed levels to
// q4 and, for n > 32, the 6-bit group scales to scales_h/scales_l.
void iq4_super_block(int n, const float* x, const float* qw, uint16_t* dh, uint8_t* q4,
                     uint16_t* scales_h, uint8_t* scales_l) {
  constexpr int kGroup = 32, kTry = 7;
  const auto& values = kValuesIq4Nl;
  uint8_t L[256];
  float scales[8], weight[kGroup];
  float sigma2 = 0;
  for (int j = 0; j < n; ++j) sigma2 += x[j] * x[j];
  sigma2 *= 2.f / static_cast<float>(n);
  std::memset(q4, 0, n / 2);
  *dh = fp32_to_fp16(0.f);
  float max_scale = 0, amax_scale = 0;
  for (int ib = 0; ib < n / kGroup; ++ib) {
    const float* xb = x + ib * kGroup;
    uint8_t* Lb = L + ib * kGroup;
    if (qw) {
      for (int j = 0; j < kGroup; ++j)
        weight[j] = qw[ib * kGroup + j] * std::sqrt(sigma2 + xb[j] * xb[j]);
    } else {
      for (int j = 0; j < kGroup; ++j) weight[j] = xb[j] * xb[j];
    }
    float amax = 0, max = 0;
    for (int j = 0; j < kGroup; ++j) {
      const float ax = std::fabs(xb[j]);
      if (ax > amax) {
        amax = ax;
        max = xb[j];
      }
    }
    if (amax < kGroupMaxEps) {
      scales[ib] = 0;
      continue;
    }
    float d = -max / values[0];
    float id = 1 / d;
    float sumqx = 0, sumq2 = 0;
    int lv[kGroup];
    levels32(xb, id, lv);
    for (int j = 0; j < kGroup; ++j) {
      const int l = lv[j];
      Lb[j] = static_cast<uint8_t>(l);
      const float q = values[l];
      sumqx += weight[j] * q * xb[j];
      sumq2 += weight[j] * q * q;
    }
    d = sumq2 > 0 ? sumqx / sumq2 : 0.f;
    float best = d * sumqx;
    for (int itry = -kTry; itry <= kTry; ++itry) {
      id = static_cast<float>(itry + values[0]) / max;
      sumqx = sumq2 = 0;
      levels32(xb, id, lv);
      for (int j = 0; j < kGroup; ++j) {
        const float q = values[lv[j]];
        sumqx += weight[j] * q * xb[j];
        sumq2 += weight[j] * q * q;
      }
      if (sumq2 > 0 && sumqx * sumqx > best * sumq2) {
        d = sumqx / sumq2;
        best = d * sumqx;
      }
    }
    scales[ib] = d;
    if (std::fabs(d) > amax_scale) {
      amax_scale = std::fabs(d);
      max_scale = d;
    }
  }
  if (n > kGroup) {
    *scales_h = 0;
    const float d = -max_scale / 32;
    *dh = fp32_to_fp16(d);
    const float id = d != 0 ? 1 / d : 0.f;
    for (int ib = 0; ib < n / kGroup; ++ib) {
      int l = std::max(-32, std::min(31, nearest_int(id * scales[ib])));
      const float dl = d * static_cast<float>(l);
      const float idl = dl != 0 ? 1 / dl : 0.f;
      for (int j = 0; j < kGroup; ++j)
        L[ib * kGroup + j] = static_cast<uint8_t>(best_level(idl * x[ib * kGroup + j]));
      l += 32;
      const auto l_l = static_cast<uint8_t>(l & 0xf), l_h = static_cast<uint8_t>(l >> 4);
      if (ib % 2 == 0)
        scales_l[ib / 2] = l_l;
      else
        scales_l[ib / 2] |= static_cast<uint8_t>(l_l << 4);
      *scales_h |= static_cast<uint16_t>(l_h << (2 * (ib % 8)));
    }
  } else {
    *dh = fp32_to_fp16(scales[0]);
    const float id = scales[0] != 0 ? 1 / scales[0] : 0;
    for (int j = 0; j < n; ++j) L[j] = static_cast<uint8_t>(best_level(id * x[j]));
  }
  for (int i = 0; i < n / 32; ++i)
    for (int j = 0; j < 16; ++j)
      q4[16 * i + j] = static_cast<uint8_t>(L[32 * i + j] | (L[32 * i + 16 + j] << 4));
}

// IQ4_NL rows: blocks of 32 values (18 bytes: the fp16 scale, then the packed levels).
void encode_iq4_nl_row(const float* x, uint8_t* dst, int64_t n, const float* qw) {
  for (int64_t ib = 0; ib < n / 32; ++ib, dst += 18) {
    uint16_t dh, unused_h;
    iq4_super_block(32, x + 32 * ib, qw ? qw + 32 * ib : nullptr, &dh, dst + 2, &unused_h, nullptr);
    std::memcpy(dst, &dh, 2);
  }
}

// IQ4_XS rows: super-blocks of 256 (136 bytes: d, the high scale bits, the low scale nibbles,
// the packed levels).
void encode_iq4_xs_row(const float* x, uint8_t* dst, int64_t n, const float* qw) {
  for (int64_t ib = 0; ib < n / kQK; ++ib, dst += 136) {
    uint16_t dh, scales_h;
    iq4_super_block(kQK, x + kQK * ib, qw ? qw + kQK * ib : nullptr, &dh, dst + 8, &scales_h,
                    dst + 4);
    std::memcpy(dst, &dh, 2);
    std::memcpy(dst + 2, &scales_h, 2);
  }
}

}  // namespace

void encode_iq4_nl(const float* src, uint8_t* dst, int64_t nrows, int64_t n, const float* qw) {
  encode_rows(encode_iq4_nl_row, 32, 18, src, dst, nrows, n, qw);
}
void encode_iq4_xs(const float* src, uint8_t* dst, int64_t nrows, int64_t n, const float* qw) {
  encode_rows(encode_iq4_xs_row, kQK, 136, src, dst, nrows, n, qw);
}

}  // namespace gguf::detail::iq

// IQ3_XXS and IQ3_S encoders, byte-identical with ggml's quantize_iq3_*: groups of 4
// magnitudes on a lattice, a scale sweep per 32 values (see codec_iquants_lattice.h).
#include "codecs/codec_iquants_encode.h"
#include "codecs/codec_iquants_lattice.h"
#include "codecs/codec_simd.h"

namespace gguf::detail::iq {
namespace {

// ---- IQ3_XXS / IQ3_S: groups of 4 magnitudes on a 256- / 512-point lattice of odd values up
// to 15, a 4-bit scale per 32 ----

constexpr float kGroupMaxEpsIq3Xxs = 1e-8f;

const SweepLattice& iq3_xxs_sweep_lattice() {
  static const SweepLattice sweep = sweep_lattice(iq3_xxs_lattice(), 3);
  return sweep;
}
const SweepLattice& iq3_s_sweep_lattice() {
  static const SweepLattice sweep = sweep_lattice(iq3_s_lattice(), 3);
  return sweep;
}

// ggml's quantize_row_iq3_xxs_impl(256, ...): 98-byte blocks of 64 grid indices, then per 32
// values a u32 of four 7-bit sign groups and the 4-bit scale.
void encode_iq3_xxs_row(const float* x, uint8_t* dst, int64_t n, const float* qw) {
  const Lattice& lat = iq3_xxs_lattice();
  const bool avx512 = codec_avx512();
  constexpr int kMaxQ = 8;
  for (int64_t ibl = 0; ibl < n / kQK; ++ibl, dst += 98) {
    const float* xbl = x + kQK * ibl;
    uint8_t q3[96] = {};
    uint32_t scales_and_signs[8] = {};
    float scales[8];
    float max_scale = 0;
    float sumx2 = 0;
    for (int i = 0; i < kQK; ++i) sumx2 += xbl[i] * xbl[i];
    const float sigma2 = 2 * sumx2 / kQK;
    for (int ib = 0; ib < 8; ++ib) {
      const float* xb = xbl + 32 * ib;
      float weight[32], waux[32], xval[32];
      int8_t L[32] = {};
      bool on_grid[8];
      uint8_t block_signs[4];
      group_weights(xb, qw ? qw + kQK * ibl + 32 * ib : nullptr, sigma2, weight, waux);
      even_signs(xb, weight, xval, block_signs);
      float max = xval[0];
      for (int i = 1; i < 32; ++i) max = gmax(max, xval[i]);
      if (max < kGroupMaxEpsIq3Xxs) {
        scales[ib] = 0;
        continue;
      }
      float scale = max / (2 * kMaxQ - 1);
      if (avx512) {
        const Sweep sweep{32, -15, 15, 0.2f, max, Refit::kOffGridGroups};
        iq3_sweep_avx512(iq3_xxs_sweep_lattice(), sweep, xval, waux, weight, scale, L);
      } else {
        std::fill(on_grid, on_grid + 8, true);
        sweep_scales<4, 3, kMaxQ>(lat, 32, xval, waux, weight, -15, 15, 2 * kMaxQ - 1, 0.2f, max,
                                  scale, L, on_grid);
        refit_off_grid<4, 3, kMaxQ>(lat, 32, xval, waux, weight, false, scale, L, on_grid);
      }
      if (scale < 0) {
        scale = -scale;
        for (int k = 0; k < 4; ++k) block_signs[k] = static_cast<uint8_t>(~block_signs[k] & 127);
      }
      for (int k = 0; k < 8; ++k)
        q3[8 * ib + k] =
            static_cast<uint8_t>(grid_index_of<4, 3>(lat, L + 4 * k, "iq3_xxs", 8 * ib + k, ibl));
      scales_and_signs[ib] = block_signs[0] | (block_signs[1] << 7) | (block_signs[2] << 14) |
                             (static_cast<uint32_t>(block_signs[3]) << 21);
      check_scale(scale, "iq3_xxs", ib, ibl);
      scales[ib] = scale;
      max_scale = gmax(max_scale, scale);
    }
    uint16_t dh = fp32_to_fp16(0.f);
    if (max_scale != 0) {
      const float d = max_scale / 31;
      dh = fp32_to_fp16(d * 1.0125f);
      const float id = 1 / d;
      for (int ib = 0; ib < 8; ++ib) {
        const int l = std::max(0, std::min(15, nearest_int(0.5f * (id * scales[ib] - 1))));
        scales_and_signs[ib] |= static_cast<uint32_t>(l) << 28;
      }
      std::memcpy(dst + 2, q3, 64);
      std::memcpy(dst + 66, scales_and_signs, 32);
    } else {
      std::memset(dst + 2, 0, 96);
    }
    std::memcpy(dst, &dh, 2);
  }
}

// ggml's quantize_row_iq3_s_impl(32, ...): 110-byte blocks of d, 64 low index bytes, 8 bytes
// of index high bits, 32 sign bytes and 4 bytes of paired 4-bit scales. All 8 signs are
// stored. As in ggml, an all-zero group of 32 does not advance the index and sign positions.
void encode_iq3_s_row(const float* x, uint8_t* dst, int64_t n, const float* qw) {
  const Lattice& lat = iq3_s_lattice();
  const bool avx512 = codec_avx512();
  constexpr int kMaxQ = 8;
  for (int64_t ibl = 0; ibl < n / kQK; ++ibl, dst += 110) {
    std::memset(dst, 0, 110);
    uint8_t* qs = dst + 2;
    uint8_t* qh = dst + 66;
    uint8_t* signs = dst + 74;
    uint8_t* block_scales = dst + 106;
    const float* xbl = x + kQK * ibl;
    float scales[8];
    float max_scale = 0;
    float sumx2 = 0;
    for (int i = 0; i < kQK; ++i) sumx2 += xbl[i] * xbl[i];
    const float sigma2 = 2 * sumx2 / kQK;
    for (int ib = 0; ib < 8; ++ib) {
      const float* xb = xbl + 32 * ib;
      float weight[32], waux[32], xval[32];
      int8_t L[32] = {};
      bool on_grid[8] = {};
      uint8_t block_signs[4];
      group_weights(xb, qw ? qw + kQK * ibl + 32 * ib : nullptr, sigma2, weight, waux);
      for (int k = 0; k < 4; ++k) {
        uint8_t sg = 0;
        for (int i = 0; i < 8; ++i) {
          if (xb[8 * k + i] >= 0) {
            xval[8 * k + i] = xb[8 * k + i];
          } else {
            xval[8 * k + i] = -xb[8 * k + i];
            sg |= static_cast<uint8_t>(1 << i);
          }
        }
        block_signs[k] = sg;
      }
      float max = xval[0];
      for (int i = 1; i < 32; ++i) max = gmax(max, xval[i]);
      if (max == 0) {
        scales[ib] = 0;
        continue;
      }
      float scale = max / (2 * kMaxQ - 1);
      if (avx512) {
        const Sweep sweep{32, -9, 9, 0.2f, max, Refit::kAllWhenAnyOff};
        iq3_sweep_avx512(iq3_s_sweep_lattice(), sweep, xval, waux, weight, scale, L);
      } else {
        sweep_scales<4, 3, kMaxQ>(lat, 32, xval, waux, weight, -9, 9, 2 * kMaxQ - 1, 0.2f, max,
                                  scale, L, on_grid);
        refit_off_grid<4, 3, kMaxQ>(lat, 32, xval, waux, weight, true, scale, L, on_grid);
      }
      if (scale < 0) {
        scale = -scale;
        for (int k = 0; k < 4; ++k) block_signs[k] = static_cast<uint8_t>(~block_signs[k]);
      }
      for (int k = 0; k < 8; ++k) {
        const int g = grid_index_of<4, 3>(lat, L + 4 * k, "iq3_s", 8 * ib + k, ibl);
        qs[k] = static_cast<uint8_t>(g & 255);
        qh[(ib * 8 + k) / 8] |= static_cast<uint8_t>((g >> 8) << ((ib * 8 + k) % 8));
      }
      qs += 8;
      std::memcpy(signs, block_signs, 4);
      signs += 4;
      check_scale(scale, "iq3_s", ib, ibl);
      scales[ib] = scale;
      max_scale = gmax(max_scale, scale);
    }
    if (max_scale == 0) continue;
    const float d = max_scale / 31;
    const uint16_t dh = fp32_to_fp16(d * 1.033f);
    std::memcpy(dst, &dh, 2);
    const float id = 1 / d;
    for (int ib = 0; ib < 8; ib += 2) {
      const int l1 = std::max(0, std::min(15, nearest_int(0.5f * (id * scales[ib] - 1))));
      const int l2 = std::max(0, std::min(15, nearest_int(0.5f * (id * scales[ib + 1] - 1))));
      block_scales[ib / 2] = static_cast<uint8_t>(l1 | (l2 << 4));
    }
  }
}

}  // namespace

void encode_iq3_xxs(const float* src, uint8_t* dst, int64_t nrows, int64_t n, const float* qw) {
  encode_rows(encode_iq3_xxs_row, kQK, 98, src, dst, nrows, n, qw);
}
void encode_iq3_s(const float* src, uint8_t* dst, int64_t nrows, int64_t n, const float* qw) {
  encode_rows(encode_iq3_s_row, kQK, 110, src, dst, nrows, n, qw);
}

}  // namespace gguf::detail::iq

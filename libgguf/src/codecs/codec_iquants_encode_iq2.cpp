// IQ2_XXS, IQ2_XS and IQ2_S encoders, byte-identical with ggml's quantize_iq2_*: groups of 8
// magnitudes on a lattice, a scale sweep per group (see codec_iquants_lattice.h).
#include "codecs/codec_iquants_encode.h"
#include "codecs/codec_iquants_lattice.h"
#include "codecs/codec_lattice_sweep.h"
#include "codecs/codec_simd.h"

namespace gguf::detail::iq {
namespace {

const SweepLattice& iq2_xxs_sweep_lattice() {
  static const SweepLattice sweep = sweep_lattice(iq2_xxs_lattice(), 2);
  return sweep;
}
const SweepLattice& iq2_xs_sweep_lattice() {
  static const SweepLattice sweep = sweep_lattice(iq2_xs_lattice(), 2);
  return sweep;
}
const SweepLattice& iq2_s_sweep_lattice() {
  static const SweepLattice sweep = sweep_lattice(iq2_s_lattice(), 2);
  return sweep;
}

void encode_iq2_xxs_row(const float* x, uint8_t* dst, int64_t n, const float* qw) {
  const Lattice& lat = iq2_xxs_lattice();
  const bool avx512 = codec_avx512();
  constexpr int kMaxQ = 3;
  for (int64_t ibl = 0; ibl < n / kQK; ++ibl, dst += 66) {
    const float* xbl = x + kQK * ibl;
    uint32_t q2[16] = {};
    float scales[8];
    float max_scale = 0;
    float sumx2 = 0;
    for (int i = 0; i < kQK; ++i) sumx2 += xbl[i] * xbl[i];
    const float sigma2 = sumx2 / kQK;
    for (int ib = 0; ib < 8; ++ib) {
      const float* xb = xbl + 32 * ib;
      const float* w = qw + kQK * ibl + 32 * ib;
      float weight[32], waux[32], xval[32];
      int8_t L[32];
      uint8_t block_signs[4];
      group_weights(xb, w, sigma2, weight, waux);
      even_signs(xb, weight, xval, block_signs);
      float max = xval[0];
      for (int i = 1; i < 32; ++i) max = gmax(max, xval[i]);
      if (max < kGroupMaxEps) {
        scales[ib] = 0;
        continue;
      }
      float scale = kq::search_positive(32, kMaxQ + 1, xval, reinterpret_cast<uint8_t*>(L), weight);
      const float eff_max = scale * kMaxQ;
      if (eff_max <= 0) {
        scales[ib] = 0;
        continue;
      }
      if (avx512) {
        const Sweep sweep{32, -6, 6, 0.1f, eff_max, Refit::kAlways};
        iq2_sweep_avx512(iq2_xxs_sweep_lattice(), sweep, xval, waux, weight, scale, L);
      } else {
        bool on_grid[4] = {false, false, false, false};  // ggml refits every group, always
        sweep_scales<8, 2, kMaxQ>(lat, 32, xval, waux, weight, -6, 6, 2 * kMaxQ - 1, 0.1f, eff_max,
                                  scale, L, on_grid);
        std::fill(on_grid, on_grid + 4, false);
        refit_off_grid<8, 2, kMaxQ>(lat, 32, xval, waux, weight, true, scale, L, on_grid);
      }
      if (scale < 0) {
        scale = -scale;
        for (int k = 0; k < 4; ++k) block_signs[k] = static_cast<uint8_t>(~block_signs[k] & 127);
      }
      for (int k = 0; k < 4; ++k) {
        const int g = grid_index_of<8, 2>(lat, L + 8 * k, "iq2_xxs", 4 * ib + k, ibl);
        q2[2 * ib] |= static_cast<uint32_t>(g) << (8 * k);
        q2[2 * ib + 1] |= static_cast<uint32_t>(block_signs[k]) << (7 * k);
      }
      check_scale(scale, "iq2_xxs", ib, ibl);
      scales[ib] = scale;
      max_scale = gmax(max_scale, scale);
    }
    uint16_t dh = 0;  // fp16 zero
    if (max_scale != 0) {
      const float d = max_scale / 31;
      dh = fp32_to_fp16(d);
      const float id = 1 / d;
      for (int ib = 0; ib < 8; ++ib) {
        const int l = std::max(0, std::min(15, nearest_int(0.5f * (id * scales[ib] - 1))));
        q2[2 * ib + 1] |= static_cast<uint32_t>(l) << 28;
      }
    } else {
      std::memset(q2, 0, sizeof q2);
    }
    std::memcpy(dst, &dh, 2);
    std::memcpy(dst + 2, q2, sizeof q2);
  }
}

// ---- IQ2_XS / IQ2_S: groups of 16 (two lattice points of 8), a 4-bit scale per 16 ----

// ggml's quantize_row_iq2_xs_impl (xs: 512-point grid, 7 sign bits with implied parity,
// importance required; 74-byte blocks: d, 32 u16 of 9-bit index and signs, 8 scale bytes) and
// quantize_row_iq2_s_impl (s: 1024-point grid, 8 stored sign bits, importance optional; 82-byte
// blocks: d, 32 low index bytes, 32 sign bytes, 8 bytes of index high bits, 8 scale bytes).
template <bool kS>
void encode_iq2_xs_s_row(const float* x, uint8_t* dst, int64_t n, const float* qw) {
  const Lattice& lat = kS ? iq2_s_lattice() : iq2_xs_lattice();
  const bool avx512 = codec_avx512();
  constexpr int kMaxQ = 3;
  constexpr int kBytes = kS ? 82 : 74;
  constexpr float kEps = kS ? 1e-8f : kGroupMaxEps;
  const char* name = kS ? "iq2_s" : "iq2_xs";
  for (int64_t ibl = 0; ibl < n / kQK; ++ibl, dst += kBytes) {
    std::memset(dst, 0, kBytes);
    uint8_t* block_scales = dst + kBytes - 8;
    uint16_t q2[32] = {};  // xs: index | signs << 9
    const float* xbl = x + kQK * ibl;
    float scales[16];
    float max_scale = 0;
    float sumx2 = 0;
    for (int i = 0; i < kQK; ++i) sumx2 += xbl[i] * xbl[i];
    const float sigma2 = (kS ? 2 * sumx2 : sumx2) / kQK;
    for (int ib = 0; ib < 16; ++ib) {
      const float* xb = xbl + 16 * ib;
      float weight[16], waux[16], xval[16];
      int8_t L[16] = {};
      bool on_grid[2] = {true, true};
      uint8_t block_signs[2];
      if (qw) {
        const float* w = qw + kQK * ibl + 16 * ib;
        for (int i = 0; i < 16; ++i) weight[i] = w[i] * std::sqrt(sigma2 + xb[i] * xb[i]);
      } else {
        for (int i = 0; i < 16; ++i) weight[i] = 0.25f * sigma2 + xb[i] * xb[i];
      }
      for (int i = 0; i < 16; ++i) waux[i] = std::sqrt(weight[i]);
      if constexpr (kS) {
        for (int k = 0; k < 2; ++k) {
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
      } else {
        even_signs(xb, weight, xval, block_signs, 2);
      }
      float max = xval[0];
      for (int i = 1; i < 16; ++i) max = gmax(max, xval[i]);
      if (max < kEps) {
        scales[ib] = 0;
        continue;
      }
      float scale = max / (2 * kMaxQ - 1);
      if (avx512) {
        const Sweep sweep{16, -9, 9, 0.1f, max, Refit::kOffGridGroups};
        iq2_sweep_avx512(kS ? iq2_s_sweep_lattice() : iq2_xs_sweep_lattice(), sweep, xval, waux,
                         weight, scale, L);
      } else {
        sweep_scales<8, 2, kMaxQ>(lat, 16, xval, waux, weight, -9, 9, 2 * kMaxQ - 1, 0.1f, max,
                                  scale, L, on_grid);
        refit_off_grid<8, 2, kMaxQ>(lat, 16, xval, waux, weight, false, scale, L, on_grid);
      }
      if (scale < 0) {
        scale = -scale;
        for (int k = 0; k < 2; ++k)
          block_signs[k] = static_cast<uint8_t>(kS ? ~block_signs[k] : ~block_signs[k] & 127);
      }
      for (int k = 0; k < 2; ++k) {
        const int g = grid_index_of<8, 2>(lat, L + 8 * k, name, 2 * ib + k, ibl);
        const int i8 = 2 * ib + k;
        if constexpr (kS) {
          dst[2 + i8] = static_cast<uint8_t>(g & 255);
          dst[66 + i8 / 4] |= static_cast<uint8_t>((g >> 8) << (2 * (i8 % 4)));
          dst[2 + 32 + i8] = block_signs[k];
        } else {
          q2[i8] = static_cast<uint16_t>(g | (block_signs[k] << 9));
        }
      }
      check_scale(scale, name, ib, ibl);
      scales[ib] = scale;
      max_scale = gmax(max_scale, scale);
    }
    if (max_scale == 0) continue;  // d and everything else stay zero
    const float d = max_scale / 31;
    const uint16_t dh = fp32_to_fp16(kS ? d * 0.9875f : d);
    std::memcpy(dst, &dh, 2);
    const float id = 1 / d;
    for (int ib = 0; ib < 16; ++ib) {
      const int l = std::max(0, std::min(15, nearest_int(0.5f * (id * scales[ib] - 1))));
      if (ib % 2 == 0)
        block_scales[ib / 2] = static_cast<uint8_t>(l);
      else
        block_scales[ib / 2] |= static_cast<uint8_t>(l << 4);
    }
    if constexpr (!kS) std::memcpy(dst + 2, q2, 64);
  }
}

}  // namespace

void encode_iq2_xxs(const float* src, uint8_t* dst, int64_t nrows, int64_t n, const float* qw) {
  encode_rows(encode_iq2_xxs_row, kQK, 66, src, dst, nrows, n, qw);
}
void encode_iq2_xs(const float* src, uint8_t* dst, int64_t nrows, int64_t n, const float* qw) {
  encode_rows(encode_iq2_xs_s_row<false>, kQK, 74, src, dst, nrows, n, qw);
}
void encode_iq2_s(const float* src, uint8_t* dst, int64_t nrows, int64_t n, const float* qw) {
  encode_rows(encode_iq2_xs_s_row<true>, kQK, 82, src, dst, nrows, n, qw);
}

}  // namespace gguf::detail::iq

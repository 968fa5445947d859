// IQ1_S and IQ1_M encoders, byte-identical with ggml's quantize_iq1_s / quantize_iq1_m: three
// levels per group by an exhaustive search over the sorted values (see codec_iquants_lattice.h).
#include "codecs/codec_iq1_split.h"
#include "codecs/codec_iquants_encode.h"
#include "codecs/codec_iquants_lattice.h"
#include "codecs/codec_simd.h"

namespace gguf::detail::iq {
namespace {

// ---- IQ1_S / IQ1_M: 8 values of -1, 0, +1 on a 2048-point grid, shifted by +-1/8 ----

// ggml's iq1_find_best_neighbour2: the neighbour whose levels xg (per code) at scale best fit
// the signed values x under weight; writes its codes to L.
int iq1_best_neighbour(const Lattice& lat, int u, const float* x, const float* weight, float scale,
                       const float* xg, int8_t* L) {
  if (codec_avx512()) {
    static const SweepLattice sweep = sweep_lattice(iq1_lattice(), 2);
    const int tuple = iq1_best_tuple_avx512(sweep, u, x, weight, scale, xg);
    for (int i = 0; i < 8; ++i) L[i] = static_cast<int8_t>((tuple >> (2 * i)) & 3);
    return lat.map[tuple];
  }
  const uint16_t* nb = lat.neighbours.data() - lat.map[u] - 1;
  float best = FLT_MAX;
  int g = -1;
  for (int j = 1; j <= nb[0]; ++j) {
    const auto& pg = lat.points[nb[j]];
    float d2 = 0;
    for (int i = 0; i < 8; ++i) {
      const float q = xg[(pg[i] - 1) / 2];
      const float diff = scale * q - x[i];
      d2 += weight[i] * diff * diff;
    }
    if (d2 < best) {
      best = d2;
      g = nb[j];
    }
  }
  if (g < 0) throw Error("i-quant lattice search found no neighbour (non-finite input?)");
  for (int i = 0; i < 8; ++i) L[i] = static_cast<int8_t>((lat.points[g][i] - 1) / 2);
  return g;
}

// The values of a group sorted ascending, ties in index order (ggml's qsort of (value, index)
// pairs by value is glibc's stable merge sort).
template <int N>
void sorted_order(const float* xb, int* idx) {
  for (int j = 0; j < N; ++j) idx[j] = j;
  std::stable_sort(idx, idx + N, [xb](int a, int b) { return xb[a] < xb[b]; });
}

// ggml's quantize_row_iq1_s_impl: 50-byte blocks of d, 32 low index bytes, 8 u16 of three
// 3-bit index highs, a 3-bit scale and the shift sign. Importance required.
void encode_iq1_s_row(const float* x, uint8_t* dst, int64_t n, const float* qw) {
  const Lattice& lat = iq1_lattice();
  const bool avx512 = codec_avx512();
  constexpr int kBs = 32;
  const float* x_p = kIq1Levels[0];
  const float* x_m = kIq1Levels[1];
  for (int64_t ibl = 0; ibl < n / kQK; ++ibl, dst += 50) {
    std::memset(dst, 0, 50);
    uint8_t* qs = dst + 2;
    uint16_t qh[8] = {};
    const float* xbl = x + kQK * ibl;
    float scales[8];
    int8_t shifts[8];
    float max_scale = 0;
    float sumx2 = 0;
    for (int i = 0; i < kQK; ++i) sumx2 += xbl[i] * xbl[i];
    const float sigma2 = 2 * sumx2 / kQK;
    for (int ib = 0; ib < kQK / kBs; ++ib) {
      const float* xb = xbl + kBs * ib;
      const float* w = qw + kQK * ibl + kBs * ib;
      float weight[kBs];
      for (int i = 0; i < kBs; ++i) weight[i] = w[i] * std::sqrt(sigma2 + xb[i] * xb[i]);
      float max = std::fabs(xb[0]);
      for (int i = 1; i < kBs; ++i) max = gmax(max, std::fabs(xb[i]));
      if (max < 1e-12f) {
        scales[ib] = 0;
        shifts[ib] = 1;
        continue;
      }
      // Exhaustive split of the sorted values into the three levels, by prefix sums.
      int idx[kBs];
      sorted_order<kBs>(xb, idx);
      float sumx[kBs + 1], sumw[kBs + 1];
      sumx[0] = sumw[0] = 0;
      for (int j = 0; j < kBs; ++j) {
        const int i = idx[j];
        sumx[j + 1] = sumx[j] + weight[i] * xb[i];
        sumw[j + 1] = sumw[j] + weight[i];
      }
      Iq1Split split;
      split.scale = max;
      if (avx512)
        iq1_s_split_avx512(sumx, sumw, split);
      else
        iq1_s_split(sumx, sumw, split);
      float scale = split.scale;
      const int besti1 = split.i1, besti2 = split.i2;
      int best_shift = split.shift;
      if (besti1 < 0 || besti2 < 0 || best_shift == 0) {
        scales[ib] = 0;
        shifts[ib] = 1;
        continue;
      }
      int8_t L[kBs];
      for (int j = 0; j < kBs; ++j)
        L[idx[j]] = static_cast<int8_t>(j < besti1 ? 0 : j < besti2 ? 1 : 2);
      if (scale < 0) {
        for (int j = 0; j < kBs; ++j) L[j] = static_cast<int8_t>(2 - L[j]);
        scale = -scale;
        best_shift = -best_shift;
      }
      bool all_on_grid = true;
      const float* xx = best_shift == 1 ? x_p : x_m;
      uint16_t index[4];
      for (int k = 0; k < kBs / 8; ++k) {
        int u = 0;
        for (int j = 0; j < 8; ++j) u |= L[8 * k + j] << (2 * j);
        int g = lat.map[u];
        if (g < 0) {
          all_on_grid = false;
          g = iq1_best_neighbour(lat, u, xb + 8 * k, weight + 8 * k, scale, xx, L + 8 * k);
        }
        index[k] = static_cast<uint16_t>(g);
      }
      if (!all_on_grid) {
        float sumqx = 0, sumq2 = 0;
        for (int k = 0; k < kBs / 8; ++k) {
          const auto& pg = lat.points[index[k]];
          for (int j = 0; j < 8; ++j) {
            const float wj = weight[8 * k + j];
            const float q = xx[(pg[j] - 1) / 2];
            sumqx += wj * q * xb[8 * k + j];
            sumq2 += wj * q * q;
          }
        }
        if (sumqx > 0 && sumq2 > 0) scale = sumqx / sumq2;
      }
      uint16_t h = 0;
      for (int k = 0; k < kBs / 8; ++k) {
        qs[(kBs / 8) * ib + k] = static_cast<uint8_t>(index[k] & 255);
        h |= static_cast<uint16_t>((index[k] >> 8) << (3 * k));
      }
      qh[ib] = h;
      check_scale(scale, "iq1_s", ib, ibl);
      scales[ib] = scale;
      shifts[ib] = static_cast<int8_t>(best_shift);
      max_scale = gmax(max_scale, scale);
    }
    if (max_scale == 0) {
      // ggml has written the groups' index highs already; only d and the scales stay 0.
      std::memcpy(dst + 34, qh, 16);
      continue;
    }
    const float d = max_scale / 15;
    const uint16_t dh = fp32_to_fp16(d * 1.125f);
    std::memcpy(dst, &dh, 2);
    const float id = 1 / d;
    for (int ib = 0; ib < kQK / kBs; ++ib) {
      int l = std::max(0, std::min(7, nearest_int(0.5f * (id * scales[ib] - 1))));
      if (shifts[ib] == -1) l |= 8;
      qh[ib] |= static_cast<uint16_t>(l << 12);
    }
    std::memcpy(dst + 34, qh, 16);
  }
}

// ggml's quantize_row_iq1_m_impl: 56-byte blocks of 32 low index bytes, 16 bytes of index highs
// and shift bits (two groups of 8 each), and 8 bytes of 3-bit scales whose spare nibbles hold
// the fp16 super-block scale. Importance optional.
void encode_iq1_m_row(const float* x, uint8_t* dst, int64_t n, const float* qw) {
  const Lattice& lat = iq1_lattice();
  const bool avx512 = codec_avx512();
  constexpr int kBs = 16;
  const float* x_p = kIq1Levels[0];
  const float* x_m = kIq1Levels[1];
  const uint8_t masks[4] = {0x00, 0x80, 0x08, 0x88};
  // Levels of the two groups of 8 for each of the 4 shift combinations (+,+ +,- -,+ -,-).
  const auto levels = [&](int k, int half) { return (half == 0 ? k < 2 : k % 2 == 0) ? x_p : x_m; };
  for (int64_t ibl = 0; ibl < n / kQK; ++ibl, dst += 56) {
    std::memset(dst, 0, 56);
    uint8_t* qs = dst;
    uint8_t* qh = dst + 32;
    uint16_t sc[4] = {};
    const float* xbl = x + kQK * ibl;
    float scales[16];
    int8_t shifts[16];
    float max_scale = 0;
    float sumx2 = 0;
    for (int i = 0; i < kQK; ++i) sumx2 += xbl[i] * xbl[i];
    const float sigma2 = 2 * sumx2 / kQK;
    float weight[kBs];
    const auto group_weights16 = [&](const float* xb, int ib) {
      if (qw) {
        const float* w = qw + kQK * ibl + kBs * ib;
        for (int i = 0; i < kBs; ++i) weight[i] = w[i] * std::sqrt(sigma2 + xb[i] * xb[i]);
      } else {
        for (int i = 0; i < kBs; ++i) weight[i] = xb[i] * xb[i];
      }
    };
    for (int ib = 0; ib < kQK / kBs; ++ib) {
      const float* xb = xbl + kBs * ib;
      group_weights16(xb, ib);
      float max = std::fabs(xb[0]);
      for (int i = 1; i < kBs; ++i) max = gmax(max, std::fabs(xb[i]));
      if (max < 1e-7f) {
        scales[ib] = 0;
        shifts[ib] = 0;
        continue;
      }
      int idx[kBs];
      sorted_order<kBs>(xb, idx);
      Iq1mTerms terms;
      for (int j = 0; j < kBs; ++j) {
        const int i = idx[j];
        terms.upper[j] = i >= kBs / 2;
        for (int sh = 0; sh < 2; ++sh)
          for (int c = 0; c < 3; ++c) {
            const float xl = kIq1Levels[sh][c];
            terms.x[j][sh][c] = weight[i] * xl * xb[i];
            terms.q2[j][sh][c] = weight[i] * xl * xl;
          }
      }
      Iq1Split split;
      split.scale = max;
      split.shift = -1;
      if (avx512)
        iq1_m_split_avx512(terms, split);
      else
        iq1_m_split(terms, split);
      float scale = split.scale;
      const int besti1 = split.i1, besti2 = split.i2;
      int best_k = split.shift;
      if (besti1 < 0 || besti2 < 0 || best_k < 0) {
        scales[ib] = 0;
        shifts[ib] = 0;
        continue;
      }
      int8_t L[kBs];
      for (int j = 0; j < kBs; ++j)
        L[idx[j]] = static_cast<int8_t>(j < besti1 ? 0 : j < besti2 ? 1 : 2);
      if (scale < 0) {
        for (int j = 0; j < kBs; ++j) L[j] = static_cast<int8_t>(2 - L[j]);
        scale = -scale;
        best_k = 3 - best_k;
      }
      bool all_on_grid = true;
      uint16_t index[2];
      for (int k = 0; k < 2; ++k) {
        const float* xx = levels(best_k, k);
        int u = 0;
        for (int j = 0; j < 8; ++j) u |= L[8 * k + j] << (2 * j);
        int g = lat.map[u];
        if (g < 0) {
          all_on_grid = false;
          g = iq1_best_neighbour(lat, u, xb + 8 * k, weight + 8 * k, scale, xx, L + 8 * k);
        }
        index[k] = static_cast<uint16_t>(g);
      }
      if (!all_on_grid) {
        float sumqx_f = 0, sumq2_f = 0;
        for (int k = 0; k < 2; ++k) {
          const float* xx = levels(best_k, k);
          const auto& pg = lat.points[index[k]];
          for (int j = 0; j < 8; ++j) {
            const float wj = weight[8 * k + j];
            const float q = xx[(pg[j] - 1) / 2];
            sumqx_f += wj * q * xb[8 * k + j];
            sumq2_f += wj * q * q;
          }
        }
        if (sumqx_f > 0 && sumq2_f > 0) scale = sumqx_f / sumq2_f;
      }
      qs[2 * ib] = static_cast<uint8_t>(index[0] & 255);
      qs[2 * ib + 1] = static_cast<uint8_t>(index[1] & 255);
      qh[ib] = static_cast<uint8_t>((index[0] >> 8) | ((index[1] >> 8) << 4));
      check_scale(scale, "iq1_m", ib, ibl);
      scales[ib] = scale;
      shifts[ib] = static_cast<int8_t>(best_k);
      max_scale = gmax(max_scale, scale);
    }
    if (max_scale == 0) continue;
    float d = max_scale / 15;
    const float id = 1 / d;
    float sumqx_f = 0, sumq2_f = 0;
    for (int ib = 0; ib < kQK / kBs; ++ib) {
      const int l = std::max(0, std::min(7, nearest_int(0.5f * (id * scales[ib] - 1))));
      sc[ib / 4] |= static_cast<uint16_t>(l << (3 * (ib % 4)));
      qh[ib] |= masks[shifts[ib]];
      const float* xb = xbl + kBs * ib;
      group_weights16(xb, ib);
      for (int k = 0; k < 2; ++k) {
        const float* xx = levels(shifts[ib], k);
        const int g = qs[2 * ib + k] + ((qh[ib] << (8 - 4 * k)) & 0x700);
        const auto& pg = lat.points[g];
        for (int j = 0; j < 8; ++j) {
          const float wj = weight[8 * k + j];
          const float q = xx[(pg[j] - 1) / 2] * static_cast<float>(2 * l + 1);
          sumqx_f += wj * q * xb[8 * k + j];
          sumq2_f += wj * q * q;
        }
      }
    }
    if (sumq2_f > 0) d = sumqx_f / sumq2_f;
    const uint16_t s16 = fp32_to_fp16(d * 1.1125f);
    sc[0] |= static_cast<uint16_t>((s16 & 0x000f) << 12);
    sc[1] |= static_cast<uint16_t>((s16 & 0x00f0) << 8);
    sc[2] |= static_cast<uint16_t>((s16 & 0x0f00) << 4);
    sc[3] |= static_cast<uint16_t>(s16 & 0xf000);
    std::memcpy(dst + 48, sc, 8);
  }
}

}  // namespace

void encode_iq1_s(const float* src, uint8_t* dst, int64_t nrows, int64_t n, const float* qw) {
  encode_rows(encode_iq1_s_row, kQK, 50, src, dst, nrows, n, qw);
}
void encode_iq1_m(const float* src, uint8_t* dst, int64_t nrows, int64_t n, const float* qw) {
  encode_rows(encode_iq1_m_row, kQK, 56, src, dst, nrows, n, qw);
}

}  // namespace gguf::detail::iq

// IQ2_XXS's trial-scale sweep with AVX-512. The 13 trial scales of a group are independent:
// they run in the lanes of one register for the rounding of the codes and the least-squares
// sums. A lattice search scores 16 neighbours at once; its terms w*(s*q - x)^2 take only three
// values per element and trial (q = 1, 3, 5), so they are computed once per group and each
// neighbour picks its own with a permute. Every lane performs ggml's float operations in
// ggml's order, so the results equal the portable sweep's bit for bit (tests hold them equal).
#include <immintrin.h>

#include <cfloat>
#include <cstring>

#include "codecs/codec_iq2_sweep.h"
#include "codecs/codec_kquants_common.h"
#include "codecs/codec_simd.h"
#include "gguf/base/error.h"

GGUF_AVX512_WARNINGS_OFF

namespace gguf::detail::iq {
namespace {

constexpr int kTrials = 13;  // is = -6..6
constexpr int kMaxQ = 3;
// terms[(8k + i) * kTermStride + 4t + c]: the error term of element i of subgroup k for trial
// t (16 slots) and code c (0..2; slot 3 pads).
constexpr int kTermStride = 64;

GGUF_CODEC_AVX512 inline __m512i nearest_int(__m512 f) {
  const __m512i bits = _mm512_castps_si512(_mm512_add_ps(f, _mm512_set1_ps(12582912.0f)));
  return _mm512_sub_epi32(_mm512_and_si512(bits, _mm512_set1_epi32(0x007FFFFF)),
                          _mm512_set1_epi32(0x00400000));
}

// Magnitudes 2c + 1 of codes c = 0..2 in each 128-bit lane (slot 3 pads): a permute by the
// low two bits of a code gives its magnitude or its term.
GGUF_CODEC_AVX512 inline __m512 magnitudes() {
  return _mm512_setr_ps(1, 3, 5, 0, 1, 3, 5, 0, 1, 3, 5, 0, 1, 3, 5, 0);
}

// The error terms (waux*(s*q - x))*(s*q - x) of all 32 elements, trials and codes, as ggml's
// search computes each: diff = scale*q - x, then d2 += w*diff*diff.
GGUF_CODEC_AVX512 void error_terms(const float* s16, const float* xval, const float* waux,
                                   float* terms) {
  const __m512 scales = _mm512_loadu_ps(s16);
  __m512 sq[4];
  for (int v = 0; v < 4; ++v) {
    // Lane 4m + c holds trial 4v + m.
    const __m512i pick =
        _mm512_add_epi32(_mm512_set1_epi32(4 * v),
                         _mm512_setr_epi32(0, 0, 0, 0, 1, 1, 1, 1, 2, 2, 2, 2, 3, 3, 3, 3));
    sq[v] = _mm512_mul_ps(_mm512_permutexvar_ps(pick, scales), magnitudes());
  }
  for (int j = 0; j < 32; ++j) {
    const __m512 x = _mm512_set1_ps(xval[j]), w = _mm512_set1_ps(waux[j]);
    for (int v = 0; v < 4; ++v) {
      const __m512 diff = _mm512_sub_ps(sq[v], x);
      _mm512_store_ps(terms + j * kTermStride + 16 * v,
                      _mm512_mul_ps(_mm512_mul_ps(w, diff), diff));
    }
  }
}

// The neighbour of list (count, then tuples) with the least sum of terms (element i's at
// terms + i * kTermStride, by code), summed in element order; the first of equal sums wins and
// sums not below FLT_MAX never do, as in ggml's scan. Returns its tuple.
GGUF_CODEC_AVX512 int best_tuple(const uint16_t* list, const float* terms) {
  const int count = list[0];
  float best_d2 = FLT_MAX;
  int best = -1;
  for (int j0 = 0; j0 < count; j0 += 16) {
    const __mmask16 live =
        count - j0 >= 16 ? __mmask16{0xFFFF} : static_cast<__mmask16>((1u << (count - j0)) - 1);
    const __m512i u = _mm512_cvtepu16_epi32(_mm256_maskz_loadu_epi16(live, list + 1 + j0));
    __m512 d2 = _mm512_setzero_ps();
    for (int i = 0; i < 8; ++i) {
      const __m512 tab = _mm512_broadcast_f32x4(_mm_load_ps(terms + i * kTermStride));
      d2 = _mm512_add_ps(d2, _mm512_permutevar_ps(tab, _mm512_srli_epi32(u, 2 * i)));
    }
    const __mmask16 lower = _mm512_mask_cmp_ps_mask(live, d2, _mm512_set1_ps(best_d2), _CMP_LT_OQ);
    if (!lower) continue;
    const float m = _mm512_mask_reduce_min_ps(lower, d2);
    const __mmask16 at = _mm512_mask_cmp_ps_mask(lower, d2, _mm512_set1_ps(m), _CMP_EQ_OQ);
    best_d2 = m;
    best = list[1 + j0 + __builtin_ctz(at)];
  }
  if (best < 0) throw Error("i-quant lattice search found no neighbour (non-finite input?)");
  return best;
}

void codes_of(int tuple, int8_t* L) {
  for (int i = 0; i < 8; ++i) L[i] = static_cast<int8_t>((tuple >> (2 * i)) & 3);
}

}  // namespace

GGUF_CODEC_AVX512 void iq2_xxs_sweep_avx512(const Iq2SweepLattice& lat, const float* xval,
                                            const float* waux, const float* weight, float eff_max,
                                            float& scale, int8_t* L) {
  alignas(64) float id[16], s[16];
  for (int t = 0; t < 16; ++t) {
    const int is = (t < kTrials ? t : kTrials - 1) - 6;
    id[t] = (static_cast<float>(2 * kMaxQ - 1) + static_cast<float>(is) * 0.1f) / eff_max;
    s[t] = 1 / id[t];
  }
  // The codes of every trial, four 8-code tuples per trial.
  const __m512 idv = _mm512_load_ps(id);
  __m512i u[4] = {_mm512_setzero_si512(), _mm512_setzero_si512(), _mm512_setzero_si512(),
                  _mm512_setzero_si512()};
  for (int j = 0; j < 32; ++j) {
    const __m512 v = _mm512_mul_ps(
        _mm512_set1_ps(0.5f),
        _mm512_sub_ps(_mm512_mul_ps(idv, _mm512_set1_ps(xval[j])), _mm512_set1_ps(1.0f)));
    const __m512i l = _mm512_max_epi32(
        _mm512_setzero_si512(), _mm512_min_epi32(_mm512_set1_epi32(kMaxQ - 1), nearest_int(v)));
    u[j / 8] = _mm512_or_si512(u[j / 8], _mm512_slli_epi32(l, 2 * (j % 8)));
  }
  alignas(64) int32_t tuple[4][16], grid[4][16];
  for (int k = 0; k < 4; ++k) {
    _mm512_store_si512(tuple[k], u[k]);
    _mm512_store_si512(grid[k], _mm512_i32gather_epi32(u[k], lat.map, 4));
  }
  // Tuples off the grid move to their best neighbour at the trial's scale.
  alignas(64) float terms[32 * kTermStride];
  bool have_terms = false;
  for (int k = 0; k < 4; ++k)
    for (int t = 0; t < kTrials; ++t) {
      if (grid[k][t] >= 0) continue;
      if (!have_terms) error_terms(s, xval, waux, terms);
      have_terms = true;
      tuple[k][t] =
          best_tuple(lat.lists.data() - grid[k][t] - 1, terms + 8 * k * kTermStride + 4 * t);
    }
  // Least-squares sums of every trial, in element order.
  __m512 sumqx = _mm512_setzero_ps(), sumq2 = _mm512_setzero_ps();
  for (int k = 0; k < 4; ++k) {
    const __m512i uk = _mm512_load_si512(tuple[k]);
    for (int i = 0; i < 8; ++i) {
      const int j = 8 * k + i;
      const __m512 q = _mm512_permutevar_ps(magnitudes(), _mm512_srli_epi32(uk, 2 * i));
      sumqx = _mm512_add_ps(sumqx, _mm512_mul_ps(_mm512_set1_ps(weight[j] * xval[j]), q));
      sumq2 = _mm512_add_ps(sumq2, _mm512_mul_ps(_mm512_mul_ps(_mm512_set1_ps(weight[j]), q), q));
    }
  }
  alignas(64) float sx[16], s2[16];
  _mm512_store_ps(sx, sumqx);
  _mm512_store_ps(s2, sumq2);
  float best = 0;
  int winner = -1;
  for (int t = 0; t < kTrials; ++t) {
    if (s2[t] > 0 && sx[t] * sx[t] > best * s2[t]) {
      scale = sx[t] / s2[t];
      best = scale * sx[t];
      winner = t;
    }
  }
  if (winner >= 0)
    for (int k = 0; k < 4; ++k) codes_of(tuple[k][winner], L + 8 * k);
  // The refit: every group again at the chosen scale, then the least-squares scale.
  if (!(scale > 0)) return;
  const float id1 = 1 / scale;
  for (int k = 0; k < 4; ++k) {
    int t = 0;
    for (int i = 0; i < 8; ++i) {
      const int l = kq::nearest_int(0.5f * (id1 * xval[8 * k + i] - 1));
      t |= (l < 0 ? 0 : l > kMaxQ - 1 ? kMaxQ - 1 : l) << (2 * i);
    }
    const int g = lat.map[t];
    if (g < 0) {
      alignas(16) float one[8 * kTermStride];
      for (int i = 0; i < 8; ++i)
        for (int c = 0; c < 4; ++c) {
          const float diff = scale * static_cast<float>(c < 3 ? 2 * c + 1 : 0) - xval[8 * k + i];
          one[i * kTermStride + c] = waux[8 * k + i] * diff * diff;
        }
      t = best_tuple(lat.lists.data() - g - 1, one);
    }
    codes_of(t, L + 8 * k);
  }
  float sx1 = 0, s21 = 0;
  for (int j = 0; j < 32; ++j) {
    const float q = static_cast<float>(2 * L[j] + 1);
    sx1 += weight[j] * xval[j] * q;
    s21 += weight[j] * q * q;
  }
  if (s21 > 0) scale = sx1 / s21;
}

}  // namespace gguf::detail::iq

GGUF_AVX512_WARNINGS_ON

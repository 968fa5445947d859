// The lattice types' trial-scale sweep with AVX-512. The trial scales of a group (13 to 31) are
// independent: they run in the lanes of a register, 16 at a time, for the rounding of the codes
// and the least-squares sums. A lattice search scores 16 neighbours at once; its terms
// w*(s*q - x)^2 take one value per element, trial and code (q = 2 * code + 1), so they are
// computed once per group and each neighbour picks its own with a permute by its code. Every
// lane performs ggml's float operations in ggml's order, so the results equal the portable
// sweep's bit for bit (tests hold them equal).
#include <immintrin.h>

#include <cfloat>
#include <cstring>

#include "codecs/codec_kquants_common.h"
#include "codecs/codec_lattice_sweep.h"
#include "codecs/codec_simd.h"
#include "gguf/base/error.h"

GGUF_AVX512_WARNINGS_OFF

namespace gguf::detail::iq {
namespace {

// Groups of Dim codes 0..kMaxQ-1 of Bits each. terms[j * kStride + kSlots * t + c] is the error
// term of element j for trial t (16 slots) and code c (slots past kMaxQ pad).
template <int Dim, int Bits, int kMaxQ>
struct Shape {
  static constexpr int kSlots = kMaxQ <= 4 ? 4 : 8;
  static constexpr int kStride = 16 * kSlots;
  static constexpr int kMask = (1 << Bits) - 1;
  static constexpr int kCodes = kMaxQ;
  static_assert(kMaxQ <= kSlots && kSlots <= 8);
};

GGUF_CODEC_AVX512 inline __m512i nearest_int(__m512 f) {
  const __m512i bits = _mm512_castps_si512(_mm512_add_ps(f, _mm512_set1_ps(12582912.0f)));
  return _mm512_sub_epi32(_mm512_and_si512(bits, _mm512_set1_epi32(0x007FFFFF)),
                          _mm512_set1_epi32(0x00400000));
}

// The error terms (waux*(s*q - x))*(s*q - x) of n elements, 16 trials and every code, as ggml's
// search computes each: diff = scale*q - x, then d2 += w*diff*diff.
template <class S>
GGUF_CODEC_AVX512 void error_terms(int n, const float* s16, const float* xval, const float* waux,
                                   float* terms) {
  alignas(64) float sq[S::kStride];
  for (int f = 0; f < S::kStride; ++f) {
    const int c = f % S::kSlots;
    sq[f] = s16[f / S::kSlots] * static_cast<float>(c < S::kCodes ? 2 * c + 1 : 0);
  }
  for (int j = 0; j < n; ++j) {
    const __m512 x = _mm512_set1_ps(xval[j]), w = _mm512_set1_ps(waux[j]);
    for (int v = 0; v < S::kSlots; ++v) {
      const __m512 diff = _mm512_sub_ps(_mm512_load_ps(sq + 16 * v), x);
      _mm512_store_ps(terms + j * S::kStride + 16 * v, _mm512_mul_ps(_mm512_mul_ps(w, diff), diff));
    }
  }
}

// Element i's terms by code (kSlots of them at at), repeated across the register so a permute by
// the code (in its low bits) picks one.
template <class S>
GGUF_CODEC_AVX512 inline __m512 term_table(const float* at) {
  if constexpr (S::kSlots == 4) return _mm512_broadcast_f32x4(_mm_loadu_ps(at));
  return _mm512_broadcast_f32x8(_mm256_loadu_ps(at));
}
template <class S>
GGUF_CODEC_AVX512 inline __m512 pick_term(__m512 table, __m512i code) {
  if constexpr (S::kSlots == 4) return _mm512_permutevar_ps(table, code);  // low 2 bits
  return _mm512_permutexvar_ps(code, table);  // low 4 bits: both halves hold the same 8
}

// The neighbour of list (count, then tuples) with the least sum of terms (element i's at
// terms + i * stride, by code), summed in element order; the first of equal sums wins and sums
// not below FLT_MAX never do, as in ggml's scan. Returns its tuple.
template <class S, int Dim, int Bits>
GGUF_CODEC_AVX512 int best_tuple(const uint16_t* list, const float* terms, int stride) {
  const int count = list[0];
  float best_d2 = FLT_MAX;
  int best = -1;
  for (int j0 = 0; j0 < count; j0 += 16) {
    const __mmask16 live =
        count - j0 >= 16 ? __mmask16{0xFFFF} : static_cast<__mmask16>((1u << (count - j0)) - 1);
    const __m512i u = _mm512_cvtepu16_epi32(_mm256_maskz_loadu_epi16(live, list + 1 + j0));
    __m512 d2 = _mm512_setzero_ps();
    for (int i = 0; i < Dim; ++i)
      d2 = _mm512_add_ps(
          d2, pick_term<S>(term_table<S>(terms + i * stride), _mm512_srli_epi32(u, Bits * i)));
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

template <int Dim, int Bits>
void codes_of(int tuple, int8_t* L) {
  for (int i = 0; i < Dim; ++i)
    L[i] = static_cast<int8_t>((tuple >> (Bits * i)) & ((1 << Bits) - 1));
}

template <int Dim, int Bits, int kMaxQ>
GGUF_CODEC_AVX512 void sweep(const SweepLattice& lat, const Sweep& sw, const float* xval,
                             const float* waux, const float* weight, float& scale, int8_t* L) {
  using S = Shape<Dim, Bits, kMaxQ>;
  const int groups = sw.n / Dim;  // at most 8
  float best = 0;
  int win_tuple[8] = {};
  // Whether the winner's rounded codes were on the grid, per group (before any trial won: on
  // the grid, except for kAllWhenAnyOff, whose encoder starts with every group off it).
  bool win_on_grid[8];
  for (bool& b : win_on_grid) b = sw.refit != Refit::kAllWhenAnyOff;
  bool won = false;
  alignas(64) float terms[32 * S::kStride];
  for (int first = sw.lo; first <= sw.hi; first += 16) {
    const int trials = sw.hi - first + 1 < 16 ? sw.hi - first + 1 : 16;
    alignas(64) float id[16], s[16];
    for (int t = 0; t < 16; ++t) {
      const int is = first + (t < trials ? t : trials - 1);
      id[t] = (static_cast<float>(2 * kMaxQ - 1) + static_cast<float>(is) * sw.step) / sw.den;
      s[t] = 1 / id[t];
    }
    // The codes of every trial, one tuple per group and trial.
    const __m512 idv = _mm512_load_ps(id);
    __m512i u[8];
    for (int k = 0; k < groups; ++k) u[k] = _mm512_setzero_si512();
    for (int j = 0; j < sw.n; ++j) {
      const __m512 v = _mm512_mul_ps(
          _mm512_set1_ps(0.5f),
          _mm512_sub_ps(_mm512_mul_ps(idv, _mm512_set1_ps(xval[j])), _mm512_set1_ps(1.0f)));
      const __m512i l = _mm512_max_epi32(
          _mm512_setzero_si512(), _mm512_min_epi32(_mm512_set1_epi32(kMaxQ - 1), nearest_int(v)));
      u[j / Dim] = _mm512_or_si512(u[j / Dim], _mm512_slli_epi32(l, Bits * (j % Dim)));
    }
    alignas(64) int32_t tuple[8][16], grid[8][16];
    for (int k = 0; k < groups; ++k) {
      _mm512_store_si512(tuple[k], u[k]);
      _mm512_store_si512(grid[k], _mm512_i32gather_epi32(u[k], lat.map, 4));
    }
    // Tuples off the grid move to their best neighbour at the trial's scale.
    bool have_terms = false;
    for (int k = 0; k < groups; ++k)
      for (int t = 0; t < trials; ++t) {
        if (grid[k][t] >= 0) continue;
        if (!have_terms) error_terms<S>(sw.n, s, xval, waux, terms);
        have_terms = true;
        tuple[k][t] =
            best_tuple<S, Dim, Bits>(lat.lists.data() - grid[k][t] - 1,
                                     terms + Dim * k * S::kStride + S::kSlots * t, S::kStride);
      }
    // Least-squares sums of every trial, in element order (q = 2 * code + 1, exact).
    __m512 sumqx = _mm512_setzero_ps(), sumq2 = _mm512_setzero_ps();
    for (int k = 0; k < groups; ++k) {
      const __m512i uk = _mm512_load_si512(tuple[k]);
      for (int i = 0; i < Dim; ++i) {
        const int j = Dim * k + i;
        const __m512i c =
            _mm512_and_si512(_mm512_srli_epi32(uk, Bits * i), _mm512_set1_epi32(S::kMask));
        const __m512 q =
            _mm512_cvtepi32_ps(_mm512_add_epi32(_mm512_add_epi32(c, c), _mm512_set1_epi32(1)));
        sumqx = _mm512_add_ps(sumqx, _mm512_mul_ps(_mm512_set1_ps(weight[j] * xval[j]), q));
        sumq2 = _mm512_add_ps(sumq2, _mm512_mul_ps(_mm512_mul_ps(_mm512_set1_ps(weight[j]), q), q));
      }
    }
    alignas(64) float sx[16], s2[16];
    _mm512_store_ps(sx, sumqx);
    _mm512_store_ps(s2, sumq2);
    for (int t = 0; t < trials; ++t) {
      if (s2[t] > 0 && sx[t] * sx[t] > best * s2[t]) {
        scale = sx[t] / s2[t];
        best = scale * sx[t];
        won = true;
        for (int k = 0; k < groups; ++k) {
          win_tuple[k] = tuple[k][t];
          win_on_grid[k] = grid[k][t] >= 0;
        }
      }
    }
  }
  if (won)
    for (int k = 0; k < groups; ++k) codes_of<Dim, Bits>(win_tuple[k], L + Dim * k);
  // The refit: groups again at the chosen scale, then the least-squares scale.
  bool any_off = sw.refit == Refit::kAlways;
  for (int k = 0; k < groups; ++k) any_off = any_off || !win_on_grid[k];
  if (!any_off || !(scale > 0)) return;
  const float id1 = 1 / scale;
  for (int k = 0; k < groups; ++k) {
    if (sw.refit == Refit::kOffGridGroups && win_on_grid[k]) continue;
    int t = 0;
    for (int i = 0; i < Dim; ++i) {
      const int l = kq::nearest_int(0.5f * (id1 * xval[Dim * k + i] - 1));
      t |= (l < 0 ? 0 : l > kMaxQ - 1 ? kMaxQ - 1 : l) << (Bits * i);
    }
    const int g = lat.map[t];
    if (g < 0) {
      alignas(32) float one[Dim * S::kSlots];
      for (int i = 0; i < Dim; ++i)
        for (int c = 0; c < S::kSlots; ++c) {
          const float diff = scale * static_cast<float>(2 * c + 1) - xval[Dim * k + i];
          one[i * S::kSlots + c] = waux[Dim * k + i] * diff * diff;
        }
      t = best_tuple<S, Dim, Bits>(lat.lists.data() - g - 1, one, S::kSlots);
    }
    codes_of<Dim, Bits>(t, L + Dim * k);
  }
  float sx1 = 0, s21 = 0;
  for (int j = 0; j < sw.n; ++j) {
    const float q = static_cast<float>(2 * L[j] + 1);
    sx1 += weight[j] * xval[j] * q;
    s21 += weight[j] * q * q;
  }
  if (s21 > 0) scale = sx1 / s21;
}

}  // namespace

GGUF_CODEC_AVX512 void iq2_sweep_avx512(const SweepLattice& lat, const Sweep& sw, const float* xval,
                                        const float* waux, const float* weight, float& scale,
                                        int8_t* L) {
  sweep<8, 2, 3>(lat, sw, xval, waux, weight, scale, L);
}

GGUF_CODEC_AVX512 void iq3_sweep_avx512(const SweepLattice& lat, const Sweep& sw, const float* xval,
                                        const float* waux, const float* weight, float& scale,
                                        int8_t* L) {
  sweep<4, 3, 8>(lat, sw, xval, waux, weight, scale, L);
}

GGUF_CODEC_AVX512 int iq1_best_tuple_avx512(const SweepLattice& lat, int u, const float* x,
                                            const float* weight, float scale, const float* xg) {
  using S = Shape<8, 2, 3>;
  alignas(16) float terms[8 * S::kSlots] = {};
  for (int i = 0; i < 8; ++i)
    for (int c = 0; c < 3; ++c) {
      const float diff = scale * xg[c] - x[i];
      terms[i * S::kSlots + c] = weight[i] * diff * diff;
    }
  return best_tuple<S, 8, 2>(lat.lists.data() - lat.map[u] - 1, terms, S::kSlots);
}

}  // namespace gguf::detail::iq

GGUF_AVX512_WARNINGS_ON

// search_affine (ggml's make_qkx2/qkx3_quants) for up to 16 groups at once, one group per
// AVX-512 lane. The groups of a super-block are independent, so each lane runs ggml's
// candidate scales one after another exactly as ggml does, min updates included: nothing is
// speculated or redone, unlike candidates-in-lanes (codec_kquants_search_simd.cpp), where a
// winner that moves the min invalidates the lanes after it. Same results bit for bit.
#include <immintrin.h>

#include <cstring>

#include "codecs/codec_kquants_common.h"
#include "codecs/codec_simd.h"

GGUF_AVX512_WARNINGS_OFF

namespace gguf::detail::kq {
namespace {

// ggml's nearest_int, then the clamp to [0, nmax], as a float (exact: small integers).
GGUF_CODEC_AVX512 inline __m512 code(__m512 f, __m512i nmax) {
  const __m512i bits = _mm512_castps_si512(_mm512_add_ps(f, _mm512_set1_ps(12582912.0f)));
  const __m512i l = _mm512_sub_epi32(_mm512_and_si512(bits, _mm512_set1_epi32(0x007FFFFF)),
                                     _mm512_set1_epi32(0x00400000));
  return _mm512_cvtepi32_ps(_mm512_max_epi32(_mm512_setzero_si512(), _mm512_min_epi32(nmax, l)));
}

template <bool kMad>
GGUF_CODEC_AVX512 inline __m512 err(__m512 d) {
  if constexpr (kMad) return _mm512_abs_ps(d);
  return _mm512_mul_ps(d, d);
}

template <bool kMad>
GGUF_CODEC_AVX512 void affine_lanes(int groups, int n, int nmax, const float* x, const float* w,
                                    uint8_t* L, float* scales, float* neg_mins,
                                    const AffineSearch& p) {
  const __mmask16 used =
      groups >= 16 ? __mmask16{0xFFFF} : static_cast<__mmask16>((1u << groups) - 1);
  const __m512i first =
      _mm512_mullo_epi32(_mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15),
                         _mm512_set1_epi32(n));
  const __m512i nmax_v = _mm512_set1_epi32(nmax);
  // Element i of every group: xt[i], weights wt[i]; codes Lt[i] (as floats) of the best so far.
  __m512 xt[32], wt[32], Lt[32], aux[32];
  for (int i = 0; i < n; ++i) {
    const __m512i at = _mm512_add_epi32(first, _mm512_set1_epi32(i));
    xt[i] = _mm512_mask_i32gather_ps(_mm512_setzero_ps(), used, at, x, 4);
    wt[i] = _mm512_mask_i32gather_ps(_mm512_setzero_ps(), used, at, w, 4);
  }
  __m512 min = xt[0], max = xt[0], sum_w = wt[0];
  __m512 sum_x = _mm512_mul_ps(sum_w, xt[0]);
  for (int i = 1; i < n; ++i) {
    min = _mm512_mask_blend_ps(_mm512_cmp_ps_mask(xt[i], min, _CMP_LT_OQ), min, xt[i]);
    max = _mm512_mask_blend_ps(_mm512_cmp_ps_mask(xt[i], max, _CMP_GT_OQ), max, xt[i]);
    sum_w = _mm512_add_ps(sum_w, wt[i]);
    sum_x = _mm512_add_ps(sum_x, _mm512_mul_ps(wt[i], xt[i]));
  }
  min = _mm512_mask_blend_ps(_mm512_cmp_ps_mask(min, _mm512_setzero_ps(), _CMP_GT_OQ), min,
                             _mm512_setzero_ps());
  // Groups whose values are all alike (and unused lanes) get codes 0 and scale 0.
  const __mmask16 flat = _mm512_cmp_ps_mask(max, min, _CMP_EQ_OQ) | static_cast<__mmask16>(~used);
  __m512 iscale = _mm512_div_ps(_mm512_set1_ps(static_cast<float>(nmax)), _mm512_sub_ps(max, min));
  __m512 scale = _mm512_div_ps(_mm512_set1_ps(1.0f), iscale);
  __m512 best = _mm512_setzero_ps();
  for (int i = 0; i < n; ++i) {
    Lt[i] = code(_mm512_mul_ps(iscale, _mm512_sub_ps(xt[i], min)), nmax_v);
    const __m512 diff = _mm512_sub_ps(_mm512_add_ps(_mm512_mul_ps(scale, Lt[i]), min), xt[i]);
    best = _mm512_add_ps(best, _mm512_mul_ps(wt[i], err<kMad>(diff)));
  }
  // ggml keeps the first guess when there are no steps (nstep < 1).
  for (int is = 0; p.nstep >= 1 && is <= p.nstep; ++is) {
    iscale = _mm512_div_ps(
        _mm512_set1_ps(p.rmin + p.rdelta * static_cast<float>(is) + static_cast<float>(nmax)),
        _mm512_sub_ps(max, min));
    __m512 sum_l = _mm512_setzero_ps(), sum_l2 = _mm512_setzero_ps(), sum_xl = _mm512_setzero_ps();
    for (int i = 0; i < n; ++i) {
      aux[i] = code(_mm512_mul_ps(iscale, _mm512_sub_ps(xt[i], min)), nmax_v);
      const __m512 wl = _mm512_mul_ps(wt[i], aux[i]);
      sum_l = _mm512_add_ps(sum_l, wl);
      sum_l2 = _mm512_add_ps(sum_l2, _mm512_mul_ps(wl, aux[i]));
      sum_xl = _mm512_add_ps(sum_xl, _mm512_mul_ps(wl, xt[i]));
    }
    const __m512 D = _mm512_sub_ps(_mm512_mul_ps(sum_w, sum_l2), _mm512_mul_ps(sum_l, sum_l));
    __m512 this_scale =
        _mm512_div_ps(_mm512_sub_ps(_mm512_mul_ps(sum_w, sum_xl), _mm512_mul_ps(sum_x, sum_l)), D);
    __m512 this_min =
        _mm512_div_ps(_mm512_sub_ps(_mm512_mul_ps(sum_l2, sum_x), _mm512_mul_ps(sum_l, sum_xl)), D);
    const __mmask16 positive = _mm512_cmp_ps_mask(this_min, _mm512_setzero_ps(), _CMP_GT_OQ);
    this_min = _mm512_mask_blend_ps(positive, this_min, _mm512_setzero_ps());
    this_scale = _mm512_mask_blend_ps(positive, this_scale, _mm512_div_ps(sum_xl, sum_l2));
    __m512 cur = _mm512_setzero_ps();
    for (int i = 0; i < n; ++i) {
      const __m512 diff =
          _mm512_sub_ps(_mm512_add_ps(_mm512_mul_ps(this_scale, aux[i]), this_min), xt[i]);
      cur = _mm512_add_ps(cur, _mm512_mul_ps(wt[i], err<kMad>(diff)));
    }
    const __mmask16 win = _mm512_cmp_ps_mask(D, _mm512_setzero_ps(), _CMP_GT_OQ) &
                          _mm512_cmp_ps_mask(cur, best, _CMP_LT_OQ) & static_cast<__mmask16>(~flat);
    if (!win) continue;
    for (int i = 0; i < n; ++i) Lt[i] = _mm512_mask_blend_ps(win, Lt[i], aux[i]);
    best = _mm512_mask_blend_ps(win, best, cur);
    scale = _mm512_mask_blend_ps(win, scale, this_scale);
    min = _mm512_mask_blend_ps(win, min, this_min);
  }
  alignas(64) float s[16], m[16];
  alignas(16) uint8_t codes[32][16];
  _mm512_store_ps(s, _mm512_mask_blend_ps(flat, scale, _mm512_setzero_ps()));
  _mm512_store_ps(m, min);
  for (int i = 0; i < n; ++i)
    _mm_store_si128(
        reinterpret_cast<__m128i*>(codes[i]),
        _mm512_maskz_cvtepi32_epi8(static_cast<__mmask16>(~flat), _mm512_cvtps_epi32(Lt[i])));
  for (int g = 0; g < groups; ++g) {
    scales[g] = s[g];
    neg_mins[g] = -m[g];
    for (int i = 0; i < n; ++i) L[n * g + i] = codes[i][g];
  }
}

}  // namespace

GGUF_CODEC_AVX512 float positive_iscale_avx512(int n, int nmax, const float* x, const float* w,
                                               float max) {
  // Lane 0: the first guess, whose codes are kept as bytes (ggml stores them in L before
  // measuring); lanes 1-8: is = -4..-1, 1..4, codes clamped to nmax; the rest repeat lane 0.
  alignas(64) float iscale[16], scale[16], mse[16];
  iscale[0] = static_cast<float>(nmax) / max;
  for (int k = 1; k < 16; ++k) {
    const int is = k <= 4 ? k - 5 : k - 4;
    iscale[k] =
        k <= 8 ? (0.1f * static_cast<float>(is) + static_cast<float>(nmax)) / max : iscale[0];
  }
  for (int k = 0; k < 16; ++k) scale[k] = 1 / iscale[k];
  const __m512 isv = _mm512_load_ps(iscale), sv = _mm512_load_ps(scale);
  const __m512i limit =
      _mm512_mask_blend_epi32(__mmask16{1}, _mm512_set1_epi32(nmax), _mm512_set1_epi32(0x7FFFFFFF));
  const __m512i byte =
      _mm512_mask_blend_epi32(__mmask16{1}, _mm512_set1_epi32(-1), _mm512_set1_epi32(0xFF));
  __m512 sum = _mm512_setzero_ps();
  for (int i = 0; i < n; ++i) {
    const __m512 xi = _mm512_set1_ps(x[i]);
    const __m512i bits =
        _mm512_castps_si512(_mm512_add_ps(_mm512_mul_ps(isv, xi), _mm512_set1_ps(12582912.0f)));
    const __m512i l = _mm512_sub_epi32(_mm512_and_si512(bits, _mm512_set1_epi32(0x007FFFFF)),
                                       _mm512_set1_epi32(0x00400000));
    const __m512 fl = _mm512_cvtepi32_ps(_mm512_and_si512(_mm512_min_epi32(limit, l), byte));
    const __m512 diff = _mm512_sub_ps(xi, _mm512_mul_ps(sv, fl));
    sum = _mm512_add_ps(sum, _mm512_mul_ps(_mm512_mul_ps(_mm512_set1_ps(w[i]), diff), diff));
  }
  _mm512_store_ps(mse, sum);
  float best = mse[0], chosen = iscale[0];
  for (int k = 1; k <= 8; ++k)
    if (mse[k] < best) {
      best = mse[k];
      chosen = iscale[k];
    }
  return chosen;
}

void search_affine_groups_avx512(int groups, int n, int nmax, const float* x, const float* w,
                                 uint8_t* L, float* scales, float* neg_mins,
                                 const AffineSearch& p) {
  if (p.use_mad)
    affine_lanes<true>(groups, n, nmax, x, w, L, scales, neg_mins, p);
  else
    affine_lanes<false>(groups, n, nmax, x, w, L, scales, neg_mins, p);
}

}  // namespace gguf::detail::kq

GGUF_AVX512_WARNINGS_ON

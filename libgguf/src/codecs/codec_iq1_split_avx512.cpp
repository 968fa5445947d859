// The level-split searches of IQ1_S and IQ1_M with AVX-512 (codec_iq1_split.h): 16 splits run
// in the lanes of a register, each lane doing ggml's float operations in ggml's order. The scan
// for the winner stays sequential but skips a register's candidates when none of them beats the
// best so far (that comparison is the scan's own, so the skipped ones would have lost there).
#include <immintrin.h>

#include <array>
#include <cfloat>

#include "codecs/codec_iq1_split.h"
#include "codecs/codec_simd.h"

GGUF_AVX512_WARNINGS_OFF

namespace gguf::detail::iq {
namespace {

// The 153 splits (i1, i2) of 16 values in scan order, padded to 160 with the last one.
struct Splits16 {
  std::array<int32_t, 160> i1{}, i2{};
  static constexpr int kCount = 153;
};
constexpr Splits16 kSplits16 = [] {
  Splits16 s;
  int n = 0;
  for (int a = 0; a <= 16; ++a)
    for (int b = a; b <= 16; ++b, ++n) s.i1[n] = a, s.i2[n] = b;
  for (; n < 160; ++n) s.i1[n] = 16, s.i2[n] = 16;
  return s;
}();

// Lanes (of live) holding a candidate that beats best in the scan's own comparison.
GGUF_CODEC_AVX512 inline __mmask16 beats(__mmask16 live, __m512 sx, __m512 s2, float best) {
  const __mmask16 pos = _mm512_mask_cmp_ps_mask(live, s2, _mm512_setzero_ps(), _CMP_GT_OQ);
  return _mm512_mask_cmp_ps_mask(pos, _mm512_mul_ps(sx, sx),
                                 _mm512_mul_ps(_mm512_set1_ps(best), s2), _CMP_GT_OQ);
}

// Code 0 where j < i1, 1 where j < i2, else 2: the term of each lane's split.
GGUF_CODEC_AVX512 inline __m512 pick(const float* term, __mmask16 lt1, __mmask16 lt2) {
  __m512 v = _mm512_set1_ps(term[2]);
  v = _mm512_mask_mov_ps(v, lt2, _mm512_set1_ps(term[1]));
  return _mm512_mask_mov_ps(v, lt1, _mm512_set1_ps(term[0]));
}

// IQ1_S's sums of a split at levels l: a0 + b * l[1] + c * l[2], and with the levels squared as
// (b * l[1]) * l[1], in ggml's order.
GGUF_CODEC_AVX512 inline __m512 sum_qx(__m512 a0, __m512 b, __m512 c, const float* l) {
  return _mm512_add_ps(_mm512_add_ps(a0, _mm512_mul_ps(b, _mm512_set1_ps(l[1]))),
                       _mm512_mul_ps(c, _mm512_set1_ps(l[2])));
}
GGUF_CODEC_AVX512 inline __m512 sum_q2(__m512 a0, __m512 b, __m512 c, const float* l) {
  const __m512 l1 = _mm512_set1_ps(l[1]), l2 = _mm512_set1_ps(l[2]);
  return _mm512_add_ps(_mm512_add_ps(a0, _mm512_mul_ps(_mm512_mul_ps(b, l1), l1)),
                       _mm512_mul_ps(_mm512_mul_ps(c, l2), l2));
}

}  // namespace

GGUF_CODEC_AVX512 void iq1_s_split_avx512(const float* sumx, const float* sumw, Iq1Split& out) {
  constexpr int kN = 32;
  const float* xp = kIq1Levels[0];
  const float* xm = kIq1Levels[1];
  float best = -FLT_MAX;
  const __m512 x_all = _mm512_set1_ps(sumx[kN]), w_all = _mm512_set1_ps(sumw[kN]);
  for (int i1 = 0; i1 <= kN; ++i1) {
    const float ax = sumx[i1] - sumx[0], aw = sumw[i1] - sumw[0];
    const __m512 px0 = _mm512_set1_ps(ax * xp[0]), pw0 = _mm512_set1_ps(aw * xp[0] * xp[0]);
    const __m512 mx0 = _mm512_set1_ps(ax * xm[0]), mw0 = _mm512_set1_ps(aw * xm[0] * xm[0]);
    const __m512 x1 = _mm512_set1_ps(sumx[i1]), w1 = _mm512_set1_ps(sumw[i1]);
    for (int i2 = i1; i2 <= kN; i2 += 16) {
      const int lanes = kN + 1 - i2 < 16 ? kN + 1 - i2 : 16;
      const __mmask16 live = static_cast<__mmask16>((1u << lanes) - 1);
      const __m512 x2 = _mm512_maskz_loadu_ps(live, sumx + i2);
      const __m512 w2 = _mm512_maskz_loadu_ps(live, sumw + i2);
      const __m512 bx = _mm512_sub_ps(x2, x1), cx = _mm512_sub_ps(x_all, x2);
      const __m512 bw = _mm512_sub_ps(w2, w1), cw = _mm512_sub_ps(w_all, w2);
      const __m512 sxp = sum_qx(px0, bx, cx, xp), s2p = sum_q2(pw0, bw, cw, xp);
      const __m512 sxm = sum_qx(mx0, bx, cx, xm), s2m = sum_q2(mw0, bw, cw, xm);
      if (!(beats(live, sxp, s2p, best) | beats(live, sxm, s2m, best))) continue;
      alignas(64) float v[4][16];
      _mm512_store_ps(v[0], sxp);
      _mm512_store_ps(v[1], s2p);
      _mm512_store_ps(v[2], sxm);
      _mm512_store_ps(v[3], s2m);
      for (int l = 0; l < lanes; ++l) {
        iq1_consider(v[0][l], v[1][l], i1, i2 + l, 1, best, out);
        iq1_consider(v[2][l], v[3][l], i1, i2 + l, -1, best, out);
      }
    }
  }
}

GGUF_CODEC_AVX512 void iq1_m_split_avx512(const Iq1mTerms& t, Iq1Split& out) {
  float best = -FLT_MAX;
  for (int base = 0; base < Splits16::kCount; base += 16) {
    const int lanes = Splits16::kCount - base < 16 ? Splits16::kCount - base : 16;
    const __mmask16 live = static_cast<__mmask16>((1u << lanes) - 1);
    const __m512i i1 = _mm512_loadu_si512(kSplits16.i1.data() + base);
    const __m512i i2 = _mm512_loadu_si512(kSplits16.i2.data() + base);
    __m512 sx[4], s2[4];
    for (int k = 0; k < 4; ++k) sx[k] = s2[k] = _mm512_setzero_ps();
    for (int j = 0; j < 16; ++j) {
      const __m512i jv = _mm512_set1_epi32(j);
      const __mmask16 lt1 = _mm512_cmpgt_epi32_mask(i1, jv), lt2 = _mm512_cmpgt_epi32_mask(i2, jv);
      const __m512 px = pick(t.x[j][0], lt1, lt2), mx = pick(t.x[j][1], lt1, lt2);
      const __m512 p2 = pick(t.q2[j][0], lt1, lt2), m2 = pick(t.q2[j][1], lt1, lt2);
      // Combination k shifts the first half by k / 2, the second by k % 2 (0: +, 1: -).
      const bool up = t.upper[j];
      sx[0] = _mm512_add_ps(sx[0], px);
      s2[0] = _mm512_add_ps(s2[0], p2);
      sx[1] = _mm512_add_ps(sx[1], up ? mx : px);
      s2[1] = _mm512_add_ps(s2[1], up ? m2 : p2);
      sx[2] = _mm512_add_ps(sx[2], up ? px : mx);
      s2[2] = _mm512_add_ps(s2[2], up ? p2 : m2);
      sx[3] = _mm512_add_ps(sx[3], mx);
      s2[3] = _mm512_add_ps(s2[3], m2);
    }
    __mmask16 any = 0;
    for (int k = 0; k < 4; ++k) any |= beats(live, sx[k], s2[k], best);
    if (!any) continue;
    alignas(64) float vx[4][16], v2[4][16];
    for (int k = 0; k < 4; ++k) {
      _mm512_store_ps(vx[k], sx[k]);
      _mm512_store_ps(v2[k], s2[k]);
    }
    for (int l = 0; l < lanes; ++l)
      for (int k = 0; k < 4; ++k)
        iq1_consider(vx[k][l], v2[k][l], kSplits16.i1[base + l], kSplits16.i2[base + l], k, best,
                     out);
  }
}

}  // namespace gguf::detail::iq

GGUF_AVX512_WARNINGS_ON

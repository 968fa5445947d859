// The portable level-split searches of IQ1_S and IQ1_M (codec_iq1_split.h): every candidate's
// sums in ggml's order; IQ1_M shares the partial sums of the values before i2 between the
// candidates that have them in common (the same additions in the same order, done once).
#include "codecs/codec_iq1_split.h"

#include <cfloat>

namespace gguf::detail::iq {

void iq1_s_split(const float* sumx, const float* sumw, Iq1Split& out) {
  constexpr int kN = 32;
  const float* xp = kIq1Levels[0];
  const float* xm = kIq1Levels[1];
  float best = -FLT_MAX;
  for (int i1 = 0; i1 <= kN; ++i1) {
    // The terms of the first level do not depend on i2 (same products, same sums).
    const float ax = sumx[i1] - sumx[0], aw = sumw[i1] - sumw[0];
    const float px0 = ax * xp[0], pw0 = aw * xp[0] * xp[0];
    const float mx0 = ax * xm[0], mw0 = aw * xm[0] * xm[0];
    for (int i2 = i1; i2 <= kN; ++i2) {
      const float bx = sumx[i2] - sumx[i1], cx = sumx[kN] - sumx[i2];
      const float bw = sumw[i2] - sumw[i1], cw = sumw[kN] - sumw[i2];
      iq1_consider(px0 + bx * xp[1] + cx * xp[2], pw0 + bw * xp[1] * xp[1] + cw * xp[2] * xp[2], i1,
                   i2, 1, best, out);
      iq1_consider(mx0 + bx * xm[1] + cx * xm[2], mw0 + bw * xm[1] * xm[1] + cw * xm[2] * xm[2], i1,
                   i2, -1, best, out);
    }
  }
}

void iq1_m_split(const Iq1mTerms& t, Iq1Split& out) {
  constexpr int kN = 16;
  // The shift of value j under combination k.
  const auto shift = [&t](int k, int j) { return (t.upper[j] ? k % 2 : k / 2); };
  float best = -FLT_MAX;
  float lo_x[4] = {}, lo_2[4] = {};  // sums over j < i1 at code 0
  for (int i1 = 0; i1 <= kN; ++i1) {
    if (i1 > 0)
      for (int k = 0; k < 4; ++k) {
        lo_x[k] += t.x[i1 - 1][shift(k, i1 - 1)][0];
        lo_2[k] += t.q2[i1 - 1][shift(k, i1 - 1)][0];
      }
    float mid_x[4], mid_2[4];  // then over i1 <= j < i2 at code 1
    for (int k = 0; k < 4; ++k) mid_x[k] = lo_x[k], mid_2[k] = lo_2[k];
    for (int i2 = i1; i2 <= kN; ++i2) {
      if (i2 > i1)
        for (int k = 0; k < 4; ++k) {
          mid_x[k] += t.x[i2 - 1][shift(k, i2 - 1)][1];
          mid_2[k] += t.q2[i2 - 1][shift(k, i2 - 1)][1];
        }
      float sx[4], s2[4];  // and the rest at code 2
      for (int k = 0; k < 4; ++k) {
        sx[k] = mid_x[k];
        s2[k] = mid_2[k];
        for (int j = i2; j < kN; ++j) {
          sx[k] += t.x[j][shift(k, j)][2];
          s2[k] += t.q2[j][shift(k, j)][2];
        }
      }
      for (int k = 0; k < 4; ++k) iq1_consider(sx[k], s2[k], i1, i2, k, best, out);
    }
  }
}

}  // namespace gguf::detail::iq

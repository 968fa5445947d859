// Internal: the exhaustive level-split searches of IQ1_S and IQ1_M (which of a group's sorted
// values take level -1, 0 or +1, and which shift), portable (codec_iq1_split.cpp) and AVX-512
// (codec_iq1_split_avx512.cpp): the same sums in the same order, so the same winner.
#pragma once

namespace gguf::detail::iq {

// The levels of IQ1 codes 0..2 shifted up (+) or down (-) by 1/8.
inline constexpr float kIq1Delta8 = 0.125f;
inline constexpr float kIq1Levels[2][3] = {{-1 + kIq1Delta8, kIq1Delta8, 1 + kIq1Delta8},
                                           {-1 - kIq1Delta8, -kIq1Delta8, 1 - kIq1Delta8}};

// A split: the sorted values before i1 take code 0, those before i2 code 1, the rest code 2.
// Candidates are scanned split by split (i1 outer, i2 >= i1 inner), shifts in order within a
// split; the first whose least-squares fit explains more (sumqx^2 > best * sumq2, sumq2 > 0)
// than the best so far wins, as in ggml. i1 < 0 when none did; scale then keeps its start.
struct Iq1Split {
  float scale = 0;
  int i1 = -1, i2 = -1;
  int shift = 0;  // IQ1_S: +1 or -1 (levels kIq1Levels[0] or [1]); IQ1_M: combination 0..3
};

// One step of the scan; best is the score to beat (-FLT_MAX before the first candidate).
inline void iq1_consider(float sumqx, float sumq2, int i1, int i2, int shift, float& best,
                         Iq1Split& out) {
  if (sumq2 > 0 && sumqx * sumqx > best * sumq2) {
    out.scale = sumqx / sumq2;
    best = out.scale * sumqx;
    out.i1 = i1;
    out.i2 = i2;
    out.shift = shift;
  }
}

// IQ1_S, a group of 32: prefix sums sumx[j] (of weight * x) and sumw[j] (of weight) over the
// first j sorted values, j = 0..32. Shifts: +, then -.
void iq1_s_split(const float* sumx, const float* sumw, Iq1Split& out);
void iq1_s_split_avx512(const float* sumx, const float* sumw, Iq1Split& out);

// IQ1_M, a group of 16 in two halves of 8, each shifted its own way: combination k shifts the
// first half by k < 2 ? + : -, the second by k % 2 == 0 ? + : -. The terms of sorted value j at
// code c under shift s (0: +, 1: -) are computed once per group: x = weight * level * value and
// q2 = weight * level * level (ggml's products); upper says value j is in the second half.
// Each candidate's sums add the terms of j = 0..15 in order, as ggml does.
struct Iq1mTerms {
  float x[16][2][3];
  float q2[16][2][3];
  bool upper[16];
};
void iq1_m_split(const Iq1mTerms& t, Iq1Split& out);
void iq1_m_split_avx512(const Iq1mTerms& t, Iq1Split& out);

}  // namespace gguf::detail::iq

// Fast forms of the hot k-quant scale searches. ggml tries its candidate scales one after
// another, each a chain of dependent float additions; here candidates (or, for q3_K, whole
// groups) run side by side in SIMD lanes. Every lane performs exactly the scalar operations in
// the scalar order and winners are picked in ggml's order, so the results are bit-identical to
// codec_kquants_search.cpp (tests hold the two equal).
#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>

#include "codecs/codec_kquants_common.h"

#if defined(__SSE__)
#include <xmmintrin.h>
#endif

namespace gguf::detail::kq {
namespace {

// GCC/Clang vector extensions: element-wise IEEE operations, SSE2 on baseline x86-64.
using F4 = float __attribute__((vector_size(16)));
using I4 = int32_t __attribute__((vector_size(16)));

inline I4 nearest_int(F4 f) {
  const I4 bits = std::bit_cast<I4>(f + 12582912.0f);
  return (bits & 0x007FFFFF) - 0x00400000;
}

inline F4 to_float(I4 v) { return __builtin_convertvector(v, F4); }

// ggml's clamp of a rounded code, done after the exact int-to-float conversion (codes from
// nearest_int are below 2^23 in magnitude) because float min/max are single SSE instructions.
inline F4 rounded_clamped(F4 f, float lo, float hi) {
  const F4 v = to_float(nearest_int(f));
#if defined(__SSE__)
  // Compilers keep `v < lo ? lo : v` as compare-and-blend because it differs from maxps for
  // NaN, which a converted integer never is.
  return _mm_min_ps(_mm_max_ps(v, _mm_set1_ps(lo)), _mm_set1_ps(hi));
#else
  const F4 low = v < lo ? F4{} + lo : v;
  return low > hi ? F4{} + hi : low;
#endif
}

inline F4 abs(F4 v) { return std::bit_cast<F4>(std::bit_cast<I4>(v) & 0x7FFFFFFF); }

}  // namespace

float search_symmetric(int n, int nmax, const float* x, const float* w, int8_t* L) {
  float max = 0, amax = 0;
  for (int i = 0; i < n; ++i) {
    const float ax = std::fabs(x[i]);
    if (ax > amax) {
      amax = ax;
      max = x[i];
    }
  }
  if (amax < kGroupMaxEps) {
    std::memset(L, 0, n);
    return 0.0f;
  }
  // Candidate 0 is ggml's first guess -nmax/max; 1..18 are its refinements is = -9..-1, 1..9
  // (ggml skips is = 0). Lane 19 pads.
  constexpr int kCand = 19, kVecs = 5;
  alignas(16) float iscale[4 * kVecs];
  iscale[0] = static_cast<float>(-nmax) / max;
  for (int k = 1; k < kCand; ++k) {
    const int is = k <= 9 ? k - 10 : k - 9;
    iscale[k] = -(static_cast<float>(nmax) + 0.1f * static_cast<float>(is)) / max;
  }
  iscale[kCand] = iscale[0];
  F4 isv[kVecs], sumlx[kVecs], suml2[kVecs];
  for (int v = 0; v < kVecs; ++v) {
    std::memcpy(&isv[v], iscale + 4 * v, sizeof(F4));
    sumlx[v] = F4{};
    suml2[v] = F4{};
  }
  for (int i = 0; i < n; ++i) {
    const float wi = w ? w[i] : x[i] * x[i];
    const float wx = wi * x[i];
    for (int v = 0; v < kVecs; ++v) {
      const F4 l =
          rounded_clamped(isv[v] * x[i], static_cast<float>(-nmax), static_cast<float>(nmax - 1));
      sumlx[v] += wx * l;
      suml2[v] += wi * l * l;
    }
  }
  alignas(16) float slx[4 * kVecs], sl2[4 * kVecs];
  std::memcpy(slx, sumlx, sizeof slx);
  std::memcpy(sl2, suml2, sizeof sl2);
  float scale = sl2[0] != 0 ? slx[0] / sl2[0] : 0.0f;
  float best = scale * slx[0];
  int winner = 0;
  for (int k = 1; k < kCand; ++k) {
    if (sl2[k] > 0 && slx[k] * slx[k] > best * sl2[k]) {
      scale = slx[k] / sl2[k];
      best = scale * slx[k];
      winner = k;
    }
  }
  for (int i = 0; i < n; ++i)
    L[i] = static_cast<int8_t>(nmax +
                               std::clamp(kq::nearest_int(iscale[winner] * x[i]), -nmax, nmax - 1));
  return scale;
}

float search_affine(int n, int nmax, const float* x, const float* w, uint8_t* L, float* neg_min,
                    const AffineSearch& p) {
  AffineStart s;
  const bool varied = affine_start(n, nmax, x, w, L, p.use_mad, s);
  if (!varied || p.nstep < 1) {
    *neg_min = -s.min;
    return varied ? s.scale : 0.0f;
  }
  const float max = s.max, sum_w = s.sum_w, sum_x = s.sum_x;
  float min = s.min, scale = s.scale, best_error = s.best_error;
  // Candidates is..is+7 are evaluated together assuming the current min. A winner that moves
  // min invalidates the lanes after it (ggml would have used the new min for them), so the
  // next batch restarts right after the winner.
  constexpr int kVecs = 2, kLanes = 4 * kVecs;
  alignas(16) F4 codes[32][kVecs];
  int is = 0;
  while (is <= p.nstep) {
    const int count = std::min(kLanes, p.nstep + 1 - is);
    alignas(16) float lane_iscale[kLanes];
    for (int k = 0; k < kLanes; ++k) {
      const int c = is + std::min(k, count - 1);
      lane_iscale[k] =
          (p.rmin + p.rdelta * static_cast<float>(c) + static_cast<float>(nmax)) / (max - min);
    }
    F4 isv[kVecs], sum_l[kVecs], sum_l2[kVecs], sum_xl[kVecs];
    for (int v = 0; v < kVecs; ++v) {
      std::memcpy(&isv[v], lane_iscale + 4 * v, sizeof(F4));
      sum_l[v] = sum_l2[v] = sum_xl[v] = F4{};
    }
    for (int i = 0; i < n; ++i) {
      const float xm = x[i] - min;
      for (int v = 0; v < kVecs; ++v) {
        const F4 l = rounded_clamped(isv[v] * xm, 0.0f, static_cast<float>(nmax));
        codes[i][v] = l;
        const F4 wl = w[i] * l;
        sum_l[v] += wl;
        sum_l2[v] += wl * l;
        sum_xl[v] += wl * x[i];
      }
    }
    F4 D[kVecs], this_scale[kVecs], this_min[kVecs], cur[kVecs];
    for (int v = 0; v < kVecs; ++v) {
      D[v] = sum_w * sum_l2[v] - sum_l[v] * sum_l[v];
      const F4 s = (sum_w * sum_xl[v] - sum_x * sum_l[v]) / D[v];
      const F4 m = (sum_l2[v] * sum_x - sum_l[v] * sum_xl[v]) / D[v];
      const auto positive = m > 0;
      this_min[v] = positive ? F4{} : m;
      this_scale[v] = positive ? sum_xl[v] / sum_l2[v] : s;
      cur[v] = F4{};
    }
    for (int i = 0; i < n; ++i) {
      for (int v = 0; v < kVecs; ++v) {
        const F4 diff = this_scale[v] * codes[i][v] + this_min[v] - x[i];
        cur[v] += w[i] * (p.use_mad ? abs(diff) : diff * diff);
      }
    }
    int next = is + count;
    for (int k = 0; k < count; ++k) {
      const int v = k / 4, lane = k % 4;
      if (!(D[v][lane] > 0) || !(cur[v][lane] < best_error)) continue;
      for (int i = 0; i < n; ++i) L[i] = static_cast<uint8_t>(codes[i][v][lane]);
      best_error = cur[v][lane];
      scale = this_scale[v][lane];
      const float old_min = min;
      min = this_min[v][lane];
      if (std::bit_cast<uint32_t>(min) != std::bit_cast<uint32_t>(old_min)) {
        next = is + k + 1;
        break;
      }
    }
    is = next;
  }
  *neg_min = -min;
  return scale;
}

void search_q3_block(const float* x, int8_t* L, float* scales) {
  // Lane g of vector v is group 4v+g; xt[i][v] holds element i of those four groups.
  constexpr int kN = 16, kVecs = 4, kNmax = 4;
  F4 xt[kN][kVecs];
  for (int i = 0; i < kN; ++i)
    for (int v = 0; v < kVecs; ++v)
      xt[i][v] = F4{x[16 * (4 * v) + i], x[16 * (4 * v + 1) + i], x[16 * (4 * v + 2) + i],
                    x[16 * (4 * v + 3) + i]};
  F4 amax[kVecs], max[kVecs];
  for (int v = 0; v < kVecs; ++v) amax[v] = max[v] = F4{};
  for (int i = 0; i < kN; ++i) {
    for (int v = 0; v < kVecs; ++v) {
      const F4 ax = abs(xt[i][v]);
      const auto larger = ax > amax[v];
      amax[v] = larger ? ax : amax[v];
      max[v] = larger ? xt[i][v] : max[v];
    }
  }
  constexpr float kLo = -kNmax, kHi = kNmax - 1;
  F4 Lt[kN][kVecs], wt[kN][kVecs], wxt[kN][kVecs];
  F4 sumlx[kVecs], suml2[kVecs];
  for (int v = 0; v < kVecs; ++v) {
    const F4 iscale = static_cast<float>(-kNmax) / max[v];
    sumlx[v] = suml2[v] = F4{};
    for (int i = 0; i < kN; ++i) {
      const F4 xi = xt[i][v];
      const F4 l = rounded_clamped(iscale * xi, kLo, kHi);
      Lt[i][v] = l;
      wt[i][v] = xi * xi;
      wxt[i][v] = wt[i][v] * xi;
      sumlx[v] += wxt[i][v] * l;
      suml2[v] += wt[i][v] * l * l;
    }
  }
  // The first descent pass runs in the lanes: most groups settle in it.
  I4 changed[kVecs];
  for (int v = 0; v < kVecs; ++v) changed[v] = I4{};
  for (int i = 0; i < kN; ++i) {
    for (int v = 0; v < kVecs; ++v) {
      const F4 xi = xt[i][v], w = wt[i][v], wx = wxt[i][v], li = Lt[i][v];
      F4 slx = sumlx[v] - wx * li;
      F4 sl2 = suml2[v] - w * li * li;
      const F4 nl = rounded_clamped(xi * sl2 / slx, kLo, kHi);
      const auto try_it = (slx > 0) & (nl != li);
      slx += wx * nl;
      sl2 += w * nl * nl;
      const I4 accept = try_it & (sl2 > 0) & (slx * slx * suml2[v] > sumlx[v] * sumlx[v] * sl2);
      Lt[i][v] = accept ? nl : li;
      sumlx[v] = accept ? slx : sumlx[v];
      suml2[v] = accept ? sl2 : suml2[v];
      changed[v] |= accept;
    }
  }
  // Groups that moved continue one by one, exactly as ggml's loop would.
  for (int v = 0; v < kVecs; ++v) {
    const auto zero = amax[v] < kGroupMaxEps;
    for (int k = 0; k < 4; ++k) {
      const int g = 4 * v + k;
      int8_t* Lg = L + 16 * g;
      for (int i = 0; i < kN; ++i) Lg[i] = static_cast<int8_t>(Lt[i][v][k]);
      float slx = sumlx[v][k], sl2 = suml2[v][k];
      if (changed[v][k])
        for (int itry = 1; itry < 5; ++itry)
          if (!q3_descent_pass(x + 16 * g, Lg, slx, sl2)) break;
      if (zero[k]) {
        std::memset(Lg, 0, kN);
        scales[g] = 0.0f;
        continue;
      }
      for (int i = 0; i < kN; ++i) Lg[i] = static_cast<int8_t>(Lg[i] + kNmax);
      scales[g] = sl2 > 0.0f ? slx / sl2 : 0.0f;
    }
  }
}

}  // namespace gguf::detail::kq

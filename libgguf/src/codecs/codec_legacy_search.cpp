// Importance-weighted scale searches of the legacy codecs, with ggml's arithmetic: every
// candidate scale's sums run over the block in ggml's order, but candidates are evaluated side
// by side in lanes, which vectorises (ggml tries them one after another).
#include "codecs/codec_legacy_search.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>

namespace gguf::detail::legacy {
namespace {

// ggml's nearest_int: round half to even through the 1.5 * 2^23 trick (meaningful for
// |v| < 2^22, deterministic beyond).
inline int nearest_int(float v) {
  const float t = v + 12582912.0f;
  return static_cast<int>(std::bit_cast<uint32_t>(t) & 0x7FFFFF) - 0x400000;
}

inline int clamp(int v, int lo, int hi) { return std::max(lo, std::min(hi, v)); }

// Symmetric search lanes: 0..17 hold ggml's nudged scales -(nmax + k/10)/max for k = -9..-1,
// 1..9 in that order; lane 18 the plain scale -nmax/max; lane 19 pads to whole vectors (its
// scale 0 is never read).
constexpr int kSymLanes = 20;
constexpr int kNudged = 18;
constexpr int kPlainLane = 18;

// Affine search: ggml tries 37 scales (nmax - 0.9 + 0.05 t)/(max - min), t = 0..36.
constexpr int kAffineTrials = 37;
constexpr int kGroup = 8;  // trials evaluated together

struct AffineGroup {
  float iscale[kGroup], det[kGroup], scale[kGroup], min[kGroup], err[kGroup];
};

// Trials t0..t0+7 of the affine search for the current min (lanes past the last trial are
// computed and ignored).
void evaluate_affine(const float* x, const float* w, int nmax, float max, float min, float sum_w,
                     float sum_x, int t0, AffineGroup& g) {
  for (int k = 0; k < kGroup; ++k)
    g.iscale[k] =
        (-0.9f + 0.05f * static_cast<float>(t0 + k) + static_cast<float>(nmax)) / (max - min);
  float sum_l[kGroup] = {}, sum_l2[kGroup] = {}, sum_xl[kGroup] = {};
  float codes[kQK][kGroup];
  for (int i = 0; i < kQK; ++i) {
    const float xm = x[i] - min;
    for (int k = 0; k < kGroup; ++k) {
      const float l = static_cast<float>(clamp(nearest_int(g.iscale[k] * xm), 0, nmax));
      codes[i][k] = l;
      const float wl = w[i] * l;
      sum_l[k] += wl;
      sum_l2[k] += wl * l;
      sum_xl[k] += wl * x[i];
    }
  }
  for (int k = 0; k < kGroup; ++k) {
    // Least-squares scale and min; a positive min is replaced by 0 and the scale refitted.
    g.det[k] = sum_w * sum_l2[k] - sum_l[k] * sum_l[k];
    const float scale = (sum_w * sum_xl[k] - sum_x * sum_l[k]) / g.det[k];
    const float m = (sum_l2[k] * sum_x - sum_l[k] * sum_xl[k]) / g.det[k];
    g.scale[k] = m > 0.0f ? sum_xl[k] / sum_l2[k] : scale;
    g.min[k] = m > 0.0f ? 0.0f : m;
  }
  float err[kGroup] = {};
  for (int i = 0; i < kQK; ++i) {
    for (int k = 0; k < kGroup; ++k) {
      const float diff = g.scale[k] * codes[i][k] + g.min[k] - x[i];
      err[k] += w[i] * (diff * diff);
    }
  }
  std::copy(err, err + kGroup, g.err);
}

}  // namespace

float search_symmetric(const float* x, const float* w, int nmax, Codes& codes) {
  float amax = 0.0f, max = 0.0f;
  for (int i = 0; i < kQK; ++i) {
    const float ax = std::fabs(x[i]);
    if (ax > amax) {
      amax = ax;
      max = x[i];
    }
  }
  if (amax < 1e-15f) {
    codes.fill(0);
    return 0.0f;
  }
  float iscale[kSymLanes] = {};
  for (int t = 0; t < kNudged; ++t) {
    const int k = t < kNudged / 2 ? t - 9 : t - 8;
    iscale[t] = -(static_cast<float>(nmax) + 0.1f * static_cast<float>(k)) / max;
  }
  iscale[kPlainLane] = static_cast<float>(-nmax) / max;
  float sumlx[kSymLanes] = {}, suml2[kSymLanes] = {};
  for (int i = 0; i < kQK; ++i) {
    const float wx = w[i] * x[i];
    for (int t = 0; t < kSymLanes; ++t) {
      const float l = static_cast<float>(clamp(nearest_int(iscale[t] * x[i]), -nmax, nmax - 1));
      sumlx[t] += wx * l;
      suml2[t] += w[i] * l * l;
    }
  }
  // ggml's order: the plain scale first, then each nudged one that fits better.
  float scale = suml2[kPlainLane] != 0.0f ? sumlx[kPlainLane] / suml2[kPlainLane] : 0.0f;
  float best = scale * sumlx[kPlainLane];
  float best_iscale = iscale[kPlainLane];
  for (int t = 0; t < kNudged; ++t) {
    if (suml2[t] > 0.0f && sumlx[t] * sumlx[t] > best * suml2[t]) {
      scale = sumlx[t] / suml2[t];
      best = scale * sumlx[t];
      best_iscale = iscale[t];
    }
  }
  for (int i = 0; i < kQK; ++i)
    codes[i] = static_cast<uint8_t>(clamp(nearest_int(best_iscale * x[i]), -nmax, nmax - 1) + nmax);
  return scale;
}

float search_affine(const float* x, const float* w, int nmax, Codes& codes, float& neg_min) {
  float min = x[0], max = x[0];
  float sum_w = w[0], sum_x = sum_w * x[0];
  for (int i = 1; i < kQK; ++i) {
    if (x[i] < min) min = x[i];
    if (x[i] > max) max = x[i];
    sum_w += w[i];
    sum_x += w[i] * x[i];
  }
  if (min > 0.0f) min = 0.0f;
  if (max <= min) {
    codes.fill(0);
    neg_min = -min;
    return 0.0f;
  }
  // The block's own range is the starting point.
  float code_iscale = static_cast<float>(nmax) / (max - min), code_min = min;
  float scale = 1.0f / code_iscale;
  float best_err = 0.0f;
  for (int i = 0; i < kQK; ++i) {
    const float l = static_cast<float>(clamp(nearest_int(code_iscale * (x[i] - min)), 0, nmax));
    const float diff = scale * l + min - x[i];
    best_err += w[i] * (diff * diff);
  }
  // A trial that wins moves min, which changes every later trial, so evaluation restarts
  // after each win; wins are few, and trials between them are evaluated eight at a time.
  AffineGroup g;
  for (int t = 0; t < kAffineTrials;) {
    evaluate_affine(x, w, nmax, max, min, sum_w, sum_x, t, g);
    int won = -1;
    for (int k = 0; k < kGroup && t + k < kAffineTrials && won < 0; ++k)
      if (g.det[k] > 0.0f && g.err[k] < best_err) won = k;
    if (won < 0) {
      t += kGroup;
      continue;
    }
    best_err = g.err[won];
    scale = g.scale[won];
    code_iscale = g.iscale[won];
    code_min = min;
    min = g.min[won];
    t += won + 1;
  }
  for (int i = 0; i < kQK; ++i)
    codes[i] = static_cast<uint8_t>(clamp(nearest_int(code_iscale * (x[i] - code_min)), 0, nmax));
  neg_min = -min;
  return scale;
}

}  // namespace gguf::detail::legacy

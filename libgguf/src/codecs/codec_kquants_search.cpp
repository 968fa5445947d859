// The per-group scale searches of the k-quant encoders, written as plainly as ggml's: every
// float expression keeps ggml's operand order and grouping, because that order, not the math,
// decides which codes win. The two hot searches also have a faster form (..._simd.cpp) that
// tests hold equal to these.
#include <algorithm>
#include <cmath>
#include <cstring>

#include "codecs/codec_kquants_common.h"
#include "codecs/codec_simd.h"

namespace gguf::detail::kq {

float search_symmetric_scalar(int n, int nmax, const float* x, const float* w, int8_t* L) {
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
  const auto weight = [&](int i) { return w ? w[i] : x[i] * x[i]; };
  const auto code = [&](float iscale, int i) {
    return std::clamp(nearest_int(iscale * x[i]), -nmax, nmax - 1);
  };
  float iscale = static_cast<float>(-nmax) / max;
  float sumlx = 0, suml2 = 0;
  for (int i = 0; i < n; ++i) {
    const int l = code(iscale, i);
    L[i] = static_cast<int8_t>(l + nmax);
    const float wi = weight(i);
    sumlx += wi * x[i] * static_cast<float>(l);
    suml2 += wi * static_cast<float>(l) * static_cast<float>(l);
  }
  float scale = suml2 != 0 ? sumlx / suml2 : 0.0f;
  float best = scale * sumlx;
  for (int is = -9; is <= 9; ++is) {
    if (is == 0) continue;
    iscale = -(static_cast<float>(nmax) + 0.1f * static_cast<float>(is)) / max;
    sumlx = suml2 = 0;
    for (int i = 0; i < n; ++i) {
      const float l = static_cast<float>(code(iscale, i));
      const float wi = weight(i);
      sumlx += wi * x[i] * l;
      suml2 += wi * l * l;
    }
    if (suml2 > 0 && sumlx * sumlx > best * suml2) {
      for (int i = 0; i < n; ++i) L[i] = static_cast<int8_t>(nmax + code(iscale, i));
      scale = sumlx / suml2;
      best = scale * sumlx;
    }
  }
  return scale;
}

int q3_descent_pass(const float* x, int8_t* L, float& sumlx, float& suml2) {
  constexpr int kNmax = 4;
  int changed = 0;
  for (int i = 0; i < 16; ++i) {
    const float w = x[i] * x[i];
    const float li = static_cast<float>(L[i]);
    float slx = sumlx - w * x[i] * li;
    if (slx > 0) {
      float sl2 = suml2 - w * li * li;
      const int nl = std::clamp(nearest_int(x[i] * sl2 / slx), -kNmax, kNmax - 1);
      if (nl != L[i]) {
        const float fl = static_cast<float>(nl);
        slx += w * x[i] * fl;
        sl2 += w * fl * fl;
        if (sl2 > 0 && slx * slx * suml2 > sumlx * sumlx * sl2) {
          L[i] = static_cast<int8_t>(nl);
          sumlx = slx;
          suml2 = sl2;
          ++changed;
        }
      }
    }
  }
  return changed;
}

float search_q3(const float* x, int8_t* L) {
  constexpr int kN = 16, kNmax = 4;
  float max = 0, amax = 0;
  for (int i = 0; i < kN; ++i) {
    const float ax = std::fabs(x[i]);
    if (ax > amax) {
      amax = ax;
      max = x[i];
    }
  }
  if (amax < kGroupMaxEps) {
    std::memset(L, 0, kN);
    return 0.0f;
  }
  const float iscale = static_cast<float>(-kNmax) / max;
  float sumlx = 0, suml2 = 0;
  for (int i = 0; i < kN; ++i) {
    const int l = std::clamp(nearest_int(iscale * x[i]), -kNmax, kNmax - 1);
    L[i] = static_cast<int8_t>(l);
    const float w = x[i] * x[i];
    sumlx += w * x[i] * static_cast<float>(l);
    suml2 += w * static_cast<float>(l) * static_cast<float>(l);
  }
  for (int itry = 0; itry < 5; ++itry)
    if (!q3_descent_pass(x, L, sumlx, suml2)) break;
  for (int i = 0; i < kN; ++i) L[i] = static_cast<int8_t>(L[i] + kNmax);
  return suml2 > 0.0f ? sumlx / suml2 : 0.0f;
}

float search_affine_scalar(int n, int nmax, const float* x, const float* w, uint8_t* L,
                           float* neg_min, const AffineSearch& p) {
  AffineStart s;
  const bool varied = affine_start(n, nmax, x, w, L, p.use_mad, s);
  if (!varied || p.nstep < 1) {
    *neg_min = -s.min;
    return varied ? s.scale : 0.0f;
  }
  const float max = s.max, sum_w = s.sum_w, sum_x = s.sum_x;
  float min = s.min, scale = s.scale, best_error = s.best_error;
  const auto err = [&](float d) { return p.use_mad ? std::fabs(d) : d * d; };
  uint8_t aux[32];
  for (int is = 0; is <= p.nstep; ++is) {
    // min moves whenever a candidate wins, and later candidates see the new range.
    const float iscale =
        (p.rmin + p.rdelta * static_cast<float>(is) + static_cast<float>(nmax)) / (max - min);
    float sum_l = 0, sum_l2 = 0, sum_xl = 0;
    for (int i = 0; i < n; ++i) {
      const int l = std::clamp(nearest_int(iscale * (x[i] - min)), 0, nmax);
      aux[i] = static_cast<uint8_t>(l);
      const float fl = static_cast<float>(l);
      sum_l += w[i] * fl;
      sum_l2 += w[i] * fl * fl;
      sum_xl += w[i] * fl * x[i];
    }
    const float D = sum_w * sum_l2 - sum_l * sum_l;
    if (D > 0) {
      float this_scale = (sum_w * sum_xl - sum_x * sum_l) / D;
      float this_min = (sum_l2 * sum_x - sum_l * sum_xl) / D;
      if (this_min > 0) {
        this_min = 0;
        this_scale = sum_xl / sum_l2;
      }
      float cur_error = 0;
      for (int i = 0; i < n; ++i) {
        const float diff = this_scale * static_cast<float>(aux[i]) + this_min - x[i];
        cur_error += w[i] * err(diff);
      }
      if (cur_error < best_error) {
        std::memcpy(L, aux, n);
        best_error = cur_error;
        scale = this_scale;
        min = this_min;
      }
    }
  }
  *neg_min = -min;
  return scale;
}

float search_positive(int n, int nmax, const float* x, uint8_t* L, const float* w) {
  float max = 0;
  for (int i = 0; i < n; ++i) max = max > x[i] ? max : x[i];
  if (max < kGroupMaxEps) {
    std::memset(L, 0, n);
    return 0.0f;
  }
  float iscale = static_cast<float>(nmax) / max;
  if (codec_avx512()) {
    iscale = positive_iscale_avx512(n, nmax, x, w, max);
  } else {
    for (int i = 0; i < n; ++i) L[i] = static_cast<uint8_t>(nearest_int(iscale * x[i]));
    float scale = 1 / iscale;
    float best_mse = 0;
    for (int i = 0; i < n; ++i) {
      const float diff = x[i] - scale * static_cast<float>(L[i]);
      best_mse += w[i] * diff * diff;
    }
    for (int is = -4; is <= 4; ++is) {
      if (is == 0) continue;
      const float iscale_is = (0.1f * static_cast<float>(is) + static_cast<float>(nmax)) / max;
      const float scale_is = 1 / iscale_is;
      float mse = 0;
      for (int i = 0; i < n; ++i) {
        const int l = std::min(nmax, nearest_int(iscale_is * x[i]));
        const float diff = x[i] - scale_is * static_cast<float>(l);
        mse += w[i] * diff * diff;
      }
      if (mse < best_mse) {
        best_mse = mse;
        iscale = iscale_is;
      }
    }
  }
  // The sums use the unclamped-below code while L keeps it truncated to a byte, as in ggml.
  float sumlx = 0, suml2 = 0;
  for (int i = 0; i < n; ++i) {
    const int l = std::min(nmax, nearest_int(iscale * x[i]));
    L[i] = static_cast<uint8_t>(l);
    const float fl = static_cast<float>(l);
    sumlx += w[i] * x[i] * fl;
    suml2 += w[i] * fl * fl;
  }
  for (int itry = 0; itry < 5; ++itry) {
    int changed = 0;
    for (int i = 0; i < n; ++i) {
      const float li = static_cast<float>(L[i]);
      float slx = sumlx - w[i] * x[i] * li;
      float sl2 = suml2 - w[i] * li * li;
      if (slx > 0 && sl2 > 0) {
        const int nl = std::min(nmax, nearest_int(x[i] * sl2 / slx));
        if (nl != L[i]) {
          const float fl = static_cast<float>(nl);
          slx += w[i] * x[i] * fl;
          sl2 += w[i] * fl * fl;
          if (slx * slx * suml2 > sumlx * sumlx * sl2) {
            L[i] = static_cast<uint8_t>(nl);
            sumlx = slx;
            suml2 = sl2;
            ++changed;
          }
        }
      }
    }
    if (!changed) break;
  }
  return suml2 > 0.0f ? sumlx / suml2 : 0.0f;
}

}  // namespace gguf::detail::kq

// Internal: the largest magnitude of a block, as ggml's encoders find it (a strict '<' scan that
// skips NaNs and keeps the first of equal magnitudes), in lanes the compiler vectorises. Shared
// by the legacy codecs (blocks of 32) and q8_K (blocks of 256).
#pragma once

#include <cmath>
#include <cstdint>

namespace gguf::detail {

// Partial results per lane: one SSE register for short blocks, four for ILP on long ones.
template <int N>
inline constexpr int kAbsMaxLanes = N >= 128 ? 16 : 4;

// Largest |x| of x[0, N), skipping NaNs; 0 when every element is zero or NaN. The lanes give
// the sequential scan's value: |x| is never -0, so the maximum does not depend on the order.
template <int N>
float abs_max(const float* x) {
  constexpr int kLanes = kAbsMaxLanes<N>;
  static_assert(N % kLanes == 0);
  float lane[kLanes] = {};
  for (int j = 0; j < N; j += kLanes) {
    for (int k = 0; k < kLanes; ++k) {
      const float a = std::fabs(x[j + k]);
      lane[k] = lane[k] < a ? a : lane[k];
    }
  }
  float amax = 0.0f;
  for (const float l : lane) amax = amax < l ? l : amax;
  return amax;
}

// The element of largest magnitude, the first one on ties (ggml scans with a strict <); +0
// when all elements are zero or NaN. Only a block reaching amax with both signs needs the
// scan for the first one.
template <int N>
float signed_absmax(const float* x) {
  constexpr int kLanes = kAbsMaxLanes<N>;
  const float amax = abs_max<N>(x);
  if (amax == 0.0f) return 0.0f;
  int32_t pos[kLanes] = {}, neg[kLanes] = {};
  for (int j = 0; j < N; j += kLanes) {
    for (int k = 0; k < kLanes; ++k) {
      pos[k] |= x[j + k] == amax ? 1 : 0;
      neg[k] |= x[j + k] == -amax ? 1 : 0;
    }
  }
  int32_t any_pos = 0, any_neg = 0;
  for (int k = 0; k < kLanes; ++k) {
    any_pos |= pos[k];
    any_neg |= neg[k];
  }
  if (!any_neg) return amax;
  if (!any_pos) return -amax;
  int j = 0;
  while (std::fabs(x[j]) != amax) ++j;
  return x[j];
}

}  // namespace gguf::detail

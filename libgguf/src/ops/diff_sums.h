// Internal: the sum kernels of the values diff (diff_sums.cpp): sums of squares and products
// of two runs of floats, in double (the reference) or in float (C++, AVX2, AVX-512, the last
// able to decode q4_K itself), and the careful path for non-finite values.
#pragma once

#include <algorithm>
#include <boost/align/aligned_allocator.hpp>
#include <cmath>
#include <cstddef>
#include <vector>

#include "gguf/ops/diff.h"
#include "ops/diff_internal.h"

namespace gguf::detail {

// Slice buffers start on a cache line: the decoders store and the sums load whole 64-byte
// vectors, and with malloc's 16-byte alignment every one of them would straddle two lines
// (the sums ran at 0.6x of their aligned speed, the decoders' stores suffered the same).
using Floats = std::vector<float, boost::alignment::aligned_allocator<float, 64>>;

struct Sums {
  double d2 = 0, b2 = 0, x2 = 0, dot = 0, mx = 0, wd2 = 0, wb2 = 0;  // (the weights': SumsFn)
};

// A kernel sums rows x ne0 pairs; the weights w, when given, hold ne0 values that repeat every
// row (the importance of each column). The sum of the weights is not the kernels' work: the
// caller has the sum of a row's weights.
using SumsFn = Sums (*)(const float*, const float*, size_t rows, size_t ne0, const float*);

// The kernels this CPU can run: the double reference first, then the fast float kernels,
// plainest first; the last is the one used.
const std::vector<SumsFn>& kernels();

// Kernel 0: every product and sum in double.
Sums sums_double(const float* base, const float* x, size_t rows, size_t ne0, const float* w);

// The AVX-512 kernel with either side or both as q4_K blocks it decodes itself (fused_q4_K()).
Sums fused_sums_sides(SumSide base, SumSide x, size_t rows, size_t ne0, const float* w);

// Float squares lose precision below 2^-126 and overflow above 2^128. A chunk is summed in
// double instead when its values are that small (mean square under 2^-100: all-zero rows
// included), their differences are (largest |b - a| under 2^-60), or, with weights, the
// weighted squares are; and when a sum is not finite (see accumulate_with).
bool float_sums_are_exact_enough(const Sums& s, size_t n, bool weighted);

// The float kernels derive the dot product from three sums of squares, whose rounding (under
// 1e-6 of each) cancels badly when the norms differ a lot: B = 1e5 A gave a cosine of 0.99924.
// The cosine's error is at most 1e-6 (|a|^2 + |b|^2 + |b-a|^2) / (2 |a| |b|); when that ratio
// exceeds kDotCancellation the dot product is summed directly, in double, so the error stays
// under 4e-6 (a few 1e-7 typically). Encodings of the same weights (ratio about 2), and even
// unrelated or opposite vectors of similar norms (4 to 6), never pay for it.
constexpr double kDotCancellation = 8;

// The dot product of n pairs, summed in double.
double dot_double(const float* base, const float* x, size_t n);

// The careful path, in double element by element: pairs with a NaN or an infinity are counted
// and left out of the sums so one bad element does not turn every metric into NaN. Taken for
// float chunks whose fast sums are not finite, and for the doubles of tensors whose values
// float cannot hold (f64, i32, i64).
template <typename T>
void accumulate_checked(const T* base, const T* x, size_t n, const float* w, size_t ne0,
                        ErrorMetrics& m) {
  if (w) m.weighted = true;
  for (size_t i = 0; i < n; ++i) {
    const bool fa = std::isfinite(base[i]), fx = std::isfinite(x[i]);
    if (!fa) ++(std::isnan(base[i]) ? m.nan_base : m.inf_base);
    if (!fx) ++(std::isnan(x[i]) ? m.nan_x : m.inf_x);
    if (!fa || !fx) continue;
    const double a = base[i], b = x[i], d = b - a;
    const double wt = w ? w[i % ne0] : 0;
    // Only f64 values reach this (float squares, even weighted, stay far below double's
    // limit); an overflow would make every sum infinite, and a group's pooled ones with them.
    if (!std::isfinite(d * d + a * a + b * b + wt * d * d + wt * a * a)) {
      ++m.too_large;
      continue;
    }
    m.sum_sq_diff += d * d;
    m.sum_sq_base += a * a;
    m.sum_sq_x += b * b;
    m.sum_dot += a * b;
    m.max_abs = std::max(m.max_abs, std::fabs(d));
    ++m.count;
    if (w) {
      m.sum_w += wt;
      m.sum_w_sq_diff += wt * d * d;
      m.sum_w_sq_base += wt * a * a;
    }
  }
}

}  // namespace gguf::detail

// The numeric half of gguf-diff: decode row chunks of two (or three) tensors and pool their
// error sums in double, optionally weighted per column by an importance matrix.
#include <fmt/format.h>
#include <immintrin.h>
#include <tbb/enumerable_thread_specific.h>
#include <tbb/global_control.h>
#include <tbb/parallel_for.h>

#include <algorithm>
#include <array>
#include <boost/align/aligned_allocator.hpp>
#include <cassert>
#include <cmath>
#include <cstring>
#include <initializer_list>
#include <limits>
#include <numeric>
#include <thread>
#include <vector>

#include "codecs/codec_kquants_common.h"
#include "codecs/codec_registry.h"
#include "gguf/base/error.h"
#include "gguf/codecs/codecs.h"
#include "gguf/format/file.h"
#include "gguf/io/source.h"
#include "ops/diff_internal.h"
#include "ops/diff_sums.h"

namespace gguf {

namespace {
constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

// Sums of many finite squares can still overflow (f64 tensors of values near 1e153, or a group
// pooling them): a metric built on an infinite sum is unknown (NaN), never 0, 1 or infinity.
bool finite_sums(std::initializer_list<double> sums) {
  return std::ranges::all_of(sums, [](double v) { return std::isfinite(v); });
}
}  // namespace

double ErrorMetrics::rmse() const {
  return count && finite_sums({sum_sq_diff}) ? std::sqrt(sum_sq_diff / static_cast<double>(count))
                                             : kNaN;
}

// With no finite pair measured (all NaN, or no elements) every metric is unknown, not 0.
double ErrorMetrics::rel() const {
  if (count == 0 || !finite_sums({sum_sq_diff, sum_sq_base})) return kNaN;
  if (sum_sq_base > 0) return std::sqrt(sum_sq_diff / sum_sq_base);
  return sum_sq_diff == 0 ? 0.0 : kNaN;
}

double ErrorMetrics::cosine() const {
  if (!(sum_sq_base > 0 && sum_sq_x > 0) || !finite_sums({sum_sq_base, sum_sq_x, sum_dot}))
    return kNaN;
  // The norms one at a time where their product would overflow or underflow (sums 1e8 and
  // 1e302, or 1e-200 each). Rounding can push |cos| a hair past 1 for parallel vectors.
  const double product = sum_sq_base * sum_sq_x;
  const double norms = std::isfinite(product) && product >= std::numeric_limits<double>::min()
                           ? std::sqrt(product)
                           : std::sqrt(sum_sq_base) * std::sqrt(sum_sq_x);
  return std::clamp(sum_dot / norms, -1.0, 1.0);
}

double ErrorMetrics::snr_db() const {
  if (count == 0 || !finite_sums({sum_sq_diff, sum_sq_base})) return kNaN;
  if (sum_sq_diff == 0) return std::numeric_limits<double>::infinity();
  return 10.0 * std::log10(sum_sq_base / sum_sq_diff);
}

double ErrorMetrics::weighted_rmse() const {
  return weighted && sum_w > 0 && unweighted_tensors == 0 && finite_sums({sum_w, sum_w_sq_diff})
             ? std::sqrt(sum_w_sq_diff / sum_w)
             : kNaN;
}

double ErrorMetrics::max_abs_diff() const { return count ? max_abs : kNaN; }

double ErrorMetrics::weighted_rel() const {
  // All-zero weights say nothing about the error; a group whose weights cover only some of
  // its tensors says nothing about the error of the others.
  if (!weighted || count == 0 || !(sum_w > 0) || unweighted_tensors ||
      !finite_sums({sum_w, sum_w_sq_diff, sum_w_sq_base}))
    return kNaN;
  if (sum_w_sq_base > 0) return std::sqrt(sum_w_sq_diff / sum_w_sq_base);
  return sum_w_sq_diff == 0 ? 0.0 : kNaN;
}

void ErrorMetrics::merge(const ErrorMetrics& o) {
  count += o.count;
  sum_sq_diff += o.sum_sq_diff;
  sum_sq_base += o.sum_sq_base;
  sum_sq_x += o.sum_sq_x;
  sum_dot += o.sum_dot;
  max_abs = std::max(max_abs, o.max_abs);
  nan_base += o.nan_base;
  inf_base += o.inf_base;
  nan_x += o.nan_x;
  inf_x += o.inf_x;
  too_large += o.too_large;
  weighted = weighted || o.weighted;
  sum_w += o.sum_w;
  sum_w_sq_diff += o.sum_w_sq_diff;
  sum_w_sq_base += o.sum_w_sq_base;
  unweighted_tensors += o.unweighted_tensors;
}

void ErrorMetrics::pool(const ErrorMetrics& tensor) {
  merge(tensor);
  if (!tensor.weighted) ++unweighted_tensors;
}

namespace detail {

size_t sum_kernel_count() { return kernels().size(); }

void accumulate(const float* base, const float* x, size_t n, const float* w, ErrorMetrics& m) {
  accumulate_with(kernels().size() - 1, base, x, n, w, m);
}

void accumulate_with(size_t kernel, const float* base, const float* x, size_t n, const float* w,
                     ErrorMetrics& m) {
  double w_sum = 0;
  if (w)
    for (size_t i = 0; i < n; ++i) w_sum += w[i];
  accumulate_rows_with(kernel, base, x, 1, n, w, w_sum, m);
}

void accumulate_rows(const float* base, const float* x, size_t rows, size_t ne0, const float* w,
                     double w_sum, ErrorMetrics& m) {
  accumulate_rows_with(kernels().size() - 1, base, x, rows, ne0, w, w_sum, m);
}

namespace {

// What follows a kernel's sums s of rows x ne0 pairs: chunks whose sums are not finite go to the
// careful path, chunks float cannot sum well enough (fast: s is a float kernel's) to double,
// and the dot product is summed directly where deriving it would cancel. base() and x() give
// the floats of each side for those paths.
template <typename GetBase, typename GetX>
void add_rows(Sums s, bool fast, GetBase base, GetX x, size_t rows, size_t ne0, const float* w,
              double w_sum, ErrorMetrics& m) {
  const size_t n = rows * ne0;
  if (w) m.weighted = true;
  // Squares of non-finite inputs are non-finite (so are float squares and differences that
  // overflow, and weighted squares whose weights are huge: 1e37 x 16 terms of 1), so these sums
  // tell whether the chunk needs the careful path.
  if (!std::isfinite(s.b2 + s.x2 + s.d2 + s.wd2 + s.wb2)) {
    accumulate_checked(base(), x(), n, w, ne0, m);
    return;
  }
  if (fast && !float_sums_are_exact_enough(s, n, w != nullptr))
    s = sums_double(base(), x(), rows, ne0, w);
  else if (fast && s.b2 + s.x2 + s.d2 > kDotCancellation * std::sqrt(s.b2 * s.x2))
    s.dot = dot_double(base(), x(), n);
  m.count += n;
  m.sum_sq_diff += s.d2;
  m.sum_sq_base += s.b2;
  m.sum_sq_x += s.x2;
  m.sum_dot += s.dot;
  m.max_abs = std::max(m.max_abs, s.mx);
  if (w) m.sum_w += static_cast<double>(rows) * w_sum;
  m.sum_w_sq_diff += s.wd2;
  m.sum_w_sq_base += s.wb2;
}

}  // namespace

void accumulate_rows_with(size_t kernel, const float* base, const float* x, size_t rows, size_t ne0,
                          const float* w, double w_sum, ErrorMetrics& m) {
  add_rows(
      kernels().at(kernel)(base, x, rows, ne0, w), kernel != 0, [base] { return base; },
      [x] { return x; }, rows, ne0, w, w_sum, m);
}

void accumulate_rows(SumSide base, SumSide x, size_t rows, size_t ne0, const float* w, double w_sum,
                     ErrorMetrics& m, bool fused) {
  assert(!(base.q4_K || x.q4_K) || ne0 % kq::kQK == 0);
  const size_t n = rows * ne0;
  // A side's floats: as given, or its blocks decoded (for the careful and double paths, and
  // where the kernel cannot decode them itself).
  const auto floats = [n](SumSide side, Floats& buf) {
    if (!side.q4_K) return side.floats;
    buf.resize(n);
    decoder(GgmlType::Q4_K)(side.q4_K, buf.data(), static_cast<int64_t>(n));
    return static_cast<const float*>(buf.data());
  };
  thread_local Floats decoded_base, decoded_x;
  if (!fused || !fused_q4_K()) {
    accumulate_rows_with(kernels().size() - 1, floats(base, decoded_base), floats(x, decoded_x),
                         rows, ne0, w, w_sum, m);
  } else {
    add_rows(
        fused_sums_sides(base, x, rows, ne0, w), true, [&] { return floats(base, decoded_base); },
        [&] { return floats(x, decoded_x); }, rows, ne0, w, w_sum, m);
  }
  // A slice of one long row can need a few MiB here; the values diff's own buffers are freed
  // when it returns, these only when their thread ends.
  for (Floats* buf : {&decoded_base, &decoded_x})
    if (buf->capacity() > (size_t{1} << 18)) Floats().swap(*buf);
}

}  // namespace detail
}  // namespace gguf

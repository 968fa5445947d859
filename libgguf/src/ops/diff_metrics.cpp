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
namespace {

// Slice buffers start on a cache line: the decoders store and the sums load whole 64-byte
// vectors, and with malloc's 16-byte alignment every one of them would straddle two lines
// (the sums ran at 0.6x of their aligned speed, the decoders' stores suffered the same).
using Floats = std::vector<float, boost::alignment::aligned_allocator<float, 64>>;

struct Sums {
  double d2 = 0, b2 = 0, x2 = 0, dot = 0, mx = 0, wd2 = 0, wb2 = 0;  // (the weights': SumsFn)
};

// The reference kernel: every product and sum in double. Independent lanes let the compiler
// keep several vector accumulators without reassociating (no -ffast-math).
template <bool kWeighted, size_t kLanes>
__attribute__((always_inline)) inline Sums double_sums(const float* base, const float* x, size_t n,
                                                       const float* w) {
  double d2[kLanes] = {}, b2[kLanes] = {}, x2[kLanes] = {}, mx[kLanes] = {}, dot[kLanes] = {};
  double wd2[kLanes] = {}, wb2[kLanes] = {};
  size_t i = 0;
  for (; i + kLanes <= n; i += kLanes) {
    for (size_t j = 0; j < kLanes; ++j) {
      const double a = base[i + j], b = x[i + j], d = b - a, ad = std::fabs(d);
      d2[j] += d * d;
      b2[j] += a * a;
      x2[j] += b * b;
      dot[j] += a * b;
      mx[j] = ad > mx[j] ? ad : mx[j];
      if constexpr (kWeighted) {
        const double wt = w[i + j];
        wd2[j] += wt * d * d;
        wb2[j] += wt * a * a;
      }
    }
  }
  Sums s;
  for (size_t j = 0; j < kLanes; ++j) {
    s.d2 += d2[j];
    s.b2 += b2[j];
    s.x2 += x2[j];
    s.dot += dot[j];
    s.mx = std::max(s.mx, mx[j]);
    s.wd2 += wd2[j];
    s.wb2 += wb2[j];
  }
  for (; i < n; ++i) {
    const double a = base[i], b = x[i], d = b - a;
    s.d2 += d * d;
    s.b2 += a * a;
    s.x2 += b * b;
    s.dot += a * b;
    s.mx = std::max(s.mx, std::fabs(d));
    if constexpr (kWeighted) {
      s.wd2 += w[i] * d * d;
      s.wb2 += w[i] * a * a;
    }
  }
  return s;
}

// The end of a float kernel: elements i..n (less than a block) summed in double, and the
// dot product derived from the sums of squares.
// Inlined: called from AVX-512 code, a separate SSE function costs a state transition per
// call (6 % of the time of --values).
template <bool kWeighted>
__attribute__((always_inline)) inline Sums finish_float_sums(Sums s, const float* base,
                                                             const float* x, size_t i, size_t n,
                                                             const float* w) {
  if (i < n) {
    const Sums t = double_sums<kWeighted, 1>(base + i, x + i, n - i, w ? w + i : nullptr);
    s.d2 += t.d2;
    s.b2 += t.b2;
    s.x2 += t.x2;
    s.mx = std::max(s.mx, t.mx);
    s.wd2 += t.wd2;
    s.wb2 += t.wb2;
  }
  s.dot = (s.b2 + s.x2 - s.d2) / 2;
  return s;
}

// The fast kernel, which keeps --values close to the speed of decoding: products and short
// sums in float (twice the lanes of double, no conversions), each lane's float partial added
// into a double accumulator every 16 terms, so the rounding error stays near that of 16
// float additions (about 1e-6 relative at worst, a few 1e-7 typically) whatever the size.
// The dot product is not summed: it follows from the others, (|a|^2 + |b|^2 - |b-a|^2) / 2.
// Chunks where float squares would underflow or overflow go to double_sums (see below).
template <bool kWeighted, size_t kLanes>
__attribute__((always_inline)) inline Sums float_sums(const float* base, const float* x, size_t n,
                                                      const float* w) {
  constexpr size_t kTerms = 16;  // per lane between flushes into double
  constexpr size_t kBlock = kLanes * kTerms;
  double D2[kLanes] = {}, B2[kLanes] = {}, X2[kLanes] = {};
  double WD2[kLanes] = {}, WB2[kLanes] = {};
  float mx[kLanes] = {};
  size_t i = 0;
  for (; i + kBlock <= n; i += kBlock) {
    float d2[kLanes] = {}, b2[kLanes] = {}, x2[kLanes] = {};
    float wd2[kLanes] = {}, wb2[kLanes] = {};
    for (size_t k = 0; k < kBlock; k += kLanes) {
      for (size_t j = 0; j < kLanes; ++j) {
        const float a = base[i + k + j], b = x[i + k + j], d = b - a, ad = std::fabs(d);
        d2[j] += d * d;
        b2[j] += a * a;
        x2[j] += b * b;
        mx[j] = ad > mx[j] ? ad : mx[j];
        if constexpr (kWeighted) {
          const float wt = w[i + k + j], wdd = wt * d, wa = wt * a;
          wd2[j] += wdd * d;
          wb2[j] += wa * a;
        }
      }
    }
    for (size_t j = 0; j < kLanes; ++j) {
      D2[j] += d2[j];
      B2[j] += b2[j];
      X2[j] += x2[j];
      if constexpr (kWeighted) {
        WD2[j] += wd2[j];
        WB2[j] += wb2[j];
      }
    }
  }
  Sums s;
  for (size_t j = 0; j < kLanes; ++j) {
    s.d2 += D2[j];
    s.b2 += B2[j];
    s.x2 += X2[j];
    s.mx = std::max(s.mx, static_cast<double>(mx[j]));
    s.wd2 += WD2[j];
    s.wb2 += WB2[j];
  }
  return finish_float_sums<kWeighted>(s, base, x, i, n, w);
}

// Float squares lose precision below 2^-126 and overflow above 2^128. A chunk is summed in
// double instead when its values are that small (mean square under 2^-100: all-zero rows
// included), their differences are (largest |b - a| under 2^-60), or, with weights, the
// weighted squares are; and when a sum is not finite (see accumulate_with).
bool float_sums_are_exact_enough(const Sums& s, size_t n, bool weighted) {
  const double tiny = static_cast<double>(n) * 0x1p-100;
  if (!(s.b2 >= tiny && s.x2 >= tiny)) return false;
  if (s.mx != 0 && (s.mx < 0x1p-60 || (weighted && s.wd2 < tiny))) return false;
  return !weighted || s.wb2 >= tiny;
}

// The float kernels derive the dot product from three sums of squares, whose rounding (under
// 1e-6 of each) cancels badly when the norms differ a lot: B = 1e5 A gave a cosine of 0.99924.
// The cosine's error is at most 1e-6 (|a|^2 + |b|^2 + |b-a|^2) / (2 |a| |b|); when that ratio
// exceeds kDotCancellation the dot product is summed directly, in double, so the error stays
// under 4e-6 (a few 1e-7 typically). Encodings of the same weights (ratio about 2), and even
// unrelated or opposite vectors of similar norms (4 to 6), never pay for it.
constexpr double kDotCancellation = 8;

double dot_double(const float* base, const float* x, size_t n) {
  constexpr size_t kLanes = 8;
  double acc[kLanes] = {};
  size_t i = 0;
  for (; i + kLanes <= n; i += kLanes)
    for (size_t j = 0; j < kLanes; ++j)
      acc[j] += static_cast<double>(base[i + j]) * static_cast<double>(x[i + j]);
  double s = 0;
  for (double a : acc) s += a;
  for (; i < n; ++i) s += static_cast<double>(base[i]) * static_cast<double>(x[i]);
  return s;
}

// A kernel sums rows x ne0 pairs; the weights w, when given, hold ne0 values that repeat every
// row (the importance of each column). The sum of the weights is not the kernels' work: the
// caller has the sum of a row's weights.
using SumsFn = Sums (*)(const float*, const float*, size_t rows, size_t ne0, const float*);

void add_sums(Sums& s, const Sums& t) {
  s.d2 += t.d2;
  s.b2 += t.b2;
  s.x2 += t.x2;
  s.dot += t.dot;
  s.mx = std::max(s.mx, t.mx);
  s.wd2 += t.wd2;
  s.wb2 += t.wb2;
}

// A kernel of one run of pairs, applied to every row in turn when there are weights.
template <Sums (*kRun)(const float*, const float*, size_t, const float*)>
Sums row_by_row(const float* base, const float* x, size_t rows, size_t ne0, const float* w) {
  if (!w) return kRun(base, x, rows * ne0, nullptr);
  Sums s;
  for (size_t r = 0; r < rows; ++r) add_sums(s, kRun(base + r * ne0, x + r * ne0, ne0, w));
  return s;
}

Sums run_double(const float* base, const float* x, size_t n, const float* w) {
  return w ? double_sums<true, 8>(base, x, n, w) : double_sums<false, 8>(base, x, n, nullptr);
}
constexpr SumsFn sums_double = row_by_row<run_double>;

// AVX-512 by hand: the compiler's version of float_sums spills its accumulators. Four zmm
// per sum give enough independent FMA chains to hide their latency; VRANGEPS takes the
// larger magnitude in one instruction. Same arithmetic as float_sums: 16 float terms per
// lane, the four registers of a sum added pairwise, then widened into double.
// Every function that touches a zmm register carries the target (GCC and clang alike).
#define GGUF_AVX512 __attribute__((target("avx512f,avx512dq,avx512vl,avx2,fma")))
// GCC 12's own avx512fintrin.h trips its uninitialized-use warnings (_mm512_undefined_* as
// the unused merge source of cvtps_pd, max_ps and the reductions).
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif

// Adds the 16 floats of f, widened, into the double vectors into[0] (low) and into[1].
GGUF_AVX512 inline void widen_into(__m512 f, __m512d* into) {
  into[0] = _mm512_add_pd(into[0], _mm512_cvtps_pd(_mm512_castps512_ps256(f)));
  into[1] = _mm512_add_pd(into[1], _mm512_cvtps_pd(_mm512_extractf32x8_ps(f, 1)));
}

// The four registers of one sum, added pairwise.
GGUF_AVX512 inline __m512 fold4(const __m512* v) {
  return _mm512_add_ps(_mm512_add_ps(v[0], v[1]), _mm512_add_ps(v[2], v[3]));
}

// Horizontal sums once per call, as a tree (a chain of 16 scalar additions per sum cost as
// much as the kernel itself on a 4K-element slice).
GGUF_AVX512 inline double total(const __m512d* v) {
  return _mm512_reduce_add_pd(_mm512_add_pd(v[0], v[1]));
}

// Where the AVX-512 kernel gets each side (base and x): from floats (a decoded slice), or from
// q4_K blocks it decodes itself (FusedQ4K below). step(k) comes before the four vectors of each
// 64-element step k of a run (k from its start), load(k, u) gives elements [k + 16u, k + 16u +
// 16), and floats(i, n, scratch) gives [i, n) as floats for the double-summed rest (less than
// a block).
struct FromFloats {
  const float* x;
  GGUF_AVX512 void step(size_t) const {}
  GGUF_AVX512 __m512 load(size_t k, size_t u) const {
    __m512 v = _mm512_loadu_ps(x + k + u * 16);
    // Loaded once: left to itself, GCC 12 loads each vector twice (into a register, and again
    // as the memory operand of the subtraction), and the loads then bound the loop (25
    // against 20 G pairs/s on a Zen 5).
    asm("" : "+v"(v));
    return v;
  }
  const float* floats(size_t i, size_t, float*) const { return x + i; }
};

// Without weights: three sums, an FMA each. With weights (starting again every ne0 elements, a
// multiple of the 64 elements of a step unless n == ne0, so a step never straddles two rows),
// whole runs of rows at once: no horizontal sums and checks per row, and no sum of the weights,
// which the caller has. The squares are then formed once and added both plainly and weighted,
// which moves two of the products onto the adders: 9 vector operations per 16 pairs instead of
// the 10 of weighting each product, 5 of them products instead of 8.
template <bool kWeighted, typename A, typename X>
GGUF_AVX512 Sums avx512_sums(const A& as, const X& xs, size_t n, size_t ne0, const float* w) {
  constexpr size_t kVec = 16, kUnroll = 4, kStep = kVec * kUnroll, kBlock = kStep * 16;
  constexpr size_t kSums = kWeighted ? 5 : 3;
  // |b-a|^2, |a|^2, |b|^2 (then w|b-a|^2, w|a|^2), each widened in two halves
  __m512d D[kSums][2];
  for (auto& d : D) d[0] = d[1] = _mm512_setzero_pd();
  __m512 mx[kUnroll];
  for (auto& m : mx) m = _mm512_setzero_ps();
  size_t i = 0, wi = 0;  // wi: i's column
  for (; i + kBlock <= n; i += kBlock) {
    __m512 f[kSums][kUnroll];  // the float sums of this block
    for (auto& sum : f)
      for (auto& v : sum) v = _mm512_setzero_ps();
    for (size_t k = i; k < i + kBlock; k += kStep) {
      as.step(k);
      xs.step(k);
      for (size_t u = 0; u < kUnroll; ++u) {
        const __m512 a = as.load(k, u), b = xs.load(k, u);
        const __m512 d = _mm512_sub_ps(b, a);
        if constexpr (kWeighted) {
          __m512 wt = _mm512_loadu_ps(w + wi + u * kVec);
          asm("" : "+v"(wt));
          const __m512 dd = _mm512_mul_ps(d, d), aa = _mm512_mul_ps(a, a);
          f[0][u] = _mm512_add_ps(f[0][u], dd);
          f[1][u] = _mm512_add_ps(f[1][u], aa);
          f[3][u] = _mm512_fmadd_ps(wt, dd, f[3][u]);
          f[4][u] = _mm512_fmadd_ps(wt, aa, f[4][u]);
        } else {
          f[0][u] = _mm512_fmadd_ps(d, d, f[0][u]);
          f[1][u] = _mm512_fmadd_ps(a, a, f[1][u]);
        }
        f[2][u] = _mm512_fmadd_ps(b, b, f[2][u]);
        mx[u] = _mm512_range_ps(mx[u], d, 0x0B);  // max |.|, sign cleared
      }
      if constexpr (kWeighted) {
        wi += kStep;
        if (wi == ne0) wi = 0;
      }
    }
    for (size_t k = 0; k < kSums; ++k) widen_into(fold4(f[k]), D[k]);
  }
  Sums s;
  s.d2 = total(D[0]);
  s.b2 = total(D[1]);
  s.x2 = total(D[2]);
  if constexpr (kWeighted) {
    s.wd2 = total(D[3]);
    s.wb2 = total(D[4]);
  }
  s.mx =
      _mm512_reduce_max_ps(_mm512_max_ps(_mm512_max_ps(mx[0], mx[1]), _mm512_max_ps(mx[2], mx[3])));
  // The rest (less than a block) in double, a piece of a row at a time.
  if constexpr (!kWeighted) wi = i;
  alignas(64) float scratch_a[kBlock], scratch_x[kBlock];
  const size_t rest = i;  // base and x hold elements [rest, n)
  const float* base = i < n ? as.floats(i, n, scratch_a) : nullptr;
  const float* x = i < n ? xs.floats(i, n, scratch_x) : nullptr;
  while (i < n) {
    const size_t len = std::min(n - i, ne0 - wi);
    add_sums(s, double_sums<kWeighted, 1>(base + (i - rest), x + (i - rest), len,
                                          kWeighted ? w + wi : nullptr));
    i += len;
    wi = 0;
  }
  s.dot = (s.b2 + s.x2 - s.d2) / 2;
  return s;
}

GGUF_AVX512 Sums sums_avx512(const float* base, const float* x, size_t rows, size_t ne0,
                             const float* w) {
  const size_t n = rows * ne0;
  if (!w) return avx512_sums<false>(FromFloats{base}, FromFloats{x}, n, n, nullptr);
  if (rows == 1 || ne0 % 64 == 0)
    return avx512_sums<true>(FromFloats{base}, FromFloats{x}, n, ne0, w);
  Sums s;
  for (size_t r = 0; r < rows; ++r)
    add_sums(s,
             avx512_sums<true>(FromFloats{base + r * ne0}, FromFloats{x + r * ne0}, ne0, ne0, w));
  return s;
}

// A side as q4_K super-blocks, decoded in registers as the kernel goes: per 64-element step (one
// of the four 32-byte quarters of a block's quants: low nibbles for group 2p, high nibbles for
// 2p + 1), the 16 values each group's codes stand for are computed with the same multiply and
// subtract as decode_q4_K's (contracted or not: d has 11 significant bits, sc 6 and q 4, so
// d * sc * q is exact in float), and each vector is a permute of them. The sums are thus bit
// for bit those of decoding first, without storing and loading the side's floats, without its
// decoder call per slice, and with a permute in place of a conversion, a multiply and a
// subtract per vector.
struct FusedQ4K {
  static constexpr size_t kBlockBytes = sizeof(kq::BlockQ4_K);
  const uint8_t* src = nullptr;
  // The current block's eight group scales d * sc and mins dmin * m, and the current
  // quarter's quants and its two groups' values of every code (lo[q] = d1 * q - m1 for the low
  // nibbles, hi for the high ones): each vector is then one permute of a table.
  mutable float scale[8] = {}, min[8] = {};
  mutable __m256i qs = {};
  mutable __m512 lo = {}, hi = {};

  GGUF_AVX512 void step(size_t k) const {
    const uint8_t* b = src + k / kq::kQK * kBlockBytes;
    const int p = static_cast<int>(k % kq::kQK / 64);
    if (p == 0) {
      uint16_t dh, mh;
      std::memcpy(&dh, b + offsetof(kq::BlockQ4_K, d), 2);
      std::memcpy(&mh, b + offsetof(kq::BlockQ4_K, dmin), 2);
      const float d = fp16_to_fp32(dh), dmin = fp16_to_fp32(mh);
      for (int j = 0; j < 8; ++j) {
        uint8_t sc, m;
        kq::unpack_scale_min(j, b + offsetof(kq::BlockQ4_K, scales), sc, m);
        scale[j] = d * static_cast<float>(sc);
        min[j] = dmin * static_cast<float>(m);
      }
    }
    const __m512 codes = _mm512_setr_ps(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
    lo = _mm512_sub_ps(_mm512_mul_ps(_mm512_set1_ps(scale[2 * p]), codes),
                       _mm512_set1_ps(min[2 * p]));
    hi = _mm512_sub_ps(_mm512_mul_ps(_mm512_set1_ps(scale[2 * p + 1]), codes),
                       _mm512_set1_ps(min[2 * p + 1]));
    qs = _mm256_loadu_si256(
        reinterpret_cast<const __m256i*>(b + offsetof(kq::BlockQ4_K, qs) + 32 * p));
  }
  GGUF_AVX512 __m512 load(size_t, size_t u) const {
    const __m128i bytes = u % 2 ? _mm256_extracti128_si256(qs, 1) : _mm256_castsi256_si128(qs);
    const __m512i wide = _mm512_cvtepu8_epi32(bytes);
    // The permute reads the low 4 bits of each lane: the low nibble as it is.
    return u < 2 ? _mm512_permutexvar_ps(wide, lo)
                 : _mm512_permutexvar_ps(_mm512_srli_epi32(wide, 4), hi);
  }
  const float* floats(size_t i, size_t n, float* scratch) const {
    decoder(GgmlType::Q4_K)(src + i / kq::kQK * kBlockBytes, scratch, static_cast<int64_t>(n - i));
    return scratch;
  }
};

// rows x ne0 pairs (ne0 a multiple of q4_K's 256) with either side or both as q4_K blocks.
template <typename A, typename X>
GGUF_AVX512 Sums fused_sums(const A& as, const X& xs, size_t rows, size_t ne0, const float* w) {
  const size_t n = rows * ne0;
  return w ? avx512_sums<true>(as, xs, n, ne0, w) : avx512_sums<false>(as, xs, n, n, nullptr);
}

GGUF_AVX512 Sums sums_avx512_sides(SumSide a, SumSide x, size_t rows, size_t ne0, const float* w) {
  if (a.q4_K && x.q4_K) return fused_sums(FusedQ4K{a.q4_K}, FusedQ4K{x.q4_K}, rows, ne0, w);
  if (a.q4_K) return fused_sums(FusedQ4K{a.q4_K}, FromFloats{x.floats}, rows, ne0, w);
  if (x.q4_K) return fused_sums(FromFloats{a.floats}, FusedQ4K{x.q4_K}, rows, ne0, w);
  return sums_avx512(a.floats, x.floats, rows, ne0, w);
}
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic pop
#endif
#undef GGUF_AVX512

__attribute__((target("avx2,fma"))) Sums run_avx2(const float* base, const float* x, size_t n,
                                                  const float* w) {
  return w ? float_sums<true, 32>(base, x, n, w) : float_sums<false, 32>(base, x, n, nullptr);
}
constexpr SumsFn sums_avx2 = row_by_row<run_avx2>;

Sums run_float(const float* base, const float* x, size_t n, const float* w) {
  return w ? float_sums<true, 16>(base, x, n, w) : float_sums<false, 16>(base, x, n, nullptr);
}
constexpr SumsFn sums_float = row_by_row<run_float>;

// The kernels this CPU can run: the double reference first, then the fast float kernels,
// plainest first; the last is the one used.
std::vector<SumsFn> usable_sums() {
  std::vector<SumsFn> out = {sums_double, sums_float};
  __builtin_cpu_init();
  if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) out.push_back(sums_avx2);
  if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512dq") &&
      __builtin_cpu_supports("avx512vl"))
    out.push_back(sums_avx512);
  return out;
}

const std::vector<SumsFn>& kernels() {
  static const std::vector<SumsFn> k = usable_sums();
  return k;
}

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

}  // namespace

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

bool fused_q4_K() { return kernels().back() == sums_avx512; }

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
        sums_avx512_sides(base, x, rows, ne0, w), true, [&] { return floats(base, decoded_base); },
        [&] { return floats(x, decoded_x); }, rows, ne0, w, w_sum, m);
  }
  // A slice of one long row can need a few MiB here; the values diff's own buffers are freed
  // when it returns, these only when their thread ends.
  for (Floats* buf : {&decoded_base, &decoded_x})
    if (buf->capacity() > (size_t{1} << 18)) Floats().swap(*buf);
}

namespace {

// A work item covers about 1M elements (enough to amortise scheduling); within it, rows are
// decoded and measured in slices of about 4K elements (at least a row), so that the decoded
// floats of both sides are still in L1 when the sums read them (the sums are bound by cache
// bandwidth from L2). A row longer than an item is cut into items of whole blocks of every
// side's type, measured in slices of whole blocks. Memory: threads x 3 slice buffers.
constexpr uint64_t kChunkElements = uint64_t{1} << 20;
constexpr uint64_t kSliceElements = uint64_t{1} << 12;

struct Item {
  size_t job;
  uint64_t row0, rows;
  uint64_t col0 = 0, cols = 0;  // a piece of one row (rows == 1), or cols == 0: whole rows
};

struct Geometry {
  uint64_t ne0 = 1, ne1 = 1, nrows = 0;
};

Geometry geometry(const TensorInfo& t) {
  Geometry g;
  g.ne0 = t.shape.empty() ? 1 : static_cast<uint64_t>(t.shape[0]);
  g.ne1 = t.shape.size() > 1 ? static_cast<uint64_t>(t.shape[1]) : 1;
  g.nrows = g.ne0 ? t.n_elements / g.ne0 : 0;
  return g;
}

struct Buffers {
  Floats a, b, ref;
  std::vector<double> wide_a, wide_b, wide_ref;  // the double path (see wide_values)
  std::vector<uint8_t> raw[3];  // an item's payload bytes of each side, read (see stream())
};

// The decoder of a tensor and its row size, found once per tensor; decode_at then calls the
// decoder directly. The reader validated the payload sizes, and measure() only makes jobs of
// types that have a decoder.
struct Source {
  const TensorRef* t = nullptr;
  GgmlType type = GgmlType::F32;
  DecodeFn decode = nullptr;
  uint64_t row_bytes = 0;
  uint64_t block_size = 1, type_size = 0;

  // Where element `col` of row `row` starts (col a multiple of the block size).
  uint64_t offset(uint64_t row, uint64_t col) const {
    return row * row_bytes + col / block_size * type_size;
  }
  // The payload bytes [from, to), read into scratch (or in place from memory).
  const uint8_t* fetch(uint64_t from, uint64_t to, std::vector<uint8_t>& scratch) const {
    return t->file->source().stream(t->data_start() + from, to - from, scratch).data();
  }
};

Source source_of(const TensorRef* t, uint64_t ne0) {
  if (!t) return {};
  const auto type = static_cast<GgmlType>(t->info->type_id);
  const TypeTraits& tr = traits(type);
  return {t, type, decoder(type), row_bytes(type, ne0).value_or(0), tr.block_size, tr.type_size};
}

// f64, i32 and i64 hold values that float cannot (beyond its range, or differing below its
// precision): a job with such a side is measured in double, element by element.
bool wide_values(const std::array<Source, 3>& src) {
  for (const Source& s : src)
    if (s.t && (s.type == GgmlType::F64 || s.type == GgmlType::I32 || s.type == GgmlType::I64))
      return true;
  return false;
}

// Decodes n elements from p (whole blocks) into doubles: f64, i32 and i64 exactly (i64 as
// doubles do, exact up to 2^53), any other type through its float decoder into tmp.
void decode_wide(const Source& s, const uint8_t* p, uint64_t n, std::vector<double>& out,
                 Floats& tmp) {
  out.resize(n);
  const auto widen = [&]<typename T>(T) {
    for (uint64_t i = 0; i < n; ++i) {
      T v;
      std::memcpy(&v, p + i * sizeof(T), sizeof(T));
      out[i] = static_cast<double>(v);
    }
  };
  switch (s.type) {
    case GgmlType::F64:
      widen(double{});
      break;
    case GgmlType::I32:
      widen(int32_t{});
      break;
    case GgmlType::I64:
      widen(int64_t{});
      break;
    default:
      tmp.resize(n);
      s.decode(p, tmp.data(), static_cast<int64_t>(n));
      std::copy(tmp.begin(), tmp.end(), out.begin());
  }
}

// The least number of elements that is whole blocks of every side's type.
uint64_t common_block(const std::array<Source, 3>& src) {
  uint64_t unit = 1;
  for (const Source& s : src)
    if (s.t) unit = std::lcm(unit, s.block_size);
  return unit;
}

// Decodes n elements (whole blocks) from p into out.
void decode_at(const Source& s, const uint8_t* p, uint64_t n, Floats& out) {
  out.resize(n);
  s.decode(p, out.data(), static_cast<int64_t>(n));
}

// The sum of each slice of a job's weights (one per expert matrix, or one), for Sums::w.
std::vector<double> slice_sums(const ValueJob& job, uint64_t ne0) {
  std::vector<double> out;
  if (job.weights.empty() || ne0 == 0) return out;
  out.resize(job.weights.size() / ne0);
  for (size_t s = 0; s < out.size(); ++s)
    for (uint64_t c = 0; c < ne0; ++c) out[s] += job.weights[s * ne0 + c];
  return out;
}

// Calls run(r, n, slice) for the runs of rows [row0 + r, row0 + r + n) that share one slice of
// the job's importance weights (the rows of one expert matrix, or all rows for one slice).
template <typename Run>
void weight_runs(const ValueJob& job, const Geometry& g, uint64_t row0, uint64_t rows, Run run) {
  const uint64_t slices = job.weights.size() / g.ne0;
  for (uint64_t r = 0; r < rows;) {
    const uint64_t slice = slices == 1 ? 0 : (row0 + r) / g.ne1;
    const uint64_t n = slices == 1 ? rows - r : std::min(rows - r, (slice + 1) * g.ne1 - row0 - r);
    run(r, n, slice);
    r += n;
  }
}

// One side of a comparison in a slice: its decoded floats, or its q4_K rows (row_bytes
// apart) for the sum kernel to decode (see FusedQ4K).
struct SliceSide {
  const Floats* floats = nullptr;
  const uint8_t* q4_K = nullptr;
  uint64_t row_bytes = 0;

  SumSide at_row(uint64_t r, uint64_t ne0) const {
    return q4_K ? SumSide{nullptr, q4_K + r * row_bytes}
                : SumSide{floats->data() + r * ne0, nullptr};
  }
};

// Adds x against base for the slice's rows [row0, row0 + rows) to m, weighted when the job has
// weights (in runs of rows that share a slice of them).
void accumulate_rows(const SliceSide& base, const SliceSide& x, const ValueJob& job,
                     const std::vector<double>& w_sums, const Geometry& g, uint64_t row0,
                     uint64_t rows, ErrorMetrics& m) {
  if (job.weights.empty()) {
    detail::accumulate_rows(base.at_row(0, g.ne0), x.at_row(0, g.ne0), 1, rows * g.ne0, nullptr, 0,
                            m);
    return;
  }
  weight_runs(job, g, row0, rows, [&](uint64_t r, uint64_t n, uint64_t slice) {
    detail::accumulate_rows(base.at_row(r, g.ne0), x.at_row(r, g.ne0), n, g.ne0,
                            job.weights.data() + slice * g.ne0, w_sums[slice], m);
  });
}

// The double path of whole rows.
void accumulate_rows(const std::vector<double>& base, const std::vector<double>& x,
                     const ValueJob& job, const Geometry& g, uint64_t row0, uint64_t rows,
                     ErrorMetrics& m) {
  if (job.weights.empty()) {
    accumulate_checked(base.data(), x.data(), base.size(), nullptr, 1, m);
    return;
  }
  weight_runs(job, g, row0, rows, [&](uint64_t r, uint64_t n, uint64_t slice) {
    accumulate_checked(base.data() + r * g.ne0, x.data() + r * g.ne0, n * g.ne0,
                       job.weights.data() + slice * g.ne0, g.ne0, m);
  });
}

// A piece of one row (Item::cols > 0), in slices of whole blocks of every side; the weights
// are the row's slice of the job's, from the piece's first column.
void measure_piece(const Item& it, const ValueJob& job, const Geometry& g,
                   const std::array<Source, 3>& src, Buffers& buf,
                   std::array<ErrorMetrics, 3>& sums) {
  const uint64_t unit = common_block(src);
  const uint64_t step = std::max(unit, kSliceElements / unit * unit);
  const float* w = nullptr;
  if (!job.weights.empty()) {
    const uint64_t slices = job.weights.size() / g.ne0;
    w = job.weights.data() + (slices == 1 ? 0 : it.row0 / g.ne1) * g.ne0;
  }
  // The piece's bytes of each side, read once; `at` finds column c in them.
  const uint8_t* raw[3] = {};
  for (size_t side = 0; side < 3; ++side)
    if (const Source& x = src[side]; x.t)
      raw[side] =
          x.fetch(x.offset(it.row0, it.col0), x.offset(it.row0, it.col0 + it.cols), buf.raw[side]);
  const auto at = [&](size_t side, uint64_t c) {
    return raw[side] + (src[side].offset(it.row0, c) - src[side].offset(it.row0, it.col0));
  };
  const bool wide = wide_values(src);
  for (uint64_t c = it.col0; c < it.col0 + it.cols; c += step) {
    const uint64_t n = std::min(step, it.col0 + it.cols - c);
    const float* wc = w ? w + c : nullptr;
    if (wide) {
      decode_wide(src[0], at(0, c), n, buf.wide_a, buf.a);
      decode_wide(src[1], at(1, c), n, buf.wide_b, buf.a);
      if (job.measure_ab)
        accumulate_checked(buf.wide_a.data(), buf.wide_b.data(), n, wc, n, sums[0]);
      if (job.ref) {
        decode_wide(src[2], at(2, c), n, buf.wide_ref, buf.a);
        accumulate_checked(buf.wide_ref.data(), buf.wide_a.data(), n, wc, n, sums[1]);
        accumulate_checked(buf.wide_ref.data(), buf.wide_b.data(), n, wc, n, sums[2]);
      }
      continue;
    }
    decode_at(src[0], at(0, c), n, buf.a);
    decode_at(src[1], at(1, c), n, buf.b);
    if (job.measure_ab) accumulate(buf.a.data(), buf.b.data(), n, wc, sums[0]);
    if (job.ref) {
      decode_at(src[2], at(2, c), n, buf.ref);
      accumulate(buf.ref.data(), buf.a.data(), n, wc, sums[1]);
      accumulate(buf.ref.data(), buf.b.data(), n, wc, sums[2]);
    }
  }
}

}  // namespace

std::vector<ValueResult> measure_values(const std::vector<ValueJob>& jobs, unsigned threads,
                                        const std::function<void(uint64_t, uint64_t)>& progress) {
  std::vector<Item> items;
  std::vector<Geometry> geo(jobs.size());
  std::vector<std::array<Source, 3>> src(jobs.size());  // a, b, ref
  std::vector<std::vector<double>> w_sums(jobs.size());
  uint64_t total = 0;
  for (size_t j = 0; j < jobs.size(); ++j) {
    geo[j] = geometry(*jobs[j].a->info);
    w_sums[j] = slice_sums(jobs[j], geo[j].ne0);
    src[j] = {source_of(jobs[j].a, geo[j].ne0), source_of(jobs[j].b, geo[j].ne0),
              source_of(jobs[j].ref, geo[j].ne0)};
    const auto bytes = [](const TensorRef* t) { return t ? t->data().size() : 0; };
    total += bytes(jobs[j].a) + bytes(jobs[j].b) + bytes(jobs[j].ref);
    const uint64_t ne0 = geo[j].ne0;
    if (ne0 > kChunkElements) {
      // Pieces of whole blocks of every side (ne0 is a multiple of each block size).
      const uint64_t unit = common_block(src[j]);
      const uint64_t piece = std::max(unit, kChunkElements / unit * unit);
      for (uint64_t r = 0; r < geo[j].nrows; ++r)
        for (uint64_t c = 0; c < ne0; c += piece)
          items.push_back({j, r, 1, c, std::min(piece, ne0 - c)});
      continue;
    }
    const uint64_t per = std::max<uint64_t>(1, kChunkElements / std::max<uint64_t>(1, ne0));
    for (uint64_t r = 0; r < geo[j].nrows; r += per)
      items.push_back({j, r, std::min(per, geo[j].nrows - r)});
  }
  std::vector<ValueResult> out(jobs.size());
  for (size_t j = 0; j < jobs.size(); ++j) {
    if (jobs[j].measure_ab) out[j].ab.emplace().weighted = !jobs[j].weights.empty();
    if (jobs[j].ref) {
      out[j].ref_a.emplace().weighted = !jobs[j].weights.empty();
      out[j].ref_b.emplace().weighted = !jobs[j].weights.empty();
    }
  }
  std::atomic<uint64_t> done{0};
  if (threads == 0) threads = std::max(1u, std::thread::hardware_concurrency());
  tbb::global_control limit(tbb::global_control::max_allowed_parallelism, threads);
  tbb::enumerable_thread_specific<Buffers> buffers;
  // Items run in windows; each item has its own partial sums, merged in row order after its
  // window, so results do not depend on scheduling and the partials stay a few MiB whatever
  // the model size.
  constexpr size_t kWindow = 4096;
  std::vector<std::array<ErrorMetrics, 3>> partial;
  for (size_t w0 = 0; w0 < items.size(); w0 += kWindow) {
    const size_t w1 = std::min(items.size(), w0 + kWindow);
    partial.assign(w1 - w0, {});
    tbb::parallel_for(w0, w1, [&](size_t k) {
      const Item& it = items[k];
      const ValueJob& job = jobs[it.job];
      const Geometry& g = geo[it.job];
      Buffers& buf = buffers.local();
      auto& sums = partial[k - w0];
      if (it.cols) {
        measure_piece(it, job, g, src[it.job], buf, sums);
        uint64_t bytes = 0;
        for (const Source& x : src[it.job])
          if (x.t) bytes += x.offset(it.row0, it.col0 + it.cols) - x.offset(it.row0, it.col0);
        const uint64_t d = done.fetch_add(bytes) + bytes;
        if (progress) progress(d, total);
        return;
      }
      // The item's rows of each side, read once (memory bounded by items).
      const uint8_t* raw[3] = {};
      for (size_t side = 0; side < 3; ++side)
        if (const Source& x = src[it.job][side]; x.t)
          raw[side] =
              x.fetch(it.row0 * x.row_bytes, (it.row0 + it.rows) * x.row_bytes, buf.raw[side]);
      const auto at = [&](size_t side, uint64_t r) {
        return raw[side] + (r - it.row0) * src[it.job][side].row_bytes;
      };
      const uint64_t per = std::max<uint64_t>(1, kSliceElements / std::max<uint64_t>(1, g.ne0));
      const bool wide = wide_values(src[it.job]);
      // q4_K sides are decoded by the sum kernel itself where it can (see FusedQ4K).
      bool fuse[3];
      for (size_t side = 0; side < 3; ++side)
        fuse[side] = src[it.job][side].type == GgmlType::Q4_K && fused_q4_K();
      Floats* const decoded[3] = {&buf.a, &buf.b, &buf.ref};
      for (uint64_t r = it.row0; r < it.row0 + it.rows; r += per) {
        const uint64_t n = std::min(per, it.row0 + it.rows - r);
        const auto& s = src[it.job];
        if (wide) {
          decode_wide(s[0], at(0, r), n * g.ne0, buf.wide_a, buf.a);
          decode_wide(s[1], at(1, r), n * g.ne0, buf.wide_b, buf.a);
          if (job.measure_ab) accumulate_rows(buf.wide_a, buf.wide_b, job, g, r, n, sums[0]);
          if (job.ref) {
            decode_wide(s[2], at(2, r), n * g.ne0, buf.wide_ref, buf.a);
            accumulate_rows(buf.wide_ref, buf.wide_a, job, g, r, n, sums[1]);
            accumulate_rows(buf.wide_ref, buf.wide_b, job, g, r, n, sums[2]);
          }
          continue;
        }
        SliceSide side[3];
        for (size_t k = 0; k < 3; ++k) {
          if (!s[k].t) continue;
          if (fuse[k]) {
            side[k] = {nullptr, at(k, r), s[k].row_bytes};
          } else {
            decode_at(s[k], at(k, r), n * g.ne0, *decoded[k]);
            side[k] = {decoded[k]};
          }
        }
        if (job.measure_ab)
          accumulate_rows(side[0], side[1], job, w_sums[it.job], g, r, n, sums[0]);
        if (job.ref) {
          accumulate_rows(side[2], side[0], job, w_sums[it.job], g, r, n, sums[1]);
          accumulate_rows(side[2], side[1], job, w_sums[it.job], g, r, n, sums[2]);
        }
      }
      uint64_t bytes = 0;
      for (const Source& x : src[it.job])
        if (x.t) bytes += it.rows * x.row_bytes;
      const uint64_t d = done.fetch_add(bytes) + bytes;
      if (progress) progress(d, total);
    });
    for (size_t k = w0; k < w1; ++k) {
      ValueResult& r = out[items[k].job];
      if (r.ab) r.ab->merge(partial[k - w0][0]);
      if (r.ref_a) r.ref_a->merge(partial[k - w0][1]);
      if (r.ref_b) r.ref_b->merge(partial[k - w0][2]);
    }
  }
  return out;
}

}  // namespace detail
}  // namespace gguf

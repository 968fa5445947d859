// The sum kernels of the values diff: the double reference, float kernels in C++ and AVX2, and
// an AVX-512 kernel that can decode q4_K sides itself; all give the same sums (tests check it).
#include "ops/diff_sums.h"

#include <immintrin.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstring>
#include <vector>

#include "codecs/codec_kquants_common.h"
#include "codecs/codec_registry.h"

namespace gguf::detail {
namespace {

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

}  // namespace

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

namespace {

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
constexpr SumsFn double_rows = row_by_row<run_double>;

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
  std::vector<SumsFn> out = {double_rows, sums_float};
  __builtin_cpu_init();
  if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) out.push_back(sums_avx2);
  if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512dq") &&
      __builtin_cpu_supports("avx512vl"))
    out.push_back(sums_avx512);
  return out;
}

}  // namespace

const std::vector<SumsFn>& kernels() {
  static const std::vector<SumsFn> k = usable_sums();
  return k;
}

Sums sums_double(const float* base, const float* x, size_t rows, size_t ne0, const float* w) {
  return double_rows(base, x, rows, ne0, w);
}

Sums fused_sums_sides(SumSide base, SumSide x, size_t rows, size_t ne0, const float* w) {
  return sums_avx512_sides(base, x, rows, ne0, w);
}

bool fused_q4_K() { return kernels().back() == sums_avx512; }

}  // namespace gguf::detail

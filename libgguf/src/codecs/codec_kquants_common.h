// Internal to the k-quant codecs: ggml's rounding, the block layouts of q2_K..q8_K (from
// codec_blocks.h), and the
// scale searches the encoders share (implemented in codec_kquants_search.cpp).
#pragma once

// Decoders also get an AVX2 clone, chosen when the program loads: the same IEEE multiplies and
// subtracts in the same order (contraction is off, so no FMA), eight lanes instead of four.
#if defined(__x86_64__) && defined(__has_attribute) && !defined(GGUF_NO_DECODE_CLONES)
#if __has_attribute(target_clones)
#define GGUF_DECODE_CLONES __attribute__((target_clones("avx2", "default")))
#endif
#endif
#ifndef GGUF_DECODE_CLONES
#define GGUF_DECODE_CLONES
#endif

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <cstring>

#include "codecs/codec_blocks.h"
#include "gguf/base/fp16.h"

namespace gguf::detail::kq {

inline constexpr int kQK = 256;  // elements per super-block (ggml's QK_K)
// Below this magnitude ggml treats a group as all zero.
inline constexpr float kGroupMaxEps = 1e-15f;

// The block layouts (codec_blocks.h), by the names the k-quant code has always used.
using detail::BlockQ2_K;
using detail::BlockQ3_K;
using detail::BlockQ4_K;
using detail::BlockQ5_K;
using detail::BlockQ6_K;
using detail::BlockQ8_K;

// Payload bytes may sit at any alignment: blocks are copied, never cast in place.
template <class Block>
inline Block load_block(const uint8_t* src) {
  Block b;
  std::memcpy(&b, src, sizeof(Block));
  return b;
}
template <class Block>
inline void store_block(const Block& b, uint8_t* dst) {
  std::memcpy(dst, &b, sizeof(Block));
}

// a + b with the NaN ggml's build returns when both are NaN: a's (quieted). nearest_int turns a
// NaN's payload into a code, so which NaN survives matters. In q2_K's requantize it is x's in
// ggml's build, and a vectorised add of ours may take its operands either way round. (q4_K and
// q5_K keep the plain x + dm: there our -O3 build and ggml's agree, and a test holds them to it.)
inline float add_keeping_nan_of(float a, float b) {
  return a != a ? std::bit_cast<float>(std::bit_cast<uint32_t>(a) | 0x00400000u) : a + b;
}

// ggml's nearest_int: adding 1.5*2^23 rounds half to even for |f| < 2^22. Outside that range
// the result is garbage, but ggml's bytes depend on exactly this garbage, so keep the trick.
inline int nearest_int(float f) {
  const float biased = f + 12582912.0f;
  return static_cast<int>(std::bit_cast<uint32_t>(biased) & 0x007FFFFFu) - 0x00400000;
}

// The 6-bit scale and min of group j (0..7) of q4_K/q5_K.
inline void unpack_scale_min(int j, const uint8_t* s, uint8_t& sc, uint8_t& m) {
  if (j < 4) {
    sc = s[j] & 63;
    m = s[j + 4] & 63;
  } else {
    sc = static_cast<uint8_t>((s[j + 4] & 0xF) | ((s[j - 4] >> 6) << 4));
    m = static_cast<uint8_t>((s[j + 4] >> 4) | ((s[j] >> 6) << 4));
  }
}

// Inverse of unpack_scale_min for all 8 groups. Values are written as given (not masked to 6
// bits) because one ggml path stores unclamped scales and the overflow is part of its bytes.
inline void pack_scales_mins(const uint8_t* ls, const uint8_t* lm, uint8_t* s) {
  for (int j = 0; j < 4; ++j) {
    s[j] = ls[j];
    s[j + 4] = lm[j];
  }
  for (int j = 4; j < 8; ++j) {
    s[j + 4] = static_cast<uint8_t>((ls[j] & 0xF) | ((lm[j] & 0xF) << 4));
    s[j - 4] |= static_cast<uint8_t>((ls[j] >> 4) << 6);
    s[j] |= static_cast<uint8_t>((lm[j] >> 4) << 6);
  }
}

// q3_K's 16 six-bit scales (given biased, 0..63) into 12 bytes.
inline void pack_q3_scales(const int* l, uint8_t* s) {
  std::memset(s, 0, 12);
  for (int j = 0; j < 16; ++j) {
    if (j < 8)
      s[j] = static_cast<uint8_t>(l[j] & 0xF);
    else
      s[j - 8] |= static_cast<uint8_t>((l[j] & 0xF) << 4);
    s[j % 4 + 8] |= static_cast<uint8_t>((l[j] >> 4) << (2 * (j / 4)));
  }
}

// The signed scale (-32..31) of group j of q3_K.
inline int unpack_q3_scale(int j, const uint8_t* s) {
  const int low = j < 8 ? (s[j] & 0xF) : (s[j - 8] >> 4);
  return (low | (((s[8 + j % 4] >> (2 * (j / 4))) & 3) << 4)) - 32;
}

// ---- Scale searches (each named after the ggml routine whose results it reproduces) ----
// search_symmetric and search_affine evaluate the candidate scales side by side in SIMD lanes
// (codec_kquants_search_simd.cpp); the *_scalar forms are the straightforward originals and
// must give identical results.

// make_qx_quants with rmse_type 1: symmetric codes L in [0, 2*nmax) (biased by nmax), weights
// w (x^2 when null); returns the scale.
float search_symmetric(int n, int nmax, const float* x, const float* w, int8_t* L);
float search_symmetric_scalar(int n, int nmax, const float* x, const float* w, int8_t* L);

// make_q3_quants with do_rmse: q3_K's reference search, weights x^2, nmax 4.
float search_q3(const float* x, int8_t* L);
// One coordinate-descent pass of search_q3 over a group (signed codes -4..3); returns how many
// codes changed.
int q3_descent_pass(const float* x, int8_t* L, float& sumlx, float& suml2);
// search_q3 for all 16 groups of a super-block at once (lane per group): codes L[256], scales[16].
void search_q3_block(const float* x, int8_t* L, float* scales);

// make_qkx2_quants / make_qkx3_quants (identical for non-null weights): affine codes L in
// [0, nmax] for value = scale*L - min; sets *neg_min to the (non-negative) min.
struct AffineSearch {
  float rmin, rdelta;
  int nstep;
  bool use_mad;
};
// What both forms of search_affine start from: the weighted sums, the range (min clamped to at
// most 0) and the codes of the plain rounding with their error. False for a flat group (max ==
// min): L is zeroed and the search is over.
struct AffineStart {
  float min, max, sum_w, sum_x, scale, best_error;
};
inline bool affine_start(int n, int nmax, const float* x, const float* w, uint8_t* L, bool use_mad,
                         AffineStart& s) {
  s.min = s.max = x[0];
  s.sum_w = w[0];
  s.sum_x = s.sum_w * x[0];
  for (int i = 1; i < n; ++i) {
    if (x[i] < s.min) s.min = x[i];
    if (x[i] > s.max) s.max = x[i];
    s.sum_w += w[i];
    s.sum_x += w[i] * x[i];
  }
  if (s.min > 0) s.min = 0;
  if (s.max == s.min) {
    std::memset(L, 0, n);
    return false;
  }
  const float iscale = static_cast<float>(nmax) / (s.max - s.min);
  s.scale = 1 / iscale;
  s.best_error = 0;
  for (int i = 0; i < n; ++i) {
    L[i] = static_cast<uint8_t>(std::clamp(nearest_int(iscale * (x[i] - s.min)), 0, nmax));
    const float diff = s.scale * static_cast<float>(L[i]) + s.min - x[i];
    s.best_error += w[i] * (use_mad ? std::fabs(diff) : diff * diff);
  }
  return true;
}

// n <= 32.
float search_affine(int n, int nmax, const float* x, const float* w, uint8_t* L, float* neg_min,
                    const AffineSearch& p);
float search_affine_scalar(int n, int nmax, const float* x, const float* w, uint8_t* L,
                           float* neg_min, const AffineSearch& p);

// search_affine for `groups` (<= 16) groups of n (<= 32) values, group g at x + n*g (weights
// likewise), one group per AVX-512 lane (codec_kquants_search_avx512.cpp): the same codes
// L[n*g..], scales[g] and neg_mins[g]. Call only when codec_avx512().
void search_affine_groups_avx512(int groups, int n, int nmax, const float* x, const float* w,
                                 uint8_t* L, float* scales, float* neg_mins, const AffineSearch& p);

// make_qp_quants: codes L in [0, nmax] for non-negative x (the group scales of a super-block).
// Where codec_avx512(), its nine trial scales are measured side by side.
float search_positive(int n, int nmax, const float* x, uint8_t* L, const float* w);
// The inverse scale search_positive's trials choose, all nine in lanes of one register (max:
// the largest x, at least kGroupMaxEps). Call only when codec_avx512().
float positive_iscale_avx512(int n, int nmax, const float* x, const float* w, float max);

// ---- Per-type row codecs (n a multiple of kQK) ----
void encode_q2_K_ref(const float* x, uint8_t* dst, int64_t n);
void encode_q2_K_imatrix(const float* x, uint8_t* dst, int64_t n, const float* qw);
void decode_q2_K(const uint8_t* src, float* y, int64_t n);
void encode_q3_K_ref(const float* x, uint8_t* dst, int64_t n);
void encode_q3_K_imatrix(const float* x, uint8_t* dst, int64_t n, const float* qw);
void decode_q3_K(const uint8_t* src, float* y, int64_t n);
void encode_q4_K_ref(const float* x, uint8_t* dst, int64_t n);
void encode_q4_K_imatrix(const float* x, uint8_t* dst, int64_t n, const float* qw);
void decode_q4_K(const uint8_t* src, float* y, int64_t n);
void encode_q5_K_ref(const float* x, uint8_t* dst, int64_t n);
void encode_q5_K_imatrix(const float* x, uint8_t* dst, int64_t n, const float* qw);
void decode_q5_K(const uint8_t* src, float* y, int64_t n);
void encode_q6_K_ref(const float* x, uint8_t* dst, int64_t n);
void encode_q6_K_imatrix(const float* x, uint8_t* dst, int64_t n, const float* qw);
void decode_q6_K(const uint8_t* src, float* y, int64_t n);
void encode_q8_K(const float* x, uint8_t* dst, int64_t n);
void decode_q8_K(const uint8_t* src, float* y, int64_t n);

}  // namespace gguf::detail::kq

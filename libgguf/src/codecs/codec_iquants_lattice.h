// Shared by the i-quant encoders (codec_iquants_encode_*.cpp): the lattice grids and the
// search steps every lattice encoder runs, as ggml runs them.
//
// Lattice types (IQ1_S, IQ1_M, IQ2_XXS, IQ2_XS, IQ2_S, IQ3_XXS, IQ3_S): each group of 8 (IQ1,
// IQ2) or 4 (IQ3) magnitudes is a point of a fixed grid, times a per-group scale, plus sign
// bits. Quantizing a group picks a code per element; when that tuple is not a grid point, the
// grid points nearest to it (lists built once, exactly as ggml's iq2xs_init_impl and
// iq3xs_init_impl order them, since the order decides ties) are searched for the least
// importance-weighted error, over a sweep of trial scales. IQ1 splits each group into three
// levels by an exhaustive search over the sorted values.
// Non-linear types (IQ4_NL, IQ4_XS): 16 fixed levels, a scale search per 32 values.
//
// Where ggml has quirks (IQ3_S does not advance its index and sign positions past an all-zero
// group; IQ1 sorts with glibc's stable qsort), they are reproduced, because the bytes are the
// contract. Where ggml aborts or reads out of bounds (a lattice search with no finite
// candidate, from NaN input), we throw a gguf::Error instead.
#pragma once

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <cfloat>
#include <cmath>
#include <cstring>
#include <utility>
#include <vector>

#include "codecs/codec_iquant_tables.h"
#include "codecs/codec_kquants_common.h"
#include "codecs/codec_lattice_sweep.h"
#include "gguf/base/error.h"
#include "gguf/base/fp16.h"

// Search helpers that vectorize are also built for AVX2, like the decoders (same arithmetic,
// chosen at run time).
#define GGUF_ENCODE_CLONES GGUF_DECODE_CLONES
namespace gguf::detail::iq {

using kq::kGroupMaxEps;
using kq::nearest_int;

constexpr int kQK = 256;

// ggml's MAX(a, b): a > b ? a : b (unlike std::max, a NaN in b wins).
inline float gmax(float a, float b) { return a > b ? a : b; }

// A lattice grid for the encoders: its points as odd magnitudes 2*code + 1 (ggml's
// kgrid_q2xs / kgrid_q3xs bytes), the map from a tuple of codes (bits per code each) to the
// grid entry or, negated minus one, to the start of its neighbour list; the lists hold a count,
// then the grid indices of the points at the nwant smallest squared distances, ordered by
// distance then index, exactly as ggml's iq2xs_init_impl / iq3xs_init_impl build them (the
// order decides ties in the search).
struct Lattice {
  int dim = 8;
  std::vector<std::array<int8_t, 8>> points;
  std::vector<std::array<float, 8>> pointsf;  // the same as floats
  std::vector<int> map;
  std::vector<uint16_t> neighbours;
};

// The grids, built once on first use (codec_iquants_lattice.cpp).
const Lattice& iq2_xxs_lattice();
const Lattice& iq2_xs_lattice();
const Lattice& iq2_s_lattice();
const Lattice& iq1_lattice();  // IQ1: 8 signed values -1, 0, 1 (codes 0, 1, 2), two bits per code
const Lattice& iq3_xxs_lattice();
const Lattice& iq3_s_lattice();

// A grid as the AVX-512 sweep reads it (codes of bits each): its neighbour lists hold tuples of
// codes, not grid indices.
SweepLattice sweep_lattice(const Lattice& lat, int bits);

// codes to L and returns its grid index. Candidates are scored in batches of 8, one per lane,
// each summing its Dim terms in ggml's order; the first of equal scores wins, as in ggml's scan.
template <int Dim>
int best_neighbour(const Lattice& lat, const uint16_t* nb, const float* xval, const float* weight,
                   float scale, int8_t* L) {
  const int count = nb[0];
  float best_d2 = FLT_MAX;
  int best = -1;
  float sx[Dim], w[Dim];
  for (int i = 0; i < Dim; ++i) sx[i] = xval[i], w[i] = weight[i];
  for (int j0 = 1; j0 <= count; j0 += 8) {
    const int m = std::min(8, count + 1 - j0);
    float d2[8] = {};
    for (int i = 0; i < Dim; ++i)
      for (int l = 0; l < 8; ++l) {
        const float q = lat.pointsf[nb[j0 + std::min(l, m - 1)]][i];
        const float diff = scale * q - sx[i];
        d2[l] += w[i] * diff * diff;
      }
    for (int l = 0; l < m; ++l)
      if (d2[l] < best_d2) {
        best_d2 = d2[l];
        best = nb[j0 + l];
      }
  }
  if (best < 0) throw Error("i-quant lattice search found no neighbour (non-finite input?)");
  for (int i = 0; i < Dim; ++i) L[i] = static_cast<int8_t>((lat.points[best][i] - 1) / 2);
  return best;
}

// Codes of Dim values at inverse scale id (clamped to 0..kMaxQ-1), moved onto the lattice:
// the grid index. on_grid tells whether the rounded codes were a grid point already.
template <int Dim, int Bits, int kMaxQ>
int lattice_codes(const Lattice& lat, const float* xval, const float* waux, float id, float scale,
                  int8_t* L, bool* on_grid = nullptr) {
  int u = 0;
  for (int i = 0; i < Dim; ++i) {
    const int l = nearest_int(0.5f * (id * xval[i] - 1));
    L[i] = static_cast<int8_t>(std::max(0, std::min(kMaxQ - 1, l)));
    u |= L[i] << (Bits * i);
  }
  const int g = lat.map[u];
  if (on_grid) *on_grid = g >= 0;
  if (g >= 0) return g;
  return best_neighbour<Dim>(lat, lat.neighbours.data() - g - 1, xval, waux, scale, L);
}

// The grid index of the codes in L, which must be a lattice point.
template <int Dim, int Bits>
int grid_index_of(const Lattice& lat, const int8_t* L, const char* type, int group, int64_t block) {
  int u = 0;
  for (int i = 0; i < Dim; ++i) u |= L[i] << (Bits * i);
  const int g = u >= 0 && u < static_cast<int>(lat.map.size()) ? lat.map[u] : -1;
  if (g < 0)
    throw Error(
        fmt::format("{}: group {} of block {} left the lattice (index {})", type, group, block, u));
  return g;
}

// ggml asserts that a group's final scale is not negative; it is NaN when the input holds a
// NaN or an infinity, or values so large that their squares overflow float. We refuse such
// input with an error instead of writing zero or NaN blocks.
inline void check_scale(float scale, const char* type, int group, int64_t block) {
  if (!(scale >= 0))
    throw Error(
        fmt::format("{}: group {} of block {} gets scale {}: the values are not finite or "
                    "too large for float arithmetic (ggml aborts on such input)",
                    type, group, block, scale));
}

// Sums of w*x*q and w*q*q over a group of n (32 unless said) for lattice magnitudes q = 2*code + 1
// (the least squares scale is their ratio).
inline std::pair<float, float> fit_sums(const float* weight, const float* xval, const int8_t* L,
                                        int n = 32) {
  float sumqx = 0, sumq2 = 0;
  for (int i = 0; i < n; ++i) {
    const float q = static_cast<float>(2 * L[i] + 1);
    sumqx += weight[i] * xval[i] * q;
    sumq2 += weight[i] * q * q;
  }
  return {sumqx, sumq2};
}

// The trial-scale sweep every lattice encoder runs (ggml repeats it in each): for each trial
// inverse scale id = (base + is * step) / den, is in [lo, hi], the codes of every group of Dim
// values are moved onto the lattice, and the trial whose least-squares fit explains most
// (sumqx^2 / sumq2 largest, first one on ties) gives scale, its codes L and, per group,
// whether the rounded codes were on the grid already.
template <int Dim, int Bits, int kMaxQ>
void sweep_scales(const Lattice& lat, int n, const float* xval, const float* waux,
                  const float* weight, int lo, int hi, float base, float step, float den,
                  float& scale, int8_t* L, bool* on_grid) {
  int8_t Laux[32];
  bool aux[8];
  float best = 0;
  for (int is = lo; is <= hi; ++is) {
    const float id = (base + static_cast<float>(is) * step) / den;
    const float this_scale = 1 / id;
    for (int k = 0; k < n / Dim; ++k)
      lattice_codes<Dim, Bits, kMaxQ>(lat, xval + Dim * k, waux + Dim * k, id, this_scale,
                                      Laux + Dim * k, &aux[k]);
    const auto [sumqx, sumq2] = fit_sums(weight, xval, Laux, n);
    if (sumq2 > 0 && sumqx * sumqx > best * sumq2) {
      scale = sumqx / sumq2;
      best = scale * sumqx;
      std::memcpy(L, Laux, n);
      std::copy(aux, aux + n / Dim, on_grid);
    }
  }
}

// Then, at the chosen scale, groups are moved onto the lattice again (those that were off it,
// or all when every_group) and the scale refitted; ggml does this when some group was off the
// grid (IQ2_XXS: always) and the scale is positive.
template <int Dim, int Bits, int kMaxQ>
void refit_off_grid(const Lattice& lat, int n, const float* xval, const float* waux,
                    const float* weight, bool every_group, float& scale, int8_t* L,
                    const bool* on_grid) {
  const bool any_off = std::find(on_grid, on_grid + n / Dim, false) != on_grid + n / Dim;
  if (!any_off || !(scale > 0)) return;
  const float id = 1 / scale;
  for (int k = 0; k < n / Dim; ++k)
    if (every_group || !on_grid[k])
      lattice_codes<Dim, Bits, kMaxQ>(lat, xval + Dim * k, waux + Dim * k, id, scale, L + Dim * k);
  const auto [sumqx, sumq2] = fit_sums(weight, xval, L, n);
  if (sumq2 > 0) scale = sumqx / sumq2;
}

// Importance of each of the 32 values of a group: qw * sqrt(sigma2 + x^2) with weights, x^2
// without; and their square roots (the weights of the lattice search).
inline void group_weights(const float* xb, const float* qw, float sigma2, float* weight,
                          float* waux) {
  if (qw) {
    for (int i = 0; i < 32; ++i) weight[i] = qw[i] * std::sqrt(sigma2 + xb[i] * xb[i]);
  } else {
    for (int i = 0; i < 32; ++i) weight[i] = xb[i] * xb[i];
  }
  for (int i = 0; i < 32; ++i) waux[i] = std::sqrt(weight[i]);
}

// Magnitudes and 7-bit signs of groups x 8 values (IQ2_XXS, IQ2_XS, IQ3_XXS): the eighth sign is
// implied (an even count of negatives), so for an odd count the value that costs least to flip gets
// its sign flipped (its magnitude goes negative).
inline void even_signs(const float* xb, const float* weight, float* xval, uint8_t* block_signs,
                       int groups = 4) {
  for (int k = 0; k < groups; ++k) {
    int nflip = 0;
    uint8_t s = 0;
    for (int i = 0; i < 8; ++i) {
      if (xb[8 * k + i] >= 0) {
        xval[8 * k + i] = xb[8 * k + i];
      } else {
        xval[8 * k + i] = -xb[8 * k + i];
        ++nflip;
        s |= static_cast<uint8_t>(1 << i);
      }
    }
    if (nflip % 2) {
      int imin = 0;
      float min = weight[8 * k] * xb[8 * k] * xb[8 * k];
      for (int i = 1; i < 8; ++i) {
        const float ax = weight[8 * k + i] * xb[8 * k + i] * xb[8 * k + i];
        if (ax < min) {
          min = ax;
          imin = i;
        }
      }
      xval[8 * k + imin] = -xval[8 * k + imin];
      s ^= static_cast<uint8_t>(1 << imin);
    }
    block_signs[k] = s & 127;
  }
}

// n_per_row values takes n_per_row / block_size blocks of block_bytes. (gguf::quantize has
// checked the sizes, and that the types needing importance weights got them.)
using RowFn = void (*)(const float* x, uint8_t* dst, int64_t n, const float* qw);
inline void encode_rows(RowFn row, int64_t block_size, int64_t block_bytes, const float* src,
                        uint8_t* dst, int64_t nrows, int64_t n_per_row, const float* imatrix) {
  const int64_t row_bytes = n_per_row / block_size * block_bytes;
  for (int64_t r = 0; r < nrows; ++r)
    row(src + r * n_per_row, dst + r * row_bytes, n_per_row, imatrix);
}

}  // namespace gguf::detail::iq

// Encoders of the i-quant family, byte-identical with ggml's quantize_iq* (same searches,
// same order of float operations; codec files are built with -ffp-contract=off).
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
#include "codecs/codec_iquants_encode.h"

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
#include "gguf/base/error.h"
#include "gguf/base/fp16.h"

// Search helpers that vectorize are also built for AVX2, like the decoders (same arithmetic,
// chosen at run time).
#define GGUF_ENCODE_CLONES GGUF_DECODE_CLONES

namespace gguf::detail::iq {
namespace {

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

// codes[k][j]: the code of element j of grid point k.
Lattice make_lattice(const std::vector<std::array<int, 8>>& codes, int dim, int bits, int map_size,
                     int nwant) {
  const int grid_size = static_cast<int>(codes.size());
  Lattice lat;
  lat.dim = dim;
  lat.points.resize(grid_size);
  lat.pointsf.resize(grid_size);
  lat.map.assign(map_size, -1);
  for (int k = 0; k < grid_size; ++k) {
    int index = 0;
    for (int j = 0; j < dim; ++j) {
      lat.points[k][j] = static_cast<int8_t>(2 * codes[k][j] + 1);
      lat.pointsf[k][j] = static_cast<float>(2 * codes[k][j] + 1);
      index |= codes[k][j] << (bits * j);
    }
    lat.map[index] = k;
  }
  // For each tuple off the grid: the points at its nwant smallest squared distances, by
  // distance then index (ggml sorts all points that way and keeps a prefix). Distances are
  // small integers, so a histogram finds the cut without sorting.
  std::vector<int> dist(grid_size);
  const int mask = (1 << bits) - 1;
  const int max_d2 = dim * (2 * mask) * (2 * mask);
  std::vector<int> count(max_d2 + 1);
  for (int i = 0; i < map_size; ++i) {
    if (lat.map[i] >= 0) continue;
    int8_t pos[8];
    for (int k = 0; k < dim; ++k) pos[k] = static_cast<int8_t>(2 * ((i >> (bits * k)) & mask) + 1);
    std::fill(count.begin(), count.end(), 0);
    for (int j = 0; j < grid_size; ++j) {
      int d2 = 0;
      for (int k = 0; k < dim; ++k) d2 += (lat.points[j][k] - pos[k]) * (lat.points[j][k] - pos[k]);
      dist[j] = d2;
      ++count[d2];
    }
    const size_t start = lat.neighbours.size();
    lat.map[i] = -static_cast<int>(start) - 1;
    lat.neighbours.push_back(0);
    int have = 0;
    for (int d2 = 0; d2 <= max_d2 && have < nwant; ++d2) {
      if (!count[d2]) continue;
      ++have;
      for (int j = 0; j < grid_size; ++j)
        if (dist[j] == d2) lat.neighbours.push_back(static_cast<uint16_t>(j));
    }
    lat.neighbours[start] = static_cast<uint16_t>(lat.neighbours.size() - start - 1);
  }
  return lat;
}

// IQ2 grids: 8 magnitudes 8, 25, 43 (codes 0, 1, 2), two bits per code.
template <size_t N>
Lattice iq2_lattice(const uint64_t (&grid)[N], int nwant) {
  std::vector<std::array<int, 8>> codes(N);
  for (size_t k = 0; k < N; ++k)
    for (int j = 0; j < 8; ++j) {
      const uint8_t m = grid_byte(grid[k], j);
      codes[k][j] = m < 0x10 ? 0 : m < 0x20 ? 1 : 2;
    }
  return make_lattice(codes, 8, 2, 43692, nwant);
}

// IQ3 grids: 4 magnitudes, three bits per code; code = byte / divisor (IQ3_XXS stores
// 4, 12, ..., 62 and IQ3_S 1, 3, ..., 15).
template <size_t N>
Lattice iq3_lattice(const uint32_t (&grid)[N], int divisor, int nwant) {
  std::vector<std::array<int, 8>> codes(N);
  for (size_t k = 0; k < N; ++k)
    for (int j = 0; j < 4; ++j)
      codes[k][j] = static_cast<int>((grid[k] >> (8 * j)) & 0xff) / divisor;
  return make_lattice(codes, 4, 3, 4096, nwant);
}

const Lattice& iq2_xxs_lattice() {
  static const Lattice lat = iq2_lattice(kIq2XxsGrid, 2);
  return lat;
}
const Lattice& iq2_xs_lattice() {
  static const Lattice lat = iq2_lattice(kIq2XsGrid, 2);
  return lat;
}
const Lattice& iq2_s_lattice() {
  static const Lattice lat = iq2_lattice(kIq2SGrid, 1);
  return lat;
}
// IQ1 grid: 8 signed values -1, 0, 1 (codes 0, 1, 2), two bits per code.
const Lattice& iq1_lattice() {
  static const Lattice lat = [] {
    std::vector<std::array<int, 8>> codes(2048);
    for (size_t k = 0; k < 2048; ++k)
      for (int j = 0; j < 8; ++j) codes[k][j] = static_cast<int8_t>(grid_byte(kIq1SGrid[k], j)) + 1;
    return make_lattice(codes, 8, 2, 43692, 3);
  }();
  return lat;
}
const Lattice& iq3_xxs_lattice() {
  static const Lattice lat = iq3_lattice(kIq3XxsGrid, 8, 2);
  return lat;
}
const Lattice& iq3_s_lattice() {
  static const Lattice lat = iq3_lattice(kIq3SGrid, 2, 3);
  return lat;
}

// The neighbour of the list at nb with the least weighted error for xval at scale; writes its
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
void check_scale(float scale, const char* type, int group, int64_t block) {
  if (!(scale >= 0))
    throw Error(
        fmt::format("{}: group {} of block {} gets scale {}: the values are not finite or "
                    "too large for float arithmetic (ggml aborts on such input)",
                    type, group, block, scale));
}

// Sums of w*x*q and w*q*q over a group of n (32 unless said) for lattice magnitudes q = 2*code + 1
// (the least squares scale is their ratio).
std::pair<float, float> fit_sums(const float* weight, const float* xval, const int8_t* L,
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
void group_weights(const float* xb, const float* qw, float sigma2, float* weight, float* waux) {
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
void even_signs(const float* xb, const float* weight, float* xval, uint8_t* block_signs,
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

void encode_iq2_xxs_row(const float* x, uint8_t* dst, int64_t n, const float* qw) {
  const Lattice& lat = iq2_xxs_lattice();
  constexpr int kMaxQ = 3;
  for (int64_t ibl = 0; ibl < n / kQK; ++ibl, dst += 66) {
    const float* xbl = x + kQK * ibl;
    uint32_t q2[16] = {};
    float scales[8];
    float max_scale = 0;
    float sumx2 = 0;
    for (int i = 0; i < kQK; ++i) sumx2 += xbl[i] * xbl[i];
    const float sigma2 = sumx2 / kQK;
    for (int ib = 0; ib < 8; ++ib) {
      const float* xb = xbl + 32 * ib;
      const float* w = qw + kQK * ibl + 32 * ib;
      float weight[32], waux[32], xval[32];
      int8_t L[32];
      uint8_t block_signs[4];
      group_weights(xb, w, sigma2, weight, waux);
      even_signs(xb, weight, xval, block_signs);
      float max = xval[0];
      for (int i = 1; i < 32; ++i) max = gmax(max, xval[i]);
      if (max < kGroupMaxEps) {
        scales[ib] = 0;
        continue;
      }
      float scale = kq::search_positive(32, kMaxQ + 1, xval, reinterpret_cast<uint8_t*>(L), weight);
      const float eff_max = scale * kMaxQ;
      if (eff_max <= 0) {
        scales[ib] = 0;
        continue;
      }
      bool on_grid[4] = {false, false, false, false};  // ggml refits every group, always
      sweep_scales<8, 2, kMaxQ>(lat, 32, xval, waux, weight, -6, 6, 2 * kMaxQ - 1, 0.1f, eff_max,
                                scale, L, on_grid);
      std::fill(on_grid, on_grid + 4, false);
      refit_off_grid<8, 2, kMaxQ>(lat, 32, xval, waux, weight, true, scale, L, on_grid);
      if (scale < 0) {
        scale = -scale;
        for (int k = 0; k < 4; ++k) block_signs[k] = static_cast<uint8_t>(~block_signs[k] & 127);
      }
      for (int k = 0; k < 4; ++k) {
        const int g = grid_index_of<8, 2>(lat, L + 8 * k, "iq2_xxs", 4 * ib + k, ibl);
        q2[2 * ib] |= static_cast<uint32_t>(g) << (8 * k);
        q2[2 * ib + 1] |= static_cast<uint32_t>(block_signs[k]) << (7 * k);
      }
      check_scale(scale, "iq2_xxs", ib, ibl);
      scales[ib] = scale;
      max_scale = gmax(max_scale, scale);
    }
    uint16_t dh = 0;  // fp16 zero
    if (max_scale != 0) {
      const float d = max_scale / 31;
      dh = fp32_to_fp16(d);
      const float id = 1 / d;
      for (int ib = 0; ib < 8; ++ib) {
        const int l = std::max(0, std::min(15, nearest_int(0.5f * (id * scales[ib] - 1))));
        q2[2 * ib + 1] |= static_cast<uint32_t>(l) << 28;
      }
    } else {
      std::memset(q2, 0, sizeof q2);
    }
    std::memcpy(dst, &dh, 2);
    std::memcpy(dst + 2, q2, sizeof q2);
  }
}

// ---- IQ4_NL / IQ4_XS: 16 non-linear levels per element, scale per 32 ----

// The level nearest x, as ggml's best_index_int8 finds it by bisection (0 at or below the
// lowest level, 15 at or above the highest, else the nearer of the two levels around x with
// ggml's float comparison, ties to the upper). Branch-free: the level above x is one more than
// the count of inner levels at or below it. A NaN ends the bisection at 15, as in ggml.
constexpr float kLevels[16] = {-127, -104, -83, -65, -49, -35, -22, -10,
                               1,    13,   25,  38,  53,  69,  89,  113};

inline int best_level(float x) {
  if (x != x) return 15;
  int mu = 1;
  for (int k = 1; k < 15; ++k) mu += kLevels[k] <= x;
  return x - kLevels[mu - 1] < kLevels[mu] - x ? mu - 1 : mu;
}

// best_level(id * xb[j]) for the 32 values of a group, written so that it vectorizes.
GGUF_ENCODE_CLONES void levels32(const float* __restrict xb, float id, int* __restrict out) {
  for (int j = 0; j < 32; ++j) {
    const float x = id * xb[j];
    int mu = 1;
    for (int k = 1; k < 15; ++k) mu += kLevels[k] <= x ? 1 : 0;
    const float lo = kLevels[mu - 1], hi = kLevels[mu];
    const int l = x - lo < hi - x ? mu - 1 : mu;
    out[j] = x != x ? 15 : l;
  }
}

// One super-block of n (32 for IQ4_NL, 256 for IQ4_XS) values in groups of 32: ggml's
// quantize_row_iq4_nl_impl with ntry = 7. Writes the fp16 scale to dh, the packed levels to
// q4 and, for n > 32, the 6-bit group scales to scales_h/scales_l.
void iq4_super_block(int n, const float* x, const float* qw, uint16_t* dh, uint8_t* q4,
                     uint16_t* scales_h, uint8_t* scales_l) {
  constexpr int kGroup = 32, kTry = 7;
  const auto& values = kValuesIq4Nl;
  uint8_t L[256];
  float scales[8], weight[kGroup];
  float sigma2 = 0;
  for (int j = 0; j < n; ++j) sigma2 += x[j] * x[j];
  sigma2 *= 2.f / static_cast<float>(n);
  std::memset(q4, 0, n / 2);
  *dh = fp32_to_fp16(0.f);
  float max_scale = 0, amax_scale = 0;
  for (int ib = 0; ib < n / kGroup; ++ib) {
    const float* xb = x + ib * kGroup;
    uint8_t* Lb = L + ib * kGroup;
    if (qw) {
      for (int j = 0; j < kGroup; ++j)
        weight[j] = qw[ib * kGroup + j] * std::sqrt(sigma2 + xb[j] * xb[j]);
    } else {
      for (int j = 0; j < kGroup; ++j) weight[j] = xb[j] * xb[j];
    }
    float amax = 0, max = 0;
    for (int j = 0; j < kGroup; ++j) {
      const float ax = std::fabs(xb[j]);
      if (ax > amax) {
        amax = ax;
        max = xb[j];
      }
    }
    if (amax < kGroupMaxEps) {
      scales[ib] = 0;
      continue;
    }
    float d = -max / values[0];
    float id = 1 / d;
    float sumqx = 0, sumq2 = 0;
    int lv[kGroup];
    levels32(xb, id, lv);
    for (int j = 0; j < kGroup; ++j) {
      const int l = lv[j];
      Lb[j] = static_cast<uint8_t>(l);
      const float q = values[l];
      sumqx += weight[j] * q * xb[j];
      sumq2 += weight[j] * q * q;
    }
    d = sumq2 > 0 ? sumqx / sumq2 : 0.f;
    float best = d * sumqx;
    for (int itry = -kTry; itry <= kTry; ++itry) {
      id = static_cast<float>(itry + values[0]) / max;
      sumqx = sumq2 = 0;
      levels32(xb, id, lv);
      for (int j = 0; j < kGroup; ++j) {
        const float q = values[lv[j]];
        sumqx += weight[j] * q * xb[j];
        sumq2 += weight[j] * q * q;
      }
      if (sumq2 > 0 && sumqx * sumqx > best * sumq2) {
        d = sumqx / sumq2;
        best = d * sumqx;
      }
    }
    scales[ib] = d;
    if (std::fabs(d) > amax_scale) {
      amax_scale = std::fabs(d);
      max_scale = d;
    }
  }
  if (n > kGroup) {
    *scales_h = 0;
    const float d = -max_scale / 32;
    *dh = fp32_to_fp16(d);
    const float id = d != 0 ? 1 / d : 0.f;
    for (int ib = 0; ib < n / kGroup; ++ib) {
      int l = std::max(-32, std::min(31, nearest_int(id * scales[ib])));
      const float dl = d * static_cast<float>(l);
      const float idl = dl != 0 ? 1 / dl : 0.f;
      for (int j = 0; j < kGroup; ++j)
        L[ib * kGroup + j] = static_cast<uint8_t>(best_level(idl * x[ib * kGroup + j]));
      l += 32;
      const auto l_l = static_cast<uint8_t>(l & 0xf), l_h = static_cast<uint8_t>(l >> 4);
      if (ib % 2 == 0)
        scales_l[ib / 2] = l_l;
      else
        scales_l[ib / 2] |= static_cast<uint8_t>(l_l << 4);
      *scales_h |= static_cast<uint16_t>(l_h << (2 * (ib % 8)));
    }
  } else {
    *dh = fp32_to_fp16(scales[0]);
    const float id = scales[0] != 0 ? 1 / scales[0] : 0;
    for (int j = 0; j < n; ++j) L[j] = static_cast<uint8_t>(best_level(id * x[j]));
  }
  for (int i = 0; i < n / 32; ++i)
    for (int j = 0; j < 16; ++j)
      q4[16 * i + j] = static_cast<uint8_t>(L[32 * i + j] | (L[32 * i + 16 + j] << 4));
}

// ---- IQ1_S / IQ1_M: 8 values of -1, 0, +1 on a 2048-point grid, shifted by +-1/8 ----

constexpr float kIq1Delta8 = 0.125f;

// ggml's iq1_find_best_neighbour2: the neighbour whose levels xg (per code) at scale best fit
// the signed values x under weight; writes its codes to L.
int iq1_best_neighbour(const Lattice& lat, int u, const float* x, const float* weight, float scale,
                       const float* xg, int8_t* L) {
  const uint16_t* nb = lat.neighbours.data() - lat.map[u] - 1;
  float best = FLT_MAX;
  int g = -1;
  for (int j = 1; j <= nb[0]; ++j) {
    const auto& pg = lat.points[nb[j]];
    float d2 = 0;
    for (int i = 0; i < 8; ++i) {
      const float q = xg[(pg[i] - 1) / 2];
      const float diff = scale * q - x[i];
      d2 += weight[i] * diff * diff;
    }
    if (d2 < best) {
      best = d2;
      g = nb[j];
    }
  }
  if (g < 0) throw Error("iq1 lattice search found no neighbour (non-finite input?)");
  for (int i = 0; i < 8; ++i) L[i] = static_cast<int8_t>((lat.points[g][i] - 1) / 2);
  return g;
}

// The values of a group sorted ascending, ties in index order (ggml's qsort of (value, index)
// pairs by value is glibc's stable merge sort).
template <int N>
void sorted_order(const float* xb, int* idx) {
  for (int j = 0; j < N; ++j) idx[j] = j;
  std::stable_sort(idx, idx + N, [xb](int a, int b) { return xb[a] < xb[b]; });
}

// ggml's quantize_row_iq1_s_impl: 50-byte blocks of d, 32 low index bytes, 8 u16 of three
// 3-bit index highs, a 3-bit scale and the shift sign. Importance required.
void encode_iq1_s_row(const float* x, uint8_t* dst, int64_t n, const float* qw) {
  const Lattice& lat = iq1_lattice();
  constexpr int kBs = 32;
  const float x_p[3] = {-1 + kIq1Delta8, kIq1Delta8, 1 + kIq1Delta8};
  const float x_m[3] = {-1 - kIq1Delta8, -kIq1Delta8, 1 - kIq1Delta8};
  for (int64_t ibl = 0; ibl < n / kQK; ++ibl, dst += 50) {
    std::memset(dst, 0, 50);
    uint8_t* qs = dst + 2;
    uint16_t qh[8] = {};
    const float* xbl = x + kQK * ibl;
    float scales[8];
    int8_t shifts[8];
    float max_scale = 0;
    float sumx2 = 0;
    for (int i = 0; i < kQK; ++i) sumx2 += xbl[i] * xbl[i];
    const float sigma2 = 2 * sumx2 / kQK;
    for (int ib = 0; ib < kQK / kBs; ++ib) {
      const float* xb = xbl + kBs * ib;
      const float* w = qw + kQK * ibl + kBs * ib;
      float weight[kBs];
      for (int i = 0; i < kBs; ++i) weight[i] = w[i] * std::sqrt(sigma2 + xb[i] * xb[i]);
      float max = std::fabs(xb[0]);
      for (int i = 1; i < kBs; ++i) max = gmax(max, std::fabs(xb[i]));
      if (max < 1e-12f) {
        scales[ib] = 0;
        shifts[ib] = 1;
        continue;
      }
      // Exhaustive split of the sorted values into the three levels, by prefix sums.
      int idx[kBs];
      sorted_order<kBs>(xb, idx);
      float sumx[kBs + 1], sumw[kBs + 1];
      sumx[0] = sumw[0] = 0;
      for (int j = 0; j < kBs; ++j) {
        const int i = idx[j];
        sumx[j + 1] = sumx[j] + weight[i] * xb[i];
        sumw[j + 1] = sumw[j] + weight[i];
      }
      float best_score = -FLT_MAX, scale = max;
      int besti1 = -1, besti2 = -1, best_shift = 0;
      // The terms of the first level do not depend on i2: hoisted (same products, same sums).
      for (int i1 = 0; i1 <= kBs; ++i1) {
        const float ax = sumx[i1] - sumx[0], aw = sumw[i1] - sumw[0];
        const float px0 = ax * x_p[0], pw0 = aw * x_p[0] * x_p[0];
        const float mx0 = ax * x_m[0], mw0 = aw * x_m[0] * x_m[0];
        for (int i2 = i1; i2 <= kBs; ++i2) {
          const float bx = sumx[i2] - sumx[i1], cx = sumx[kBs] - sumx[i2];
          const float bw = sumw[i2] - sumw[i1], cw = sumw[kBs] - sumw[i2];
          float sumqx = px0 + bx * x_p[1] + cx * x_p[2];
          float sumq2 = pw0 + bw * x_p[1] * x_p[1] + cw * x_p[2] * x_p[2];
          if (sumq2 > 0 && sumqx * sumqx > best_score * sumq2) {
            scale = sumqx / sumq2;
            best_score = scale * sumqx;
            besti1 = i1;
            besti2 = i2;
            best_shift = 1;
          }
          sumqx = mx0 + bx * x_m[1] + cx * x_m[2];
          sumq2 = mw0 + bw * x_m[1] * x_m[1] + cw * x_m[2] * x_m[2];
          if (sumq2 > 0 && sumqx * sumqx > best_score * sumq2) {
            scale = sumqx / sumq2;
            best_score = scale * sumqx;
            besti1 = i1;
            besti2 = i2;
            best_shift = -1;
          }
        }
      }
      if (besti1 < 0 || besti2 < 0 || best_shift == 0) {
        scales[ib] = 0;
        shifts[ib] = 1;
        continue;
      }
      int8_t L[kBs];
      for (int j = 0; j < kBs; ++j)
        L[idx[j]] = static_cast<int8_t>(j < besti1 ? 0 : j < besti2 ? 1 : 2);
      if (scale < 0) {
        for (int j = 0; j < kBs; ++j) L[j] = static_cast<int8_t>(2 - L[j]);
        scale = -scale;
        best_shift = -best_shift;
      }
      bool all_on_grid = true;
      const float* xx = best_shift == 1 ? x_p : x_m;
      uint16_t index[4];
      for (int k = 0; k < kBs / 8; ++k) {
        int u = 0;
        for (int j = 0; j < 8; ++j) u |= L[8 * k + j] << (2 * j);
        int g = lat.map[u];
        if (g < 0) {
          all_on_grid = false;
          g = iq1_best_neighbour(lat, u, xb + 8 * k, weight + 8 * k, scale, xx, L + 8 * k);
        }
        index[k] = static_cast<uint16_t>(g);
      }
      if (!all_on_grid) {
        float sumqx = 0, sumq2 = 0;
        for (int k = 0; k < kBs / 8; ++k) {
          const auto& pg = lat.points[index[k]];
          for (int j = 0; j < 8; ++j) {
            const float wj = weight[8 * k + j];
            const float q = xx[(pg[j] - 1) / 2];
            sumqx += wj * q * xb[8 * k + j];
            sumq2 += wj * q * q;
          }
        }
        if (sumqx > 0 && sumq2 > 0) scale = sumqx / sumq2;
      }
      uint16_t h = 0;
      for (int k = 0; k < kBs / 8; ++k) {
        qs[(kBs / 8) * ib + k] = static_cast<uint8_t>(index[k] & 255);
        h |= static_cast<uint16_t>((index[k] >> 8) << (3 * k));
      }
      qh[ib] = h;
      check_scale(scale, "iq1_s", ib, ibl);
      scales[ib] = scale;
      shifts[ib] = static_cast<int8_t>(best_shift);
      max_scale = gmax(max_scale, scale);
    }
    if (max_scale == 0) {
      // ggml has written the groups' index highs already; only d and the scales stay 0.
      std::memcpy(dst + 34, qh, 16);
      continue;
    }
    const float d = max_scale / 15;
    const uint16_t dh = fp32_to_fp16(d * 1.125f);
    std::memcpy(dst, &dh, 2);
    const float id = 1 / d;
    for (int ib = 0; ib < kQK / kBs; ++ib) {
      int l = std::max(0, std::min(7, nearest_int(0.5f * (id * scales[ib] - 1))));
      if (shifts[ib] == -1) l |= 8;
      qh[ib] |= static_cast<uint16_t>(l << 12);
    }
    std::memcpy(dst + 34, qh, 16);
  }
}

// ggml's quantize_row_iq1_m_impl: 56-byte blocks of 32 low index bytes, 16 bytes of index highs
// and shift bits (two groups of 8 each), and 8 bytes of 3-bit scales whose spare nibbles hold
// the fp16 super-block scale. Importance optional.
void encode_iq1_m_row(const float* x, uint8_t* dst, int64_t n, const float* qw) {
  const Lattice& lat = iq1_lattice();
  constexpr int kBs = 16;
  const float x_p[3] = {-1 + kIq1Delta8, kIq1Delta8, 1 + kIq1Delta8};
  const float x_m[3] = {-1 - kIq1Delta8, -kIq1Delta8, 1 - kIq1Delta8};
  const uint8_t masks[4] = {0x00, 0x80, 0x08, 0x88};
  // Levels of the two groups of 8 for each of the 4 shift combinations (+,+ +,- -,+ -,-).
  const auto levels = [&](int k, int half) { return (half == 0 ? k < 2 : k % 2 == 0) ? x_p : x_m; };
  for (int64_t ibl = 0; ibl < n / kQK; ++ibl, dst += 56) {
    std::memset(dst, 0, 56);
    uint8_t* qs = dst;
    uint8_t* qh = dst + 32;
    uint16_t sc[4] = {};
    const float* xbl = x + kQK * ibl;
    float scales[16];
    int8_t shifts[16];
    float max_scale = 0;
    float sumx2 = 0;
    for (int i = 0; i < kQK; ++i) sumx2 += xbl[i] * xbl[i];
    const float sigma2 = 2 * sumx2 / kQK;
    float weight[kBs];
    const auto group_weights16 = [&](const float* xb, int ib) {
      if (qw) {
        const float* w = qw + kQK * ibl + kBs * ib;
        for (int i = 0; i < kBs; ++i) weight[i] = w[i] * std::sqrt(sigma2 + xb[i] * xb[i]);
      } else {
        for (int i = 0; i < kBs; ++i) weight[i] = xb[i] * xb[i];
      }
    };
    for (int ib = 0; ib < kQK / kBs; ++ib) {
      const float* xb = xbl + kBs * ib;
      group_weights16(xb, ib);
      float max = std::fabs(xb[0]);
      for (int i = 1; i < kBs; ++i) max = gmax(max, std::fabs(xb[i]));
      if (max < 1e-7f) {
        scales[ib] = 0;
        shifts[ib] = 0;
        continue;
      }
      int idx[kBs];
      sorted_order<kBs>(xb, idx);
      float best_score = -FLT_MAX, scale = max;
      int besti1 = -1, besti2 = -1, best_k = -1;
      for (int i1 = 0; i1 <= kBs; ++i1) {
        for (int i2 = i1; i2 <= kBs; ++i2) {
          float sumqx[4], sumq2[4];
          for (int k = 0; k < 4; ++k) {
            float sx = 0, s2 = 0;
            for (int j = 0; j < kBs; ++j) {
              const int i = idx[j];
              const float xl = levels(k, i < kBs / 2 ? 0 : 1)[j < i1 ? 0 : j < i2 ? 1 : 2];
              sx += weight[i] * xl * xb[i];
              s2 += weight[i] * xl * xl;
            }
            sumqx[k] = sx;
            sumq2[k] = s2;
          }
          for (int k = 0; k < 4; ++k) {
            if (sumq2[k] > 0 && sumqx[k] * sumqx[k] > best_score * sumq2[k]) {
              scale = sumqx[k] / sumq2[k];
              best_score = scale * sumqx[k];
              besti1 = i1;
              besti2 = i2;
              best_k = k;
            }
          }
        }
      }
      if (besti1 < 0 || besti2 < 0 || best_k < 0) {
        scales[ib] = 0;
        shifts[ib] = 0;
        continue;
      }
      int8_t L[kBs];
      for (int j = 0; j < kBs; ++j)
        L[idx[j]] = static_cast<int8_t>(j < besti1 ? 0 : j < besti2 ? 1 : 2);
      if (scale < 0) {
        for (int j = 0; j < kBs; ++j) L[j] = static_cast<int8_t>(2 - L[j]);
        scale = -scale;
        best_k = 3 - best_k;
      }
      bool all_on_grid = true;
      uint16_t index[2];
      for (int k = 0; k < 2; ++k) {
        const float* xx = levels(best_k, k);
        int u = 0;
        for (int j = 0; j < 8; ++j) u |= L[8 * k + j] << (2 * j);
        int g = lat.map[u];
        if (g < 0) {
          all_on_grid = false;
          g = iq1_best_neighbour(lat, u, xb + 8 * k, weight + 8 * k, scale, xx, L + 8 * k);
        }
        index[k] = static_cast<uint16_t>(g);
      }
      if (!all_on_grid) {
        float sumqx_f = 0, sumq2_f = 0;
        for (int k = 0; k < 2; ++k) {
          const float* xx = levels(best_k, k);
          const auto& pg = lat.points[index[k]];
          for (int j = 0; j < 8; ++j) {
            const float wj = weight[8 * k + j];
            const float q = xx[(pg[j] - 1) / 2];
            sumqx_f += wj * q * xb[8 * k + j];
            sumq2_f += wj * q * q;
          }
        }
        if (sumqx_f > 0 && sumq2_f > 0) scale = sumqx_f / sumq2_f;
      }
      qs[2 * ib] = static_cast<uint8_t>(index[0] & 255);
      qs[2 * ib + 1] = static_cast<uint8_t>(index[1] & 255);
      qh[ib] = static_cast<uint8_t>((index[0] >> 8) | ((index[1] >> 8) << 4));
      check_scale(scale, "iq1_m", ib, ibl);
      scales[ib] = scale;
      shifts[ib] = static_cast<int8_t>(best_k);
      max_scale = gmax(max_scale, scale);
    }
    if (max_scale == 0) continue;
    float d = max_scale / 15;
    const float id = 1 / d;
    float sumqx_f = 0, sumq2_f = 0;
    for (int ib = 0; ib < kQK / kBs; ++ib) {
      const int l = std::max(0, std::min(7, nearest_int(0.5f * (id * scales[ib] - 1))));
      sc[ib / 4] |= static_cast<uint16_t>(l << (3 * (ib % 4)));
      qh[ib] |= masks[shifts[ib]];
      const float* xb = xbl + kBs * ib;
      group_weights16(xb, ib);
      for (int k = 0; k < 2; ++k) {
        const float* xx = levels(shifts[ib], k);
        const int g = qs[2 * ib + k] + ((qh[ib] << (8 - 4 * k)) & 0x700);
        const auto& pg = lat.points[g];
        for (int j = 0; j < 8; ++j) {
          const float wj = weight[8 * k + j];
          const float q = xx[(pg[j] - 1) / 2] * static_cast<float>(2 * l + 1);
          sumqx_f += wj * q * xb[8 * k + j];
          sumq2_f += wj * q * q;
        }
      }
    }
    if (sumq2_f > 0) d = sumqx_f / sumq2_f;
    const uint16_t s16 = fp32_to_fp16(d * 1.1125f);
    sc[0] |= static_cast<uint16_t>((s16 & 0x000f) << 12);
    sc[1] |= static_cast<uint16_t>((s16 & 0x00f0) << 8);
    sc[2] |= static_cast<uint16_t>((s16 & 0x0f00) << 4);
    sc[3] |= static_cast<uint16_t>(s16 & 0xf000);
    std::memcpy(dst + 48, sc, 8);
  }
}

// ---- IQ2_XS / IQ2_S: groups of 16 (two lattice points of 8), a 4-bit scale per 16 ----

// ggml's quantize_row_iq2_xs_impl (xs: 512-point grid, 7 sign bits with implied parity,
// importance required; 74-byte blocks: d, 32 u16 of 9-bit index and signs, 8 scale bytes) and
// quantize_row_iq2_s_impl (s: 1024-point grid, 8 stored sign bits, importance optional; 82-byte
// blocks: d, 32 low index bytes, 32 sign bytes, 8 bytes of index high bits, 8 scale bytes).
template <bool kS>
void encode_iq2_xs_s_row(const float* x, uint8_t* dst, int64_t n, const float* qw) {
  const Lattice& lat = kS ? iq2_s_lattice() : iq2_xs_lattice();
  constexpr int kMaxQ = 3;
  constexpr int kBytes = kS ? 82 : 74;
  constexpr float kEps = kS ? 1e-8f : kGroupMaxEps;
  const char* name = kS ? "iq2_s" : "iq2_xs";
  for (int64_t ibl = 0; ibl < n / kQK; ++ibl, dst += kBytes) {
    std::memset(dst, 0, kBytes);
    uint8_t* block_scales = dst + kBytes - 8;
    uint16_t q2[32] = {};  // xs: index | signs << 9
    const float* xbl = x + kQK * ibl;
    float scales[16];
    float max_scale = 0;
    float sumx2 = 0;
    for (int i = 0; i < kQK; ++i) sumx2 += xbl[i] * xbl[i];
    const float sigma2 = (kS ? 2 * sumx2 : sumx2) / kQK;
    for (int ib = 0; ib < 16; ++ib) {
      const float* xb = xbl + 16 * ib;
      float weight[16], waux[16], xval[16];
      int8_t L[16] = {};
      bool on_grid[2] = {true, true};
      uint8_t block_signs[2];
      if (qw) {
        const float* w = qw + kQK * ibl + 16 * ib;
        for (int i = 0; i < 16; ++i) weight[i] = w[i] * std::sqrt(sigma2 + xb[i] * xb[i]);
      } else {
        for (int i = 0; i < 16; ++i) weight[i] = 0.25f * sigma2 + xb[i] * xb[i];
      }
      for (int i = 0; i < 16; ++i) waux[i] = std::sqrt(weight[i]);
      if constexpr (kS) {
        for (int k = 0; k < 2; ++k) {
          uint8_t sg = 0;
          for (int i = 0; i < 8; ++i) {
            if (xb[8 * k + i] >= 0) {
              xval[8 * k + i] = xb[8 * k + i];
            } else {
              xval[8 * k + i] = -xb[8 * k + i];
              sg |= static_cast<uint8_t>(1 << i);
            }
          }
          block_signs[k] = sg;
        }
      } else {
        even_signs(xb, weight, xval, block_signs, 2);
      }
      float max = xval[0];
      for (int i = 1; i < 16; ++i) max = gmax(max, xval[i]);
      if (max < kEps) {
        scales[ib] = 0;
        continue;
      }
      float scale = max / (2 * kMaxQ - 1);
      sweep_scales<8, 2, kMaxQ>(lat, 16, xval, waux, weight, -9, 9, 2 * kMaxQ - 1, 0.1f, max, scale,
                                L, on_grid);
      refit_off_grid<8, 2, kMaxQ>(lat, 16, xval, waux, weight, false, scale, L, on_grid);
      if (scale < 0) {
        scale = -scale;
        for (int k = 0; k < 2; ++k)
          block_signs[k] = static_cast<uint8_t>(kS ? ~block_signs[k] : ~block_signs[k] & 127);
      }
      for (int k = 0; k < 2; ++k) {
        const int g = grid_index_of<8, 2>(lat, L + 8 * k, name, 2 * ib + k, ibl);
        const int i8 = 2 * ib + k;
        if constexpr (kS) {
          dst[2 + i8] = static_cast<uint8_t>(g & 255);
          dst[66 + i8 / 4] |= static_cast<uint8_t>((g >> 8) << (2 * (i8 % 4)));
          dst[2 + 32 + i8] = block_signs[k];
        } else {
          q2[i8] = static_cast<uint16_t>(g | (block_signs[k] << 9));
        }
      }
      check_scale(scale, name, ib, ibl);
      scales[ib] = scale;
      max_scale = gmax(max_scale, scale);
    }
    if (max_scale == 0) continue;  // d and everything else stay zero
    const float d = max_scale / 31;
    const uint16_t dh = fp32_to_fp16(kS ? d * 0.9875f : d);
    std::memcpy(dst, &dh, 2);
    const float id = 1 / d;
    for (int ib = 0; ib < 16; ++ib) {
      const int l = std::max(0, std::min(15, nearest_int(0.5f * (id * scales[ib] - 1))));
      if (ib % 2 == 0)
        block_scales[ib / 2] = static_cast<uint8_t>(l);
      else
        block_scales[ib / 2] |= static_cast<uint8_t>(l << 4);
    }
    if constexpr (!kS) std::memcpy(dst + 2, q2, 64);
  }
}

// ---- IQ3_XXS / IQ3_S: groups of 4 magnitudes on a 256- / 512-point lattice of odd values up
// to 15, a 4-bit scale per 32 ----

constexpr float kGroupMaxEpsIq3Xxs = 1e-8f;

// ggml's quantize_row_iq3_xxs_impl(256, ...): 98-byte blocks of 64 grid indices, then per 32
// values a u32 of four 7-bit sign groups and the 4-bit scale.
void encode_iq3_xxs_row(const float* x, uint8_t* dst, int64_t n, const float* qw) {
  const Lattice& lat = iq3_xxs_lattice();
  constexpr int kMaxQ = 8;
  for (int64_t ibl = 0; ibl < n / kQK; ++ibl, dst += 98) {
    const float* xbl = x + kQK * ibl;
    uint8_t q3[96] = {};
    uint32_t scales_and_signs[8] = {};
    float scales[8];
    float max_scale = 0;
    float sumx2 = 0;
    for (int i = 0; i < kQK; ++i) sumx2 += xbl[i] * xbl[i];
    const float sigma2 = 2 * sumx2 / kQK;
    for (int ib = 0; ib < 8; ++ib) {
      const float* xb = xbl + 32 * ib;
      float weight[32], waux[32], xval[32];
      int8_t L[32] = {};
      bool on_grid[8];
      uint8_t block_signs[4];
      group_weights(xb, qw ? qw + kQK * ibl + 32 * ib : nullptr, sigma2, weight, waux);
      even_signs(xb, weight, xval, block_signs);
      float max = xval[0];
      for (int i = 1; i < 32; ++i) max = gmax(max, xval[i]);
      if (max < kGroupMaxEpsIq3Xxs) {
        scales[ib] = 0;
        continue;
      }
      float scale = max / (2 * kMaxQ - 1);
      std::fill(on_grid, on_grid + 8, true);
      sweep_scales<4, 3, kMaxQ>(lat, 32, xval, waux, weight, -15, 15, 2 * kMaxQ - 1, 0.2f, max,
                                scale, L, on_grid);
      refit_off_grid<4, 3, kMaxQ>(lat, 32, xval, waux, weight, false, scale, L, on_grid);
      if (scale < 0) {
        scale = -scale;
        for (int k = 0; k < 4; ++k) block_signs[k] = static_cast<uint8_t>(~block_signs[k] & 127);
      }
      for (int k = 0; k < 8; ++k)
        q3[8 * ib + k] =
            static_cast<uint8_t>(grid_index_of<4, 3>(lat, L + 4 * k, "iq3_xxs", 8 * ib + k, ibl));
      scales_and_signs[ib] = block_signs[0] | (block_signs[1] << 7) | (block_signs[2] << 14) |
                             (static_cast<uint32_t>(block_signs[3]) << 21);
      check_scale(scale, "iq3_xxs", ib, ibl);
      scales[ib] = scale;
      max_scale = gmax(max_scale, scale);
    }
    uint16_t dh = fp32_to_fp16(0.f);
    if (max_scale != 0) {
      const float d = max_scale / 31;
      dh = fp32_to_fp16(d * 1.0125f);
      const float id = 1 / d;
      for (int ib = 0; ib < 8; ++ib) {
        const int l = std::max(0, std::min(15, nearest_int(0.5f * (id * scales[ib] - 1))));
        scales_and_signs[ib] |= static_cast<uint32_t>(l) << 28;
      }
      std::memcpy(dst + 2, q3, 64);
      std::memcpy(dst + 66, scales_and_signs, 32);
    } else {
      std::memset(dst + 2, 0, 96);
    }
    std::memcpy(dst, &dh, 2);
  }
}

// ggml's quantize_row_iq3_s_impl(32, ...): 110-byte blocks of d, 64 low index bytes, 8 bytes
// of index high bits, 32 sign bytes and 4 bytes of paired 4-bit scales. All 8 signs are
// stored. As in ggml, an all-zero group of 32 does not advance the index and sign positions.
void encode_iq3_s_row(const float* x, uint8_t* dst, int64_t n, const float* qw) {
  const Lattice& lat = iq3_s_lattice();
  constexpr int kMaxQ = 8;
  for (int64_t ibl = 0; ibl < n / kQK; ++ibl, dst += 110) {
    std::memset(dst, 0, 110);
    uint8_t* qs = dst + 2;
    uint8_t* qh = dst + 66;
    uint8_t* signs = dst + 74;
    uint8_t* block_scales = dst + 106;
    const float* xbl = x + kQK * ibl;
    float scales[8];
    float max_scale = 0;
    float sumx2 = 0;
    for (int i = 0; i < kQK; ++i) sumx2 += xbl[i] * xbl[i];
    const float sigma2 = 2 * sumx2 / kQK;
    for (int ib = 0; ib < 8; ++ib) {
      const float* xb = xbl + 32 * ib;
      float weight[32], waux[32], xval[32];
      int8_t L[32] = {};
      bool on_grid[8] = {};
      uint8_t block_signs[4];
      group_weights(xb, qw ? qw + kQK * ibl + 32 * ib : nullptr, sigma2, weight, waux);
      for (int k = 0; k < 4; ++k) {
        uint8_t sg = 0;
        for (int i = 0; i < 8; ++i) {
          if (xb[8 * k + i] >= 0) {
            xval[8 * k + i] = xb[8 * k + i];
          } else {
            xval[8 * k + i] = -xb[8 * k + i];
            sg |= static_cast<uint8_t>(1 << i);
          }
        }
        block_signs[k] = sg;
      }
      float max = xval[0];
      for (int i = 1; i < 32; ++i) max = gmax(max, xval[i]);
      if (max == 0) {
        scales[ib] = 0;
        continue;
      }
      float scale = max / (2 * kMaxQ - 1);
      sweep_scales<4, 3, kMaxQ>(lat, 32, xval, waux, weight, -9, 9, 2 * kMaxQ - 1, 0.2f, max, scale,
                                L, on_grid);
      refit_off_grid<4, 3, kMaxQ>(lat, 32, xval, waux, weight, true, scale, L, on_grid);
      if (scale < 0) {
        scale = -scale;
        for (int k = 0; k < 4; ++k) block_signs[k] = static_cast<uint8_t>(~block_signs[k]);
      }
      for (int k = 0; k < 8; ++k) {
        const int g = grid_index_of<4, 3>(lat, L + 4 * k, "iq3_s", 8 * ib + k, ibl);
        qs[k] = static_cast<uint8_t>(g & 255);
        qh[(ib * 8 + k) / 8] |= static_cast<uint8_t>((g >> 8) << ((ib * 8 + k) % 8));
      }
      qs += 8;
      std::memcpy(signs, block_signs, 4);
      signs += 4;
      check_scale(scale, "iq3_s", ib, ibl);
      scales[ib] = scale;
      max_scale = gmax(max_scale, scale);
    }
    if (max_scale == 0) continue;
    const float d = max_scale / 31;
    const uint16_t dh = fp32_to_fp16(d * 1.033f);
    std::memcpy(dst, &dh, 2);
    const float id = 1 / d;
    for (int ib = 0; ib < 8; ib += 2) {
      const int l1 = std::max(0, std::min(15, nearest_int(0.5f * (id * scales[ib] - 1))));
      const int l2 = std::max(0, std::min(15, nearest_int(0.5f * (id * scales[ib + 1] - 1))));
      block_scales[ib / 2] = static_cast<uint8_t>(l1 | (l2 << 4));
    }
  }
}

// IQ4_NL rows: blocks of 32 values (18 bytes: the fp16 scale, then the packed levels).
void encode_iq4_nl_row(const float* x, uint8_t* dst, int64_t n, const float* qw) {
  for (int64_t ib = 0; ib < n / 32; ++ib, dst += 18) {
    uint16_t dh, unused_h;
    iq4_super_block(32, x + 32 * ib, qw ? qw + 32 * ib : nullptr, &dh, dst + 2, &unused_h, nullptr);
    std::memcpy(dst, &dh, 2);
  }
}

// IQ4_XS rows: super-blocks of 256 (136 bytes: d, the high scale bits, the low scale nibbles,
// the packed levels).
void encode_iq4_xs_row(const float* x, uint8_t* dst, int64_t n, const float* qw) {
  for (int64_t ib = 0; ib < n / kQK; ++ib, dst += 136) {
    uint16_t dh, scales_h;
    iq4_super_block(kQK, x + kQK * ib, qw ? qw + kQK * ib : nullptr, &dh, dst + 8, &scales_h,
                    dst + 4);
    std::memcpy(dst, &dh, 2);
    std::memcpy(dst + 2, &scales_h, 2);
  }
}

// Every encoder here works a row at a time, as ggml's quantize_iq* loops do; a row of
// n_per_row values takes n_per_row / block_size blocks of block_bytes. (gguf::quantize has
// checked the sizes, and that the types needing importance weights got them.)
using RowFn = void (*)(const float* x, uint8_t* dst, int64_t n, const float* qw);
void encode_rows(RowFn row, int64_t block_size, int64_t block_bytes, const float* src, uint8_t* dst,
                 int64_t nrows, int64_t n_per_row, const float* imatrix) {
  const int64_t row_bytes = n_per_row / block_size * block_bytes;
  for (int64_t r = 0; r < nrows; ++r)
    row(src + r * n_per_row, dst + r * row_bytes, n_per_row, imatrix);
}

}  // namespace

void encode_iq1_s(const float* src, uint8_t* dst, int64_t nrows, int64_t n, const float* qw) {
  encode_rows(encode_iq1_s_row, kQK, 50, src, dst, nrows, n, qw);
}
void encode_iq1_m(const float* src, uint8_t* dst, int64_t nrows, int64_t n, const float* qw) {
  encode_rows(encode_iq1_m_row, kQK, 56, src, dst, nrows, n, qw);
}
void encode_iq2_xxs(const float* src, uint8_t* dst, int64_t nrows, int64_t n, const float* qw) {
  encode_rows(encode_iq2_xxs_row, kQK, 66, src, dst, nrows, n, qw);
}
void encode_iq2_xs(const float* src, uint8_t* dst, int64_t nrows, int64_t n, const float* qw) {
  encode_rows(encode_iq2_xs_s_row<false>, kQK, 74, src, dst, nrows, n, qw);
}
void encode_iq2_s(const float* src, uint8_t* dst, int64_t nrows, int64_t n, const float* qw) {
  encode_rows(encode_iq2_xs_s_row<true>, kQK, 82, src, dst, nrows, n, qw);
}
void encode_iq3_xxs(const float* src, uint8_t* dst, int64_t nrows, int64_t n, const float* qw) {
  encode_rows(encode_iq3_xxs_row, kQK, 98, src, dst, nrows, n, qw);
}
void encode_iq3_s(const float* src, uint8_t* dst, int64_t nrows, int64_t n, const float* qw) {
  encode_rows(encode_iq3_s_row, kQK, 110, src, dst, nrows, n, qw);
}
void encode_iq4_nl(const float* src, uint8_t* dst, int64_t nrows, int64_t n, const float* qw) {
  encode_rows(encode_iq4_nl_row, 32, 18, src, dst, nrows, n, qw);
}
void encode_iq4_xs(const float* src, uint8_t* dst, int64_t nrows, int64_t n, const float* qw) {
  encode_rows(encode_iq4_xs_row, kQK, 136, src, dst, nrows, n, qw);
}

}  // namespace gguf::detail::iq

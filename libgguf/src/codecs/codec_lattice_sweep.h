// Internal: the lattice types' trial-scale sweep with AVX-512 (codec_lattice_sweep_avx512.cpp),
// the fast twin of the portable sweep_scales + refit_off_grid (codec_iquants_lattice.h) that the
// IQ2 and IQ3 encoders run; both give the same codes and scale.
#pragma once

#include <cstdint>
#include <vector>

namespace gguf::detail::iq {

// The lattice as the kernel reads it: map[tuple] is the grid index of a tuple of codes (Bits
// per code) or, negated minus one, the offset of its neighbour list in lists; a list holds its
// count, then the tuples of the neighbouring grid points in the encoder's order.
struct SweepLattice {
  const int* map = nullptr;
  std::vector<uint16_t> lists;
};

// Which groups the refit at the chosen scale moves onto the lattice again.
enum class Refit {
  kAlways,         // every group, whatever the trials found (IQ2_XXS)
  kOffGridGroups,  // the groups the winning trial had off the grid (IQ2_XS, IQ2_S, IQ3_XXS)
  kAllWhenAnyOff,  // every group, when the winner had one off the grid or no trial won (IQ3_S)
};

// A sweep: trial inverse scales (2 * kMaxQ - 1 + step * is) / den, is = lo..hi, over n values
// in groups of Dim; then the refit.
struct Sweep {
  int n = 32;
  int lo = -6, hi = 6;
  float step = 0.1f;
  float den = 1;
  Refit refit = Refit::kAlways;
};

// The sweep and the refit for one group of n (xval magnitudes, waux search weights, weight fit
// weights). On entry scale and L hold the start; on exit the result, as the portable
// sweep_scales and refit_off_grid leave them. Throws gguf::Error when a lattice search finds no
// finite candidate. Call only when codec_avx512().
// IQ2: groups of 8 codes 0..2, two bits each (n = 32 or 16).
void iq2_sweep_avx512(const SweepLattice& lat, const Sweep& sweep, const float* xval,
                      const float* waux, const float* weight, float& scale, int8_t* L);
// IQ3: groups of 4 codes 0..7, three bits each (n = 32).
void iq3_sweep_avx512(const SweepLattice& lat, const Sweep& sweep, const float* xval,
                      const float* waux, const float* weight, float& scale, int8_t* L);

// IQ1: the tuple of the grid point nearest to the off-grid tuple u (8 codes 0..2) for the
// values x under weight, at scale with the levels xg of codes 0..2, as the portable search
// picks it (error terms weight * diff * diff, the first of equal sums).
int iq1_best_tuple_avx512(const SweepLattice& lat, int u, const float* x, const float* weight,
                          float scale, const float* xg);

}  // namespace gguf::detail::iq

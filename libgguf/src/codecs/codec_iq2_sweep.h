// Internal: IQ2_XXS's trial-scale sweep with AVX-512 (codec_iq2_sweep_avx512.cpp), the fast twin
// of the portable sweep in the i-quant encoder; both give the same codes and scale.
#pragma once

#include <cstdint>
#include <vector>

namespace gguf::detail::iq {

// The lattice as the kernel reads it: map[tuple] is the grid index of an 8-code tuple (two bits
// per code) or, negated minus one, the offset of its neighbour list in lists; a list holds its
// count, then the tuples of the neighbouring grid points in the encoder's order.
struct Iq2SweepLattice {
  const int* map = nullptr;
  std::vector<uint16_t> lists;
};

// The sweep over inverse scales (5 + 0.1 is) / eff_max, is = -6..6, then the refit of every
// group at the chosen scale, for one group of 32 (xval magnitudes, waux search weights, weight
// fit weights). On entry scale and L hold the start (search_positive's); on exit the result,
// as the encoder's sweep_scales and refit_off_grid(every_group) leave them. Throws gguf::Error
// when a lattice search finds no finite candidate. Call only when codec_avx512().
void iq2_xxs_sweep_avx512(const Iq2SweepLattice& lat, const float* xval, const float* waux,
                          const float* weight, float eff_max, float& scale, int8_t* L);

}  // namespace gguf::detail::iq

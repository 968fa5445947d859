// The lattice grids of the i-quant encoders, built once: points, and each off-grid tuple's
// nearest points in the order ggml's iq2xs_init_impl / iq3xs_init_impl build them.
#include "codecs/codec_iquants_lattice.h"

namespace gguf::detail::iq {
namespace {

// codes[k][j]: the code of element j of grid point k. Neighbour lists are built only for
// tuples whose codes are all at most max_code: the encoders clamp codes to that range, so
// other tuples are never looked up (IQ2: 3^8 of the 4^8 tuples).
Lattice make_lattice(const std::vector<std::array<int, 8>>& codes, int dim, int bits, int map_size,
                     int nwant, int max_code) {
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
    bool reachable = true;
    for (int k = 0; k < dim; ++k) {
      reachable = reachable && ((i >> (bits * k)) & mask) <= max_code;
      pos[k] = static_cast<int8_t>(2 * ((i >> (bits * k)) & mask) + 1);
    }
    if (!reachable) continue;
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
  return make_lattice(codes, 8, 2, 43692, nwant, /*max_code=*/2);  // kMaxQ 3
}

// IQ3 grids: 4 magnitudes, three bits per code; code = byte / divisor (IQ3_XXS stores
// 4, 12, ..., 62 and IQ3_S 1, 3, ..., 15).
template <size_t N>
Lattice iq3_lattice(const uint32_t (&grid)[N], int divisor, int nwant) {
  std::vector<std::array<int, 8>> codes(N);
  for (size_t k = 0; k < N; ++k)
    for (int j = 0; j < 4; ++j)
      codes[k][j] = static_cast<int>((grid[k] >> (8 * j)) & 0xff) / divisor;
  return make_lattice(codes, 4, 3, 4096, nwant, /*max_code=*/7);
}

}  // namespace

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
    return make_lattice(codes, 8, 2, 43692, 3, /*max_code=*/3);
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

SweepLattice sweep_lattice(const Lattice& lat, int bits) {
  SweepLattice out;
  out.map = lat.map.data();
  out.lists = lat.neighbours;
  for (size_t start = 0; start < out.lists.size(); start += out.lists[start] + 1u)
    for (size_t j = start + 1; j <= start + out.lists[start]; ++j) {
      int tuple = 0;
      for (int i = 0; i < lat.dim; ++i)
        tuple |= ((lat.points[out.lists[j]][i] - 1) / 2) << (bits * i);
      out.lists[j] = static_cast<uint16_t>(tuple);
    }
  return out;
}

}  // namespace gguf::detail::iq

// Constant tables of the i-quant and fp4 formats: lattice grids, sign patterns and non-linear
// levels. They are facts of the file format (as ggml-common.h defines them), shared by the
// decoders and encoders of codec_iquants.cpp and codec_misc.cpp.
#pragma once

#include <array>
#include <bit>
#include <cstdint>

namespace gguf::detail::iq {

// Grid points: entry i packs the eight (IQ2, IQ1) or four (IQ3) unsigned magnitudes of point i,
// element j in byte j (IQ1 bytes are signed: -1, 0 or +1).
extern const uint64_t kIq2XxsGrid[256];
extern const uint64_t kIq2XsGrid[512];
extern const uint64_t kIq2SGrid[1024];
extern const uint32_t kIq3XxsGrid[256];
extern const uint32_t kIq3SGrid[512];
extern const uint64_t kIq1SGrid[2048];

// IQ2/IQ3 store 7 sign bits per group of 8; the eighth makes the number of negatives even.
inline constexpr std::array<uint8_t, 128> kSignsIq2 = [] {
  std::array<uint8_t, 128> t{};
  for (unsigned i = 0; i < 128; ++i)
    t[i] = static_cast<uint8_t>(i | ((std::popcount(i) & 1u) << 7));
  return t;
}();

// IQ1_S/IQ1_M shift every grid point by +-1/8 of the block scale.
inline constexpr float kIq1Delta = 0.125f;

// IQ4_NL/IQ4_XS: the 16 non-linear levels a 4-bit code selects.
inline constexpr std::array<int8_t, 16> kValuesIq4Nl = {-127, -104, -83, -65, -49, -35, -22, -10,
                                                        1,    13,   25,  38,  53,  69,  89,  113};

// MXFP4/NVFP4: E2M1 values times two (code bit 3 is the sign); scales carry the other half.
inline constexpr std::array<int8_t, 16> kValuesFp4 = {0, 1,  2,  3,  4,  6,  8,  12,
                                                      0, -1, -2, -3, -4, -6, -8, -12};

// Byte j of a packed grid point.
inline constexpr uint8_t grid_byte(uint64_t point, int j) {
  return static_cast<uint8_t>(point >> (8 * j));
}

}  // namespace gguf::detail::iq

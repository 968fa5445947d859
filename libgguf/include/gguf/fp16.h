// IEEE half and bfloat16 conversions with ggml's rounding: fp32->fp16 rounds to nearest
// even (>= 65520 becomes inf, NaN becomes a quiet NaN 0x7e00), fp32->bf16 rounds to nearest
// even and quiets NaNs by setting bit 6.
#pragma once

#include <bit>
#include <cmath>
#include <cstdint>

namespace gguf {

inline float fp16_to_fp32(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000) << 16;
  const uint32_t exp = (h >> 10) & 0x1F;
  const uint32_t man = h & 0x3FF;
  if (exp == 0x1F) return std::bit_cast<float>(sign | 0x7F800000u | (man << 13));
  if (exp == 0) {
    // Subnormal (or zero): man * 2^-24 is exact in fp32.
    const float v = static_cast<float>(man) * 0x1p-24f;
    return sign ? -v : v;
  }
  return std::bit_cast<float>(sign | ((exp + 112) << 23) | (man << 13));
}

inline uint16_t fp32_to_fp16(float f) {
  const uint32_t x = std::bit_cast<uint32_t>(f);
  const uint16_t sign = static_cast<uint16_t>((x >> 16) & 0x8000);
  const uint32_t ax = x & 0x7FFFFFFFu;
  if (ax > 0x7F800000u) return sign | 0x7E00;
  if (ax >= 0x477FF000u) return sign | 0x7C00;  // rounds to >= 65536: infinity
  if (ax < 0x38800000u) {
    // Result is subnormal or zero: |f| * 2^24 is exact; round half to even.
    const float v = std::bit_cast<float>(ax) * 0x1p24f;
    return sign | static_cast<uint16_t>(std::nearbyint(v));
  }
  const uint32_t e = (ax >> 23) - 112;
  const uint32_t m = ax & 0x7FFFFF;
  uint32_t h = (e << 10) | (m >> 13);
  const uint32_t rem = m & 0x1FFF;
  if (rem > 0x1000 || (rem == 0x1000 && (h & 1))) ++h;  // a carry correctly bumps the exponent
  return sign | static_cast<uint16_t>(h);
}

inline float bf16_to_fp32(uint16_t h) { return std::bit_cast<float>(static_cast<uint32_t>(h) << 16); }

inline uint16_t fp32_to_bf16(float f) {
  const uint32_t x = std::bit_cast<uint32_t>(f);
  if ((x & 0x7FFFFFFFu) > 0x7F800000u) return static_cast<uint16_t>((x >> 16) | 64);
  return static_cast<uint16_t>((x + (0x7FFF + ((x >> 16) & 1))) >> 16);
}

}  // namespace gguf

// IEEE half and bfloat16 conversions with ggml's results on x86-64: fp32->fp16 rounds to
// nearest even (>= 65520 becomes inf, NaN becomes the quiet NaN 0x7e00 with its sign),
// fp32->bf16 rounds to nearest even and quiets NaNs by setting bit 6.
#pragma once

#include <bit>
#include <cstdint>

namespace gguf {

namespace fp16_detail {
// c ? a : b through a mask: GCC keeps ?: as control flow here, which stops vectorisation.
inline uint32_t select(bool c, uint32_t a, uint32_t b) {
  const uint32_t m = 0u - static_cast<uint32_t>(c);
  return (a & m) | (b & ~m);
}
}  // namespace fp16_detail

// Branch-free so that row loops vectorise.
inline float fp16_to_fp32_branchless(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000) << 16;
  const uint32_t exp = (h >> 10) & 0x1F;
  const uint32_t man = h & 0x3FF;
  const uint32_t normal = ((exp + 112) << 23) | (man << 13);
  // ggml widens through float arithmetic, which turns a signalling NaN into a quiet one.
  const uint32_t special =
      0x7F800000u | (man << 13) | fp16_detail::select(man != 0, 0x00400000u, 0);
  // Subnormal halves (and zero) are man * 2^-24, exact in fp32.
  const uint32_t sub =
      std::bit_cast<uint32_t>(static_cast<float>(static_cast<int32_t>(man)) * 0x1p-24f);
  const uint32_t bits =
      fp16_detail::select(exp == 0, sub, fp16_detail::select(exp == 0x1F, special, normal));
  return std::bit_cast<float>(sign | bits);
}

// For single values (block scales): normal halves, nearly all of them, just rebias.
inline float fp16_to_fp32(uint16_t h) {
  const uint32_t exp = h & 0x7C00u;
  if (exp != 0 && exp != 0x7C00u) [[likely]]
    return std::bit_cast<float>(((h & 0x8000u) << 16) | (((h & 0x7FFFu) << 13) + 0x38000000u));
  return fp16_to_fp32_branchless(h);
}

inline uint16_t fp32_to_fp16(float f) {
  const uint32_t x = std::bit_cast<uint32_t>(f);
  const uint32_t sign = (x >> 16) & 0x8000;
  const uint32_t ax = x & 0x7FFFFFFFu;
  // Below 2^-14 the result is subnormal: adding 0.5 leaves a float whose last mantissa bit
  // weighs 2^-24, so the hardware rounds |f| to a multiple of 2^-24, half to even, and the
  // mantissa difference is the half's bits (0x400 when it rounds up to the smallest normal).
  const uint32_t sub = std::bit_cast<uint32_t>(std::bit_cast<float>(ax) + 0.5f) - 0x3F000000u;
  // Normal range: rebias the exponent, round the 13 dropped bits half to even; a mantissa
  // carry correctly bumps the exponent.
  const uint32_t norm = (ax - 0x38000000u + 0x0FFFu + ((ax >> 13) & 1)) >> 13;
  uint32_t h = fp16_detail::select(ax < 0x38800000u, sub, norm);
  h = fp16_detail::select(ax >= 0x477FF000u, 0x7C00u, h);  // rounds to >= 65536: infinity
  h = fp16_detail::select(ax > 0x7F800000u, 0x7E00u, h);
  return static_cast<uint16_t>(sign | h);
}

inline float bf16_to_fp32(uint16_t h) {
  return std::bit_cast<float>(static_cast<uint32_t>(h) << 16);
}

inline uint16_t fp32_to_bf16(float f) {
  const uint32_t x = std::bit_cast<uint32_t>(f);
  const uint32_t rounded = (x + (0x7FFFu + ((x >> 16) & 1))) >> 16;
  const uint32_t quiet_nan = (x >> 16) | 64;
  return static_cast<uint16_t>((x & 0x7FFFFFFFu) > 0x7F800000u ? quiet_nan : rounded);
}

}  // namespace gguf

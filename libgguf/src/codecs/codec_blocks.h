// Internal: the block layout of every quantized ggml type (the facts of ggml-common.h), one
// header for the codecs and for what reads blocks elsewhere (check's scan of block scales uses
// offsetof here). Multi-byte fields are little-endian and copied with memcpy at their offsetof()
// positions: payloads are byte streams without alignment.
#pragma once

#include <cstdint>

namespace gguf::detail {

inline constexpr int kQK_K = 256;  // elements per super-block (ggml's QK_K)

// ---- legacy: blocks of 32 ----

struct BlockQ4_0 {
  uint16_t d;
  uint8_t qs[16];  // element j in the low nibble of qs[j], element j+16 in the high nibble
};
struct BlockQ4_1 {
  uint16_t d, m;
  uint8_t qs[16];
};
struct BlockQ5_0 {
  uint16_t d;
  uint8_t qh[4];  // bit j of the little-endian u32 is the fifth bit of element j
  uint8_t qs[16];
};
struct BlockQ5_1 {
  uint16_t d, m;
  uint8_t qh[4];
  uint8_t qs[16];
};
struct BlockQ8_0 {
  uint16_t d;
  int8_t qs[32];
};
struct BlockQ8_1 {
  uint16_t d, s;  // s = d * sum(qs), a cache for dot products; decoding ignores it
  int8_t qs[32];
};
static_assert(sizeof(BlockQ4_0) == 18);
static_assert(sizeof(BlockQ4_1) == 20);
static_assert(sizeof(BlockQ5_0) == 22);
static_assert(sizeof(BlockQ5_1) == 24);
static_assert(sizeof(BlockQ8_0) == 34);
static_assert(sizeof(BlockQ8_1) == 36);

// ---- k-quants: super-blocks of 256 ----

// Scales of 16 groups: low nibble scale, high nibble min. Value = d*sc*q - dmin*m.
struct BlockQ2_K {
  uint8_t scales[kQK_K / 16];
  uint8_t qs[kQK_K / 4];  // 2-bit quants, four 32-element planes per 128 elements
  uint16_t d;             // fp16
  uint16_t dmin;          // fp16
};
static_assert(sizeof(BlockQ2_K) == 84);

// 16 groups with 6-bit signed scales (biased by 32); value = d*(sc-32)*(q-4).
struct BlockQ3_K {
  uint8_t hmask[kQK_K / 8];  // bit 2 of each quant; bit b of byte m covers element 32*b + m
  uint8_t qs[kQK_K / 4];     // low two bits, same plane layout as q2_K
  uint8_t scales[12];        // 16 x 6 bits: low nibbles in [0, 8), high pairs in [8, 12)
  uint16_t d;                // fp16
};
static_assert(sizeof(BlockQ3_K) == 110);

// 8 groups of 32 with 6-bit scales and mins packed into 12 bytes; value = d*sc*q - dmin*m.
struct BlockQ4_K {
  uint16_t d;
  uint16_t dmin;
  uint8_t scales[12];
  uint8_t qs[kQK_K / 2];  // nibbles: low = element l, high = element l + 32 of each 64
};
static_assert(sizeof(BlockQ4_K) == 144);

// Like q4_K plus a fifth bit per quant.
struct BlockQ5_K {
  uint16_t d;
  uint16_t dmin;
  uint8_t scales[12];
  uint8_t qh[kQK_K / 8];  // bit 2k: element 64k + l, bit 2k+1: element 64k + 32 + l
  uint8_t qs[kQK_K / 2];
};
static_assert(sizeof(BlockQ5_K) == 176);

// 16 groups with int8 scales; value = d*sc*(q-32), q 6 bits.
struct BlockQ6_K {
  uint8_t ql[kQK_K / 2];
  uint8_t qh[kQK_K / 4];
  int8_t scales[kQK_K / 16];
  uint16_t d;
};
static_assert(sizeof(BlockQ6_K) == 210);

// Activation type: fp32 scale, int8 quants, per-16 sums of the quants.
struct BlockQ8_K {
  float d;
  int8_t qs[kQK_K];
  int16_t bsums[kQK_K / 16];
};
static_assert(sizeof(BlockQ8_K) == 292);

// ---- i-quants ----

struct BlockIq2Xxs {
  uint16_t d;
  uint8_t qs[64];  // per 32 values: 4 grid indices, then 4x7 sign bits and a 4-bit scale
};
static_assert(sizeof(BlockIq2Xxs) == 66);

struct BlockIq2Xs {
  uint16_t d;
  uint16_t qs[32];    // 9-bit grid index, 7 sign bits
  uint8_t scales[8];  // two 4-bit scales per 32 values
};
static_assert(sizeof(BlockIq2Xs) == 74);

struct BlockIq2S {
  uint16_t d;
  uint8_t qs[32];  // low 8 bits of the grid indices
  uint8_t signs[32];
  uint8_t qh[8];  // high 2 bits of the grid indices, four per byte
  uint8_t scales[8];
};
static_assert(sizeof(BlockIq2S) == 82);

struct BlockIq3Xxs {
  uint16_t d;
  uint8_t qs[64];            // grid indices, 4 values each
  uint8_t scales_signs[32];  // per 32 values: 4x7 sign bits and a 4-bit scale
};
static_assert(sizeof(BlockIq3Xxs) == 98);

struct BlockIq3S {
  uint16_t d;
  uint8_t qs[64];  // low 8 bits of the grid indices
  uint8_t qh[8];   // ninth bit of the grid indices
  uint8_t signs[32];
  uint8_t scales[4];  // two 4-bit scales per 64 values
};
static_assert(sizeof(BlockIq3S) == 110);

struct BlockIq1S {
  uint16_t d;
  uint8_t qs[32];  // low 8 bits of the grid indices
  uint16_t qh[8];  // per 32 values: 4x3 index bits, 3-bit scale, delta sign
};
static_assert(sizeof(BlockIq1S) == 50);

struct BlockIq1M {
  uint8_t qs[32];     // low 8 bits of the grid indices
  uint8_t qh[16];     // per 16 values: 2x(3 index bits, delta sign)
  uint8_t scales[8];  // 3-bit scales; the top nibbles of the four u16 hold the fp16 scale
};
static_assert(sizeof(BlockIq1M) == 56);

struct BlockIq4Nl {
  uint16_t d;
  uint8_t qs[16];
};
static_assert(sizeof(BlockIq4Nl) == 18);

struct BlockIq4Xs {
  uint16_t d;
  uint16_t scales_h;    // high 2 bits of the eight 6-bit scales
  uint8_t scales_l[4];  // low 4 bits of the eight 6-bit scales
  uint8_t qs[128];
};
static_assert(sizeof(BlockIq4Xs) == 136);

// ---- ternary, fp4 and 1-/2-bit types ----

struct BlockTq1_0 {
  uint8_t qs[48];  // five trits per byte (base-3 fixed point, most significant trit first)
  uint8_t qh[4];   // four trits per byte, for the last 16 values
  uint16_t d;
};
static_assert(sizeof(BlockTq1_0) == 54);

struct BlockTq2_0 {
  uint8_t qs[64];  // 2-bit codes q, value (q - 1) * d
  uint16_t d;
};
static_assert(sizeof(BlockTq2_0) == 66);

struct BlockMxfp4 {
  uint8_t e;  // E8M0 shared exponent
  uint8_t qs[16];
};
static_assert(sizeof(BlockMxfp4) == 17);

struct BlockNvfp4 {
  uint8_t d[4];  // UE4M3 scale per 16 values
  uint8_t qs[32];
};
static_assert(sizeof(BlockNvfp4) == 36);

struct BlockQ1_0 {
  uint16_t d;
  uint8_t qs[16];  // one sign bit per value
};
static_assert(sizeof(BlockQ1_0) == 18);

struct BlockQ2_0 {
  uint16_t d;
  uint8_t qs[16];  // 2-bit codes q, value (q - 1) * d
};
static_assert(sizeof(BlockQ2_0) == 18);

}  // namespace gguf::detail

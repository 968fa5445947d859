// Codecs of the i-quant family (IQ1_S .. IQ4_XS): lattice-grid and non-linear 4-bit formats.
// Decoders reproduce ggml's dequantize_row_iq* bit for bit, including the order of float ops.
#if defined(__x86_64__)
#include <immintrin.h>
#endif

#include <array>
#include <bit>
#include <cstring>

#include "codecs/codec_blocks.h"
#include "codecs/codec_iquant_tables.h"
#include "codecs/codec_iquants_encode.h"
#include "codecs/codec_kquants_common.h"
#include "codecs/codec_registry.h"
#include "codecs/codec_simd.h"
#include "gguf/base/fp16.h"

namespace gguf::detail {
namespace {

static_assert(std::endian::native == std::endian::little, "blocks are read as little-endian");

constexpr int kQK = 256;  // super-block size of every IQ type except IQ4_NL
constexpr int kQK4Nl = 32;

template <class Block>
Block load_block(const uint8_t* src, int64_t i) {
  Block b;
  std::memcpy(&b, src + i * static_cast<int64_t>(sizeof(Block)), sizeof(Block));
  return b;
}

// scale * magnitude, negated when sign bit j is set. Negating after the multiply (as ggml's
// compiled "* -1.f" does) also flips the sign of a NaN scale, which scaling a negative
// magnitude would not.
inline float scaled(float scale, uint8_t mag, uint8_t signs, int j) {
  const float v = scale * static_cast<float>(mag);
  return ((signs >> j) & 1) ? -v : v;
}

inline uint32_t read_u32(const uint8_t* p) {
  uint32_t v;
  std::memcpy(&v, p, sizeof v);
  return v;
}

inline uint16_t read_u16(const uint8_t* p) {
  uint16_t v;
  std::memcpy(&v, p, sizeof v);
  return v;
}

// The sign-magnitude lattice decoders (IQ2_*, IQ3_*) in two steps: a block's bytes unpack into
// 16 runs of 16 values, each two grid points (8 magnitude bytes each), 16 sign bits and a scale;
// the runs are then written out, portably or 16 values per AVX-512 register (the same multiply
// and negation per value).
struct Run16 {
  uint64_t point[2];
  uint32_t signs;
  float scale;
};

void emit_runs_portable(const Run16* runs, float* y) {
  for (int r = 0; r < 16; ++r)
    for (int m = 0; m < 2; ++m)
      for (int j = 0; j < 8; ++j)
        *y++ = scaled(runs[r].scale, iq::grid_byte(runs[r].point[m], j),
                      static_cast<uint8_t>(runs[r].signs >> (8 * m)), j);
}

#if defined(__x86_64__)
GGUF_AVX512_WARNINGS_OFF
GGUF_CODEC_AVX512 void emit_runs_avx512(const Run16* runs, float* y) {
  for (int r = 0; r < 16; ++r, y += 16) {
    const __m128i points = _mm_set_epi64x(static_cast<int64_t>(runs[r].point[1]),
                                          static_cast<int64_t>(runs[r].point[0]));
    const __m512 v = _mm512_mul_ps(_mm512_set1_ps(runs[r].scale),
                                   _mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(points)));
    _mm512_storeu_ps(
        y, _mm512_mask_xor_ps(v, static_cast<__mmask16>(runs[r].signs), v, _mm512_set1_ps(-0.0f)));
  }
}
GGUF_AVX512_WARNINGS_ON
#endif

// Unpacks each block of n values with unpack(block index, runs) and writes its 256 values.
template <class Unpack>
void decode_runs(float* y, int64_t n, Unpack unpack) {
  const bool avx512 = codec_avx512();
  for (int64_t i = 0; i < n / kQK; ++i, y += kQK) {
    Run16 runs[16];
    unpack(i, runs);
#if defined(__x86_64__)
    if (avx512) {
      emit_runs_avx512(runs, y);
      continue;
    }
#endif
    emit_runs_portable(runs, y);
  }
}

void decode_iq2_xxs(const uint8_t* src, float* y, int64_t n) {
  decode_runs(y, n, [src](int64_t i, Run16* runs) {
    const auto b = load_block<BlockIq2Xxs>(src, i);
    const float d = fp16_to_fp32(b.d);
    for (int ib = 0; ib < 8; ++ib) {
      const uint8_t* q = b.qs + 8 * ib;
      const uint32_t meta = read_u32(q + 4);
      const float db = d * (0.5f + static_cast<float>(meta >> 28)) * 0.25f;
      for (int h = 0; h < 2; ++h) {
        Run16& r = runs[2 * ib + h];
        r.scale = db;
        r.signs = 0;
        for (int m = 0; m < 2; ++m) {
          const int l = 2 * h + m;
          r.point[m] = iq::kIq2XxsGrid[q[l]];
          r.signs |= static_cast<uint32_t>(iq::kSignsIq2[(meta >> (7 * l)) & 127]) << (8 * m);
        }
      }
    }
  });
}

// IQ2_XS and IQ2_S: a scale per 16 values (one run).
void decode_iq2_xs(const uint8_t* src, float* y, int64_t n) {
  decode_runs(y, n, [src](int64_t i, Run16* runs) {
    const auto b = load_block<BlockIq2Xs>(src, i);
    const float d = fp16_to_fp32(b.d);
    for (int ib = 0; ib < 8; ++ib)
      for (int h = 0; h < 2; ++h) {
        Run16& r = runs[2 * ib + h];
        r.scale = d * (0.5f + static_cast<float>((b.scales[ib] >> (4 * h)) & 0xf)) * 0.25f;
        r.signs = 0;
        for (int m = 0; m < 2; ++m) {
          const uint16_t code = b.qs[4 * ib + 2 * h + m];
          r.point[m] = iq::kIq2XsGrid[code & 511];
          r.signs |= static_cast<uint32_t>(iq::kSignsIq2[code >> 9]) << (8 * m);
        }
      }
  });
}

void decode_iq2_s(const uint8_t* src, float* y, int64_t n) {
  decode_runs(y, n, [src](int64_t i, Run16* runs) {
    const auto b = load_block<BlockIq2S>(src, i);
    const float d = fp16_to_fp32(b.d);
    for (int ib = 0; ib < 8; ++ib)
      for (int h = 0; h < 2; ++h) {
        Run16& r = runs[2 * ib + h];
        r.scale = d * (0.5f + static_cast<float>((b.scales[ib] >> (4 * h)) & 0xf)) * 0.25f;
        r.signs = 0;
        for (int m = 0; m < 2; ++m) {
          const int l = 2 * h + m;
          r.point[m] = iq::kIq2SGrid[b.qs[4 * ib + l] | (((b.qh[ib] >> (2 * l)) & 3u) << 8)];
          r.signs |= static_cast<uint32_t>(b.signs[4 * ib + l]) << (8 * m);
        }
      }
  });
}

// IQ3: a grid point holds 4 magnitudes; two make the 8 values of a sign byte.
void decode_iq3_xxs(const uint8_t* src, float* y, int64_t n) {
  decode_runs(y, n, [src](int64_t i, Run16* runs) {
    const auto b = load_block<BlockIq3Xxs>(src, i);
    const float d = fp16_to_fp32(b.d);
    for (int ib = 0; ib < 8; ++ib) {
      const uint32_t meta = read_u32(b.scales_signs + 4 * ib);
      const float db = d * (0.5f + static_cast<float>(meta >> 28)) * 0.5f;
      for (int h = 0; h < 2; ++h) {
        Run16& r = runs[2 * ib + h];
        r.scale = db;
        r.signs = 0;
        for (int m = 0; m < 2; ++m) {
          const int l = 2 * h + m;
          const uint64_t lo = iq::kIq3XxsGrid[b.qs[8 * ib + 2 * l]];
          const uint64_t hi = iq::kIq3XxsGrid[b.qs[8 * ib + 2 * l + 1]];
          r.point[m] = lo | (hi << 32);
          r.signs |= static_cast<uint32_t>(iq::kSignsIq2[(meta >> (7 * l)) & 127]) << (8 * m);
        }
      }
    }
  });
}

void decode_iq3_s(const uint8_t* src, float* y, int64_t n) {
  decode_runs(y, n, [src](int64_t i, Run16* runs) {
    const auto b = load_block<BlockIq3S>(src, i);
    const float d = fp16_to_fp32(b.d);
    for (int ib = 0; ib < 8; ++ib) {
      const unsigned s = (b.scales[ib / 2] >> (4 * (ib % 2))) & 0xf;
      const float db = d * static_cast<float>(1 + 2 * static_cast<int>(s));
      const uint8_t qh = b.qh[ib];
      for (int h = 0; h < 2; ++h) {
        Run16& r = runs[2 * ib + h];
        r.scale = db;
        r.signs = 0;
        for (int m = 0; m < 2; ++m) {
          const int l = 2 * h + m;
          const unsigned i0 = b.qs[8 * ib + 2 * l] | (((qh >> (2 * l)) & 1u) << 8);
          const unsigned i1 = b.qs[8 * ib + 2 * l + 1] | (((qh >> (2 * l + 1)) & 1u) << 8);
          r.point[m] = iq::kIq3SGrid[i0] | (static_cast<uint64_t>(iq::kIq3SGrid[i1]) << 32);
          r.signs |= static_cast<uint32_t>(b.signs[4 * ib + l]) << (8 * m);
        }
      }
    }
  });
}

// IQ1 grid bytes are signed (-1, 0, +1); value = scale * (grid + delta). The decoders are also
// built for AVX2 (GGUF_DECODE_CLONES), where their inner loops vectorize.
GGUF_DECODE_CLONES void decode_iq1_s(const uint8_t* src, float* y, int64_t n) {
  for (int64_t i = 0; i < n / kQK; ++i) {
    const auto b = load_block<BlockIq1S>(src, i);
    const float d = fp16_to_fp32(b.d);
    for (int ib = 0; ib < 8; ++ib) {
      const uint16_t qh = b.qh[ib];
      const float dl = d * static_cast<float>(2 * ((qh >> 12) & 7) + 1);
      const float delta = (qh & 0x8000) ? -iq::kIq1Delta : iq::kIq1Delta;
      for (int l = 0; l < 4; ++l) {
        // The point's 8 signed levels as bytes, so the loop below vectorizes (same arithmetic).
        int8_t level[8];
        std::memcpy(level, &iq::kIq1SGrid[b.qs[4 * ib + l] | (((qh >> (3 * l)) & 7u) << 8)], 8);
        for (int j = 0; j < 8; ++j) y[j] = dl * (static_cast<float>(level[j]) + delta);
        y += 8;
      }
    }
  }
}

// The fp16 super-block scale of an IQ1_M block, spread over the top nibbles of its four scale
// words.
float iq1_m_scale(const uint16_t (&sc)[4]) {
  return fp16_to_fp32(static_cast<uint16_t>((sc[0] >> 12) | ((sc[1] >> 8) & 0x00f0) |
                                            ((sc[2] >> 4) & 0x0f00) | (sc[3] & 0xf000)));
}

#if defined(__x86_64__)
GGUF_AVX512_WARNINGS_OFF
// IQ1_M with AVX-512: the 16 values of one scale (two grid points) per register, each value
// computed as the portable decoder computes it, scale * (level + delta).
GGUF_CODEC_AVX512 void decode_iq1_m_avx512(const uint8_t* src, float* y, int64_t n) {
  for (int64_t i = 0; i < n / kQK; ++i) {
    const auto b = load_block<BlockIq1M>(src, i);
    uint16_t sc[4];
    for (int k = 0; k < 4; ++k) sc[k] = read_u16(b.scales + 2 * k);
    const float d = iq1_m_scale(sc);
    for (int ib = 0; ib < 8; ++ib) {
      const unsigned word = sc[ib / 2] >> (6 * (ib % 2));
      for (int half = 0; half < 2; ++half, y += 16) {
        const float dl = d * static_cast<float>(2 * ((word >> (3 * half)) & 7) + 1);
        const unsigned h = b.qh[2 * ib + half];
        const uint8_t* qs = b.qs + 4 * ib + 2 * half;
        const __m128i points =
            _mm_set_epi64x(static_cast<int64_t>(iq::kIq1SGrid[qs[1] | (((h >> 4) & 7u) << 8)]),
                           static_cast<int64_t>(iq::kIq1SGrid[qs[0] | ((h & 7u) << 8)]));
        const __m512 delta =
            _mm512_mask_blend_ps(0xFF00, _mm512_set1_ps((h & 8) ? -iq::kIq1Delta : iq::kIq1Delta),
                                 _mm512_set1_ps((h & 0x80) ? -iq::kIq1Delta : iq::kIq1Delta));
        const __m512 level = _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(points));
        _mm512_storeu_ps(y, _mm512_mul_ps(_mm512_set1_ps(dl), _mm512_add_ps(level, delta)));
      }
    }
  }
}
GGUF_AVX512_WARNINGS_ON
#endif

GGUF_DECODE_CLONES void decode_iq1_m_portable(const uint8_t* src, float* y, int64_t n) {
  for (int64_t i = 0; i < n / kQK; ++i) {
    const auto b = load_block<BlockIq1M>(src, i);
    uint16_t sc[4];
    for (int k = 0; k < 4; ++k) sc[k] = read_u16(b.scales + 2 * k);
    const float d = iq1_m_scale(sc);
    for (int ib = 0; ib < 8; ++ib) {
      const unsigned word = sc[ib / 2] >> (6 * (ib % 2));
      const float dl[2] = {d * static_cast<float>(2 * (word & 7) + 1),
                           d * static_cast<float>(2 * ((word >> 3) & 7) + 1)};
      for (int l = 0; l < 4; ++l) {
        // Each qh byte serves two groups of 8: bits 0-2 / 4-6 extend the index, bit 3 / 7 is the
        // delta sign.
        const unsigned h = b.qh[2 * ib + l / 2] >> (4 * (l % 2));
        int8_t level[8];
        std::memcpy(level, &iq::kIq1SGrid[b.qs[4 * ib + l] | ((h & 7u) << 8)], 8);
        const float delta = (h & 8) ? -iq::kIq1Delta : iq::kIq1Delta, scale = dl[l / 2];
        for (int j = 0; j < 8; ++j) y[j] = scale * (static_cast<float>(level[j]) + delta);
        y += 8;
      }
    }
  }
}

void decode_iq1_m(const uint8_t* src, float* y, int64_t n) {
#if defined(__x86_64__)
  if (codec_avx512()) return decode_iq1_m_avx512(src, y, n);
#endif
  decode_iq1_m_portable(src, y, n);
}

// IQ4: 32 values per scale, the low nibbles of 16 bytes then their high nibbles, each a level
// of kValuesIq4Nl times the scale.
void iq4_group_portable(const uint8_t* q, float scale, float* y) {
  for (int j = 0; j < 16; ++j) {
    y[j] = scale * static_cast<float>(iq::kValuesIq4Nl[q[j] & 0xf]);
    y[j + 16] = scale * static_cast<float>(iq::kValuesIq4Nl[q[j] >> 4]);
  }
}

float iq4_xs_scale(const BlockIq4Xs& b, float d, int ib) {
  const int ls = static_cast<int>(((b.scales_l[ib / 2] >> (4 * (ib % 2))) & 0xf) |
                                  (((b.scales_h >> (2 * ib)) & 3) << 4));
  return d * static_cast<float>(ls - 32);
}

#if defined(__x86_64__)
GGUF_AVX512_WARNINGS_OFF
// The same with the levels picked by a permute, 16 values per register.
GGUF_CODEC_AVX512 inline void iq4_group_avx512(const uint8_t* q, float scale, float* y) {
  alignas(64) static constexpr auto kLevels = [] {
    std::array<float, 16> v{};
    for (int k = 0; k < 16; ++k) v[k] = static_cast<float>(iq::kValuesIq4Nl[k]);
    return v;
  }();
  const __m512 levels = _mm512_load_ps(kLevels.data());
  const __m512i bytes = _mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(q)));
  const __m512 sv = _mm512_set1_ps(scale);
  const __m512i lo = _mm512_and_si512(bytes, _mm512_set1_epi32(0xf));
  _mm512_storeu_ps(y, _mm512_mul_ps(sv, _mm512_permutexvar_ps(lo, levels)));
  _mm512_storeu_ps(y + 16,
                   _mm512_mul_ps(sv, _mm512_permutexvar_ps(_mm512_srli_epi32(bytes, 4), levels)));
}

GGUF_CODEC_AVX512 void decode_iq4_nl_avx512(const uint8_t* src, float* y, int64_t n) {
  for (int64_t i = 0; i < n / kQK4Nl; ++i, y += kQK4Nl) {
    const auto b = load_block<BlockIq4Nl>(src, i);
    iq4_group_avx512(b.qs, fp16_to_fp32(b.d), y);
  }
}

GGUF_CODEC_AVX512 void decode_iq4_xs_avx512(const uint8_t* src, float* y, int64_t n) {
  for (int64_t i = 0; i < n / kQK; ++i) {
    const auto b = load_block<BlockIq4Xs>(src, i);
    const float d = fp16_to_fp32(b.d);
    for (int ib = 0; ib < 8; ++ib, y += 32)
      iq4_group_avx512(b.qs + 16 * ib, iq4_xs_scale(b, d, ib), y);
  }
}
GGUF_AVX512_WARNINGS_ON
#endif

void decode_iq4_nl(const uint8_t* src, float* y, int64_t n) {
#if defined(__x86_64__)
  if (codec_avx512()) return decode_iq4_nl_avx512(src, y, n);
#endif
  for (int64_t i = 0; i < n / kQK4Nl; ++i, y += kQK4Nl) {
    const auto b = load_block<BlockIq4Nl>(src, i);
    iq4_group_portable(b.qs, fp16_to_fp32(b.d), y);
  }
}

void decode_iq4_xs(const uint8_t* src, float* y, int64_t n) {
#if defined(__x86_64__)
  if (codec_avx512()) return decode_iq4_xs_avx512(src, y, n);
#endif
  for (int64_t i = 0; i < n / kQK; ++i) {
    const auto b = load_block<BlockIq4Xs>(src, i);
    const float d = fp16_to_fp32(b.d);
    for (int ib = 0; ib < 8; ++ib, y += 32)
      iq4_group_portable(b.qs + 16 * ib, iq4_xs_scale(b, d, ib), y);
  }
}

}  // namespace

void register_iquant_codecs(CodecTable& t) {
  entry(t, GgmlType::IQ2_XXS) = {decode_iq2_xxs, iq::encode_iq2_xxs};
  entry(t, GgmlType::IQ2_XS) = {decode_iq2_xs, iq::encode_iq2_xs};
  entry(t, GgmlType::IQ2_S) = {decode_iq2_s, iq::encode_iq2_s};
  entry(t, GgmlType::IQ3_XXS) = {decode_iq3_xxs, iq::encode_iq3_xxs};
  entry(t, GgmlType::IQ3_S) = {decode_iq3_s, iq::encode_iq3_s};
  entry(t, GgmlType::IQ1_S) = {decode_iq1_s, iq::encode_iq1_s};
  entry(t, GgmlType::IQ1_M) = {decode_iq1_m, iq::encode_iq1_m};
  entry(t, GgmlType::IQ4_NL) = {decode_iq4_nl, iq::encode_iq4_nl};
  entry(t, GgmlType::IQ4_XS) = {decode_iq4_xs, iq::encode_iq4_xs};
}

}  // namespace gguf::detail

// Codecs of the float family: f32, f16, bf16 (both ways) and f64, i8, i16, i32, i64 (decode).
// f16/bf16 follow ggml's rounding (gguf/fp16.h); f64 and the integer types become float the
// way a C cast does (round to nearest even; i64/i32 beyond 2^24 lose low bits).
#include <algorithm>
#include <bit>
#include <cstdint>
#include <cstring>

#if defined(__x86_64__)
#include <immintrin.h>
#endif

#include "codecs/codec_registry.h"
#include "gguf/base/fp16.h"

namespace gguf::detail {
namespace {

static_assert(std::endian::native == std::endian::little,
              "GGUF payloads are little-endian; the codecs read them in host order");

// Rows are converted in fixed-size chunks through a local typed buffer: GCC's -O2 cost model
// vectorises only loops with a constant trip count, and not through per-element memcpy.
constexpr int64_t kChunk = 64;

// The conversions are a few integer operations per element, so they run at the speed of the
// vector width: each gets AVX-512 and AVX2 clones, chosen when the program loads.
#if defined(__x86_64__) && defined(__has_attribute) && !defined(GGUF_NO_DECODE_CLONES)
#if __has_attribute(target_clones)
#define GGUF_FLOAT_CLONES __attribute__((target_clones("arch=x86-64-v4", "avx2", "default")))
#endif
#endif
#ifndef GGUF_FLOAT_CLONES
#define GGUF_FLOAT_CLONES
#endif

template <typename T, typename Fn>
void decode_chunks(const uint8_t* src, float* dst, int64_t n, Fn convert) {
  int64_t i = 0;
  for (T in[kChunk]; i + kChunk <= n; i += kChunk) {
    std::memcpy(in, src + i * static_cast<int64_t>(sizeof(T)), sizeof(in));
    for (int64_t j = 0; j < kChunk; ++j) dst[i + j] = convert(in[j]);
  }
  for (T v; i < n; ++i) {
    std::memcpy(&v, src + i * static_cast<int64_t>(sizeof(T)), sizeof(T));
    dst[i] = convert(v);
  }
}

template <typename T, typename Fn>
void encode_chunks(const float* src, uint8_t* dst, int64_t n, Fn convert) {
  int64_t i = 0;
  for (T out[kChunk]; i + kChunk <= n; i += kChunk) {
    for (int64_t j = 0; j < kChunk; ++j) out[j] = convert(src[i + j]);
    std::memcpy(dst + i * static_cast<int64_t>(sizeof(T)), out, sizeof(out));
  }
  for (; i < n; ++i) {
    const T v = convert(src[i]);
    std::memcpy(dst + i * static_cast<int64_t>(sizeof(T)), &v, sizeof(T));
  }
}

void decode_f32(const uint8_t* src, float* dst, int64_t n) {
  std::memcpy(dst, src, static_cast<size_t>(n) * sizeof(float));
}

GGUF_FLOAT_CLONES void decode_f16(const uint8_t* src, float* dst, int64_t n) {
  decode_chunks<uint16_t>(src, dst, n, [](uint16_t h) { return fp16_to_fp32_branchless(h); });
}

// Straight from the source bytes: the chunk buffer's extra copy costs a third of the speed.
GGUF_FLOAT_CLONES void decode_bf16_loop(const uint8_t* src, float* dst, int64_t n) {
  for (int64_t i = 0; i < n; ++i) {
    uint16_t h;
    std::memcpy(&h, src + 2 * i, sizeof h);
    dst[i] = bf16_to_fp32(h);
  }
}

#if defined(__x86_64__)
// The conversion is bound by its stores. GCC's AVX-512 version of the loop reaches only
// 0.85x of ggml's plain SSE2 one: its 64-byte stores straddle two cache lines whenever the
// output is not 64-byte aligned. Aligned 32-byte stores match or beat ggml.
__attribute__((target("avx2"))) void decode_bf16_avx2(const uint8_t* src, float* dst, int64_t n) {
  // The first elements are converted one by one up to the output's next cache line.
  int64_t i = std::min<int64_t>(n, ((64 - reinterpret_cast<uintptr_t>(dst) % 64) % 64) / 4);
  decode_bf16_loop(src, dst, i);
  for (; i + 16 <= n; i += 16) {
    const __m256i h0 =
        _mm256_cvtepu16_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(src + 2 * i)));
    const __m256i h1 =
        _mm256_cvtepu16_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(src + 2 * i + 16)));
    _mm256_store_si256(reinterpret_cast<__m256i*>(dst + i), _mm256_slli_epi32(h0, 16));
    _mm256_store_si256(reinterpret_cast<__m256i*>(dst + i + 8), _mm256_slli_epi32(h1, 16));
  }
  decode_bf16_loop(src + 2 * i, dst + i, n - i);
}
#endif

void decode_bf16(const uint8_t* src, float* dst, int64_t n) {
#if defined(__x86_64__)
  static const bool avx2 = __builtin_cpu_supports("avx2");
  if (avx2) return decode_bf16_avx2(src, dst, n);
#endif
  decode_bf16_loop(src, dst, n);
}

// f64 and integer tensors: C conversion to float (ggml has no decoder for these types).
template <typename T>
void decode_cast(const uint8_t* src, float* dst, int64_t n) {
  decode_chunks<T>(src, dst, n, [](T v) { return static_cast<float>(v); });
}

void encode_f32(const float* src, uint8_t* dst, int64_t nrows, int64_t n_per_row, const float*) {
  std::memcpy(dst, src, static_cast<size_t>(nrows * n_per_row) * sizeof(float));
}

// f16 and bf16 ignore importance weights, as ggml_quantize_chunk does.
GGUF_FLOAT_CLONES void encode_f16(const float* src, uint8_t* dst, int64_t nrows, int64_t n_per_row,
                                  const float*) {
  encode_chunks<uint16_t>(src, dst, nrows * n_per_row, [](float f) { return fp32_to_fp16(f); });
}

GGUF_FLOAT_CLONES void encode_bf16(const float* src, uint8_t* dst, int64_t nrows, int64_t n_per_row,
                                   const float*) {
  encode_chunks<uint16_t>(src, dst, nrows * n_per_row, [](float f) { return fp32_to_bf16(f); });
}

}  // namespace

void register_float_codecs(CodecTable& t) {
  entry(t, GgmlType::F32) = {decode_f32, encode_f32};
  entry(t, GgmlType::F16) = {decode_f16, encode_f16};
  entry(t, GgmlType::BF16) = {decode_bf16, encode_bf16};
  entry(t, GgmlType::F64) = {decode_cast<double>, nullptr};
  entry(t, GgmlType::I8) = {decode_cast<int8_t>, nullptr};
  entry(t, GgmlType::I16) = {decode_cast<int16_t>, nullptr};
  entry(t, GgmlType::I32) = {decode_cast<int32_t>, nullptr};
  entry(t, GgmlType::I64) = {decode_cast<int64_t>, nullptr};
}

}  // namespace gguf::detail

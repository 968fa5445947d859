// Codecs of the float family: f32, f16, bf16 (both ways) and f64, i8, i16, i32, i64 (decode).
// f16/bf16 follow ggml's rounding (gguf/fp16.h); f64 and the integer types become float the
// way a C cast does (round to nearest even; i64/i32 beyond 2^24 lose low bits).
#include <bit>
#include <cstdint>
#include <cstring>

#include "codec_registry.h"
#include "gguf/fp16.h"

namespace gguf::detail {
namespace {

static_assert(std::endian::native == std::endian::little,
              "GGUF payloads are little-endian; the codecs read them in host order");

template <typename T>
T load(const uint8_t* p) {
  T v;
  std::memcpy(&v, p, sizeof(T));
  return v;
}

void decode_f32(const uint8_t* src, float* dst, int64_t n) {
  std::memcpy(dst, src, static_cast<size_t>(n) * sizeof(float));
}

void decode_f16(const uint8_t* src, float* dst, int64_t n) {
  for (int64_t i = 0; i < n; ++i) dst[i] = fp16_to_fp32(load<uint16_t>(src + 2 * i));
}

void decode_bf16(const uint8_t* src, float* dst, int64_t n) {
  for (int64_t i = 0; i < n; ++i) dst[i] = bf16_to_fp32(load<uint16_t>(src + 2 * i));
}

// f64 and integer tensors: C conversion to float (ggml has no decoder for these types).
template <typename T>
void decode_cast(const uint8_t* src, float* dst, int64_t n) {
  for (int64_t i = 0; i < n; ++i) dst[i] = static_cast<float>(load<T>(src + sizeof(T) * i));
}

void encode_f32(const float* src, uint8_t* dst, int64_t nrows, int64_t n_per_row, const float*) {
  std::memcpy(dst, src, static_cast<size_t>(nrows * n_per_row) * sizeof(float));
}

// f16 and bf16 ignore importance weights, as ggml_quantize_chunk does.
void encode_f16(const float* src, uint8_t* dst, int64_t nrows, int64_t n_per_row, const float*) {
  const int64_t n = nrows * n_per_row;
  for (int64_t i = 0; i < n; ++i) {
    const uint16_t h = fp32_to_fp16(src[i]);
    std::memcpy(dst + 2 * i, &h, sizeof(h));
  }
}

void encode_bf16(const float* src, uint8_t* dst, int64_t nrows, int64_t n_per_row, const float*) {
  const int64_t n = nrows * n_per_row;
  for (int64_t i = 0; i < n; ++i) {
    const uint16_t h = fp32_to_bf16(src[i]);
    std::memcpy(dst + 2 * i, &h, sizeof(h));
  }
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

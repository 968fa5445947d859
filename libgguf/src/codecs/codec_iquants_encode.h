// Internal: the i-quant encoders (codec_iquants_encode_*.cpp), registered by codec_iquants.cpp.
#pragma once

#include <cstdint>

namespace gguf::detail::iq {

// ggml's quantize_iq2_xxs: nrows rows of n_per_row (a multiple of 256) values; imatrix holds
// n_per_row importance weights and is required.
void encode_iq2_xxs(const float* src, uint8_t* dst, int64_t nrows, int64_t n_per_row,
                    const float* imatrix);

// ggml's quantize_iq1_s (importance required) and quantize_iq1_m (optional).
void encode_iq1_s(const float* src, uint8_t* dst, int64_t nrows, int64_t n_per_row,
                  const float* imatrix);
void encode_iq1_m(const float* src, uint8_t* dst, int64_t nrows, int64_t n_per_row,
                  const float* imatrix);

// ggml's quantize_iq2_xs (importance required) and quantize_iq2_s (optional).
void encode_iq2_xs(const float* src, uint8_t* dst, int64_t nrows, int64_t n_per_row,
                   const float* imatrix);
void encode_iq2_s(const float* src, uint8_t* dst, int64_t nrows, int64_t n_per_row,
                  const float* imatrix);

// ggml's quantize_iq3_xxs and quantize_iq3_s (rows of a multiple of 256); imatrix optional.
void encode_iq3_xxs(const float* src, uint8_t* dst, int64_t nrows, int64_t n_per_row,
                    const float* imatrix);
void encode_iq3_s(const float* src, uint8_t* dst, int64_t nrows, int64_t n_per_row,
                  const float* imatrix);

// ggml's quantize_iq4_nl (rows of a multiple of 32) and quantize_iq4_xs (of 256); imatrix is
// optional (without it each value weighs its square).
void encode_iq4_nl(const float* src, uint8_t* dst, int64_t nrows, int64_t n_per_row,
                   const float* imatrix);
void encode_iq4_xs(const float* src, uint8_t* dst, int64_t nrows, int64_t n_per_row,
                   const float* imatrix);

}  // namespace gguf::detail::iq

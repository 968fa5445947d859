// Internal: the importance-weighted scale searches of the legacy codecs (ggml's make_qx_quants
// with weights, and make_qkx3_quants), used for q4_0/q5_0 and q4_1/q5_1 blocks respectively.
#pragma once

#include <array>
#include <cstdint>

namespace gguf::detail::legacy {

constexpr int kQK = 32;  // elements per block
using Codes = std::array<uint8_t, kQK>;

// Symmetric codes (value = scale * (code - nmax)); returns the scale.
float search_symmetric(const float* x, const float* w, int nmax, Codes& codes);

// Affine codes in [0, nmax] (value = scale * code - neg_min); returns the scale.
float search_affine(const float* x, const float* w, int nmax, Codes& codes, float& neg_min);

}  // namespace gguf::detail::legacy

// Quantize and dequantize rows of any ggml type, bit-exact with ggml's reference code.
// Pure span-to-span functions; the per-family implementations live in codec_*.cpp.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>

#include "gguf/format/types.h"

namespace gguf {

// True when dequantize() supports t (all 35 active types once complete).
bool can_decode(GgmlType t);
// True when quantize() supports t.
bool can_encode(GgmlType t);
// ggml aborts without an importance matrix for these (iq2_xxs, iq2_xs, iq1_s).
bool requires_importance(GgmlType t);
// The quantizer reads importance weights when given (q4_0.., k-quants, most i-quants).
bool uses_importance(GgmlType t);

// The usage message for `option`'s value `name` that is no ggml type. A llama-quantize preset
// (Q4_K_M, Q3_K_L, IQ2_M, ...) is a mix of types: the message names the type it is built
// around and how to make a mix; anything else gets the list of types we can write.
// Without with_selectors (a tool that has no per-tensor types) it names only the type.
std::string unknown_type_message(std::string_view option, std::string_view name,
                                 bool with_selectors = true);

// Decodes dst.size() elements from src. dst.size() must be a multiple of the block size and
// src.size() must equal the matching byte count; otherwise throws gguf::Error.
void dequantize(GgmlType t, std::span<const uint8_t> src, std::span<float> dst);

// Encodes nrows rows of n_per_row floats (src.size() == nrows * n_per_row) into dst
// (dst.size() == nrows * row_bytes(t, n_per_row)). importance is empty or holds n_per_row
// weights shared by all rows. Output bytes equal ggml_quantize_chunk's for the same inputs.
// Throws gguf::Error for unsupported types, bad sizes, or inputs the codec cannot encode.
void quantize(GgmlType t, std::span<const float> src, int64_t nrows, int64_t n_per_row,
              std::span<const float> importance, std::span<uint8_t> dst);

}  // namespace gguf

// Internal: how the per-family codec files plug into the dispatch in codecs.cpp.
#pragma once

#include <array>
#include <cstdint>

#include "gguf/format/types.h"

namespace gguf::detail {

// Decodes n elements (a multiple of the block size) from src.
using DecodeFn = void (*)(const uint8_t* src, float* dst, int64_t n);
// Encodes nrows rows of n_per_row elements; imatrix is null or holds n_per_row weights.
// Throws gguf::Error for inputs it cannot encode.
using EncodeFn = void (*)(const float* src, uint8_t* dst, int64_t nrows, int64_t n_per_row,
                          const float* imatrix);

struct CodecEntry {
  DecodeFn decode = nullptr;
  EncodeFn encode = nullptr;
};
using CodecTable = std::array<CodecEntry, kTypeCount>;

inline CodecEntry& entry(CodecTable& t, GgmlType type) { return t[static_cast<uint32_t>(type)]; }

// The decoder of a type (nullptr when there is none), for hot loops that checked the sizes
// once themselves (gguf::dequantize checks them on every call).
DecodeFn decoder(GgmlType type);

// One per family file; each fills the entries of its types.
void register_float_codecs(CodecTable& t);   // codec_float.cpp: f32 f16 bf16 f64 i8..i64
void register_legacy_codecs(CodecTable& t);  // codec_legacy.cpp: q4_0 q4_1 q5_0 q5_1 q8_0 q8_1
void register_kquant_codecs(CodecTable& t);  // codec_kquants.cpp: q2_K..q8_K
void register_iquant_codecs(CodecTable& t);  // codec_iquants.cpp: iq* types
void register_misc_codecs(CodecTable& t);    // codec_misc.cpp: tq1_0 tq2_0 mxfp4 nvfp4 q1_0 q2_0

}  // namespace gguf::detail

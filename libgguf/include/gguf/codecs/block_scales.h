// Non-finite block scales: the first block of a quantized payload whose scale is NaN or Inf,
// which llama.cpp's quantizer and its tensor check refuse.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <utility>

#include "gguf/format/types.h"

namespace gguf {

// The first block in `blocks` (whole blocks of a quantized type) whose scale is not finite (an
// f16/f32 NaN or Inf, or mxfp4's E8M0 0xff): its index and the scale field's name ("d", "dmin",
// "e", ...), or nothing (always nothing for types without such a scale, float types included).
std::optional<std::pair<uint64_t, std::string>> first_nonfinite_scale(
    GgmlType type, std::span<const uint8_t> blocks);

}  // namespace gguf

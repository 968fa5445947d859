// Internal: where each quantized type keeps its block scales (the blocks of codec_blocks.h),
// and the scan for non-finite ones: gguf-inspect --check's data scan (ops/check_scan.cpp) and
// the writer's refusal of rows that encode to a non-finite scale (write/encode.cpp) share it.
#pragma once

#include <cstdint>
#include <cstring>

#include "gguf/codecs/block_scales.h"

namespace gguf::detail {

// How a type's payload can hold a non-finite number.
enum class Scan { kNone, kF32, kF16, kBF16, kF64, kHalfScales, kQ8K, kIQ1M, kE8M0 };

struct ScaleField {
  uint16_t at;  // byte offset inside the block
  const char* name;
};

struct ScanLayout {
  Scan scan = Scan::kNone;
  ScaleField fields[2] = {};
  int n_fields = 0;
};

// Where each type's block keeps its scales (codec_blocks.h). mxfp4's E8M0 exponent byte 0xFF is
// the format's NaN: ggml's decoder reads it as 2^127, but ggml_validate_row_data (llama.cpp's
// tensor check) refuses it. nvfp4's UE4M3 scales are valid for every byte (ggml checks
// nothing), so they are not listed.
ScanLayout scan_layout(uint32_t type);

template <class W>
W load(const uint8_t* p) {
  W w;
  std::memcpy(&w, p, sizeof(W));
  return w;
}

// Finds non-finite numbers in [p, p + n units): counts them, remembers the first.
struct Hits {
  uint64_t count = 0;
  uint64_t first = UINT64_MAX;  // unit index inside the tensor
  int field = 0;
  uint64_t bits = 0;  // the offending number's bits
};

// Scans n blocks of block_bytes at p for a non-finite scale: counts the blocks holding one,
// and remembers the first (its index, base + b; the field; its bits).
void scan_blocks(const ScanLayout& l, const uint8_t* p, uint64_t n, uint64_t block_bytes,
                 uint64_t base, Hits& h);

}  // namespace gguf::detail

// The affine codecs (codecs/codec_affine.cpp, built with -ffp-contract=off): packed-affine
// values (code * scale + min) and their exact q4_1 / q5_1 / f32 form, for the lossless import
// (ops/affine.h), and the exact q4_0 -> q4_1 / q5_0 -> q5_1 block transcoders (ops/exact.h).
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "gguf/format/types.h"
#include "gguf/inputs/safetensors.h"

namespace gguf {

// One entry of the packed_affine metadata, checked against the file.
struct PackedAffineTensor {
  std::string name;
  unsigned bits = 0;           // 1..8
  uint64_t group = 0;          // columns per scale/min pair
  std::vector<int64_t> shape;  // row-major, outermost first; the last dimension is the columns
  const SafetensorsTensor* codes = nullptr;   // U8, ceil(n * bits / 8) bytes
  const SafetensorsTensor* scales = nullptr;  // F16, shape with the last dimension cols / group
  const SafetensorsTensor* mins = nullptr;    // F16, same shape as scales
  uint64_t rows = 0, cols = 0;
  uint64_t entry_offset = 0;  // where errors about it point: its entry in the header
};

// The reconstructed values of elements [first, first + count) (row-major order): code * scale
// + min in fp32, unfused, straight from the file's codes, scales and mins (the definition, kept
// apart from the block packing below so that the proof does not check the packer against
// itself). out.size() == count.
void affine_values(const SafetensorsFile& file, const PackedAffineTensor& t, uint64_t first,
                   uint64_t count, std::span<float> out);

// Writes elements [first, first + count) as `type` (q4_1, q5_1 or f32) into out: whole blocks
// (first and count multiples of 32) for q4_1 and q5_1. Throws when the type cannot hold the
// tensor exactly (too many bits, a group that is not a multiple of 32).
void affine_to_type(const SafetensorsFile& file, const PackedAffineTensor& t, GgmlType type,
                    uint64_t first, uint64_t count, std::span<uint8_t> out);

// Drops the pages of the codes, scales and mins of elements [first, first + count) from this
// process (they stay in the page cache), so a 100 GB import keeps a bounded resident set.
void release_affine_input(const SafetensorsFile& file, const PackedAffineTensor& t, uint64_t first,
                          uint64_t count);

// The type a packed tensor goes to: `requested` when it holds the values exactly, otherwise
// (or with no request) nullopt and why in `why`; without a request, the smallest exact type.
std::optional<GgmlType> affine_target(const PackedAffineTensor& t,
                                      std::optional<GgmlType> requested, std::string& why);

// q4_0 blocks to q4_1 or q5_0 to q5_1 (src holds whole blocks, dst the same count). Returns
// the index of the first block whose min -8d (-16d) is not a finite f16 (a scale above 8188,
// or 4094, or a non-finite one), when there is one; dst is then incomplete.
std::optional<uint64_t> transcode_blocks(GgmlType from, GgmlType to, std::span<const uint8_t> src,
                                         std::span<uint8_t> dst);

}  // namespace gguf

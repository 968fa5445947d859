// Internal: the canonical GGUF header (serialize.cpp): validation of what goes into it, the
// layout of the data section, and its bytes; the split keys the writer owns.
#pragma once

#include <cstdint>
#include <vector>

#include "gguf/write/plan.h"

namespace gguf::detail {

// The three keys that describe a split set; the writer owns them.
inline constexpr const char* kSplitNo = "split.no";
inline constexpr const char* kSplitCount = "split.count";
inline constexpr const char* kSplitTensors = "split.tensors.count";

// general.alignment of metadata (default 32); throws when it is not a u32 power of two
// within ggml's limit.
uint64_t plan_alignment(const Metadata& metadata);

// Checks keys, values, version, names, dims and payload sizes; throws gguf::Error naming the
// key or tensor.
void validate_header(const Metadata& metadata, uint32_t version,
                     const std::vector<const PlanTensor*>& tensors);

// Bytes of the encoded key/value section (without the fixed 24-byte preamble).
uint64_t metadata_bytes(const Metadata& metadata);
// Bytes of one encoded tensor info.
uint64_t tensor_info_bytes(const PlanTensor& t);

inline uint64_t pad_to(uint64_t n, uint64_t alignment) {
  return (n + alignment - 1) / alignment * alignment;
}

// Where everything goes in one file laid out canonically.
struct Layout {
  uint64_t alignment = 32;
  uint64_t data_offset = 0;       // header size, padded
  std::vector<uint64_t> offsets;  // of each payload, relative to data_offset
  uint64_t file_size = 0;         // data_offset + padded payloads
};
Layout layout_of(const Metadata& metadata, const std::vector<const PlanTensor*>& tensors);

// The header (padded to the alignment) for an already-validated plan.
std::vector<uint8_t> encode_header(const Metadata& metadata, uint32_t version,
                                   const std::vector<const PlanTensor*>& tensors,
                                   const Layout& layout);

}  // namespace gguf::detail

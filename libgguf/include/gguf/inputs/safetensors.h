// A validated, read-only view of a safetensors file (an 8-byte little-endian header length, a
// JSON header naming each tensor's dtype, shape and byte range, then the data). Every length,
// offset and size is checked before use, as the safetensors reference library checks them:
// the ranges tile the data section exactly, with no gap and no overlap.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include "gguf/io/source.h"

namespace gguf {

struct SafetensorsTensor {
  std::string name;
  std::string dtype;           // as in the header: "F32", "F16", "BF16", "U8", ...
  std::vector<int64_t> shape;  // row-major, outermost first (as in the header)
  uint64_t begin = 0;          // absolute byte offsets of the data in the file
  uint64_t end = 0;
  uint64_t n_elements = 0;
};

class SafetensorsFile {
 public:
  static SafetensorsFile open(const std::string& path);
  static SafetensorsFile parse(std::shared_ptr<const ByteSource> source);
  // True when the first bytes look like a safetensors header (a plausible length, then '{'),
  // and not like a GGUF.
  static bool sniff(const ByteSource& source);

  const std::string& path() const { return source_->name(); }
  const ByteSource& source() const { return *source_; }
  const std::shared_ptr<const ByteSource>& source_ptr() const { return source_; }
  uint64_t header_bytes() const { return header_bytes_; }  // the JSON, without the length
  // In the order of their data (which is also the order of the header for files written by
  // the reference library).
  const std::vector<SafetensorsTensor>& tensors() const { return tensors_; }
  const SafetensorsTensor* find(std::string_view name) const;
  // __metadata__: string to string.
  const std::vector<std::pair<std::string, std::string>>& metadata() const { return metadata_; }
  const std::string* metadata_value(std::string_view key) const;
  // The byte of the file where the key `name` is in the header: a tensor's entry (depth 1) or
  // a key of __metadata__ (depth 2); or 8 (the header's start) when it is not there as
  // written. Scans the header: for error messages.
  uint64_t entry_offset(std::string_view name, int depth = 1) const;
  std::span<const uint8_t> data(const SafetensorsTensor& t) const {
    return source_->bytes(t.begin, t.end - t.begin);
  }

 private:
  std::shared_ptr<const ByteSource> source_;
  uint64_t header_bytes_ = 0;
  std::vector<SafetensorsTensor> tensors_;
  std::unordered_map<std::string, size_t> index_;
  std::vector<std::pair<std::string, std::string>> metadata_;
};

// Bytes per element of a safetensors dtype, or 0 for a name the format does not define.
uint64_t safetensors_dtype_size(std::string_view dtype);

// Serialises tensors into the safetensors format (header padded with spaces to a multiple of
// 8, data in the order given). Used by tests and examples to make inputs.
struct SafetensorsEntry {
  std::string name;
  std::string dtype;
  std::vector<int64_t> shape;
  std::vector<uint8_t> data;
};
std::vector<uint8_t> serialize_safetensors(
    const std::vector<SafetensorsEntry>& tensors,
    const std::vector<std::pair<std::string, std::string>>& metadata = {});

}  // namespace gguf

// The validated, read-only view of one GGUF file.
//
// GGUF layout (little-endian), versions 2 and 3:
//   u32 magic "GGUF" | u32 version | u64 n_tensors | u64 n_kv
//   n_kv x  { string key | u32 value_type | value }
//            string = u64 length + bytes (no NUL); array = u32 elem_type + u64 count + elems
//   n_tensors x { string name | u32 n_dims | n_dims x i64 ne | u32 ggml_type | u64 offset }
//   padding to general.alignment (u32, default 32) | tensor data (offsets relative to here)
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <unordered_map>
#include <vector>

#include "gguf/base/error.h"
#include "gguf/format/metadata.h"
#include "gguf/format/types.h"
#include "gguf/io/source.h"

namespace gguf {

inline constexpr uint32_t kMagic = 0x46554747;  // "GGUF" read as little-endian u32
inline constexpr uint64_t kDefaultAlignment = 32;
inline constexpr size_t kMaxDims = 4;
inline constexpr size_t kMaxNameBytes = 63;  // ggml/llama.cpp: names shorter than 64 bytes
inline constexpr uint64_t kMaxStringBytes = uint64_t{1} << 30;  // ggml refuses longer strings

struct TensorInfo {
  std::string name;
  uint32_t type_id = 0;
  std::vector<int64_t> shape;  // ne, n_dims entries
  uint64_t offset = 0;         // relative to the data section
  uint64_t n_elements = 0;
  std::optional<uint64_t> bytes;  // nullopt when the type is unknown or removed
  uint64_t info_offset = 0;       // where this tensor's info starts in the file

  // Where the info's fields are (name length at info_offset, n_dims, ne, type, data offset):
  // the bytes messages about the shape, the type or the data offset name.
  uint64_t dims_offset() const { return info_offset + 8 + name.size(); }
  uint64_t type_offset() const { return dims_offset() + 4 + 8 * shape.size(); }
  uint64_t data_offset_field() const { return type_offset() + 4; }

  const TypeTraits* type() const { return sized_type(type_id); }
  // The payload size, or a gguf::Error naming the tensor when the type cannot be sized.
  uint64_t require_bytes(const std::string& path) const;
  // A gguf::Error naming the input, the tensor and its info when the name is empty (the
  // writer refuses it) or too long for ggml's reader (kMaxNameBytes): a file written with it
  // could not be loaded.
  void require_ggml_name(const std::string& path) const;
};

// "tensor 'name'" with the name escaped (and cut after 100 bytes); the object of errors.
std::string tensor_object(std::string_view name);
std::string key_object(std::string_view key);
// "[4096, 128, 8]": a shape in messages and tables.
std::string shape_text(const std::vector<int64_t>& shape);
// Equal as ggml sees shapes: padded with 1s to four dimensions, so [256, 1] is [256]. Writers
// differ here (gguf-py keeps trailing 1s, ggml's own writer drops them).
bool same_shape(const std::vector<int64_t>& a, const std::vector<int64_t>& b);
// The dimension count as ggml sees it (ggml_n_dims): trailing 1s do not count, and at least 1;
// [4096, 1] is a vector. Roles (classify_tensor) are given this count.
int ggml_dims(const std::vector<int64_t>& shape);

// A key or tensor name as ggml reads it: up to its first NUL byte (it compares names with
// strcmp), so "w\0a" and "w\0b" are one name to ggml.
std::string_view as_ggml_reads(std::string_view name);
// Why a key (a tensor name) that ggml reads as it reads an earlier one, first, is a defect: for
// keys its lookups find only the first; for tensors its reader refuses the file.
std::string read_as_one_message(bool is_key, std::string_view first, std::string_view name);
// The entry ggml's gguf_find_key finds: the first whose key reads `key` up to a NUL byte.
const KeyValue* find_key_as_ggml(const Metadata& m, std::string_view key);

class GgufFile {
 public:
  // Opens and validates path; throws gguf::Error on any defect.
  static std::shared_ptr<const GgufFile> open(const std::string& path);
  // Validates a source; throws gguf::Error on any defect.
  static std::shared_ptr<const GgufFile> parse(std::shared_ptr<const ByteSource> source);
  // Like parse, but returns what could be read before the first defect; error is set then.
  static std::shared_ptr<const GgufFile> parse_partial(std::shared_ptr<const ByteSource> source,
                                                       std::optional<Error>& error);

  const std::string& path() const { return source_->name(); }
  const ByteSource& source() const { return *source_; }
  std::shared_ptr<const ByteSource> source_ptr() const { return source_; }
  uint32_t version() const { return version_; }
  uint64_t alignment() const { return alignment_; }
  const Metadata& metadata() const { return metadata_; }
  const std::vector<TensorInfo>& tensors() const { return tensors_; }
  uint64_t header_end() const { return header_end_; }    // end of the last tensor info
  uint64_t data_offset() const { return data_offset_; }  // start of the data section
  uint64_t file_size() const { return source_->size(); }
  const TensorInfo* find_tensor(std::string_view name) const;

  // Absolute offset of a tensor's data in the file.
  uint64_t data_start(const TensorInfo& t) const { return data_offset_ + t.offset; }
  // The tensor's payload (bounds were validated when parsing); throws for unsized types.
  std::span<const uint8_t> tensor_data(const TensorInfo& t) const;

 private:
  friend class Parser;
  std::shared_ptr<const ByteSource> source_;
  uint32_t version_ = 0;
  uint64_t alignment_ = kDefaultAlignment;
  Metadata metadata_;
  std::vector<TensorInfo> tensors_;
  std::unordered_map<std::string, size_t> tensor_index_;  // name -> position in tensors_
  uint64_t header_end_ = 0, data_offset_ = 0;
};

}  // namespace gguf

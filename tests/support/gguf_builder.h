// In-memory GGUF builder, the fixture factory of the tests (what yaml2obj is for ELF). It has its
// own serializer, independent of libgguf's writer, so it can test both the reader and the writer;
// a Defect injects exactly one corruption into the file it lays out.
#pragma once

#include <cstdint>
#include <cstring>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace gguf::testing {

// GGUF value type tags, spelled out here so fixtures do not depend on the library under test.
enum class Tag : uint32_t {
  kU8 = 0,
  kI8 = 1,
  kU16 = 2,
  kI16 = 3,
  kU32 = 4,
  kI32 = 5,
  kF32 = 6,
  kBool = 7,
  kString = 8,
  kArray = 9,
  kU64 = 10,
  kI64 = 11,
  kF64 = 12,
};

// One corruption. `arg` selects the key or tensor it applies to (index in insertion order) or
// carries the value the defect writes; see each kind.
enum class DefectKind {
  kNone,
  kBadMagic,              // magic "GGML"
  kVersion,               // version field = arg (1, 4, 0, ...)
  kBigEndian,             // version 3 written big-endian (reads as 0x03000000)
  kTruncate,              // file cut to arg bytes
  kHugeTensorCount,       // tensor count field = arg
  kHugeKvCount,           // key/value count field = arg
  kStringPastEof,         // key #arg (a string or a string array): a length field of 2^40
  kKeyPastEof,            // key #arg: key length field of 2^40
  kEmptyKey,              // key #arg has an empty name
  kDuplicateKey,          // key #arg repeats the name of key #0 (arg >= 1)
  kUnknownValueType,      // key #arg has value type 13
  kNestedArray,           // key #arg is an array of arrays
  kArrayCountPastEof,     // key #arg (an array): count field of 2^40
  kAlignmentWrongType,    // general.alignment written as u64 32
  kAlignmentZero,         // general.alignment = 0
  kAlignmentNotPowerOf2,  // general.alignment = 48
  kTooManyDims,           // tensor #arg has 5 dimensions
  kNegativeDim,           // tensor #arg: dimension 1 is -3
  kElementCountOverflow,  // tensor #arg: shape [2^32, 2^32]
  kByteSizeOverflow,      // tensor #arg: f32 [2^31, 2^31] (2^62 elements, 2^64 bytes)
  kRowNotBlockMultiple,   // tensor #arg: q4_0 with ne0 = 33
  kUnknownTypeId,         // tensor #arg: type id 99
  kElementTotalOverflow,  // tensors #0..#arg: type id 99, [3 x 2^61] each (int64 passed at #1)
  kRemovedTypeId,         // tensor #arg: type id 4 (q4_2)
  kDuplicateTensorName,   // tensor #arg repeats the name of tensor #0 (arg >= 1)
  kEmptyTensorName,       // tensor #arg has an empty name
  kLongTensorName,        // tensor #arg's name padded with 'x' to 64 bytes
  kMisalignedOffset,      // tensor #arg: offset + 1
  kOffsetPastEof,         // tensor #arg: an aligned offset far past the end of the file
  kDataPastEof,           // file cut 1 byte into the last tensor's data
  kSharedData,            // tensor #arg: same offset as tensor #arg-1
  kOverlap,               // tensor #arg: starts one alignment unit into tensor #arg-1
  kGap,                   // tensors #arg.. shifted by one alignment unit
  kReorder,               // data of tensors #arg and #arg+1 swapped in the data section
};

struct Defect {
  DefectKind kind = DefectKind::kNone;
  uint64_t arg = 0;
};

// Where things landed in the file the builder lays out (offsets as the reader reports them).
struct Layout {
  std::vector<uint64_t> kv_offsets;            // start of each key/value
  std::vector<uint64_t> kv_type_offsets;       // its value type field
  std::vector<uint64_t> kv_value_offsets;      // its value
  std::vector<uint64_t> tensor_info_offsets;   // start of each tensor info
  std::vector<uint64_t> tensor_type_offsets;   // its type field
  std::vector<uint64_t> tensor_offset_fields;  // its data offset field
  std::vector<uint64_t> tensor_offsets;        // offsets written in the infos (data-relative)
  std::vector<uint64_t> tensor_bytes;          // payload bytes placed for each tensor
  uint64_t header_end = 0;
  uint64_t data_offset = 0;
  uint64_t file_size = 0;
};

// Bytes of n elements of a ggml type by the builder's own table; nullopt for unknown and removed
// ids or when n is not a multiple of the block size.
std::optional<uint64_t> fixture_type_bytes(uint32_t type, uint64_t n);
// Deterministic bytes in [0, 0x3f]: any float16/bfloat16/float32/float64 or block scale read from
// them is finite, so a generated payload never trips a NaN/Inf check by accident.
std::vector<uint8_t> pattern_bytes(size_t n, uint32_t seed);

class GgufBuilder {
 public:
  GgufBuilder& version(uint32_t v);
  // Adds general.alignment (u32) at this position and lays the data out with it.
  GgufBuilder& alignment(uint32_t a);

  GgufBuilder& u8(std::string key, uint8_t v) { return scalar(std::move(key), Tag::kU8, v); }
  GgufBuilder& i8(std::string key, int8_t v) { return scalar(std::move(key), Tag::kI8, v); }
  GgufBuilder& u16(std::string key, uint16_t v) { return scalar(std::move(key), Tag::kU16, v); }
  GgufBuilder& i16(std::string key, int16_t v) { return scalar(std::move(key), Tag::kI16, v); }
  GgufBuilder& u32(std::string key, uint32_t v) { return scalar(std::move(key), Tag::kU32, v); }
  GgufBuilder& i32(std::string key, int32_t v) { return scalar(std::move(key), Tag::kI32, v); }
  GgufBuilder& f32(std::string key, float v) { return scalar(std::move(key), Tag::kF32, v); }
  GgufBuilder& boolean(std::string key, bool v) {
    return scalar(std::move(key), Tag::kBool, static_cast<uint8_t>(v));
  }
  GgufBuilder& u64(std::string key, uint64_t v) { return scalar(std::move(key), Tag::kU64, v); }
  GgufBuilder& i64(std::string key, int64_t v) { return scalar(std::move(key), Tag::kI64, v); }
  GgufBuilder& f64(std::string key, double v) { return scalar(std::move(key), Tag::kF64, v); }
  GgufBuilder& string(std::string key, std::string v);
  // An array of scalars of tag elem; T must have the size of elem.
  template <class T>
  GgufBuilder& array(std::string key, Tag elem, const std::vector<T>& v) {
    std::vector<uint8_t> raw(v.size() * sizeof(T));
    if (!raw.empty()) std::memcpy(raw.data(), v.data(), raw.size());
    return raw_array(std::move(key), elem, v.size(), std::move(raw));
  }
  GgufBuilder& string_array(std::string key, std::vector<std::string> v);
  // Any value type tag followed by raw value bytes (for tags the format does not know).
  GgufBuilder& raw_kv(std::string key, uint32_t tag, std::vector<uint8_t> value_bytes);

  // A tensor with an explicit payload (its size decides the layout, whatever the shape says).
  GgufBuilder& tensor(std::string name, uint32_t type, std::vector<int64_t> shape,
                      std::vector<uint8_t> payload);
  // A tensor with a generated payload of the size its type and shape need (empty when the type
  // cannot be sized).
  GgufBuilder& tensor(std::string name, uint32_t type, std::vector<int64_t> shape);
  // A tensor whose payload is zeros that write_file() leaves as a hole in a sparse file.
  GgufBuilder& sparse_tensor(std::string name, uint32_t type, std::vector<int64_t> shape);

  GgufBuilder& defect(Defect d);

  Layout layout() const;
  std::vector<uint8_t> build() const;
  // Writes the file with pwrite into an ftruncate'd file: sparse payloads are never written.
  void write_file(const std::string& path) const;

 private:
  struct Kv {
    Kv(std::string k, uint32_t t, uint32_t e = 0) : key(std::move(k)), tag(t), elem(e) {}
    std::string key;
    uint32_t tag = 0;
    uint32_t elem = 0;              // array element tag
    uint64_t count = 0;             // array length
    std::vector<uint8_t> raw;       // scalar bytes, packed array elements or raw value bytes
    std::vector<std::string> strs;  // a string value (one entry) or string array elements
    bool verbatim = false;          // raw holds everything after the tag
  };
  struct Tensor {
    Tensor(std::string n, uint32_t t, std::vector<int64_t> s, std::vector<uint8_t> p = {})
        : name(std::move(n)), type(t), shape(std::move(s)), payload(std::move(p)) {}
    std::string name;
    uint32_t type = 0;
    std::vector<int64_t> shape;
    std::vector<uint8_t> payload;
    uint64_t sparse_bytes = 0;  // payload size when the payload is a hole
    bool sparse = false;
    uint64_t size() const { return sparse ? sparse_bytes : payload.size(); }
  };
  struct Image;

  template <class T>
  GgufBuilder& scalar(std::string key, Tag tag, T v) {
    Kv kv{std::move(key), static_cast<uint32_t>(tag)};
    kv.raw.resize(sizeof(T));
    std::memcpy(kv.raw.data(), &v, sizeof(T));
    kvs_.push_back(std::move(kv));
    return *this;
  }
  GgufBuilder& raw_array(std::string key, Tag elem, uint64_t count, std::vector<uint8_t> raw);
  Image image() const;

  uint32_t version_ = 3;
  uint32_t alignment_ = 32;
  std::vector<Kv> kvs_;
  std::vector<Tensor> tensors_;
  Defect defect_;
};

// Writes bytes to path (a fixture on disk; see TempDir in cli_run.h); returns path.
std::string write_bytes(const std::string& path, const std::vector<uint8_t>& bytes);

}  // namespace gguf::testing

// Internal: GGUF's little-endian encoding of strings and metadata values, the writer's side of
// io/cursor.h. The writer's header (write/serialize.cpp) and the hashes of metadata values
// (format/hash.cpp) both take a value's bytes from here.
#pragma once

#include <bit>
#include <cstdint>
#include <cstring>
#include <string_view>
#include <vector>

#include "gguf/format/metadata.h"

namespace gguf::detail {

static_assert(std::endian::native == std::endian::little,
              "the encoder copies scalars as host bytes; GGUF is little-endian");

// Appends GGUF encodings to a byte vector (reserve its final size first).
class Encoder {
 public:
  explicit Encoder(std::vector<uint8_t>& out) : out_(out) {}
  template <class T>
  void put(T v) {
    const size_t at = out_.size();
    out_.resize(at + sizeof(T));
    std::memcpy(out_.data() + at, &v, sizeof(T));
  }
  void raw(const void* p, size_t n) {
    const auto* b = static_cast<const uint8_t*>(p);
    out_.insert(out_.end(), b, b + n);
  }
  // A u64 length, then the bytes.
  void string(std::string_view s) {
    put<uint64_t>(s.size());
    raw(s.data(), s.size());
  }
  // Its u32 type, then its encoding.
  void value(const Value& v);

 private:
  std::vector<uint8_t>& out_;
};

// Bytes of a value's encoding, without its u32 type.
uint64_t value_bytes(const Value& v);
// A value as a GGUF header stores it: its u32 type, then its encoding.
std::vector<uint8_t> encode_value(const Value& v);

}  // namespace gguf::detail

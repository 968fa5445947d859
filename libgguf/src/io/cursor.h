// A bounded read cursor over one byte source: the only way the GGUF, imatrix and safetensors
// header parsers read bytes. Every length is checked against what remains before it is used,
// and every failure names the file, what was being read, the byte offset and the expectation.
#pragma once

#include <bit>
#include <cstdint>
#include <cstring>
#include <span>
#include <string>
#include <string_view>
#include <type_traits>

#include "gguf/io/source.h"

namespace gguf {

class Cursor {
 public:
  // Reads the whole of `source`, from byte 0; the source must outlive the cursor.
  explicit Cursor(const ByteSource& source);

  const std::string& file() const { return file_; }
  uint64_t size() const { return size_; }
  uint64_t pos() const { return pos_; }
  uint64_t left() const { return size_ - pos_; }

  // What is being read ("key 'general.name'", "tensor #3", "entry #0"), named by every
  // failure; empty for the file as a whole.
  void set_object(std::string object) { object_ = std::move(object); }
  const std::string& object() const { return object_; }

  // Throws gguf::Error(file, object, at, message).
  [[noreturn]] void fail(uint64_t at, std::string message) const;

  // Fails unless n bytes remain: "<what> runs past end of file (needs N bytes, M left)".
  void need(uint64_t n, std::string_view what) const {
    if (n > left()) [[unlikely]]
      fail_need(n, what);
  }

  // A little-endian integer, checked with need().
  template <class T>
  requires std::is_integral_v<T> T read(std::string_view what) {
    need(sizeof(T), what);
    T v;
    std::memcpy(&v, data_ + pos_, sizeof(T));
    if constexpr (std::endian::native == std::endian::big) v = swap_bytes(v);
    pos_ += sizeof(T);
    return v;
  }

  // The next n bytes: "<what> of N bytes runs past end of file (M left)".
  std::span<const uint8_t> take(uint64_t n, std::string_view what) {
    if (n > left()) [[unlikely]]
      fail_take(n, what);
    const std::span<const uint8_t> b(data_ + pos_, static_cast<size_t>(n));
    pos_ += n;
    return b;
  }

  // GGUF's string: a u64 length, then that many bytes. A length over max_bytes fails
  // ("<what> length N exceeds ggml's limit of L bytes"), as does one past the end ("<what>
  // length N runs past end of file (M bytes left)"), both at the length's offset.
  std::string read_string(std::string_view what, uint64_t max_bytes);

 private:
  [[noreturn]] void fail_need(uint64_t n, std::string_view what) const;
  [[noreturn]] void fail_take(uint64_t n, std::string_view what) const;

  template <class T>
  static T swap_bytes(T v) {
    auto u = static_cast<std::make_unsigned_t<T>>(v);
    std::make_unsigned_t<T> r = 0;
    for (size_t i = 0; i < sizeof(T); ++i, u >>= 8)
      r = static_cast<decltype(r)>((r << 8) | (u & 0xFF));
    return static_cast<T>(r);
  }

  const uint8_t* data_;
  uint64_t size_;
  uint64_t pos_ = 0;
  const std::string& file_;
  std::string object_;
};

}  // namespace gguf

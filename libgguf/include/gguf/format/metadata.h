// The typed key/value model of GGUF metadata: all 13 value types, arrays of any scalar type or
// of strings (nested arrays are refused by the reader, as ggml refuses them).
#pragma once

#include <cstdint>
#include <cstring>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace gguf {

enum class ValueType : uint32_t {
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
inline constexpr uint32_t kValueTypeCount = 13;

// "u8", "i32", "f32", "bool", "string", "array", ... as GGUF tools spell them.
std::string_view value_type_name(ValueType t);
// Bytes of one scalar of type t; 0 for string and array.
size_t scalar_size(ValueType t);

class Value {
 public:
  Value() = default;

  static Value u8(uint8_t v) { return scalar(ValueType::kU8, v); }
  static Value i8(int8_t v) { return scalar(ValueType::kI8, v); }
  static Value u16(uint16_t v) { return scalar(ValueType::kU16, v); }
  static Value i16(int16_t v) { return scalar(ValueType::kI16, v); }
  static Value u32(uint32_t v) { return scalar(ValueType::kU32, v); }
  static Value i32(int32_t v) { return scalar(ValueType::kI32, v); }
  static Value u64(uint64_t v) { return scalar(ValueType::kU64, v); }
  static Value i64(int64_t v) { return scalar(ValueType::kI64, v); }
  static Value f32(float v) { return scalar(ValueType::kF32, v); }
  static Value f64(double v) { return scalar(ValueType::kF64, v); }
  static Value boolean(bool v) { return scalar(ValueType::kBool, static_cast<uint8_t>(v)); }
  static Value string(std::string v);
  static Value string_array(std::vector<std::string> v);
  // An array of scalars given as packed little-endian bytes (count * scalar_size(elem)).
  static Value scalar_array(ValueType elem, std::vector<uint8_t> packed);
  template <class T>
  static Value array_of(ValueType elem, std::span<const T> values) {
    std::vector<uint8_t> raw(values.size() * sizeof(T));
    if (!raw.empty()) std::memcpy(raw.data(), values.data(), raw.size());
    return scalar_array(elem, std::move(raw));
  }
  // A scalar from its raw little-endian bits (the reader's path).
  static Value from_bits(ValueType t, uint64_t bits);

  ValueType type() const { return type_; }
  ValueType array_type() const { return array_type_; }  // meaningful when type() == kArray
  bool is_array() const { return type_ == ValueType::kArray; }
  uint64_t array_size() const;

  // Scalar views; nullopt when the type does not fit (e.g. as_uint on a negative i32).
  std::optional<uint64_t> as_uint() const;
  std::optional<int64_t> as_int() const;
  std::optional<double> as_double() const;  // any numeric scalar or bool
  std::optional<bool> as_bool() const;
  const std::string* as_string() const;
  uint64_t bits() const { return bits_; }

  // Array views.
  const std::vector<std::string>& strings() const { return strings_; }
  std::span<const uint8_t> packed() const { return packed_; }
  // Element i of a numeric array as a scalar Value.
  Value element(uint64_t i) const;

  bool operator==(const Value& o) const;

 private:
  template <class T>
  static Value scalar(ValueType t, T v) {
    Value out;
    out.type_ = t;
    std::memcpy(&out.bits_, &v, sizeof(T));
    return out;
  }
  ValueType type_ = ValueType::kU8;
  ValueType array_type_ = ValueType::kU8;
  uint64_t bits_ = 0;
  std::string str_;
  std::vector<std::string> strings_;
  std::vector<uint8_t> packed_;
};

struct KeyValue {
  std::string key;
  Value value;
  uint64_t offset = 0;  // where the key starts in its file (0 for keys made in memory)

  // Where its value type and its value are in the file (for keys read from one): the bytes
  // messages about the type or the value name.
  uint64_t type_offset() const { return offset + 8 + key.size(); }
  uint64_t value_offset() const { return type_offset() + 4; }
};

// Ordered metadata with lookup by key; keys are unique.
class Metadata {
 public:
  const std::vector<KeyValue>& entries() const { return entries_; }
  size_t size() const { return entries_.size(); }
  const Value* find(std::string_view key) const;
  // Replaces the value of an existing key in place, or appends a new key.
  void set(std::string key, Value value);
  bool erase(std::string_view key);
  // Appends; returns false (and changes nothing) when the key exists.
  bool append(KeyValue kv);

  // Typed lookups that return nullopt when absent or of another type.
  std::optional<std::string> get_string(std::string_view key) const;
  std::optional<uint64_t> get_uint(std::string_view key) const;

 private:
  std::vector<KeyValue> entries_;
  std::unordered_map<std::string, size_t> index_;
  void reindex();
};

// A human-readable rendering of a value: strings escaped for a terminal and quoted (a quote
// inside is \"), each cut after about max_string_bytes bytes unless that is 0; arrays
// abbreviated to max_items elements unless max_items == 0.
std::string format_value(const Value& v, size_t max_items = 8, size_t max_string_bytes = 0);

}  // namespace gguf

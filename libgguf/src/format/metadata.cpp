// Typed metadata values and the ordered key/value container.
#include "gguf/format/metadata.h"

#include <fmt/format.h>

#include <bit>
#include <cmath>

#include "gguf/base/error.h"
#include "gguf/base/escape.h"

namespace gguf {

std::string_view value_type_name(ValueType t) {
  static constexpr std::string_view kNames[] = {"u8",  "i8",  "u16",  "i16",    "u32",
                                                "i32", "f32", "bool", "string", "array",
                                                "u64", "i64", "f64"};
  const auto i = static_cast<uint32_t>(t);
  return i < kValueTypeCount ? kNames[i] : std::string_view("unknown");
}

size_t scalar_size(ValueType t) {
  switch (t) {
    case ValueType::kU8:
    case ValueType::kI8:
    case ValueType::kBool:
      return 1;
    case ValueType::kU16:
    case ValueType::kI16:
      return 2;
    case ValueType::kU32:
    case ValueType::kI32:
    case ValueType::kF32:
      return 4;
    case ValueType::kU64:
    case ValueType::kI64:
    case ValueType::kF64:
      return 8;
    default:
      return 0;
  }
}

Value Value::string(std::string v) {
  Value out;
  out.type_ = ValueType::kString;
  out.str_ = std::move(v);
  return out;
}

Value Value::string_array(std::vector<std::string> v) {
  Value out;
  out.type_ = ValueType::kArray;
  out.array_type_ = ValueType::kString;
  out.strings_ = std::move(v);
  return out;
}

Value Value::scalar_array(ValueType elem, std::vector<uint8_t> packed) {
  const size_t es = scalar_size(elem);
  if (es == 0 || packed.size() % es != 0)
    throw Error(
        fmt::format("array of {} cannot hold {} bytes", value_type_name(elem), packed.size()));
  Value out;
  out.type_ = ValueType::kArray;
  out.array_type_ = elem;
  out.packed_ = std::move(packed);
  return out;
}

Value Value::from_bits(ValueType t, uint64_t bits) {
  Value out;
  out.type_ = t;
  out.bits_ = bits;
  return out;
}

uint64_t Value::array_size() const {
  if (type_ != ValueType::kArray) return 0;
  if (array_type_ == ValueType::kString) return strings_.size();
  return packed_.size() / scalar_size(array_type_);
}

std::optional<int64_t> Value::as_int() const {
  switch (type_) {
    case ValueType::kU8:
      return static_cast<uint8_t>(bits_);
    case ValueType::kI8:
      return static_cast<int8_t>(bits_);
    case ValueType::kU16:
      return static_cast<uint16_t>(bits_);
    case ValueType::kI16:
      return static_cast<int16_t>(bits_);
    case ValueType::kU32:
      return static_cast<uint32_t>(bits_);
    case ValueType::kI32:
      return static_cast<int32_t>(bits_);
    case ValueType::kI64:
      return static_cast<int64_t>(bits_);
    case ValueType::kU64:
      if (bits_ > static_cast<uint64_t>(INT64_MAX)) return std::nullopt;
      return static_cast<int64_t>(bits_);
    default:
      return std::nullopt;
  }
}

std::optional<uint64_t> Value::as_uint() const {
  if (type_ == ValueType::kU64) return bits_;
  const auto i = as_int();
  if (!i || *i < 0) return std::nullopt;
  return static_cast<uint64_t>(*i);
}

std::optional<double> Value::as_double() const {
  if (type_ == ValueType::kF32) return std::bit_cast<float>(static_cast<uint32_t>(bits_));
  if (type_ == ValueType::kF64) return std::bit_cast<double>(bits_);
  if (type_ == ValueType::kBool) return bits_ != 0 ? 1.0 : 0.0;
  if (type_ == ValueType::kU64) return static_cast<double>(bits_);
  if (const auto i = as_int()) return static_cast<double>(*i);
  return std::nullopt;
}

std::optional<bool> Value::as_bool() const {
  if (type_ != ValueType::kBool) return std::nullopt;
  return (bits_ & 0xFF) != 0;
}

const std::string* Value::as_string() const {
  return type_ == ValueType::kString ? &str_ : nullptr;
}

Value Value::element(uint64_t i) const {
  const size_t es = scalar_size(array_type_);
  if (type_ != ValueType::kArray || es == 0 || i >= array_size())
    throw Error(fmt::format("array element {} out of range", i));
  uint64_t bits = 0;
  std::memcpy(&bits, packed_.data() + i * es, es);
  return from_bits(array_type_, bits);
}

bool Value::operator==(const Value& o) const {
  if (type_ != o.type_) return false;
  switch (type_) {
    case ValueType::kString:
      return str_ == o.str_;
    case ValueType::kArray:
      return array_type_ == o.array_type_ && strings_ == o.strings_ && packed_ == o.packed_;
    default:
      return bits_ == o.bits_;
  }
}

const Value* Metadata::find(std::string_view key) const {
  const auto it = index_.find(std::string(key));
  return it == index_.end() ? nullptr : &entries_[it->second].value;
}

void Metadata::set(std::string key, Value value) {
  const auto it = index_.find(key);
  if (it != index_.end()) {
    entries_[it->second].value = std::move(value);
    return;
  }
  index_.emplace(key, entries_.size());
  entries_.push_back({std::move(key), std::move(value), 0});
}

bool Metadata::erase(std::string_view key) {
  const auto it = index_.find(std::string(key));
  if (it == index_.end()) return false;
  entries_.erase(entries_.begin() + static_cast<std::ptrdiff_t>(it->second));
  reindex();
  return true;
}

bool Metadata::append(KeyValue kv) {
  if (index_.count(kv.key)) return false;
  index_.emplace(kv.key, entries_.size());
  entries_.push_back(std::move(kv));
  return true;
}

void Metadata::reindex() {
  index_.clear();
  for (size_t i = 0; i < entries_.size(); ++i) index_.emplace(entries_[i].key, i);
}

std::optional<std::string> Metadata::get_string(std::string_view key) const {
  const Value* v = find(key);
  if (!v || !v->as_string()) return std::nullopt;
  return *v->as_string();
}

std::optional<uint64_t> Metadata::get_uint(std::string_view key) const {
  const Value* v = find(key);
  return v ? v->as_uint() : std::nullopt;
}

namespace {

// "text" escaped, with \" for a quote (backslashes are doubled already, so it is unambiguous);
// past max_bytes (0: no limit) cut at a character boundary and marked.
std::string quoted(std::string_view s, size_t max_bytes) {
  size_t cut = s.size();
  if (max_bytes != 0 && s.size() > max_bytes) {
    cut = max_bytes;
    while (cut > 0 && (static_cast<unsigned char>(s[cut]) & 0xC0) == 0x80) --cut;
  }
  std::string out = "\"";
  for (char c : escape_for_terminal(s.substr(0, cut))) {
    if (c == '"') out += '\\';
    out += c;
  }
  out += '"';
  if (cut < s.size()) out += fmt::format("... ({} bytes in all)", s.size());
  return out;
}

std::string format_scalar(const Value& v, size_t max_string_bytes) {
  switch (v.type()) {
    case ValueType::kBool:
      return *v.as_bool() ? "true" : "false";
    case ValueType::kF32:
    case ValueType::kF64:
      return fmt::format("{}", *v.as_double());
    case ValueType::kString:
      return quoted(*v.as_string(), max_string_bytes);
    case ValueType::kU64:
      return fmt::format("{}", v.bits());
    default:
      return fmt::format("{}", *v.as_int());
  }
}

}  // namespace

std::string format_value(const Value& v, size_t max_items, size_t max_string_bytes) {
  if (!v.is_array()) return format_scalar(v, max_string_bytes);
  const uint64_t n = v.array_size();
  const uint64_t shown = max_items == 0 ? n : std::min<uint64_t>(n, max_items);
  std::string out = "[";
  for (uint64_t i = 0; i < shown; ++i) {
    if (i) out += ", ";
    if (v.array_type() == ValueType::kString)
      out += quoted(v.strings()[i], max_string_bytes);
    else
      out += format_scalar(v.element(i), 0);
  }
  if (shown < n) out += fmt::format(", ... ({} more)", n - shown);
  out += "]";
  return out;
}

}  // namespace gguf

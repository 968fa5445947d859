// GGUF's encoding of metadata values (format/encoder.h).
#include "format/encoder.h"

namespace gguf::detail {

void Encoder::value(const Value& v) {
  put<uint32_t>(static_cast<uint32_t>(v.type()));
  if (v.type() == ValueType::kString) return string(*v.as_string());
  if (!v.is_array()) {
    const uint64_t bits = v.bits();
    return raw(&bits, scalar_size(v.type()));
  }
  put<uint32_t>(static_cast<uint32_t>(v.array_type()));
  put<uint64_t>(v.array_size());
  if (v.array_type() == ValueType::kString) {
    for (const auto& s : v.strings()) string(s);
  } else {
    raw(v.packed().data(), v.packed().size());
  }
}

uint64_t value_bytes(const Value& v) {
  if (v.type() == ValueType::kString) return 8 + v.as_string()->size();
  if (!v.is_array()) return scalar_size(v.type());
  uint64_t n = 4 + 8;
  if (v.array_type() != ValueType::kString) return n + v.packed().size();
  for (const auto& s : v.strings()) n += 8 + s.size();
  return n;
}

std::vector<uint8_t> encode_value(const Value& v) {
  std::vector<uint8_t> out;
  out.reserve(4 + value_bytes(v));
  Encoder(out).value(v);
  return out;
}

}  // namespace gguf::detail

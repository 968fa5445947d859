// JSON forms of metadata values.
#include "gguf/json.h"

#include <bit>
#include <cmath>

#include "gguf/escape.h"

namespace gguf {
namespace {

nlohmann::json scalar_json(const Value& v) {
  switch (v.type()) {
    case ValueType::kBool:
      return *v.as_bool();
    case ValueType::kString:
      return utf8_or_escaped(*v.as_string());
    case ValueType::kU64:
      return v.bits();
    case ValueType::kF32:
    case ValueType::kF64: {
      const double d = *v.as_double();
      return std::isfinite(d) ? nlohmann::json(d) : nlohmann::json(nullptr);
    }
    default:
      return *v.as_int();
  }
}

}  // namespace

nlohmann::json value_json(const Value& v) {
  if (!v.is_array()) return scalar_json(v);
  nlohmann::json a = nlohmann::json::array();
  if (v.array_type() == ValueType::kString) {
    for (const auto& s : v.strings()) a.push_back(utf8_or_escaped(s));
  } else {
    for (uint64_t i = 0; i < v.array_size(); ++i) a.push_back(scalar_json(v.element(i)));
  }
  return a;
}

nlohmann::json metadata_json(const KeyValue& kv) {
  nlohmann::json j = {{"key", utf8_or_escaped(kv.key)},
                      {"type", std::string(value_type_name(kv.value.type()))},
                      {"value", value_json(kv.value)}};
  if (kv.value.is_array()) j["element_type"] = std::string(value_type_name(kv.value.array_type()));
  return j;
}

}  // namespace gguf

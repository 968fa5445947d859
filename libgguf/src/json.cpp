// JSON forms of metadata values.
#include "gguf/json.h"

#include <fmt/format.h>

#include <bit>
#include <cmath>

#include "gguf/error.h"
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
      // JSON has no NaN or infinity; null would lose which one it was.
      const double d = *v.as_double();
      if (std::isnan(d)) return "nan";
      if (std::isinf(d)) return d > 0 ? "inf" : "-inf";
      return d;
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

std::string dump_json(const nlohmann::json& j, int indent) {
  return escape_json_for_terminal(j.dump(indent));
}

nlohmann::json selection_json(const Selector& s) {
  nlohmann::json layers = nlohmann::json::array(), roles = nlohmann::json::array(),
                 match = nlohmann::json::array();
  for (const auto& [lo, hi] : s.layers) layers.push_back({lo, hi});
  for (Role r : s.roles) roles.push_back(std::string(role_name(r)));
  // Escaped like every string from outside (a backslash doubled, a byte that is not UTF-8 as
  // \xNN); selection_from_json undoes it.
  for (const auto& p : s.patterns) match.push_back(utf8_or_escaped(p));
  return {{"layers", layers},
          {"roles", roles},
          {"match", match},
          {"text", utf8_or_escaped(s.describe())}};
}

Selector selection_from_json(const nlohmann::json& j, const std::string& path) {
  const auto fail = [&](const std::string& msg) { return Error(path, "selection", {}, msg); };
  if (!j.is_object()) throw fail("not a JSON object");
  const auto strings = [&](const char* key, bool escaped) {
    std::vector<std::string> out;
    if (!j.contains(key)) return out;
    if (!j[key].is_array()) throw fail(fmt::format("\"{}\" is not an array", key));
    for (const auto& v : j[key]) {
      if (!v.is_string())
        throw fail(fmt::format("\"{}\" holds {}, not a string", key, dump_json(v)));
      out.push_back(escaped ? from_utf8_or_escaped(v.get<std::string>()) : v.get<std::string>());
    }
    return out;
  };
  std::vector<std::string> layers;
  if (j.contains("layers")) {
    if (!j["layers"].is_array()) throw fail("\"layers\" is not an array");
    for (const auto& r : j["layers"]) {
      if (!r.is_array() || r.size() != 2 || !r[0].is_number_unsigned() ||
          !r[1].is_number_unsigned())
        throw fail(fmt::format("layer range {} is not [first, last]", dump_json(r)));
      layers.push_back(fmt::format("{}-{}", r[0].get<uint64_t>(), r[1].get<uint64_t>()));
    }
  }
  try {
    return parse_selector(layers, strings("roles", false), strings("match", true));
  } catch (const Error& e) {
    throw fail(e.message());
  }
}

}  // namespace gguf

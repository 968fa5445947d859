// JSON forms of metadata values.
#include "gguf/format/json.h"

#include <fmt/format.h>

#include <bit>
#include <cmath>
#include <random>
#include <string_view>
#include <vector>

#include "gguf/base/error.h"
#include "gguf/base/escape.h"

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

// Arrays with at least this many elements are written by dump_json, not built as a tree.
constexpr uint64_t kDeferredMinElements = 4096;

// A placeholder: a control character (dumped as \u0001) and a tag drawn at random once per
// process, so that no string from a file can pass for one; then the index in the thread's list.
const std::string& deferred_tag() {
  static const std::string tag = [] {
    std::random_device rd;
    return fmt::format("\x01gguf-array-{:08x}{:08x}{:08x}-", rd(), rd(), rd());
  }();
  return tag;
}

thread_local std::vector<const Value*> t_deferred;

// One element as the tree would have dumped it.
std::string element_text(const Value& v, uint64_t i) {
  if (v.array_type() == ValueType::kString)
    return nlohmann::json(utf8_or_escaped(v.strings()[i])).dump();
  return scalar_json(v.element(i)).dump();
}

// text with every placeholder replaced by its array, laid out as nlohmann lays out an array of
// scalars: indent > 0 puts each element on its own line, one step deeper than the line that
// holds the placeholder; indent < 0 writes [a,b,c].
std::string expand_deferred(const std::string& text, int indent) {
  const std::string quoted_tag = nlohmann::json(deferred_tag()).dump();   // "\u0001gguf-...
  const std::string_view open(quoted_tag.data(), quoted_tag.size() - 1);  // without the '"'
  std::string out;
  size_t from = 0;
  for (size_t at = text.find(open); at != std::string::npos; at = text.find(open, from)) {
    const size_t digits = at + open.size(), close = text.find('"', digits);
    const size_t index = std::stoul(text.substr(digits, close - digits));
    const Value& v = *t_deferred.at(index);
    const size_t line = text.rfind('\n', at);
    const size_t depth = text.find_first_not_of(' ', line == std::string::npos ? 0 : line + 1) -
                         (line == std::string::npos ? 0 : line + 1);
    out.append(text, from, at - from);
    const std::string inner(depth + (indent > 0 ? indent : 0), ' ');
    out += '[';
    for (uint64_t i = 0; i < v.array_size(); ++i) {
      if (i) out += ',';
      if (indent >= 0) out.append("\n").append(inner);
      out += element_text(v, i);
    }
    if (indent >= 0) out.append("\n").append(depth, ' ');
    out += ']';
    from = close + 1;
  }
  if (from == 0) return text;
  out.append(text, from, std::string::npos);
  return out;
}

}  // namespace

nlohmann::json value_json_deferred(const Value& v) {
  if (!v.is_array() || v.array_size() < kDeferredMinElements) return value_json(v);
  t_deferred.push_back(&v);
  return deferred_tag() + std::to_string(t_deferred.size() - 1);
}

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
                      {"value", value_json_deferred(kv.value)}};
  if (kv.value.is_array()) j["element_type"] = std::string(value_type_name(kv.value.array_type()));
  return j;
}

std::string dump_json(const nlohmann::json& j, int indent) {
  std::string text = j.dump(indent);
  // The list is kept (a pointer per long array shown, for the life of the thread): a document
  // may be dumped after another one, or twice.
  if (!t_deferred.empty()) text = expand_deferred(text, indent);
  return escape_json_for_terminal(text);
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

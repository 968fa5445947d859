// Metadata edits of gguf-splice: parsing --set/--set-file/--delete values, and the checks that
// keep an edited file loadable (layout keys, keys llama.cpp requires or reads with one type).
#include "gguf/ops/metadata_edit.h"

#include <fmt/format.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cmath>
#include <cstring>
#include <fstream>
#include <limits>
#include <map>
#include <sstream>

#include "gguf/base/error.h"
#include "gguf/base/escape.h"
#include "gguf/format/file.h"
#include "gguf/io/source.h"
#include "gguf/ops/check.h"

namespace gguf {
namespace {

constexpr std::string_view kTypeList =
    "u8, i8, u16, i16, u32, i32, u64, i64, f32, f64, bool, str; [TYPE] for an array";
constexpr std::string_view kSetForms = "expected KEY=VALUE, KEY:TYPE=VALUE or KEY:[TYPE]=V1,V2";
constexpr std::string_view kSetFileForms = "expected KEY=PATH, KEY:str=PATH or KEY:[TYPE]=PATH";

[[noreturn]] void refuse(std::string_view key, std::string message) {
  throw Error({}, key_object(key), std::nullopt, std::move(message), Error::Kind::kUsage);
}

std::optional<ValueType> scalar_type_named(std::string_view name) {
  static constexpr std::pair<std::string_view, ValueType> kNames[] = {
      {"u8", ValueType::kU8},        {"i8", ValueType::kI8},     {"u16", ValueType::kU16},
      {"i16", ValueType::kI16},      {"u32", ValueType::kU32},   {"i32", ValueType::kI32},
      {"u64", ValueType::kU64},      {"i64", ValueType::kI64},   {"f32", ValueType::kF32},
      {"f64", ValueType::kF64},      {"bool", ValueType::kBool}, {"str", ValueType::kString},
      {"string", ValueType::kString}};
  for (const auto& [n, t] : kNames)
    if (n == name) return t;
  return std::nullopt;
}

// GGUF's spelling of a type in messages: "str" as --set takes it.
std::string type_text(ValueType t) {
  return t == ValueType::kString ? "str" : std::string(value_type_name(t));
}
std::string type_text(const Value& v) {
  return v.is_array() ? fmt::format("[{}]", type_text(v.array_type())) : type_text(v.type());
}

// "a u32", "an i32", "an f32": as the type is read out.
std::string with_article(ValueType t) {
  const std::string name = type_text(t);
  return fmt::format("{} {}", name[0] == 'i' || name[0] == 'f' ? "an" : "a", name);
}

void check_key(std::string_view key) {
  if (key.empty()) usage_error("empty key");
  if (key.size() > kMaxEditKeyBytes)
    usage_error(fmt::format("key of {} bytes ('{}...'): a key holds at most {} bytes", key.size(),
                            escape_for_terminal(key.substr(0, 32)), kMaxEditKeyBytes));
  if (const size_t nul = key.find('\0'); nul != std::string_view::npos)
    refuse(key, fmt::format("holds a NUL byte (at byte {})", nul));
}

template <class T>
std::string range_text() {
  return fmt::format("{} to {}", +std::numeric_limits<T>::lowest(), +std::numeric_limits<T>::max());
}

bool all_digits(std::string_view s) {
  return !s.empty() && std::all_of(s.begin(), s.end(), [](char c) { return c >= '0' && c <= '9'; });
}

template <class T>
Value scalar_of(ValueType t, T v) {
  uint64_t bits = 0;
  std::memcpy(&bits, &v, sizeof(T));  // as the reader holds a scalar: its bytes, zero-extended
  return Value::from_bits(t, bits);
}

template <class T>
Value integer(std::string_view key, ValueType t, std::string_view text) {
  std::string_view s = text;
  if (s.starts_with('+')) s.remove_prefix(1);
  const bool negative = s.starts_with('-');
  if (!all_digits(negative ? s.substr(1) : s))
    refuse(key, fmt::format("value '{}' is not {} (a whole number from {})",
                            escape_for_terminal(text), with_article(t), range_text<T>()));
  using Wide = std::conditional_t<std::is_signed_v<T>, int64_t, uint64_t>;
  Wide v{};
  const bool minus_zero = negative && s.find_first_not_of("-0") == std::string_view::npos;
  const std::string_view digits = minus_zero ? s.substr(1) : s;
  const auto [end, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), v);
  if (ec != std::errc() || v < static_cast<Wide>(std::numeric_limits<T>::lowest()) ||
      v > static_cast<Wide>(std::numeric_limits<T>::max()))
    refuse(key, fmt::format("value '{}' is out of range for {} ({})", escape_for_terminal(text),
                            type_text(t), range_text<T>()));
  return scalar_of(t, static_cast<T>(v));
}

template <class F>
Value floating(std::string_view key, ValueType t, std::string_view text) {
  std::string_view s = text;
  if (s.starts_with('+')) s.remove_prefix(1);
  // Hexadecimal floats as strtod reads them ("0x1.8p3", "-0X1P-2"): from_chars takes them
  // without the prefix, its sign moved in front.
  const bool negative = s.starts_with('-');
  const std::string_view magnitude = negative ? s.substr(1) : s;
  const bool hex = magnitude.size() > 2 && magnitude[0] == '0' &&
                   (magnitude[1] == 'x' || magnitude[1] == 'X') && magnitude[2] != '-' &&
                   magnitude[2] != '+';
  std::string unprefixed;
  if (hex) {
    if (negative) unprefixed = "-";
    unprefixed.append(magnitude.substr(2));
  }
  const std::string_view body = hex ? std::string_view(unprefixed) : s;
  F v = 0;
  const auto [end, ec] = std::from_chars(body.data(), body.data() + body.size(), v,
                                         hex ? std::chars_format::hex : std::chars_format::general);
  if ((ec != std::errc() && ec != std::errc::result_out_of_range) || body.empty() ||
      end != body.data() + body.size())
    refuse(key, fmt::format("value '{}' is not {}", escape_for_terminal(text), with_article(t)));
  if (ec == std::errc::result_out_of_range) {
    // Overflow loses the value; underflow only rounds it towards zero (a subnormal or 0).
    const double d = std::strtod(std::string(s).c_str(), nullptr);
    if (std::isinf(d) || std::fabs(d) > std::numeric_limits<F>::max())
      refuse(key,
             fmt::format("value '{}' is out of range for {} (magnitude at most {})",
                         escape_for_terminal(text), type_text(t), std::numeric_limits<F>::max()));
    v = static_cast<F>(d);
  }
  return scalar_of(t, v);
}

}  // namespace

Value parse_scalar(std::string_view key, ValueType t, std::string_view text) {
  switch (t) {
    case ValueType::kU8:
      return integer<uint8_t>(key, t, text);
    case ValueType::kI8:
      return integer<int8_t>(key, t, text);
    case ValueType::kU16:
      return integer<uint16_t>(key, t, text);
    case ValueType::kI16:
      return integer<int16_t>(key, t, text);
    case ValueType::kU32:
      return integer<uint32_t>(key, t, text);
    case ValueType::kI32:
      return integer<int32_t>(key, t, text);
    case ValueType::kU64:
      return integer<uint64_t>(key, t, text);
    case ValueType::kI64:
      return integer<int64_t>(key, t, text);
    case ValueType::kF32:
      return floating<float>(key, t, text);
    case ValueType::kF64:
      return floating<double>(key, t, text);
    case ValueType::kBool:
      if (text == "true" || text == "1") return Value::boolean(true);
      if (text == "false" || text == "0") return Value::boolean(false);
      refuse(key, fmt::format("value '{}' is not a bool (true, false, 1 or 0)",
                              escape_for_terminal(text)));
    case ValueType::kString:
      return Value::string(std::string(text));
    case ValueType::kArray:
      break;
  }
  refuse(key, fmt::format("no scalar of type {}", value_type_name(t)));
}

Value parse_array(std::string_view key, ValueType element, std::string_view text, bool from_lines) {
  std::vector<std::string> items;
  if (from_lines) {
    // One element per line; a final newline ends the last line rather than starting one.
    for (size_t pos = 0; pos < text.size();) {
      const size_t nl = std::min(text.find('\n', pos), text.size());
      items.emplace_back(text.substr(pos, nl - pos));
      pos = nl + 1;
    }
  } else if (!text.empty()) {
    items.emplace_back();
    for (size_t i = 0; i < text.size(); ++i) {
      if (text[i] == '\\' && element == ValueType::kString && i + 1 < text.size() &&
          (text[i + 1] == ',' || text[i + 1] == '\\'))
        items.back() += text[++i];
      else if (text[i] == ',')
        items.emplace_back();
      else
        items.back() += text[i];
    }
  }
  if (element == ValueType::kString) return Value::string_array(std::move(items));
  const size_t es = scalar_size(element);
  std::vector<uint8_t> packed(items.size() * es);
  for (size_t i = 0; i < items.size(); ++i) {
    std::string_view item = items[i];
    // Spaces around numbers are the reader's convenience ("1, 2, 3").
    while (!item.empty() && item.front() == ' ') item.remove_prefix(1);
    while (!item.empty() && item.back() == ' ') item.remove_suffix(1);
    Value v;
    try {
      v = parse_scalar(key, element, item);
    } catch (const Error& e) {
      refuse(key, fmt::format("element {}: {}", i, e.message()));
    }
    const uint64_t bits = v.bits();
    std::memcpy(packed.data() + i * es, &bits, es);  // little-endian, as GGUF stores it
  }
  return Value::scalar_array(element, std::move(packed));
}

KeyEdit parse_set(std::string_view spec, bool from_file) {
  const std::string_view option = from_file ? "--set-file" : "--set";
  const size_t eq = spec.find('=');
  if (eq == std::string_view::npos)
    usage_error(fmt::format("invalid {} value '{}': {}", option, escape_for_terminal(spec),
                            from_file ? kSetFileForms : kSetForms));
  KeyEdit e;
  e.kind = from_file ? KeyEdit::Kind::kSetFile : KeyEdit::Kind::kSet;
  std::string_view left = spec.substr(0, eq);
  e.text = std::string(spec.substr(eq + 1));
  if (const size_t colon = left.rfind(':'); colon != std::string_view::npos) {
    std::string_view type = left.substr(colon + 1);
    left = left.substr(0, colon);
    const bool array = type.size() >= 2 && type.front() == '[' && type.back() == ']';
    const auto t = scalar_type_named(array ? type.substr(1, type.size() - 2) : type);
    check_key(left);
    if (!t)
      refuse(left, fmt::format("unknown type '{}' (GGUF's types: {})", escape_for_terminal(type),
                               kTypeList));
    if (array) {
      e.type = ValueType::kArray;
      e.element = *t;
    } else {
      e.type = *t;
    }
    if (from_file && !array && *t != ValueType::kString)
      refuse(left, fmt::format("--set-file reads a str or an array, not {} (use --set)",
                               with_article(*t)));
  }
  check_key(left);
  e.key = std::string(left);
  return e;
}

KeyEdit parse_delete(std::string_view key) {
  check_key(key);
  KeyEdit e;
  e.kind = KeyEdit::Kind::kDelete;
  e.key = std::string(key);
  return e;
}

MetadataEdits parse_edits(const std::vector<std::string>& sets,
                          const std::vector<std::string>& set_files,
                          const std::vector<std::string>& deletes, bool force_keys) {
  MetadataEdits out;
  out.force_keys = force_keys;
  for (const auto& s : sets) out.edits.push_back(parse_set(s));
  for (const auto& s : set_files) out.edits.push_back(parse_set(s, true));
  for (const auto& k : deletes) out.edits.push_back(parse_delete(k));
  return out;
}

namespace {

// Why a key is not --set/--delete's to change, when it is not: the writer lays out the file by
// the layout keys, and gguf-splice records its own provenance.
std::optional<std::string> owned_key(std::string_view key) {
  if (key == "general.alignment") return "a layout key, set with --align";
  if (key.starts_with("split."))
    return "a layout key, written for split outputs (--split-max-size, --split-max-tensors, "
           "--keep-split)";
  if (key.starts_with("splice.")) return "written by gguf-splice as the splice's provenance";
  return std::nullopt;
}

// Why llama.cpp's loader cannot do without the key (check_model's required keys), or nothing.
std::optional<std::string> required_why(std::string_view key, const std::string& arch,
                                        const Metadata& m) {
  if (key == "general.architecture") return "llama.cpp chooses the model's code by it";
  if (!arch.empty() && key.starts_with(arch + "."))
    for (std::string_view k : {".context_length", ".embedding_length", ".block_count"})
      if (key.substr(arch.size()) == k) return "llama.cpp's loader refuses a model without it";
  if (arch == "llama" && key == "llama.attention.layer_norm_rms_epsilon")
    return "llama.cpp's loader refuses a llama model without it";
  if (key == "tokenizer.ggml.model") return "llama.cpp reads every model's vocabulary by it";
  if (key == "tokenizer.ggml.tokens") return "it is the vocabulary llama.cpp loads";
  if (key == "tokenizer.ggml.merges" && m.get_string("tokenizer.ggml.model") == "gpt2")
    return "llama.cpp's gpt2 (BPE) vocabulary needs it";
  return std::nullopt;
}

// When llama.cpp reads key with one value type and v is not of it: that type, as --set spells
// it ("u32", "[str]").
std::optional<std::string> llama_type_mismatch(std::string_view key, const std::string& arch,
                                               const Value& v) {
  if (key == "general.architecture")
    return v.type() == ValueType::kString ? std::nullopt : std::optional<std::string>("str");
  const uint8_t arch_bit = arch == "llama" ? kArchLlama : arch == "deepseek2" ? kArchDeepseek2 : 0;
  for (const KeyTypeRule& rule : llama_key_type_rules()) {
    if (rule.archs != kAnyArch && !(rule.archs & arch_bit)) continue;
    const bool match = rule.key.starts_with('.')
                           ? !arch.empty() && key.size() == arch.size() + rule.key.size() &&
                                 key.starts_with(arch) && key.ends_with(rule.key)
                           : key == rule.key;
    if (!match) continue;
    const auto array_of = [&](ValueType t) { return v.is_array() && v.array_type() == t; };
    switch (rule.form) {
      case KeyForm::kScalar:
        if (v.type() == rule.type) return std::nullopt;
        return type_text(rule.type);
      case KeyForm::kArray:
        if (array_of(rule.type) || (rule.alt != kNoAltType && array_of(rule.alt)))
          return std::nullopt;
        return rule.alt == kNoAltType
                   ? fmt::format("[{}]", type_text(rule.type))
                   : fmt::format("[{}] or [{}]", type_text(rule.type), type_text(rule.alt));
      case KeyForm::kPerLayer:
        if (v.type() == ValueType::kU32 || array_of(ValueType::kU32) || array_of(ValueType::kI32) ||
            array_of(ValueType::kBool))
          return std::nullopt;
        return "u32, [u32], [i32] or [bool] (one per layer)";
    }
  }
  return std::nullopt;
}

std::string read_value_file(const KeyEdit& e) {
  const auto source = open_file_source(e.text);
  std::vector<uint8_t> scratch;
  const auto bytes = source->stream(0, source->size(), scratch);
  return std::string(bytes.begin(), bytes.end());
}

// The value an edit gives its key; old is the base's value, if any.
Value new_value(const KeyEdit& e, const Value* old, const std::string& base_path) {
  const bool file = e.kind == KeyEdit::Kind::kSetFile;
  std::optional<ValueType> type = e.type;
  ValueType element = e.element;
  if (!type && old) {
    type = old->type();
    element = old->array_type();
  }
  if (!type && file) type = ValueType::kString;
  if (!type)
    throw Error(base_path, key_object(e.key), std::nullopt,
                fmt::format("not in the file; a new key needs its type (--set {}:TYPE=VALUE)",
                            escape_for_terminal(e.key)),
                Error::Kind::kUsage);
  if (file && *type != ValueType::kString && *type != ValueType::kArray)
    throw Error(
        base_path, key_object(e.key), std::nullopt,
        fmt::format("is {}; --set-file reads a str or an array (use --set)", with_article(*type)),
        Error::Kind::kUsage);
  const std::string text = file ? read_value_file(e) : e.text;
  if (*type == ValueType::kArray) return parse_array(e.key, element, text, file);
  return parse_scalar(e.key, *type, text);
}

}  // namespace

void apply_metadata_edits(Metadata& m, const MetadataEdits& edits, const std::string& arch,
                          const std::string& base_path) {
  std::map<std::string, const KeyEdit*> seen;
  for (const KeyEdit& e : edits.edits) {
    if (auto why = owned_key(e.key)) refuse(e.key, std::move(*why));
    const auto [it, fresh] = seen.emplace(e.key, &e);
    if (fresh) continue;
    const bool deleted = e.kind == KeyEdit::Kind::kDelete;
    if (deleted != (it->second->kind == KeyEdit::Kind::kDelete))
      refuse(e.key, "both set and deleted (--set and --delete of one key)");
    refuse(e.key, deleted ? "deleted twice" : "set twice");
  }
  const auto forced = [&](const KeyEdit& e, const std::string& why) {
    if (!edits.force_keys)
      refuse(e.key, fmt::format("{}; --force-keys {} it anyway", why,
                                e.kind == KeyEdit::Kind::kDelete ? "deletes" : "sets"));
  };
  for (const KeyEdit& e : edits.edits) {
    const Value* old = m.find(e.key);
    if (e.kind == KeyEdit::Kind::kDelete) {
      if (!old)
        throw Error(base_path, key_object(e.key), std::nullopt,
                    "not in the file; nothing to delete", Error::Kind::kUsage);
      if (auto why = required_why(e.key, arch, m)) forced(e, *why);
      m.erase(e.key);
      continue;
    }
    Value v = new_value(e, old, base_path);
    const bool retyped =
        !old || old->type() != v.type() || (v.is_array() && old->array_type() != v.array_type());
    if (retyped)
      if (auto want = llama_type_mismatch(e.key, arch, v))
        forced(e, fmt::format("llama.cpp reads it as {}, not {}", *want, type_text(v)));
    m.set(e.key, std::move(v));
  }
}

std::vector<std::string> describe_edits(const MetadataEdits& edits) {
  std::vector<std::string> out;
  for (const KeyEdit& e : edits.edits)
    out.push_back(fmt::format("{} {}", e.kind == KeyEdit::Kind::kDelete ? "delete" : "set", e.key));
  return out;
}

}  // namespace gguf

// Reading a gguf-inspect --hashes --json document back as a manifest that gguf-diff can compare
// a model against: metadata values rebuilt from their JSON form, tensors with their hashes.
#include <fcntl.h>
#include <fmt/format.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstring>
#include <limits>
#include <nlohmann/json.hpp>
#include <unordered_set>

#include "gguf/base/error.h"
#include "gguf/base/escape.h"
#include "gguf/format/file.h"
#include "gguf/format/json.h"
#include "gguf/format/types.h"
#include "gguf/ops/diff.h"

namespace gguf {
namespace {

using nlohmann::json;

std::optional<ValueType> parse_value_type(std::string_view name) {
  for (uint32_t i = 0; i < kValueTypeCount; ++i)
    if (value_type_name(static_cast<ValueType>(i)) == name) return static_cast<ValueType>(i);
  return std::nullopt;
}

// The raw little-endian bits of a scalar of type t given as JSON; nullopt when j does not fit.
std::optional<uint64_t> scalar_bits(const json& j, ValueType t) {
  const auto in_range = [&](int64_t lo, uint64_t hi) -> std::optional<uint64_t> {
    if (j.is_number_unsigned()) {
      const uint64_t v = j.get<uint64_t>();
      if (v > hi) return std::nullopt;
      return v;
    }
    if (j.is_number_integer()) {
      const int64_t v = j.get<int64_t>();
      if (v < lo || (v > 0 && static_cast<uint64_t>(v) > hi)) return std::nullopt;
      return static_cast<uint64_t>(v);
    }
    return std::nullopt;
  };
  const auto mask = [](std::optional<uint64_t> v, int bytes) -> std::optional<uint64_t> {
    if (!v || bytes == 8) return v;
    return *v & ((uint64_t{1} << (8 * bytes)) - 1);
  };
  switch (t) {
    case ValueType::kU8:
      return in_range(0, UINT8_MAX);
    case ValueType::kI8:
      return mask(in_range(INT8_MIN, INT8_MAX), 1);
    case ValueType::kU16:
      return in_range(0, UINT16_MAX);
    case ValueType::kI16:
      return mask(in_range(INT16_MIN, INT16_MAX), 2);
    case ValueType::kU32:
      return in_range(0, UINT32_MAX);
    case ValueType::kI32:
      return mask(in_range(INT32_MIN, INT32_MAX), 4);
    case ValueType::kU64:
      return in_range(0, UINT64_MAX);
    case ValueType::kI64:
      return in_range(INT64_MIN, INT64_MAX);
    case ValueType::kBool:
      if (!j.is_boolean()) return std::nullopt;
      return j.get<bool>() ? 1 : 0;
    case ValueType::kF32:
    case ValueType::kF64: {
      // The inspect JSON writes NaN and infinities as "nan", "inf", "-inf" (null before).
      double d = std::numeric_limits<double>::quiet_NaN();
      if (j.is_number())
        d = j.get<double>();
      else if (j.is_string() && (j == "inf" || j == "-inf"))
        d = (j == "inf" ? 1 : -1) * std::numeric_limits<double>::infinity();
      else if (!j.is_null() && j != "nan")
        return std::nullopt;
      uint64_t bits = 0;
      if (t == ValueType::kF32) {
        const float f = static_cast<float>(d);
        std::memcpy(&bits, &f, 4);
      } else {
        std::memcpy(&bits, &d, 8);
      }
      return bits;
    }
    default:
      return std::nullopt;
  }
}

Value metadata_value(const json& e, const std::string& path, const std::string& key) {
  const auto fail = [&](const std::string& msg) -> Error {
    return Error(path, key_object(key), std::nullopt, msg);
  };
  if (!e.contains("type") || !e["type"].is_string()) throw fail("metadata entry has no \"type\"");
  const auto type = parse_value_type(e["type"].get<std::string>());
  if (!type) throw fail(fmt::format("unknown value type {}", dump_json(e["type"])));
  if (!e.contains("value")) throw fail("metadata entry has no \"value\"");
  const json& v = e["value"];
  if (*type == ValueType::kString) {
    if (!v.is_string()) throw fail("value of type string is not a JSON string");
    return Value::string(from_utf8_or_escaped(v.get<std::string>()));
  }
  if (*type != ValueType::kArray) {
    const auto bits = scalar_bits(v, *type);
    if (!bits)
      throw fail(
          fmt::format("value {} does not fit type {}", dump_json(v), value_type_name(*type)));
    return Value::from_bits(*type, *bits);
  }
  if (!e.contains("element_type") || !e["element_type"].is_string())
    throw fail("array entry has no \"element_type\"");
  const auto elem = parse_value_type(e["element_type"].get<std::string>());
  if (!elem || *elem == ValueType::kArray)
    throw fail(fmt::format("bad element type {}", dump_json(e["element_type"])));
  if (!v.is_array()) throw fail("value of an array entry is not a JSON array");
  if (*elem == ValueType::kString) {
    std::vector<std::string> strings;
    strings.reserve(v.size());
    for (const auto& s : v) {
      if (!s.is_string()) throw fail("string array holds a non-string element");
      strings.push_back(from_utf8_or_escaped(s.get<std::string>()));
    }
    return Value::string_array(std::move(strings));
  }
  const size_t es = scalar_size(*elem);
  std::vector<uint8_t> packed(v.size() * es);
  for (size_t i = 0; i < v.size(); ++i) {
    const auto bits = scalar_bits(v[i], *elem);
    if (!bits)
      throw fail(fmt::format("array element {} ({}) does not fit type {}", i, dump_json(v[i]),
                             value_type_name(*elem)));
    std::memcpy(packed.data() + i * es, &*bits, es);
  }
  return Value::scalar_array(*elem, std::move(packed));
}

// 16 hex digits as a hash; nullopt otherwise.
std::optional<uint64_t> hex_hash(const json& h) {
  const std::string s = h.is_string() ? h.get<std::string>() : std::string();
  if (s.size() != 16 || s.find_first_not_of("0123456789abcdefABCDEF") != std::string::npos)
    return std::nullopt;
  return std::stoull(s, nullptr, 16);
}

ManifestTensor manifest_tensor(const json& t, size_t index, const std::string& path) {
  const std::string object = t.is_object() && t.contains("name") && t["name"].is_string()
                                 ? tensor_object(from_utf8_or_escaped(t["name"].get<std::string>()))
                                 : fmt::format("tensor #{}", index);
  const auto fail = [&](const std::string& msg) -> Error {
    return Error(path, object, std::nullopt, msg);
  };
  if (!t.is_object() || !t.contains("name") || !t["name"].is_string())
    throw fail("tensor entry has no \"name\"");
  ManifestTensor m;
  m.name = from_utf8_or_escaped(t["name"].get<std::string>());  // the bytes the file holds
  // type_id wins (it names types this build does not know); a "type" beside it must agree.
  std::optional<uint32_t> by_name;
  if (t.contains("type")) {
    const auto type = t["type"].is_string() ? parse_type(t["type"].get<std::string>())
                                            : std::optional<GgmlType>();
    if (!type) throw fail(fmt::format("unknown tensor type {}", dump_json(t["type"])));
    by_name = static_cast<uint32_t>(*type);
  }
  if (t.contains("type_id")) {
    if (!t["type_id"].is_number_unsigned() || t["type_id"].get<uint64_t>() > UINT32_MAX)
      throw fail(fmt::format("type_id {} is not a type number", dump_json(t["type_id"])));
    m.type_id = t["type_id"].get<uint32_t>();
    if (by_name && *by_name != m.type_id)
      throw fail(fmt::format("type {} disagrees with type_id {}", dump_json(t["type"]), m.type_id));
  } else if (by_name) {
    m.type_id = *by_name;
  } else {
    throw fail("tensor entry has no \"type\"");
  }
  if (!t.contains("shape") || !t["shape"].is_array() || t["shape"].size() > kMaxDims)
    throw fail(fmt::format("tensor entry has no \"shape\" of at most {} dimensions", kMaxDims));
  for (const auto& d : t["shape"]) {
    if (!d.is_number_integer() || d.get<int64_t>() < 0)
      throw fail(fmt::format("shape element {} is not a non-negative integer", dump_json(d)));
    m.shape.push_back(d.get<int64_t>());
  }
  if (t.contains("bytes")) {
    if (!t["bytes"].is_number_unsigned())
      throw fail(fmt::format("bytes {} is not a byte count", dump_json(t["bytes"])));
    m.bytes = t["bytes"].get<uint64_t>();
  }
  // The byte count a known type and the shape imply (whole rows, no overflow) must be it.
  if (const TypeTraits* tr = sized_type(m.type_id); tr && m.bytes && tr->block_size > 0) {
    const uint64_t ne0 = m.shape.empty() ? 1 : static_cast<uint64_t>(m.shape[0]);
    unsigned __int128 want = ne0 % tr->block_size == 0 ? ne0 / tr->block_size * tr->type_size : 0;
    for (size_t i = 1; i < m.shape.size(); ++i)
      want = want > UINT64_MAX ? want : want * static_cast<uint64_t>(m.shape[i]);
    if (ne0 % tr->block_size != 0 || want != *m.bytes)
      throw fail(fmt::format("bytes {} do not fit type {} and shape {}", *m.bytes, tr->name,
                             dump_json(t["shape"])));
  }
  if (t.contains("xxh3")) {
    m.xxh3 = hex_hash(t["xxh3"]);
    if (!m.xxh3) throw fail(fmt::format("xxh3 {} is not 16 hex digits", dump_json(t["xxh3"])));
  }
  return m;
}

}  // namespace

namespace {

// gguf-inspect's manifests nest five levels at most. Far deeper nesting (a crafted file) would
// overflow the stack where nlohmann-json recurses (printing a value into a message, copying):
// refused before parsing, at the byte that opens the level too many.
constexpr int kMaxManifestDepth = 32;

void check_nesting(std::string_view text, const std::string& path) {
  int depth = 0;
  bool in_string = false;
  for (size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (in_string) {
      if (c == '\\')
        ++i;  // the escaped character cannot end the string
      else if (c == '"')
        in_string = false;
    } else if (c == '"') {
      in_string = true;
    } else if (c == '[' || c == '{') {
      if (++depth > kMaxManifestDepth)
        throw Error(path, {}, i,
                    fmt::format("nests deeper than {} levels; expected the output of gguf-inspect "
                                "--hashes --json",
                                kMaxManifestDepth));
    } else if (c == ']' || c == '}') {
      --depth;  // unbalanced brackets are the parser's to report
    }
  }
}

}  // namespace

Manifest parse_manifest(std::string_view json_text, const std::string& path) {
  // What is plainly not JSON is said so at its first byte, before the nesting scan counts the
  // brackets of a binary file (a GGUF given by mistake holds plenty).
  if (json_text.starts_with("GGUF"))
    throw Error(path, {}, 0,
                "a GGUF file, not a manifest; expected the output of gguf-inspect --hashes --json");
  // nlohmann skips a UTF-8 byte-order mark (an editor's "UTF-8" may write one), so may we.
  const size_t bom = json_text.starts_with("\xEF\xBB\xBF") ? 3 : 0;
  const size_t first = json_text.find_first_not_of(" \t\n\r", bom);
  if (first != std::string_view::npos &&
      std::string_view("{[\"-0123456789tfn").find(json_text[first]) == std::string_view::npos)
    throw Error(path, {}, first,
                "not a JSON document; expected the output of gguf-inspect --hashes --json");
  // JSON text holds no NUL byte (the parser would stop there and take what came before).
  if (const size_t nul = json_text.find('\0'); nul != std::string_view::npos)
    throw Error(path, {}, nul,
                "not a JSON document (a NUL byte); expected the output of gguf-inspect --hashes "
                "--json");
  check_nesting(json_text, path);
  json doc;
  try {
    doc = json::parse(json_text);
  } catch (const json::parse_error& e) {
    throw Error(path, {}, e.byte ? std::optional<uint64_t>(e.byte - 1) : std::nullopt,
                "not a JSON document; expected the output of gguf-inspect --hashes --json");
  } catch (const json::exception& e) {
    // E.g. a number too large for a double (out_of_range 406), found by manifest_fuzz.
    throw Error(path, {}, std::nullopt,
                fmt::format("not a JSON document gguf-diff can read ({}); expected the output of "
                            "gguf-inspect --hashes --json",
                            e.what()));
  }
  if (!doc.is_object() || !doc.contains("tensors") || !doc["tensors"].is_array())
    throw Error(path, {}, std::nullopt,
                "no \"tensors\" array; expected the output of gguf-inspect --hashes --json");
  Manifest m;
  m.path = path;
  if (doc.contains("files") && doc["files"].is_array())
    for (const auto& f : doc["files"])
      if (f.is_string()) m.files.push_back(from_utf8_or_escaped(f.get<std::string>()));
  if (m.files.empty()) m.files.push_back(path);
  if (doc.contains("architecture") && doc["architecture"].is_string())
    m.architecture = from_utf8_or_escaped(doc["architecture"].get<std::string>());
  if (doc.contains("metadata")) {
    if (!doc["metadata"].is_array())
      throw Error(path, {}, std::nullopt, "\"metadata\" is not an array");
    for (const auto& e : doc["metadata"]) {
      if (!e.is_object() || !e.contains("key") || !e["key"].is_string())
        throw Error(path, {}, std::nullopt, "metadata entry has no \"key\"");
      const std::string key = from_utf8_or_escaped(e["key"].get<std::string>());
      if (!m.metadata.append({key, metadata_value(e, path, key), 0}))
        throw Error(path, key_object(key), std::nullopt, "duplicate metadata key");
      if (e.contains("xxh3")) {
        const auto h = hex_hash(e["xxh3"]);
        if (!h)
          throw Error(path, key_object(key), std::nullopt,
                      fmt::format("xxh3 {} is not 16 hex digits", dump_json(e["xxh3"])));
        m.metadata_xxh3.emplace(key, *h);
      }
    }
  }
  if (doc.contains("selection") && !doc["selection"].is_null())
    m.selection = selection_from_json(doc["selection"], path);
  const json& tensors = doc["tensors"];
  std::unordered_set<std::string> seen;
  for (size_t i = 0; i < tensors.size(); ++i) {
    m.tensors.push_back(manifest_tensor(tensors[i], i, path));
    if (!seen.insert(m.tensors.back().name).second)
      throw Error(path, tensor_object(m.tensors.back().name), std::nullopt,
                  "duplicate tensor name");
  }
  return m;
}

Manifest read_manifest(const std::string& path) {
  // Far above any real manifest (a 256K-token vocabulary in full is a few MiB), far below what
  // would exhaust memory: -m /dev/zero must not read forever.
  constexpr uint64_t kMaxManifestBytes = uint64_t{256} << 20;
  const auto fail = [&](const std::string& what) -> Error {
    return Error(path, {}, std::nullopt, what);
  };
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) throw fail(fmt::format("cannot open: {}", std::strerror(errno)));
  struct Closer {
    int fd;
    ~Closer() { ::close(fd); }
  } closer{fd};
  struct stat st {};
  if (::fstat(fd, &st) != 0) throw fail(fmt::format("cannot stat: {}", std::strerror(errno)));
  if (S_ISDIR(st.st_mode)) throw fail("is a directory, not a manifest");
  if (S_ISREG(st.st_mode) && static_cast<uint64_t>(st.st_size) > kMaxManifestBytes)
    throw fail(fmt::format("{} bytes; a manifest of more than {} MiB is refused", st.st_size,
                           kMaxManifestBytes >> 20));
  // Read to the end: a pipe (process substitution) has no size to go by.
  std::string text;
  char buf[1 << 16];
  for (;;) {
    const ssize_t n = ::read(fd, buf, sizeof buf);
    if (n < 0) {
      if (errno == EINTR) continue;
      throw fail(fmt::format("read failed at byte {}: {}", text.size(), std::strerror(errno)));
    }
    if (n == 0) break;
    if (text.size() + static_cast<uint64_t>(n) > kMaxManifestBytes)
      throw fail(fmt::format("more than {} MiB; a manifest this large is refused",
                             kMaxManifestBytes >> 20));
    text.append(buf, static_cast<size_t>(n));
  }
  return parse_manifest(text, path);
}

}  // namespace gguf

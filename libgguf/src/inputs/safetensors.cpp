// The safetensors reader: the header length, the JSON header (nesting and duplicate keys
// checked by a SAX pass, then parsed with nlohmann-json), then each tensor's dtype, shape and
// byte range, against the file, with overflow-checked arithmetic.
#include "gguf/inputs/safetensors.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstring>
#include <nlohmann/json.hpp>
#include <set>

#include "base/json_checked.h"
#include "gguf/base/error.h"
#include "gguf/base/escape.h"
#include "gguf/format/file.h"
#include "io/cursor.h"

namespace gguf {
namespace {

// Parsing uses std::map objects (ordered_json finds keys by linear search: quadratic in the
// tensor count); order does not matter, the tensors are sorted by their data. Writing keeps the
// given order.
using json = nlohmann::json;
using ojson = nlohmann::ordered_json;

// The reference library refuses headers over 100 MB; so do we (it bounds the JSON we parse).
constexpr uint64_t kMaxHeaderBytes = 100'000'000;
// The deepest a valid header nests: {"t": {"shape": [..]}}. A little room beyond, no more,
// so a header of a million '[' is refused before it is built.
constexpr int kMaxDepth = 8;

// The offset in the file of the key `name` at nesting depth `depth` of the header (1: the
// header's own keys, tensors and __metadata__; 2: the keys inside them), compared as written
// with JSON's usual escapes; or of the header itself when it is not found so. Only errors call
// this: it scans the header.
uint64_t find_entry(std::string_view h, const std::string& name, int depth = 1) {
  const std::string quoted = ojson(name).dump(-1, ' ', false, ojson::error_handler_t::replace);
  int level = 0;
  for (size_t i = 0; i < h.size(); ++i) {
    const char c = h[i];
    if (c == '"') {
      size_t j = i + 1;
      while (j < h.size() && h[j] != '"') j += h[j] == '\\' ? 2 : 1;
      if (j >= h.size()) break;
      size_t k = j + 1;
      while (k < h.size() && (h[k] == ' ' || h[k] == '\t' || h[k] == '\n' || h[k] == '\r')) ++k;
      if (level == depth && k < h.size() && h[k] == ':' && h.substr(i, j + 1 - i) == quoted)
        return 8 + i;
      i = j;
    } else if (c == '{' || c == '[') {
      ++level;
    } else if (c == '}' || c == ']') {
      --level;
    }
  }
  return 8;
}

}  // namespace

namespace detail {

namespace {

// The checks, as a SAX pass that builds nothing (a parse callback would do, but nlohmann's
// callback parser rescans an object's members at each member's end: quadratic in the tensor
// count). Throws the first problem; syntax errors are rethrown as nlohmann's parse_error.
struct Checks {
  const std::string& path;
  const std::string& object;
  uint64_t offset;
  int max_depth;
  std::string_view what;
  std::vector<std::set<std::string>> keys;  // one set per open object
  int depth = 0;

  bool open() {
    if (++depth > max_depth)
      throw Error(path, object, offset,
                  fmt::format("{} nests deeper than {} levels", what, max_depth));
    return true;
  }
  bool null() { return true; }
  bool boolean(bool) { return true; }
  bool number_integer(json::number_integer_t) { return true; }
  bool number_unsigned(json::number_unsigned_t) { return true; }
  bool number_float(json::number_float_t, const json::string_t&) { return true; }
  bool string(json::string_t&) { return true; }
  bool binary(json::binary_t&) { return true; }
  bool start_object(std::size_t) {
    keys.emplace_back();
    return open();
  }
  bool key(json::string_t& k) {
    if (!keys.back().insert(k).second)
      throw Error(path, object, offset,
                  fmt::format("{} has the key \"{}\" twice in one object", what,
                              escape_for_terminal(k.substr(0, 100))));
    return true;
  }
  bool end_object() {
    keys.pop_back();
    --depth;
    return true;
  }
  bool start_array(std::size_t) { return open(); }
  bool end_array() {
    --depth;
    return true;
  }
  bool parse_error(std::size_t, const std::string&, const nlohmann::detail::exception& e) {
    if (const auto* p = dynamic_cast<const json::parse_error*>(&e)) throw *p;
    throw Error(path, object, offset, fmt::format("{} is not valid JSON: {}", what, e.what()));
  }
};

}  // namespace

json parse_json_checked(std::string_view text, const std::string& path, const std::string& object,
                        uint64_t offset, int max_depth, std::string_view what, bool in_file) {
  try {
    Checks checks{path, object, offset, max_depth, what, {}, 0};
    json::sax_parse(text.begin(), text.end(), &checks);
    return json::parse(text.begin(), text.end());
  } catch (const json::parse_error& e) {
    // e.byte counts from 1 and may point one past the end of the input.
    const uint64_t n = text.size();
    const uint64_t at = std::min<uint64_t>(e.byte > 0 ? e.byte - 1 : 0, n > 0 ? n - 1 : 0);
    std::string why = e.what();
    if (const size_t p = why.find("syntax error"); p != std::string::npos) why = why.substr(p);
    if (!in_file)
      throw Error(path, object, offset,
                  fmt::format("{} is not valid JSON (at byte {} of its text): {}", what, at, why));
    throw Error(path, object, offset + at, fmt::format("{} is not valid JSON: {}", what, why));
  }
}

}  // namespace detail

namespace {

std::string json_kind(const json& v) { return v.type_name(); }

}  // namespace

uint64_t safetensors_dtype_size(std::string_view dtype) {
  static const std::pair<std::string_view, uint64_t> kSizes[] = {
      {"BOOL", 1}, {"U8", 1},  {"I8", 1},  {"F8_E5M2", 1}, {"F8_E4M3", 1}, {"F8_E8M0", 1},
      {"I16", 2},  {"U16", 2}, {"F16", 2}, {"BF16", 2},    {"I32", 4},     {"U32", 4},
      {"F32", 4},  {"F64", 8}, {"I64", 8}, {"U64", 8}};
  for (const auto& [name, size] : kSizes)
    if (name == dtype) return size;
  return 0;
}

bool SafetensorsFile::sniff(const ByteSource& source) {
  Cursor c(source);
  if (c.left() < 10) return false;
  const auto n = c.read<uint64_t>("safetensors header length");
  return n >= 2 && n <= kMaxHeaderBytes && n <= c.left() &&
         c.take(1, "safetensors header")[0] == '{';
}

SafetensorsFile SafetensorsFile::open(const std::string& path) {
  return parse(open_file_source(path));
}

SafetensorsFile SafetensorsFile::parse(std::shared_ptr<const ByteSource> source) {
  SafetensorsFile f;
  f.source_ = std::move(source);
  const std::string& path = f.source_->name();
  const uint64_t size = f.source_->size();
  Cursor c(*f.source_);
  if (size < 8)
    c.fail(0, fmt::format("file is {} bytes long: a safetensors file starts with an 8-byte "
                          "header length",
                          size));
  const auto n = c.read<uint64_t>("safetensors header length");
  if (n > kMaxHeaderBytes)
    c.fail(0, fmt::format("safetensors header length {} is over the format's limit of {} bytes", n,
                          kMaxHeaderBytes));
  if (n > c.left())
    c.fail(0, fmt::format("safetensors header length {} runs past the end of the file ({} "
                          "bytes after the length)",
                          n, c.left()));
  const auto hb = c.take(n, "safetensors header");
  const std::string_view header(reinterpret_cast<const char*>(hb.data()), hb.size());
  if (header.empty() || header.front() != '{')
    throw Error(path, {}, 8, "safetensors header does not start with '{'");
  if (!is_valid_utf8(header)) throw Error(path, {}, 8, "safetensors header is not valid UTF-8");
  // JSON has no NUL outside strings (and escapes it inside); a parser reading up to a NUL
  // would take what follows for nothing. NULs that only pad the end (some writers pad so)
  // are let through as the padding they are.
  if (const size_t z =
          header.substr(0, header.find_last_not_of(std::string_view("\0 ", 2)) + 1).find('\0');
      z != std::string_view::npos)
    throw Error(path, {}, 8 + z, "safetensors header holds a NUL byte");
  f.header_bytes_ = n;
  const json doc = detail::parse_json_checked(header, path, {}, 8, kMaxDepth, "safetensors header");
  if (!doc.is_object()) throw Error(path, {}, 8, "safetensors header is not a JSON object");

  const uint64_t data_start = 8 + n;
  const uint64_t data_bytes = size - data_start;
  for (auto item = doc.begin(); item != doc.end(); ++item) {
    const std::string& name = item.key();
    const json& v = item.value();
    const auto at = [&] { return find_entry(header, name); };
    if (name == "__metadata__") {
      if (!v.is_object())
        throw Error(path, key_object("__metadata__"), at(),
                    fmt::format("expected an object of strings, found {}", json_kind(v)));
      for (const auto& [k, s] : v.items()) {
        if (!s.is_string())
          throw Error(path, key_object(k), find_entry(header, k, 2),
                      fmt::format("__metadata__ values must be strings, found {}", json_kind(s)));
        f.metadata_.emplace_back(k, s.get<std::string>());
      }
      continue;
    }
    const std::string obj = tensor_object(name);
    if (!v.is_object())
      throw Error(path, obj, at(), fmt::format("expected an object, found {}", json_kind(v)));
    SafetensorsTensor t;
    t.name = name;
    const auto dtype = v.find("dtype");
    if (dtype == v.end() || !dtype->is_string())
      throw Error(path, obj, at(), "expected \"dtype\", a string");
    t.dtype = dtype->get<std::string>();
    const uint64_t esize = safetensors_dtype_size(t.dtype);
    if (esize == 0)
      throw Error(path, obj, at(),
                  fmt::format("unknown dtype \"{}\" (expected one of BOOL, U8, I8, F8_E5M2, "
                              "F8_E4M3, F8_E8M0, I16, U16, F16, BF16, I32, U32, F32, F64, I64, "
                              "U64)",
                              escape_for_terminal(t.dtype.substr(0, 100))));
    const auto shape = v.find("shape");
    if (shape == v.end() || !shape->is_array())
      throw Error(path, obj, at(), "expected \"shape\", an array of non-negative integers");
    uint64_t count = 1;
    bool overflow = false;
    for (const auto& d : *shape) {
      if (!d.is_number_unsigned())
        throw Error(path, obj, at(),
                    fmt::format("shape {} is not an array of non-negative integers", d.dump()));
      const uint64_t dim = d.get<uint64_t>();
      if (dim > static_cast<uint64_t>(INT64_MAX)) overflow = true;
      overflow |= __builtin_mul_overflow(count, dim, &count);
      t.shape.push_back(static_cast<int64_t>(dim));
    }
    uint64_t nbytes = 0;
    if (overflow || __builtin_mul_overflow(count, esize, &nbytes))
      throw Error(path, obj, at(),
                  fmt::format("shape {} holds more bytes than 2^64", shape->dump()));
    // As GGUF (and ggml) will read it, the last dimension first: a zero there does not keep
    // the product of the others, before it, from passing int64 ([0, 2^62, 2^62]).
    uint64_t gguf_count = 1;
    for (auto d = t.shape.rbegin(); d != t.shape.rend(); ++d) {
      const auto dim = static_cast<uint64_t>(*d);
      if (dim != 0 && gguf_count > static_cast<uint64_t>(INT64_MAX) / dim)
        throw Error(path, obj, at(),
                    count == 0 ? fmt::format("shape {}: in GGUF's order (the last dimension "
                                             "first) the element count passes 2^63 - 1 before "
                                             "the zero dimension",
                                             shape->dump())
                               : fmt::format("shape {} holds {} elements; a GGUF tensor holds at "
                                             "most 2^63 - 1",
                                             shape->dump(), count));
      gguf_count *= dim;
    }
    t.n_elements = count;
    const auto offs = v.find("data_offsets");
    if (offs == v.end() || !offs->is_array() || offs->size() != 2 ||
        !(*offs)[0].is_number_unsigned() || !(*offs)[1].is_number_unsigned())
      throw Error(path, obj, at(),
                  "expected \"data_offsets\", an array of two non-negative integers");
    const uint64_t b = (*offs)[0].get<uint64_t>(), e = (*offs)[1].get<uint64_t>();
    if (e < b)
      throw Error(path, obj, at(),
                  fmt::format("data_offsets [{}, {}] end before they begin", b, e));
    if (e > data_bytes)
      throw Error(path, obj, at(),
                  fmt::format("data_offsets [{}, {}] run past the end of the file (the data "
                              "section holds {} bytes, from byte {})",
                              b, e, data_bytes, data_start));
    if (e - b != nbytes)
      throw Error(path, obj, at(),
                  fmt::format("data_offsets [{}, {}] hold {} bytes, but {} {} of shape {} take "
                              "{}",
                              b, e, e - b, count, t.dtype, shape->dump(), nbytes));
    t.begin = data_start + b;
    t.end = data_start + e;
    f.tensors_.push_back(std::move(t));
  }
  // The ranges must tile the data section: sorted by offset, each begins where the previous
  // ended, the last ends at the end of the file (the reference library's rule).
  // (An empty tensor sits where the next one begins: by (begin, end) it comes first.)
  std::stable_sort(f.tensors_.begin(), f.tensors_.end(), [](const auto& a, const auto& b) {
    return a.begin != b.begin ? a.begin < b.begin : a.end < b.end;
  });
  uint64_t expect = data_start;
  for (const auto& t : f.tensors_) {
    if (t.begin != expect)
      throw Error(
          path, tensor_object(t.name), find_entry(header, t.name),
          fmt::format("data begins at byte {} of the data section, but {} (the ranges must "
                      "follow each other with no gap or overlap)",
                      t.begin - data_start,
                      expect == data_start ? std::string("the first tensor's must begin at byte 0")
                                           : fmt::format("the previous tensor ends at byte {}",
                                                         expect - data_start)));
    expect = t.end;
  }
  if (expect != size)
    throw Error(path, {}, expect,
                fmt::format("{} bytes after the last tensor's data: the data section holds {} "
                            "bytes, its tensors {}",
                            size - expect, data_bytes, expect - data_start));
  for (size_t i = 0; i < f.tensors_.size(); ++i) f.index_.emplace(f.tensors_[i].name, i);
  return f;
}

const SafetensorsTensor* SafetensorsFile::find(std::string_view name) const {
  const auto it = index_.find(std::string(name));
  return it == index_.end() ? nullptr : &tensors_[it->second];
}

uint64_t SafetensorsFile::entry_offset(std::string_view name, int depth) const {
  const auto hb = source_->bytes(8, header_bytes_);
  return find_entry({reinterpret_cast<const char*>(hb.data()), hb.size()}, std::string(name),
                    depth);
}

const std::string* SafetensorsFile::metadata_value(std::string_view key) const {
  for (const auto& [k, v] : metadata_)
    if (k == key) return &v;
  return nullptr;
}

std::vector<uint8_t> serialize_safetensors(
    const std::vector<SafetensorsEntry>& tensors,
    const std::vector<std::pair<std::string, std::string>>& metadata) {
  ojson header = ojson::object();
  if (!metadata.empty()) {
    ojson m = ojson::object();
    for (const auto& [k, v] : metadata) m[k] = v;
    header["__metadata__"] = std::move(m);
  }
  uint64_t offset = 0;
  for (const auto& t : tensors) {
    header[t.name] = {
        {"dtype", t.dtype}, {"shape", t.shape}, {"data_offsets", {offset, offset + t.data.size()}}};
    offset += t.data.size();
  }
  std::string text = header.dump();
  text.append((8 - text.size() % 8) % 8, ' ');
  std::vector<uint8_t> out(8 + text.size() + offset);
  for (int i = 0; i < 8; ++i)
    out[static_cast<size_t>(i)] = static_cast<uint8_t>(text.size() >> (8 * i));
  std::memcpy(out.data() + 8, text.data(), text.size());
  size_t at = 8 + text.size();
  for (const auto& t : tensors) {
    if (!t.data.empty()) std::memcpy(out.data() + at, t.data.data(), t.data.size());
    at += t.data.size();
  }
  return out;
}

}  // namespace gguf

// The GGUF parser: every length, count and offset is checked against the bytes that remain
// before anything is allocated or read, with overflow-checked arithmetic throughout.
#include "gguf/format/file.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <bit>
#include <cstring>
#include <unordered_map>

#include "gguf/base/escape.h"
#include "io/cursor.h"

namespace gguf {

namespace {

// A name in a message: whole up to 100 bytes; longer ones (a corrupted length can make a name
// swallow the rest of the file) cut, with their length.
// Escaped for the terminal, and a quote inside the name as \' (the backslash itself is
// already doubled), so the quotes around it always delimit the whole name.
std::string quoted_name(std::string_view name) {
  constexpr size_t kShown = 100;
  const auto inner = [](std::string_view s) {
    std::string out;
    for (char c : escape_for_terminal(s)) {
      if (c == '\'') out += '\\';
      out += c;
    }
    return out;
  };
  if (name.size() <= kShown) return fmt::format("'{}'", inner(name));
  return fmt::format("'{}...' ({} bytes)", inner(name.substr(0, kShown)), name.size());
}

}  // namespace

std::string tensor_object(std::string_view name) {
  return fmt::format("tensor {}", quoted_name(name));
}
std::string key_object(std::string_view key) { return fmt::format("key {}", quoted_name(key)); }

std::string_view as_ggml_reads(std::string_view name) { return name.substr(0, name.find('\0')); }

std::string read_as_one_message(bool is_key, std::string_view first, std::string_view name) {
  return fmt::format("ggml reads {} up to a NUL byte: this one and {} both read as '{}', and {}",
                     is_key ? "keys" : "names", is_key ? key_object(first) : tensor_object(first),
                     escape_for_terminal(as_ggml_reads(name)),
                     is_key ? "its lookups by name find only the first"
                            : "its reader refuses two tensors of one name");
}

const KeyValue* find_key_as_ggml(const Metadata& m, std::string_view key) {
  for (const KeyValue& e : m.entries())
    if (as_ggml_reads(e.key) == key) return &e;
  return nullptr;
}

std::string shape_text(const std::vector<int64_t>& shape) {
  return fmt::format("[{}]", fmt::join(shape, ", "));
}

int ggml_dims(const std::vector<int64_t>& shape) {
  size_t n = shape.size();
  while (n > 1 && shape[n - 1] == 1) --n;
  return static_cast<int>(std::max<size_t>(n, 1));
}

bool same_shape(const std::vector<int64_t>& a, const std::vector<int64_t>& b) {
  const size_t n = std::max(a.size(), b.size());
  for (size_t d = 0; d < n; ++d)
    if ((d < a.size() ? a[d] : 1) != (d < b.size() ? b[d] : 1)) return false;
  return true;
}

uint64_t TensorInfo::require_bytes(const std::string& path) const {
  if (bytes) return *bytes;
  throw Error(path, tensor_object(name), type_offset(),
              fmt::format("type {} ({}) has no known size; this operation needs it", type_id,
                          find_type(type_id) ? "removed from ggml" : "unknown id"));
}

void TensorInfo::require_ggml_name(const std::string& path) const {
  if (name.empty())
    throw Error(path, tensor_object(name), info_offset,
                "empty tensor name; no output can carry it (llama.cpp's loader refuses a "
                "tensor it does not know)");
  if (name.size() <= kMaxNameBytes) return;
  throw Error(path, tensor_object(name), info_offset,
              fmt::format("tensor name is {} bytes; ggml allows at most {}, so ggml could not "
                          "load a file written with it",
                          name.size(), kMaxNameBytes));
}

const TensorInfo* GgufFile::find_tensor(std::string_view name) const {
  const auto it = tensor_index_.find(std::string(name));
  return it == tensor_index_.end() ? nullptr : &tensors_[it->second];
}

std::span<const uint8_t> GgufFile::tensor_data(const TensorInfo& t) const {
  return source_->bytes(data_start(t), t.require_bytes(path()));
}

class Parser {
 public:
  Parser(GgufFile& f) : f_(f), c_(*f.source_), size_(c_.size()) {}

  void run() {
    header();
    for (uint64_t i = 0; i < n_kv_; ++i) key_value(i);
    alignment();
    for (uint64_t i = 0; i < n_tensors_; ++i) tensor_info();
    const uint64_t end = c_.pos();
    f_.header_end_ = end;
    const uint64_t a = f_.alignment_;
    // end <= size_ and a <= 2^31, so this cannot overflow.
    f_.data_offset_ = (end + a - 1) / a * a;
    // ggml seeks to the data section before it reads any tensor, even empty ones.
    if (!f_.tensors_.empty() && f_.data_offset_ > size_) {
      c_.set_object({});
      c_.fail(end, fmt::format("the data section would start at byte {} (the header end padded to "
                               "the alignment {}), past the end of the file ({} bytes)",
                               f_.data_offset_, a, size_));
    }
    for (auto& t : f_.tensors_) tensor_data(t);
    // Tensors may share or overlap data (--check reports it; ggml refuses it), but not so much
    // that their sizes add up to more than twice the data section: 100,000 tensors naming the
    // same megabytes would make every tool read them 100,000 times (a 15 MB file, 800 GiB).
    const uint64_t data_bytes = size_ - std::min(size_, f_.data_offset_);
    uint64_t sum = 0;
    for (const auto& t : f_.tensors_) {
      sum += t.bytes.value_or(0);  // each is at most data_bytes, so this cannot wrap
      if (sum > 2 * data_bytes) {
        c_.set_object(tensor_object(t.name));
        c_.fail(t.data_offset_field(),
                fmt::format("the tensors up to this one hold {} bytes of data, more than twice the "
                            "{} bytes of the data section: their data overlap many times over",
                            sum, data_bytes));
      }
    }
  }

 private:
  GgufFile& f_;
  Cursor c_;
  uint64_t size_;
  uint64_t n_tensors_ = 0, n_kv_ = 0;
  uint64_t total_elements_ = 0;

  [[noreturn]] void fail(uint64_t at, std::string msg) const { c_.fail(at, std::move(msg)); }
  uint64_t left() const { return c_.left(); }
  template <class T>
  T read(std::string_view what) {
    return c_.read<T>(what);
  }
  std::string read_string(std::string_view what) { return c_.read_string(what, kMaxStringBytes); }

  void header() {
    if (size_ < 24)
      fail(0, fmt::format("file too small for a GGUF header (needs 24 bytes, has {})", size_));
    const auto magic = read<uint32_t>("magic");
    if (magic != kMagic) {
      // A file that starts with "GGML"/"GGJT" etc. is an older format: say so.
      std::string shown;
      for (int i = 0; i < 4; ++i) shown += static_cast<char>((magic >> (8 * i)) & 0xFF);
      fail(0, fmt::format("not a GGUF file (magic '{}', expected 'GGUF')",
                          escape_for_terminal(shown)));
    }
    const auto version = read<uint32_t>("version");
    if ((version & 0xFFFF) == 0 && version != 0)
      fail(4, fmt::format("big-endian GGUF files are not supported (version field 0x{:08x})",
                          version));
    if (version == 1) fail(4, "GGUF version 1 is not supported (only versions 2 and 3)");
    if (version != 2 && version != 3)
      fail(4, fmt::format("unsupported GGUF version {} (only versions 2 and 3)", version));
    f_.version_ = version;
    n_tensors_ = read<uint64_t>("tensor count");
    n_kv_ = read<uint64_t>("key/value count");
    // Minimal encodings: a key/value needs 8 + 1 + 4 + 1 bytes, a tensor info 8 + 1 + 4 + 4 + 8.
    if (n_kv_ > left() / 14)
      fail(16,
           fmt::format("key/value count {} cannot fit in the file ({} bytes left)", n_kv_, left()));
    if (n_tensors_ > left() / 25)
      fail(8, fmt::format("tensor count {} cannot fit in the file ({} bytes left)", n_tensors_,
                          left()));
  }

  ValueType read_type(std::string_view what) {
    const uint64_t at = c_.pos();
    const auto t = read<uint32_t>(what);
    if (t >= kValueTypeCount)
      fail(at, fmt::format("unknown value type {} (valid types are 0-12)", t));
    return static_cast<ValueType>(t);
  }

  void key_value(uint64_t index) {
    const uint64_t at = c_.pos();
    c_.set_object(fmt::format("key #{}", index));
    std::string key = read_string("key");
    if (key.empty()) fail(at, "empty key");
    c_.set_object(key_object(key));
    if (const Value* prev = f_.metadata_.find(key); prev != nullptr) {
      uint64_t first = 0;
      for (const auto& e : f_.metadata_.entries())
        if (e.key == key) first = e.offset;
      fail(at, fmt::format("duplicate key (first defined at byte {})", first));
    }
    const ValueType type = read_type("value type");
    Value value;
    if (type == ValueType::kString) {
      value = Value::string(read_string("string"));
    } else if (type == ValueType::kArray) {
      value = read_array();
    } else {
      const size_t n = scalar_size(type);
      c_.need(n, "value");
      uint64_t bits = 0;
      std::memcpy(&bits, c_.take(n, "value").data(), n);
      value = Value::from_bits(type, bits);
    }
    f_.metadata_.append({std::move(key), std::move(value), at});
  }

  Value read_array() {
    const uint64_t type_at = c_.pos();
    const ValueType elem = read_type("array element type");
    if (elem == ValueType::kArray) fail(type_at, "nested arrays are not supported");
    const uint64_t count_at = c_.pos();
    const uint64_t count = read<uint64_t>("array length");
    const uint64_t min_elem = elem == ValueType::kString ? 8 : scalar_size(elem);
    if (count > left() / min_elem)
      fail(count_at, fmt::format("array of {} {} elements runs past end of file ({} bytes left)",
                                 count, value_type_name(elem), left()));
    if (elem != ValueType::kString) {
      const auto b = c_.take(count * min_elem, "array");
      return Value::scalar_array(elem, std::vector<uint8_t>(b.begin(), b.end()));
    }
    std::vector<std::string> strings;
    strings.reserve(static_cast<size_t>(count));
    for (uint64_t i = 0; i < count; ++i) strings.push_back(read_string("string"));
    return Value::string_array(std::move(strings));
  }

  // As ggml finds it: the first key that reads "general.alignment" up to a NUL byte (a key
  // "general.alignment\0x" counts), so that both place the tensor data alike.
  void alignment() {
    const KeyValue* kv = find_key_as_ggml(f_.metadata_, "general.alignment");
    if (!kv) return;
    c_.set_object(key_object(kv->key));
    const Value* v = &kv->value;
    if (v->type() != ValueType::kU32)
      fail(kv->type_offset(),
           fmt::format("general.alignment must be u32, found {}", value_type_name(v->type())));
    const uint64_t a = *v->as_uint();
    if (a == 0 || !std::has_single_bit(a))
      fail(kv->value_offset(),
           fmt::format("general.alignment must be a non-zero power of two, found {}", a));
    f_.alignment_ = a;
  }

  void tensor_info() {
    TensorInfo t;
    t.info_offset = c_.pos();
    c_.set_object(fmt::format("tensor #{}", f_.tensors_.size()));
    t.name = read_string("tensor name");
    // An empty name is accepted, as by ggml; --check reports it.
    c_.set_object(t.name.empty() ? fmt::format("tensor #{}", f_.tensors_.size())
                                 : tensor_object(t.name));
    const uint64_t dims_at = c_.pos();
    const auto n_dims = read<uint32_t>("n_dims");
    if (n_dims > kMaxDims)
      fail(dims_at, fmt::format("n_dims {} exceeds the maximum of {}", n_dims, kMaxDims));
    uint64_t n = 1;
    for (uint32_t d = 0; d < n_dims; ++d) {
      const uint64_t at = c_.pos();
      const auto ne = read<int64_t>("dimension");
      if (ne < 0) fail(at, fmt::format("dimension {} is negative ({})", d, ne));
      if (ne != 0 && n > static_cast<uint64_t>(INT64_MAX) / static_cast<uint64_t>(ne))
        fail(at, "element count overflows int64");
      n *= static_cast<uint64_t>(ne);
      t.shape.push_back(ne);
    }
    t.n_elements = n;
    // Each count fits int64, and so must their sum: summaries (gguf-inspect's parameters, a
    // diff's element totals) add them up. Only tensors of types without a known size (none
    // of whose bytes are read) can get there in a file of a real size.
    if (n > static_cast<uint64_t>(INT64_MAX) - total_elements_)
      fail(dims_at, fmt::format("the tensors up to this one hold more than {} elements in total",
                                INT64_MAX));
    total_elements_ += n;
    const uint64_t type_at = c_.pos();
    t.type_id = read<uint32_t>("tensor type");
    t.offset = read<uint64_t>("tensor data offset");
    if (const TypeTraits* tr = sized_type(t.type_id)) {
      const uint64_t ne0 = t.shape.empty() ? 1 : static_cast<uint64_t>(t.shape[0]);
      if (ne0 % tr->block_size != 0)
        fail(type_at, fmt::format("row length {} is not a multiple of the {} block size {}", ne0,
                                  tr->name, tr->block_size));
      // n < 2^63 elements can still need more than 2^64 bytes (f32, f64, i64): refuse rather
      // than let the size wrap to a small number that passes the bounds check.
      const uint64_t blocks = n / tr->block_size;
      if (blocks > UINT64_MAX / tr->type_size)
        fail(type_at,
             fmt::format("size in bytes overflows uint64 ({} elements of {})", n, tr->name));
      t.bytes = blocks * tr->type_size;
    }
    const auto [prev, fresh] = f_.tensor_index_.emplace(t.name, f_.tensors_.size());
    if (!fresh)
      fail(t.info_offset, fmt::format("duplicate tensor name (first defined at byte {})",
                                      f_.tensors_[prev->second].info_offset));
    f_.tensors_.push_back(std::move(t));
  }

  void tensor_data(const TensorInfo& t) {
    c_.set_object(tensor_object(t.name));
    if (t.offset % f_.alignment_ != 0)
      fail(t.data_offset_field(),
           fmt::format("data offset {} is not a multiple of the alignment {}", t.offset,
                       f_.alignment_));
    const uint64_t data_left = size_ > f_.data_offset_ ? size_ - f_.data_offset_ : 0;
    if (t.offset > data_left)
      fail(t.data_offset_field(),
           fmt::format("data offset {} is past end of file (data section holds {} bytes)", t.offset,
                       data_left));
    if (t.bytes && *t.bytes > data_left - t.offset)
      fail(f_.data_offset_ + t.offset,
           fmt::format("data runs past end of file (needs {} bytes, {} left)", *t.bytes,
                       data_left - t.offset));
  }
};

std::shared_ptr<const GgufFile> GgufFile::parse_partial(std::shared_ptr<const ByteSource> source,
                                                        std::optional<Error>& error) {
  auto f = std::make_shared<GgufFile>();
  f->source_ = std::move(source);
  error.reset();
  try {
    Parser(*f).run();
  } catch (const Error& e) {
    error = e;
  }
  return f;
}

std::shared_ptr<const GgufFile> GgufFile::parse(std::shared_ptr<const ByteSource> source) {
  std::optional<Error> error;
  auto f = parse_partial(std::move(source), error);
  if (error) throw *error;
  return f;
}

std::shared_ptr<const GgufFile> GgufFile::open(const std::string& path) {
  return parse(open_file_source(path));
}

}  // namespace gguf

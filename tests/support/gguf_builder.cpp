// The builder's own GGUF serializer and defect injection (see gguf_builder.h).
#include "gguf_builder.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cstdlib>
#include <stdexcept>
#include <system_error>

namespace gguf::testing {
namespace {

// (elements per block, bytes per block) by ggml type id; {0, 0} for removed ids.
constexpr std::array<std::pair<uint32_t, uint32_t>, 43> kTypeSizes = {{
    {1, 4},    {1, 2},    {32, 18},  {32, 20},   {0, 0},     {0, 0},     {32, 22},   {32, 24},
    {32, 34},  {32, 36},  {256, 84}, {256, 110}, {256, 144}, {256, 176}, {256, 210}, {256, 292},
    {256, 66}, {256, 74}, {256, 98}, {256, 50},  {32, 18},   {256, 110}, {256, 82},  {256, 136},
    {1, 1},    {1, 2},    {1, 4},    {1, 8},     {1, 8},     {256, 56},  {1, 2},     {0, 0},
    {0, 0},    {0, 0},    {256, 54}, {256, 66},  {0, 0},     {0, 0},     {0, 0},     {32, 17},
    {64, 36},  {128, 18}, {64, 18},
}};

constexpr uint64_t kHugeLength = uint64_t{1} << 40;

uint64_t pad(uint64_t x, uint64_t a) { return (x + a - 1) / a * a; }

class Writer {
 public:
  std::vector<uint8_t> out;
  uint64_t pos() const { return out.size(); }
  void bytes(const void* p, size_t n) {
    const auto* b = static_cast<const uint8_t*>(p);
    out.insert(out.end(), b, b + n);
  }
  void u32(uint32_t v) { bytes(&v, 4); }
  void u64(uint64_t v) { bytes(&v, 8); }
  void i64(int64_t v) { bytes(&v, 8); }
  void str(const std::string& s, std::optional<uint64_t> length = std::nullopt) {
    u64(length.value_or(s.size()));
    bytes(s.data(), s.size());
  }
};

uint64_t element_count(const std::vector<int64_t>& shape) {
  uint64_t n = 1;
  for (int64_t d : shape) n *= static_cast<uint64_t>(d);
  return n;
}

}  // namespace

std::optional<uint64_t> fixture_type_bytes(uint32_t type, uint64_t n) {
  if (type >= kTypeSizes.size() || kTypeSizes[type].first == 0) return std::nullopt;
  const auto [block, bytes] = kTypeSizes[type];
  if (n % block != 0) return std::nullopt;
  return n / block * bytes;
}

std::vector<uint8_t> pattern_bytes(size_t n, uint32_t seed) {
  std::vector<uint8_t> out(n);
  uint32_t x = seed * 2654435761u + 12345u;
  for (auto& b : out) {
    x = x * 1664525u + 1013904223u;
    b = static_cast<uint8_t>((x >> 24) & 0x3F);
  }
  return out;
}

GgufBuilder& GgufBuilder::version(uint32_t v) {
  version_ = v;
  return *this;
}

GgufBuilder& GgufBuilder::alignment(uint32_t a) {
  alignment_ = a;
  return u32("general.alignment", a);
}

GgufBuilder& GgufBuilder::string(std::string key, std::string v) {
  Kv kv{std::move(key), static_cast<uint32_t>(Tag::kString)};
  kv.strs.push_back(std::move(v));
  kvs_.push_back(std::move(kv));
  return *this;
}

GgufBuilder& GgufBuilder::string_array(std::string key, std::vector<std::string> v) {
  Kv kv{std::move(key), static_cast<uint32_t>(Tag::kArray), static_cast<uint32_t>(Tag::kString)};
  kv.count = v.size();
  kv.strs = std::move(v);
  kvs_.push_back(std::move(kv));
  return *this;
}

GgufBuilder& GgufBuilder::raw_array(std::string key, Tag elem, uint64_t count,
                                    std::vector<uint8_t> raw) {
  Kv kv{std::move(key), static_cast<uint32_t>(Tag::kArray), static_cast<uint32_t>(elem)};
  kv.count = count;
  kv.raw = std::move(raw);
  kvs_.push_back(std::move(kv));
  return *this;
}

GgufBuilder& GgufBuilder::raw_kv(std::string key, uint32_t tag, std::vector<uint8_t> value_bytes) {
  Kv kv{std::move(key), tag};
  kv.raw = std::move(value_bytes);
  kv.verbatim = true;
  kvs_.push_back(std::move(kv));
  return *this;
}

GgufBuilder& GgufBuilder::tensor(std::string name, uint32_t type, std::vector<int64_t> shape,
                                 std::vector<uint8_t> payload) {
  tensors_.emplace_back(std::move(name), type, std::move(shape), std::move(payload));
  return *this;
}

GgufBuilder& GgufBuilder::tensor(std::string name, uint32_t type, std::vector<int64_t> shape) {
  const uint64_t bytes = fixture_type_bytes(type, element_count(shape)).value_or(0);
  auto payload = pattern_bytes(bytes, static_cast<uint32_t>(tensors_.size() + 1));
  return tensor(std::move(name), type, std::move(shape), std::move(payload));
}

GgufBuilder& GgufBuilder::sparse_tensor(std::string name, uint32_t type,
                                        std::vector<int64_t> shape) {
  Tensor t{std::move(name), type, std::move(shape)};
  t.sparse = true;
  t.sparse_bytes = fixture_type_bytes(type, element_count(t.shape)).value_or(0);
  tensors_.push_back(std::move(t));
  return *this;
}

GgufBuilder& GgufBuilder::defect(Defect d) {
  defect_ = d;
  return *this;
}

struct GgufBuilder::Image {
  std::vector<uint8_t> head;
  Layout layout;
  std::vector<uint64_t> placed;  // absolute position of each payload
  std::vector<Tensor> tensors;
};

GgufBuilder::Image GgufBuilder::image() const {
  using K = DefectKind;
  const Defect& d = defect_;
  std::vector<Kv> kvs = kvs_;
  Image img;
  img.tensors = tensors_;
  std::vector<Tensor>& ts = img.tensors;
  const auto kv = [&]() -> Kv& {
    if (d.arg >= kvs.size()) throw std::logic_error("defect names a key that does not exist");
    return kvs[d.arg];
  };
  const auto tensor = [&]() -> Tensor& {
    if (d.arg >= ts.size()) throw std::logic_error("defect names a tensor that does not exist");
    return ts[d.arg];
  };
  const auto alignment_kv = [&]() -> Kv& {
    for (auto& e : kvs)
      if (e.key == "general.alignment") return e;
    kvs.emplace_back("general.alignment", static_cast<uint32_t>(Tag::kU32));
    return kvs.back();
  };
  const auto set_u32 = [](Kv& e, uint32_t v) {
    e.tag = static_cast<uint32_t>(Tag::kU32);
    e.raw.assign(reinterpret_cast<const uint8_t*>(&v), reinterpret_cast<const uint8_t*>(&v) + 4);
  };

  switch (d.kind) {
    case K::kEmptyKey:
      kv().key.clear();
      break;
    case K::kDuplicateKey:
      kv().key = kvs.at(0).key;
      break;
    case K::kUnknownValueType:
      kv().tag = 13;
      kv().verbatim = true;
      break;
    case K::kNestedArray:
      kv() = Kv{kv().key, static_cast<uint32_t>(Tag::kArray), static_cast<uint32_t>(Tag::kArray)};
      kv().count = 1;
      break;
    case K::kAlignmentWrongType: {
      Kv& e = alignment_kv();
      const uint64_t v = 32;
      e.tag = static_cast<uint32_t>(Tag::kU64);
      e.raw.assign(reinterpret_cast<const uint8_t*>(&v), reinterpret_cast<const uint8_t*>(&v) + 8);
      break;
    }
    case K::kAlignmentZero:
      set_u32(alignment_kv(), 0);
      break;
    case K::kAlignmentNotPowerOf2:
      set_u32(alignment_kv(), 48);
      break;
    case K::kTooManyDims:
      tensor().shape = {tensor().shape.empty() ? 1 : tensor().shape[0], 1, 1, 1, 1};
      break;
    case K::kNegativeDim:
      if (tensor().shape.size() < 2) tensor().shape.resize(2, 1);
      tensor().shape[1] = -3;
      break;
    case K::kElementCountOverflow:
      tensor().shape = {int64_t{1} << 32, int64_t{1} << 32};
      break;
    case K::kByteSizeOverflow:
      tensor().type = 0;
      tensor().shape = {int64_t{1} << 31, int64_t{1} << 31};
      break;
    case K::kRowNotBlockMultiple:
      tensor().type = 2;
      tensor().shape = {33};
      break;
    case K::kUnknownTypeId:
      tensor().type = 99;
      break;
    case K::kElementTotalOverflow:
      for (uint64_t i = 0; i <= d.arg && i < ts.size(); ++i) {
        ts[i].type = 99;
        ts[i].shape = {int64_t{3} << 61};
      }
      break;
    case K::kRemovedTypeId:
      tensor().type = 4;
      break;
    case K::kDuplicateTensorName:
      tensor().name = ts.at(0).name;
      break;
    case K::kEmptyTensorName:
      tensor().name.clear();
      break;
    case K::kLongTensorName:
      tensor().name.resize(64, 'x');
      break;
    default:
      break;
  }

  // Canonical layout: each payload at the running sum of the previous ones padded to alignment.
  const uint64_t a = alignment_;
  const size_t n = ts.size();
  std::vector<uint64_t> declared(n), placed(n);
  uint64_t data_size = 0;
  for (size_t i = 0; i < n; ++i) {
    declared[i] = placed[i] = data_size;
    data_size += pad(ts[i].size(), a);
  }
  switch (d.kind) {
    case K::kMisalignedOffset:
      (void)tensor();
      declared[d.arg] += 1;
      break;
    case K::kOffsetPastEof:
      (void)tensor();
      declared[d.arg] = pad(data_size, a) + 1024 * a;
      break;
    case K::kSharedData:
      if (d.arg == 0 || d.arg >= n) throw std::logic_error("shared data needs tensor #arg >= 1");
      declared[d.arg] = declared[d.arg - 1];
      break;
    case K::kOverlap:
      if (d.arg == 0 || d.arg >= n || ts[d.arg - 1].size() <= a)
        throw std::logic_error("overlap needs tensor #arg-1 larger than the alignment");
      declared[d.arg] = declared[d.arg - 1] + a;
      break;
    case K::kGap:
      (void)tensor();
      for (size_t i = d.arg; i < n; ++i) declared[i] = placed[i] += a;
      data_size += a;
      break;
    case K::kReorder: {
      if (d.arg + 1 >= n) throw std::logic_error("reorder needs tensors #arg and #arg+1");
      const uint64_t start = declared[d.arg];
      declared[d.arg + 1] = placed[d.arg + 1] = start;
      declared[d.arg] = placed[d.arg] = start + pad(ts[d.arg + 1].size(), a);
      break;
    }
    default:
      break;
  }

  Writer w;
  w.bytes(d.kind == K::kBadMagic ? "GGML" : "GGUF", 4);
  if (d.kind == K::kBigEndian) {
    const uint8_t be[4] = {0, 0, 0, 3};
    w.bytes(be, 4);
  } else {
    w.u32(d.kind == K::kVersion ? static_cast<uint32_t>(d.arg) : version_);
  }
  w.u64(d.kind == K::kHugeTensorCount ? d.arg : n);
  w.u64(d.kind == K::kHugeKvCount ? d.arg : kvs.size());
  for (size_t i = 0; i < kvs.size(); ++i) {
    const Kv& e = kvs[i];
    const bool target = d.arg == i;
    img.layout.kv_offsets.push_back(w.pos());
    w.str(e.key, target && d.kind == K::kKeyPastEof ? std::optional(kHugeLength) : std::nullopt);
    img.layout.kv_type_offsets.push_back(w.pos());
    w.u32(e.tag);
    img.layout.kv_value_offsets.push_back(w.pos());
    const auto long_string = [&](size_t k) {
      return target && k == 0 && d.kind == K::kStringPastEof ? std::optional(kHugeLength)
                                                             : std::nullopt;
    };
    if (e.verbatim) {
      w.bytes(e.raw.data(), e.raw.size());
    } else if (e.tag == static_cast<uint32_t>(Tag::kString)) {
      w.str(e.strs.at(0), long_string(0));
    } else if (e.tag == static_cast<uint32_t>(Tag::kArray)) {
      w.u32(e.elem);
      w.u64(target && d.kind == K::kArrayCountPastEof ? kHugeLength : e.count);
      if (e.elem == static_cast<uint32_t>(Tag::kString)) {
        for (size_t k = 0; k < e.strs.size(); ++k) w.str(e.strs[k], long_string(k));
      } else {
        w.bytes(e.raw.data(), e.raw.size());
      }
    } else {
      w.bytes(e.raw.data(), e.raw.size());
    }
  }
  for (size_t i = 0; i < n; ++i) {
    const Tensor& t = ts[i];
    img.layout.tensor_info_offsets.push_back(w.pos());
    w.str(t.name);
    w.u32(static_cast<uint32_t>(t.shape.size()));
    for (int64_t ne : t.shape) w.i64(ne);
    img.layout.tensor_type_offsets.push_back(w.pos());
    w.u32(t.type);
    img.layout.tensor_offset_fields.push_back(w.pos());
    w.u64(declared[i]);
  }
  Layout& l = img.layout;
  l.header_end = w.pos();
  l.data_offset = pad(l.header_end, a);
  l.tensor_offsets = declared;
  for (const auto& t : ts) l.tensor_bytes.push_back(t.size());
  l.file_size = n > 0 ? l.data_offset + data_size : l.header_end;
  if (d.kind == K::kTruncate) l.file_size = d.arg;
  if (d.kind == K::kDataPastEof) {
    if (n == 0 || ts.back().size() == 0)
      throw std::logic_error("data past end of file needs a last tensor with data");
    l.file_size = l.data_offset + declared.back() + ts.back().size() - 1;
  }
  for (size_t i = 0; i < n; ++i) img.placed.push_back(l.data_offset + placed[i]);
  img.head = std::move(w.out);
  return img;
}

Layout GgufBuilder::layout() const { return image().layout; }

std::vector<uint8_t> GgufBuilder::build() const {
  const Image img = image();
  std::vector<uint8_t> out(img.layout.file_size);
  std::copy_n(img.head.begin(), std::min<uint64_t>(img.head.size(), out.size()), out.begin());
  for (size_t i = 0; i < img.tensors.size(); ++i) {
    const Tensor& t = img.tensors[i];
    if (t.sparse) continue;
    for (uint64_t k = 0; k < t.payload.size() && img.placed[i] + k < out.size(); ++k)
      out[img.placed[i] + k] = t.payload[k];
  }
  return out;
}

void GgufBuilder::write_file(const std::string& path) const {
  const Image img = image();
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) throw std::system_error(errno, std::generic_category(), path);
  const auto put = [&](const uint8_t* p, uint64_t n, uint64_t at) {
    if (at >= img.layout.file_size) return;
    n = std::min(n, img.layout.file_size - at);
    while (n > 0) {
      const ssize_t k = ::pwrite(fd, p, n, static_cast<off_t>(at));
      if (k <= 0) throw std::system_error(errno, std::generic_category(), path);
      p += k, n -= static_cast<uint64_t>(k), at += static_cast<uint64_t>(k);
    }
  };
  try {
    if (::ftruncate(fd, static_cast<off_t>(img.layout.file_size)) != 0)
      throw std::system_error(errno, std::generic_category(), path);
    put(img.head.data(), img.head.size(), 0);
    for (size_t i = 0; i < img.tensors.size(); ++i)
      if (!img.tensors[i].sparse)
        put(img.tensors[i].payload.data(), img.tensors[i].payload.size(), img.placed[i]);
  } catch (...) {
    ::close(fd);
    throw;
  }
  ::close(fd);
}

std::string write_bytes(const std::string& p, const std::vector<uint8_t>& bytes) {
  const int fd = ::open(p.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) throw std::system_error(errno, std::generic_category(), p);
  size_t done = 0;
  while (done < bytes.size()) {
    const ssize_t k = ::write(fd, bytes.data() + done, bytes.size() - done);
    if (k <= 0) {
      ::close(fd);
      throw std::system_error(errno, std::generic_category(), p);
    }
    done += static_cast<size_t>(k);
  }
  ::close(fd);
  return p;
}

}  // namespace gguf::testing

// The canonical GGUF header: validation of what goes into it, the layout of the data section
// (running sum of payload sizes padded to the alignment, in plan order), and its bytes.
#include "write/serialize.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <bit>
#include <cstring>
#include <unordered_map>
#include <unordered_set>

#include "format/encoder.h"
#include "gguf/format/file.h"
#include "gguf/write/writer.h"

namespace gguf {

namespace detail {

uint64_t plan_alignment(const Metadata& metadata) {
  // The key ggml's reader takes: "general.alignment\0x" counts, so the layout written is the
  // one the output declares.
  const KeyValue* kv = find_key_as_ggml(metadata, "general.alignment");
  if (!kv) return kDefaultAlignment;
  const Value* v = &kv->value;
  const std::string object = key_object(kv->key);
  if (v->type() != ValueType::kU32)
    throw Error({}, object, std::nullopt,
                fmt::format("general.alignment must be u32, found {}", value_type_name(v->type())));
  const uint64_t a = *v->as_uint();
  if (a == 0 || !std::has_single_bit(a))
    throw Error({}, object, std::nullopt,
                fmt::format("general.alignment must be a non-zero power of two, found {}", a));
  return a;  // any u32 power of two: ggml's reader sets no maximum
}

namespace {

bool valid_scalar_type(ValueType t) {
  return static_cast<uint32_t>(t) < kValueTypeCount && t != ValueType::kArray &&
         t != ValueType::kString;
}

void validate_value(const KeyValue& kv) {
  const Value& v = kv.value;
  const auto t = static_cast<uint32_t>(v.type());
  auto fail = [&](std::string msg) {
    throw Error({}, key_object(kv.key), std::nullopt, std::move(msg));
  };
  if (t >= kValueTypeCount) fail(fmt::format("unknown value type {} (valid types are 0-12)", t));
  if (v.is_array() && v.array_type() != ValueType::kString && !valid_scalar_type(v.array_type()))
    fail(fmt::format("array element type {} cannot be written (nested arrays are not allowed)",
                     value_type_name(v.array_type())));
}

// ggml compares keys and tensor names with strcmp, so two that differ only after a NUL byte
// ("w\0a", "w\0b") are one to it. Returns the name seen before that reads as name does.
std::optional<std::string_view> read_as_one(
    std::unordered_map<std::string_view, std::string_view>& seen, std::string_view name) {
  const auto [it, fresh] = seen.emplace(as_ggml_reads(name), name);
  if (fresh) return std::nullopt;
  return it->second;
}

}  // namespace

void validate_header(const Metadata& metadata, uint32_t version,
                     const std::vector<const PlanTensor*>& tensors) {
  if (version != 2 && version != 3)
    throw Error(fmt::format("cannot write GGUF version {} (only versions 2 and 3)", version));
  std::unordered_set<std::string_view> keys;
  std::unordered_map<std::string_view, std::string_view> keys_as_read;
  for (const auto& kv : metadata.entries()) {
    if (kv.key.empty()) throw Error({}, key_object(kv.key), std::nullopt, "empty key");
    if (!keys.insert(kv.key).second)
      throw Error({}, key_object(kv.key), std::nullopt, "duplicate key");
    if (const auto first = read_as_one(keys_as_read, kv.key))
      throw Error({}, key_object(kv.key), std::nullopt, read_as_one_message(true, *first, kv.key));
    validate_value(kv);
  }
  plan_alignment(metadata);
  std::unordered_set<std::string_view> names;
  std::unordered_map<std::string_view, std::string_view> names_as_read;
  for (const PlanTensor* t : tensors) {
    const std::string object = tensor_object(t->name);
    if (t->name.empty()) throw Error({}, object, std::nullopt, "empty tensor name");
    if (t->name.size() > kMaxNameBytes)
      throw Error({}, object, std::nullopt,
                  fmt::format("tensor name is {} bytes; ggml allows at most {}", t->name.size(),
                              kMaxNameBytes));
    if (!names.insert(t->name).second)
      throw Error({}, object, std::nullopt, "duplicate tensor name");
    if (const auto first = read_as_one(names_as_read, t->name))
      throw Error({}, object, std::nullopt, read_as_one_message(false, *first, t->name));
    const uint64_t want = expected_bytes(*t);
    if (t->bytes != want)
      throw Error({}, object, std::nullopt,
                  fmt::format("payload is {} bytes, but type {} and shape [{}] need {}", t->bytes,
                              type_name(t->type_id), fmt::join(t->shape, ", "), want));
  }
}

uint64_t metadata_bytes(const Metadata& metadata) {
  uint64_t n = 0;
  for (const auto& kv : metadata.entries()) n += 8 + kv.key.size() + 4 + value_bytes(kv.value);
  return n;
}

uint64_t tensor_info_bytes(const PlanTensor& t) {
  return 8 + t.name.size() + 4 + 8 * t.shape.size() + 4 + 8;
}

Layout layout_of(const Metadata& metadata, const std::vector<const PlanTensor*>& tensors) {
  Layout l;
  l.alignment = plan_alignment(metadata);
  uint64_t header = 24 + metadata_bytes(metadata);
  for (const PlanTensor* t : tensors) header += tensor_info_bytes(*t);
  l.data_offset = pad_to(header, l.alignment);
  uint64_t pos = 0;
  l.offsets.reserve(tensors.size());
  for (const PlanTensor* t : tensors) {
    l.offsets.push_back(pos);
    pos = pad_to(pos + t->bytes, l.alignment);
  }
  l.file_size = l.data_offset + pos;
  return l;
}

std::vector<uint8_t> encode_header(const Metadata& metadata, uint32_t version,
                                   const std::vector<const PlanTensor*>& tensors,
                                   const Layout& layout) {
  std::vector<uint8_t> out;
  out.reserve(layout.data_offset);
  Encoder e(out);
  e.put<uint32_t>(kMagic);
  e.put<uint32_t>(version);
  e.put<uint64_t>(tensors.size());
  e.put<uint64_t>(metadata.size());
  for (const auto& kv : metadata.entries()) {
    e.string(kv.key);
    e.value(kv.value);
  }
  for (size_t i = 0; i < tensors.size(); ++i) {
    const PlanTensor& t = *tensors[i];
    e.string(t.name);
    e.put<uint32_t>(static_cast<uint32_t>(t.shape.size()));
    for (int64_t ne : t.shape) e.put<int64_t>(ne);
    e.put<uint32_t>(t.type_id);
    e.put<uint64_t>(layout.offsets[i]);
  }
  out.resize(layout.data_offset, 0);
  return out;
}

}  // namespace detail

std::vector<uint8_t> serialize_header(const Metadata& metadata, uint32_t version,
                                      const std::vector<PlanTensor>& tensors) {
  std::vector<const PlanTensor*> ptrs;
  ptrs.reserve(tensors.size());
  for (const auto& t : tensors) ptrs.push_back(&t);
  detail::validate_header(metadata, version, ptrs);
  return detail::encode_header(metadata, version, ptrs, detail::layout_of(metadata, ptrs));
}

}  // namespace gguf

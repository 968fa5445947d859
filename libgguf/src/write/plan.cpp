// Payload sizes implied by a plan tensor's type and shape, checked the way ggml's reader
// checks them (so a plan that passes here yields a file ggml accepts).
#include "gguf/write/plan.h"

#include <fmt/format.h>

#include <bit>
#include <cstdint>

#include "gguf/base/error.h"
#include "gguf/format/file.h"
#include "gguf/format/types.h"
#include "gguf/write/plan_report.h"

namespace gguf {

std::string_view action_name(PlanAction a) {
  switch (a) {
    case PlanAction::kCopy:
      return "copy";
    case PlanAction::kSplice:
      return "splice";
    case PlanAction::kEncode:
      return "encode";
    case PlanAction::kDecode:
      return "decode";
  }
  return "copy";
}

std::optional<std::string> raise_small_alignment(Metadata& metadata) {
  const KeyValue* kv = find_key_as_ggml(metadata, "general.alignment");
  if (!kv || kv->value.type() != ValueType::kU32) return std::nullopt;
  const uint64_t a = *kv->value.as_uint();
  if (a == 0 || !std::has_single_bit(a) || a >= kGgmlTensorAlignment) return std::nullopt;
  const std::string key = kv->key;  // the key ggml reads, which may go on past a NUL byte
  metadata.set(key, Value::u32(kGgmlTensorAlignment));
  return fmt::format(
      "general.alignment {} raised to 32 in the output: with less, tensor data may start off a "
      "32-byte boundary, and llama.cpp aborts on that when it memory-maps the file",
      a);
}

uint32_t check_align_option(uint64_t n) {
  if (n < kGgmlTensorAlignment || n > (uint64_t{1} << 31) || !std::has_single_bit(n))
    usage_error(fmt::format(
        "--align {}: the alignment must be a power of two from 32 to 2147483648 (e.g. 4096)", n));
  return static_cast<uint32_t>(n);
}

void set_alignment(Metadata& metadata, uint32_t n) {
  const KeyValue* kv = find_key_as_ggml(metadata, "general.alignment");
  metadata.set(kv ? kv->key : std::string("general.alignment"), Value::u32(n));
}

uint64_t expected_bytes(const PlanTensor& t) {
  auto fail = [&](std::string msg) -> Error {
    return Error({}, tensor_object(t.name), std::nullopt, std::move(msg));
  };
  const TypeTraits* tr = sized_type(t.type_id);
  if (!tr)
    throw fail(fmt::format("type {} ({}) has no known size", t.type_id,
                           find_type(t.type_id) ? "removed from ggml" : "unknown id"));
  if (t.shape.size() > kMaxDims)
    throw fail(fmt::format("n_dims {} exceeds the maximum of {}", t.shape.size(), kMaxDims));
  uint64_t n = 1;
  for (size_t d = 0; d < t.shape.size(); ++d) {
    const int64_t ne = t.shape[d];
    if (ne < 0) throw fail(fmt::format("dimension {} is negative ({})", d, ne));
    if (ne != 0 && n > static_cast<uint64_t>(INT64_MAX) / static_cast<uint64_t>(ne))
      throw fail("element count overflows int64");
    n *= static_cast<uint64_t>(ne);
  }
  const uint64_t ne0 = t.shape.empty() ? 1 : static_cast<uint64_t>(t.shape[0]);
  if (ne0 % tr->block_size != 0)
    throw fail(fmt::format("row length {} is not a multiple of the {} block size {}", ne0, tr->name,
                           tr->block_size));
  const uint64_t blocks = n / tr->block_size;
  if (blocks > UINT64_MAX / tr->type_size) throw fail("payload size overflows 64 bits");
  return blocks * tr->type_size;
}

}  // namespace gguf

// Shared fixture of the reader tests: a small sound file and helpers that parse it in memory.
#pragma once

#include <memory>
#include <string>
#include <string_view>

#include "gguf/format/file.h"
#include "gguf_builder.h"

namespace gguf::reader_test {

using testing::Defect;
using testing::DefectKind;
using testing::GgufBuilder;
using testing::Layout;
using testing::Tag;

inline constexpr const char* kName = "mem.gguf";
inline constexpr uint64_t kHuge = uint64_t{1} << 40;

// Keys: 0 general.architecture (string), 1 llama.block_count (u32), 2 tokenizer.ggml.tokens
// (string array), 3 some.ints (i32 array). Tensors: 0 f32 [8, 4] (128 bytes), 1 q4_0 [64, 2]
// (72 bytes), 2 f16 [16] (32 bytes, ends the file without padding).
inline GgufBuilder base() {
  GgufBuilder b;
  b.string("general.architecture", "llama")
      .u32("llama.block_count", 2)
      .string_array("tokenizer.ggml.tokens", {"a", "bc"})
      .array("some.ints", Tag::kI32, std::vector<int32_t>{1, -2, 3})
      .tensor("token_embd.weight", 0, {8, 4})
      .tensor("blk.0.attn_q.weight", 2, {64, 2})
      .tensor("output.weight", 1, {16});
  return b;
}

inline GgufBuilder with(Defect d) { return base().defect(d); }

inline std::shared_ptr<const GgufFile> parse(const GgufBuilder& b) {
  return GgufFile::parse(memory_source(b.build(), kName));
}

inline std::string error_of(const GgufBuilder& b) {
  try {
    parse(b);
  } catch (const Error& e) {
    return e.what();
  }
  return "(no error)";
}

// Offset of the first byte after a key's name: where its value type is.
inline uint64_t after_key(const Layout& l, size_t kv, std::string_view key) {
  return l.kv_offsets[kv] + 8 + key.size();
}
// Offset of a tensor info's n_dims field.
inline uint64_t after_name(const Layout& l, size_t t, std::string_view name) {
  return l.tensor_info_offsets[t] + 8 + name.size();
}

}  // namespace gguf::reader_test

// Lossless import of packed-affine safetensors (DESIGN.md, "Packed-affine safetensors"): each
// packed tensor's values, float(code) * float(scale) + float(min) in fp32, are moved into a
// standard ggml type that reconstructs exactly the same floats (q4_1 for codes of up to 4 bits,
// q5_1 up to 5; f32 always), then proven by reading the written file back.
//
// Why it is exact: q4_1 and q5_1 blocks hold 32 codes with an f16 scale d and an f16 min m and
// decode as float(q) * d + m in fp32. With a group a multiple of 32, every block lies in one
// group, so d and m are that group's scale and min, bit for bit, and q is the code. The product
// of a code below 2^5 and an f16 scale (11 significant bits) is exact in fp32, so a fused or
// unfused multiply-add rounds the same single sum.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "gguf/codecs/affine.h"
#include "gguf/format/model.h"
#include "gguf/format/types.h"
#include "gguf/inputs/safetensors.h"
#include "gguf/write/plan.h"
#include "gguf/write/plan_report.h"
#include "gguf/write/writer.h"

namespace gguf {

// Parses __metadata__["packed_affine"] (absent: no packed tensors) and checks every entry
// against the file: version 1; bits 1-8; a group that divides the columns; codes, scales and
// mins present with the right dtype and size; no packed name that is also a tensor of the file.
// Throws gguf::Error naming the file, the tensor and the byte of its header entry.
std::vector<PackedAffineTensor> packed_affine_tensors(const SafetensorsFile& file);

// The ggml type a plain safetensors dtype maps to byte for byte, or nullopt.
std::optional<GgmlType> ggml_type_of_dtype(std::string_view dtype);

struct ImportOptions {
  std::optional<GgmlType> type;  // q4_1, q5_1 or f32 for every packed tensor; none: smallest
  // Start from this GGUF: its metadata, and its tensors in its order, each replaced by the
  // import's tensor of the same name (same shape required). An import tensor with no place in
  // the base is an error, unless append_unmatched: then it follows the base's tensors.
  const Model* base = nullptr;
  unsigned threads = 1;  // for making the payloads and for the proof
  bool append_unmatched = false;
  // --align: the output's general.alignment (check_align_option); else the base's (raised to
  // 32), or the default 32 without a base.
  std::optional<uint32_t> alignment = {};
};

// One source of a mapped tensor: a packed tensor or a plain one, in one shard.
struct MappedSource {
  const SafetensorsFile* file = nullptr;
  const PackedAffineTensor* packed = nullptr;
  const SafetensorsTensor* plain = nullptr;
};

// A tensor of a Hugging Face checkpoint import whose rows come from its sources in another
// order (the llama q/k permutation, experts stacked, DeepSeek's kv_b split). "Rows" are all
// dimensions but the innermost (GGUF's ne[0], the source's last): they move whole, so a packed
// row keeps its codes, scales and mins. kKvBKeys alone moves single values (a transpose).
struct MappedTensor {
  enum class Move { kPermute, kStack, kKvBKeys, kKvBValues };
  Move move = Move::kPermute;
  std::vector<MappedSource> sources;  // one, or the experts in order
  uint64_t rows = 0, cols = 0;        // of the output
  uint64_t heads = 0;                 // kPermute, kKvB*: heads
  uint64_t nope = 0, v = 0;           // kKvB*: key and value rows per head of kv_b_proj
  uint64_t source_cols = 0;           // kKvBKeys: kv_b_proj's columns (kv_lora_rank)
  // Where output row r comes from (not kKvBKeys): the source and its row.
  std::pair<size_t, uint64_t> source_row(uint64_t r) const;
  // kKvBKeys: the source element (row-major) that output element (r, c) is.
  uint64_t key_source(uint64_t r, uint64_t c) const;
};

// A row of the plan report: kCopy, or for packed tensors kEncode (to q4_1/q5_1) or kDecode (to
// f32). A packed tensor had no ggml type: its type_before is meaningless (bits and group say
// what it was).
struct ImportRow : PlanRow {
  std::vector<int64_t> shape;  // ggml ne order
  unsigned bits = 0;           // packed tensors only
  uint64_t group = 0;
  bool from_base = false;  // copied from the base GGUF
  std::string type_base;   // with a base: the type of the base tensor it replaces, when another
  // The source, for the proof: a packed tensor or a plain one of `file`, or a mapped tensor.
  const SafetensorsFile* file = nullptr;
  const PackedAffineTensor* packed = nullptr;
  const SafetensorsTensor* plain = nullptr;
  const MappedTensor* mapped = nullptr;
  // Hugging Face checkpoints: the source's name (a stack: "...experts.{0..7}.w1.weight") and
  // the transform (hf_names.h's transform_name); empty otherwise.
  std::string hf_name, transform;
  // A packed-affine source (bits and group say what it was; it had no ggml type_before).
  bool affine() const { return bits != 0; }
};

struct ImportResult {
  Plan plan;
  std::vector<PackedAffineTensor> packed;  // rows point into this; do not copy the result
  std::vector<std::unique_ptr<MappedTensor>> mapped;  // likewise
  std::string architecture;  // a checkpoint's, from its config.json ("" when none)
  std::vector<ImportRow> rows;
  std::vector<std::string> inputs;
  uint64_t bytes_before = 0, bytes_after = 0;
  std::vector<std::string> notes;
  ImportResult() = default;
  ImportResult(const ImportResult&) = delete;
  ImportResult& operator=(const ImportResult&) = delete;
  ImportResult(ImportResult&&) = default;
};

// Builds the plan. Throws gguf::Error naming the tensor for anything that cannot be moved
// exactly: no silent fallback to a lossy type.
ImportResult import_safetensors(const SafetensorsFile& file, const ImportOptions& options);

struct ImportProof {
  uint64_t tensors = 0;  // imported tensors read back and compared
  uint64_t values = 0;   // of them, packed values compared bit for bit
  uint64_t bytes = 0;    // of them, plain payload bytes compared
};

// Reads the written output (a Model opened by the validated reader, e.g. the one
// WriteOptions::before_commit hands over before the output reaches its path; or the file at
// output_path, a split set through its first shard), decodes every imported packed tensor with the
// ggml-exact decoder and compares the float bits with affine_values(); compares plain tensors byte
// for byte. Throws gguf::Error naming the output (names[shard] when given: the paths the shards
// will have), the tensor, the element and both values at the first difference.
ImportProof prove_import(const SafetensorsFile& file, const ImportResult& result,
                         const Model& written, unsigned threads = 1,
                         std::span<const std::string> names = {});
ImportProof prove_import(const SafetensorsFile& file, const ImportResult& result,
                         const std::string& output_path, unsigned threads = 1);
// The same for an import whose rows name their sources (every import since rows carry `file`;
// `fallback` serves rows that do not).
ImportProof prove_import(const ImportResult& result, const Model& written, unsigned threads = 1,
                         std::span<const std::string> names = {},
                         const SafetensorsFile* fallback = nullptr);

std::string render_import_text(const ImportResult& r, const WriteResult* written,
                               const ImportProof* proof);
std::string render_import_json(const ImportResult& r, const WriteResult* written,
                               const ImportProof* proof);

// The other direction, for examples and tests: an in-house-style affine quantizer. Each group of
// `group` columns of each row gets min = its smallest value and scale = (max - min) /
// (2^bits - 1), both rounded to f16, and codes round((x - min) / scale) clamped to the width.
// Returns a packed_affine safetensors file holding the tensors under their names, shapes
// reversed from ggml order, codes / scales / mins named NAME.codes, NAME.scales, NAME.mins.
struct AffineSource {
  std::string name;
  std::vector<int64_t> ne;  // ggml order; ne[0] must be a multiple of group
  std::vector<float> values;
};
std::vector<uint8_t> pack_affine_safetensors(const std::vector<AffineSource>& tensors,
                                             unsigned bits, uint64_t group);

}  // namespace gguf

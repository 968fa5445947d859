// Validation beyond what the lenient reader refuses: what llama.cpp's loader (ggml's gguf
// reader) would refuse, and what is suspicious though loadable (NaN/Inf in float data and in
// quant block scales, mixed gate/up expert types), as a list of problems.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "gguf/format/metadata.h"
#include "gguf/format/model.h"
#include "gguf/format/types.h"

namespace gguf {

struct Problem {
  std::string path;                // the file (shard) concerned
  std::string object;              // "tensor 'x'", "key 'k'" (escaped), or empty
  std::optional<uint64_t> offset;  // absolute byte offset in path
  std::string message;
  std::string severity = "error";  // "error": ggml/llama.cpp refuses it or computes garbage;
                                   // "warning": loads, but is suspicious
};

// "path: object: at byte N: message", the way gguf::Error renders.
std::string format_problem(const Problem& p);

struct CheckOptions {
  bool scan_data = true;  // look for NaN/Inf in float data and quant block scales
  unsigned threads = 0;   // 0: all cores
  // Tensors are scanned in pieces of about this many bytes, each read into a buffer of the
  // thread that scans it: one huge tensor still uses every core, and memory stays bounded by
  // this size times the threads.
  uint64_t chunk_bytes = uint64_t{4} << 20;
};

// Tensors of f whose data overlaps another's (ggml refuses such files; the lenient reader reads
// them), each reported on the one later in the header: its index, and "shares its data with
// tensor 'a' (offset N, M bytes)" or "data overlaps tensor ...". Unsized tensors are skipped.
std::vector<std::pair<size_t, std::string>> data_overlaps(const GgufFile& f);

// For tools that copy or re-encode a model's tensors: the first overlap of any shard as a
// warning naming the file and both tensors, or nothing.
std::optional<std::string> overlap_warning(const Model& m);

// Keys llama.cpp's loader reads with an exact value type, refusing a model whose file holds
// another; check_model reports them. A key starting with '.' follows the architecture
// ("llama.block_count"); archs limits a rule to architectures whose loader reads the key.
enum class KeyForm : uint8_t {
  kScalar,    // exactly `type`
  kPerLayer,  // a u32, or an array of u32, i32 or bool with one entry per layer
  kArray,     // an array of `type` (or of `alt`)
};
inline constexpr uint8_t kAnyArch = 0, kArchLlama = 1, kArchDeepseek2 = 2;
inline constexpr ValueType kNoAltType = static_cast<ValueType>(kValueTypeCount);
struct KeyTypeRule {
  std::string_view key;
  ValueType type;
  KeyForm form = KeyForm::kScalar;
  uint8_t archs = kAnyArch;
  ValueType alt = kNoAltType;  // a second element type an array may have
};
std::span<const KeyTypeRule> llama_key_type_rules();

// Problems in a stable order: per shard the alignment, then each tensor's name, type and
// layout; then model-wide keys and expert types; then data problems in tensor order.
std::vector<Problem> check_model(const Model& model, const CheckOptions& options = {});

}  // namespace gguf

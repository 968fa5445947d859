// gguf-requant as a function: a plan that re-encodes the quantizable tensors of a model to one
// ggml type (streamed, chunked, multi-threaded) and copies every other tensor byte for byte.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "gguf/imatrix.h"
#include "gguf/model.h"
#include "gguf/plan.h"
#include "gguf/select.h"
#include "gguf/types.h"
#include "gguf/writer.h"

namespace gguf {

struct RequantOptions {
  GgmlType type = GgmlType::Q8_0;
  Selector selector;                 // restricts which tensors are re-encoded (others copied)
  const Imatrix* imatrix = nullptr;  // importance weights; nullptr = none
  unsigned threads = 1;
  // Re-encode only along exact paths (gguf/exact.h); a tensor that has none is an error.
  bool exact = false;
};

// How a tensor's importance weights were obtained.
enum class ImportanceSource { kNone, kImatrix, kColumnEnergy };

struct RequantRow {
  std::string name;
  std::string source;  // path of the file the tensor is read from
  uint32_t type_before = 0, type_after = 0;
  uint64_t bytes_before = 0, bytes_after = 0;
  std::string action;        // "copy" | "encode" | "decode"
  bool lossy = false;        // values may change: any target but f32, unless --exact proves them
  bool requantized = false;  // lossy, and the source was already quantized (error adds up)
  ImportanceSource importance = ImportanceSource::kNone;
};

struct RequantResult {
  Plan plan;
  std::vector<RequantRow> rows;
  std::vector<std::string> inputs;  // every file read, so the output never replaces one
  uint64_t bytes_before = 0, bytes_after = 0;
  std::vector<std::string> notes;  // said once each (fallbacks, lossy re-encodes)
  bool exact = false;              // planned with RequantOptions::exact
};

// True when requant may re-encode this tensor, by llama-quantize's rule: a name ending in
// "weight", two or more dimensions as ggml counts them (trailing 1s do not count), not a norm,
// not the MoE router (ffn_gate_inp), not one of the small weights llama.cpp never quantizes
// (ssm_conv1d, time_mix_*, altup, ...), not an integer type (i8, i16, i32, i64); requant also
// needs it selected.
bool is_quantizable(const TensorInfo& t, std::string_view arch);

// Builds the plan. Throws gguf::Error for a tensor whose row length does not fit the target
// block size (naming it; there is no silent fallback type), a source type that cannot be
// decoded, or a target type without an encoder.
RequantResult requant(const Model& model, const RequantOptions& options);

struct ExactProof;
// `exact`: the proof of a --exact run (null otherwise, or when not written or not verified).
std::string render_requant_text(const RequantResult& r, const WriteResult* written,
                                const ExactProof* exact = nullptr);
std::string render_requant_json(const RequantResult& r, const WriteResult* written,
                                const ExactProof* exact = nullptr);

}  // namespace gguf

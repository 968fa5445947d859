// Shared by the packed-affine import of one file (affine_import.cpp) and of a Hugging Face
// checkpoint (hf_import.cpp): the payload producers, placing the tensors into the base, and
// the proof of mapped tensors.
#pragma once

#include <vector>

#include "gguf/ops/affine.h"

namespace gguf::detail {

// The payload of a packed tensor as `type`, made in blocks (q4_1, q5_1) or elements (f32).
Producer affine_producer(const SafetensorsFile& file, const PackedAffineTensor& t, GgmlType type,
                         unsigned threads);
// The payload of a mapped tensor: rows gathered from its sources (packed ones as `type`).
Producer mapped_producer(const MappedTensor& m, GgmlType type, unsigned threads,
                         const std::string& name);

// ggml ne order (innermost first) of a row-major shape; a scalar is one element.
std::vector<int64_t> ne_of(const std::vector<int64_t>& shape);
// The byte of its input file that errors about an import row point at.
uint64_t source_offset(const ImportRow& row);
std::string source_path(const ImportRow& row);

// Fills r.plan and r.rows from the import's rows and tensors (same order): alone, or in the
// base's order with ImportOptions' rules; then GGUF names, file type keys and the layout.
void place_import(ImportResult& r, std::vector<ImportRow> rows, std::vector<PlanTensor> tensors,
                  const ImportOptions& o);

// Reads back mapped row `row` from tensor `t` of the written file, comparing each value with
// the source element it came from. Throws gguf::Error at the first difference; returns the
// number of values (packed) or bytes (plain) compared.
struct MappedProof {
  uint64_t values = 0, bytes = 0;
};
MappedProof prove_mapped(const ImportRow& row, const TensorRef& t, const std::string& path,
                         unsigned threads);

}  // namespace gguf::detail

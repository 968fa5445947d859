// Streaming encoders for plans: a Producer that turns rows of floats (from any function,
// e.g. a decoded source tensor or a synthetic generator) into rows of a ggml type, chunk by
// chunk and in parallel, with output independent of the thread count.
#pragma once

#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <vector>

#include "gguf/format/types.h"
#include "gguf/write/plan.h"

namespace gguf {

struct RowEncoder {
  GgmlType type = GgmlType::F32;
  int64_t n_per_row = 0;
  int64_t nrows = 0;
  // Fills out (count * n_per_row floats) with rows [first, first + count).
  std::function<void(int64_t first, int64_t count, std::span<float> out)> rows;
  // Rows per matrix (ne1 for 2-D/3-D tensors): importance is per matrix (per expert).
  int64_t rows_per_matrix = 0;
  // Importance weights (n_per_row) of a matrix, or empty for none; may be empty function.
  std::function<std::span<const float>(int64_t matrix)> importance;
  // Told, once the rows have been encoded, that `rows` rows of `matrix` are done with the
  // span importance(matrix) returned (so a cache can let it go); may be an empty function.
  std::function<void(int64_t matrix, int64_t rows)> importance_done;
  unsigned threads = 1;
  std::string tensor_name;  // for error messages
  // Where the rows come from, so that an error caused by the values (a NaN where a codec
  // cannot take one) names the input file and the byte of the failing rows; optional.
  std::string source_path;
  uint64_t source_offset = 0, source_row_bytes = 0;
  // Refuse (throw naming the element) any value that does not read back as the same number
  // (gguf-requant --exact to f16 or bf16), so --no-verify cannot let a rounded value through.
  bool exact = false;
};

// A Producer serving any byte range of the encoded tensor; memory is bounded by the chunk.
Producer make_encoding_producer(RowEncoder enc);

// A Producer over a payload made of nrows rows of row_bytes each: rows(first, count, out)
// writes rows [first, first + count) to out; they are made about 8 MiB at a time and handed
// out in whatever pieces the writer asks for.
Producer make_row_producer(uint64_t row_bytes, int64_t nrows, std::string tensor_name,
                           std::function<void(int64_t first, int64_t count, uint8_t* out)> rows);

}  // namespace gguf

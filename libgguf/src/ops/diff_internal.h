// Internal: the numeric half of gguf-diff (diff_metrics.cpp), called by diff.cpp.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <optional>
#include <span>
#include <vector>

#include "gguf/format/model.h"
#include "gguf/ops/diff.h"

namespace gguf::detail {

// One tensor whose bytes differ in A and B, to measure: B against A, and/or A and B against a
// reference. All present tensors have equal shapes and decodable types.
struct ValueJob {
  const TensorRef* a = nullptr;
  const TensorRef* b = nullptr;
  const TensorRef* ref = nullptr;  // null: no three-way measurement
  bool measure_ab = false;         // B against A
  // Importance weights, checked against the shape: ne0 values, or one slice of ne0 per matrix.
  std::span<const float> weights;
};

struct ValueResult {
  std::optional<ErrorMetrics> ab, ref_a, ref_b;
};

// Measures every job, decoding row chunks in parallel (up to threads workers) with bounded
// memory; partial sums are merged in row order so results do not depend on the thread count.
// progress gets (input bytes decoded, total input bytes).
std::vector<ValueResult> measure_values(const std::vector<ValueJob>& jobs, unsigned threads,
                                        const std::function<void(uint64_t, uint64_t)>& progress);

// Adds n element pairs to m: x against base, with per-element weights w (or null).
void accumulate(const float* base, const float* x, size_t n, const float* w, ErrorMetrics& m);
// The same with sum kernel number k (0 = plain C++, then the vector kernels this CPU has; the
// last is the one accumulate() uses), so tests can check every kernel the machine can run.
size_t sum_kernel_count();
void accumulate_with(size_t kernel, const float* base, const float* x, size_t n, const float* w,
                     ErrorMetrics& m);
// rows x ne0 pairs whose weights (when w is given) repeat every row: w holds ne0 weights and
// w_sum is their sum. The same as accumulate() on each row, in one pass.
void accumulate_rows(const float* base, const float* x, size_t rows, size_t ne0, const float* w,
                     double w_sum, ErrorMetrics& m);
void accumulate_rows_with(size_t kernel, const float* base, const float* x, size_t rows, size_t ne0,
                          const float* w, double w_sum, ErrorMetrics& m);
// accumulate_rows() with either side or both given as q4_K blocks (ne0 a multiple of 256):
// the same sums, bit for bit, as decoding them first. Where fused_q4_K() (AVX-512) and fused
// (tests set it false to check the other way), the sum kernel decodes them in its registers,
// without storing and loading their floats; otherwise they are decoded first.
struct SumSide {
  const float* floats = nullptr;  // the side's values, or
  const uint8_t* q4_K = nullptr;  // its q4_K blocks
};
bool fused_q4_K();
void accumulate_rows(SumSide base, SumSide x, size_t rows, size_t ne0, const float* w, double w_sum,
                     ErrorMetrics& m, bool fused = true);

}  // namespace gguf::detail

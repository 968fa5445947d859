// The row moves of a Hugging Face checkpoint import: where each output row (or, for DeepSeek's
// transposed kv_b keys, each value) comes from; the payloads gathered that way; and the proof
// that reads every output value back and compares it with the source element it came from.
#include <fmt/format.h>
#include <tbb/global_control.h>
#include <tbb/parallel_for.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <mutex>
#include <tuple>

#include "gguf/base/error.h"
#include "gguf/base/escape.h"
#include "gguf/codecs/codecs.h"
#include "gguf/format/file.h"
#include "gguf/ops/exact.h"
#include "gguf/write/encode.h"
#include "ops/import_internal.h"

namespace gguf {

std::pair<size_t, uint64_t> MappedTensor::source_row(uint64_t r) const {
  switch (move) {
    case Move::kPermute: {
      // llama.cpp's converter: per head, the two rotary halves interleaved (new row p of a head
      // is old row (p mod 2) * hd/2 + p/2).
      const uint64_t hd = rows / heads, p = r % hd;
      return {0, r / hd * hd + (p % 2) * (hd / 2) + p / 2};
    }
    case Move::kStack: {
      const uint64_t per = rows / sources.size();
      return {static_cast<size_t>(r / per), r % per};
    }
    case Move::kKvBValues:  // per head, kv_b's rows are nope key rows, then v value rows
      return {0, r / v * (nope + v) + nope + r % v};
    case Move::kKvBKeys:
      break;
  }
  throw Error("source_row: the keys of kv_b move single values");
}

uint64_t MappedTensor::key_source(uint64_t r, uint64_t c) const {
  // Output ne {nope, kv_lora_rank, heads}: element (head h, rank k, d) is kv_b[h*(nope+v)+d][k].
  const uint64_t h = r / source_cols, k = r % source_cols;
  return (h * (nope + v) + c) * source_cols + k;
}

namespace detail {
namespace {

uint64_t plain_element_bytes(const MappedSource& s) {
  return safetensors_dtype_size(s.plain->dtype);
}

// Output rows [first, first + count) into out (row_bytes each).
void gather_rows(const MappedTensor& m, GgmlType type, uint64_t row_bytes, uint64_t first,
                 uint64_t count, uint8_t* out) {
  if (m.move == MappedTensor::Move::kKvBKeys) {
    const MappedSource& s = m.sources.front();
    const uint64_t n_rows = m.nope * m.source_cols;  // one head's key block
    std::vector<float> block;
    uint64_t cached = UINT64_MAX;
    for (uint64_t r = first; r < first + count; ++r) {
      const uint64_t h = r / m.source_cols;
      uint8_t* o = out + (r - first) * row_bytes;
      if (s.packed) {
        if (h != cached) {
          block.resize(n_rows);
          affine_values(*s.file, *s.packed, h * (m.nope + m.v) * m.source_cols, n_rows, block);
          cached = h;
        }
        for (uint64_t c = 0; c < m.cols; ++c) {
          const float f = block[c * m.source_cols + r % m.source_cols];
          std::memcpy(o + 4 * c, &f, 4);
        }
      } else {
        const uint64_t eb = plain_element_bytes(s);
        const auto src = s.file->data(*s.plain);
        for (uint64_t c = 0; c < m.cols; ++c)
          std::memcpy(o + eb * c, src.data() + eb * m.key_source(r, c), eb);
      }
    }
    return;
  }
  for (uint64_t r = first; r < first + count;) {
    const auto [si, sr] = m.source_row(r);
    uint64_t len = 1;  // a run of rows that are consecutive in one source too
    while (r + len < first + count && m.source_row(r + len) == std::pair{si, sr + len}) ++len;
    const MappedSource& s = m.sources[si];
    uint8_t* o = out + (r - first) * row_bytes;
    if (s.packed) {
      affine_to_type(*s.file, *s.packed, type, sr * m.cols, len * m.cols,
                     {o, static_cast<size_t>(len * row_bytes)});
    } else {
      const uint64_t at = s.plain->begin + sr * row_bytes;
      std::memcpy(o, s.file->source().bytes(at, len * row_bytes).data(), len * row_bytes);
      s.file->source().release(at, len * row_bytes);
    }
    r += len;
  }
}

uint64_t mapped_row_bytes(const MappedTensor& m, GgmlType type) {
  const MappedSource& s = m.sources.front();
  return s.packed ? *row_bytes(type, m.cols) : m.cols * plain_element_bytes(s);
}

// Rows per task: about 2^18 values.
uint64_t rows_per_task(const MappedTensor& m) {
  return std::max<uint64_t>(1, (uint64_t{1} << 18) / std::max<uint64_t>(1, m.cols));
}

}  // namespace

Producer mapped_producer(const MappedTensor& m, GgmlType type, unsigned threads,
                         const std::string& name) {
  const uint64_t rb = mapped_row_bytes(m, type);
  const MappedTensor* mp = &m;
  return make_row_producer(
      rb, static_cast<int64_t>(m.rows), name,
      [mp, type, rb, threads](int64_t first, int64_t count, uint8_t* out) {
        const uint64_t per = rows_per_task(*mp), n = static_cast<uint64_t>(count);
        tbb::global_control limit(tbb::global_control::max_allowed_parallelism,
                                  std::max(1u, threads));
        tbb::parallel_for(uint64_t{0}, (n + per - 1) / per, [&](uint64_t k) {
          const uint64_t r0 = k * per, len = std::min(per, n - r0);
          gather_rows(*mp, type, rb, static_cast<uint64_t>(first) + r0, len, out + r0 * rb);
        });
      });
}

MappedProof prove_mapped(const ImportRow& row, const TensorRef& t, const std::string& path,
                         unsigned threads) {
  const MappedTensor& m = *row.mapped;
  const auto type = static_cast<GgmlType>(row.type_after);
  const uint64_t rb = mapped_row_bytes(m, type), per = rows_per_task(m);
  const auto data = t.data();
  if (data.size() != rb * m.rows)
    throw Error(path, tensor_object(row.name), t.data_start(),
                fmt::format("reading back: {} bytes where {} rows of {} were written", data.size(),
                            m.rows, rb));
  const bool packed = m.sources.front().packed != nullptr;
  std::mutex mu;
  uint64_t bad_row = UINT64_MAX, bad_col = 0;
  std::string bad_what;
  tbb::global_control limit(tbb::global_control::max_allowed_parallelism, std::max(1u, threads));
  const bool keys = m.move == MappedTensor::Move::kKvBKeys;
  const uint64_t scols = keys ? m.source_cols : m.cols;  // a source row's values
  tbb::parallel_for(uint64_t{0}, (m.rows + per - 1) / per, [&](uint64_t k) {
    const uint64_t r0 = k * per, r1 = std::min(m.rows, r0 + per);
    std::vector<float> got, want;
    for (uint64_t r = r0; r < r1;) {
      // A run of rows that are consecutive in one source too (the keys of kv_b: one row).
      size_t si = 0;
      uint64_t sr = 0, len = 1;
      if (!keys) {
        std::tie(si, sr) = m.source_row(r);
        while (r + len < r1 && m.source_row(r + len) == std::pair{si, sr + len}) ++len;
      }
      const MappedSource& s = m.sources[si];
      const uint64_t n = len * m.cols;
      const auto out = data.subspan(static_cast<size_t>(r * rb), static_cast<size_t>(len * rb));
      // The source element of value i of the run.
      const auto source_of = [&](uint64_t i) {
        return keys ? m.key_source(r, i) : (sr + i / m.cols) * m.cols + i % m.cols;
      };
      uint64_t i = n;  // the first value that differs
      if (packed) {
        got.resize(n);
        want.resize(n);
        dequantize(type, out, got);
        if (keys) {
          for (uint64_t j = 0; j < n; ++j)  // value by value: a transpose
            affine_values(*s.file, *s.packed, source_of(j), 1, {&want[j], 1});
        } else {
          affine_values(*s.file, *s.packed, sr * m.cols, n, want);
        }
        if (std::memcmp(got.data(), want.data(), 4 * n) != 0)
          for (i = 0; i < n; ++i)
            if (std::memcmp(&got[i], &want[i], 4) != 0 &&
                !(std::isnan(got[i]) && std::isnan(want[i])))
              break;
        if (!keys) release_affine_input(*s.file, *s.packed, sr * m.cols, n);
      } else {
        const uint64_t eb = rb / m.cols;
        const uint8_t* src = s.file->data(*s.plain).data();
        if (keys || std::memcmp(out.data(), src + sr * rb, n * eb) != 0)
          for (i = 0; i < n; ++i)
            if (std::memcmp(out.data() + i * eb, src + source_of(i) * eb, eb) != 0) break;
      }
      if (i < n) {
        const uint64_t e = source_of(i);
        const std::string& name = s.packed ? s.packed->name : s.plain->name;
        std::string what =
            packed ? fmt::format("decodes to {}, but its source, '{}' row {} column {}, is {}",
                                 float_with_bits(got[i]), escape_for_terminal(name), e / scols,
                                 e % scols, float_with_bits(want[i]))
                   : fmt::format("differs from its source, '{}' row {} column {}",
                                 escape_for_terminal(name), e / scols, e % scols);
        std::lock_guard lock(mu);
        const uint64_t br = r + i / m.cols, bc = i % m.cols;
        if (br < bad_row || (br == bad_row && bc < bad_col))
          bad_row = br, bad_col = bc, bad_what = std::move(what);
        return;
      }
      r += len;
    }
    // Pages handed back as they are compared: memory stays bounded by the slice.
    t.file->source().release(t.data_start() + r0 * rb, (r1 - r0) * rb);
  });
  if (bad_row != UINT64_MAX)
    throw Error(path, tensor_object(row.name), t.data_start() + bad_row * rb,
                fmt::format("reading back: row {}, column {} {}", bad_row, bad_col, bad_what));
  return packed ? MappedProof{m.rows * m.cols, 0} : MappedProof{0, rb * m.rows};
}

}  // namespace detail
}  // namespace gguf

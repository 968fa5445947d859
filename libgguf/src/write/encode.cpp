// Row-chunked, multi-threaded encoding behind the Producer interface.
#include "gguf/write/encode.h"

#include <fmt/format.h>
#include <tbb/global_control.h>
#include <tbb/parallel_for.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <memory>
#include <optional>

#include "gguf/base/error.h"
#include "gguf/base/escape.h"
#include "gguf/base/units.h"
#include "gguf/codecs/block_scales.h"
#include "gguf/codecs/codecs.h"
#include "gguf/format/file.h"

namespace gguf {
namespace {

// Encodes rows [first, first + count) into out, in parallel over row blocks; each block never
// crosses a matrix boundary so it has one importance vector.
void encode_rows(const RowEncoder& e, uint64_t row_bytes, int64_t first, int64_t count,
                 uint8_t* out) {
  const int64_t per_task =
      std::max<int64_t>(1, (int64_t{1} << 20) / std::max<int64_t>(1, e.n_per_row));
  std::vector<std::pair<int64_t, int64_t>> tasks;  // (first, count)
  for (int64_t r = first; r < first + count;) {
    int64_t n = std::min(per_task, first + count - r);
    if (e.rows_per_matrix > 0) n = std::min(n, e.rows_per_matrix - r % e.rows_per_matrix);
    tasks.emplace_back(r, n);
    r += n;
  }
  tbb::global_control limit(tbb::global_control::max_allowed_parallelism, std::max(1u, e.threads));
  tbb::parallel_for(size_t{0}, tasks.size(), [&](size_t k) {
    const auto [r, n] = tasks[k];
    std::vector<float> floats(static_cast<size_t>(n * e.n_per_row));
    e.rows(r, n, floats);
    std::span<const float> imp;
    if (e.importance) imp = e.importance(e.rows_per_matrix > 0 ? r / e.rows_per_matrix : 0);
    // Where a row starts in the input, for errors about it (unknown for producers without one).
    const auto row_at = [&e](uint64_t row) -> std::optional<uint64_t> {
      if (e.source_path.empty()) return std::nullopt;
      return e.source_offset + row * e.source_row_bytes;
    };
    try {
      quantize(
          e.type, floats, n, e.n_per_row, imp,
          {out + static_cast<uint64_t>(r - first) * row_bytes, static_cast<size_t>(n) * row_bytes});
    } catch (const Error& err) {
      // Encoders work row by row, so the first row that fails on its own is the culprit: name
      // it (and its byte), not the whole block of rows this task held.
      int64_t bad = -1;
      std::string message = err.message();
      std::vector<uint8_t> scratch(row_bytes);
      for (int64_t k = 0; k < n && bad < 0; ++k) {
        try {
          quantize(e.type, std::span<const float>(floats).subspan(k * e.n_per_row, e.n_per_row), 1,
                   e.n_per_row, imp, scratch);
        } catch (const Error& row_err) {
          bad = r + k;
          message = row_err.message();
        }
      }
      const int64_t row = bad >= 0 ? bad : r;
      throw Error(e.source_path, tensor_object(e.tensor_name), row_at(static_cast<uint64_t>(row)),
                  bad >= 0 ? fmt::format("row {}: {}", bad, message)
                           : fmt::format("rows {}-{}: {}", r, r + n - 1, message));
    }
    // Finite values whose encoding holds a non-finite block scale (values or importance
    // weights so large that the encoder's float sums overflow; ggml writes the same bytes):
    // llama.cpp would compute NaN with such a row, and its quantizer refuses it. Refused here
    // too, naming the row. Rows holding NaN or Inf themselves are encoded as ggml encodes them.
    const std::span<const uint8_t> written{out + static_cast<uint64_t>(r - first) * row_bytes,
                                           static_cast<size_t>(n) * row_bytes};
    if (const auto bad = first_nonfinite_scale(e.type, written)) {
      const uint64_t per_row = row_bytes / traits(e.type).type_size;
      const uint64_t k = bad->first / per_row;
      const auto row_values = std::span<const float>(floats).subspan(k * e.n_per_row, e.n_per_row);
      if (std::all_of(row_values.begin(), row_values.end(),
                      [](float v) { return std::isfinite(v); })) {
        const uint64_t row = static_cast<uint64_t>(r) + k;
        // mxfp4's exponent is floor(log2(max |x|)) - 2 + 127 as a byte: a block whose largest
        // magnitude lies in [2^-126, 2^-125) gets 0xff, E8M0's NaN. Every other type's scale
        // overflows only from values too large for its arithmetic.
        const std::string why =
            e.type == GgmlType::MXFP4
                ? "E8M0 0xff, the format's NaN, which ggml's exponent rule gives a block whose "
                  "largest magnitude lies in [2^-126, 2^-125); llama.cpp's quantizer refuses it"
                : fmt::format(
                      "the values{} are too large for its scale arithmetic, and llama.cpp "
                      "would compute NaN with it",
                      imp.empty() ? "" : " or their importance weights");
        throw Error(e.source_path, tensor_object(e.tensor_name), row_at(row),
                    fmt::format("row {}: its values are finite, but {} gives block {} a "
                                "non-finite scale ('{}': {})",
                                row, traits(e.type).name, bad->first % per_row, bad->second, why));
      }
    }
    // f16 and bf16 hold less range than f32: a finite value beyond it is written as +-inf by
    // ggml's conversion, and llama.cpp's quantizer refuses the file (its validation finds the
    // infinity). Refused here too, naming the row and the element.
    if (e.type == GgmlType::F16 || e.type == GgmlType::BF16) {
      const uint16_t inf = e.type == GgmlType::F16 ? 0x7C00 : 0x7F80;
      const auto half = [&written](size_t i) {
        uint16_t h;
        std::memcpy(&h, written.data() + 2 * i, 2);
        return static_cast<uint16_t>(h & 0x7FFF);
      };
      // A branch-free pass first (infinities are rare), then the one that names the element.
      bool any_inf = false;
      for (size_t i = 0; i < floats.size(); ++i) any_inf |= half(i) == inf;
      for (size_t i = 0; any_inf && i < floats.size(); ++i) {
        if (half(i) != inf || !std::isfinite(floats[i])) continue;
        const uint64_t row = static_cast<uint64_t>(r) + i / static_cast<uint64_t>(e.n_per_row);
        throw Error(e.source_path, tensor_object(e.tensor_name), row_at(row),
                    fmt::format("row {}: element {} is {}, beyond what {} can hold: it would be "
                                "written as {}inf, which llama.cpp's quantizer refuses",
                                row, i % static_cast<uint64_t>(e.n_per_row), floats[i],
                                traits(e.type).name, floats[i] < 0 ? "-" : ""));
      }
    }
    if (e.exact) {
      // Every value must read back as the same number (+0.0 and -0.0 alike, NaN and NaN alike).
      std::vector<float> back(floats.size());
      dequantize(e.type, written, back);
      for (size_t i = 0; i < back.size(); ++i) {
        if (back[i] == floats[i] || (std::isnan(back[i]) && std::isnan(floats[i]))) continue;
        const uint64_t row = static_cast<uint64_t>(r) + i / static_cast<uint64_t>(e.n_per_row);
        throw Error(
            e.source_path, tensor_object(e.tensor_name), row_at(row),
            fmt::format(
                "element {} (row {}) is {}, which {} cannot hold (it would read "
                "back as {})",
                row * static_cast<uint64_t>(e.n_per_row) + i % static_cast<uint64_t>(e.n_per_row),
                row, float_with_bits(floats[i]), traits(e.type).name, float_with_bits(back[i])));
      }
    }
    if (e.importance && e.importance_done)
      e.importance_done(e.rows_per_matrix > 0 ? r / e.rows_per_matrix : 0, n);
  });
}

}  // namespace

Producer make_row_producer(uint64_t row_bytes, int64_t nrows, std::string tensor_name,
                           std::function<void(int64_t first, int64_t count, uint8_t* out)> rows) {
  struct State {
    std::vector<uint8_t> carry;  // rows made but not yet handed out
    int64_t carry_first_row = 0;
  };
  auto st = std::make_shared<State>();
  // Aim for ~8 MiB of output per call, at least one row.
  const uint64_t rows_per_chunk =
      std::max<uint64_t>(1, (uint64_t{8} << 20) / std::max<uint64_t>(1, row_bytes));
  Producer p;
  p.chunk_bytes = rows_per_chunk * row_bytes;
  p.fill = [st, rows_per_chunk, rb = row_bytes, nrows, name = std::move(tensor_name),
            rows = std::move(rows)](uint64_t offset, std::span<uint8_t> out) {
    size_t written = 0;
    while (written < out.size()) {
      const uint64_t pos = offset + written;
      const uint64_t carry_begin = static_cast<uint64_t>(st->carry_first_row) * rb;
      if (pos < carry_begin || pos >= carry_begin + st->carry.size()) {
        // Make the chunk of rows that holds pos.
        const int64_t row = static_cast<int64_t>(pos / rb);
        if (row >= nrows)
          throw Error(fmt::format("read past the end of tensor '{}'", escape_for_terminal(name)));
        const int64_t count = std::min<int64_t>(static_cast<int64_t>(rows_per_chunk), nrows - row);
        st->carry.resize(static_cast<size_t>(count) * rb);
        st->carry_first_row = row;
        try {
          rows(row, count, st->carry.data());
        } catch (...) {
          st->carry.clear();  // never hand out rows that were not made
          throw;
        }
        continue;
      }
      const uint64_t skip = pos - carry_begin;
      const size_t n = std::min<size_t>(out.size() - written, st->carry.size() - skip);
      std::memcpy(out.data() + written, st->carry.data() + skip, n);
      written += n;
      // The tensor's last rows handed out: its buffer goes now, not when the whole plan has
      // been written (a model has hundreds of tensors; each kept buffer would be 8 MiB).
      if (skip + n == st->carry.size() &&
          carry_begin + st->carry.size() == static_cast<uint64_t>(nrows) * rb) {
        std::vector<uint8_t>().swap(st->carry);
        st->carry_first_row = 0;
      }
    }
  };
  return p;
}

Producer make_encoding_producer(RowEncoder enc) {
  const auto rb = row_bytes(enc.type, static_cast<uint64_t>(enc.n_per_row));
  if (!rb)
    throw Error({}, tensor_object(enc.tensor_name), std::nullopt,
                fmt::format("row length {} is not a multiple of the {} block size {}",
                            enc.n_per_row, traits(enc.type).name, traits(enc.type).block_size));
  auto e = std::make_shared<const RowEncoder>(std::move(enc));
  return make_row_producer(*rb, e->nrows, e->tensor_name,
                           [e, rb = *rb](int64_t first, int64_t count, uint8_t* out) {
                             encode_rows(*e, rb, first, count, out);
                           });
}

}  // namespace gguf

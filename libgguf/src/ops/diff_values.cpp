// The values diff: decodes row slices of two (or three) tensors on all cores and pools their
// error sums in row order, so results do not depend on the thread count.
#include <fmt/format.h>
#include <immintrin.h>
#include <tbb/enumerable_thread_specific.h>
#include <tbb/global_control.h>
#include <tbb/parallel_for.h>

#include <algorithm>
#include <array>
#include <boost/align/aligned_allocator.hpp>
#include <cassert>
#include <cmath>
#include <cstring>
#include <initializer_list>
#include <limits>
#include <numeric>
#include <vector>

#include "codecs/codec_kquants_common.h"
#include "codecs/codec_registry.h"
#include "gguf/base/error.h"
#include "gguf/base/threads.h"
#include "gguf/codecs/codecs.h"
#include "gguf/format/file.h"
#include "gguf/io/source.h"
#include "ops/diff_internal.h"
#include "ops/diff_sums.h"

namespace gguf::detail {

namespace {

// A work item covers about 1M elements (enough to amortise scheduling); within it, rows are
// decoded and measured in slices of about 4K elements (at least a row), so that the decoded
// floats of both sides are still in L1 when the sums read them (the sums are bound by cache
// bandwidth from L2). A row longer than an item is cut into items of whole blocks of every
// side's type, measured in slices of whole blocks. Memory: threads x 3 slice buffers.
constexpr uint64_t kChunkElements = uint64_t{1} << 20;
constexpr uint64_t kSliceElements = uint64_t{1} << 12;

struct Item {
  size_t job;
  uint64_t row0, rows;
  uint64_t col0 = 0, cols = 0;  // a piece of one row (rows == 1), or cols == 0: whole rows
};

struct Geometry {
  uint64_t ne0 = 1, ne1 = 1, nrows = 0;
};

Geometry geometry(const TensorInfo& t) {
  Geometry g;
  g.ne0 = t.shape.empty() ? 1 : static_cast<uint64_t>(t.shape[0]);
  g.ne1 = t.shape.size() > 1 ? static_cast<uint64_t>(t.shape[1]) : 1;
  g.nrows = g.ne0 ? t.n_elements / g.ne0 : 0;
  return g;
}

struct Buffers {
  Floats a, b, ref;
  std::vector<double> wide_a, wide_b, wide_ref;  // the double path (see wide_values)
  std::vector<uint8_t> raw[3];  // an item's payload bytes of each side, read (see stream())
};

// The decoder of a tensor and its row size, found once per tensor; decode_at then calls the
// decoder directly. The reader validated the payload sizes, and measure() only makes jobs of
// types that have a decoder.
struct Source {
  const TensorRef* t = nullptr;
  GgmlType type = GgmlType::F32;
  DecodeFn decode = nullptr;
  uint64_t row_bytes = 0;
  uint64_t block_size = 1, type_size = 0;

  // Where element `col` of row `row` starts (col a multiple of the block size).
  uint64_t offset(uint64_t row, uint64_t col) const {
    return row * row_bytes + col / block_size * type_size;
  }
  // The payload bytes [from, to), read into scratch (or in place from memory).
  const uint8_t* fetch(uint64_t from, uint64_t to, std::vector<uint8_t>& scratch) const {
    return t->file->source().stream(t->data_start() + from, to - from, scratch).data();
  }
};

Source source_of(const TensorRef* t, uint64_t ne0) {
  if (!t) return {};
  const auto type = static_cast<GgmlType>(t->info->type_id);
  const TypeTraits& tr = traits(type);
  return {t, type, decoder(type), row_bytes(type, ne0).value_or(0), tr.block_size, tr.type_size};
}

// f64, i32 and i64 hold values that float cannot (beyond its range, or differing below its
// precision): a job with such a side is measured in double, element by element.
bool wide_values(const std::array<Source, 3>& src) {
  for (const Source& s : src)
    if (s.t && (s.type == GgmlType::F64 || s.type == GgmlType::I32 || s.type == GgmlType::I64))
      return true;
  return false;
}

// Decodes n elements from p (whole blocks) into doubles: f64, i32 and i64 exactly (i64 as
// doubles do, exact up to 2^53), any other type through its float decoder into tmp.
void decode_wide(const Source& s, const uint8_t* p, uint64_t n, std::vector<double>& out,
                 Floats& tmp) {
  out.resize(n);
  const auto widen = [&]<typename T>(T) {
    for (uint64_t i = 0; i < n; ++i) {
      T v;
      std::memcpy(&v, p + i * sizeof(T), sizeof(T));
      out[i] = static_cast<double>(v);
    }
  };
  switch (s.type) {
    case GgmlType::F64:
      widen(double{});
      break;
    case GgmlType::I32:
      widen(int32_t{});
      break;
    case GgmlType::I64:
      widen(int64_t{});
      break;
    default:
      tmp.resize(n);
      s.decode(p, tmp.data(), static_cast<int64_t>(n));
      std::copy(tmp.begin(), tmp.end(), out.begin());
  }
}

// The least number of elements that is whole blocks of every side's type.
uint64_t common_block(const std::array<Source, 3>& src) {
  uint64_t unit = 1;
  for (const Source& s : src)
    if (s.t) unit = std::lcm(unit, s.block_size);
  return unit;
}

// Decodes n elements (whole blocks) from p into out.
void decode_at(const Source& s, const uint8_t* p, uint64_t n, Floats& out) {
  out.resize(n);
  s.decode(p, out.data(), static_cast<int64_t>(n));
}

// The sum of each slice of a job's weights (one per expert matrix, or one), for Sums::w.
std::vector<double> slice_sums(const ValueJob& job, uint64_t ne0) {
  std::vector<double> out;
  if (job.weights.empty() || ne0 == 0) return out;
  out.resize(job.weights.size() / ne0);
  for (size_t s = 0; s < out.size(); ++s)
    for (uint64_t c = 0; c < ne0; ++c) out[s] += job.weights[s * ne0 + c];
  return out;
}

// Calls run(r, n, slice) for the runs of rows [row0 + r, row0 + r + n) that share one slice of
// the job's importance weights (the rows of one expert matrix, or all rows for one slice).
template <typename Run>
void weight_runs(const ValueJob& job, const Geometry& g, uint64_t row0, uint64_t rows, Run run) {
  const uint64_t slices = job.weights.size() / g.ne0;
  for (uint64_t r = 0; r < rows;) {
    const uint64_t slice = slices == 1 ? 0 : (row0 + r) / g.ne1;
    const uint64_t n = slices == 1 ? rows - r : std::min(rows - r, (slice + 1) * g.ne1 - row0 - r);
    run(r, n, slice);
    r += n;
  }
}

// One side of a comparison in a slice: its decoded floats, or its q4_K rows (row_bytes
// apart) for the sum kernel to decode (see FusedQ4K).
struct SliceSide {
  const Floats* floats = nullptr;
  const uint8_t* q4_K = nullptr;
  uint64_t row_bytes = 0;

  SumSide at_row(uint64_t r, uint64_t ne0) const {
    return q4_K ? SumSide{nullptr, q4_K + r * row_bytes}
                : SumSide{floats->data() + r * ne0, nullptr};
  }
};

// Adds x against base for the slice's rows [row0, row0 + rows) to m, weighted when the job has
// weights (in runs of rows that share a slice of them).
void accumulate_rows(const SliceSide& base, const SliceSide& x, const ValueJob& job,
                     const std::vector<double>& w_sums, const Geometry& g, uint64_t row0,
                     uint64_t rows, ErrorMetrics& m) {
  if (job.weights.empty()) {
    detail::accumulate_rows(base.at_row(0, g.ne0), x.at_row(0, g.ne0), 1, rows * g.ne0, nullptr, 0,
                            m);
    return;
  }
  weight_runs(job, g, row0, rows, [&](uint64_t r, uint64_t n, uint64_t slice) {
    detail::accumulate_rows(base.at_row(r, g.ne0), x.at_row(r, g.ne0), n, g.ne0,
                            job.weights.data() + slice * g.ne0, w_sums[slice], m);
  });
}

// The double path of whole rows.
void accumulate_rows(const std::vector<double>& base, const std::vector<double>& x,
                     const ValueJob& job, const Geometry& g, uint64_t row0, uint64_t rows,
                     ErrorMetrics& m) {
  if (job.weights.empty()) {
    accumulate_checked(base.data(), x.data(), base.size(), nullptr, 1, m);
    return;
  }
  weight_runs(job, g, row0, rows, [&](uint64_t r, uint64_t n, uint64_t slice) {
    accumulate_checked(base.data() + r * g.ne0, x.data() + r * g.ne0, n * g.ne0,
                       job.weights.data() + slice * g.ne0, g.ne0, m);
  });
}

// A piece of one row (Item::cols > 0), in slices of whole blocks of every side; the weights
// are the row's slice of the job's, from the piece's first column.
void measure_piece(const Item& it, const ValueJob& job, const Geometry& g,
                   const std::array<Source, 3>& src, Buffers& buf,
                   std::array<ErrorMetrics, 3>& sums) {
  const uint64_t unit = common_block(src);
  const uint64_t step = std::max(unit, kSliceElements / unit * unit);
  const float* w = nullptr;
  if (!job.weights.empty()) {
    const uint64_t slices = job.weights.size() / g.ne0;
    w = job.weights.data() + (slices == 1 ? 0 : it.row0 / g.ne1) * g.ne0;
  }
  // The piece's bytes of each side, read once; `at` finds column c in them.
  const uint8_t* raw[3] = {};
  for (size_t side = 0; side < 3; ++side)
    if (const Source& x = src[side]; x.t)
      raw[side] =
          x.fetch(x.offset(it.row0, it.col0), x.offset(it.row0, it.col0 + it.cols), buf.raw[side]);
  const auto at = [&](size_t side, uint64_t c) {
    return raw[side] + (src[side].offset(it.row0, c) - src[side].offset(it.row0, it.col0));
  };
  const bool wide = wide_values(src);
  for (uint64_t c = it.col0; c < it.col0 + it.cols; c += step) {
    const uint64_t n = std::min(step, it.col0 + it.cols - c);
    const float* wc = w ? w + c : nullptr;
    if (wide) {
      decode_wide(src[0], at(0, c), n, buf.wide_a, buf.a);
      decode_wide(src[1], at(1, c), n, buf.wide_b, buf.a);
      if (job.measure_ab)
        accumulate_checked(buf.wide_a.data(), buf.wide_b.data(), n, wc, n, sums[0]);
      if (job.ref) {
        decode_wide(src[2], at(2, c), n, buf.wide_ref, buf.a);
        accumulate_checked(buf.wide_ref.data(), buf.wide_a.data(), n, wc, n, sums[1]);
        accumulate_checked(buf.wide_ref.data(), buf.wide_b.data(), n, wc, n, sums[2]);
      }
      continue;
    }
    decode_at(src[0], at(0, c), n, buf.a);
    decode_at(src[1], at(1, c), n, buf.b);
    if (job.measure_ab) accumulate(buf.a.data(), buf.b.data(), n, wc, sums[0]);
    if (job.ref) {
      decode_at(src[2], at(2, c), n, buf.ref);
      accumulate(buf.ref.data(), buf.a.data(), n, wc, sums[1]);
      accumulate(buf.ref.data(), buf.b.data(), n, wc, sums[2]);
    }
  }
}

}  // namespace

std::vector<ValueResult> measure_values(const std::vector<ValueJob>& jobs, unsigned threads,
                                        const std::function<void(uint64_t, uint64_t)>& progress) {
  std::vector<Item> items;
  std::vector<Geometry> geo(jobs.size());
  std::vector<std::array<Source, 3>> src(jobs.size());  // a, b, ref
  std::vector<std::vector<double>> w_sums(jobs.size());
  uint64_t total = 0;
  for (size_t j = 0; j < jobs.size(); ++j) {
    geo[j] = geometry(*jobs[j].a->info);
    w_sums[j] = slice_sums(jobs[j], geo[j].ne0);
    src[j] = {source_of(jobs[j].a, geo[j].ne0), source_of(jobs[j].b, geo[j].ne0),
              source_of(jobs[j].ref, geo[j].ne0)};
    const auto bytes = [](const TensorRef* t) { return t ? t->data().size() : 0; };
    total += bytes(jobs[j].a) + bytes(jobs[j].b) + bytes(jobs[j].ref);
    const uint64_t ne0 = geo[j].ne0;
    if (ne0 > kChunkElements) {
      // Pieces of whole blocks of every side (ne0 is a multiple of each block size).
      const uint64_t unit = common_block(src[j]);
      const uint64_t piece = std::max(unit, kChunkElements / unit * unit);
      for (uint64_t r = 0; r < geo[j].nrows; ++r)
        for (uint64_t c = 0; c < ne0; c += piece)
          items.push_back({j, r, 1, c, std::min(piece, ne0 - c)});
      continue;
    }
    const uint64_t per = std::max<uint64_t>(1, kChunkElements / std::max<uint64_t>(1, ne0));
    for (uint64_t r = 0; r < geo[j].nrows; r += per)
      items.push_back({j, r, std::min(per, geo[j].nrows - r)});
  }
  std::vector<ValueResult> out(jobs.size());
  for (size_t j = 0; j < jobs.size(); ++j) {
    if (jobs[j].measure_ab) out[j].ab.emplace().weighted = !jobs[j].weights.empty();
    if (jobs[j].ref) {
      out[j].ref_a.emplace().weighted = !jobs[j].weights.empty();
      out[j].ref_b.emplace().weighted = !jobs[j].weights.empty();
    }
  }
  std::atomic<uint64_t> done{0};
  threads = thread_count(threads);
  tbb::global_control limit(tbb::global_control::max_allowed_parallelism, threads);
  tbb::enumerable_thread_specific<Buffers> buffers;
  // Items run in windows; each item has its own partial sums, merged in row order after its
  // window, so results do not depend on scheduling and the partials stay a few MiB whatever
  // the model size.
  constexpr size_t kWindow = 4096;
  std::vector<std::array<ErrorMetrics, 3>> partial;
  for (size_t w0 = 0; w0 < items.size(); w0 += kWindow) {
    const size_t w1 = std::min(items.size(), w0 + kWindow);
    partial.assign(w1 - w0, {});
    tbb::parallel_for(w0, w1, [&](size_t k) {
      const Item& it = items[k];
      const ValueJob& job = jobs[it.job];
      const Geometry& g = geo[it.job];
      Buffers& buf = buffers.local();
      auto& sums = partial[k - w0];
      if (it.cols) {
        measure_piece(it, job, g, src[it.job], buf, sums);
        uint64_t bytes = 0;
        for (const Source& x : src[it.job])
          if (x.t) bytes += x.offset(it.row0, it.col0 + it.cols) - x.offset(it.row0, it.col0);
        const uint64_t d = done.fetch_add(bytes) + bytes;
        if (progress) progress(d, total);
        return;
      }
      // The item's rows of each side, read once (memory bounded by items).
      const uint8_t* raw[3] = {};
      for (size_t side = 0; side < 3; ++side)
        if (const Source& x = src[it.job][side]; x.t)
          raw[side] =
              x.fetch(it.row0 * x.row_bytes, (it.row0 + it.rows) * x.row_bytes, buf.raw[side]);
      const auto at = [&](size_t side, uint64_t r) {
        return raw[side] + (r - it.row0) * src[it.job][side].row_bytes;
      };
      const uint64_t per = std::max<uint64_t>(1, kSliceElements / std::max<uint64_t>(1, g.ne0));
      const bool wide = wide_values(src[it.job]);
      // q4_K sides are decoded by the sum kernel itself where it can (see FusedQ4K).
      bool fuse[3];
      for (size_t side = 0; side < 3; ++side)
        fuse[side] = src[it.job][side].type == GgmlType::Q4_K && fused_q4_K();
      Floats* const decoded[3] = {&buf.a, &buf.b, &buf.ref};
      for (uint64_t r = it.row0; r < it.row0 + it.rows; r += per) {
        const uint64_t n = std::min(per, it.row0 + it.rows - r);
        const auto& s = src[it.job];
        if (wide) {
          decode_wide(s[0], at(0, r), n * g.ne0, buf.wide_a, buf.a);
          decode_wide(s[1], at(1, r), n * g.ne0, buf.wide_b, buf.a);
          if (job.measure_ab) accumulate_rows(buf.wide_a, buf.wide_b, job, g, r, n, sums[0]);
          if (job.ref) {
            decode_wide(s[2], at(2, r), n * g.ne0, buf.wide_ref, buf.a);
            accumulate_rows(buf.wide_ref, buf.wide_a, job, g, r, n, sums[1]);
            accumulate_rows(buf.wide_ref, buf.wide_b, job, g, r, n, sums[2]);
          }
          continue;
        }
        SliceSide side[3];
        for (size_t k = 0; k < 3; ++k) {
          if (!s[k].t) continue;
          if (fuse[k]) {
            side[k] = {nullptr, at(k, r), s[k].row_bytes};
          } else {
            decode_at(s[k], at(k, r), n * g.ne0, *decoded[k]);
            side[k] = {decoded[k]};
          }
        }
        if (job.measure_ab)
          accumulate_rows(side[0], side[1], job, w_sums[it.job], g, r, n, sums[0]);
        if (job.ref) {
          accumulate_rows(side[2], side[0], job, w_sums[it.job], g, r, n, sums[1]);
          accumulate_rows(side[2], side[1], job, w_sums[it.job], g, r, n, sums[2]);
        }
      }
      uint64_t bytes = 0;
      for (const Source& x : src[it.job])
        if (x.t) bytes += it.rows * x.row_bytes;
      const uint64_t d = done.fetch_add(bytes) + bytes;
      if (progress) progress(d, total);
    });
    for (size_t k = w0; k < w1; ++k) {
      ValueResult& r = out[items[k].job];
      if (r.ab) r.ab->merge(partial[k - w0][0]);
      if (r.ref_a) r.ref_a->merge(partial[k - w0][1]);
      if (r.ref_b) r.ref_b->merge(partial[k - w0][2]);
    }
  }
  return out;
}

}  // namespace gguf::detail

// The planner's measurement: quantize and decode a deterministic sample of rows (the same rows
// for every choice) and weigh the squared error by the imatrix and the experts' routing counts.
#include <fmt/format.h>
#include <tbb/global_control.h>
#include <tbb/parallel_for.h>
#include <xxhash.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <mutex>

#include "gguf/base/error.h"
#include "gguf/codecs/codecs.h"
#include "gguf/ops/planner.h"

namespace gguf {
namespace {

// The geometry of a tensor as requant encodes it: rows of n_per_row, matrices of
// rows_per_matrix rows (experts of a 3-D tensor).
struct Geometry {
  int64_t n_per_row = 0, nrows = 0, rows_per_matrix = 1, n_mat = 1;
};

Geometry geometry_of(const TensorInfo& info) {
  Geometry g;
  g.n_per_row = info.shape.empty() ? 1 : info.shape[0];
  g.nrows = static_cast<int64_t>(info.n_elements) / std::max<int64_t>(1, g.n_per_row);
  g.rows_per_matrix = info.shape.size() > 1 ? std::max<int64_t>(1, info.shape[1]) : 1;
  g.n_mat = g.nrows / g.rows_per_matrix;
  return g;
}

// The rows measured, per matrix, ascending: all of them for a small tensor, else about
// `elements` elements spread evenly over the matrices (at least one row each), each matrix's
// rows strided from an offset drawn from the tensor's name.
std::vector<std::vector<int64_t>> sample_rows(const std::string& name, const Geometry& g,
                                              uint64_t elements) {
  std::vector<std::vector<int64_t>> out(static_cast<size_t>(g.n_mat));
  const uint64_t total = static_cast<uint64_t>(g.nrows) * static_cast<uint64_t>(g.n_per_row);
  const bool all = elements == 0 || total <= 2 * elements;
  const uint64_t per_mat_elems = elements / static_cast<uint64_t>(std::max<int64_t>(1, g.n_mat));
  const int64_t k =
      all ? g.rows_per_matrix
          : std::clamp<int64_t>(static_cast<int64_t>((per_mat_elems + g.n_per_row - 1) /
                                                     static_cast<uint64_t>(g.n_per_row)),
                                1, g.rows_per_matrix);
  const uint64_t seed = XXH3_64bits(name.data(), name.size());
  for (int64_t m = 0; m < g.n_mat; ++m) {
    auto& rows = out[static_cast<size_t>(m)];
    const int64_t base = m * g.rows_per_matrix;
    if (k == g.rows_per_matrix) {
      for (int64_t r = 0; r < k; ++r) rows.push_back(base + r);
      continue;
    }
    const double u =
        static_cast<double>(XXH3_64bits_withSeed(&m, sizeof m, seed) >> 11) * 0x1.0p-53;
    for (int64_t i = 0; i < k; ++i)
      rows.push_back(base + static_cast<int64_t>((static_cast<double>(i) + u) *
                                                 static_cast<double>(g.rows_per_matrix) /
                                                 static_cast<double>(k)));
  }
  return out;
}

// Decodes the given rows (ascending) of a tensor into out, reading runs of adjacent rows at
// once with pread (so a sample of a 100 GB model maps in no pages).
void decode_sample(const TensorRef& t, const Geometry& g, std::span<const int64_t> rows,
                   std::span<float> out, std::vector<uint8_t>& scratch) {
  const auto type = static_cast<GgmlType>(t.info->type_id);
  const uint64_t rb = *row_bytes(type, static_cast<uint64_t>(g.n_per_row));
  constexpr uint64_t kMaxRun = uint64_t{4} << 20;
  size_t i = 0;
  while (i < rows.size()) {
    size_t j = i + 1;
    while (j < rows.size() && rows[j] == rows[j - 1] + 1 && (j - i + 1) * rb <= kMaxRun) ++j;
    const auto bytes = t.file->source().stream(t.data_start() + static_cast<uint64_t>(rows[i]) * rb,
                                               (j - i) * rb, scratch);
    dequantize(type, bytes,
               out.subspan(i * static_cast<size_t>(g.n_per_row),
                           (j - i) * static_cast<size_t>(g.n_per_row)));
    i = j;
  }
}

// A candidate's encoder refused a piece of the sample (input on which ggml's encoder aborts):
// the error names the first row that fails on its own and where it lies in the input, as the
// write path's does, and the candidate being measured.
[[noreturn]] void throw_row_error(const TensorRef& t, const Geometry& g,
                                  std::span<const int64_t> piece, std::span<const float> ref,
                                  GgmlType type, std::span<const float> imp, const Error& err) {
  const auto n = static_cast<size_t>(g.n_per_row);
  std::vector<uint8_t> scratch(*row_bytes(type, n));
  for (size_t k = 0; k < piece.size(); ++k) {
    try {
      quantize(type, ref.subspan(k * n, n), 1, g.n_per_row, imp, scratch);
    } catch (const Error& row_err) {
      const uint64_t source_rb = *row_bytes(static_cast<GgmlType>(t.info->type_id), n);
      throw Error(
          t.file->path(), tensor_object(t.name()),
          t.data_start() + static_cast<uint64_t>(piece[k]) * source_rb,
          fmt::format("row {}: measuring {}: {}", piece[k], traits(type).name, row_err.message()));
    }
  }
  throw err;
}

// What one tensor's errors are weighed with.
struct Weights {
  std::vector<std::span<const float>> columns;  // per matrix: a_j, or empty for all 1
  std::vector<double> matrix;                   // per matrix: its routing weight
};

Weights weights_of(const std::string& name, const Geometry& g, const Imatrix* im) {
  Weights w;
  w.columns.resize(static_cast<size_t>(g.n_mat));
  w.matrix.assign(static_cast<size_t>(g.n_mat), 1.0);
  const ImatrixEntry* e = im ? im->find(name) : nullptr;
  if (!e) return w;
  for (int64_t m = 0; m < g.n_mat; ++m)
    w.columns[static_cast<size_t>(m)] = im->weights(name, g.n_per_row, g.n_mat, m);
  const auto counts = im->counts(name);
  if (static_cast<int64_t>(counts.size()) == g.n_mat && g.n_mat > 1) {
    double sum = 0;
    for (float c : counts) sum += c;
    // No expert routed at all says nothing about which matter: weigh them evenly.
    if (sum > 0)
      for (int64_t m = 0; m < g.n_mat; ++m)
        w.matrix[static_cast<size_t>(m)] = counts[static_cast<size_t>(m)];
  }
  return w;
}

// sum a_j (x - y)^2 and sum a_j y^2 over rows of n floats.
void weighted_sums(std::span<const float> a, std::span<const float> x, std::span<const float> y,
                   int64_t n, double& num, double& den) {
  double nsum = 0, dsum = 0;
  for (size_t i = 0; i < y.size(); ++i) {
    const double wj = a.empty() ? 1.0 : a[i % static_cast<size_t>(n)];
    const double d = static_cast<double>(x[i]) - static_cast<double>(y[i]);
    nsum += wj * d * d;
    dsum += wj * static_cast<double>(y[i]) * static_cast<double>(y[i]);
  }
  num += nsum;
  den += dsum;
}

// Measures one task's choices on its sample, a piece of rows of one matrix at a time (memory
// stays bounded whatever the sample), every choice on the same piece.
void measure_task(MeasureTask& task, const MeasureOptions& o, std::atomic<uint64_t>& done,
                  uint64_t total, std::mutex& progress_mu) {
  const TensorInfo& info = *task.tensor.info;
  const Geometry g = geometry_of(info);
  const auto rows = sample_rows(info.name, g, o.sample_elements);
  const Weights w = weights_of(info.name, g, o.imatrix);
  const auto source_type = static_cast<GgmlType>(info.type_id);
  std::vector<uint8_t> scratch, encoded;
  std::vector<float> ref, got;
  std::vector<double> num(task.choices.size(), 0.0), den(task.choices.size(), 0.0);
  const size_t piece_rows = std::max<size_t>(
      1, (size_t{1} << 18) / static_cast<size_t>(std::max<int64_t>(1, g.n_per_row)));
  for (size_t m = 0; m < rows.size(); ++m) {
    for (size_t first = 0; first < rows[m].size(); first += piece_rows) {
      const auto piece =
          std::span(rows[m]).subspan(first, std::min(piece_rows, rows[m].size() - first));
      const size_t n_floats = piece.size() * static_cast<size_t>(g.n_per_row);
      ref.resize(n_floats);
      decode_sample(task.tensor, g, piece, ref, scratch);
      double piece_den = 0, unused = 0;
      weighted_sums(w.columns[m], ref, ref, g.n_per_row, unused, piece_den);
      for (size_t k = 0; k < task.choices.size(); ++k) {
        const Choice& c = task.choices[k];
        den[k] += w.matrix[m] * piece_den;
        if (c.donor < 0 && c.type == source_type) continue;  // a copy: no error
        got.resize(n_floats);
        if (c.donor >= 0) {
          decode_sample(task.donor_tensors[static_cast<size_t>(c.donor)], g, piece, got, scratch);
        } else {
          const uint64_t rb = *row_bytes(c.type, static_cast<uint64_t>(g.n_per_row));
          encoded.resize(rb * piece.size());
          const std::span<const float> imp =
              uses_importance(c.type) ? w.columns[m] : std::span<const float>();
          try {
            quantize(c.type, ref, static_cast<int64_t>(piece.size()), g.n_per_row, imp, encoded);
          } catch (const Error& err) {
            throw_row_error(task.tensor, g, piece, ref, c.type, imp, err);
          }
          dequantize(c.type, encoded, got);
        }
        double piece_num = 0;
        weighted_sums(w.columns[m], got, ref, g.n_per_row, piece_num, unused);
        num[k] += w.matrix[m] * piece_num;
      }
      if (o.progress) {
        const uint64_t step = n_floats * task.choices.size();
        const uint64_t now = done.fetch_add(step) + step;
        std::lock_guard lock(progress_mu);
        o.progress(now, total);
      }
    }
  }
  // An all-zero tensor (or sample) has nothing to lose relative to its size.
  for (size_t k = 0; k < task.choices.size(); ++k)
    task.choices[k].error = den[k] > 0 ? num[k] / den[k] : num[k];
}

}  // namespace

void measure_choices(std::span<MeasureTask> tasks, const MeasureOptions& o) {
  uint64_t total = 0;
  for (const auto& t : tasks) {
    const Geometry g = geometry_of(*t.tensor.info);
    uint64_t sample = 0;
    for (const auto& r : sample_rows(t.tensor.name(), g, o.sample_elements))
      sample += r.size() * static_cast<uint64_t>(g.n_per_row);
    total += sample * t.choices.size();
  }
  std::atomic<uint64_t> done{0};
  std::mutex progress_mu;
  tbb::global_control limit(tbb::global_control::max_allowed_parallelism, std::max(1u, o.threads));
  // Largest first, so that one big tensor does not start last and run alone.
  std::vector<size_t> order(tasks.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) {
    return tasks[a].tensor.info->n_elements * tasks[a].choices.size() >
           tasks[b].tensor.info->n_elements * tasks[b].choices.size();
  });
  tbb::parallel_for(size_t{0}, order.size(), size_t{1}, [&](size_t k) {
    MeasureTask& task = tasks[order[k]];
    try {
      measure_task(task, o, done, total, progress_mu);
    } catch (const Error& e) {
      throw e.with_context(task.tensor.file->path(), tensor_object(task.tensor.name()));
    }
  });
}

ModelError model_error(const Model& reference, const Model& other, const Imatrix* imatrix,
                       unsigned threads) {
  const std::string arch = reference.architecture();
  std::vector<MeasureTask> tasks;
  for (const TensorRef& t : reference.tensors()) {
    if (!is_quantizable(*t.info, arch)) continue;
    const TensorRef* b = other.find(t.name());
    if (!b || b->info->shape != t.info->shape) continue;
    MeasureTask task{t, {}, {*b}};
    Choice c;
    c.type = static_cast<GgmlType>(b->info->type_id);
    c.donor = 0;
    task.choices.push_back(c);
    tasks.push_back(std::move(task));
  }
  MeasureOptions o;
  o.imatrix = imatrix;
  o.sample_elements = 0;
  o.threads = threads;
  measure_choices(tasks, o);
  ModelError r;
  for (const auto& t : tasks) {
    r.total += t.choices.front().error;
    r.tensors.emplace_back(t.tensor.name(), t.choices.front().error);
  }
  return r;
}

}  // namespace gguf

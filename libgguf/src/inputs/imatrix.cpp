// Reading importance matrices (legacy .dat and GGUF) with every length checked before use.
#include "gguf/inputs/imatrix.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>

#include "gguf/base/error.h"
#include "gguf/base/escape.h"
#include "gguf/format/file.h"
#include "gguf/io/source.h"
#include "io/cursor.h"

namespace gguf {

const ImatrixEntry* Imatrix::find(const std::string& tensor) const {
  const auto it = entries_.find(tensor);
  return it == entries_.end() ? nullptr : &it->second;
}

std::span<const float> Imatrix::weights(const std::string& tensor, int64_t n_per_row, int64_t n_mat,
                                        int64_t mat) const {
  const ImatrixEntry* e = find(tensor);
  if (!e) return {};
  const auto total = static_cast<int64_t>(e->values.size());
  // A GGUF entry says how its values are cut ([ne0, n_mat]; a legacy entry does not, ne0 0):
  // as many matrices as the tensor has experts, of its columns, or one matrix of them all (as
  // llama-imatrix converts a legacy file: a single count). Any other cut is a matrix made for
  // another tensor, though its total may fit (2 x 512 values for 4 experts x 256 columns).
  const bool cut_fits = e->ne0 == 0 || e->n_mat == 1 || (e->ne0 == n_per_row && e->n_mat == n_mat);
  if (!cut_fits && (total == n_per_row || (n_mat > 0 && total == n_mat * n_per_row)))
    throw Error(
        path_, tensor_object(tensor), e->at,
        fmt::format("importance entry holds {} matrices of {} columns; expected {}", e->n_mat,
                    e->ne0,
                    n_mat <= 1 ? fmt::format("1 of {}", n_per_row)
                               : fmt::format("{} of {} (one per expert), or 1 of {} or {}", n_mat,
                                             n_per_row, n_per_row, n_mat * n_per_row)));
  if (total == n_per_row) return e->values;  // one vector shared by all experts
  if (n_mat > 0 && total == n_mat * n_per_row)
    return std::span<const float>(e->values).subspan(static_cast<size_t>(mat * n_per_row),
                                                     static_cast<size_t>(n_per_row));
  if (n_mat <= 1)
    throw Error(path_, tensor_object(tensor), e->at,
                fmt::format("importance entry has {} values; expected {} (one per column)", total,
                            n_per_row));
  throw Error(path_, tensor_object(tensor), e->at,
              fmt::format("importance entry has {} values; expected {} (columns) or {} "
                          "({} experts x {} columns)",
                          total, n_per_row, n_mat * n_per_row, n_mat, n_per_row));
}

Imatrix Imatrix::load(const std::string& path) { return parse(open_file_source(path)); }

Imatrix Imatrix::parse(std::shared_ptr<const ByteSource> src) {
  Cursor c(*src);
  const uint32_t magic = c.left() >= 4 ? c.read<uint32_t>("magic") : 0;
  return magic == kMagic ? parse_gguf(std::move(src)) : parse_legacy(*src);
}

namespace {

// Importance values are means (or sums) of squared activations: a negative or non-finite one
// would turn into a negative or NaN weight inside the quantizers' searches.
void check_values(const std::string& path, const std::string& name, const float* v, size_t n,
                  uint64_t at, std::string_view what, std::string_view detail = {}) {
  for (size_t i = 0; i < n; ++i)
    if (!(v[i] >= 0.0f) || std::isinf(v[i]))
      throw Error(path, tensor_object(name), at + 4 * i,
                  fmt::format("{} [{}]{} is {}; importance values must be finite and not negative",
                              what, i, detail, v[i]));
}

}  // namespace

Imatrix Imatrix::parse_legacy(const ByteSource& src) {
  Cursor r(src);
  Imatrix m;
  m.legacy_ = true;
  m.path_ = src.name();
  const int32_t n = r.read<int32_t>("entry count");
  // Each entry needs at least 12 bytes (name length, ncall, nval).
  if (n < 0 || static_cast<uint64_t>(n) > r.left() / 12)
    r.fail(0, fmt::format("entry count {} is impossible for a file of {} bytes (not a "
                          "llama.cpp imatrix?)",
                          n, src.size()));
  for (int32_t i = 0; i < n; ++i) {
    r.set_object(fmt::format("entry #{}", i));
    const uint64_t at = r.pos();
    const int32_t len = r.read<int32_t>("name length");
    if (len <= 0) r.fail(at, fmt::format("name length {} is not positive", len));
    const auto nb = r.take(static_cast<uint64_t>(len), "name");
    std::string name(reinterpret_cast<const char*>(nb.data()), nb.size());
    r.set_object(tensor_object(name));
    const uint64_t ncall_at = r.pos();
    const int32_t ncall = r.read<int32_t>("ncall");
    if (ncall < 0) r.fail(ncall_at, fmt::format("ncall {} is negative", ncall));
    const uint64_t nval_at = r.pos();
    const int32_t nval = r.read<int32_t>("nval");
    if (nval <= 0) r.fail(nval_at, fmt::format("nval {} is not positive", nval));
    const uint64_t values_at = r.pos();
    const auto vb = r.take(static_cast<uint64_t>(nval) * 4, "values");
    ImatrixEntry e;
    e.at = nval_at;
    e.values.resize(static_cast<size_t>(nval));
    std::memcpy(e.values.data(), vb.data(), vb.size());
    // The value as stored: a sum over ncall calls (dividing keeps its sign and finiteness).
    check_values(r.file(), name, e.values.data(), e.values.size(), values_at, "value",
                 ncall > 1 ? fmt::format(" (a sum over {} calls)", ncall) : std::string());
    // Legacy files store sums over calls: the mean is what the quantizers weight by.
    if (ncall > 0)
      for (auto& v : e.values) v /= static_cast<float>(ncall);
    if (!m.entries_.emplace(name, std::move(e)).second) r.fail(at, "duplicate entry");
  }
  // The optional trailer: int32 last chunk, int32 dataset name length, the name.
  r.set_object({});
  if (r.left() > 0 && r.left() < 8)
    r.fail(r.pos(),
           fmt::format("{} byte{} after the last entry, too few for the trailer (int32 last "
                       "chunk, int32 dataset name length, the name): a truncated file?",
                       r.left(), r.left() == 1 ? "" : "s"));
  if (r.left() >= 8) {
    m.chunk_count_ = r.read<int32_t>("last chunk");
    const uint64_t at = r.pos();
    const int32_t len = r.read<int32_t>("dataset name length");
    if (len < 0 || static_cast<uint64_t>(len) > r.left())
      r.fail(at, fmt::format("dataset name length {} runs past end of file", len));
    const auto b = r.take(static_cast<uint64_t>(len), "dataset name");
    // An empty name means none (llama-imatrix writes one when it had no prompt file).
    if (len > 0) m.datasets_.emplace_back(reinterpret_cast<const char*>(b.data()), b.size());
  }
  return m;
}

Imatrix Imatrix::parse_gguf(std::shared_ptr<const ByteSource> src) {
  const std::string path = src->name();
  const auto f = GgufFile::parse(std::move(src));
  Imatrix m;
  m.path_ = path;
  if (const auto type = f->metadata().get_string("general.type"); type && *type != "imatrix")
    throw Error(
        path, key_object("general.type"), std::nullopt,
        fmt::format("general.type is '{}', expected 'imatrix'", escape_for_terminal(*type)));
  if (const Value* d = f->metadata().find("imatrix.datasets"); d && d->is_array())
    m.datasets_ = d->strings();
  if (const auto c = f->metadata().get_uint("imatrix.chunk_count")) {
    // llama.cpp's imatrix writes it as u32, and gguf-requant records it as u32 in its output
    // (quantize.imatrix.chunks_count): a larger count would be cut to its low 32 bits.
    if (*c > UINT32_MAX) {
      const auto& es = f->metadata().entries();
      const auto kv = std::find_if(
          es.begin(), es.end(), [](const KeyValue& e) { return e.key == "imatrix.chunk_count"; });
      throw Error(path, key_object("imatrix.chunk_count"), kv->value_offset(),
                  fmt::format("imatrix.chunk_count is {}, more than the u32 llama.cpp's imatrix "
                              "writes can hold ({})",
                              *c, UINT32_MAX));
    }
    m.chunk_count_ = static_cast<int64_t>(*c);
  }
  const auto floats = [&](const TensorInfo& t) {
    if (t.type_id != static_cast<uint32_t>(GgmlType::F32))
      throw Error(path, tensor_object(t.name), t.type_offset(),
                  fmt::format("type {} where f32 is required", type_name(t.type_id)));
    const auto b = f->tensor_data(t);
    std::vector<float> v(b.size() / 4);
    if (!v.empty()) std::memcpy(v.data(), b.data(), v.size() * 4);  // no null pointers to memcpy
    return v;
  };
  constexpr std::string_view kSum = ".in_sum2";
  for (const auto& t : f->tensors()) {
    if (t.name.size() <= kSum.size() || !t.name.ends_with(kSum)) continue;
    const std::string name = t.name.substr(0, t.name.size() - kSum.size());
    const TensorInfo* counts = f->find_tensor(name + ".counts");
    if (!counts)
      throw Error(path, tensor_object(t.name), t.info_offset,
                  fmt::format("no matching '{}.counts' tensor", escape_for_terminal(name)));
    ImatrixEntry e;
    e.at = t.dims_offset();
    e.ne0 = t.shape.empty() ? 1 : t.shape[0];
    e.n_mat = t.shape.size() > 1 ? t.shape[1] : 1;
    e.values = floats(t);
    // [ne0, n_mat] exactly: further dimensions of 1 only (the loops below index ne0 x n_mat).
    if (e.ne0 < 0 || e.n_mat < 0 ||
        (e.ne0 > 0 && static_cast<uint64_t>(e.n_mat) > e.values.size() / e.ne0) ||
        static_cast<uint64_t>(e.ne0 * e.n_mat) != e.values.size())
      throw Error(path, tensor_object(t.name), t.dims_offset(),
                  fmt::format("shape {} holds {} values, not {} columns x {} matrices",
                              shape_text(t.shape), e.values.size(), e.ne0, e.n_mat));
    check_values(path, t.name, e.values.data(), e.values.size(), f->data_start(t), "value");
    const std::vector<float> c = floats(*counts);
    check_values(path, counts->name, c.data(), c.size(), f->data_start(*counts), "count");
    if (static_cast<int64_t>(c.size()) != e.n_mat)
      throw Error(path, tensor_object(counts->name), counts->dims_offset(),
                  fmt::format("{} counts for {} matrices", c.size(), e.n_mat));
    e.counts = c;
    for (int64_t k = 0; k < e.n_mat; ++k) {
      float* v = e.values.data() + k * e.ne0;
      const float count = c[static_cast<size_t>(k)];
      // An expert never routed during calibration carries no information: weight it evenly.
      for (int64_t j = 0; j < e.ne0; ++j) {
        const float sum = v[j];
        v[j] = count > 0 ? sum / count : 1.0f;
        // A count below 1 can take a finite sum past FLT_MAX: an infinite weight makes the
        // i-quant searches write all-zero blocks without a word.
        if (std::isinf(v[j]))
          throw Error(path, tensor_object(t.name),
                      f->data_start(t) + 4 * static_cast<uint64_t>(k * e.ne0 + j),
                      fmt::format("value [{}] ({}) over its count [{}] ({}) overflows to inf; "
                                  "importance values must be finite",
                                  k * e.ne0 + j, sum, k, count));
      }
    }
    m.counts_.emplace(name, c);
    m.entries_.emplace(name, std::move(e));
  }
  // llama-quantize refuses counts without sums as it refuses sums without counts.
  constexpr std::string_view kCounts = ".counts";
  for (const auto& t : f->tensors())
    if (t.name.size() > kCounts.size() && t.name.ends_with(kCounts)) {
      const std::string name = t.name.substr(0, t.name.size() - kCounts.size());
      if (!f->find_tensor(name + std::string(kSum)))
        throw Error(path, tensor_object(t.name), t.info_offset,
                    fmt::format("no matching '{}.in_sum2' tensor", escape_for_terminal(name)));
    }
  // A GGUF without a single "<tensor>.in_sum2" is not an importance matrix (a model file
  // given by mistake would otherwise be taken as one that weights nothing).
  if (m.entries_.empty())
    throw Error(path, {}, std::nullopt,
                "no importance entries (tensors named '<tensor>.in_sum2' with '<tensor>.counts'); "
                "not an imatrix file?");
  return m;
}

std::span<const float> Imatrix::counts(const std::string& tensor) const {
  const auto it = counts_.find(tensor);
  return it == counts_.end() ? std::span<const float>() : std::span<const float>(it->second);
}

void add_column_energy(std::span<const float> rows, int64_t nrows, int64_t n_per_row,
                       std::span<float> energy) {
  for (int64_t r = 0; r < nrows; ++r)
    for (int64_t c = 0; c < n_per_row; ++c) {
      const float x = rows[static_cast<size_t>(r * n_per_row + c)];
      energy[static_cast<size_t>(c)] += x * x;
    }
}

std::vector<float> column_energy(std::span<const float> rows, int64_t nrows, int64_t n_per_row) {
  std::vector<float> w(static_cast<size_t>(n_per_row), 0.0f);
  add_column_energy(rows, nrows, n_per_row, w);
  return w;
}

}  // namespace gguf

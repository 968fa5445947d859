// Packed-affine safetensors → GGUF: the metadata checks, the plan, and the proof by reading
// the written file back.
#include <fmt/format.h>
#include <tbb/global_control.h>
#include <tbb/parallel_for.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <map>
#include <mutex>
#include <set>

#include "base/json_checked.h"
#include "gguf/base/error.h"
#include "gguf/base/escape.h"
#include "gguf/base/fp16.h"
#include "gguf/codecs/codecs.h"
#include "gguf/format/file.h"
#include "gguf/ops/affine.h"
#include "gguf/ops/check.h"
#include "gguf/ops/exact.h"
#include "gguf/ops/splice.h"
#include "gguf/write/encode.h"
#include "ops/import_internal.h"

namespace gguf {
namespace {

using json = nlohmann::json;

}  // namespace

namespace detail {

// The payload of a packed tensor as `type`, made in units of one block (q4_1, q5_1) or one
// element (f32), about 8 MiB at a time, split across threads.
Producer affine_producer(const SafetensorsFile& file, const PackedAffineTensor& t, GgmlType type,
                         unsigned threads) {
  const uint64_t unit = type == GgmlType::F32 ? 1 : 32;
  const uint64_t unit_bytes = type == GgmlType::F32 ? 4 : traits(type).type_size;
  const SafetensorsFile* f = &file;
  const PackedAffineTensor* pt = &t;
  return make_row_producer(
      unit_bytes, static_cast<int64_t>(t.rows * t.cols / unit), t.name,
      [f, pt, type, unit, unit_bytes, threads](int64_t first, int64_t count, uint8_t* out) {
        constexpr uint64_t kPerTask = uint64_t{1} << 18;  // elements
        const uint64_t units_per_task = std::max<uint64_t>(1, kPerTask / unit);
        const uint64_t tasks = (static_cast<uint64_t>(count) + units_per_task - 1) / units_per_task;
        tbb::global_control limit(tbb::global_control::max_allowed_parallelism,
                                  std::max(1u, threads));
        tbb::parallel_for(uint64_t{0}, tasks, [&](uint64_t k) {
          const uint64_t u0 = static_cast<uint64_t>(first) + k * units_per_task;
          const uint64_t n = std::min(units_per_task, static_cast<uint64_t>(first + count) - u0);
          affine_to_type(*f, *pt, type, u0 * unit, n * unit,
                         {out + (u0 - static_cast<uint64_t>(first)) * unit_bytes,
                          static_cast<size_t>(n * unit_bytes)});
        });
      });
}

std::vector<int64_t> ne_of(const std::vector<int64_t>& shape) {
  if (shape.empty()) return {1};
  return {shape.rbegin(), shape.rend()};
}

}  // namespace detail

std::optional<GgmlType> ggml_type_of_dtype(std::string_view dtype) {
  static const std::pair<std::string_view, GgmlType> kMap[] = {
      {"F32", GgmlType::F32}, {"F16", GgmlType::F16}, {"BF16", GgmlType::BF16},
      {"F64", GgmlType::F64}, {"I8", GgmlType::I8},   {"I16", GgmlType::I16},
      {"I32", GgmlType::I32}, {"I64", GgmlType::I64}};
  for (const auto& [name, type] : kMap)
    if (name == dtype) return type;
  return std::nullopt;
}

std::vector<PackedAffineTensor> packed_affine_tensors(const SafetensorsFile& file) {
  std::vector<PackedAffineTensor> out;
  const std::string* text = file.metadata_value("packed_affine");
  if (!text) return out;
  const std::string& path = file.path();
  const std::string key = key_object("packed_affine");
  const uint64_t at = file.entry_offset("packed_affine", 2);
  const json doc = detail::parse_json_checked(*text, path, key, at, 6, "packed_affine", false);
  if (!doc.is_object()) throw Error(path, key, at, "packed_affine is not a JSON object");
  const auto version = doc.find("version");
  if (version == doc.end() || !version->is_number_unsigned() || version->get<uint64_t>() != 1)
    throw Error(path, key, at,
                fmt::format("packed_affine version {}: only version 1 is known",
                            version == doc.end() ? "missing" : version->dump()));
  const auto tensors = doc.find("tensors");
  if (tensors == doc.end() || !tensors->is_object())
    throw Error(path, key, at, "packed_affine has no \"tensors\" object");
  for (auto item = tensors->begin(); item != tensors->end(); ++item) {
    // Named, not bound: lambdas below capture them (clang refuses captured bindings in C++20).
    const std::string& name = item.key();
    const json& e = item.value();
    const std::string obj = tensor_object(name);
    // A packed tensor has no entry of its own in the header: errors point at packed_affine.
    const uint64_t eat = at;
    const auto fail = [&](const std::string& why) { throw Error(path, obj, eat, why); };
    if (!e.is_object()) fail("its packed_affine entry is not an object");
    PackedAffineTensor t;
    t.name = name;
    t.entry_offset = eat;
    const auto uint_field = [&](const char* f, uint64_t lo, uint64_t hi) -> uint64_t {
      const auto it = e.find(f);
      if (it == e.end() || !it->is_number_unsigned() || it->get<uint64_t>() < lo ||
          it->get<uint64_t>() > hi)
        fail(fmt::format("\"{}\" must be an integer from {} to {}, found {}", f, lo, hi,
                         it == e.end() ? "nothing" : it->dump()));
      return it->get<uint64_t>();
    };
    t.bits = static_cast<unsigned>(uint_field("bits", 1, 8));
    t.group = uint_field("group", 1, uint64_t{1} << 40);
    const auto shape = e.find("shape");
    if (shape == e.end() || !shape->is_array() || shape->empty() || shape->size() > kMaxDims)
      fail(fmt::format("\"shape\" must be an array of 1 to {} positive integers", kMaxDims));
    uint64_t n = 1;
    for (const auto& d : *shape) {
      if (!d.is_number_unsigned() || d.get<uint64_t>() == 0 ||
          d.get<uint64_t>() > static_cast<uint64_t>(INT64_MAX) ||
          __builtin_mul_overflow(n, d.get<uint64_t>(), &n) || n > static_cast<uint64_t>(INT64_MAX))
        fail(fmt::format("\"shape\" {} must hold positive integers whose product is below 2^63",
                         shape->dump()));
      t.shape.push_back(static_cast<int64_t>(d.get<uint64_t>()));
    }
    t.cols = static_cast<uint64_t>(t.shape.back());
    t.rows = n / t.cols;
    if (t.cols % t.group != 0)
      fail(fmt::format("group {} does not divide the {} columns of shape {}", t.group, t.cols,
                       shape->dump()));
    const auto member = [&](const char* f, std::string_view dtype,
                            uint64_t bytes) -> const SafetensorsTensor* {
      const auto it = e.find(f);
      if (it == e.end() || !it->is_string()) fail(fmt::format("\"{}\" must name a tensor", f));
      const std::string& ref = it->get_ref<const std::string&>();
      const SafetensorsTensor* st = file.find(ref);
      if (!st)
        fail(fmt::format("its {} tensor '{}' is not in the file", f,
                         escape_for_terminal(ref.substr(0, 100))));
      if (st->dtype != dtype || st->end - st->begin != bytes)
        fail(fmt::format(
            "its {} tensor '{}' is {} {} ({} bytes); {}-bit codes of shape {} need "
            "{} {} bytes",
            f, escape_for_terminal(ref.substr(0, 100)), st->dtype, shape_text(st->shape),
            st->end - st->begin, t.bits, shape->dump(), bytes, dtype));
      return st;
    };
    uint64_t bits_total = 0;
    if (__builtin_mul_overflow(n, uint64_t{t.bits}, &bits_total))
      fail("its codes hold more than 2^64 bits");
    t.codes = member("codes", "U8", bits_total / 8 + (bits_total % 8 != 0));
    const uint64_t pairs = t.rows * (t.cols / t.group);  // no overflow: at most n
    t.scales = member("scales", "F16", 2 * pairs);
    t.mins = member("mins", "F16", 2 * pairs);
    // One pair per group of each row: the shape with the columns counted in groups, or the
    // rows flattened ([rows, cols / group]); a transposed layout would group the wrong values.
    std::vector<int64_t> by_group = t.shape;
    by_group.back() = static_cast<int64_t>(t.cols / t.group);
    const std::vector<int64_t> flat = {static_cast<int64_t>(t.rows), by_group.back()};
    for (const SafetensorsTensor* st : {t.scales, t.mins})
      if (st->shape != by_group && st->shape != flat)
        fail(fmt::format(
            "its {} tensor '{}' has shape {}; a scale and a min per group of {} "
            "columns make it {}",
            st == t.scales ? "scales" : "mins", escape_for_terminal(st->name.substr(0, 100)),
            shape_text(st->shape), t.group, shape_text(by_group)));
    if (const auto* plain = file.find(name)) {
      // Its own codes, scales or mins under its name, or another tensor: either way the output
      // would hold two tensors of one name.
      const char* role = plain == t.codes    ? "codes"
                         : plain == t.scales ? "scales"
                         : plain == t.mins   ? "mins"
                                             : nullptr;
      throw Error(path, obj, file.entry_offset(plain->name),
                  role ? fmt::format("its {} tensor has the packed tensor's own name; the "
                                     "imported tensor needs a name of its own (e.g. '{}.{}' for "
                                     "the {})",
                                     role, escape_for_terminal(name.substr(0, 100)), role, role)
                       : std::string("the file also holds a plain tensor of that name; a packed "
                                     "tensor needs a name of its own"));
    }
    out.push_back(std::move(t));
  }
  return out;
}

ImportResult import_safetensors(const SafetensorsFile& file, const ImportOptions& o) {
  ImportResult r;
  const std::string& path = file.path();
  if (o.type && o.type != GgmlType::Q4_1 && o.type != GgmlType::Q5_1 && o.type != GgmlType::F32)
    usage_error(fmt::format(
        "--type {}: a packed-affine import writes q4_1, q5_1 or f32, the types that hold its "
        "values exactly (leave --type out for the smallest exact one)",
        traits(*o.type).name));
  r.packed = packed_affine_tensors(file);
  r.inputs.push_back(path);
  r.bytes_before = file.source().size();
  if (o.base) {
    for (const auto& p : o.base->paths()) r.inputs.push_back(p);
    r.bytes_before += o.base->total_bytes();
  }

  // The import's tensors, in the order of their data: a packed tensor where its codes are.
  std::map<std::string, std::vector<const PackedAffineTensor*>, std::less<>> by_codes;
  std::set<std::string, std::less<>> consumed;
  for (const auto& t : r.packed) {
    by_codes[t.codes->name].push_back(&t);
    consumed.insert(t.codes->name);
    consumed.insert(t.scales->name);
    consumed.insert(t.mins->name);
  }
  std::vector<ImportRow> rows;
  std::vector<PlanTensor> tensors;
  for (const auto& st : file.tensors()) {
    if (const auto it = by_codes.find(st.name); it != by_codes.end()) {
      for (const PackedAffineTensor* t : it->second) {
        std::string why;
        const auto type = affine_target(*t, o.type, why);
        if (!type)
          throw Error(path, tensor_object(t->name), t->entry_offset,
                      fmt::format("cannot be moved exactly: {}", why));
        ImportRow row;
        row.name = t->name;
        row.source = path;
        row.type_after = traits(*type).id;
        row.shape = detail::ne_of(t->shape);
        row.bytes_before = (t->codes->end - t->codes->begin) + (t->scales->end - t->scales->begin) +
                           (t->mins->end - t->mins->begin);
        const uint64_t rb = *row_bytes(*type, t->cols);
        row.bytes_after = rb * t->rows;
        row.action = *type == GgmlType::F32 ? PlanAction::kDecode : PlanAction::kEncode;
        row.bits = t->bits;
        row.group = t->group;
        row.packed = t;
        tensors.push_back({t->name, row.type_after, row.shape, row.bytes_after,
                           detail::affine_producer(file, *t, *type, o.threads)});
        rows.push_back(std::move(row));
      }
      continue;
    }
    if (consumed.contains(st.name)) continue;
    const auto type = ggml_type_of_dtype(st.dtype);
    if (!type)
      throw Error(path, tensor_object(st.name), file.entry_offset(st.name),
                  fmt::format("dtype {} has no GGUF type (F32, F16, BF16, F64, I8, I16, I32 and "
                              "I64 carry over; packed tensors are listed in packed_affine)",
                              st.dtype));
    if (st.shape.size() > kMaxDims)
      throw Error(path, tensor_object(st.name), file.entry_offset(st.name),
                  fmt::format("shape {} has more than the {} dimensions of a GGUF tensor",
                              shape_text(st.shape), kMaxDims));
    ImportRow row;
    row.name = st.name;
    row.source = path;
    row.type_before = traits(*type).id;
    row.type_after = traits(*type).id;
    row.shape = detail::ne_of(st.shape);
    row.bytes_before = row.bytes_after = st.end - st.begin;
    row.action = PlanAction::kCopy;
    row.plain = &st;
    tensors.push_back({st.name, row.type_after, row.shape, row.bytes_after,
                       FileRange{file.source_ptr(), st.begin}});
    rows.push_back(std::move(row));
  }
  for (auto& row : rows) row.file = &file;
  detail::place_import(r, std::move(rows), std::move(tensors), o);
  if (const size_t other = file.metadata().size() - (file.metadata_value("packed_affine") ? 1 : 0);
      other > 0)
    r.notes.push_back(fmt::format(
        "{} __metadata__ key{} besides packed_affine {} not carried over (GGUF keys come from "
        "--base)",
        other, other == 1 ? "" : "s", other == 1 ? "is" : "are"));
  size_t n_packed = 0;
  for (const auto& row : r.rows) n_packed += row.packed != nullptr;
  if (n_packed == 0)
    r.notes.push_back("the file has no packed_affine tensors: its tensors are copied as they are");
  return r;
}

ImportProof prove_import(const ImportResult& result, const Model& out, unsigned threads,
                         std::span<const std::string> names, const SafetensorsFile* fallback) {
  const auto name_of = [&](const TensorRef& t) {
    return t.shard < names.size() ? names[t.shard] : t.file->path();
  };
  ImportProof proof;
  for (const ImportRow& row : result.rows) {
    if (row.from_base) continue;
    const TensorRef* t = out.find(row.name);
    const std::string obj = tensor_object(row.name);
    if (!t)
      throw Error(names.empty() ? out.path() : names[0], obj, std::nullopt,
                  "reading back: the tensor is missing");
    const std::string path = name_of(*t);
    if (t->info->type_id != row.type_after || t->info->shape != row.shape)
      throw Error(path, obj, t->info->info_offset,
                  fmt::format("reading back: {} {} where {} {} was written",
                              type_name(t->info->type_id), shape_text(t->info->shape),
                              type_name(row.type_after), shape_text(row.shape)));
    const auto data = t->data();
    ++proof.tensors;
    if (row.mapped) {
      const auto m = detail::prove_mapped(row, *t, path, threads);
      proof.values += m.values;
      proof.bytes += m.bytes;
      continue;
    }
    const SafetensorsFile& file = row.file ? *row.file : *fallback;
    if (row.plain) {
      // In 64 MiB pieces, both sides' pages handed back as they are compared.
      const auto src = file.data(*row.plain);
      if (src.size() != data.size())
        throw Error(path, obj, t->data_start(),
                    fmt::format("reading back: {} bytes where the safetensors tensor has {}",
                                data.size(), src.size()));
      constexpr uint64_t kPiece = uint64_t{64} << 20;
      for (uint64_t at = 0; at < src.size(); at += kPiece) {
        const uint64_t len = std::min<uint64_t>(kPiece, src.size() - at);
        if (std::memcmp(src.data() + at, data.data() + at, len) != 0) {
          uint64_t i = at;
          while (src[i] == data[i]) ++i;
          throw Error(path, obj, t->data_start() + i,
                      fmt::format("reading back: payload byte {} differs from the safetensors "
                                  "tensor's",
                                  i));
        }
        t->file->source().release(t->data_start() + at, len);
        file.source().release(row.plain->begin + at, len);
      }
      proof.bytes += src.size();
      continue;
    }
    // In pieces of 2^18 elements (whole blocks), on `threads` workers; the first difference
    // (lowest element) is reported.
    const PackedAffineTensor& p = *row.packed;
    const auto type = static_cast<GgmlType>(row.type_after);
    const uint64_t unit = type == GgmlType::F32 ? 1 : 32;
    const uint64_t unit_bytes = type == GgmlType::F32 ? 4 : traits(type).type_size;
    const uint64_t n = p.rows * p.cols;
    constexpr uint64_t kPiece = uint64_t{1} << 18;  // a multiple of 32
    const uint64_t pieces = (n + kPiece - 1) / kPiece;
    std::mutex mu;
    uint64_t bad = UINT64_MAX;
    float bad_got = 0, bad_want = 0;
    tbb::global_control limit(tbb::global_control::max_allowed_parallelism, std::max(1u, threads));
    tbb::parallel_for(uint64_t{0}, pieces, [&](uint64_t k) {
      const uint64_t e0 = k * kPiece, m = std::min(kPiece, n - e0);
      std::vector<float> got(m), want(m);
      dequantize(type,
                 data.subspan(static_cast<size_t>(e0 / unit * unit_bytes),
                              static_cast<size_t>(m / unit * unit_bytes)),
                 got);
      affine_values(file, p, e0, m, want);
      if (std::memcmp(got.data(), want.data(), m * 4) != 0) {
        // Bit for bit, except that NaN and NaN are alike: when both the product and the min
        // are NaN, which one's payload survives the addition is the compiler's choice of
        // operand order (ggml's, ours); both are NaN, as the source is.
        size_t i = 0;
        while (i < m && (std::memcmp(&got[i], &want[i], 4) == 0 ||
                         (std::isnan(got[i]) && std::isnan(want[i]))))
          ++i;
        if (i < m) {
          std::lock_guard lock(mu);
          if (e0 + i < bad) bad = e0 + i, bad_got = got[i], bad_want = want[i];
        }
      }
      t->file->source().release(t->data_start() + e0 / unit * unit_bytes, m / unit * unit_bytes);
      release_affine_input(file, p, e0, m);
    });
    if (bad != UINT64_MAX) {
      const uint64_t row_i = bad / p.cols, col = bad % p.cols;
      throw Error(
          path, obj, t->data_start() + bad / unit * unit_bytes,
          fmt::format("reading back: element {} (row {}, column {}) decodes to {}, but "
                      "the source's code * scale + min is {}",
                      bad, row_i, col, float_with_bits(bad_got), float_with_bits(bad_want)));
    }
    proof.values += n;
  }
  return proof;
}

ImportProof prove_import(const SafetensorsFile& file, const ImportResult& result,
                         const Model& written, unsigned threads,
                         std::span<const std::string> names) {
  return prove_import(result, written, threads, names, &file);
}

ImportProof prove_import(const SafetensorsFile& file, const ImportResult& result,
                         const std::string& output_path, unsigned threads) {
  return prove_import(result, Model::open(output_path), threads, {}, &file);
}

std::vector<uint8_t> pack_affine_safetensors(const std::vector<AffineSource>& tensors,
                                             unsigned bits, uint64_t group) {
  if (bits < 1 || bits > 8 || group == 0)
    usage_error(fmt::format("packed affine: bits {} (1-8), group {} (> 0)", bits, group));
  std::vector<SafetensorsEntry> entries;
  json packed = json::object();
  const unsigned top = (1u << bits) - 1;
  for (const AffineSource& t : tensors) {
    const uint64_t cols = t.ne.empty() ? 0 : static_cast<uint64_t>(t.ne[0]), n = t.values.size();
    if (cols == 0 || cols % group != 0 || n % cols != 0)
      usage_error(
          fmt::format("packed affine: tensor '{}' has rows of {} values, not a multiple "
                      "of the group {}",
                      escape_for_terminal(t.name.substr(0, 100)), cols, group));
    std::vector<uint8_t> codes((n * bits + 7) / 8, 0);
    std::vector<uint8_t> scales(2 * (n / group)), mins(2 * (n / group));
    for (uint64_t g = 0; g < n / group; ++g) {
      const auto first = t.values.begin() + static_cast<std::ptrdiff_t>(g * group);
      const auto [lo, hi] = std::minmax_element(first, first + static_cast<std::ptrdiff_t>(group));
      const uint16_t m = fp32_to_fp16(*lo), d = fp32_to_fp16((*hi - *lo) / static_cast<float>(top));
      std::memcpy(scales.data() + 2 * g, &d, 2);
      std::memcpy(mins.data() + 2 * g, &m, 2);
      const float fd = fp16_to_fp32(d), fm = fp16_to_fp32(m);
      for (uint64_t i = g * group; i < (g + 1) * group; ++i) {
        const float q = fd > 0 ? std::nearbyint((t.values[i] - fm) / fd) : 0.0f;
        // NaN (a NaN or infinite weight) and negatives become 0, the rest at most `top`.
        const auto code =
            static_cast<unsigned>(q >= 0.0f ? std::min(q, static_cast<float>(top)) : 0.0f);
        for (unsigned b = 0; b < bits; ++b)
          if ((code >> b) & 1u)
            codes[(i * bits + b) / 8] |= static_cast<uint8_t>(1u << ((i * bits + b) % 8));
      }
    }
    std::vector<int64_t> shape(t.ne.rbegin(), t.ne.rend()), pairs = shape;
    pairs.back() = static_cast<int64_t>(cols / group);
    entries.push_back({t.name + ".codes", "U8", {static_cast<int64_t>(codes.size())}, codes});
    entries.push_back({t.name + ".scales", "F16", pairs, scales});
    entries.push_back({t.name + ".mins", "F16", pairs, mins});
    packed[t.name] = {{"bits", bits},
                      {"group", group},
                      {"shape", shape},
                      {"codes", t.name + ".codes"},
                      {"scales", t.name + ".scales"},
                      {"mins", t.name + ".mins"}};
  }
  return serialize_safetensors(
      entries, {{"packed_affine", json{{"version", 1}, {"tensors", packed}}.dump()}});
}

}  // namespace gguf

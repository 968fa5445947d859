// check_model: what ggml's gguf reader and llama.cpp's loader demand of a file beyond what the
// lenient reader enforces: alignment, names, types and data layout per shard, and expert types;
// the key checks and the scan of tensor data for NaN/Inf are check_keys.cpp and check_scan.cpp.
#include "gguf/ops/check.h"

#include <fmt/format.h>

#include <algorithm>
#include <bit>
#include <map>
#include <numeric>
#include <unordered_map>
#include <unordered_set>

#include "gguf/base/escape.h"
#include "gguf/format/names.h"
#include "gguf/write/plan.h"
#include "ops/check_parts.h"

namespace gguf {

std::string format_problem(const Problem& p) {
  std::string out;
  if (!p.path.empty()) out += fmt::format("{}: ", escape_for_terminal(p.path));
  if (!p.object.empty()) out += fmt::format("{}: ", p.object);
  if (p.offset) out += fmt::format("at byte {}: ", *p.offset);
  return out + p.message;
}

namespace {

constexpr const char* kLayoutRule =
    "ggml requires each tensor's data to follow the previous one's in header order, padded to "
    "the alignment";

uint64_t pad(uint64_t x, uint64_t a) { return (x + a - 1) / a * a; }

class Checker {
 public:
  Checker(const Model& m, const CheckOptions& o) : model_(m), options_(o) {}

  std::vector<Problem> run() {
    for (const auto& shard : model_.shards()) check_shard(*shard);
    detail::check_keys(model_, out_);
    check_expert_types();
    if (options_.scan_data) detail::scan_data(model_, options_, scannable_, out_);
    return std::move(out_);
  }

 private:
  const Model& model_;
  const CheckOptions& options_;
  std::vector<Problem> out_;
  std::unordered_set<const TensorInfo*> scannable_;  // tensors whose data lies in their file

  void add(const GgufFile& f, std::string object, std::optional<uint64_t> at, std::string msg,
           const char* severity = "error") {
    out_.push_back({f.path(), std::move(object), at, std::move(msg), severity});
  }

  void check_shard(const GgufFile& f) {
    for (const KeyValue& kv : f.metadata().entries())
      if (const size_t nul = kv.key.find('\0'); nul != std::string::npos)
        add(f, key_object(kv.key), kv.offset,
            fmt::format("key contains a NUL byte; ggml's lookups by name see it as '{}', other "
                        "readers may not",
                        escape_for_terminal(kv.key.substr(0, nul))));
    check_read_as_one(f);
    check_alignment(f);
    bool layout_known = true;
    for (const TensorInfo& t : f.tensors()) layout_known &= check_tensor(f, t);
    // An unsized or out-of-bounds tensor (already reported) hides where the next should start.
    if (layout_known) check_layout(f);
  }

  // Keys and tensor names that ggml reads as one (they differ only after a NUL byte).
  void check_read_as_one(const GgufFile& f) {
    std::unordered_map<std::string_view, std::string_view> keys, names;
    for (const KeyValue& kv : f.metadata().entries())
      if (const auto [it, fresh] = keys.emplace(as_ggml_reads(kv.key), kv.key); !fresh)
        add(f, key_object(kv.key), kv.offset, read_as_one_message(true, it->second, kv.key));
    for (const TensorInfo& t : f.tensors())
      if (const auto [it, fresh] = names.emplace(as_ggml_reads(t.name), t.name); !fresh)
        add(f, tensor_object(t.name), t.info_offset,
            read_as_one_message(false, it->second, t.name));
  }

  // The entry of key (with its byte offset, which Metadata::find does not give) as ggml and
  // llama.cpp look it up, or nullptr.
  static const KeyValue* entry(const GgufFile& f, std::string_view key) {
    return find_key_as_ggml(f.metadata(), key);
  }

  void check_alignment(const GgufFile& f) {
    const KeyValue* kv = entry(f, "general.alignment");
    if (!kv) return;
    const std::string obj = key_object(kv->key);
    if (kv->value.type() != ValueType::kU32)
      return add(f, obj, kv->type_offset(),
                 fmt::format("general.alignment must be u32, found {}",
                             value_type_name(kv->value.type())));
    const uint64_t a = *kv->value.as_uint();
    if (a == 0 || !std::has_single_bit(a))
      return add(f, obj, kv->value_offset(),
                 fmt::format("general.alignment must be a non-zero power of two, found {}", a));
    if (a >= kGgmlTensorAlignment) return;
    for (const TensorInfo& t : f.tensors()) {
      if (f.data_start(t) % kGgmlTensorAlignment == 0) continue;
      return add(f, obj, kv->value_offset(),
                 fmt::format("general.alignment {} lets tensor data start off a 32-byte boundary "
                             "('{}' at byte {}); llama.cpp aborts when it memory-maps the file "
                             "(ggml's CPU backend asserts 32-byte alignment)",
                             a, escape_for_terminal(t.name), f.data_start(t)));
    }
  }

  // Returns false when the tensor's data range is unknown or outside the file.
  bool check_tensor(const GgufFile& f, const TensorInfo& t) {
    const std::string obj = tensor_object(t.name);
    if (t.name.empty())
      add(f, obj, t.info_offset,
          "empty tensor name; llama.cpp's loader refuses a tensor it does not know");
    if (t.name.size() > kMaxNameBytes)
      add(f, obj, t.info_offset,
          fmt::format("name is {} bytes; ggml requires fewer than {}", t.name.size(),
                      kMaxNameBytes + 1));
    if (const size_t nul = t.name.find('\0'); nul != std::string::npos)
      add(f, obj, t.info_offset,
          fmt::format("name contains a NUL byte at position {}; ggml would read it as '{}'", nul,
                      escape_for_terminal(t.name.substr(0, nul))));
    if (t.shape.size() > kMaxDims)
      add(f, obj, t.dims_offset(),
          fmt::format("n_dims {} exceeds ggml's maximum of {}", t.shape.size(), kMaxDims));
    const TypeTraits* tr = find_type(t.type_id);
    if (!tr)
      add(f, obj, t.type_offset(),
          fmt::format("unknown type id {}; ggml refuses ids outside 0-{}", t.type_id,
                      kTypeCount - 1));
    else if (tr->removed)
      add(f, obj, t.type_offset(),
          fmt::format("type id {} ({}) was removed from ggml, which refuses it", t.type_id,
                      tr->name));
    else if (is_activation_only(static_cast<GgmlType>(t.type_id)))
      // ggml's CPU backend has no matrix product or row lookup with these as weights: llama.cpp
      // loads such a file, then crashes (SIGSEGV, or a fatal error in get_rows).
      add(f, obj, t.type_offset(),
          fmt::format("type {} is one ggml uses only for activations: llama.cpp loads the file "
                      "but crashes computing with this tensor",
                      tr->name),
          "warning");
    if (!t.bytes) return false;
    // The reader refuses the next two; a partially parsed file may still carry them.
    if (t.offset % f.alignment() != 0) {
      add(f, obj, t.data_offset_field(),
          fmt::format("data offset {} is not a multiple of the alignment {}", t.offset,
                      f.alignment()));
      return false;
    }
    const uint64_t size = f.file_size();
    const uint64_t start = f.data_offset() + t.offset;
    if (t.offset > size || f.data_offset() > size - t.offset || *t.bytes > size - start) {
      add(f, obj, t.data_offset_field(),
          fmt::format("data runs past end of file (needs {} bytes at offset {}, file has {})",
                      *t.bytes, t.offset, size));
      return false;
    }
    scannable_.insert(&t);
    return true;
  }

  // ggml's rule is "offset == running sum of padded sizes in header order"; rather than report
  // the first mismatch and every later one, name the facts behind it: overlapping data, data
  // out of header order, and unused bytes. None of the three holds exactly when the rule does.
  void check_layout(const GgufFile& f) {
    const auto& ts = f.tensors();
    const uint64_t a = f.alignment();
    const auto end = [&](size_t i) { return ts[i].offset + *ts[i].bytes; };
    const auto desc = [&](size_t i) {
      return fmt::format("tensor '{}' (offset {}, {} bytes)", escape_for_terminal(ts[i].name),
                         ts[i].offset, *ts[i].bytes);
    };
    std::vector<size_t> by_offset(ts.size());
    std::iota(by_offset.begin(), by_offset.end(), size_t{0});
    std::stable_sort(by_offset.begin(), by_offset.end(),
                     [&](size_t x, size_t y) { return ts[x].offset < ts[y].offset; });

    // Overlaps, reported on the tensor that comes later in the header.
    std::vector<std::string> overlap(ts.size());
    for (auto& [i, what] : data_overlaps(f)) overlap[i] = std::move(what);
    std::vector<std::string> found(ts.size());
    for (size_t i = 0; i < ts.size(); ++i) {
      if (!overlap[i].empty()) {
        found[i] = overlap[i];
      } else if (i > 0 && ts[i].offset < pad(end(i - 1), a)) {
        found[i] = fmt::format("data at offset {} starts before the end of the previous {}",
                               ts[i].offset, desc(i - 1));
      }
    }
    // Unused bytes: the data section must be covered without holes up to the last tensor.
    uint64_t covered = 0;
    for (size_t i : by_offset) {
      if (ts[i].offset > covered && found[i].empty())
        found[i] = covered == 0 ? fmt::format(
                                      "{} unused bytes at the start of the data section before "
                                      "this tensor's data (offset {})",
                                      ts[i].offset, ts[i].offset)
                                : fmt::format(
                                      "{} unused bytes before this tensor's data (offset {}; the "
                                      "data before it ends at {} after padding)",
                                      ts[i].offset - covered, ts[i].offset, covered);
      covered = std::max(covered, pad(end(i), a));
    }
    for (size_t i = 0; i < ts.size(); ++i)
      if (!found[i].empty())
        add(f, tensor_object(ts[i].name), f.data_start(ts[i]),
            fmt::format("{}; {}", found[i], kLayoutRule));
  }

  // ds4 quantizes the routed gate and up experts of a layer to one type and its kernels rely
  // on it; a splice that mixes them loads in llama.cpp but not in ds4.
  void check_expert_types() {
    const std::string arch = model_.architecture();
    std::map<int, const TensorRef*> first;
    for (const TensorRef& t : model_.tensors()) {
      const TensorName tn = classify_tensor(t.name(), arch, ggml_dims(t.info->shape));
      if (!tn.layer || !tn.is_gate_or_up_weight()) continue;
      const auto [it, fresh] = first.emplace(*tn.layer, &t);
      if (fresh || it->second->info->type_id == t.info->type_id) continue;
      add(*t.file, tensor_object(t.name()), t.info->type_offset(),
          fmt::format("type {} differs from {} of tensor '{}' in layer {}; ds4 requires the "
                      "routed gate and up experts of a layer to share one type",
                      type_name(t.info->type_id), type_name(it->second->info->type_id),
                      escape_for_terminal(it->second->name()), *tn.layer),
          "warning");
    }
  }
};

}  // namespace

std::vector<std::pair<size_t, std::string>> data_overlaps(const GgufFile& f) {
  const auto& ts = f.tensors();
  const auto end = [&](size_t i) { return ts[i].offset + *ts[i].bytes; };
  const auto desc = [&](size_t i) {
    return fmt::format("tensor '{}' (offset {}, {} bytes)", escape_for_terminal(ts[i].name),
                       ts[i].offset, *ts[i].bytes);
  };
  std::vector<size_t> by_offset;
  for (size_t i = 0; i < ts.size(); ++i)
    if (ts[i].bytes && *ts[i].bytes > 0) by_offset.push_back(i);
  std::stable_sort(by_offset.begin(), by_offset.end(),
                   [&](size_t x, size_t y) { return ts[x].offset < ts[y].offset; });
  std::map<size_t, std::string> found;  // by the later tensor's index: header order
  size_t owner = SIZE_MAX;              // the tensor reaching furthest so far
  for (size_t i : by_offset) {
    if (owner != SIZE_MAX && ts[i].offset < end(owner)) {
      const size_t later = std::max(i, owner), earlier = std::min(i, owner);
      const bool same = ts[i].offset == ts[owner].offset && end(i) == end(owner);
      found[later] =
          fmt::format("{} {}", same ? "shares its data with" : "data overlaps", desc(earlier));
    }
    if (owner == SIZE_MAX || end(i) > end(owner)) owner = i;
  }
  return {found.begin(), found.end()};
}

std::optional<std::string> overlap_warning(const Model& m) {
  for (const auto& f : m.shards()) {
    const auto o = data_overlaps(*f);
    if (o.empty()) continue;
    return fmt::format(
        "'{}': tensor '{}' {}: ggml's reader refuses such a file; the output gives each tensor "
        "its own copy of the bytes{}",
        escape_for_terminal(f->path()), escape_for_terminal(f->tensors()[o.front().first].name),
        o.front().second,
        o.size() > 1 ? fmt::format(" ({} overlapping tensors in all)", o.size()) : "");
  }
  return std::nullopt;
}

std::vector<Problem> check_model(const Model& model, const CheckOptions& options) {
  return Checker(model, options).run();
}

}  // namespace gguf

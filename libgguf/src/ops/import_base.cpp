// Placing an import's tensors into the output: alone, or into the base GGUF (every import
// tensor replaces a base tensor of its name and shape; one with no place there is an error
// unless --append-unmatched), then the file type keys and the layout.
#include <fmt/format.h>

#include <map>

#include "gguf/base/error.h"
#include "gguf/base/escape.h"
#include "gguf/format/file.h"
#include "gguf/ops/check.h"
#include "gguf/ops/splice.h"
#include "ops/import_internal.h"
#include "write/serialize.h"

namespace gguf::detail {
namespace {

std::string from_text(const ImportRow& row) {
  return row.hf_name.empty() ? std::string()
                             : fmt::format("(from '{}') ", escape_for_terminal(row.hf_name));
}

}  // namespace

uint64_t source_offset(const ImportRow& row) {
  if (row.packed) return row.packed->entry_offset;
  const MappedSource* s = row.mapped ? &row.mapped->sources.front() : nullptr;
  if (s && s->packed) return s->packed->entry_offset;
  const SafetensorsTensor* plain = s ? s->plain : row.plain;
  const SafetensorsFile* file = s ? s->file : row.file;
  return file && plain ? file->entry_offset(plain->name) : 0;
}

std::string source_path(const ImportRow& row) {
  if (row.mapped) return row.mapped->sources.front().file->path();
  return row.file ? row.file->path() : row.source;
}

void place_import(ImportResult& r, std::vector<ImportRow> rows, std::vector<PlanTensor> tensors,
                  const ImportOptions& o) {
  for (const auto& row : rows) {
    if (row.name.empty())
      throw Error(source_path(row), tensor_object(row.name), source_offset(row),
                  "an empty name: a GGUF tensor needs one");
    if (row.name.size() > kMaxNameBytes)
      throw Error(source_path(row), tensor_object(row.name), source_offset(row),
                  fmt::format("its name is {} bytes long; GGUF tensor names (ggml's) are at most "
                              "{}",
                              row.name.size(), kMaxNameBytes));
  }
  if (!o.base) {
    r.plan.tensors = std::move(tensors);
    r.rows = std::move(rows);
  } else {
    for (const auto& kv : o.base->metadata().entries())
      if (!kv.key.starts_with("split.")) r.plan.metadata.append(kv);
    if (!o.alignment)
      if (auto note = raise_small_alignment(r.plan.metadata)) r.notes.push_back(std::move(*note));
    if (auto note = overlap_warning(*o.base)) r.notes.push_back(std::move(*note));
    std::map<std::string, size_t, std::less<>> index;
    for (size_t i = 0; i < rows.size(); ++i) index.emplace(rows[i].name, i);
    std::vector<bool> used(rows.size(), false);
    size_t retyped = 0;
    std::string first_retyped;
    for (const TensorRef& t : o.base->tensors()) {
      const TensorInfo& info = *t.info;
      if (const auto it = index.find(info.name); it != index.end()) {
        const size_t i = it->second;
        if (!same_shape(rows[i].shape, info.shape))
          throw Error(source_path(rows[i]), tensor_object(info.name), source_offset(rows[i]),
                      fmt::format("{}shape {} (ggml order) here, but {} in the base {}",
                                  from_text(rows[i]), shape_text(rows[i].shape),
                                  shape_text(info.shape), escape_for_terminal(o.base->path())));
        if (info.type_id != rows[i].type_after) {
          rows[i].type_base = type_name(info.type_id);
          if (retyped++ == 0)
            first_retyped = fmt::format("'{}' {} -> {}", escape_for_terminal(info.name),
                                        rows[i].type_base, type_name(rows[i].type_after));
        }
        used[i] = true;
        r.plan.tensors.push_back(std::move(tensors[i]));
        r.rows.push_back(std::move(rows[i]));
        continue;
      }
      info.require_ggml_name(t.file->path());
      ImportRow row;
      row.name = info.name;
      row.source = t.file->path();
      row.type_before = info.type_id;
      row.type_after = info.type_id;
      row.shape = info.shape;
      row.bytes_before = row.bytes_after = info.require_bytes(t.file->path());
      row.action = PlanAction::kCopy;
      row.from_base = true;
      r.plan.tensors.push_back({info.name, info.type_id, info.shape, row.bytes_after,
                                FileRange{t.file->source_ptr(), t.data_start()}});
      r.rows.push_back(std::move(row));
    }
    size_t extra = 0;
    std::string first_extra;
    for (size_t i = 0; i < rows.size(); ++i) {
      if (used[i]) continue;
      if (!o.append_unmatched)
        throw Error(source_path(rows[i]), tensor_object(rows[i].name), source_offset(rows[i]),
                    fmt::format("{}has no place in the base {}, which has no tensor of this "
                                "name (--append-unmatched appends such tensors after the "
                                "base's)",
                                from_text(rows[i]), escape_for_terminal(o.base->path())));
      if (extra++ == 0) first_extra = rows[i].name;
      r.plan.tensors.push_back(std::move(tensors[i]));
      r.rows.push_back(std::move(rows[i]));
    }
    if (retyped > 0)
      r.notes.push_back(fmt::format("{} tensor{} of the base replaced with another type ({}{})",
                                    retyped, retyped == 1 ? "" : "s",
                                    retyped == 1 ? "" : "the first: ", first_retyped));
    if (extra > 0)
      r.notes.push_back(fmt::format(
          "{} tensor{} of the import ({}'{}') {} not in the base: appended after its tensors",
          extra, extra == 1 ? "" : "s", extra == 1 ? "" : "the first: ",
          escape_for_terminal(first_extra), extra == 1 ? "is" : "are"));
  }
  if (r.rows.empty())
    throw Error(r.inputs.empty() ? std::string() : r.inputs.front(), {}, std::nullopt,
                "the file holds no tensor to import");
  if (o.alignment) set_alignment(r.plan.metadata, *o.alignment);
  set_file_type_keys(r.plan);
  std::vector<const PlanTensor*> ptrs;
  for (const auto& t : r.plan.tensors) ptrs.push_back(&t);
  r.bytes_after = layout_of(r.plan.metadata, ptrs).file_size;
}

}  // namespace gguf::detail

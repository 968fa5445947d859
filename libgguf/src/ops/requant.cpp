// requant(): the plan that re-encodes a model's tensors, in four steps: check the options,
// resolve each tensor's type and plan it (requant_rules.cpp, requant_tensor.cpp), refuse rules
// that decide nothing and runs that re-encode nothing, then the notes and provenance keys.
#include "gguf/ops/requant.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>

#include "gguf/base/error.h"
#include "gguf/base/escape.h"
#include "gguf/codecs/codecs.h"
#include "gguf/ops/check.h"
#include "gguf/ops/splice.h"
#include "ops/recipe_apply.h"
#include "ops/requant_parts.h"
#include "write/serialize.h"

namespace gguf {
namespace {

// Usage errors in the options, before any tensor is looked at.
void check_options(const RequantOptions& o) {
  if (!o.type && o.rules.empty())
    usage_error(
        "--type is required (the type to re-encode to), or a per-tensor type such as "
        "--tensor-type PATTERN=TYPE");
  if (o.type && !can_encode(*o.type))
    usage_error(fmt::format("--type {}: no encoder for this type yet", traits(*o.type).name));
  for (const TypeRule& rule : o.rules)
    if (rule.kind == TypeRule::Kind::kPattern && !rule.regex)
      throw Error(fmt::format("requant: {} has no compiled pattern (build it with "
                              "parse_tensor_type_rule)",
                              rule.describe()),
                  Error::Kind::kUsage);
  for (const TypeRule& rule : o.rules)
    if (rule.type && !can_encode(*rule.type))
      usage_error(
          fmt::format("{}: no encoder for {} yet", rule.describe(), traits(*rule.type).name));
  if (o.exact && o.imatrix)
    usage_error("--imatrix has no use with --exact: exact paths quantize nothing");
}

// How many tensors were selected, could be re-encoded, were, and were given no type.
struct Counts {
  size_t selected = 0, quantizable = 0, encoded = 0, untyped = 0;
};

// Writing a copy of the input is never what was asked for (e.g. --role norm, or a file
// already at the type): the error that says so.
Error nothing_to_reencode(const std::string& path, const RequantOptions& o, const Counts& n,
                          const std::vector<std::string>& unused_named) {
  const auto the = [](size_t count) {
    return count == 1 ? std::string("the selected tensor")
                      : fmt::format("the {} selected tensors", count);
  };
  std::string at;
  if (o.rules.empty())
    at = fmt::format("already {}", traits(*o.type).name);
  else if (n.untyped == n.quantizable)
    at = "given no type: no rule decides one, and there is no --type";
  else if (o.type || n.untyped == 0)
    at = n.quantizable == 1 ? "already at the type asked for, or kept"
                            : "already at the types asked for, or kept";
  else
    at = "already at the types asked for, kept, or given no type";
  const std::string notes =
      unused_named.empty() ? std::string() : fmt::format(" ({})", fmt::join(unused_named, "; "));
  return Error(path, {}, std::nullopt,
               n.quantizable == 0
                   ? fmt::format("nothing to re-encode: {} {} never re-encoded (1-D tensors, "
                                 "biases, norms, the router, integer tensors and the small weights "
                                 "llama-quantize keeps are always copied){}",
                                 the(n.selected), n.selected == 1 ? "is" : "are", notes)
                   : fmt::format("nothing to re-encode: {} that can be re-encoded {} {}{}",
                                 the(n.quantizable), n.quantizable == 1 ? "is" : "are", at, notes));
}

// The notes about how tensors were encoded: column energy in place of an imatrix, error added
// to quantized sources, activation-only targets.
void add_encode_notes(const detail::EncodeNotes& notes, std::vector<std::string>& out) {
  const auto& energy = notes.energy_types;
  if (!energy.empty())
    out.push_back(
        fmt::format("{} {} an importance matrix and none was given for some tensors: using each "
                    "matrix's column energy (sum of squared weights) instead",
                    detail::type_list(energy), energy.size() == 1 ? "needs" : "need"));
  if (notes.requantized)
    out.push_back("some tensors were already quantized: re-encoding them adds error");
  for (GgmlType t : notes.encoded_types)
    if (is_activation_only(t))
      out.push_back(fmt::format(
          "{} is a type ggml uses only for activations: llama.cpp loads this file but crashes "
          "computing with its {} tensors",
          traits(t).name, traits(t).name));
}

// Provenance: the quantize.imatrix.* keys say which matrix the file's tensors were encoded with:
// set only when an encoder of this run used it. Otherwise the input's keys (an earlier step's)
// stay, and a note says why the matrix given was not used.
void record_imatrix(const RequantOptions& o, const std::vector<GgmlType>& encoded_types,
                    RequantResult& r) {
  const bool imatrix_used = std::any_of(r.rows.begin(), r.rows.end(), [](const RequantRow& row) {
    return row.importance == ImportanceSource::kImatrix;
  });
  std::vector<GgmlType> weighted;
  for (GgmlType t : encoded_types)
    if (uses_importance(t)) weighted.push_back(t);
  if (o.imatrix && !imatrix_used)
    r.notes.push_back(fmt::format(
        "the importance matrix was not used ({}): the quantize.imatrix.* keys are left as they "
        "were",
        weighted.size() == encoded_types.size()
            ? std::string("it has no entry for any re-encoded tensor")
        : !weighted.empty()
            ? fmt::format("it has no entry for any tensor re-encoded to {}",
                          detail::type_list(weighted))
            : fmt::format("{} {} no importance weights", detail::type_list(encoded_types),
                          encoded_types.size() == 1 ? "takes" : "take")));
  if (!imatrix_used) return;
  for (const char* k : {"quantize.imatrix.file", "quantize.imatrix.dataset",
                        "quantize.imatrix.entries_count", "quantize.imatrix.chunks_count"})
    r.plan.metadata.erase(k);  // an earlier step's, which this run's matrix replaces
  r.plan.metadata.set("quantize.imatrix.file", Value::string(o.imatrix->path()));
  if (!o.imatrix->datasets().empty())
    r.plan.metadata.set("quantize.imatrix.dataset", Value::string(o.imatrix->datasets().front()));
  // As llama-quantize records them: its integer overrides are written as u32, and the chunk
  // count only when the matrix gives one (a legacy .dat without its trailer does not).
  r.plan.metadata.set("quantize.imatrix.entries_count",
                      Value::u32(static_cast<uint32_t>(o.imatrix->size())));
  if (o.imatrix->chunk_count() > 0)
    r.plan.metadata.set("quantize.imatrix.chunks_count",
                        Value::u32(static_cast<uint32_t>(o.imatrix->chunk_count())));
}

}  // namespace

RequantResult requant(const Model& model, const RequantOptions& o) {
  RequantResult r;
  r.exact = o.exact;
  const std::string arch = model.architecture();
  check_options(o);
  detail::RuleMatcher matcher(model, o.rules);
  std::vector<bool> selected(model.tensors().size(), false);
  for (size_t i : select_in(model, o.selector)) selected[i] = true;
  r.inputs = model.paths();
  r.bytes_before = model.total_bytes();
  r.plan.metadata = Metadata();
  for (const auto& kv : model.metadata().entries())
    if (!kv.key.starts_with("split.")) r.plan.metadata.append(kv);
  if (o.alignment)
    set_alignment(r.plan.metadata, *o.alignment);
  else if (auto note = raise_small_alignment(r.plan.metadata))
    r.notes.push_back(std::move(*note));
  if (auto note = overlap_warning(model)) r.notes.push_back(std::move(*note));
  detail::EncodeNotes notes;
  Counts n;
  for (size_t i = 0; i < model.tensors().size(); ++i) {
    const TensorRef& t = model.tensors()[i];
    const TensorInfo& info = *t.info;
    RequantRow row;
    row.name = info.name;
    row.source = t.file->path();
    row.type_before = row.type_after = info.type_id;
    row.bytes_before = row.bytes_after = info.require_bytes(t.file->path());
    info.require_ggml_name(t.file->path());
    PlanTensor pt{info.name, info.type_id, info.shape, row.bytes_before,
                  FileRange{t.file->source_ptr(), t.data_start()}};
    const bool quantizable = selected[i] && is_quantizable(info, arch);
    // The target: the first rule that matches, else --type; nullopt copies the tensor.
    const TypeRule* decided_by = selected[i] ? matcher.decide(info, quantizable) : nullptr;
    const std::optional<GgmlType> want = decided_by ? decided_by->type : o.type;
    if (decided_by) row.rule = decided_by->describe();
    if (decided_by && decided_by->kind == TypeRule::Kind::kRecipe) {
      const auto& there = decided_by->names->at(info.name);
      if (!same_shape(there, info.shape))
        throw Error(
            t.file->path(), tensor_object(info.name), info.dims_offset(),
            fmt::format("shape {} differs from its shape {} in '{}', whose recipe gives "
                        "it {}: a recipe applies to the same model's weights",
                        shape_text(info.shape), shape_text(there),
                        escape_for_terminal(decided_by->file), traits(*decided_by->type).name));
    }
    const bool encode = quantizable && want && info.type_id != traits(*want).id;
    n.selected += selected[i];
    n.quantizable += quantizable;
    n.encoded += encode;
    n.untyped += quantizable && !decided_by && !o.type;
    if (!encode)
      row.action = PlanAction::kCopy;
    else
      detail::plan_encode(t, *want, decided_by, o, row, pt, notes);
    r.plan.tensors.push_back(std::move(pt));
    r.rows.push_back(std::move(row));
  }
  std::vector<std::string> unused_named = matcher.report_unused(model.path(), !o.selector.empty());
  if (n.encoded == 0) throw nothing_to_reencode(model.path(), o, n, unused_named);
  for (auto& note : unused_named) r.notes.push_back(std::move(note));
  if (auto note = recipe_names_missing(model, o.rules)) r.notes.push_back(std::move(*note));
  add_encode_notes(notes, r.notes);
  // Truthful metadata: the file type of what holds most weights, and the quantization keys.
  set_file_type_keys(r.plan);
  set_recipe_keys(r.plan.metadata, o.rules);
  record_imatrix(o, notes.encoded_types, r);
  std::vector<const PlanTensor*> ptrs;
  for (const auto& t : r.plan.tensors) ptrs.push_back(&t);
  r.bytes_after = detail::layout_of(r.plan.metadata, ptrs).file_size;
  return r;
}

}  // namespace gguf

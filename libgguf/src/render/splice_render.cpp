// Renderers of a splice report: the plan table for people and the JSON document of the
// DESIGN.md contract for scripts. They read the report only.
#include <fmt/format.h>

#include <nlohmann/json.hpp>

#include "gguf/base/escape.h"
#include "gguf/base/table.h"
#include "gguf/base/units.h"
#include "gguf/format/json.h"
#include "gguf/format/types.h"
#include "gguf/ops/splice.h"
#include "render/metadata_changes_json.h"
#include "render/plan_render.h"

namespace gguf {
namespace {

std::string signed_bytes(uint64_t before, uint64_t after) {
  if (after == before) return "0 B";
  return fmt::format("{}{}", after > before ? '+' : '-',
                     human_bytes(after > before ? after - before : before - after));
}

std::string ftype_text(const std::optional<uint32_t>& f) {
  return f ? fmt::format("{}", *f) : std::string("absent");
}

nlohmann::json opt_json(const std::optional<uint32_t>& v) {
  return v ? nlohmann::json(*v) : nlohmann::json(nullptr);
}

}  // namespace

std::string render_splice_text(const SpliceResult& r, const WriteResult* written) {
  std::string out = r.edits ? render_metadata_changes_text(r.key_changes) : "";
  if (r.donor_paths.empty()) {
    out += fmt::format("no donor: {} {} copied from '{}'\n", r.rows.size(),
                       r.rows.size() == 1 ? "tensor" : "tensors", escape_for_terminal(r.base_path));
  } else {
    Table table({"tensor", "from", "type", "bytes delta"}, {true, true, true, false});
    for (const SpliceRow& row : r.rows) {
      if (row.action != PlanAction::kSplice) continue;
      table.add({escape_for_terminal(row.name), escape_for_terminal(row.source),
                 fmt::format("{} -> {}", type_name(row.type_before), type_name(row.type_after)),
                 signed_bytes(row.bytes_before, row.bytes_after)});
    }
    out += table.render();
    out += fmt::format("{} {} spliced from {} {}, {} copied from '{}'\n", r.spliced,
                       r.spliced == 1 ? "tensor" : "tensors", r.donor_paths.size(),
                       r.donor_paths.size() == 1 ? "donor" : "donors", r.rows.size() - r.spliced,
                       escape_for_terminal(r.base_path));
  }
  out += fmt::format("tensor data: {} -> {} ({})\n", human_bytes(r.tensor_bytes_before),
                     human_bytes(r.tensor_bytes_after),
                     signed_bytes(r.tensor_bytes_before, r.tensor_bytes_after));
  // What was written (a split set's shards each have a header), else what the plan says.
  const uint64_t after = detail::size_after(r.bytes_after, written);
  out += fmt::format("file size:   {} -> {} ({})\n", human_bytes(r.bytes_before),
                     human_bytes(after), signed_bytes(r.bytes_before, after));
  if (r.file_type_before || r.file_type_after)
    out += fmt::format("general.file_type: {} -> {}\n", ftype_text(r.file_type_before),
                       ftype_text(r.file_type_after));
  return out + detail::written_text(written, detail::WrittenForm::kSummary);
}

std::string render_splice_json(const SpliceResult& r, const WriteResult* written) {
  using nlohmann::json;
  json tensors = json::array();
  for (const SpliceRow& row : r.rows) tensors.push_back(detail::plan_row_json(row));
  json donors = json::array();
  for (size_t d = 0; d < r.donor_paths.size(); ++d)
    donors.push_back({{"path", utf8_or_escaped(r.donor_paths[d])},
                      {"selector", utf8_or_escaped(r.selectors[d])}});
  json warnings = json::array();
  for (const auto& w : r.warnings) warnings.push_back(message_for_json(w));
  json keys = json::array();
  for (const auto& m : r.key_changes) keys.push_back(detail::metadata_change_json(m));
  json doc = {
      {"tensors", std::move(tensors)},
      {"tensor_bytes_before", r.tensor_bytes_before},
      {"tensor_bytes_after", r.tensor_bytes_after},
      {"spliced", r.spliced},
      {"donors", std::move(donors)},
      {"file_type_before", opt_json(r.file_type_before)},
      {"file_type_after", opt_json(r.file_type_after)},
      {"warnings", std::move(warnings)},
      {"metadata", std::move(keys)},
  };
  detail::add_written_json(doc, r.bytes_before, r.bytes_after, written);
  return dump_json(doc, 2) + "\n";
}

}  // namespace gguf

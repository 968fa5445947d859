// Renderers of the requant report: a table of re-encoded tensors and the JSON contract.
#include <fmt/format.h>

#include <algorithm>
#include <nlohmann/json.hpp>

#include "gguf/base/escape.h"
#include "gguf/base/table.h"
#include "gguf/base/units.h"
#include "gguf/format/json.h"
#include "gguf/ops/exact.h"
#include "gguf/ops/requant.h"
#include "render/plan_render.h"

namespace gguf {
namespace {

std::string_view importance_name(ImportanceSource s) {
  switch (s) {
    case ImportanceSource::kImatrix:
      return "imatrix";
    case ImportanceSource::kColumnEnergy:
      return "column-energy";
    default:
      return "-";
  }
}

}  // namespace

std::string render_requant_text(const RequantResult& r, const WriteResult* written,
                                const ExactProof* exact) {
  // With per-tensor types, a column says which rule gave each tensor its type.
  const bool rules = std::any_of(r.rows.begin(), r.rows.end(),
                                 [](const RequantRow& row) { return !row.rule.empty(); });
  std::vector<std::string> header = {"tensor",      "type",       "bytes before",
                                     "bytes after", "importance", "note"};
  std::vector<bool> left = {true, true, false, false, true, true};
  if (rules) header.insert(header.begin() + 2, "rule"), left.insert(left.begin() + 2, true);
  Table t(header, left);
  size_t copied = 0;
  for (const auto& row : r.rows) {
    if (row.action == PlanAction::kCopy) {
      ++copied;
      continue;
    }
    std::vector<std::string> cells = {
        escape_for_terminal(row.name),
        fmt::format("{} -> {}", type_name(row.type_before), type_name(row.type_after)),
        human_bytes(row.bytes_before),
        human_bytes(row.bytes_after),
        std::string(importance_name(row.importance)),
        row.requantized ? "requantized" : ""};
    if (rules) cells.insert(cells.begin() + 2, row.rule.empty() ? "--type" : row.rule);
    t.add(std::move(cells));
  }
  std::string out = t.render();
  const size_t encoded = r.rows.size() - copied;
  out += fmt::format("\n{} tensor{} re-encoded, {} copied byte for byte\n", encoded,
                     encoded == 1 ? "" : "s", copied);
  out += detail::sizes_and_written_text(r.bytes_before, r.bytes_after, written);
  if (exact)
    out +=
        fmt::format("exact: {} re-encoded tensor{} read back: {} values equal to the source's{}\n",
                    exact->tensors, exact->tensors == 1 ? "" : "s", with_commas(exact->values),
                    exact->zeros_sign_changed == 0
                        ? std::string()
                        : fmt::format(" ({} zeros lost their sign: q4_1 and q5_1 cannot make -0.0)",
                                      with_commas(exact->zeros_sign_changed)));
  else if (r.exact && written)
    out += "exact: not proven (--no-verify): the output was not read back\n";
  return out;
}

std::string render_requant_json(const RequantResult& r, const WriteResult* written,
                                const ExactProof* exact) {
  using nlohmann::json;
  json doc;
  doc["tensors"] = json::array();
  for (const auto& row : r.rows) {
    json j = detail::plan_row_json(row);
    j["lossy"] = row.lossy;
    j["requantized"] = row.requantized;
    j["importance"] = row.importance == ImportanceSource::kNone
                          ? json(nullptr)
                          : json(importance_name(row.importance));
    j["rule"] = row.rule.empty() ? json(nullptr) : json(message_for_json(row.rule));
    doc["tensors"].push_back(std::move(j));
  }
  detail::add_written_json(doc, r.bytes_before, r.bytes_after, written);
  doc["exact"] = exact ? json{{"tensors", exact->tensors},
                              {"values", exact->values},
                              {"zeros_sign_changed", exact->zeros_sign_changed}}
                       : json(nullptr);
  doc["notes"] = json::array();
  for (const auto& n : r.notes) doc["notes"].push_back(message_for_json(n));
  return dump_json(doc, 2) + "\n";
}

}  // namespace gguf

// Renderers of the import report: a table of imported tensors and the JSON contract.
#include <fmt/format.h>

#include <nlohmann/json.hpp>

#include "gguf/base/escape.h"
#include "gguf/base/table.h"
#include "gguf/base/units.h"
#include "gguf/format/file.h"
#include "gguf/format/json.h"
#include "gguf/ops/affine.h"
#include "render/plan_render.h"

namespace gguf {
namespace {

std::string before_text(const ImportRow& row) {
  return row.affine() ? fmt::format("u{} affine g{}", row.bits, row.group)
                      : std::string(type_name(row.type_before));
}

}  // namespace

std::string render_import_text(const ImportResult& r, const WriteResult* written,
                               const ImportProof* proof) {
  // A Hugging Face checkpoint's rows say where each tensor comes from and how its rows move.
  const bool hf = !r.architecture.empty();
  Table t = hf ? Table({"source tensor", "tensor", "transform", "from", "to", "shape",
                        "bytes before", "bytes after"},
                       {true, true, true, true, true, true, false, false})
               : Table({"tensor", "from", "to", "shape", "bytes before", "bytes after"},
                       {true, true, true, true, false, false});
  size_t imported = 0, packed = 0, base = 0;
  for (const auto& row : r.rows) {
    if (row.from_base) {
      ++base;
      continue;
    }
    ++imported;
    packed += row.packed != nullptr ||
              (row.mapped != nullptr && row.mapped->sources.front().packed != nullptr);
    std::vector<std::string> cells = {escape_for_terminal(row.name), before_text(row),
                                      type_name(row.type_after),     shape_text(row.shape),
                                      human_bytes(row.bytes_before), human_bytes(row.bytes_after)};
    if (hf) {
      cells.insert(cells.begin(), escape_for_terminal(row.hf_name.empty() ? "-" : row.hf_name));
      cells.insert(cells.begin() + 2, row.transform.empty() ? "-" : row.transform);
    }
    t.add(cells);
  }
  std::string out = t.render();
  out += fmt::format(
      "\n{} tensor{} imported ({} packed-affine, moved exactly; {} copied byte for "
      "byte)",
      imported, imported == 1 ? "" : "s", packed, imported - packed);
  if (base > 0) out += fmt::format(", {} kept from the base", base);
  out += "\n";
  out += detail::sizes_and_written_text(r.bytes_before, r.bytes_after, written);
  if (written && !proof) out += "exact: not proven (--no-verify): the output was not read back\n";
  if (proof)
    out += fmt::format(
        "exact: {} imported tensor{} read back: {} values decode to the same float bits as code "
        "* scale + min{}\n",
        proof->tensors, proof->tensors == 1 ? "" : "s", with_commas(proof->values),
        proof->bytes == 0
            ? std::string()
            : fmt::format(", {} bytes of plain tensors equal", with_commas(proof->bytes)));
  return out;
}

std::string render_import_json(const ImportResult& r, const WriteResult* written,
                               const ImportProof* proof) {
  using nlohmann::json;
  json doc;
  doc["tensors"] = json::array();
  for (const auto& row : r.rows) {
    json j = detail::plan_row_json(row);
    // A packed tensor had no ggml type: null (its bits and group say what it was).
    if (row.affine()) j["type_before"] = nullptr;
    j["shape"] = row.shape;
    j["lossy"] = false;
    j["requantized"] = false;
    j["importance"] = nullptr;  // as every gguf-requant report: an import weights nothing
    j["rule"] = nullptr;
    if (row.affine()) {
      j["bits"] = row.bits;
      j["group"] = row.group;
    }
    if (!row.hf_name.empty()) {
      j["hf_name"] = utf8_or_escaped(row.hf_name);
      j["transform"] = row.transform;
    }
    if (!row.type_base.empty()) j["type_base"] = row.type_base;
    doc["tensors"].push_back(std::move(j));
  }
  detail::add_written_json(doc, r.bytes_before, r.bytes_after, written);
  doc["exact"] =
      proof ? json{{"tensors", proof->tensors}, {"values", proof->values}, {"bytes", proof->bytes}}
            : json(nullptr);
  doc["notes"] = json::array();
  for (const auto& n : r.notes) doc["notes"].push_back(message_for_json(n));
  return dump_json(doc, 2) + "\n";
}

}  // namespace gguf

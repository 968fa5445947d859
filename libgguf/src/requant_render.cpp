// Renderers of the requant report: a table of re-encoded tensors and the JSON contract.
#include <fmt/format.h>

#include <nlohmann/json.hpp>

#include "gguf/cli.h"
#include "gguf/escape.h"
#include "gguf/exact.h"
#include "gguf/requant.h"
#include "gguf/table.h"

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

uint64_t after_bytes(const RequantResult& r, const WriteResult* w) {
  return w ? w->bytes : r.bytes_after;
}

}  // namespace

std::string render_requant_text(const RequantResult& r, const WriteResult* written,
                                const ExactProof* exact) {
  Table t({"tensor", "type", "bytes before", "bytes after", "importance", "note"},
          {true, true, false, false, true, true});
  size_t copied = 0;
  for (const auto& row : r.rows) {
    if (row.action == "copy") {
      ++copied;
      continue;
    }
    t.add({escape_for_terminal(row.name),
           fmt::format("{} -> {}", type_name(row.type_before), type_name(row.type_after)),
           cli::human_bytes(row.bytes_before), cli::human_bytes(row.bytes_after),
           std::string(importance_name(row.importance)), row.lossy_reencode ? "re-encoded" : ""});
  }
  std::string out = t.render();
  const size_t encoded = r.rows.size() - copied;
  out += fmt::format("\n{} tensor{} re-encoded, {} copied byte for byte\n", encoded,
                     encoded == 1 ? "" : "s", copied);
  out += fmt::format("size: {} -> {}\n", cli::human_bytes(r.bytes_before),
                     cli::human_bytes(after_bytes(r, written)));
  if (written) {
    for (const auto& p : written->paths) out += fmt::format("wrote {}\n", escape_for_terminal(p));
    if (written->verified) out += "verified: every tensor read back and hashed\n";
  }
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
  for (const auto& row : r.rows)
    doc["tensors"].push_back({{"name", utf8_or_escaped(row.name)},
                              {"source", utf8_or_escaped(row.source)},
                              {"type_before", type_name(row.type_before)},
                              {"type_after", type_name(row.type_after)},
                              {"bytes_before", row.bytes_before},
                              {"bytes_after", row.bytes_after},
                              {"action", row.action},
                              {"lossy", row.lossy_reencode},
                              {"importance", row.importance == ImportanceSource::kNone
                                                 ? json(nullptr)
                                                 : json(importance_name(row.importance))}});
  doc["bytes_before"] = r.bytes_before;
  doc["bytes_after"] = after_bytes(r, written);
  doc["output"] = written ? json(utf8_or_escaped(written->paths.front())) : json(nullptr);
  if (written && written->paths.size() > 1) {
    doc["outputs"] = json::array();
    for (const auto& p : written->paths) doc["outputs"].push_back(utf8_or_escaped(p));
  }
  doc["verified"] = written ? written->verified : false;
  doc["exact"] = exact ? json{{"tensors", exact->tensors},
                              {"values", exact->values},
                              {"zeros_sign_changed", exact->zeros_sign_changed}}
                       : json(nullptr);
  doc["notes"] = r.notes;
  return doc.dump(2) + "\n";
}

}  // namespace gguf

// Renderers of the inspect report: aligned text tables and one JSON document.
#include <fmt/format.h>

#include <nlohmann/json.hpp>

#include "gguf/base/escape.h"
#include "gguf/base/table.h"
#include "gguf/base/units.h"
#include "gguf/format/hash.h"
#include "gguf/format/json.h"
#include "gguf/ops/inspect.h"

namespace gguf {
namespace {

std::string bpw_text(uint64_t bytes, uint64_t params) {
  return params
             ? fmt::format("{:.4f}", static_cast<double>(bytes) * 8.0 / static_cast<double>(params))
             : "-";
}

std::string share_text(uint64_t part, uint64_t whole) {
  return whole ? fmt::format("{:.2f}%",
                             100.0 * static_cast<double>(part) / static_cast<double>(whole))
               : "-";
}

void group_table(std::string& out, const char* title, const char* key_header,
                 const std::vector<InspectGroup>& groups, const InspectReport& r) {
  Table t({key_header, "tensors", "params", "bytes", "share", "bpw"});
  for (const auto& g : groups)
    t.add({escape_for_terminal(g.key), std::to_string(g.tensors), short_count(g.params),
           human_bytes(g.bytes), share_text(g.bytes, r.tensor_bytes),
           bpw_text(g.bytes, g.sized_params)});
  out += fmt::format("\n{}:\n", title) + t.render("  ");
}

}  // namespace

std::string render_text(const InspectReport& r, const RenderOptions& o) {
  // A file whose header could not be read: a summary would be made of defaults and zeros.
  if (!r.version) return {};
  std::string out;
  if (o.summary) {
    for (size_t i = 0; i < r.files.size(); ++i)
      out += fmt::format("file:          {} ({})\n", escape_for_terminal(r.files[i]),
                         human_bytes(r.file_sizes[i]));
    out += fmt::format("version:       {}\n", *r.version);
    out += fmt::format("alignment:     {}\n", r.alignment.value_or(0));
    out += fmt::format("architecture:  {}\n",
                       r.architecture.empty() ? "-" : escape_for_terminal(r.architecture));
    out += fmt::format("metadata keys: {}\n", r.metadata ? r.metadata->size() : 0);
    out += fmt::format("tensors:       {}\n", r.tensors.size());
    out += fmt::format("parameters:    {} ({})\n", with_commas(r.params), short_count(r.params));
    out += fmt::format("tensor bytes:  {} ({})\n", with_commas(r.tensor_bytes),
                       human_bytes(r.tensor_bytes));
    out += fmt::format("file bytes:    {} ({})\n", with_commas(r.file_bytes),
                       human_bytes(r.file_bytes));
    out += fmt::format("bits/weight:   {}\n", bpw_text(r.tensor_bytes, r.sized_params));
    if (r.unsized)
      out += fmt::format(
          "unsized:       {} tensors of unknown or removed types (not counted in bytes "
          "or bits/weight)\n",
          r.unsized);
    group_table(out, "by type", "type", r.by_type, r);
    group_table(out, "by role", "role", r.by_role, r);
    group_table(out, "by layer", "layer", r.by_layer, r);
  }
  if (o.metadata && r.metadata) {
    Table t({"key", "type", "value"}, {true, true, true});
    for (const auto& kv : r.metadata->entries()) {
      std::string type(value_type_name(kv.value.type()));
      if (kv.value.is_array())
        type = fmt::format("array[{}; {}]", value_type_name(kv.value.array_type()),
                           kv.value.array_size());
      t.add({escape_for_terminal(kv.key), type,
             format_value(kv.value, o.full ? 0 : 8, o.full ? 0 : 200)});
    }
    if (!out.empty()) out += '\n';
    out += "metadata:\n" + t.render("  ");
  }
  if (o.tensors) {
    const bool hashes = !r.tensors.empty() && r.tensors.front().xxh3.has_value();
    std::vector<std::string> header = {"name",  "type", "shape", "offset",
                                       "bytes", "bpw",  "role",  "layer"};
    if (r.files.size() > 1) header.push_back("shard");  // counted from 1, as in the shard names
    if (hashes) header.push_back("xxh3");
    Table t(header, {true, true, true, false, false, false, true});
    for (const auto& x : r.tensors) {
      std::vector<std::string> row = {escape_for_terminal(x.name),
                                      type_name(x.type_id) + (x.bytes ? "" : " (unsized)"),
                                      shape_text(x.shape),
                                      x.offset ? std::to_string(*x.offset) : "-",
                                      x.bytes ? std::to_string(*x.bytes) : "?",
                                      x.bytes ? bpw_text(*x.bytes, x.n_elements) : "-",
                                      std::string(role_name(x.role)),
                                      x.layer ? std::to_string(*x.layer) : "-"};
      if (r.files.size() > 1) row.push_back(std::to_string(x.file + 1));
      if (hashes) row.push_back(x.xxh3 ? hex64(*x.xxh3) : "-");
      t.add(std::move(row));
    }
    if (!out.empty()) out += '\n';
    out += "tensors:\n" + t.render("  ");
  }
  return out;
}

std::string render_json(const InspectReport& r) {
  using nlohmann::json;
  json doc;
  doc["files"] = json::array();
  for (const auto& f : r.files) doc["files"].push_back(utf8_or_escaped(f));
  doc["version"] = r.version ? json(*r.version) : json(nullptr);
  doc["alignment"] = r.alignment ? json(*r.alignment) : json(nullptr);
  doc["architecture"] =
      r.architecture.empty() ? json(nullptr) : json(utf8_or_escaped(r.architecture));
  doc["metadata"] = json::array();
  if (r.metadata)
    for (const auto& kv : r.metadata->entries()) {
      doc["metadata"].push_back(metadata_json(kv));
      // A manifest compares values by this hash: exact where the JSON form is not.
      if (r.hashes) doc["metadata"].back()["xxh3"] = hex64(value_xxh3(kv.value));
    }
  doc["tensors"] = json::array();
  for (const auto& t : r.tensors) {
    json j = {{"name", utf8_or_escaped(t.name)},
              {"type", type_name(t.type_id)},
              {"type_id", t.type_id},
              {"shape", t.shape},
              {"file", t.file},
              {"offset", t.offset ? json(*t.offset) : json(nullptr)},
              {"bytes", t.bytes ? json(*t.bytes) : json(nullptr)},
              {"elements", t.n_elements},
              {"role", std::string(role_name(t.role))},
              {"layer", t.layer ? json(*t.layer) : json(nullptr)}};
    if (t.xxh3) j["xxh3"] = hex64(*t.xxh3);
    doc["tensors"].push_back(std::move(j));
  }
  const auto groups = [&](const std::vector<InspectGroup>& gs) {
    json a = json::array();
    for (const auto& g : gs)
      a.push_back({{"key", utf8_or_escaped(g.key)},
                   {"tensors", g.tensors},
                   {"params", g.params},
                   {"bytes", g.bytes}});
    return a;
  };
  doc["summary"] = {
      {"tensors", r.tensors.size()},
      {"params", r.params},
      {"tensor_bytes", r.tensor_bytes},
      {"file_bytes", r.file_bytes},
      {"unsized_tensors", r.unsized},
      // Over the tensors of known size (none: null, where the text form prints "-").
      {"bits_per_weight", r.sized_params ? json(static_cast<double>(r.tensor_bytes) * 8.0 /
                                                static_cast<double>(r.sized_params))
                                         : json(nullptr)},
      {"by_type", groups(r.by_type)},
      {"by_role", groups(r.by_role)},
      {"by_layer", groups(r.by_layer)}};
  if (r.checked || !r.problems.empty() || r.damage) {
    json p = json::array();
    for (const auto& x : r.problems)
      p.push_back({{"file", utf8_or_escaped(x.path)},
                   {"object", message_for_json(x.object)},
                   {"offset", x.offset ? json(*x.offset) : json(nullptr)},
                   {"severity", x.severity},
                   {"message", message_for_json(x.message)}});
    doc["problems"] = std::move(p);
  }
  if (r.checked) {
    // The verdict: gguf-inspect --check exits 1 when errors > 0 (warnings alone exit 0).
    const uint64_t errors = check_errors(r);
    doc["check"] = {{"errors", errors}, {"warnings", r.problems.size() - errors}};
  }
  if (r.damage) {
    doc["error"] = message_for_json(r.damage->what());
    doc["exit_code"] = 1;  // as gguf-inspect exits, like the error document of other failures
  }
  if (!r.selection.empty()) doc["selection"] = selection_json(r.selection);
  return dump_json(doc, 2) + "\n";
}

}  // namespace gguf

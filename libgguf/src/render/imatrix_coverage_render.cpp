// Renderers of an importance-matrix coverage report (gguf-inspect --imatrix): a table per
// tensor and summaries by role and layer for people, one JSON document for scripts.
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <nlohmann/json.hpp>

#include "gguf/base/escape.h"
#include "gguf/base/table.h"
#include "gguf/format/json.h"
#include "gguf/format/types.h"
#include "gguf/ops/imatrix_coverage.h"

namespace gguf {
namespace {

using nlohmann::json;

// "256", or "4 x 256" for one matrix per expert.
std::string cut_text(int64_t matrices, int64_t columns) {
  return matrices > 1 ? fmt::format("{} x {}", matrices, columns) : std::to_string(columns);
}

std::string entry_text(const CoverageRow& row) {
  if (row.coverage == Coverage::kMissing) return "-";
  // A legacy entry is a bare count of values; a GGUF entry says how they are cut.
  if (row.entry_matrices == 0) return std::to_string(row.entry_values);
  return cut_text(row.entry_matrices, static_cast<int64_t>(row.entry_values) /
                                          std::max<int64_t>(1, row.entry_matrices));
}

std::string routing_text(const CoverageRow& row) {
  switch (row.routing) {
    case Routing::kNotExperts:
      return "-";
    case Routing::kUnknown:
      return "unknown";
    case Routing::kKnown:
      break;
  }
  std::string out = fmt::format("{} of {}", row.unrouted.size(), row.matrices);
  if (row.unrouted.empty()) return out;
  constexpr size_t kShown = 8;
  const size_t n = std::min(row.unrouted.size(), kShown);
  out += fmt::format(" ({}{})", fmt::join(row.unrouted.begin(), row.unrouted.begin() + n, " "),
                     row.unrouted.size() > kShown ? " ..." : "");
  return out;
}

std::string group_routing(const CoverageGroup& g) {
  if (!g.experts && !g.unknown) return "-";
  std::string out = g.experts ? fmt::format("{} of {}", g.unrouted, g.experts) : "";
  if (g.unknown)
    out += fmt::format("{}unknown in {} {}", out.empty() ? "" : ", ", g.unknown,
                       g.unknown == 1 ? "tensor" : "tensors");
  return out;
}

std::string group_table(const char* title, const char* column,
                        const std::vector<CoverageGroup>& groups) {
  Table t({column, "tensors", "covered", "missing", "misfit", "experts never routed"},
          {true, false, false, false, false, true});
  for (const auto& g : groups)
    t.add({escape_for_terminal(g.key), std::to_string(g.tensors), std::to_string(g.covered),
           std::to_string(g.missing), std::to_string(g.misfit), group_routing(g)});
  return fmt::format("\n{}:\n{}", title, t.render("  "));
}

json group_json(const CoverageGroup& g) {
  return {{"key", utf8_or_escaped(g.key)},
          {"tensors", g.tensors},
          {"covered", g.covered},
          {"missing", g.missing},
          {"misfit", g.misfit},
          {"experts", g.experts},
          {"experts_never_routed", g.unrouted},
          {"expert_tensors_unknown", g.unknown}};
}

}  // namespace

std::string render_coverage_text(const CoverageReport& r) {
  std::string out = fmt::format(
      "imatrix: '{}' ({}; {} {}, {} chunks{})\nmodel:   '{}'\n\n", escape_for_terminal(r.imatrix),
      r.legacy ? "legacy .dat" : "GGUF", r.entries, r.entries == 1 ? "entry" : "entries",
      r.chunk_count,
      r.datasets.empty() ? ""
                         : fmt::format("; dataset {}", escape_for_terminal(fmt::format(
                                                           "{}", fmt::join(r.datasets, ", ")))),
      escape_for_terminal(r.files.front()));
  Table t({"tensor", "type", "role", "layer", "entry", "values", "needs", "experts never routed"},
          {true, true, true, false, true, false, false, true});
  for (const auto& row : r.rows)
    t.add({escape_for_terminal(row.name), type_name(row.type_id), std::string(role_name(row.role)),
           row.layer ? std::to_string(*row.layer) : "-", std::string(coverage_name(row.coverage)),
           entry_text(row), cut_text(row.matrices, row.columns), routing_text(row)});
  out += t.render();
  bool first = true;
  for (const auto& row : r.rows) {
    if (row.coverage != Coverage::kMisfit) continue;
    if (first) out += "\nentries that do not fit their tensor:\n";
    first = false;
    out +=
        fmt::format("  {}: {}\n", escape_for_terminal(row.name), escape_for_terminal(row.problem));
  }
  if (!r.rows.empty()) {
    out += group_table("by role", "role", r.by_role);
    out += group_table("by layer", "layer", r.by_layer);
  }
  const CoverageGroup& g = r.total;
  out += fmt::format("\ncoverage: {} of {} quantizable tensors covered, {} missing, {} misfit\n",
                     g.covered, g.tensors, g.missing, g.misfit);
  if (g.experts || g.unknown) {
    out += fmt::format("experts never routed: {}", group_routing(g));
    if (g.unknown)
      out += r.legacy ? " (a legacy .dat has no per-expert counts)"
                      : " (entries of one vector for all experts have no per-expert counts)";
    out += "\n";
  }
  if (!r.unused.empty()) {
    constexpr size_t kShown = 4;
    std::vector<std::string> shown;
    for (size_t i = 0; i < std::min(kShown, r.unused.size()); ++i)
      shown.push_back(fmt::format("'{}'", escape_for_terminal(r.unused[i])));
    out += fmt::format("entries naming no tensor of the model: {} ({}{})\n", r.unused.size(),
                       fmt::join(shown, ", "), r.unused.size() > kShown ? ", ..." : "");
  }
  return out;
}

std::string render_coverage_json(const CoverageReport& r) {
  json tensors = json::array();
  for (const auto& row : r.rows) {
    json t = {{"name", utf8_or_escaped(row.name)},
              {"type", type_name(row.type_id)},
              {"role", std::string(role_name(row.role))},
              {"layer", row.layer ? json(*row.layer) : json(nullptr)},
              {"coverage", std::string(coverage_name(row.coverage))},
              {"columns", row.columns},
              {"matrices", row.matrices},
              {"needs", row.columns * row.matrices},
              {"entry_values", row.entry_values},
              {"entry_matrices", row.entry_matrices ? json(row.entry_matrices) : json(nullptr)}};
    t["routing"] = row.routing == Routing::kKnown     ? "known"
                   : row.routing == Routing::kUnknown ? "unknown"
                                                      : "none";
    t["experts_never_routed"] = row.routing == Routing::kKnown ? json(row.unrouted) : json(nullptr);
    if (row.coverage == Coverage::kMisfit) t["problem"] = message_for_json(row.problem);
    tensors.push_back(std::move(t));
  }
  json by_role = json::array(), by_layer = json::array(), files = json::array(),
       unused = json::array(), datasets = json::array();
  for (const auto& g : r.by_role) by_role.push_back(group_json(g));
  for (const auto& g : r.by_layer) by_layer.push_back(group_json(g));
  for (const auto& f : r.files) files.push_back(utf8_or_escaped(f));
  for (const auto& u : r.unused) unused.push_back(utf8_or_escaped(u));
  for (const auto& d : r.datasets) datasets.push_back(utf8_or_escaped(d));
  const json doc = {{"files", std::move(files)},
                    {"imatrix",
                     {{"path", utf8_or_escaped(r.imatrix)},
                      {"format", r.legacy ? "legacy" : "gguf"},
                      {"datasets", std::move(datasets)},
                      {"chunk_count", r.chunk_count},
                      {"entries", r.entries}}},
                    {"fits", r.total.misfit == 0},
                    {"tensors", std::move(tensors)},
                    {"summary", group_json(r.total)},
                    {"by_role", std::move(by_role)},
                    {"by_layer", std::move(by_layer)},
                    {"unused_entries", std::move(unused)}};
  return dump_json(doc, 2) + "\n";
}

}  // namespace gguf

// Renderers of a DiffReport: aligned text tables for people, one JSON document for scripts.
// They only read the report; every string from a file is escaped on the way out.
#include <fmt/format.h>

#include <cmath>
#include <nlohmann/json.hpp>

#include "gguf/base/escape.h"
#include "gguf/base/table.h"
#include "gguf/base/units.h"
#include "gguf/format/json.h"
#include "gguf/format/types.h"
#include "gguf/ops/diff.h"
#include "render/metadata_changes_json.h"

namespace gguf {
namespace {

using nlohmann::json;

// ---- text -------------------------------------------------------------------------------

// Cuts s to at most width code points, marking the cut; s is already escaped.
std::string clip(const std::string& s, size_t width) {
  size_t points = 0;
  for (size_t i = 0; i < s.size(); ++i) {
    if ((static_cast<unsigned char>(s[i]) & 0xC0) == 0x80) continue;
    if (++points > width) return s.substr(0, i) + "...";
  }
  return s;
}

constexpr size_t kValueWidth = 48;

std::string scalar_text(const Value& v) {
  return fmt::format("{} {}", value_type_name(v.type()), format_value(v, 4));
}

std::string value_text(const std::optional<Value>& v) {
  if (!v) return "-";
  if (!v->is_array()) return clip(scalar_text(*v), kValueWidth);
  const std::string head = fmt::format("{}[{}]", value_type_name(v->array_type()), v->array_size());
  if (v->array_size() > 4) return head;
  return clip(fmt::format("{} {}", head, format_value(*v, 4)), kValueWidth);
}

std::string shape_text(const std::vector<int64_t>& shape) {
  if (shape.empty()) return "[]";
  std::string s;
  for (size_t i = 0; i < shape.size(); ++i) {
    if (i) s += 'x';
    s += std::to_string(shape[i]);
  }
  return s;
}

std::string bytes_text(const std::optional<uint64_t>& b) { return b ? human_bytes(*b) : "-"; }

std::string delta_text(uint64_t a, uint64_t b) {
  if (a == b) return "0 B";
  return (b > a ? "+" : "-") + human_bytes(b > a ? b - a : a - b);
}

std::string num(double v, const char* spec = "{:.3e}") {
  if (std::isnan(v)) return "-";
  if (std::isinf(v)) return v > 0 ? "inf" : "-inf";
  return fmt::format(fmt::runtime(spec), v);
}

std::string nonfinite_text(const ErrorMetrics& m, std::string_view base, std::string_view x) {
  std::string s;
  const auto add = [&](uint64_t n, std::string_view side, std::string_view what) {
    if (n) s += fmt::format("{}{} {} {}", s.empty() ? "" : ", ", n, what, side);
  };
  add(m.nan_base, base, "NaN in");
  add(m.inf_base, base, "Inf in");
  add(m.nan_x, x, "NaN in");
  add(m.inf_x, x, "Inf in");
  if (m.too_large) s += fmt::format("{}{} too large to square", s.empty() ? "" : ", ", m.too_large);
  return s.empty() ? "-" : s;
}

std::string type_text(const std::optional<TensorSide>& s) {
  return s ? type_name(s->type_id) : "-";
}

std::string metadata_section(const DiffReport& r) {
  if (!r.metadata_compared) return "metadata: not compared\n";
  return render_metadata_changes_text(r.metadata);
}

std::string tensor_section(const DiffReport& r, const DiffRenderOptions& o) {
  const DiffCounts& c = r.counts;
  std::string out = fmt::format("tensors: {} compared", r.tensors.size());
  if (r.tensors.empty()) return out + "\n";
  if (!c.changed()) {
    out += ", all same\n";
    if (!o.all) return out;
  } else {
    out += fmt::format(": {} same, {} only in A, {} only in B, {} shape, {} type, {} bytes\n",
                       c.same, c.only_a, c.only_b, c.shape, c.type, c.bytes);
  }
  Table t(
      {"name", "change", "type a", "type b", "shape a", "shape b", "bytes a", "bytes b", "delta"},
      {true, true, true, true, false, false, false, false, false});
  for (const auto& x : r.tensors) {
    if (x.change == TensorChange::kSame && !o.all) continue;
    t.add({escape_for_terminal(x.name), std::string(change_name(x.change)), type_text(x.a),
           type_text(x.b), x.a ? shape_text(x.a->shape) : "-", x.b ? shape_text(x.b->shape) : "-",
           bytes_text(x.a ? x.a->bytes : std::nullopt), bytes_text(x.b ? x.b->bytes : std::nullopt),
           delta_text(x.a ? x.a->bytes.value_or(0) : 0, x.b ? x.b->bytes.value_or(0) : 0)});
  }
  return out + t.render("  ") +
         fmt::format("  total: {} in A, {} in B ({})\n", human_bytes(r.bytes_a),
                     human_bytes(r.bytes_b), delta_text(r.bytes_a, r.bytes_b));
}

std::string values_section(const DiffReport& r) {
  std::vector<std::string> header = {"name",     "type a", "type b", "rmse",
                                     "max|a-b|", "rel",    "cosine", "snr db"};
  if (r.weighted) header.insert(header.end(), {"w-rmse", "w-rel"});
  header.push_back("non-finite");
  Table t(header, {true, true, true});
  for (const auto& x : r.tensors) {
    if (!x.metrics) continue;
    const ErrorMetrics& m = *x.metrics;
    std::vector<std::string> row = {escape_for_terminal(x.name),
                                    type_text(x.a),
                                    type_text(x.b),
                                    num(m.rmse()),
                                    num(m.max_abs_diff()),
                                    num(m.rel()),
                                    num(m.cosine(), "{:.6f}"),
                                    num(m.snr_db(), "{:.2f}")};
    if (r.weighted) row.insert(row.end(), {num(m.weighted_rmse()), num(m.weighted_rel())});
    row.push_back(nonfinite_text(m, "a", "b"));
    t.add(std::move(row));
  }
  if (t.empty()) return "values: no tensor pair to measure\n";
  return "values (B against A):\n" + t.render("  ");
}

std::string reference_section(const DiffReport& r) {
  std::vector<std::string> header = {"name", "type a", "type b", "type ref", "rel a", "rel b"};
  if (r.weighted) header.insert(header.end(), {"w-rel a", "w-rel b"});
  header.insert(header.end(), {"closer", "non-finite"});
  Table t(header, {true, true, true, true});
  for (const auto& x : r.tensors) {
    if (!x.closer) continue;
    const ErrorMetrics &a = *x.ref_a, &b = *x.ref_b;
    std::vector<std::string> row = {escape_for_terminal(x.name),
                                    type_text(x.a),
                                    type_text(x.b),
                                    type_text(x.ref),
                                    num(a.rel()),
                                    num(b.rel())};
    if (r.weighted) row.insert(row.end(), {num(a.weighted_rel()), num(b.weighted_rel())});
    row.push_back(std::string(closer_name(*x.closer)));
    std::string bad = nonfinite_text(a, "ref", "a");
    if (b.nan_x + b.inf_x + b.too_large)
      bad = (bad == "-" ? "" : bad + ", ") + nonfinite_text(b, "ref", "b");
    row.push_back(bad);
    t.add(std::move(row));
  }
  if (t.empty()) return "reference: no tensor to measure\n";
  return fmt::format("against the reference ({}):\n", escape_for_terminal(r.files_ref.front())) +
         t.render("  ");
}

std::string group_section(const char* title, const char* key, const std::vector<DiffGroup>& gs,
                          const DiffReport& r) {
  std::vector<std::string> header = {key, "tensors", "changed", "bytes a", "bytes b", "delta"};
  if (r.values) header.insert(header.end(), {"rel", "max|a-b|"});
  if (r.values && r.weighted) header.push_back("w-rel");
  if (r.reference) header.insert(header.end(), {"rel a", "rel b"});
  if (r.reference && r.weighted) header.insert(header.end(), {"w-rel a", "w-rel b"});
  if (r.reference) header.insert(header.end(), {"a closer", "b closer", "ties"});
  Table t(header);
  for (const auto& g : gs) {
    std::vector<std::string> row = {escape_for_terminal(g.key), std::to_string(g.tensors),
                                    std::to_string(g.changed),  human_bytes(g.bytes_a),
                                    human_bytes(g.bytes_b),     delta_text(g.bytes_a, g.bytes_b)};
    const auto pooled = [&](bool have, double v) { return have ? num(v) : std::string("-"); };
    if (r.values)
      row.insert(row.end(), {pooled(g.measured, g.metrics.rel()),
                             pooled(g.measured, g.metrics.max_abs_diff())});
    if (r.values && r.weighted) row.push_back(pooled(g.measured, g.metrics.weighted_rel()));
    const bool ref = g.ref_measured > 0;
    if (r.reference)
      row.insert(row.end(), {pooled(ref, g.ref_a.rel()), pooled(ref, g.ref_b.rel())});
    if (r.reference && r.weighted)
      row.insert(row.end(),
                 {pooled(ref, g.ref_a.weighted_rel()), pooled(ref, g.ref_b.weighted_rel())});
    if (r.reference)
      row.insert(row.end(),
                 {std::to_string(g.closer_a), std::to_string(g.closer_b), std::to_string(g.ties)});
    t.add(std::move(row));
  }
  return fmt::format("{}:\n", title) + t.render("  ");
}

// ---- JSON -------------------------------------------------------------------------------

json number(double v) { return std::isfinite(v) ? json(v) : json(nullptr); }

json metrics_json(const ErrorMetrics& m, const char* base, const char* x) {
  json j = {{"rmse", number(m.rmse())},     {"max_abs", number(m.max_abs_diff())},
            {"rel", number(m.rel())},       {"cosine", number(m.cosine())},
            {"snr_db", number(m.snr_db())}, {"count", m.count}};
  j[fmt::format("nan_{}", base)] = m.nan_base;
  j[fmt::format("inf_{}", base)] = m.inf_base;
  j[fmt::format("nan_{}", x)] = m.nan_x;
  j[fmt::format("inf_{}", x)] = m.inf_x;
  if (m.too_large) j["too_large"] = m.too_large;
  if (m.weighted) {
    j["weighted_rmse"] = number(m.weighted_rmse());
    j["weighted_rel"] = number(m.weighted_rel());
  }
  return j;
}

json side_json(const std::optional<TensorSide>& s) {
  if (!s) return nullptr;
  json j = {{"type", type_name(s->type_id)},
            {"type_id", s->type_id},
            {"shape", s->shape},
            {"bytes", s->bytes ? json(*s->bytes) : json(nullptr)}};
  if (s->xxh3) j["xxh3"] = fmt::format("{:016x}", *s->xxh3);
  return j;
}

json group_json(const DiffGroup& g) {
  json j = {{"key", utf8_or_escaped(g.key)}, {"tensors", g.tensors}, {"changed", g.changed},
            {"bytes_a", g.bytes_a},          {"bytes_b", g.bytes_b}, {"measured", g.measured}};
  if (g.measured) j["metrics"] = metrics_json(g.metrics, "a", "b");
  if (g.ref_measured)
    j["reference"] = {{"measured", g.ref_measured},
                      {"closer_a", g.closer_a},
                      {"closer_b", g.closer_b},
                      {"ties", g.ties},
                      {"a", metrics_json(g.ref_a, "ref", "a")},
                      {"b", metrics_json(g.ref_b, "ref", "b")}};
  return j;
}

json files_json(const std::vector<std::string>& files) {
  json a = json::array();
  for (const auto& f : files) a.push_back(utf8_or_escaped(f));
  return a;
}

}  // namespace

namespace detail {

json metadata_change_json(const MetadataDiff& m) {
  json j = {{"key", utf8_or_escaped(m.key)},
            {"change", std::string(change_name(m.change))},
            {"a", m.a ? value_json_deferred(*m.a) : json(nullptr)},
            {"b", m.b ? value_json_deferred(*m.b) : json(nullptr)}};
  const auto types = [&](const std::optional<Value>& v, const char* side) {
    if (!v) return;
    j[fmt::format("{}_type", side)] = std::string(value_type_name(v->type()));
    if (!v->is_array()) return;
    j[fmt::format("{}_element_type", side)] = std::string(value_type_name(v->array_type()));
    j[fmt::format("{}_count", side)] = v->array_size();
  };
  types(m.a, "a");
  types(m.b, "b");
  if (m.first_difference) j["first_difference"] = *m.first_difference;
  return j;
}

}  // namespace detail

std::string render_metadata_changes_text(const std::vector<MetadataDiff>& changes) {
  size_t n[3] = {};
  for (const auto& m : changes) ++n[static_cast<size_t>(m.change)];
  if (changes.empty()) return "metadata: no changes\n";
  std::string out = fmt::format("metadata: {} changed, {} added, {} removed\n",
                                n[static_cast<size_t>(MetadataChange::kChanged)],
                                n[static_cast<size_t>(MetadataChange::kAdded)],
                                n[static_cast<size_t>(MetadataChange::kRemoved)]);
  std::vector<std::vector<std::string>> rows;
  bool any_note = false;
  for (const auto& m : changes) {
    std::string note;
    if (m.a && m.b && m.a->type() != m.b->type())
      note = "value type changed";
    else if (m.first_difference && m.a && m.a->as_string()) {
      // Only where the table cuts a string short (else both values are shown whole).
      const auto cut = [](const Value& v) {
        const std::string whole = scalar_text(v);
        return clip(whole, kValueWidth) != whole;
      };
      if (cut(*m.a) || cut(*m.b))
        note = fmt::format("first difference at byte {}", *m.first_difference);
    } else if (m.first_difference && m.a && m.b && m.a->array_type() != m.b->array_type())
      note = "element type changed";
    else if (m.first_difference)
      note = fmt::format("first difference at index {}", *m.first_difference);
    any_note = any_note || !note.empty();
    rows.push_back({escape_for_terminal(m.key), std::string(change_name(m.change)), value_text(m.a),
                    value_text(m.b), note});
  }
  std::vector<std::string> header = {"key", "change", "a", "b"};
  if (any_note) header.push_back("note");
  Table t(header, std::vector<bool>(header.size(), true));
  for (auto& row : rows) {
    row.resize(header.size());
    t.add(std::move(row));
  }
  return out + t.render("  ");
}

std::string render_diff_text(const DiffReport& r, const DiffRenderOptions& o) {
  std::string out =
      r.manifest
          ? fmt::format("A: {} (manifest of {}{})\nB: {}\n", escape_for_terminal(*r.manifest),
                        escape_for_terminal(r.files_a.front()),
                        r.manifest_selection.empty()
                            ? ""
                            : "; covers " + escape_for_terminal(r.manifest_selection.describe()),
                        escape_for_terminal(r.files_b.front()))
          : fmt::format("A: {}\nB: {}\n", escape_for_terminal(r.files_a.front()),
                        escape_for_terminal(r.files_b.front()));
  if (r.reference) out += fmt::format("reference: {}\n", escape_for_terminal(r.files_ref.front()));
  if (!r.selection.empty())
    out += fmt::format("tensors compared: {}\n", escape_for_terminal(r.selection.describe()));
  out += metadata_section(r);
  if (r.stopped_early) return out + "different (stopped at the first difference)\n";
  out += tensor_section(r, o);
  if (r.values) out += values_section(r);
  if (r.reference) out += reference_section(r);
  if (o.summaries && !r.tensors.empty() && (r.counts.changed() || r.values || r.reference)) {
    out += group_section("by role", "role", r.by_role, r);
    out += group_section("by layer", "layer", r.by_layer, r);
  }
  std::string notes;
  for (const auto& x : r.tensors)
    if (!x.note.empty()) notes += fmt::format("  {}: {}\n", escape_for_terminal(x.name), x.note);
  if (!notes.empty()) out += "notes:\n" + notes;
  return out + (r.identical ? "identical\n" : "different\n");
}

std::string render_diff_json(const DiffReport& r, const DiffRenderOptions& o) {
  json doc;
  doc["identical"] = r.identical;
  doc["stopped_early"] = r.stopped_early;
  doc["a"] = {{"files", files_json(r.files_a)},
              {"manifest", r.manifest ? json(utf8_or_escaped(*r.manifest)) : json(nullptr)},
              {"selection", r.manifest_selection.empty() ? json(nullptr)
                                                         : selection_json(r.manifest_selection)}};
  doc["b"] = {{"files", files_json(r.files_b)}};
  doc["reference"] = r.reference ? json({{"files", files_json(r.files_ref)}}) : json(nullptr);
  doc["selection"] = r.selection.empty() ? json(nullptr) : selection_json(r.selection);
  doc["metadata_compared"] = r.metadata_compared;
  doc["metadata"] = json::array();
  for (const auto& m : r.metadata) doc["metadata"].push_back(detail::metadata_change_json(m));
  doc["tensors"] = json::array();
  for (const auto& t : r.tensors) {
    if (t.change == TensorChange::kSame && !o.all) continue;
    json j = {{"name", utf8_or_escaped(t.name)},
              {"change", std::string(change_name(t.change))},
              {"role", std::string(role_name(t.role))},
              {"layer", t.layer ? json(*t.layer) : json(nullptr)},
              {"a", side_json(t.a)},
              {"b", side_json(t.b)}};
    if (t.metrics) j["metrics"] = metrics_json(*t.metrics, "a", "b");
    if (t.closer)
      j["reference"] = {{"type", t.ref ? json(type_name(t.ref->type_id)) : json(nullptr)},
                        {"a", metrics_json(*t.ref_a, "ref", "a")},
                        {"b", metrics_json(*t.ref_b, "ref", "b")},
                        {"closer", std::string(closer_name(*t.closer))}};
    if (!t.note.empty()) j["note"] = message_for_json(t.note);
    doc["tensors"].push_back(std::move(j));
  }
  const DiffCounts& c = r.counts;
  json roles = json::array(), layers = json::array();
  for (const auto& g : r.by_role) roles.push_back(group_json(g));
  for (const auto& g : r.by_layer) layers.push_back(group_json(g));
  doc["summary"] = {{"tensors", r.tensors.size()},
                    {"same", c.same},
                    {"only_a", c.only_a},
                    {"only_b", c.only_b},
                    {"shape", c.shape},
                    {"type", c.type},
                    {"bytes", c.bytes},
                    {"metadata_changes", r.metadata.size()},
                    {"bytes_a", r.bytes_a},
                    {"bytes_b", r.bytes_b},
                    {"by_role", roles},
                    {"by_layer", layers}};
  return dump_json(doc, 2) + "\n";
}

}  // namespace gguf

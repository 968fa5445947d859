// Renderers of the planner's report: the per-tensor table and totals, and the requant JSON
// contract with the plan added.
#include <fmt/format.h>

#include <nlohmann/json.hpp>
#include <unordered_map>

#include "gguf/base/escape.h"
#include "gguf/base/table.h"
#include "gguf/base/units.h"
#include "gguf/format/json.h"
#include "gguf/ops/planner.h"
#include "render/plan_render.h"

namespace gguf {
namespace {

std::string budget_text(const PlannerResult& r) {
  if (r.by_bpw)
    return fmt::format("--target-bpw {} ({} bytes of tensor data)", r.target_bpw, r.budget);
  return fmt::format("--target-size {} bytes ({})", r.budget, human_bytes(r.budget));
}

}  // namespace

std::string render_plan_text(const PlannerResult& r, const WriteResult* written) {
  Table t({"tensor", "type", "source", "bytes", "predicted error", "decided by"},
          {true, true, true, false, false, true});
  for (const auto& p : r.tensors)
    t.add({escape_for_terminal(p.name),
           fmt::format("{} -> {}", type_name(p.type_before), type_name(p.type_after)),
           escape_for_terminal(p.source), with_commas(p.bytes), fmt::format("{:.6g}", p.error),
           !p.pinned.empty()    ? p.pinned
           : !p.tied_to.empty() ? fmt::format("plan (with {})", escape_for_terminal(p.tied_to))
                                : std::string("plan")});
  std::string out = t.render();
  const auto unit = [&](uint64_t b) {
    return r.by_bpw ? fmt::format("{:.4f} bpw",
                                  8.0 * static_cast<double>(b) / static_cast<double>(r.elements))
                    : fmt::format("{} bytes", b);
  };
  out += fmt::format("\nbudget: {}; reachable {} to {}\n", budget_text(r), unit(r.min_bytes),
                     unit(r.max_bytes));
  out += fmt::format("plan: {} tensors in {} decisions, {} pinned by rules\n",
                     r.tensors.size() - r.pinned, r.decisions, r.pinned);
  const double gap = r.error - r.lp_bound;
  out += fmt::format(
      "predicted: {} bytes ({}), {:.4f} bits per weight, model error {:.6g} (LP bound {:.6g}, "
      "gap {:.3g}{})\n",
      r.file_bytes, human_bytes(r.file_bytes), r.bpw, r.error, r.lp_bound, gap,
      r.error > 0 ? fmt::format(", {:.3f}%", 100.0 * gap / r.error) : std::string());
  out += detail::sizes_and_written_text(r.requant.bytes_before, r.file_bytes, written);
  return out;
}

std::string render_plan_json(const PlannerResult& r, const WriteResult* written) {
  using nlohmann::json;
  json doc = json::parse(render_requant_json(r.requant, written));
  std::unordered_map<std::string, const PlannedTensor*> by_name;
  for (const auto& p : r.tensors) by_name[utf8_or_escaped(p.name)] = &p;
  for (auto& t : doc["tensors"]) {
    const auto it = by_name.find(t["name"].get<std::string>());
    if (it == by_name.end()) {
      t["predicted_error"] = nullptr;
      continue;
    }
    const PlannedTensor& p = *it->second;
    t["predicted_error"] = p.error;
    t["decided_by"] = p.pinned.empty() ? json("plan") : json(message_for_json(p.pinned));
    t["tied_to"] = p.tied_to.empty() ? json(nullptr) : json(utf8_or_escaped(p.tied_to));
  }
  doc["plan"] = {{"budget", r.budget},
                 {"budget_kind", r.by_bpw ? "tensor_bytes" : "file_bytes"},
                 {"target_bpw", r.by_bpw ? json(r.target_bpw) : json(nullptr)},
                 {"reachable_min", r.min_bytes},
                 {"reachable_max", r.max_bytes},
                 {"predicted_file_bytes", r.file_bytes},
                 {"tensor_bytes", r.payload_bytes},
                 {"elements", r.elements},
                 {"bpw", r.bpw},
                 {"predicted_error", r.error},
                 {"lp_bound", r.lp_bound},
                 {"gap", r.error - r.lp_bound},
                 {"decisions", r.decisions},
                 {"pinned", r.pinned}};
  return dump_json(doc, 2) + "\n";
}

}  // namespace gguf

// The parts every plan report renders alike: rows and written files as JSON, and the footer.
#include "render/plan_render.h"

#include <fmt/format.h>

#include "gguf/base/escape.h"
#include "gguf/base/units.h"
#include "gguf/format/types.h"

namespace gguf::detail {

std::string data_text(const WriteResult& w) {
  if (!w.verified)
    return fmt::format("data: {} shared with the inputs, {} copied, {} written (not verified)\n",
                       human_bytes(w.bytes_shared), human_bytes(w.bytes_copied),
                       human_bytes(w.bytes_written));
  // "(proven by FIEMAP)" only when something was shared: on most file systems nothing is.
  return fmt::format(
      "data: {} shared with the inputs{}, {} copied and {} written (read back "
      "and hashed)\n",
      human_bytes(w.bytes_shared), w.bytes_shared ? " (proven by FIEMAP)" : "",
      human_bytes(w.bytes_copied), human_bytes(w.bytes_written));
}

std::string written_text(const WriteResult* w, WrittenForm form) {
  if (!w) return "dry run: no GGUF written\n";
  std::string out;
  if (form == WrittenForm::kSummary) {
    const char* verified = w->verified ? ", every payload verified" : ", not verified";
    if (w->paths.size() == 1)
      return fmt::format("wrote '{}' ({}){}\n", escape_for_terminal(w->paths[0]),
                         human_bytes(w->bytes), verified) +
             data_text(*w);
    out = fmt::format("wrote {} files ({}){}:\n", w->paths.size(), human_bytes(w->bytes), verified);
    for (const auto& p : w->paths) out += fmt::format("  {}\n", escape_for_terminal(p));
    return out + data_text(*w);
  }
  for (const auto& p : w->paths) out += fmt::format("wrote {}\n", escape_for_terminal(p));
  if (w->verified)
    out += w->bytes_shared ? "verified: every tensor read back and hashed or proven shared\n"
                           : "verified: every tensor read back and hashed\n";
  return out + data_text(*w);
}

std::string sizes_and_written_text(uint64_t before, uint64_t planned, const WriteResult* w) {
  return fmt::format("size: {} -> {}\n", human_bytes(before), human_bytes(size_after(planned, w))) +
         written_text(w);
}

nlohmann::json plan_row_json(const PlanRow& row) {
  return {{"name", utf8_or_escaped(row.name)},         {"source", utf8_or_escaped(row.source)},
          {"type_before", type_name(row.type_before)}, {"type_after", type_name(row.type_after)},
          {"bytes_before", row.bytes_before},          {"bytes_after", row.bytes_after},
          {"action", action_name(row.action)}};
}

void add_written_json(nlohmann::json& doc, uint64_t before, uint64_t planned,
                      const WriteResult* w) {
  using nlohmann::json;
  doc["bytes_before"] = before;
  doc["bytes_after"] = size_after(planned, w);
  doc["output"] = w ? json(utf8_or_escaped(w->paths.front())) : json(nullptr);
  doc["outputs"] = json::array();
  if (w)
    for (const auto& p : w->paths) doc["outputs"].push_back(utf8_or_escaped(p));
  doc["verified"] = w ? w->verified : false;
  doc["bytes_shared"] = w ? json(w->bytes_shared) : json(nullptr);
  doc["bytes_copied"] = w ? json(w->bytes_copied) : json(nullptr);
  doc["bytes_written"] = w ? json(w->bytes_written) : json(nullptr);
  doc["verification"] = json::array();
  if (w && w->verified) {
    if (w->bytes_shared) doc["verification"].push_back("fiemap");
    if (w->bytes_copied + w->bytes_written) doc["verification"].push_back("read-back");
  }
}

}  // namespace gguf::detail

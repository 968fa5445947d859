// Internal: what the renderers of every plan report share (gguf-splice, gguf-requant and its
// packed-affine import): the JSON of a row and of what was written (DESIGN.md's contract), and
// the text footer saying what was written.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>

#include "gguf/write/plan_report.h"
#include "gguf/write/writer.h"

namespace gguf::detail {

// After a write the real size, else the planned one.
inline uint64_t size_after(uint64_t planned, const WriteResult* w) {
  return w ? w->bytes : planned;
}

// How a report's footer lists the files written.
enum class WrittenForm {
  kLines,    // "wrote PATH" per file, then "verified: ..." (gguf-requant, its imports)
  kSummary,  // "wrote 'PATH' (SIZE), every payload verified", or "wrote N files (SIZE)..." and
             // the paths indented (gguf-splice)
};

// The footer of every plan report: the files written and whether they were verified, then how
// their bytes got there ("data: X shared with the inputs (proven by FIEMAP), Y copied and Z
// written (read back and hashed)"), or that a dry run wrote nothing. Whatever a report says
// about the files written goes here.
std::string written_text(const WriteResult* w, WrittenForm form = WrittenForm::kLines);

// "size: A -> B", then written_text.
std::string sizes_and_written_text(uint64_t before, uint64_t planned, const WriteResult* w);

// A row as DESIGN.md's contract has it: "name", "source", "type_before", "type_after",
// "bytes_before", "bytes_after", "action".
nlohmann::json plan_row_json(const PlanRow& row);

// "bytes_before", "bytes_after", "output" (null on a dry run), "outputs" (every file written:
// the output, or a split set's every shard; empty on a dry run), "verified", "bytes_shared",
// "bytes_copied", "bytes_written" (WriteResult's; null on a dry run) and "verification": how
// they were verified, "fiemap" (shared bytes proven on the inputs' blocks) and "read-back"
// (the rest read back and hashed), each when it applies.
void add_written_json(nlohmann::json& doc, uint64_t before, uint64_t planned, const WriteResult* w);

}  // namespace gguf::detail

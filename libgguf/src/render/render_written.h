// The end both re-encoding reports share (gguf-requant on a GGUF, and its packed-affine
// import): sizes before and after, the paths written and whether they were verified.
#pragma once

#include <fmt/format.h>

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>

#include "gguf/base/escape.h"
#include "gguf/base/units.h"
#include "gguf/write/writer.h"

namespace gguf::detail {

// After a write the real size, else the planned one.
inline uint64_t size_after(uint64_t planned, const WriteResult* w) {
  return w ? w->bytes : planned;
}

// "size: A -> B", then "wrote PATH" per file and "verified: ..." when the write verified, or
// that a dry run wrote nothing.
inline std::string written_text(uint64_t before, uint64_t planned, const WriteResult* w) {
  std::string out =
      fmt::format("size: {} -> {}\n", human_bytes(before), human_bytes(size_after(planned, w)));
  if (w) {
    for (const auto& p : w->paths) out += fmt::format("wrote {}\n", escape_for_terminal(p));
    if (w->verified) out += "verified: every tensor read back and hashed\n";
  } else {
    out += "dry run: nothing written\n";
  }
  return out;
}

// "bytes_before", "bytes_after", "output" (null on a dry run), "outputs" (every file written:
// the output, or a split set's every shard; empty on a dry run, as gguf-splice's) and
// "verified".
inline void add_written_json(nlohmann::json& doc, uint64_t before, uint64_t planned,
                             const WriteResult* w) {
  using nlohmann::json;
  doc["bytes_before"] = before;
  doc["bytes_after"] = size_after(planned, w);
  doc["output"] = w ? json(utf8_or_escaped(w->paths.front())) : json(nullptr);
  doc["outputs"] = json::array();
  if (w)
    for (const auto& p : w->paths) doc["outputs"].push_back(utf8_or_escaped(p));
  doc["verified"] = w ? w->verified : false;
}

}  // namespace gguf::detail

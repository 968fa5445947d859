// Interim check (layout and names only); the full check with data scanning replaces it.
#include "gguf/check.h"

#include <fmt/format.h>

namespace gguf {

std::vector<Problem> check_model(const Model& model, const CheckOptions&) {
  std::vector<Problem> out;
  for (const auto& shard : model.shards()) {
    const GgufFile& f = *shard;
    uint64_t expect = 0;
    for (const auto& t : f.tensors()) {
      if (t.name.size() > kMaxNameBytes)
        out.push_back({f.path(), tensor_object(t.name), t.info_offset,
                       fmt::format("name is {} bytes; llama.cpp allows at most {}", t.name.size(),
                                   kMaxNameBytes)});
      if (!t.bytes) {
        out.push_back({f.path(), tensor_object(t.name), t.info_offset,
                       fmt::format("type {} cannot be sized", type_name(t.type_id))});
        continue;
      }
      if (t.offset != expect)
        out.push_back(
            {f.path(), tensor_object(t.name), t.info_offset,
             fmt::format("data offset {} is not canonical (expected {})", t.offset, expect)});
      expect = (t.offset + *t.bytes + f.alignment() - 1) / f.alignment() * f.alignment();
    }
  }
  return out;
}

}  // namespace gguf

// JSON from files is untrusted: parsed with nlohmann-json, refusing nesting past
// a limit and a key given twice in one object (which the library would silently overwrite).
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>

namespace gguf::detail {

// Throws gguf::Error naming path, object and `offset`. With `in_file`, text is the file's
// bytes from `offset` on and a syntax error's position is added to it; otherwise text was
// decoded from a string at `offset` (an escaped JSON string value), so the error stays at
// `offset` and its message says the byte of the text. `what` names the document in messages.
nlohmann::json parse_json_checked(std::string_view text, const std::string& path,
                                  const std::string& object, uint64_t offset, int max_depth,
                                  std::string_view what, bool in_file = true);

}  // namespace gguf::detail

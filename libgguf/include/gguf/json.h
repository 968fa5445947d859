// JSON forms of library values shared by every tool's --json output. Strings from files go
// through utf8_or_escaped so the document stays valid whatever bytes they hold.
#pragma once

#include <nlohmann/json.hpp>

#include "gguf/metadata.h"

namespace gguf {

// A metadata value as JSON: numbers, booleans, strings, arrays (NaN/Inf become null).
nlohmann::json value_json(const Value& v);
// {"key", "type", "value"} (+ "element_type" for arrays).
nlohmann::json metadata_json(const KeyValue& kv);

}  // namespace gguf

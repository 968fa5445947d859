// JSON forms of library values shared by every tool's --json output. Strings from files go
// through utf8_or_escaped so the document stays valid whatever bytes they hold.
#pragma once

#include <nlohmann/json.hpp>
#include <string>

#include "gguf/format/metadata.h"
#include "gguf/format/select.h"

namespace gguf {

// j.dump(indent), safe for a terminal (see escape_json_for_terminal): every JSON document and
// every piece of JSON in a message goes through this. Arrays left out of j by
// value_json_deferred (on this thread) are written into the text here, element by element.
std::string dump_json(const nlohmann::json& j, int indent = -1);

// A metadata value as JSON: numbers, booleans, strings, arrays (NaN/Inf become "nan"/"inf").
nlohmann::json value_json(const Value& v);
// The same for a document that dump_json prints on this thread, while v still exists: a long
// array stands in j as a placeholder that dump_json replaces by the elements, so that no JSON
// tree of one node per element is built (nlohmann's tree costs ~16 bytes per element to build
// and as much again to destroy, and a failed allocation in its destructor is std::terminate).
nlohmann::json value_json_deferred(const Value& v);
// {"key", "type", "value"} (+ "element_type" for arrays), the value as value_json_deferred.
nlohmann::json metadata_json(const KeyValue& kv);

// A selection as JSON: {"layers": [[lo, hi], ...], "roles": [...], "match": [...], "text"}.
nlohmann::json selection_json(const Selector& s);
// The selection back from that form; an input Error naming path and "selection" when it is
// malformed (text is not read: it only describes).
Selector selection_from_json(const nlohmann::json& j, const std::string& path);

}  // namespace gguf

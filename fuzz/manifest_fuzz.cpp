// libFuzzer target over what gguf-diff --manifest reads from a JSON file: the manifest parser
// (metadata values rebuilt from JSON, unescaped strings, tensors, hashes, the recorded
// selection), then the JSON forms a report would print. Any input may make the parser throw
// gguf::Error; nothing else may escape, crash or read out of bounds. The escaping helpers are
// also run on the raw bytes, which need not be JSON or UTF-8.
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "gguf/base/error.h"
#include "gguf/base/escape.h"
#include "gguf/format/json.h"
#include "gguf/ops/diff.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  volatile size_t sink = 0;
  // The inverse must undo the escaping of any byte string.
  const std::string raw(text);
  if (gguf::from_utf8_or_escaped(gguf::utf8_or_escaped(raw)) != raw) __builtin_trap();
  sink =
      sink + gguf::escape_json_for_terminal(text).size() + gguf::escape_for_terminal(text).size();
  try {
    const gguf::Manifest m = gguf::parse_manifest(text, "fuzz.json");
    for (const auto& kv : m.metadata.entries())
      sink = sink + gguf::dump_json(gguf::metadata_json(kv)).size();
    for (const auto& t : m.tensors) sink = sink + t.name.size() + t.shape.size();
    sink = sink + gguf::dump_json(gguf::selection_json(m.selection)).size();
  } catch (const gguf::Error& e) {
    sink = sink + e.message().size();
  }
  return 0;
}

// Metadata surgery: gguf-splice's --set, --set-file and --delete as data, parsed from their
// command-line form, checked against the base's metadata, and applied to a plan's metadata.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "gguf/format/metadata.h"

namespace gguf {

// The longest key an edit may name: GGUF stores key lengths in 64 bits, but no reader
// expects a key of more than 65535 bytes (and one this long is a mistake, not a key).
inline constexpr size_t kMaxEditKeyBytes = 65535;

// One edit as the command line gave it.
struct KeyEdit {
  enum class Kind { kSet, kSetFile, kDelete };
  Kind kind = Kind::kSet;
  std::string key;
  // KEY:TYPE gives the type (kString for "str"), KEY:[TYPE] an array of it (type = kArray,
  // element = TYPE); without either, the key must exist and keeps its type.
  std::optional<ValueType> type;
  ValueType element = ValueType::kU8;
  std::string text;  // the value as typed (--set), or the path (--set-file)
};

// Parses --set KEY=VALUE, KEY:TYPE=VALUE, KEY:[TYPE]=V1,V2 (from_file: --set-file, the value is
// a path). TYPE is GGUF's spelling: u8, i8, u16, i16, u32, i32, u64, i64, f32, f64, bool, str.
// Usage errors (exit 2) for a missing '=', an unknown type, and a bad key (empty, holding a
// NUL byte, longer than kMaxEditKeyBytes).
KeyEdit parse_set(std::string_view spec, bool from_file = false);
KeyEdit parse_delete(std::string_view key);

struct MetadataEdits {
  std::vector<KeyEdit> edits;  // applied in this order
  bool force_keys = false;     // permit deleting or retyping keys llama.cpp depends on
  bool empty() const { return edits.empty(); }
};

// The edits the command line gave: the --set values in order, then --set-file's, then --delete's.
MetadataEdits parse_edits(const std::vector<std::string>& sets,
                          const std::vector<std::string>& set_files,
                          const std::vector<std::string>& deletes, bool force_keys);

// Parses text as one value of type t (a scalar type or kString): integers in decimal,
// range-checked; floats as strtod reads them (inf and nan included); bools true/false/1/0.
// Usage error naming the key otherwise.
Value parse_scalar(std::string_view key, ValueType t, std::string_view text);
// An array of element type `element` from "v1,v2,..." (a backslash escapes ',' and '\' in
// strings; "" is the empty array), or, from_lines, from text holding one element per line.
Value parse_array(std::string_view key, ValueType element, std::string_view text,
                  bool from_lines = false);

// Applies the edits to metadata (the base's, in a plan), in order: an existing key keeps its
// place (and, without a type, its value type); a new key goes at the end. Refused (gguf::Error,
// usage kind, naming the key): layout keys (general.alignment: --align; split.*: the split
// options), splice.* (provenance), the same key set twice or set and deleted, deleting a key
// the base lacks, and without force_keys deleting a key llama.cpp requires or giving a key
// another type than llama.cpp reads it as. arch is the base's general.architecture; base_path
// names the base in messages. --set-file's files are read here (I/O errors name the path).
void apply_metadata_edits(Metadata& metadata, const MetadataEdits& edits, const std::string& arch,
                          const std::string& base_path);

// "set general.name", "delete foo": one line per edit, for splice's provenance.
std::vector<std::string> describe_edits(const MetadataEdits& edits);

}  // namespace gguf

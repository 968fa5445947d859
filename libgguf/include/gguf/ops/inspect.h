// gguf-inspect as a function: a report struct, and renderers (text tables, JSON) that only
// read the report.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "gguf/base/error.h"
#include "gguf/format/model.h"
#include "gguf/format/names.h"
#include "gguf/format/select.h"
#include "gguf/ops/check.h"

namespace gguf {

struct InspectOptions {
  Selector selector;    // restricts the tensor list and the summaries
  bool hashes = false;  // compute xxh3 of each selected tensor
  bool check = false;   // run check_model and include problems
  unsigned threads = 0;
  std::function<void(uint64_t, uint64_t)> progress;
};

struct InspectTensor {
  std::string name;
  uint32_t type_id = 0;
  std::vector<int64_t> shape;
  size_t file = 0;  // index into InspectReport::files
  // Absolute offset of the data in that file; nullopt in a damaged file's partial report when
  // the header could not be read to its end, so the data section's start is unknown.
  std::optional<uint64_t> offset;
  std::optional<uint64_t> bytes;  // nullopt for types the table cannot size
  uint64_t n_elements = 0;
  Role role = Role::kOther;
  std::optional<int> layer;
  std::optional<uint64_t> xxh3;
};

struct InspectGroup {
  std::string key;  // type name, role name, or layer ("0".."42", "-" for none)
  uint64_t tensors = 0, params = 0, bytes = 0;
  uint64_t sized_params = 0;  // of tensors with a known size: bits per weight = 8 bytes / this
};

struct InspectReport {
  std::vector<std::string> files;
  std::vector<uint64_t> file_sizes;
  // Both unset when the file's header could not be read (not a GGUF file, too short, a
  // refused version): a damaged report then has nothing to show but the error.
  std::optional<uint32_t> version;
  std::optional<uint64_t> alignment;
  std::string architecture;
  const Metadata* metadata = nullptr;  // of the first file; owned by the model
  std::vector<InspectTensor> tensors;  // selected tensors, in file order
  uint64_t params = 0, tensor_bytes = 0, file_bytes = 0;
  uint64_t unsized = 0;       // tensors whose type has no known size
  uint64_t sized_params = 0;  // of the others: bits per weight = 8 tensor_bytes / this
  std::vector<InspectGroup> by_type, by_role, by_layer;
  bool checked = false;           // InspectOptions::check was given
  std::vector<Problem> problems;  // with InspectOptions::check
  std::optional<Error> damage;    // set when the file could only be read in part
  // The selection the tensor list was made with; recorded in the JSON (a manifest written
  // with selectors says what it covers, so gguf-diff --manifest compares only that).
  Selector selection;
  bool hashes = false;  // --hashes: tensors and metadata values carry their xxh3
};

// The report of a model (throws on usage problems such as an empty selection).
InspectReport inspect(const Model& model, const InspectOptions& options);
// The report of a damaged single file: what could be read before error.
InspectReport inspect_partial(const GgufFile& file, const Error& error);

// The model at path, inspected; or a damaged file (one the reader refuses): the report of what
// could be read (inspect_partial), and the reader's error to fail with once it is shown. A file
// that cannot even be opened, or shards that parse but make no model (a split set's missing
// shard), throws the model's own error, which names the shard and any copy an interrupted
// --force replacement set aside beside it.
struct InspectedPath {
  InspectReport report;
  std::optional<Error> failure;
  std::vector<std::shared_ptr<const GgufFile>> files;  // what the report points into
};
InspectedPath inspect_path(const std::string& path, const InspectOptions& options);

struct RenderOptions {
  bool summary = true, metadata = false, tensors = false, full = false;
};
std::string render_text(const InspectReport& r, const RenderOptions& o);
std::string render_json(const InspectReport& r);
// The problems of severity error (gguf-inspect --check exits 1 when there is one).
uint64_t check_errors(const InspectReport& r);

}  // namespace gguf

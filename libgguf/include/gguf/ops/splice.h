// gguf-splice as a function: take tensors byte for byte from donor models into a base model.
// splice() checks everything and returns a Plan plus a report; write_plan() (writer.h) writes
// the plan, and the renderers print the report. Nothing here writes files.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "gguf/format/model.h"
#include "gguf/format/select.h"
#include "gguf/ops/diff.h"
#include "gguf/ops/metadata_edit.h"
#include "gguf/write/plan.h"
#include "gguf/write/plan_report.h"
#include "gguf/write/writer.h"

namespace gguf {

// One donor and the tensors to take from it. The selector is resolved against the base's
// tensor names; every selected tensor must then exist in the donor with the same shape.
struct Donor {
  const Model* model = nullptr;
  Selector selector;
};

// A parsed --take DONOR:SELECTOR value.
struct TakeSpec {
  std::string path;
  Selector selector;
};

// Parses "donor.gguf:layers=37-42,role=routed,match=REGEX". The selector starts at the first
// ':' followed by "layers=", "role=" or "match="; items are separated by ',' and a piece
// without a key continues the previous item's value, so "layers=1,3,5-7" and
// "role=routed-gate,routed-up" read naturally. Without a selector the default applies (see
// with_default_role). Usage error on a bad item.
TakeSpec parse_take(std::string_view spec);

// The default of every donor selection: a selector with neither roles nor patterns gets the
// role group "routed" (so "--layers 37-42" means the routed experts of those layers).
Selector with_default_role(Selector s);

struct SpliceOptions {
  bool allow_mixed_gate_up = false;  // else gate/up of one layer with different types is refused
  bool force_arch = false;           // else a donor of another general.architecture is refused
  MetadataEdits edits;               // --set, --set-file, --delete: applied after the donors
  // --align: the output's general.alignment (check_align_option); else the base's stays.
  std::optional<uint32_t> alignment;
};

// A row of the plan report: kCopy from the base, or kSplice from a donor.
struct SpliceRow : PlanRow {
  std::optional<size_t> donor;  // index into the donors, for spliced tensors
};

struct SpliceResult {
  Plan plan;
  std::vector<SpliceRow> rows;           // one per output tensor, in output order
  std::string base_path;                 // the base as opened (first shard)
  std::vector<std::string> donor_paths;  // per donor, the path as opened
  std::vector<std::string> selectors;    // per donor, Selector::describe()
  std::vector<std::string> inputs;       // every file read (all shards): never the output
  uint64_t bytes_before = 0;             // base file size (all shards)
  uint64_t bytes_after = 0;              // output size as one file
  uint64_t tensor_bytes_before = 0, tensor_bytes_after = 0;
  size_t spliced = 0;
  std::optional<uint32_t> file_type_before, file_type_after;  // general.file_type
  std::vector<std::string> warnings;
  // The output's keys against the base's, as gguf-diff shows them; the renderers show them
  // when the splice edits keys or has no donor.
  std::vector<MetadataDiff> key_changes;
  bool edits = false;
};

// Builds the plan: base metadata in order (split keys dropped, general.file_type recomputed
// when donors give tensors, the edits applied, splice.* provenance added), base tensors in
// order with the selected ones taken from their donor. With no donor there must be an edit or
// an alignment: the tensors are then the base's, byte for byte. Throws gguf::Error on every check
// of gguf-splice(1).
SpliceResult splice(const Model& base, std::span<const Donor> donors, const SpliceOptions& options);

// llama_ftype of a file whose main type is the ggml type id; nullopt when llama.cpp has no
// file type for it (q8_1, q8_K, integer types, f64, ...).
std::optional<uint32_t> ftype_of_type(uint32_t type_id);
// The truthful general.file_type of a set of tensors: the ftype of the type holding the most
// elements among tensors of two or more dimensions (all tensors when there are none); ties go
// to the lower type id. nullopt when that type has no llama_ftype.
std::optional<uint32_t> dominant_ftype(const std::vector<PlanTensor>& tensors);
// Truthful metadata for a plan whose tensors were re-encoded: general.file_type from
// dominant_ftype (removed when there is none), general.quantization_version = 2 when any
// tensor is quantized.
void set_file_type_keys(Plan& plan);

// Renderers: read only the result (and the write result, when the plan was written).
std::string render_splice_text(const SpliceResult& r, const WriteResult* written);
std::string render_splice_json(const SpliceResult& r, const WriteResult* written);

}  // namespace gguf

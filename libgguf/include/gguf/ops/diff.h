// gguf-diff as a function: compares two models (or a model against a gguf-inspect hash
// manifest) and returns a report; the renderers (text tables, JSON) only read the report.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "gguf/format/metadata.h"
#include "gguf/format/model.h"
#include "gguf/format/names.h"
#include "gguf/format/select.h"
#include "gguf/inputs/imatrix.h"

namespace gguf {

// A tensor as gguf-inspect --hashes --json recorded it.
struct ManifestTensor {
  std::string name;
  uint32_t type_id = 0;
  std::vector<int64_t> shape;
  std::optional<uint64_t> bytes;
  std::optional<uint64_t> xxh3;
};

// The parts of a gguf-inspect --hashes --json document that a diff compares against.
struct Manifest {
  std::string path;
  std::vector<std::string> files;
  std::string architecture;
  // Values rebuilt from their JSON form, keys and strings unescaped back to their bytes
  // (from_utf8_or_escaped). JSON holds NaN/Inf as null, so without a recorded hash a diff
  // against a manifest compares JSON forms, not bits.
  Metadata metadata;
  // Each value's xxh3 as gguf-inspect --hashes recorded it (see value_xxh3), by key; a
  // value with a recorded hash is compared by it, exactly.
  std::unordered_map<std::string, uint64_t> metadata_xxh3;
  std::vector<ManifestTensor> tensors;  // names as the manifest spells them (escaped)
  // The selection the manifest was written with (gguf-inspect --hashes --json --layers ...);
  // empty when it covers every tensor. B's tensors outside it are not compared.
  Selector selection;
};

// Parses a manifest; throws gguf::Error naming the path and what is missing or malformed.
Manifest parse_manifest(std::string_view json_text, const std::string& path);
Manifest read_manifest(const std::string& path);

struct DiffOptions {
  Selector selector;                 // restricts the tensors compared (metadata is always compared)
  bool metadata = true;              // compare metadata
  bool values = false;               // decode tensors that differ and measure the error
  bool paranoid = false;             // byte-compare tensors whose hashes agree
  bool stop_early = false;           // stop at the first difference (exit status only)
  const Model* reference = nullptr;  // three-way: A and B against this model
  // Per-column weights for the squared error (expert slices for 3-D *_exps tensors).
  const Imatrix* importance = nullptr;
  unsigned threads = 0;                              // 0 = hardware concurrency
  std::function<void(uint64_t, uint64_t)> progress;  // (bytes done, bytes total)
};

enum class MetadataChange { kAdded, kRemoved, kChanged };
std::string_view change_name(MetadataChange c);

struct MetadataDiff {
  std::string key;
  MetadataChange change = MetadataChange::kChanged;
  std::optional<Value> a, b;  // absent on the side that lacks the key
  // For two arrays: the first index at which they differ (the shorter length when one is a
  // prefix of the other); for element-type changes, 0. For two strings: the first byte.
  std::optional<uint64_t> first_difference;
};

// In order of precedence: a tensor whose shape and type both changed reports "shape".
enum class TensorChange { kSame, kOnlyA, kOnlyB, kShape, kType, kBytes };
std::string_view change_name(TensorChange c);

struct TensorSide {
  uint32_t type_id = 0;
  std::vector<int64_t> shape;
  std::optional<uint64_t> bytes;
  std::optional<uint64_t> xxh3;  // when the tensor was hashed (or the manifest holds it)
};

// The error of one decoded tensor ("x") against another ("base"), computed in double over the
// element pairs where both are finite; non-finite elements are counted per side instead.
struct ErrorMetrics {
  uint64_t count = 0;  // finite pairs
  double sum_sq_diff = 0, sum_sq_base = 0, sum_sq_x = 0, sum_dot = 0, max_abs = 0;
  uint64_t nan_base = 0, inf_base = 0, nan_x = 0, inf_x = 0;
  // Finite pairs whose squares overflow double (f64 values beyond about 1e154), left out of the
  // sums like non-finite ones.
  uint64_t too_large = 0;
  bool weighted = false;  // importance weights were applied
  double sum_w = 0, sum_w_sq_diff = 0, sum_w_sq_base = 0;
  // In a summary group: measured tensors that had no importance weights. A group pooling
  // weighted and unweighted tensors has no weighted error (it would leave theirs out).
  uint64_t unweighted_tensors = 0;

  // Each is NaN when no finite pair was measured (count 0); the weighted ones also in a
  // group that holds unweighted tensors (unweighted_tensors).
  double rmse() const;           // sqrt(sum (x-base)^2 / count)
  double rel() const;            // ||x-base|| / ||base||; NaN when ||base|| = 0 and x != base
  double cosine() const;         // <x,base> / (||x|| ||base||); NaN when a norm is 0
  double snr_db() const;         // 10 log10(||base||^2 / ||x-base||^2); +inf when equal
  double weighted_rmse() const;  // sqrt(sum w (x-base)^2 / sum w)
  double weighted_rel() const;   // sqrt(sum w (x-base)^2 / sum w base^2); NaN if sum w = 0
  double max_abs_diff() const;   // max_abs, or NaN when count is 0
  // The squared error the closer-than comparison uses: weighted when weights applied.
  double score() const { return weighted ? sum_w_sq_diff : sum_sq_diff; }
  uint64_t nonfinite() const { return nan_base + inf_base + nan_x + inf_x; }  // not too_large
  void merge(const ErrorMetrics& o);
  // Adds one tensor's metrics to a group: merge(), counting the tensor if it had no weights.
  void pool(const ErrorMetrics& tensor);
};

enum class Closer { kA, kB, kTie };
std::string_view closer_name(Closer c);

struct TensorDiff {
  std::string name;
  TensorChange change = TensorChange::kSame;
  std::optional<TensorSide> a, b;
  Role role = Role::kOther;
  std::optional<int> layer;
  std::optional<ErrorMetrics> metrics;       // B against A (with values)
  std::optional<ErrorMetrics> ref_a, ref_b;  // A and B against the reference
  std::optional<TensorSide> ref;             // the reference tensor, when measured
  std::optional<Closer> closer;              // with a reference, when both were measured
  std::string note;  // why no metrics, or an oddity such as a hash collision
};

// A summary row: tensors grouped by role or by layer, errors pooled over all their elements.
struct DiffGroup {
  std::string key;  // role name, or layer number ("-" for tensors without a layer)
  uint64_t tensors = 0, changed = 0;
  uint64_t bytes_a = 0, bytes_b = 0;
  uint64_t measured = 0;  // tensors with metrics
  ErrorMetrics metrics;
  uint64_t ref_measured = 0, closer_a = 0, closer_b = 0, ties = 0;
  ErrorMetrics ref_a, ref_b;
};

struct DiffCounts {
  uint64_t same = 0, only_a = 0, only_b = 0, shape = 0, type = 0, bytes = 0;
  uint64_t changed() const { return only_a + only_b + shape + type + bytes; }
};

struct DiffReport {
  std::vector<std::string> files_a, files_b, files_ref;  // files_a: as a manifest records them
  std::optional<std::string> manifest;                   // the path of A when A is a manifest
  Selector manifest_selection;  // what the manifest covers (empty: every tensor)
  Selector selection;           // the tensors compared (DiffOptions::selector)
  bool metadata_compared = true;
  bool identical = true;
  bool stopped_early = false;  // stop_early found a difference and skipped the rest
  bool values = false, weighted = false, reference = false;
  std::vector<MetadataDiff> metadata;
  std::vector<TensorDiff> tensors;  // A's order, then tensors only in B
  DiffCounts counts;
  uint64_t bytes_a = 0, bytes_b = 0;  // payload bytes of the compared tensors
  uint64_t hashed_bytes = 0, decoded_elements = 0;
  std::vector<DiffGroup> by_role, by_layer;
};

// The key differences from metadata a to b, as gguf-diff reports them (split.* keys, which
// describe how a model is cut into files, left out): gguf-splice shows its edits this way.
std::vector<MetadataDiff> metadata_changes(const Metadata& a, const Metadata& b);
// gguf-diff's metadata section for them: "metadata: N changed, N added, N removed" and a table.
std::string render_metadata_changes_text(const std::vector<MetadataDiff>& changes);

// Compares a against b (a is the baseline: errors are measured relative to a).
DiffReport diff_models(const Model& a, const Model& b, const DiffOptions& options);
// Compares a manifest (as A) against a model; tensors are compared by type, shape and hash.
DiffReport diff_manifest(const Manifest& a, const Model& b, const DiffOptions& options);

struct DiffRenderOptions {
  bool all = false;       // list unchanged tensors too
  bool summaries = true;  // by-role and by-layer tables
};
std::string render_diff_text(const DiffReport& r, const DiffRenderOptions& o);
std::string render_diff_json(const DiffReport& r, const DiffRenderOptions& o);

}  // namespace gguf

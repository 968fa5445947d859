// gguf-inspect --imatrix: which quantizable tensors of a model an importance matrix covers,
// whether each entry fits its tensor, and which experts calibration never routed (the silent
// cause of bad 2-bit experts). A report; the renderers print it.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "gguf/format/model.h"
#include "gguf/format/names.h"
#include "gguf/format/select.h"
#include "gguf/inputs/imatrix.h"

namespace gguf {

enum class Coverage { kCovered, kMissing, kMisfit };
std::string_view coverage_name(Coverage c);  // "covered", "missing", "misfit"

// What the matrix says about the experts of one tensor.
enum class Routing {
  kNotExperts,  // a tensor of one matrix
  kKnown,       // per-expert counts (a GGUF imatrix entry of one matrix per expert)
  kUnknown,     // a legacy .dat entry, or one vector shared by all experts: no per-expert counts
};

struct CoverageRow {
  std::string name;
  uint32_t type_id = 0;
  Role role = Role::kOther;
  std::optional<int> layer;
  int64_t columns = 0;   // ne0: the values one matrix needs
  int64_t matrices = 1;  // experts of a 3-D expert tensor, else 1
  Coverage coverage = Coverage::kMissing;
  uint64_t entry_values = 0;   // values the entry holds (0 when missing)
  int64_t entry_matrices = 0;  // matrices the entry holds (0 when missing or legacy)
  Routing routing = Routing::kNotExperts;
  std::vector<int64_t> unrouted;  // experts whose count is 0 (with kKnown)
  std::string problem;            // why the entry does not fit (kMisfit)
};

// Tensors grouped by role or by layer ("-" for tensors without one).
struct CoverageGroup {
  std::string key;
  uint64_t tensors = 0, covered = 0, missing = 0, misfit = 0;
  uint64_t experts = 0;   // expert matrices whose counts are known
  uint64_t unrouted = 0;  // of them, never routed
  uint64_t unknown = 0;   // expert tensors whose counts are unknown
};

struct CoverageReport {
  std::vector<std::string> files;  // the model's
  std::string imatrix;
  bool legacy = false;  // a legacy .dat
  std::vector<std::string> datasets;
  int64_t chunk_count = 0;
  uint64_t entries = 0;             // entries in the matrix
  std::vector<CoverageRow> rows;    // the selected quantizable tensors, in model order
  std::vector<std::string> unused;  // entries that name no tensor of the model, sorted
  CoverageGroup total;              // key "all"
  std::vector<CoverageGroup> by_role, by_layer;
};

// Checks every selected quantizable tensor (is_quantizable) of model against the matrix.
CoverageReport imatrix_coverage(const Model& model, const Imatrix& imatrix,
                                const Selector& selector = {});

std::string render_coverage_text(const CoverageReport& r);
std::string render_coverage_json(const CoverageReport& r);

}  // namespace gguf

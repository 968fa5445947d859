// The budgeted mix planner (gguf-requant --target-size / --target-bpw): per tensor, the type (or
// a donor's tensor) that minimises the model's summed measured error under a size budget.
// Measurement (planner_measure.cpp), solver (planner_solve.cpp) and plan (planner.cpp).
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "gguf/format/model.h"
#include "gguf/format/types.h"
#include "gguf/inputs/imatrix.h"
#include "gguf/ops/recipe.h"
#include "gguf/ops/requant.h"

namespace gguf {

// --target-size as llama-quantize reads it: a number (decimals allowed) and an optional unit,
// any case: b, k|kib, m|mib, g|gib, t|tib, powers of 1024; bytes rounded down. Usage error
// otherwise (kb, mb, gb are refused, as there).
uint64_t parse_target_size(std::string_view text);
// --target-bpw: bits per weight over all tensor elements, a number > 0. Usage error otherwise.
double parse_target_bpw(std::string_view text);
// --candidates T1,T2,...: ggml types with an encoder; usage error naming a bad one.
std::vector<GgmlType> parse_candidates(std::string_view list);
// The default ladder, iq1_m ... q8_0 (those that need an imatrix are dropped without one).
std::vector<GgmlType> default_candidates();

// ---- Measurement ----------------------------------------------------------------------------

// One way to store a tensor: encoded from the input (a copy when type is the input's type) or
// a donor's tensor copied byte for byte.
struct Choice {
  GgmlType type = GgmlType::F32;
  int donor = -1;      // index into the donors, -1: from the input
  uint64_t bytes = 0;  // payload bytes
  double error = 0;    // measured: sum a_j (w^ - w)^2 / sum a_j w^2 over the sampled rows
};

// A tensor of the input and the choices to measure for it.
struct MeasureTask {
  TensorRef tensor;
  std::vector<Choice> choices;
  std::vector<TensorRef> donor_tensors;  // by Choice::donor
};

struct MeasureOptions {
  const Imatrix* imatrix = nullptr;  // a_j (per expert) and routing counts; nullptr: all 1
  // Rows are sampled, the same rows for every choice, when a tensor has more than twice this
  // many elements (about this many are then taken, at least one row per matrix); 0: all rows.
  uint64_t sample_elements = uint64_t{1} << 18;
  unsigned threads = 1;
  std::function<void(uint64_t done, uint64_t total)> progress;  // may be empty
};

// Fills every choice's error. Quantizes as gguf-requant encodes (each expert with its own
// imatrix slice when the type uses one). Weighting: a_j is the imatrix slice of the row's
// matrix (1 without an entry); with a GGUF imatrix's counts each matrix's sums are weighted by
// how often it was routed (evenly when none was). Errors name the tensor.
void measure_choices(std::span<MeasureTask> tasks, const MeasureOptions& options);

// The model error of `other` against `reference`: the sum over the reference's quantizable
// tensors (that other has with the same shape) of the error above, over all rows.
struct ModelError {
  double total = 0;
  std::vector<std::pair<std::string, double>> tensors;
};
ModelError model_error(const Model& reference, const Model& other, const Imatrix* imatrix,
                       unsigned threads = 1);

// ---- Solver ---------------------------------------------------------------------------------

// One decision: choose one of its options (cost, error).
struct SolverItem {
  std::vector<uint64_t> cost;
  std::vector<double> error;
};
struct SolverResult {
  std::vector<size_t> pick;  // per item, an index into its options
  uint64_t cost = 0;
  double error = 0;
  double lp_bound = 0;  // the linear relaxation's optimum: no choice does better than this
  double lambda = 0;    // the multiplier the bisection settled on
};
// Minimises the summed error with the summed cost <= budget: per item the lower convex hull of
// its (cost, error), bisection on the Lagrange multiplier, then a greedy fill of what is left
// (any option of any item, best error drop per byte first). Requires budget >= the sum of the
// items' cheapest options.
SolverResult solve_budget(std::span<const SolverItem> items, uint64_t budget);

// ---- The planner ----------------------------------------------------------------------------

struct PlannerOptions {
  std::optional<uint64_t> target_size;  // bytes of the output file
  std::optional<double> target_bpw;     // 8 * payload bytes / all elements
  std::vector<GgmlType> candidates;     // empty: default_candidates()
  const Imatrix* imatrix = nullptr;
  std::vector<const Model*> donors;
  std::vector<std::string> donor_paths;  // as given, for the report
  bool untie_gate_up = false;
  Selector selector;            // the tensors to plan (others are copied)
  std::vector<TypeRule> rules;  // pins: the tensors they decide are not optimised
  uint64_t sample_elements = uint64_t{1} << 18;
  unsigned threads = 1;
  std::function<void(uint64_t, uint64_t)> progress;  // measurement progress; may be empty
  std::optional<uint32_t> alignment = {};  // as RequantOptions::alignment (the budget counts it)
};

struct PlannedTensor {
  std::string name;
  uint32_t type_before = 0, type_after = 0;
  uint64_t bytes = 0;   // payload
  double error = 0;     // predicted (measured on the sample)
  std::string source;   // "encode", "copy" or the donor's path
  std::string pinned;   // the user rule that decides it, or empty
  std::string tied_to;  // the tensor it shares its decision with (gate <-> up), or empty
};

struct PlannerResult {
  RequantResult requant;               // the plan to write (donor tensors copied byte for byte)
  std::vector<PlannedTensor> tensors;  // quantizable tensors, in model order
  bool by_bpw = false;
  double target_bpw = 0;
  uint64_t budget = 0;                    // bytes: of the file, or of the payloads for --target-bpw
  uint64_t min_bytes = 0, max_bytes = 0;  // the reachable range, in the budget's unit
  uint64_t file_bytes = 0;                // predicted size of the output, exact
  uint64_t payload_bytes = 0;             // all tensors' payloads
  uint64_t elements = 0;                  // all tensors' elements
  double bpw = 0;                         // 8 * payload_bytes / elements
  double error = 0;                       // predicted model error (planned + pinned tensors)
  double lp_bound = 0;                    // lower bound on the error any choice could reach
  size_t decisions = 0, pinned = 0;
  // Every tensor of the model, typed when requant may re-encode it: what the recipe is made of.
  std::vector<RecipeTensor> assignment;
};

// Plans the mix. Usage errors: both or neither target, no candidates; input errors: a budget
// outside the reachable range (the message gives the range), a donor tensor that does not fit.
PlannerResult plan_mix(const Model& model, const PlannerOptions& options);

// The recipe in --tensor-type-file format: compact, mutually exclusive PATTERN=TYPE rules, one
// per line, that give every re-encodable tensor its planned type (a donor's tensor: its type).
std::string plan_recipe(const PlannerResult& r);

std::string render_plan_text(const PlannerResult& r, const WriteResult* written);
std::string render_plan_json(const PlannerResult& r, const WriteResult* written);

}  // namespace gguf

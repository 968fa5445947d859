// gguf-requant's flows from paths to a plan, so that its main holds options and rendering only:
// a GGUF input re-encoded (requant(), or with a budget plan_mix()) with its importance matrix,
// --recipe-from rules and donors opened here; or a safetensors input imported (a single file by
// its GGUF names, a Hugging Face checkpoint by hf_names.h). The caller writes the plan with
// execute_plan (write/execute.h).
#pragma once

#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "gguf/format/model.h"
#include "gguf/format/select.h"
#include "gguf/format/types.h"
#include "gguf/inputs/hf_checkpoint.h"
#include "gguf/inputs/imatrix.h"
#include "gguf/ops/affine.h"
#include "gguf/ops/planner.h"
#include "gguf/ops/requant.h"
#include "gguf/write/execute.h"
#include "gguf/write/writer.h"

namespace gguf {

// The per-tensor types of a command line as rules, in the order RequantOptions::rules tries
// them, each kind in the order given (the library tries them in llama-quantize's order); usage
// errors for malformed ones and for --leave-output-tensor with --output-tensor-type.
struct RuleArgs {
  bool leave_output = false;                  // --leave-output-tensor
  std::optional<std::string> output_type;     // --output-tensor-type
  std::optional<std::string> embedding_type;  // --token-embedding-type
  std::vector<std::string> tensor_types;      // --tensor-type PATTERN=TYPE
  std::vector<std::string> type_files;        // --tensor-type-file FILE (read here)
  // "tensor-type" and "tensor-type-file" in command-line order: a file's rules join
  // --tensor-type's list where the file option stands.
  std::vector<std::string> tensor_type_order;
  std::vector<std::string> role_types;  // --role-type ROLE[,ROLE...]=TYPE
};
std::vector<TypeRule> parse_type_rules(const RuleArgs& args);

// A budget for the mix (--target-size or --target-bpw) and what the plan may choose from.
struct MixRequest {
  std::optional<std::string> target_size, target_bpw, candidates;  // as given
  std::vector<std::string> donors;                                 // GGUF paths
  bool untie_gate_up = false;
  std::string plan_out;  // write the plan as a --tensor-type-file recipe here (may be empty)
  std::function<void(uint64_t, uint64_t)> progress;  // measurement progress; may be empty
};

struct RequantJob {
  std::string input;
  std::optional<GgmlType> type;
  Selector selector;
  std::vector<TypeRule> rules;
  std::string recipe_from;   // rules from this GGUF's recipe, after `rules`
  std::string imatrix_path;  // may be empty
  bool exact = false;
  bool keep_split = false;  // the output in the input's shards
  unsigned threads = 1;
  std::optional<MixRequest> mix;           // a planned mix instead of requant()
  std::optional<uint32_t> alignment = {};  // --align (RequantOptions::alignment)
  std::vector<std::string> rule_files;     // the files `rules` were read from: inputs too
};

// The inputs stay where they are (the plan points into them) for as long as the result lives.
struct RequantJobResult {
  std::shared_ptr<const Model> model;  // the input
  std::shared_ptr<const Imatrix> imatrix;
  std::vector<std::shared_ptr<const Model>> donors;
  std::optional<RequantResult> requant;       // without a budget
  std::optional<PlannerResult> planned;       // with one (its requant is the plan to write)
  std::vector<std::string> inputs;            // every file read: for WriteOptions::inputs
  std::vector<uint64_t> split_tensor_counts;  // keep_split of a split set: its shards' counts
  std::vector<SideFile> side_files;  // the plan-out recipe: Execution::side_files, after the GGUF
  RequantResult& result() { return planned ? planned->requant : *requant; }
};

// Opens the input (and --recipe-from's model, the importance matrix, the donors) and plans the
// output. The plan-out path is checked against `write` and the inputs before the measuring;
// the recipe is left in side_files, to be written after the GGUF (execute_plan).
RequantJobResult run_requant_job(const RequantJob& job, const WriteOptions& write);

// A safetensors input (open_input's kSafetensors) imported: one file with no config.json nor
// index beside it by its GGUF names (import_safetensors), otherwise as a Hugging Face
// checkpoint (import_checkpoint). `config_path` may be empty (the config.json beside it); a
// non-empty `base_path` is opened after the checkpoint and becomes options.base.
struct ImportJob {
  std::shared_ptr<const HfCheckpoint> checkpoint;  // what the result points into
  std::shared_ptr<const Model> base;
  ImportResult result;
};
ImportJob run_import_job(const std::string& path, const std::string& config_path,
                         const std::string& base_path, ImportOptions options);

}  // namespace gguf

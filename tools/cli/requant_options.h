// gguf-requant's option table and the usage errors its options make alone, beside the rest of
// the command-line plumbing so that the main holds the flow only.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "cli/cli.h"
#include "gguf/ops/requant_job.h"
#include "gguf/write/execute.h"

namespace gguf::cli {

struct RequantArgs {
  std::vector<std::string> inputs;
  std::string out, type, imatrix_path, base_path, output_type, embedding_type, split_size;
  std::string config_path, recipe_from;
  // output_type and embedding_type go in once the command line says they were given.
  RuleArgs rules;
  bool json = false, no_verify = false, exact = false, quiet = false, keep_split = false;
  bool append_unmatched = false;
  unsigned threads = 0;
  uint64_t split_tensors = 0, align = 0;
  SelectorArgs selector;
  Execution ex;  // dry_run and write.force
  std::string target_size, target_bpw, candidates, plan_out;
  std::vector<std::string> donors;
  bool untie = false;
};

// The options --help lists (desc) and the positional input (hidden, pos), filling a.
void add_requant_options(RequantArgs& a, po::options_description& desc,
                         po::options_description& hidden, po::positional_options_description& pos);

// What the command line asks for once its options are checked together.
struct RequantRequest {
  std::optional<GgmlType> type;  // --type
  Selector selector;
  std::vector<TypeRule> rules;  // the per-tensor types (--tensor-type-file read)
  std::optional<MixRequest> mix;
  std::string target;                 // "--target-size" or "--target-bpw", for messages
  std::optional<uint32_t> alignment;  // --align
};

// Usage errors first, whatever the inputs (exit 2 must not depend on whether a file opens):
// fills a.ex.write and returns the request.
RequantRequest check_requant_args(RequantArgs& a, const po::variables_map& vm, int argc,
                                  char** argv);
// The usage errors of a safetensors input (an import), and of a GGUF input.
void check_import_args(const RequantArgs& a, const RequantRequest& r);
void check_gguf_args(const RequantArgs& a, const RequantRequest& r);

}  // namespace gguf::cli

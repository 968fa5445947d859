// The last step of every operation that writes (splice, requant, the packed-affine import):
// write the plan, or on a dry run check what the write would refuse, and where a proof is
// asked for run it on the written files before they reach their paths.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "gguf/format/model.h"
#include "gguf/write/writer.h"

namespace gguf {

// Checks the written output (opened by the validated reader) against what it should hold,
// given the paths the files will have; throws to keep them from their paths.
using ProveFn = std::function<void(const Model& written, std::span<const std::string> paths)>;

// A file that goes with the output (gguf-requant --plan-out's recipe).
struct SideFile {
  std::string path;
  std::string bytes;
};

struct Execution {
  WriteOptions write;  // its before_commit is set from prove
  bool dry_run = false;
  ProveFn prove;  // empty: no proof
  // Checked with the output before anything is written; each written (write_file: temp file,
  // rename) only once the output is complete, verified and in its place, or on a dry run once
  // the output's checks passed: none appears beside an output that failed.
  std::vector<SideFile> side_files;
};

struct Executed {
  std::optional<WriteResult> written;  // empty on a dry run
  uint64_t bytes = 0;                  // written, or on a dry run what would be
};

// write_plan(plan, path), with the proof run before the commit; on a dry run check_plan: the
// same refusals (an output that is an input, exists without --force, ...), nothing written.
Executed execute_plan(const Plan& plan, const std::string& path, const Execution& e);

}  // namespace gguf

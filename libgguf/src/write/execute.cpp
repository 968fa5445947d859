// execute_plan: the write / dry-run / prove flow every writing tool runs.
#include "gguf/write/execute.h"

namespace gguf {

Executed execute_plan(const Plan& plan, const std::string& path, const Execution& e) {
  Executed out;
  if (e.dry_run) {
    out.bytes = check_plan(plan, path, e.write).bytes;
    return out;
  }
  WriteOptions wo = e.write;
  if (e.prove)
    wo.before_commit = [&prove = e.prove, names = check_plan(plan, path, wo).paths](
                           const Model& m) { prove(m, names); };
  out.written = write_plan(plan, path, wo);
  out.bytes = out.written->bytes;
  return out;
}

}  // namespace gguf

// execute_plan: the write / dry-run / prove flow every writing tool runs.
#include "gguf/write/execute.h"

namespace gguf {

namespace {

void write_side_files(const Execution& e) {
  for (const SideFile& f : e.side_files)
    write_file(f.path, {reinterpret_cast<const uint8_t*>(f.bytes.data()), f.bytes.size()}, e.write);
}

}  // namespace

Executed execute_plan(const Plan& plan, const std::string& path, const Execution& e) {
  Executed out;
  for (const SideFile& f : e.side_files) check_output(f.path, e.write);
  if (e.dry_run) {
    out.bytes = check_plan(plan, path, e.write).bytes;
    write_side_files(e);
    return out;
  }
  WriteOptions wo = e.write;
  if (e.prove)
    wo.before_commit = [&prove = e.prove, names = check_plan(plan, path, wo).paths](
                           const Model& m) { prove(m, names); };
  out.written = write_plan(plan, path, wo);
  out.bytes = out.written->bytes;
  write_side_files(e);
  return out;
}

}  // namespace gguf

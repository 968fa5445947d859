// gguf-requant: re-encode the quantizable tensors of a GGUF with ggml codecs (one type for all,
// per tensor as llama-quantize's --tensor-type, or a mix planned to a budget), or import a
// packed-affine safetensors file or checkpoint into the ggml types that hold its values exactly.
// Options -> run_requant_job() or run_import_job() -> execute_plan() -> render; see
// man/gguf-requant.1.
#include <fmt/format.h>

#include "cli/cli.h"
#include "cli/requant_options.h"
#include "gguf/base/error.h"
#include "gguf/base/escape.h"
#include "gguf/inputs/input.h"
#include "gguf/ops/affine.h"
#include "gguf/ops/exact.h"
#include "gguf/ops/planner.h"
#include "gguf/ops/requant_job.h"
#include "gguf/write/execute.h"

namespace {

namespace po = boost::program_options;
using namespace gguf;

constexpr std::string_view kTool = "gguf-requant";
constexpr std::string_view kUsage =
    "IN.gguf -o OUT.gguf [--type TYPE] [--tensor-type PATTERN=TYPE ...] [OPTIONS]   (a type or "
    "a rule)\n       gguf-requant IN.safetensors|INDEX.json|DIR -o OUT.gguf [--type "
    "q4_1|q5_1|f32] [--base BASE.gguf] [OPTIONS]";

// Writes the plan (or checks it, on --dry-run: then `bytes_after` is what the write would
// write), the proof running before the output reaches its path; then prints the report.
template <class Result, class Render>
int write_and_render(const cli::RequantArgs& a, const Plan& plan, uint64_t& bytes_after,
                     const char* label, const Result& result, const Render& render) {
  Execution ex = a.ex;
  cli::Progress progress(a.quiet || ex.dry_run ? "" : label);
  if (!a.quiet) ex.write.progress = progress.callback();
  const Executed done = execute_plan(plan, a.out, ex);
  if (!done.written) bytes_after = done.bytes;
  if (a.quiet) return 0;
  fmt::print("{}", render(result, done.written ? &*done.written : nullptr, a.json));
  if (!a.json)  // the --plan-out recipe, written on a dry run too
    for (const SideFile& f : ex.side_files)
      fmt::print("wrote recipe '{}'\n", escape_for_terminal(f.path));
  return 0;
}

int run(int argc, char** argv) {
  cli::RequantArgs a;
  po::options_description desc("Options"), hidden;
  po::positional_options_description pos;
  cli::add_requant_options(a, desc, hidden, pos);
  po::variables_map vm;
  if (cli::parse_command_line(argc, argv, kTool, kUsage, desc, hidden, pos, vm)) return 0;
  cli::RequantRequest r = cli::check_requant_args(a, vm, argc, argv);
  const auto notes = [&](const std::vector<std::string>& ns) {
    if (!a.quiet)
      for (const auto& note : ns) cli::eprint("{}: note: {}\n", kTool, terminal_safe(note));
  };
  if (open_input(a.inputs.front()).format == InputFormat::kSafetensors) {
    cli::check_import_args(a, r);
    ImportJob job = run_import_job(a.inputs.front(), a.config_path, a.base_path,
                                   {r.type, nullptr, a.threads, a.append_unmatched, r.alignment});
    ImportResult& result = job.result;
    notes(result.notes);
    a.ex.write.inputs = result.inputs;
    std::optional<ImportProof> proof;
    if (!a.no_verify)
      a.ex.prove = [&](const Model& m, auto names) {
        proof = prove_import(result, m, a.threads, names);
      };
    return write_and_render(a, result.plan, result.bytes_after, "import", result,
                            [&](const ImportResult& res, const WriteResult* w, bool json) {
                              const ImportProof* p = proof ? &*proof : nullptr;
                              return json ? render_import_json(res, w, p)
                                          : render_import_text(res, w, p);
                            });
  }
  cli::check_gguf_args(a, r);
  RequantJob job{a.inputs.front(),
                 r.type,
                 std::move(r.selector),
                 std::move(r.rules),
                 a.recipe_from,
                 a.imatrix_path,
                 a.exact,
                 a.keep_split,
                 a.threads,
                 std::move(r.mix),
                 r.alignment,
                 a.rules.type_files};
  std::optional<cli::Progress> measure;
  if (job.mix && !a.quiet) job.mix->progress = measure.emplace("measure").callback();
  RequantJobResult done = run_requant_job(job, a.ex.write);
  measure.reset();
  notes(done.result().notes);
  a.ex.write.inputs = done.inputs;
  a.ex.write.split_tensor_counts = done.split_tensor_counts;
  a.ex.side_files = std::move(done.side_files);
  if (done.planned)
    return write_and_render(a, done.planned->requant.plan, done.planned->file_bytes, "requant",
                            *done.planned,
                            [](const PlannerResult& res, const WriteResult* w, bool json) {
                              return json ? render_plan_json(res, w) : render_plan_text(res, w);
                            });
  RequantResult& result = *done.requant;
  std::optional<ExactProof> proof;
  if (a.exact && !a.no_verify)
    a.ex.prove = [&](const Model& m, auto names) {
      proof = prove_exact(*done.model, result, m, a.threads, names);
    };
  return write_and_render(a, result.plan, result.bytes_after, "requant", result,
                          [&](const RequantResult& res, const WriteResult* w, bool json) {
                            const ExactProof* p = proof ? &*proof : nullptr;
                            return json ? render_requant_json(res, w, p)
                                        : render_requant_text(res, w, p);
                          });
}

}  // namespace

int main(int argc, char** argv) {
  return cli::run_tool(kTool, argc, argv, [&] { return run(argc, argv); });
}

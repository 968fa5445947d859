// gguf-inspect: summary, metadata, tensors, hashes and --check of a GGUF (or a split set), its
// type recipe (--recipe) or an importance matrix's coverage (--imatrix). Options ->
// inspect_path() / extract_recipe() / imatrix_coverage() -> render; see man/gguf-inspect.1.
#include <fmt/format.h>

#include "cli/cli.h"
#include "gguf/base/escape.h"
#include "gguf/ops/imatrix_coverage.h"
#include "gguf/ops/inspect.h"
#include "gguf/ops/recipe.h"
#include "gguf/render/map_svg.h"
#include "gguf/write/writer.h"

namespace {

namespace po = boost::program_options;
using namespace gguf;

constexpr std::string_view kTool = "gguf-inspect";
constexpr std::string_view kUsage =
    "[OPTIONS] FILE.gguf\n       gguf-inspect --imatrix IMATRIX [--json] [SELECTORS] FILE.gguf";

int run(int argc, char** argv) {
  std::vector<std::string> files;
  std::string imatrix, map_path;
  bool json = false, meta = false, tensors = false, full = false, check = false, hashes = false;
  bool recipe = false, force = false;
  unsigned threads = 0;
  cli::SelectorArgs sel;
  po::options_description desc("Options");
  desc.add_options()("help,h", "show this help and exit")("version", "show the version and exit")(
      "metadata,m", po::bool_switch(&meta), "list all metadata keys")(
      "tensors,t", po::bool_switch(&tensors),
      "list tensors: name, type, shape, offset, bytes, bpw, role, layer (and the shard of a "
      "split set, from 1)")("full", po::bool_switch(&full),
                            "do not abbreviate long metadata arrays and strings")(
      "json", po::bool_switch(&json), "print one JSON document with everything on stdout")(
      "check", po::bool_switch(&check),
      "report what llama.cpp's loader would refuse; exit 1 if any error (warnings do not "
      "change the exit status)")(
      "hashes", po::bool_switch(&hashes),
      "add each tensor's xxh3-64 (a manifest gguf-diff --manifest reads)")(
      "imatrix", po::value(&imatrix),
      "report how IMATRIX (GGUF or legacy .dat) covers the quantizable tensors: entries, "
      "lengths, experts never routed; exit 1 if an entry does not fit its tensor")(
      "recipe", po::bool_switch(&recipe),
      "print the file's type recipe: PATTERN=TYPE rules, one per line, for every tensor a "
      "requant would re-encode (what llama-quantize --tensor-type-file and gguf-requant "
      "--tensor-type-file read; a summary on stderr)")(
      "map", po::value(&map_path),
      "also draw the mix as an SVG grid (layers by roles, coloured by bits per weight) into "
      "this file")("force", po::bool_switch(&force), "replace an existing --map file");
  cli::add_threads_option(desc, &threads, "hashing/check");
  sel.add_to(desc);
  po::options_description hidden;
  hidden.add_options()("file", po::value(&files)->composing());
  po::positional_options_description pos;
  pos.add("file", -1);
  po::variables_map vm;
  if (cli::parse_command_line(argc, argv, kTool, kUsage, desc, hidden, pos, vm)) return 0;
  if (files.empty()) usage_error("missing FILE.gguf, the model to inspect");
  cli::check_positional(files, 1, "one model at a time; a split set by its first shard");
  const std::string& path = files.front();
  if (recipe && (check || hashes || meta || tensors || !map_path.empty()))
    usage_error("--recipe excludes --check, --hashes, --map, -m and -t");
  if (!imatrix.empty() && (meta || tensors || check || hashes || full || !map_path.empty()))
    usage_error(
        "--imatrix prints a coverage report alone (no -m, -t, --full, --check, --hashes, --map)");
  WriteOptions wo;
  wo.force = force;
  wo.inputs = {path};
  if (!map_path.empty()) check_output(map_path, wo);
  if (recipe) {
    const Recipe r = extract_recipe(Model::open(path), sel.parse());
    fmt::print("{}", json ? render_recipe_json(r) : render_recipe_text(r));
    if (!json) cli::eprint("{}: {}\n", kTool, recipe_summary(r));
    return 0;
  }
  if (!imatrix.empty()) {
    const auto r = imatrix_coverage(Model::open(path), Imatrix::load(imatrix), sel.parse());
    fmt::print("{}", json ? render_coverage_json(r) : render_coverage_text(r));
    return r.total.misfit ? 1 : 0;
  }

  InspectOptions opt{sel.parse(), hashes, check, threads, {}};
  const RenderOptions ro{!(meta || tensors) || check, meta, tensors || hashes, full};
  cli::Progress progress(hashes ? "hashing" : "checking");
  opt.progress = progress.callback();
  const InspectedPath inspected = inspect_path(path, opt);
  const InspectReport& report = inspected.report;
  if (!inspected.failure && !map_path.empty()) {
    const std::string svg = render_map_svg(type_map(report));
    wo.inputs.clear();
    for (const auto& f : inspected.files) wo.inputs.push_back(f->path());
    write_file(map_path, {reinterpret_cast<const uint8_t*>(svg.data()), svg.size()}, wo);
  }
  fmt::print("{}", json ? render_json(report) : render_text(report, ro));
  if (inspected.failure) {
    // A damaged file: what could be read is shown, then the tool fails with the reader's error.
    cli::json_document_printed();
    throw *inspected.failure;
  }
  if (!check) return 0;
  for (const auto& p : report.problems)
    cli::eprint("{}: {}: {}\n", kTool, p.severity, terminal_safe(format_problem(p)));
  const uint64_t errors = check_errors(report);
  if (!json)
    fmt::print("\ncheck: {} error(s), {} warning(s)\n", errors, report.problems.size() - errors);
  return errors ? 1 : 0;
}

}  // namespace

int main(int argc, char** argv) {
  return cli::run_tool(kTool, argc, argv, [&] { return run(argc, argv); });
}

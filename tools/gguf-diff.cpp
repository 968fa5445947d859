// gguf-diff: compare two GGUF models (or a model against a gguf-inspect hash manifest) for
// people and for scripts. Exit status as diff(1): 0 identical, 1 different, 2 trouble.
#include <fmt/format.h>

#include <cerrno>
#include <cstdio>
#include <optional>
#include <string>
#include <system_error>
#include <vector>

#include "cli/cli.h"
#include "gguf/base/error.h"
#include "gguf/format/model.h"
#include "gguf/ops/diff.h"
#include "gguf/render/map_svg.h"
#include "gguf/write/writer.h"

namespace {

namespace po = boost::program_options;
using namespace gguf;

constexpr std::string_view kTool = "gguf-diff";
constexpr std::string_view kUsage =
    "[options] A.gguf B.gguf\n"
    "       gguf-diff [options] --manifest MANIFEST.json B.gguf";

int run(int argc, char** argv) {
  std::vector<std::string> inputs;
  std::string manifest_path, reference_path, imatrix_path, map_path;
  unsigned threads = 0;
  cli::SelectorArgs selector;
  po::options_description desc("Options");
  desc.add_options()("help,h", "show this help and exit")("version", "show the version and exit")(
      "values",
      "decode tensors that differ and report RMSE, max|a-b|, relative error, cosine "
      "similarity, SNR and NaN/Inf counts")(
      "imatrix", po::value(&imatrix_path)->value_name("FILE"),
      "weight squared errors per column by this importance matrix (implies --values)")(
      "reference", po::value(&reference_path)->value_name("REF.gguf"),
      "three-way: measure A and B against REF and say which is closer (implies --values)")(
      "manifest", po::value(&manifest_path)->value_name("MANIFEST.json"),
      "compare B against a gguf-inspect --hashes --json manifest instead of a file A")(
      "paranoid", "byte-compare tensors whose xxh3 hashes agree")(
      "no-metadata", "compare tensors only")("all", "list unchanged tensors too")(
      "no-summary", "leave out the by-role and by-layer tables")(
      "json", "print the report as one JSON document")(
      "quiet,q", "print nothing; exit status only (stops at the first difference)")(
      "map", po::value(&map_path)->value_name("OUT.svg"),
      "with --values: also draw B as an SVG grid (layers x roles) coloured by its relative "
      "error against A (importance-weighted with --imatrix)")("force",
                                                              "replace an existing --map file");
  cli::add_threads_option(desc, &threads, "worker");
  selector.add_to(desc);
  po::options_description hidden;
  hidden.add_options()("input", po::value(&inputs)->composing());
  po::positional_options_description positional;
  positional.add("input", -1);
  po::variables_map vm;
  if (cli::parse_command_line(argc, argv, kTool, kUsage, desc, hidden, positional, vm)) return 0;

  const bool manifest = vm.count("manifest");
  const size_t want = manifest ? 1 : 2;
  cli::check_positional(inputs, want,
                        manifest ? "--manifest compares one model" : "two models, A and B");
  if (inputs.size() != want)
    usage_error(manifest ? fmt::format("expected one model with --manifest, got {}", inputs.size())
                         : fmt::format("expected two models A and B, got {}", inputs.size()));
  const bool quiet = vm.count("quiet"), json = vm.count("json");
  if (quiet && json) usage_error("--quiet and --json exclude each other");
  if (manifest &&
      (vm.count("paranoid") || vm.count("values") || vm.count("imatrix") || vm.count("reference")))
    usage_error(
        "--values, --imatrix, --reference and --paranoid need the bytes of both sides; a "
        "manifest holds only hashes");

  if (!map_path.empty() && !(vm.count("values") || vm.count("imatrix") || vm.count("reference")))
    usage_error("--map draws the errors --values measures: give --values too");
  if (!map_path.empty() && quiet)
    usage_error("--quiet stops at the first difference: it cannot draw --map");
  WriteOptions map_options;
  map_options.force = vm.count("force") > 0;
  map_options.inputs = inputs;
  for (const auto* extra : {&imatrix_path, &reference_path})
    if (!extra->empty()) map_options.inputs.push_back(*extra);
  if (!map_path.empty()) check_output(map_path, map_options);
  DiffOptions options;
  options.selector = selector.parse();
  options.metadata = !vm.count("no-metadata");
  options.paranoid = vm.count("paranoid");
  options.values = vm.count("values") || vm.count("imatrix") || vm.count("reference");
  options.stop_early = quiet;
  options.threads = threads;
  std::optional<Model> reference;
  if (!reference_path.empty()) options.reference = &reference.emplace(Model::open(reference_path));
  std::optional<Imatrix> importance;
  if (!imatrix_path.empty()) options.importance = &importance.emplace(Imatrix::load(imatrix_path));

  cli::Progress progress(quiet ? "" : "comparing");
  if (!quiet) options.progress = progress.callback();
  const Model b = Model::open(inputs.back());
  DiffReport report;
  if (manifest) {
    report = diff_manifest(read_manifest(manifest_path), b, options);
  } else {
    const Model a = Model::open(inputs.front());
    report = diff_models(a, b, options);
  }
  if (!map_path.empty()) {
    const std::string svg = render_map_svg(error_map(report));
    write_file(map_path, {reinterpret_cast<const uint8_t*>(svg.data()), svg.size()}, map_options);
  }
  if (!quiet) {
    const DiffRenderOptions render{vm.count("all") > 0, !vm.count("no-summary")};
    const std::string out =
        json ? render_diff_json(report, render) : render_diff_text(report, render);
    // As fmt::print fails (run_tool reports it with the reason).
    if (std::fwrite(out.data(), 1, out.size(), stdout) != out.size() || std::fflush(stdout) != 0)
      throw std::system_error(errno, std::generic_category(), "cannot write to file");
  }
  return report.identical ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  return cli::run_tool(
      kTool, argc, argv, [&] { return run(argc, argv); }, 2);
}

// gguf-inspect: look inside a GGUF file or split set.
#include <fmt/format.h>

#include "cli/cli.h"
#include "gguf/base/escape.h"
#include "gguf/ops/imatrix_coverage.h"
#include "gguf/ops/inspect.h"
#include "gguf/ops/recipe.h"
#include "gguf/render/map_svg.h"
#include "gguf/write/writer.h"

namespace po = boost::program_options;

int main(int argc, char** argv) {
  return gguf::cli::run_tool("gguf-inspect", argc, argv, [&] {
    std::vector<std::string> files;
    std::string imatrix;
    bool json = false, meta = false, tensors = false, full = false, check = false, hashes = false;
    bool recipe = false, force = false;
    std::string map_path;
    unsigned threads = 0;
    gguf::cli::SelectorArgs sel;
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
    gguf::cli::add_threads_option(desc, &threads, "hashing/check");
    sel.add_to(desc);
    po::options_description hidden;
    hidden.add_options()("file", po::value(&files)->composing());
    po::positional_options_description pos;
    pos.add("file", -1);
    po::variables_map vm;
    if (gguf::cli::parse_command_line(argc, argv, "gguf-inspect",
                                      "[OPTIONS] FILE.gguf\n       gguf-inspect --imatrix IMATRIX "
                                      "[--json] [SELECTORS] FILE.gguf",
                                      desc, hidden, pos, vm))
      return 0;
    if (files.empty()) gguf::usage_error("missing FILE.gguf, the model to inspect");
    gguf::cli::check_positional(files, 1, "one model at a time; a split set by its first shard");
    const std::string& path = files.front();
    if (recipe && (check || hashes || meta || tensors || !map_path.empty()))
      gguf::usage_error("--recipe excludes --check, --hashes, --map, -m and -t");
    gguf::WriteOptions wo;
    wo.force = force;
    wo.inputs = {path};
    if (!map_path.empty()) gguf::check_output(map_path, wo);
    if (recipe) {
      const gguf::Recipe r = gguf::extract_recipe(gguf::Model::open(path), sel.parse());
      fmt::print("{}", json ? gguf::render_recipe_json(r) : gguf::render_recipe_text(r));
      if (!json) gguf::cli::eprint("gguf-inspect: {}\n", gguf::recipe_summary(r));
      return 0;
    }

    if (!imatrix.empty()) {
      if (meta || tensors || check || hashes || full)
        gguf::usage_error(
            "--imatrix prints a coverage report alone (no -m, -t, --full, --check, --hashes)");
      const auto r = gguf::imatrix_coverage(gguf::Model::open(path), gguf::Imatrix::load(imatrix),
                                            sel.parse());
      fmt::print("{}", json ? gguf::render_coverage_json(r) : gguf::render_coverage_text(r));
      return r.total.misfit ? 1 : 0;
    }
    gguf::InspectOptions opt{sel.parse(), hashes, check, threads, {}};
    gguf::RenderOptions ro{!(meta || tensors) || check, meta, tensors || hashes, full};
    std::optional<gguf::Model> model;
    gguf::InspectReport report;
    try {
      model = gguf::Model::open(path);
    } catch (const gguf::Error& e) {
      // A damaged file: show what could be read, then fail with the error. A file that cannot
      // even be opened (a split set's missing shard) keeps the model's own error, which names
      // the shard and any copy an interrupted --force replacement set aside beside it.
      std::shared_ptr<const gguf::ByteSource> source;
      try {
        source = gguf::open_file_source(e.path().empty() ? path : e.path());
      } catch (const gguf::Error&) {
      }
      if (!source) throw;
      std::optional<gguf::Error> err;
      auto partial = gguf::GgufFile::parse_partial(std::move(source), err);
      if (!err) throw;
      report = gguf::inspect_partial(*partial, *err);
      fmt::print("{}", json ? gguf::render_json(report) : gguf::render_text(report, ro));
      gguf::cli::json_document_printed();
      throw;
    }
    gguf::cli::Progress progress(hashes ? "hashing" : "checking");
    opt.progress = progress.callback();
    report = gguf::inspect(*model, opt);
    if (!map_path.empty()) {
      const std::string svg = gguf::render_map_svg(gguf::type_map(report));
      wo.inputs = model->paths();
      gguf::write_file(map_path, {reinterpret_cast<const uint8_t*>(svg.data()), svg.size()}, wo);
    }
    fmt::print("{}", json ? gguf::render_json(report) : gguf::render_text(report, ro));
    if (check) {
      for (const auto& p : report.problems)
        gguf::cli::eprint("gguf-inspect: {}: {}\n", p.severity,
                          gguf::terminal_safe(gguf::format_problem(p)));
      const uint64_t errors = gguf::check_errors(report);
      if (!json)
        fmt::print("\ncheck: {} error(s), {} warning(s)\n", errors,
                   report.problems.size() - errors);
      return errors ? 1 : 0;
    }
    return 0;
  });
}

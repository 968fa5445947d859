// gguf-splice: take tensors byte for byte from donor GGUFs into a base GGUF (no requantizing).
// Options -> splice() -> execute_plan() -> render; see man/gguf-splice.1.
#include <fmt/format.h>

#include <map>
#include <memory>

#include "cli/cli.h"
#include "gguf/base/error.h"
#include "gguf/base/escape.h"
#include "gguf/ops/splice.h"
#include "gguf/write/execute.h"

namespace {

namespace po = boost::program_options;
using namespace gguf;

constexpr std::string_view kTool = "gguf-splice";
constexpr std::string_view kUsage =
    "BASE.gguf [--donor DONOR.gguf [--layers L] [--role R] [--match RE] | --take SPEC ...]\n"
    "       [--set KEY=VALUE ...] [--set-file KEY=PATH ...] [--delete KEY ...] [--align N]\n"
    "       (-o OUT.gguf | --dry-run) [options]\n\n"
    "Copies the selected tensors' payloads from the donors into a copy of BASE, byte for byte,\n"
    "and writes a verified GGUF. The selection is made on BASE's tensor names; each selected\n"
    "tensor must exist in its donor with the same shape. Without --role or --match, the role\n"
    "is 'routed' (the routed experts' gate, up and down).\n\n"
    "--take SPEC is DONOR.gguf:layers=37-42,role=routed,match=REGEX (any items, any order;\n"
    "a comma piece without a key continues the previous item, e.g. layers=1,3,5-7).\n"
    "Repeat --take for several donors; a tensor claimed by two donors is an error.\n\n"
    "Key edits (--set, --set-file, --delete) apply to the output's metadata, with or without a\n"
    "donor; with no donor the tensors are BASE's, byte for byte.\n\n"
    "Example (the ds4 recipe): gguf-splice ds4-2bit.gguf --donor ds4-q4_K.gguf --layers 37-42\n"
    "       -o ds4-2bit-q4tail.gguf\n"
    "Example (a key edit): gguf-splice model.gguf --set-file tokenizer.chat_template=t.jinja\n"
    "       -o fixed.gguf";

int run(int argc, char** argv) {
  std::string base_path, donor_path, out, split_size;
  std::vector<std::string> takes, args, sets, set_files, deletes;
  uint64_t split_tensors = 0, align = 0;
  cli::SelectorArgs sel;
  po::options_description desc("Options");
  desc.add_options()("help,h", "show this help and exit")("version", "show the version and exit")(
      "base", po::value(&base_path), "the base model (also the first positional argument)")(
      "donor", po::value(&donor_path),
      "take tensors from DONOR, selected by --layers/--role/--match");
  sel.add_to(desc);
  desc.add_options()("take", po::value(&takes)->composing(),
                     "take tensors from a donor: DONOR.gguf:layers=..,role=..,match=.. "
                     "(repeatable)")("output,o", po::value(&out), "write the result to OUT")(
      "force", "replace OUT if it exists")("dry-run", "show the plan, write nothing")(
      "json", "print the plan (and result) as JSON on stdout")(
      "quiet,q", "print no report and no progress (warnings and errors still go to stderr)")(
      "no-verify", "skip reading the output back to compare every payload's xxh3")(
      "split-max-size", po::value(&split_size),
      "write a split set, shards of at most SIZE (e.g. 4G)")(
      "split-max-tensors", cli::count_value(&split_tensors, UINT64_MAX, "--split-max-tensors", 1),
      "write a split set, N tensors per shard")(
      "keep-split", "write the output in the base's shards (the same tensors in each)")(
      "allow-mixed-gate-up", "permit gate and up experts of a layer to differ in type")(
      "force-arch", "permit donors of another general.architecture")(
      "set", po::value(&sets)->composing(),
      "set a key: KEY=VALUE (an existing key keeps its type), KEY:TYPE=VALUE, "
      "KEY:[TYPE]=V1,V2 (TYPE: u8 ... f64, bool, str; repeatable)")(
      "set-file", po::value(&set_files)->composing(),
      "set a key to a file's bytes, KEY=PATH (KEY:[TYPE]=PATH: an array, one element per line)")(
      "delete", po::value(&deletes)->composing(), "delete a key (repeatable)")(
      "force-keys", "permit deleting or retyping keys llama.cpp needs or reads with one type")(
      "align", cli::count_value(&align, UINT64_MAX, "--align"),
      "write general.alignment = N (a power of two >= 32; 4096 lets CoW file systems share "
      "payload blocks); default: the base's");
  po::options_description hidden;
  hidden.add_options()("args", po::value(&args)->composing());
  po::positional_options_description positional;
  positional.add("args", -1);
  po::variables_map vm;
  if (cli::parse_command_line(argc, argv, kTool, kUsage, desc, hidden, positional, vm)) return 0;

  const char* const where = "donors go after --donor or --take, the output after -o";
  if (!base_path.empty()) {
    cli::check_positional(args, 0, where);
  } else if (!args.empty()) {
    cli::check_positional(args, 1, where);
    base_path = args.front();
  }
  const bool dry_run = vm.count("dry-run") > 0, quiet = vm.count("quiet") > 0;
  if (quiet && vm.count("json")) usage_error("--quiet and --json exclude each other");
  if (base_path.empty()) usage_error("missing BASE.gguf, the model to splice into");
  if (out.empty() && !dry_run) usage_error("missing -o OUT.gguf (or use --dry-run)");
  if (sel.given() && donor_path.empty())
    usage_error("--layers, --role and --match select from --donor; give --donor (or use --take)");

  std::vector<TakeSpec> specs;
  if (!donor_path.empty()) specs.push_back({donor_path, sel.parse()});
  for (const auto& t : takes) specs.push_back(parse_take(t));
  Execution ex;
  ex.dry_run = dry_run;
  WriteOptions& wo = ex.write;
  wo.force = vm.count("force") > 0;
  wo.verify = vm.count("no-verify") == 0;
  if (!split_size.empty()) wo.split_max_size = cli::parse_size(split_size, "split-max-size");
  wo.split_max_tensors = split_tensors;
  const bool keep_split = vm.count("keep-split") > 0;
  if (keep_split && (wo.split_max_size || wo.split_max_tensors))
    usage_error("--keep-split excludes --split-max-size and --split-max-tensors");

  SpliceOptions so;
  so.allow_mixed_gate_up = vm.count("allow-mixed-gate-up") > 0;
  so.force_arch = vm.count("force-arch") > 0;
  so.edits = parse_edits(sets, set_files, deletes, vm.count("force-keys") > 0);
  if (vm.count("align")) so.alignment = check_align_option(align);

  const Model base = Model::open(base_path);
  if (keep_split && base.shards().size() > 1) wo.split_tensor_counts = shard_tensor_counts(base);
  std::map<std::string, std::unique_ptr<Model>> models;  // a donor named twice opens once
  std::vector<Donor> donors;
  for (auto& s : specs) {
    auto& m = models[s.path];
    if (!m) m = std::make_unique<Model>(Model::open(s.path));
    donors.push_back({m.get(), with_default_role(std::move(s.selector))});
  }
  SpliceResult r = splice(base, donors, so);
  for (const auto& w : r.warnings)
    gguf::cli::eprint("{}: warning: {}\n", kTool, gguf::terminal_safe(w));

  wo.inputs = r.inputs;
  cli::Progress progress(quiet ? "" : "splicing");
  if (!quiet) wo.progress = progress.callback();
  const Executed done = execute_plan(r.plan, out, ex);
  // On a dry run, the size the write would have (a split set's shards each have a header).
  if (!done.written) r.bytes_after = done.bytes;
  const WriteResult* w = done.written ? &*done.written : nullptr;
  if (!quiet)
    fmt::print("{}", vm.count("json") ? render_splice_json(r, w) : render_splice_text(r, w));
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  return cli::run_tool(kTool, argc, argv, [&] { return run(argc, argv); });
}

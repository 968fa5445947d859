// gguf-requant's option table and the usage errors of its options.
#include "cli/requant_options.h"

#include "gguf/base/error.h"
#include "gguf/base/escape.h"
#include "gguf/codecs/codecs.h"
#include "gguf/write/plan.h"

namespace gguf::cli {

void add_requant_options(RequantArgs& a, po::options_description& desc,
                         po::options_description& hidden, po::positional_options_description& pos) {
  desc.add_options()("help,h", "show this help and exit")("version", "show the version and exit")(
      "output,o", po::value(&a.out), "output GGUF path (required unless --dry-run)")(
      "type", po::value(&a.type),
      "target type, any case: q4_K, q8_0, f16, bf16, ... (for a GGUF input: of every "
      "selected tensor no per-tensor type decides; required unless one is given)")(
      "tensor-type", po::value(&a.rules.tensor_types)->composing(),
      "PATTERN=TYPE: tensors whose name contains a match of the regex PATTERN get TYPE, as "
      "llama-quantize's (repeatable: the first that matches decides; TYPE 'keep' copies)")(
      "tensor-type-file", po::value(&a.rules.type_files)->composing(),
      "FILE of PATTERN=TYPE rules as llama-quantize reads it (whitespace-separated, patterns "
      "lowercased; '#' starts a comment): they join --tensor-type's where the option stands")(
      "recipe-from", po::value(&a.recipe_from),
      "give each tensor the type OTHER.gguf's recipe (gguf-inspect --recipe) gives the tensor "
      "of its name (after --tensor-type and --role-type, before --type)")(
      "role-type", po::value(&a.rules.role_types)->composing(),
      "ROLE[,ROLE...]=TYPE: tensors of these roles get TYPE (repeatable, after --tensor-type; "
      "e.g. routed-down=q2_K)")("output-tensor-type", po::value(&a.output_type),
                                "the type of output.weight (before --tensor-type; with tied "
                                "embeddings: of the token embedding, after --tensor-type)")(
      "token-embedding-type", po::value(&a.embedding_type),
      "the type of token_embd.weight and per_layer_token_embd.weight (tried first)")(
      "leave-output-tensor", po::bool_switch(&a.rules.leave_output),
      "copy output.weight as it is (as --output-tensor-type keep)")(
      "imatrix", po::value(&a.imatrix_path), "importance matrix (llama.cpp .dat or GGUF imatrix)")(
      "exact", po::bool_switch(&a.exact),
      "re-encode only where every value stays the same number (to f32; to f16/bf16 when "
      "they fit; q4_0 -> q4_1, q5_0 -> q5_1), proven by reading the output back")(
      "base", po::value(&a.base_path),
      "packed-affine import: start from this GGUF (its metadata and tensors; the import's "
      "tensors replace those of the same name)")(
      "append-unmatched", po::bool_switch(&a.append_unmatched),
      "with --base: append import tensors the base has no tensor for (else an error)")(
      "config", po::value(&a.config_path),
      "Hugging Face checkpoint import: its config.json (default: the one beside IN)")(
      "dry-run", po::bool_switch(&a.ex.dry_run), "show the plan, write nothing")(
      "json", po::bool_switch(&a.json), "print the report as one JSON document")(
      "quiet,q", po::bool_switch(&a.quiet),
      "print nothing on success (no report, notes or progress; errors still go to stderr)")(
      "force", po::bool_switch(&a.ex.write.force), "replace an existing output")(
      "no-verify", po::bool_switch(&a.no_verify),
      "skip reading the output back (with --exact or for an import: also the proof of "
      "exactness)")("split-max-size", po::value(&a.split_size),
                    "write a split set, shards at most this big (e.g. 4G)")(
      "split-max-tensors", count_value(&a.split_tensors, UINT64_MAX, "--split-max-tensors", 1),
      "write a split set, at most N tensors per shard")(
      "keep-split", po::bool_switch(&a.keep_split),
      "write the output in the input's shards (the same tensors in each), as llama-quantize's")(
      "align", count_value(&a.align, UINT64_MAX, "--align"),
      "write general.alignment = N (a power of two >= 32; 4096 lets CoW file systems share "
      "payload blocks); default: the input's (an import's: its --base's, else 32)");
  desc.add_options()("target-size", po::value(&a.target_size),
                     "plan the mix: the types (or --donor tensors) with the least measured "
                     "error whose file is at most SIZE (b, k|kib, m|mib, g|gib, t|tib: powers "
                     "of 1024, as llama-quantize's)")(
      "target-bpw", po::value(&a.target_bpw),
      "plan the mix for at most BPW bits per weight over all tensor elements")(
      "candidates", po::value(&a.candidates),
      "T1,T2,...: the types the plan may choose (default iq1_m ... q8_0)")(
      "donor", po::value(&a.donors)->composing(),
      "a GGUF whose tensors are candidates too, copied byte for byte when chosen (repeatable)")(
      "untie-gate-up", po::bool_switch(&a.untie),
      "let a layer's routed gate and up take different types (tied by default)")(
      "plan-out", po::value(&a.plan_out), "write the plan as a --tensor-type-file recipe");
  add_threads_option(desc, &a.threads, "encoding");
  a.selector.add_to(desc);
  hidden.add_options()("input", po::value(&a.inputs)->composing());
  pos.add("input", -1);
}

RequantRequest check_requant_args(RequantArgs& a, const po::variables_map& vm, int argc,
                                  char** argv) {
  RequantRequest r;
  if (a.inputs.empty()) usage_error("missing IN.gguf (or IN.safetensors), the model to re-encode");
  check_positional(a.inputs, 1, "the output goes after -o");
  if (a.quiet && a.json) usage_error("--quiet and --json exclude each other");
  a.threads = thread_count(a.threads);
  if (vm.count("type") && !(r.type = parse_type(a.type)))
    usage_error(unknown_type_message("--type", a.type));
  if (r.type && !can_encode(*r.type))
    usage_error(fmt::format("--type {}: no encoder for this type yet", traits(*r.type).name));
  WriteOptions& wo = a.ex.write;
  if (a.out.empty() && !a.ex.dry_run) usage_error("an output path is required (-o OUT.gguf)");
  wo.verify = !a.no_verify;
  if (!a.split_size.empty()) wo.split_max_size = parse_size(a.split_size, "split-max-size");
  wo.split_max_tensors = a.split_tensors;
  if (vm.count("align")) r.alignment = check_align_option(a.align);
  if (a.keep_split && (wo.split_max_size || wo.split_max_tensors))
    usage_error("--keep-split excludes --split-max-size and --split-max-tensors");

  const bool planning = vm.count("target-size") || vm.count("target-bpw");
  r.target = vm.count("target-size") ? "--target-size" : "--target-bpw";
  if (vm.count("target-size") && vm.count("target-bpw"))
    usage_error("--target-size and --target-bpw exclude each other");
  for (const char* o : {"candidates", "donor", "untie-gate-up", "plan-out"})
    if (!planning && vm.count(o) && !vm[o].defaulted())
      usage_error(fmt::format(
          "--{} belongs to a planned mix: give a budget, --target-size or --target-bpw", o));
  if (planning) {
    if (vm.count("type"))
      usage_error(fmt::format(
          "--type and {} exclude each other: the plan chooses the types (pin tensors with "
          "--tensor-type or --role-type)",
          r.target));
    for (const char* o : {"exact", "keep-split", "split-max-size", "split-max-tensors"})
      if (vm.count(o) && !vm[o].defaulted())
        usage_error(
            fmt::format("--{} and {} exclude each other (the plan is one file)", o, r.target));
    MixRequest& m = r.mix.emplace();
    if (vm.count("target-size")) m.target_size = a.target_size;
    if (vm.count("target-bpw")) m.target_bpw = a.target_bpw;
    if (vm.count("candidates")) m.candidates = a.candidates;
    m.donors = a.donors;
    m.untie_gate_up = a.untie;
    m.plan_out = a.plan_out;
    // The recipe would replace the model it describes (or the model the recipe).
    if (!a.plan_out.empty() && !a.out.empty() && same_output_file(a.plan_out, a.out))
      usage_error(fmt::format(
          "--plan-out and -o name the same file ('{}'): give the recipe a path of its own",
          escape_for_terminal(a.plan_out)));
  }
  if (a.exact && !a.imatrix_path.empty())
    usage_error("--imatrix has no use with --exact: exact paths quantize nothing");
  r.selector = a.selector.parse();
  if (vm.count("output-tensor-type")) a.rules.output_type = a.output_type;
  if (vm.count("token-embedding-type")) a.rules.embedding_type = a.embedding_type;
  a.rules.tensor_type_order = option_sequence(argc, argv, {"tensor-type", "tensor-type-file"});
  r.rules = parse_type_rules(a.rules);
  return r;
}

void check_import_args(const RequantArgs& a, const RequantRequest& r) {
  if (!a.imatrix_path.empty())
    usage_error("--imatrix: a packed-affine import re-encodes nothing, it moves values");
  if (a.selector.given())
    usage_error("--layers, --role and --match do not apply to a packed-affine import");
  if (a.keep_split)
    usage_error("--keep-split applies to a GGUF input (a safetensors file has no shards)");
  if (r.mix) usage_error(fmt::format("{} plans a GGUF input's types, not an import", r.target));
  if (!r.rules.empty() || !a.recipe_from.empty())
    usage_error(
        fmt::format("{} does not apply to a packed-affine import (its types "
                    "come from the import's bits: --type q4_1, q5_1 or f32)",
                    r.rules.empty()                ? std::string("--recipe-from")
                    : r.rules.front().file.empty() ? r.rules.front().option
                                                   : std::string("--tensor-type-file")));
  if (a.append_unmatched && a.base_path.empty()) usage_error("--append-unmatched needs --base");
}

void check_gguf_args(const RequantArgs& a, const RequantRequest& r) {
  if (!a.config_path.empty() || a.append_unmatched)
    usage_error(fmt::format("{} belongs to a packed-affine import (a safetensors input)",
                            a.config_path.empty() ? "--append-unmatched" : "--config"));
  if (!r.type && r.rules.empty() && a.recipe_from.empty() && !r.mix)
    usage_error(
        "--type is required (the type to re-encode to), or per-tensor types (--tensor-type, "
        "--tensor-type-file, --role-type, --output-tensor-type, --token-embedding-type, "
        "--recipe-from)");
  if (!a.base_path.empty())
    usage_error("--base belongs to a packed-affine import (a .safetensors input)");
}

}  // namespace gguf::cli

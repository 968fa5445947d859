// gguf-requant: re-encode the quantizable tensors of a GGUF with ggml codecs (one type for all,
// or per tensor as llama-quantize's --tensor-type), or import a packed-affine safetensors file
// into the ggml type that holds its values exactly.
#include <fmt/format.h>

#include <cstring>
#include <filesystem>
#include <functional>
#include <span>
#include <thread>

#include "cli/cli.h"
#include "gguf/base/error.h"
#include "gguf/base/escape.h"
#include "gguf/codecs/codecs.h"
#include "gguf/ops/affine.h"
#include "gguf/ops/exact.h"
#include "gguf/ops/hf_import.h"
#include "gguf/ops/planner.h"
#include "gguf/ops/recipe.h"
#include "gguf/ops/requant.h"

namespace po = boost::program_options;

int main(int argc, char** argv) {
  return gguf::cli::run_tool("gguf-requant", argc, argv, [&] {
    std::vector<std::string> inputs;
    std::string out, type, imatrix_path, base_path, output_type, embedding_type, config_path;
    std::vector<std::string> tensor_types, role_types, type_files;
    std::string recipe_from;
    bool json = false, force = false, no_verify = false, dry_run = false, exact = false;
    bool quiet = false, leave_output = false, keep_split = false, append_unmatched = false;
    unsigned threads = 0;
    std::string split_size, target_size, target_bpw, candidates, plan_out;
    std::vector<std::string> donors;
    bool untie = false;
    uint64_t split_tensors = 0;
    gguf::cli::SelectorArgs sel;
    po::options_description desc("Options");
    desc.add_options()("help,h", "show this help and exit")("version", "show the version and exit")(
        "output,o", po::value(&out), "output GGUF path (required unless --dry-run)")(
        "type", po::value(&type),
        "target type, any case: q4_K, q8_0, f16, bf16, ... (for a GGUF input: of every "
        "selected tensor no per-tensor type decides; required unless one is given)")(
        "tensor-type", po::value(&tensor_types)->composing(),
        "PATTERN=TYPE: tensors whose name contains a match of the regex PATTERN get TYPE, as "
        "llama-quantize's (repeatable: the first that matches decides; TYPE 'keep' copies)")(
        "tensor-type-file", po::value(&type_files)->composing(),
        "FILE of PATTERN=TYPE rules as llama-quantize reads it (whitespace-separated, patterns "
        "lowercased; '#' starts a comment): they join --tensor-type's where the option stands")(
        "recipe-from", po::value(&recipe_from),
        "give each tensor the type OTHER.gguf's recipe (gguf-inspect --recipe) gives the tensor "
        "of its name (after --tensor-type and --role-type, before --type)")(
        "role-type", po::value(&role_types)->composing(),
        "ROLE[,ROLE...]=TYPE: tensors of these roles get TYPE (repeatable, after --tensor-type; "
        "e.g. routed-down=q2_K)")("output-tensor-type", po::value(&output_type),
                                  "the type of output.weight (before --tensor-type; with tied "
                                  "embeddings: of the token embedding, after --tensor-type)")(
        "token-embedding-type", po::value(&embedding_type),
        "the type of token_embd.weight and per_layer_token_embd.weight (tried first)")(
        "leave-output-tensor", po::bool_switch(&leave_output),
        "copy output.weight as it is (as --output-tensor-type keep)")(
        "imatrix", po::value(&imatrix_path), "importance matrix (llama.cpp .dat or GGUF imatrix)")(
        "exact", po::bool_switch(&exact),
        "re-encode only where every value stays the same number (to f32; to f16/bf16 when "
        "they fit; q4_0 -> q4_1, q5_0 -> q5_1), proven by reading the output back")(
        "base", po::value(&base_path),
        "packed-affine import: start from this GGUF (its metadata and tensors; the import's "
        "tensors replace those of the same name)")(
        "append-unmatched", po::bool_switch(&append_unmatched),
        "with --base: append import tensors the base has no tensor for (else an error)")(
        "config", po::value(&config_path),
        "Hugging Face checkpoint import: its config.json (default: the one beside IN)")(
        "dry-run", po::bool_switch(&dry_run), "show the plan, write nothing")(
        "json", po::bool_switch(&json), "print the report as one JSON document")(
        "quiet,q", po::bool_switch(&quiet),
        "print nothing on success (no report, notes or progress; errors still go to stderr)")(
        "force", po::bool_switch(&force), "replace an existing output")(
        "no-verify", po::bool_switch(&no_verify),
        "skip reading the output back (with --exact or for an import: also the proof of "
        "exactness)")("split-max-size", po::value(&split_size),
                      "write a split set, shards at most this big (e.g. 4G)")(
        "split-max-tensors",
        gguf::cli::count_value(&split_tensors, UINT64_MAX, "--split-max-tensors", 1),
        "write a split set, at most N tensors per shard")(
        "keep-split", po::bool_switch(&keep_split),
        "write the output in the input's shards (the same tensors in each), as llama-quantize's");
    desc.add_options()("target-size", po::value(&target_size),
                       "plan the mix: the types (or --donor tensors) with the least measured "
                       "error whose file is at most SIZE (b, k|kib, m|mib, g|gib, t|tib: powers "
                       "of 1024, as llama-quantize's)")(
        "target-bpw", po::value(&target_bpw),
        "plan the mix for at most BPW bits per weight over all tensor elements")(
        "candidates", po::value(&candidates),
        "T1,T2,...: the types the plan may choose (default iq1_m ... q8_0)")(
        "donor", po::value(&donors)->composing(),
        "a GGUF whose tensors are candidates too, copied byte for byte when chosen (repeatable)")(
        "untie-gate-up", po::bool_switch(&untie),
        "let a layer's routed gate and up take different types (tied by default)")(
        "plan-out", po::value(&plan_out), "write the plan as a --tensor-type-file recipe");
    gguf::cli::add_threads_option(desc, &threads, "encoding");
    sel.add_to(desc);
    po::options_description hidden;
    hidden.add_options()("input", po::value(&inputs)->composing());
    po::positional_options_description pos;
    pos.add("input", -1);
    po::variables_map vm;
    if (gguf::cli::parse_command_line(
            argc, argv, "gguf-requant",
            "IN.gguf -o OUT.gguf [--type TYPE] [--tensor-type "
            "PATTERN=TYPE ...] [OPTIONS]   (a type or a rule)\n"
            "       gguf-requant IN.safetensors|INDEX.json|DIR -o OUT.gguf "
            "[--type q4_1|q5_1|f32] [--base BASE.gguf] [OPTIONS]",
            desc, hidden, pos, vm))
      return 0;
    if (inputs.empty())
      gguf::usage_error("missing IN.gguf (or IN.safetensors), the model to re-encode");
    gguf::cli::check_positional(inputs, 1, "the output goes after -o");
    if (quiet && json) gguf::usage_error("--quiet and --json exclude each other");
    const std::string& in = inputs.front();
    threads = gguf::thread_count(threads);
    std::optional<gguf::GgmlType> t;
    if (vm.count("type") && !(t = gguf::parse_type(type)))
      gguf::usage_error(gguf::unknown_type_message("--type", type));
    if (t && !gguf::can_encode(*t))
      gguf::usage_error(
          fmt::format("--type {}: no encoder for this type yet", gguf::traits(*t).name));
    if (out.empty() && !dry_run) gguf::usage_error("an output path is required (-o OUT.gguf)");
    gguf::WriteOptions wo;
    wo.force = force;
    wo.verify = !no_verify;
    if (!split_size.empty())
      wo.split_max_size = gguf::cli::parse_size(split_size, "split-max-size");
    wo.split_max_tensors = split_tensors;
    if (keep_split && (wo.split_max_size || wo.split_max_tensors))
      gguf::usage_error("--keep-split excludes --split-max-size and --split-max-tensors");

    // Writes the plan, or on --dry-run checks what the write would refuse. With `proving`,
    // prove(written model, output paths) runs on the written files before they reach their
    // paths, so a difference leaves nothing behind.
    const auto write =
        [&](const gguf::Plan& plan, uint64_t& bytes_after, const char* label, bool proving,
            const std::function<void(const gguf::Model&, std::span<const std::string>)>& prove) {
          std::optional<gguf::WriteResult> written;
          if (dry_run) {
            bytes_after = gguf::check_plan(plan, out, wo).bytes;
            return written;
          }
          if (proving)
            wo.before_commit = [&prove, names = gguf::check_plan(plan, out, wo).paths](
                                   const gguf::Model& m) { prove(m, names); };
          gguf::cli::Progress progress(quiet ? "" : label);
          if (!quiet) wo.progress = progress.callback();
          written = gguf::write_plan(plan, out, wo);
          return written;
        };

    // Usage errors first, whatever the inputs: exit 2 must not depend on whether a file opens.
    const bool planning = vm.count("target-size") || vm.count("target-bpw");
    const std::string target = vm.count("target-size") ? "--target-size" : "--target-bpw";
    if (vm.count("target-size") && vm.count("target-bpw"))
      gguf::usage_error("--target-size and --target-bpw exclude each other");
    for (const char* o : {"candidates", "donor", "untie-gate-up", "plan-out"})
      if (!planning && vm.count(o) && !vm[o].defaulted())
        gguf::usage_error(fmt::format(
            "--{} belongs to a planned mix: give a budget, --target-size or --target-bpw", o));
    if (planning) {
      if (vm.count("type"))
        gguf::usage_error(fmt::format(
            "--type and {} exclude each other: the plan chooses the types (pin tensors with "
            "--tensor-type or --role-type)",
            target));
      for (const char* o : {"exact", "keep-split", "split-max-size", "split-max-tensors"})
        if (vm.count(o) && !vm[o].defaulted())
          gguf::usage_error(
              fmt::format("--{} and {} exclude each other (the plan is one file)", o, target));
    }
    if (exact && !imatrix_path.empty())
      gguf::usage_error("--imatrix has no use with --exact: exact paths quantize nothing");
    const gguf::Selector selector = sel.parse();
    // Per-tensor types; the library tries them in llama-quantize's order (RequantOptions::rules),
    // each kind in the order given.
    std::vector<gguf::TypeRule> rules;
    if (leave_output && vm.count("output-tensor-type"))
      gguf::usage_error("--leave-output-tensor and --output-tensor-type exclude each other");
    if (leave_output) {
      rules.push_back(gguf::leave_output_tensor_rule());
    }
    if (vm.count("output-tensor-type"))
      rules.push_back(gguf::named_type_rule(gguf::TypeRule::Kind::kOutput, "--output-tensor-type",
                                            output_type));
    if (vm.count("token-embedding-type"))
      rules.push_back(gguf::named_type_rule(gguf::TypeRule::Kind::kTokenEmbedding,
                                            "--token-embedding-type", embedding_type));
    for (auto& r : gguf::tensor_type_rules(
             tensor_types, type_files,
             gguf::cli::option_sequence(argc, argv, {"tensor-type", "tensor-type-file"})))
      rules.push_back(std::move(r));
    for (const auto& v : role_types) rules.push_back(gguf::parse_role_type_rule(v));
    // A folder or an index JSON is a Hugging Face checkpoint; a file is what its first bytes
    // say, the suffix deciding only for one that looks like neither (so that a damaged
    // safetensors file gets the safetensors reader's message).
    std::error_code ec;
    bool import = std::filesystem::is_directory(in, ec) || in.ends_with(".json");
    if (!import) {
      const auto source = gguf::open_file_source(in);
      const bool gguf_magic =
          source->size() >= 4 && std::memcmp(source->bytes(0, 4).data(), "GGUF", 4) == 0;
      import =
          !gguf_magic && (gguf::SafetensorsFile::sniff(*source) || in.ends_with(".safetensors"));
    }
    if (import) {
      if (!imatrix_path.empty())
        gguf::usage_error("--imatrix: a packed-affine import re-encodes nothing, it moves values");
      if (sel.given())
        gguf::usage_error("--layers, --role and --match do not apply to a packed-affine import");
      if (keep_split)
        gguf::usage_error(
            "--keep-split applies to a GGUF input (a safetensors file has no shards)");
      if (planning)
        gguf::usage_error(fmt::format("{} plans a GGUF input's types, not an import", target));
      if (!rules.empty() || !recipe_from.empty())
        gguf::usage_error(
            fmt::format("{} does not apply to a packed-affine import (its types "
                        "come from the import's bits: --type q4_1, q5_1 or f32)",
                        rules.empty()                ? std::string("--recipe-from")
                        : rules.front().file.empty() ? rules.front().option
                                                     : std::string("--tensor-type-file")));
      if (append_unmatched && base_path.empty())
        gguf::usage_error("--append-unmatched needs --base");
      const gguf::HfCheckpoint checkpoint = gguf::HfCheckpoint::open(in, config_path);
      std::optional<gguf::Model> base;
      if (!base_path.empty()) base = gguf::Model::open(base_path);
      const gguf::ImportOptions io{t, base ? &*base : nullptr, threads, append_unmatched};
      // One file without config.json or index: GGUF names, as they are.
      const bool plain = checkpoint.shards().size() == 1 && !checkpoint.config() &&
                         checkpoint.index_path().empty();
      gguf::ImportResult result = plain ? gguf::import_safetensors(checkpoint.shards()[0], io)
                                        : gguf::import_checkpoint(checkpoint, io);
      if (!quiet)
        for (const auto& note : result.notes)
          gguf::cli::eprint("gguf-requant: note: {}\n", gguf::terminal_safe(note));
      wo.inputs = result.inputs;
      std::optional<gguf::ImportProof> proof;
      const auto written = write(result.plan, result.bytes_after, "import", !no_verify,
                                 [&](const auto& m, auto names) {
                                   proof = gguf::prove_import(result, m, threads, names);
                                 });
      const gguf::WriteResult* w = written ? &*written : nullptr;
      const gguf::ImportProof* p = proof ? &*proof : nullptr;
      if (!quiet)
        fmt::print("{}", json ? gguf::render_import_json(result, w, p)
                              : gguf::render_import_text(result, w, p));
      return 0;
    }
    if (!config_path.empty() || append_unmatched)
      gguf::usage_error(fmt::format("{} belongs to a packed-affine import (a safetensors input)",
                                    config_path.empty() ? "--append-unmatched" : "--config"));
    if (!t && rules.empty() && recipe_from.empty() && !planning)
      gguf::usage_error(
          "--type is required (the type to re-encode to), or per-tensor types (--tensor-type, "
          "--tensor-type-file, --role-type, --output-tensor-type, --token-embedding-type, "
          "--recipe-from)");
    if (!base_path.empty())
      gguf::usage_error("--base belongs to a packed-affine import (a .safetensors input)");

    const gguf::Model model = gguf::Model::open(in);
    if (!recipe_from.empty())
      for (auto& r : gguf::recipe_type_rules(gguf::extract_recipe(gguf::Model::open(recipe_from)),
                                             recipe_from))
        rules.push_back(std::move(r));
    if (keep_split && model.shards().size() > 1)
      wo.split_tensor_counts = gguf::shard_tensor_counts(model);
    std::optional<gguf::Imatrix> imatrix;
    if (!imatrix_path.empty()) imatrix = gguf::Imatrix::load(imatrix_path);
    if (planning) {
      gguf::PlannerOptions po;
      if (vm.count("target-size")) po.target_size = gguf::parse_target_size(target_size);
      if (vm.count("target-bpw")) po.target_bpw = gguf::parse_target_bpw(target_bpw);
      if (vm.count("candidates")) po.candidates = gguf::parse_candidates(candidates);
      if (!plan_out.empty()) gguf::check_output(plan_out, wo);
      std::vector<gguf::Model> donor_models;
      for (const auto& d : donors) donor_models.push_back(gguf::Model::open(d));
      for (const auto& d : donor_models) po.donors.push_back(&d);
      po.donor_paths = donors;
      po.imatrix = imatrix ? &*imatrix : nullptr;
      po.untie_gate_up = untie;
      po.selector = selector;
      po.rules = std::move(rules);
      po.threads = threads;
      std::optional<gguf::PlannerResult> r;
      {
        gguf::cli::Progress progress(quiet ? "" : "measure");
        if (!quiet) po.progress = progress.callback();
        r = gguf::plan_mix(model, po);
      }
      wo.inputs = r->requant.inputs;
      if (imatrix) wo.inputs.push_back(imatrix_path);
      if (!plan_out.empty()) {
        const std::string recipe = gguf::plan_recipe(*r);
        gguf::write_file(plan_out, {reinterpret_cast<const uint8_t*>(recipe.data()), recipe.size()},
                         wo);
      }
      if (!quiet)
        for (const auto& note : r->requant.notes)
          gguf::cli::eprint("gguf-requant: note: {}\n", gguf::terminal_safe(note));
      const auto written = write(r->requant.plan, r->file_bytes, "requant", false, {});
      const gguf::WriteResult* w = written ? &*written : nullptr;
      if (!quiet)
        fmt::print("{}", json ? gguf::render_plan_json(*r, w) : gguf::render_plan_text(*r, w));
      return 0;
    }
    gguf::RequantOptions opt{t,       selector, imatrix ? &*imatrix : nullptr,
                             threads, exact,    std::move(rules)};
    gguf::RequantResult result = gguf::requant(model, opt);
    if (!quiet)
      for (const auto& note : result.notes)
        gguf::cli::eprint("gguf-requant: note: {}\n", gguf::terminal_safe(note));
    wo.inputs = result.inputs;
    if (imatrix) wo.inputs.push_back(imatrix_path);
    std::optional<gguf::ExactProof> proof;
    const auto written = write(result.plan, result.bytes_after, "requant", exact && !no_verify,
                               [&](const auto& m, auto names) {
                                 proof = gguf::prove_exact(model, result, m, threads, names);
                               });
    const gguf::WriteResult* w = written ? &*written : nullptr;
    const gguf::ExactProof* p = proof ? &*proof : nullptr;
    if (!quiet)
      fmt::print("{}", json ? gguf::render_requant_json(result, w, p)
                            : gguf::render_requant_text(result, w, p));
    return 0;
  });
}

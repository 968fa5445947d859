// gguf-requant: re-encode the quantizable tensors of a GGUF with one ggml codec.
#include <fmt/format.h>

#include <thread>

#include "gguf/cli.h"
#include "gguf/error.h"
#include "gguf/requant.h"

namespace po = boost::program_options;

int main(int argc, char** argv) {
  return gguf::cli::run_tool("gguf-requant", [&] {
    std::string in, out, type, imatrix_path;
    bool json = false, force = false, no_verify = false, dry_run = false;
    unsigned threads = std::max(1u, std::thread::hardware_concurrency());
    std::string split_size;
    uint64_t split_tensors = 0;
    gguf::cli::SelectorArgs sel;
    po::options_description desc("Options");
    desc.add_options()("help,h", "show this help and exit")("version", "show the version and exit")(
        "output,o", po::value(&out), "output GGUF path (required unless --dry-run)")(
        "type", po::value(&type)->required(), "target type, any case: q4_K, q8_0, f16, bf16, ...")(
        "imatrix", po::value(&imatrix_path), "importance matrix (llama.cpp .dat or GGUF imatrix)")(
        "threads", gguf::cli::count_value(&threads, gguf::cli::kMaxThreads, "--threads"),
        "encoding threads (default: all cores)")("dry-run", po::bool_switch(&dry_run),
                                                 "show the plan, write nothing")(
        "json", po::bool_switch(&json), "print the report as one JSON document")(
        "force", po::bool_switch(&force), "replace an existing output")(
        "no-verify", po::bool_switch(&no_verify), "skip reading the output back")(
        "split-max-size", po::value(&split_size),
        "write a split set, shards at most this big (e.g. 4G)")(
        "split-max-tensors",
        gguf::cli::count_value(&split_tensors, UINT64_MAX, "--split-max-tensors", 1),
        "write a split set, at most N tensors per shard")("input", po::value(&in)->required(),
                                                          "input GGUF (or first shard)");
    sel.add_to(desc);
    po::positional_options_description pos;
    pos.add("input", 1);
    po::variables_map vm;
    if (gguf::cli::parse_command_line(argc, argv, "gguf-requant",
                                      "IN.gguf -o OUT.gguf --type TYPE [OPTIONS]", desc, pos, vm))
      return 0;
    const auto t = gguf::parse_type(type);
    if (!t) gguf::usage_error(fmt::format("--type: unknown type '{}'", type));
    if (out.empty() && !dry_run) gguf::usage_error("an output path is required (-o OUT.gguf)");
    if (threads == 0) gguf::usage_error("--threads must be at least 1");

    const gguf::Model model = gguf::Model::open(in);
    std::optional<gguf::Imatrix> imatrix;
    if (!imatrix_path.empty()) imatrix = gguf::Imatrix::load(imatrix_path);
    gguf::RequantOptions opt{*t, sel.parse(), imatrix ? &*imatrix : nullptr, threads};
    const gguf::RequantResult result = gguf::requant(model, opt);
    for (const auto& note : result.notes) fmt::print(stderr, "gguf-requant: note: {}\n", note);
    gguf::WriteOptions wo;
    wo.force = force;
    wo.verify = !no_verify;
    wo.inputs = result.inputs;
    if (imatrix) wo.inputs.push_back(imatrix_path);
    if (!split_size.empty())
      wo.split_max_size = gguf::cli::parse_size(split_size, "split-max-size");
    wo.split_max_tensors = split_tensors;
    std::optional<gguf::WriteResult> written;
    if (dry_run) {
      gguf::check_plan(result.plan, out, wo);  // what the write would refuse, refused now
    } else {
      gguf::cli::Progress progress("requant");
      wo.progress = progress.callback();
      written = gguf::write_plan(result.plan, out, wo);
    }
    const gguf::WriteResult* w = written ? &*written : nullptr;
    fmt::print("{}",
               json ? gguf::render_requant_json(result, w) : gguf::render_requant_text(result, w));
    return 0;
  });
}

// Writes a small DeepSeek-V4-style MoE GGUF (3-D routed-expert tensors, MLA-style attention,
// shared experts, router) with the library: the demo's model and a fixture generator. With
// --arch llama, a Mixtral-style MoE (also 3-D experts) that llama.cpp itself loads and runs
// (--dense: a plain dense llama); with --arch qwen3moe, a Qwen3-MoE it runs too.
#include <fmt/format.h>

#include <type_traits>

#include "cli/cli.h"
#include "gguf/base/error.h"
#include "gguf/codecs/codecs.h"
#include "gguf/ops/synth.h"
#include "gguf/write/writer.h"

namespace po = boost::program_options;

int main(int argc, char** argv) {
  return gguf::cli::run_tool("make_tiny_moe", argc, argv, [&] {
    std::string out, recipe = "f32", arch = "deepseek2";
    gguf::MoeSpec spec;
    gguf::LlamaMoeSpec llama;
    bool force = false, dense = false, structured = false;
    unsigned threads = 1;
    po::options_description desc("Options");
    desc.add_options()("help,h", "show this help")("version", "show the version")(
        "output,o", po::value(&out)->required(), "output GGUF path")(
        "arch", po::value(&arch),
        "deepseek2 (DeepSeek-V4-style, the default), llama (Mixtral-style) or qwen3moe (these "
        "two llama.cpp loads and runs)")("dense", po::bool_switch(&dense),
                                         "--arch llama: a dense FFN instead of routed experts")(
        "recipe", po::value(&recipe),
        "ds4 (2-bit routed experts; deepseek2 only), or one type for all "
        "quantizable tensors (f32, f16, q8_0, q4_K, ...)")("layers", po::value<int>(), "layers")(
        "experts", po::value<int>(), "routed experts per layer")(
        "embd", po::value<int>(), "embedding width (multiple of 256)")(
        "ff", po::value<int>(), "expert FFN width (multiple of 256)")(
        "vocab", po::value<int>(), "vocabulary size (llama: at least 259)")(
        "seed", po::value<uint64_t>(), "weight seed")(
        "structured", po::bool_switch(&structured),
        "trained-looking weights (outlier columns, uneven row, column and expert scales) "
        "instead of i.i.d. gaussians")(
        "threads", gguf::cli::count_value(&threads, gguf::cli::kMaxThreads, "--threads"),
        "encoding threads (default 1; 0: all cores)")("force", po::bool_switch(&force),
                                                      "replace an existing output");
    po::variables_map vm;
    if (gguf::cli::parse_command_line(argc, argv, "make_tiny_moe", "-o OUT.gguf [OPTIONS]", desc,
                                      {}, vm))
      return 0;
    spec.structured = llama.structured = structured;
    auto take = [&](const char* name, auto& a, auto& b) {
      if (!vm.count(name)) return;
      a = b = vm[name].as<std::remove_reference_t<decltype(a)>>();
      if constexpr (std::is_same_v<std::remove_reference_t<decltype(a)>, int>)
        if (a < 1) gguf::usage_error(fmt::format("--{} must be at least 1, got {}", name, a));
    };
    take("layers", spec.n_layers, llama.n_layers);
    take("experts", spec.n_experts, llama.n_experts);
    take("embd", spec.n_embd, llama.n_embd);
    take("ff", spec.n_ff_exp, llama.n_ff);
    take("vocab", spec.vocab, llama.vocab);
    take("seed", spec.seed, llama.seed);
    spec.threads = llama.threads = gguf::thread_count(threads);
    gguf::Plan plan;
    if (dense && arch != "llama") gguf::usage_error("--dense is for --arch llama");
    if (arch == "llama" || arch == "qwen3moe") {
      if (recipe == "ds4") gguf::usage_error("--recipe ds4 is for --arch deepseek2");
      const auto t = gguf::parse_type(recipe);
      if (!t) gguf::usage_error(gguf::unknown_type_message("--recipe", recipe, false));
      if (llama.vocab < 259)
        gguf::usage_error(
            "--vocab: a llama model needs at least 259 tokens (<unk>, <s>, </s>, "
            "the 256 bytes)");
      if (llama.n_experts < llama.n_expert_used) llama.n_expert_used = llama.n_experts;
      llama.weights = *t;
      llama.arch = arch;
      llama.dense = dense;
      if (arch == "qwen3moe") llama.name = "tiny-qwen3moe";
      if (dense) llama.name = "tiny-llama";
      plan = gguf::synth_llama_moe_plan(llama);
    } else if (arch == "deepseek2") {
      if (recipe == "ds4") {
        spec = gguf::ds4_recipe(spec);
      } else {
        const auto t = gguf::parse_type(recipe);
        if (!t) gguf::usage_error(gguf::unknown_type_message("--recipe", recipe, false));
        spec = gguf::uniform_types(spec, *t);
      }
      plan = gguf::synth_moe_plan(spec);
    } else {
      gguf::usage_error(
          fmt::format("--arch: unknown architecture '{}' (deepseek2, llama or qwen3moe)", arch));
    }
    gguf::WriteOptions wo;
    wo.force = force;
    gguf::cli::Progress progress("writing");
    wo.progress = progress.callback();
    const auto result = gguf::write_plan(plan, out, wo);
    fmt::print("wrote {} ({} tensors, {})\n", out, result.tensors.size(),
               gguf::human_bytes(result.bytes));
    return 0;
  });
}

// Writes a small DeepSeek-V4-style MoE GGUF (3-D routed-expert tensors, MLA-style attention,
// shared experts, router) with the library: the demo's model and a fixture generator.
#include <fmt/format.h>

#include "gguf/cli.h"
#include "gguf/codecs.h"
#include "gguf/error.h"
#include "gguf/synth.h"
#include "gguf/writer.h"

namespace po = boost::program_options;

int main(int argc, char** argv) {
  return gguf::cli::run_tool("make_tiny_moe", argc, argv, [&] {
    std::string out, recipe = "f32";
    gguf::MoeSpec spec;
    bool force = false;
    po::options_description desc("Options");
    desc.add_options()("help,h", "show this help")("version", "show the version")(
        "output,o", po::value(&out)->required(), "output GGUF path")(
        "recipe", po::value(&recipe),
        "ds4 (2-bit routed experts), or one type for all "
        "quantizable tensors (f32, f16, q8_0, q4_K, ...)")(
        "layers", po::value(&spec.n_layers), "layers")("experts", po::value(&spec.n_experts),
                                                       "routed experts per layer")(
        "embd", po::value(&spec.n_embd), "embedding width (multiple of 256)")(
        "ff", po::value(&spec.n_ff_exp), "expert FFN width (multiple of 256)")(
        "vocab", po::value(&spec.vocab), "vocabulary size")("seed", po::value(&spec.seed),
                                                            "weight seed")(
        "threads", po::value(&spec.threads), "encoding threads")("force", po::bool_switch(&force),
                                                                 "replace an existing output");
    po::variables_map vm;
    if (gguf::cli::parse_command_line(argc, argv, "make_tiny_moe", "-o OUT.gguf [OPTIONS]", desc,
                                      {}, vm))
      return 0;
    if (recipe == "ds4") {
      spec = gguf::ds4_recipe(spec);
    } else {
      const auto t = gguf::parse_type(recipe);
      if (!t) gguf::usage_error(fmt::format("--recipe: unknown type '{}'", recipe));
      spec = gguf::uniform_types(spec, *t);
    }
    gguf::WriteOptions wo;
    wo.force = force;
    gguf::cli::Progress progress("writing");
    wo.progress = progress.callback();
    const auto result = gguf::write_plan(gguf::synth_moe_plan(spec), out, wo);
    fmt::print("wrote {} ({} tensors, {})\n", out, result.tensors.size(),
               gguf::cli::human_bytes(result.bytes));
    return 0;
  });
}

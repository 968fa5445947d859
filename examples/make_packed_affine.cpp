// Writes a packed-affine safetensors file (DESIGN.md's lossless import format) from tensors of
// a GGUF, quantized the way an in-house low-bit format would be: per group of columns an f16
// min and scale, codes of 1-8 bits. The demo's stand-in for "our own format".
#include <fmt/format.h>

#include "cli/cli.h"
#include "gguf/base/error.h"
#include "gguf/codecs/codecs.h"
#include "gguf/format/model.h"
#include "gguf/ops/affine.h"
#include "gguf/write/writer.h"

namespace po = boost::program_options;

int main(int argc, char** argv) {
  return gguf::cli::run_tool("make_packed_affine", argc, argv, [&] {
    std::string in, out;
    bool force = false;
    unsigned bits = 4;
    uint64_t group = 32;
    gguf::cli::SelectorArgs sel;
    po::options_description desc("Options");
    desc.add_options()("help,h", "show this help")("version", "show the version")(
        "output,o", po::value(&out)->required(), "output .safetensors path")(
        "force", po::bool_switch(&force), "replace an existing output")(
        "bits", gguf::cli::count_value(&bits, 8, "--bits", 1), "code width, 1-8 (default 4)")(
        "group", gguf::cli::count_value(&group, uint64_t{1} << 20, "--group", 1),
        "columns per scale and min (default 32)")("input", po::value(&in)->required(),
                                                  "GGUF whose tensors to quantize");
    sel.add_to(desc);
    po::positional_options_description pos;
    pos.add("input", 1);
    po::variables_map vm;
    if (gguf::cli::parse_command_line(argc, argv, "make_packed_affine",
                                      "MODEL.gguf -o OUT.safetensors [--bits N] [--group N] "
                                      "[--force] [selectors]",
                                      desc, pos, vm))
      return 0;
    const gguf::Model model = gguf::Model::open(in);
    gguf::WriteOptions wo;
    wo.force = force;
    wo.inputs = model.paths();
    // Refused before the work, as the tools refuse: an input, or an existing file without --force.
    gguf::check_output(out, wo);
    std::vector<gguf::AffineSource> tensors;
    for (size_t i : gguf::select_in(model, sel.parse())) {
      const gguf::TensorRef& t = model.tensors()[i];
      if (t.info->shape.size() < 2) continue;  // weights only
      gguf::AffineSource s{t.name(), t.info->shape, std::vector<float>(t.info->n_elements)};
      gguf::dequantize(static_cast<gguf::GgmlType>(t.info->type_id), t.data(), s.values);
      tensors.push_back(std::move(s));
    }
    if (tensors.empty()) gguf::usage_error("no weight matrix selected");
    const auto bytes = gguf::pack_affine_safetensors(tensors, bits, group);
    gguf::write_file(out, bytes, wo);
    fmt::print("wrote {} ({} packed tensors, {}-bit codes, groups of {}, {})\n", out,
               tensors.size(), bits, group, gguf::human_bytes(bytes.size()));
    return 0;
  });
}

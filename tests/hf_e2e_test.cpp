// End to end with real llama.cpp: a packed checkpoint held as a Hugging Face user holds it (HF
// names, q/k in HF's row order, one tensor per expert, two shards with an index, config.json),
// imported onto llama.cpp's conversion of the same model, is byte for byte the import of the
// same packed values laid out under GGUF names, and llama.cpp computes the same logits with it.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <iterator>

#include "cli_run.h"
#include "gguf/format/model.h"
#include "gguf/ops/synth.h"
#include "gguf/write/writer.h"
#include "hf_fixture.h"
#include "llama_ref.h"

namespace gguf {
namespace {

using testing::LlamaRef;
using testing::run_cli;
using testing::TempDir;

std::vector<char> slurp(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), {}};
}

void check_family(const LlamaMoeSpec& spec) {
  TempDir dir;
  write_plan(synth_llama_moe_plan(spec), dir.file("f32.gguf"), {});
  const Model base = Model::open(dir.file("f32.gguf"));
  std::filesystem::create_directory(dir.file("hf"));
  testing::write_both_layouts(base, dir.file("named.safetensors"), dir.file("hf"));
  const auto named = run_cli("gguf-requant", {dir.file("named.safetensors"), "--base",
                                              dir.file("f32.gguf"), "-o", dir.file("named.gguf")});
  ASSERT_EQ(named.code, 0) << named.err;
  const auto hf = run_cli(
      "gguf-requant", {dir.file("hf"), "--base", dir.file("f32.gguf"), "-o", dir.file("hf.gguf")});
  ASSERT_EQ(hf.code, 0) << hf.err;
  // The same tensors, payloads and metadata: the same file.
  EXPECT_EQ(run_cli("gguf-diff", {dir.file("named.gguf"), dir.file("hf.gguf")}).code, 0);
  EXPECT_TRUE(slurp(dir.file("named.gguf")) == slurp(dir.file("hf.gguf")));
  if (!LlamaRef::get().available()) return;
  const std::vector<int> prompt = {1, 72, 108, 300, 411, 108, 500, 7};
  const auto a = LlamaRef::get().run(dir.file("named.gguf"), prompt);
  const auto b = LlamaRef::get().run(dir.file("hf.gguf"), prompt);
  ASSERT_TRUE(b.loaded) << b.log;
  ASSERT_TRUE(a.loaded) << a.log;
  EXPECT_EQ(a.logits, b.logits);
  EXPECT_EQ(b.logits.size(), static_cast<size_t>(spec.vocab));
  // And the import changed the model (it was quantized), so the comparison means something.
  EXPECT_NE(LlamaRef::get().run(dir.file("f32.gguf"), prompt).logits, b.logits);
}

TEST(HfE2E, LlamaDenseCheckpointImportsExactly) {
  GGUF_REQUIRE_LLAMA();
  LlamaMoeSpec spec;
  spec.dense = true;
  spec.name = "tiny-llama";
  check_family(spec);
}

TEST(HfE2E, MixtralCheckpointImportsExactly) {
  GGUF_REQUIRE_LLAMA();
  check_family(LlamaMoeSpec());
}

TEST(HfE2E, Qwen3MoeCheckpointImportsExactly) {
  GGUF_REQUIRE_LLAMA();
  LlamaMoeSpec spec;
  spec.arch = "qwen3moe";
  spec.head_dim = 128;  // Qwen3's own head size, not n_embd / n_head (64)
  spec.name = "tiny-qwen3moe";
  check_family(spec);
}

// The example generator makes the dense llama and the Qwen3-MoE models, and llama.cpp runs them.
TEST(HfE2E, ExampleGeneratorMakesDenseAndQwen3Moe) {
  GGUF_REQUIRE_LLAMA();
  TempDir dir;
  for (const std::vector<std::string>& args :
       {std::vector<std::string>{"--arch", "llama", "--dense"},
        std::vector<std::string>{"--arch", "qwen3moe"}}) {
    auto a = args;
    a.insert(a.end(), {"--recipe", "f16", "-o", dir.file("m.gguf"), "--force"});
    const auto gen = run_cli("../examples/make_tiny_moe", a);
    ASSERT_EQ(gen.code, 0) << gen.err;
    const auto r = LlamaRef::get().run(dir.file("m.gguf"), {1, 72, 108});
    EXPECT_TRUE(r.loaded) << r.log;
    EXPECT_EQ(r.logits.size(), 512u);
  }
}

}  // namespace
}  // namespace gguf

// --align N on gguf-requant and the imports it runs: general.alignment = N, every tensor on an
// N-byte boundary, files llama.cpp and ggml's reader load computing what the unaligned file
// computes; and the refusals of an alignment that is not a power of two from 32 (golden).
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <filesystem>

#include "cli_run.h"
#include "ggml_ref.h"
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

const std::vector<int> kPrompt = {1, 72, 108, 300, 411, 108, 500, 7};

// Every tensor of path starts on an `align` boundary, and the key says so.
void expect_aligned(const std::string& path, uint32_t align) {
  const Model m = Model::open(path);
  EXPECT_EQ(m.metadata().get_uint("general.alignment"), align) << path;
  EXPECT_EQ(m.first().data_offset() % align, 0u) << path;
  for (const auto& t : m.tensors()) EXPECT_EQ(t.data_start() % align, 0u) << t.name();
  if (testing::GgmlRef::get().available()) {
    EXPECT_TRUE(testing::GgmlRef::get().gguf_accepts(path, true)) << path;
  }
}

// Both files load in llama.cpp and compute the same logits (the same tensors, laid out apart).
void expect_same_logits(const std::string& a, const std::string& b) {
  if (!LlamaRef::get().available()) return;
  const auto ra = LlamaRef::get().run(a, kPrompt), rb = LlamaRef::get().run(b, kPrompt);
  ASSERT_TRUE(ra.loaded) << ra.log;
  ASSERT_TRUE(rb.loaded) << rb.log;
  EXPECT_EQ(ra.logits, rb.logits);
}

TEST(align_cli, requant_align_4096_loads_in_llama_cpp) {
  GGUF_REQUIRE_LLAMA();
  TempDir dir;
  write_plan(synth_llama_moe_plan({}), dir.file("f32.gguf"), {});
  for (const auto& extra : std::vector<std::vector<std::string>>{{}, {"--align", "4096"}}) {
    std::vector<std::string> args = {dir.file("f32.gguf"),
                                     "--type",
                                     "q8_0",
                                     "-q",
                                     "-o",
                                     dir.file(extra.empty() ? "q8.gguf" : "q8_4k.gguf")};
    args.insert(args.end(), extra.begin(), extra.end());
    const auto r = run_cli("gguf-requant", args);
    ASSERT_EQ(r.code, 0) << r.err;
  }
  expect_aligned(dir.file("q8_4k.gguf"), 4096);
  EXPECT_EQ(Model::open(dir.file("q8.gguf")).first().alignment(), 32u);
  expect_same_logits(dir.file("q8.gguf"), dir.file("q8_4k.gguf"));
  // --dry-run counts the padding: the size it reports is the file's.
  const auto dry = run_cli("gguf-requant", {dir.file("f32.gguf"), "--type", "q8_0", "--align",
                                            "4096", "--dry-run", "--json"});
  ASSERT_EQ(dry.code, 0) << dry.err;
  EXPECT_EQ(nlohmann::json::parse(dry.out)["bytes_after"],
            std::filesystem::file_size(dir.file("q8_4k.gguf")));
}

TEST(align_cli, imports_align_4096_load_in_llama_cpp) {
  GGUF_REQUIRE_LLAMA();
  TempDir dir;
  write_plan(synth_llama_moe_plan({}), dir.file("f32.gguf"), {});
  std::filesystem::create_directory(dir.file("hf"));
  testing::write_both_layouts(Model::open(dir.file("f32.gguf")), dir.file("named.safetensors"),
                              dir.file("hf"));
  for (const char* in : {"named.safetensors", "hf"}) {
    SCOPED_TRACE(in);
    const std::string plain = dir.file(fmt::format("{}.gguf", in)),
                      aligned = dir.file(fmt::format("{}_4k.gguf", in));
    for (const auto& [out, extra] :
         {std::pair{plain, std::vector<std::string>{}},
          std::pair{aligned, std::vector<std::string>{"--align", "4096"}}}) {
      std::vector<std::string> args = {dir.file(in), "--base", dir.file("f32.gguf"),
                                       "-q",         "-o",     out};
      args.insert(args.end(), extra.begin(), extra.end());
      const auto r = run_cli("gguf-requant", args);
      ASSERT_EQ(r.code, 0) << r.err;
    }
    expect_aligned(aligned, 4096);
    expect_same_logits(plain, aligned);
  }
}

TEST(align_cli, requant_and_import_refuse_bad_alignments) {
  TempDir dir;
  write_plan(synth_llama_moe_plan({}), dir.file("f32.gguf"), {});
  for (const std::string& in : {dir.file("f32.gguf"), dir.file("absent.safetensors")})
    for (const char* bad : {"48", "16", "0", "4294967296"}) {
      const auto r =
          run_cli("gguf-requant", {in, "--type", "q8_0", "--align", bad, "-o", dir.file("x.gguf")});
      EXPECT_EQ(r.code, 2) << in << " " << bad;
      EXPECT_EQ(r.out, "");
      EXPECT_EQ(r.err, fmt::format("gguf-requant: error: --align {}: the alignment must be a "
                                   "power of two from 32 to 2147483648 (e.g. 4096)\n"
                                   "Try 'gguf-requant --help' for more information.\n",
                                   bad));
    }
  const auto r = run_cli("gguf-requant", {dir.file("f32.gguf"), "--type", "q8_0", "--align", "x",
                                          "-o", dir.file("x.gguf")});
  EXPECT_EQ(r.code, 2);
  EXPECT_EQ(r.err,
            "gguf-requant: error: the argument ('x') for option '--align' is invalid\n"
            "Try 'gguf-requant --help' for more information.\n");
  EXPECT_FALSE(std::filesystem::exists(dir.file("x.gguf")));
}

}  // namespace
}  // namespace gguf

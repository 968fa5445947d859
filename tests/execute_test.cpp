// execute_plan (write / dry run / proof before the commit) and open_input (GGUF or safetensors,
// by the path or the first bytes): the library steps every writing tool's main runs.
#include "gguf/write/execute.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "cli_run.h"
#include "gguf/base/error.h"
#include "gguf/inputs/input.h"
#include "gguf/ops/synth.h"

namespace gguf {
namespace {

using testing::TempDir;

Plan small_plan() {
  MoeSpec s;
  s.n_layers = 2;
  s.n_experts = 2;
  s.vocab = 260;
  return synth_moe_plan(s);
}

void write_bytes(const std::string& path, const std::string& bytes) {
  std::ofstream(path, std::ios::binary) << bytes;
}

// A safetensors file with one f32 tensor of one element.
std::string safetensors_bytes() {
  const std::string header = R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}})";
  std::string out(8, '\0');
  for (int i = 0; i < 8; ++i) out[i] = static_cast<char>((header.size() >> (8 * i)) & 0xff);
  return out + header + std::string(4, '\0');
}

TEST(execute_plan, dry_run_writes_nothing_and_gives_the_size_a_write_has) {
  TempDir dir;
  const Plan plan = small_plan();
  Execution ex;
  ex.dry_run = true;
  const Executed dry = execute_plan(plan, dir.file("out.gguf"), ex);
  EXPECT_FALSE(dry.written);
  EXPECT_TRUE(dir.entries().empty());
  ex.dry_run = false;
  const Executed done = execute_plan(plan, dir.file("out.gguf"), ex);
  ASSERT_TRUE(done.written);
  EXPECT_EQ(done.bytes, done.written->bytes);
  EXPECT_EQ(dry.bytes, done.bytes);
  EXPECT_EQ(std::filesystem::file_size(dir.file("out.gguf")), done.bytes);
  // The dry run refuses what the write would: the output exists now.
  ex.dry_run = true;
  try {
    execute_plan(plan, dir.file("out.gguf"), ex);
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("exists"), std::string::npos) << e.what();
  }
}

TEST(execute_plan, a_failed_proof_leaves_nothing_behind) {
  TempDir dir;
  const Plan plan = small_plan();
  Execution ex;
  std::vector<std::string> proved_paths;
  size_t tensors = 0;
  ex.prove = [&](const Model& written, std::span<const std::string> paths) {
    proved_paths.assign(paths.begin(), paths.end());
    tensors = written.tensors().size();
  };
  const Executed done = execute_plan(plan, dir.file("ok.gguf"), ex);
  EXPECT_EQ(proved_paths, std::vector<std::string>{dir.file("ok.gguf")});
  EXPECT_EQ(tensors, plan.tensors.size());
  ASSERT_TRUE(done.written);
  ex.prove = [](const Model&, std::span<const std::string>) { throw Error("the proof failed"); };
  EXPECT_THROW(execute_plan(plan, dir.file("bad.gguf"), ex), Error);
  EXPECT_EQ(dir.entries(), std::vector<std::string>{"ok.gguf"});
}

TEST(open_input, tells_gguf_from_safetensors_by_the_bytes) {
  TempDir dir;
  Execution ex;
  execute_plan(small_plan(), dir.file("m.bin"), ex);
  EXPECT_EQ(open_input(dir.file("m.bin")).format, InputFormat::kGguf);
  write_bytes(dir.file("w.bin"), safetensors_bytes());
  const Input st = open_input(dir.file("w.bin"));
  EXPECT_EQ(st.format, InputFormat::kSafetensors);
  ASSERT_TRUE(st.source);
  // Neither: the name decides, so that each reader gives its own message.
  write_bytes(dir.file("junk.safetensors"), "junk");
  write_bytes(dir.file("junk.gguf"), "junk");
  EXPECT_EQ(open_input(dir.file("junk.safetensors")).format, InputFormat::kSafetensors);
  EXPECT_EQ(open_input(dir.file("junk.gguf")).format, InputFormat::kGguf);
  // A GGUF named .safetensors is a GGUF.
  std::filesystem::copy_file(dir.file("m.bin"), dir.file("g.safetensors"));
  EXPECT_EQ(open_input(dir.file("g.safetensors")).format, InputFormat::kGguf);
  // A folder or an index is a Hugging Face checkpoint, opened later.
  const Input folder = open_input(dir.path());
  EXPECT_EQ(folder.format, InputFormat::kSafetensors);
  EXPECT_FALSE(folder.source);
  EXPECT_EQ(open_input(dir.file("model.safetensors.index.json")).format, InputFormat::kSafetensors);
  EXPECT_THROW(open_input(dir.file("missing.gguf")), Error);
}

}  // namespace
}  // namespace gguf
